"""Device time for short calls: each config's calls captured as a CUDA graph and timed by replaying it.

A call shorter than the host needs to launch it is timed, launched eagerly, at the host's pace: every config of a
short GEMM reads about the same launch time, and the choice follows the host's noise. A served model replays such
calls from CUDA graphs, where launch time disappears and only the device's time counts. So when the fastest config
of a steady tuning takes under :data:`DEVICE_TIME_BELOW_MS` per call (the group's probe, agreed), every config of
that tuning is timed on the device instead: its calls are captured once as a graph of ``calls`` launches
(:data:`GRAPH_MS` of work, at most :data:`GRAPH_CALLS`), and a steady sample replays the graph back to back
(settling replays, then a timed span of replays, the same rules as eager samples) and reports the time per call.

Only for groups of one rank on CUDA: a collective function's calls cannot be captured safely (its ranks would
have to capture and replay together), and keep the eager steady timing. A function that cannot be captured (it
synchronizes, allocates from the host, reads a tensor's value) raises during the capture: the tuning then times
every config eagerly, as before, and says so. A config that cannot be captured where others can fails alone
(:meth:`~triton_dist_tune.measure.sampling.Sampling._capture`). Which way a key was timed is in its decision
(``clock``), its log and its summary, and in each journal record: a resumed tuning keeps the clock its journaled
times were taken with, whatever its own first race reads (:func:`journaled_clock`); where it cannot (no capture
works now), a search measures those configs again rather than rank both kinds of time together.

A capture should cost little more than its calls cost to launch. ``torch.cuda.graph`` synchronizes and empties the
caching allocator before every capture (``empty_cache``: its freed blocks go back to the driver, and the next
config's runs allocate them again), and torch asks for a warm-up call before each capture: the README's MoE campaign
(about 2,400 captures) spent 5.8-9.1 s of the rank's time capturing, 1.0 s of it in ``empty_cache`` and 2.9 s in the
function's calls (``benchmarks/results/session_h200_16``). So the graphs are captured with ``capture_begin`` /
``capture_end`` on one capture stream per device, made once, into one memory pool that the graphs of one race
share (they replay one at a time, on one stream, and nothing reads their outputs), and only a tuning's first
capture runs the call on that stream before capturing (every config captured has run its warm-up; a function that
then fails a capture is timed eagerly, as any that cannot be captured; a config that fails its capture once
another's worked fails alone, and the captures after it take a new pool). A pool whose graphs are all gone
cannot take a capture again (torch asserts), so each race starts a pool of its own; the allocator is emptied once,
when the tuning ends (:meth:`Graphs.close`), so a tuning leaves no more memory reserved than it did before.

**Placements.** Some configs' time depends on where the call's own outputs lie in memory (see "Placements" in
:mod:`~triton_dist_tune.measure.race`). Before a race's settled block, each leader's calls are captured
:data:`PLACEMENTS` - 1 more times (:meth:`Graphs.place`; at most as many as the block replays: none before the
sift's one round, none past the rounds a time budget leaves the block), each into a memory pool of its own, whose
new memory puts the outputs the function allocates elsewhere; the block's samples replay them in turn. Arguments
the caller passed stay where they are. The placements stop at a capture that fails, or before they would hold more than
:data:`PLACEMENT_MEMORY_SHARE` of the device's memory; a race whose leaders could not all be placed then times them
all at their first placement (:meth:`~triton_dist_tune.measure.sampling.Sampling._place_leaders`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import describe_error

log = logging.getLogger("triton_dist_tune")

#: device time is used when the fastest config's call takes under this (ms). A Triton launch from Python takes
#: 10-60 us with the tuner's and the caller's own host code; where the device time of the configs in contention is
#: close to that, eager spans read the host's pace and flatten the landscape. Measured on an H200
#: (``benchmarks/results/validate_h200``, issue 33): at 0.1 ms, a 1024 x 4096 x 4096 GEMM (device 46-54 us per call)
#: was timed eagerly, its 14 leading configs all read 53-56 us, and the tuner chose configs 1.05-1.13x the device
#: time of the best it had screened. Up to 1 ms the host's share of a call is still a few percent: the gaps the
#: race must resolve. A layer run among other layers hides its launch behind the device's queue, so device time is
#: what it costs there.
DEVICE_TIME_BELOW_MS = 1.0
#: the work one captured graph holds (ms of eager calls), and its calls at most
GRAPH_MS, GRAPH_CALLS = 0.5, 64

#: the output placements of each settled leader of a race timed on the device (see "Placements" above): its 8
#: settled samples then sample 4 placements twice each
PLACEMENTS = 4

#: the placements of a tuning hold at most this share of the device's memory (their pools keep what the function
#: allocates: a function with a large scratch buffer would otherwise hold it 18 times more in a race of 6 leaders)
PLACEMENT_MEMORY_SHARE = 0.05

#: how a tuning's samples were timed
EAGER, GRAPH = "eager", "graph"


@dataclass
class Graphs:
    """The captured graph of each config of one tuning (see the module docstring)."""

    #: calls per graph
    calls: int
    graphs: dict[int, Any] = field(default_factory=dict)
    #: the first capture's error, when capturing failed (the tuning then times eagerly)
    error: str | None = None
    #: each config's device time per replay (ms), timed once after its first capture; kept when the graphs are
    #: released, so that every sample of a config is sized alike. This rank's own reading sizes its samples, which
    #: no other rank needs to match: graphs time tunings of one rank only (:func:`device_time_applies`)
    device_ms: dict[int, float] = field(default_factory=dict)
    #: the graphs of each config at its other output placements (:meth:`place`), each with its memory pool
    placed: dict[int, list[Any]] = field(default_factory=dict)
    #: False once a placement failed to capture or reached the memory bound: the tuning places no more
    placing: bool = True
    #: the device memory the placements of this tuning's races took (bytes reserved by their captures), and the
    #: most one took: the next is expected to take as much
    placed_bytes: int = 0
    _place_bytes: int = 0
    #: the memory pool the graphs of this race share (``torch.cuda.graph_pool_handle``), made at its first capture
    _pool: Any = None
    #: whether any graph was captured (the allocator is emptied when the tuning ends)
    _captured: bool = False
    #: whether a capture of this tuning has worked: the function can be captured, and a config whose capture
    #: fails then cannot be, itself (:meth:`~triton_dist_tune.measure.sampling.Sampling._capture`)
    works: bool = False
    #: whether the next capture runs the call once on the capture stream first: only until a capture of this
    #: tuning succeeded. Every config is warm on the current stream when it is captured (its warm-up ran), and a
    #: first capture readies the capture stream itself (what torch's warm-up before a capture is for)
    warms_next: bool = True

    def capture(self, index: int, call: Callable[[], Any]) -> bool:
        """Capture ``calls`` calls of config ``index`` (already warm: compiled and run); False (with ``error``) when
        the function cannot be captured."""
        import torch

        try:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            self._captured = True
            graph = _captured(call, self.calls, self._pool, self.warms_next)
        except Exception as exc:  # a function (or config) that cannot be captured (Sampling._capture)
            self.error = describe_error(exc)
            self._pool = None  # the race's graphs keep theirs; a capture after a failed one takes a new one
            _after_failed_capture()
            return False
        self.graphs[index] = graph
        self.warms_next = False
        self.works = True
        if index not in self.device_ms and (ms := _replay_ms(graph)) is not None:
            self.device_ms[index] = ms
        return True

    def place(self, index: int, call: Callable[[], Any]) -> bool:
        """Capture config ``index``'s calls once more, into a memory pool of its own, so that the outputs it
        allocates lie elsewhere: its next placement (see "Placements" above); False when the capture fails, or when
        one more would take the memory the placements hold past :data:`PLACEMENT_MEMORY_SHARE` of the device's
        (the placement is left out, and :attr:`placing` turns False: the tuning places no more)."""
        import torch

        try:
            device = torch.cuda.current_device()
            budget = PLACEMENT_MEMORY_SHARE * torch.cuda.get_device_properties(device).total_memory
            if self.placed_bytes + self._place_bytes > budget:
                log.info("no more output placements: they would hold over %.1f GB of the device's memory",
                         budget / 1e9)
                self.placing = False
                return False
            before = torch.cuda.memory_reserved(device)
            graph = _captured(call, self.calls, torch.cuda.graph_pool_handle(), warm=False)
            taken = max(0, torch.cuda.memory_reserved(device) - before)
        except Exception as exc:
            log.info("a graph at another output placement failed to capture (%s): the race goes on with the "
                     "placements it has", describe_error(exc))
            _after_failed_capture()
            self.placing = False
            return False
        self.placed_bytes += taken
        self._place_bytes = max(self._place_bytes, taken)
        self.placed.setdefault(index, []).append(graph)
        return True

    def placements(self, index: int) -> int:
        """How many output placements config ``index`` has a graph at (0 without a graph)."""
        return (index in self.graphs) + len(self.placed.get(index, ()))

    def replay_ms(self, index: int, per_call_ms: float) -> float:
        """What one replay of config ``index``'s graph takes on the device (ms): its timed replay, or where none
        was timed ``calls`` times ``per_call_ms`` (an eager call's time)."""
        return self.device_ms.get(index) or per_call_ms * self.calls

    def replay(self, index: int, placement: int = 0) -> Callable[[], Any]:
        """One replay of config ``index``'s graph (``calls`` calls) at output ``placement`` (0: its first graph; a
        placement it has no graph at wraps around to one it has)."""
        placed = self.placed.get(index)
        if not placed:  # one placement (the screening, or a race placed at one)
            return self.graphs[index].replay
        return (self.graphs[index], *placed)[placement % (1 + len(placed))].replay

    def release(self) -> None:
        """Drop the graphs (a lock-step's race ends) and their pools (the next race captures into a new one)."""
        self.graphs.clear()
        self.placed.clear()
        self.placed_bytes = 0
        self._pool = None

    def close(self) -> None:
        """The tuning ends: drop the graphs and the pool, and give the allocator's free blocks back to the driver
        once (what ``torch.cuda.graph`` did before every capture)."""
        self.release()
        if not self._captured:
            return
        self._captured = False
        import torch

        try:
            torch.cuda.empty_cache()
        except Exception:  # pragma: no cover - a broken context surfaces in the next run
            pass


_streams: dict[int, Any] = {}


def _captured(call: Callable[[], Any], calls: int, pool: Any, warm: bool) -> Any:
    """A graph of ``calls`` calls of ``call`` captured on the capture stream into ``pool`` (``warm``: the call runs
    once on that stream first, the warm-up torch asks for before a capture); raises when the capture fails (a
    synchronize or a host read in the call invalidates it)."""
    import torch

    stream = _capture_stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        if warm:
            call()
        graph.capture_begin(pool=pool)
        try:
            for _ in range(calls):
                call()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph


def _after_failed_capture() -> None:
    """After a capture failed: wait for the device, and end the generators' capture state
    (:func:`_end_generator_capture`)."""
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:  # pragma: no cover - a broken context surfaces in the next run
        pass
    _end_generator_capture()


def _capture_stream() -> Any:
    """The stream graphs are captured on, one per device, made once (a capture needs a stream other than the
    default one)."""
    import torch

    device = torch.cuda.current_device()
    if device not in _streams:
        _streams[device] = torch.cuda.Stream(device)
    return _streams[device]


def _end_generator_capture() -> None:
    """A capture that failed leaves torch's CUDA random generators in their capture state: on torch 2.11 the
    process's next random draw on the GPU raised "Offset increment outside graph capture encountered unexpectedly",
    whether the capture went through ``torch.cuda.graph`` or not (``benchmarks/gpu/failed_capture_rng.py``). One
    capture that ends normally ends that state (torch's epilogue of every capture), so one of a single tiny kernel
    follows a failed capture; the user's program draws random numbers again."""
    import torch

    try:
        scratch = torch.zeros(1, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(_capture_stream()):
            graph.capture_begin()
            scratch.add_(1)
            graph.capture_end()
        torch.cuda.synchronize()
    except Exception:  # pragma: no cover - nothing more to do: the next draw reports it
        pass


def _replay_ms(graph: Any) -> float | None:
    """One replay's device time (ms), timed after an untimed replay (the first uploads the graph); None when the
    replay fails: the config's samples then meet the error where a config's errors are caught and blamed on it."""
    import torch

    try:
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return max(float(start.elapsed_time(end)), 1e-4)
    except Exception:  # the config's own error: its guarded samples report it
        return None


def graph_calls(fastest_ms: float) -> int:
    """Calls per graph for a tuning whose fastest config takes ``fastest_ms`` per eager call."""
    if fastest_ms <= 0:
        return GRAPH_CALLS
    return max(1, min(GRAPH_CALLS, math.ceil(GRAPH_MS / fastest_ms)))


def device_time_applies(cold: bool, group_size: int, device: str, fastest_ms: float,
                        journaled: str | None = None) -> bool:
    """Whether a tuning times on the device (see the module docstring): steady timing, one rank, CUDA, and a
    fastest config under :data:`DEVICE_TIME_BELOW_MS` per call (every input agreed or the rank's own alone). A
    resumed tuning whose journals hold times (``journaled``: :func:`journaled_clock`) times as they were timed,
    whatever its own first race's fastest call: a search ranks the journaled times beside its own."""
    possible = not cold and group_size == 1 and device == "cuda"
    if journaled is not None:
        return possible and journaled == GRAPH
    return possible and 0 < fastest_ms < DEVICE_TIME_BELOW_MS


def journaled_clock(records: Iterable[dict[str, Any]]) -> str | None:
    """The clock (:data:`GRAPH` or :data:`EAGER`) that timed the measured and stopped records of earlier attempts
    (merged outcomes, a finalist's screening record included), where every one names that clock. None where there
    are none, where some name no clock (journals written before the clock was journaled) or where they name both:
    then the tuning chooses afresh, and a search measures again the journaled times another clock took
    (:func:`~triton_dist_tune.function.screen_resume.drop_other_clock`)."""
    clocks = {r.get("clock") for record in records for r in (record, record.get("screening"))
              if isinstance(r, dict) and r.get("state") in ("measured", "stopped")}
    return next(iter(clocks)) if len(clocks) == 1 and clocks <= {GRAPH, EAGER} else None
