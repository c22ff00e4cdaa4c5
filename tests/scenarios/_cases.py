"""What every scenario script shares: a registry of named cases, ``RESULT {json}`` lines, and a clean exit.

A scenario script is run by real ranks as ``python SCRIPT CASE``; it registers its cases with :func:`case` and ends
with :func:`main`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CASES: dict[str, Callable[[], None]] = {}


def case(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` under its name."""
    CASES[fn.__name__] = fn
    return fn


#: the virtual clock's reading, in ms (:func:`spend`, :func:`virtual_clock`)
_VIRTUAL_MS = [0.0]


def spend(ms: float) -> None:
    """Advance the virtual clock by ``ms``: what the call making it takes when timed on :func:`virtual_clock`."""
    _VIRTUAL_MS[0] += ms


def virtual_ms() -> float:
    """The virtual clock's reading: the milliseconds :func:`spend` has added so far."""
    return _VIRTUAL_MS[0]


def _virtual_clock_type(kind: str) -> type:
    """A host clock that only :func:`spend` advances, of the kind ``kind`` as the tuner sees it."""
    from triton_dist_tune.measure.clocks import HostClock

    class VirtualClock(HostClock):
        def __init__(self) -> None:
            super().__init__()
            self.kind = kind

        def start(self) -> float:
            return _VIRTUAL_MS[0]

        def stop(self, start: float) -> float:
            return _VIRTUAL_MS[0] - start

    return VirtualClock


@contextmanager
def virtual_clock(kind: str = "host") -> Iterator[None]:
    """Time ``autotune``'s samples on a clock that only :func:`spend` advances, for scenarios whose assertions
    follow from the configs' times: a loaded machine's stalls then cannot reorder configs (wall-clock gaps of 4x
    have failed under load). ``kind``: the clock's kind as the tuner sees it (another than "host" times as a
    device's clock does, not as CUDA's: no graphs)."""
    from triton_dist_tune.function import agreed

    saved = agreed.make_clock
    agreed.make_clock = _virtual_clock_type(kind)
    try:
        yield
    finally:
        agreed.make_clock = saved  # the scenarios after this one in the same process time as usual


def use_virtual_clock() -> None:
    """Time ``autotune``'s samples on the virtual clock (:func:`virtual_clock`) for the rest of this process: for a
    scenario whose tuned functions are made in many cases, and whose ranks may be ended anywhere."""
    from triton_dist_tune.function import agreed

    agreed.make_clock = _virtual_clock_type("host")


#: the case running, when one process runs several (``python SCRIPT CASE CASE ...``): its RESULT lines name it
RUNNING: list[str] = []


def contextual_virtual_clock() -> None:
    """Time ``contextual_autotune``'s launches on the virtual clock (:func:`spend`): the pre_hooks spend
    their config's time, so the group's times follow from the scenario's landscape exactly, whatever the load."""
    from triton_dist_tune.contextual import state
    from triton_dist_tune.measure.clocks import HostClock

    class VirtualClock(HostClock):
        def start(self) -> float:
            return _VIRTUAL_MS[0]

        def stop(self, start: float) -> float:
            return _VIRTUAL_MS[0] - start

    state.make_clock = VirtualClock


def in_steady_round() -> bool:
    """Whether the tuner runs this call as part of a steady round's sample (not the warm-up): a frame of
    :meth:`~triton_dist_tune.measure.lockstep.Measurer._steady_rounds` is on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_steady_rounds":
            return True
        frame = frame.f_back
    return False


def killed_with_peers(folder: os.PathLike | str, attempt: str, rank: int, ranks: tuple[int, ...],
                      wait_s: float = 60) -> None:
    """SIGKILL this process once every rank of ``ranks`` has come here too in this ``attempt`` (a file
    ``inside.<attempt>.rank<r>`` each in ``folder``; at most ``wait_s``): a node lost with all its processes inside
    one place. Rank 0's process hosts the store, and a peer still reading an exchange when it died would end with
    the lost store's error instead (a fixed sleep before rank 0's kill did not hold under load)."""
    def marker(r: int) -> str:
        return os.path.join(os.fspath(folder), f"inside.{attempt}.rank{r}")

    open(marker(rank), "w").close()
    waited_for([marker(r) for r in ranks], wait_s)
    os.kill(os.getpid(), signal.SIGKILL)


def waited_for(paths: list[str] | list[os.PathLike], seconds: float = 60) -> bool:
    """Whether every file of ``paths`` exists, waiting for them at most ``seconds``: the handshake of scenarios
    whose ranks must be at given points together (files, not clocks: a loaded machine outruns any sleep)."""
    deadline = time.monotonic() + seconds
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def store_gone(seconds: float = 60) -> bool:
    """Whether the job's store (``$MASTER_ADDR:$MASTER_PORT``) refuses connections, waiting for it at most
    ``seconds``: its host, rank 0, has ended (not merely said it would: a loaded machine takes its time to end)."""
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


def process_stopped(pid: int, seconds: float = 60) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in ``/proc``: its own SIGSTOP has landed), waiting for it at
    most ``seconds``: a file it wrote just before ``os.kill(os.getpid(), SIGSTOP)`` says only that it is about to."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone: it will never be seen stopped
            return False
        if stat[stat.rindex(")") + 2:].startswith(("T", "t")):
            return True
        time.sleep(0.01)
    return False


def pid_marker(marker: Path) -> None:
    """Write this process's pid at ``marker`` at once (through a temporary file of its own: ranks may write theirs at
    once), for a test that signals the process there (``harness.stopping_at``, ``stopping_together``)."""
    temporary = marker.with_name(marker.name + ".tmp")
    temporary.write_text(str(os.getpid()))
    temporary.rename(marker)


def stopped_then_on(marker: Path) -> None:
    """Write this process's pid at ``marker`` (the test stops the process there, SIGSTOP, and continues it), then go
    on ``$GO_ON_S`` (1.5) s after being continued (a gap of a second or more between two 50 ms sleeps), or after 60 s
    if never stopped."""
    pid_marker(marker)
    go_on_s = float(os.environ.get("GO_ON_S", "1.5"))
    started = last = time.monotonic()
    resumed = None
    while True:
        time.sleep(0.05)
        now = time.monotonic()
        if now - last > 1.0:
            resumed = now
        last = now
        if (resumed is not None and now - resumed >= go_on_s) or now - started > 60:
            return


def emit(**fields: object) -> None:
    """One ``RESULT {json}`` line, written with one ``write`` so that the lines of ranks sharing a pipe (torchrun,
    mpiexec) never interleave. Where the process runs several cases, the line says which (``"case"``)."""
    if RUNNING:
        fields = {"case": RUNNING[0], **fields}
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(fields) + "\n").encode())


def outcome(fn, *args, **kwargs) -> dict:
    """Call ``fn`` and describe what happened: its result or the exception's type and message."""
    try:
        value = fn(*args, **kwargs)
        return {"ok": value if isinstance(value, (int, float, str, list)) else repr(value)}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def before_each_compile(kernel, hook: Callable[[object, dict], None]) -> None:
    """Call ``hook(jit_function, launch_kwargs)`` before every ``warmup`` (the compile a tuner runs ahead) of
    ``kernel``'s class of jitted functions; an exception from ``hook`` is that compile's error."""
    real = type(kernel.fn).warmup

    def warmup(self, *args, grid, **kwargs):
        hook(self, kwargs)
        return real(self, *args, grid=grid, **kwargs)

    type(kernel.fn).warmup = warmup


def host_graphs(uncapturable: frozenset[int] = frozenset(), oom: bool = False) -> list[int]:
    """Time tunings as if their calls replayed from CUDA graphs, which cannot run here: installs a stand-in
    :class:`~triton_dist_tune.measure.graphs.Graphs` whose capture runs the call once (as torch's warm-up before a
    capture does) and whose replay is the call itself. The configs ``uncapturable`` names cannot be captured (the
    stand-in's capture fails, as torch's does at a host read; with ``oom``, for want of device memory). Returns
    the list that holds the config being captured while its capture runs."""
    from types import SimpleNamespace

    from triton_dist_tune.measure import graphs, sampling

    capturing: list[int] = []

    class HostGraphs(graphs.Graphs):
        def capture(self, index, call) -> bool:
            capturing.append(index)
            try:
                call()
            finally:
                capturing.pop()
            if index in uncapturable:  # what Graphs.capture does when torch's capture raises
                self.error = ("OutOfMemoryError: CUDA out of memory (injected)" if oom
                              else "RuntimeError: operation not permitted when stream is capturing (injected)")
                return False
            self.graphs[index] = SimpleNamespace(replay=call)
            self.warms_next, self.works = False, True
            return True

    sampling.Graphs = HostGraphs
    return capturing


def main(mpi: bool | None = None) -> None:
    """Run the case named by ``sys.argv[1]`` (or the cases named by ``sys.argv[1:]``, one after another, in this
    one process: every case must leave the process group as it found it), then leave cleanly: MPI ranks exit
    normally (to finalize); torch ranks wait for each other (rank 0 may host the store) and skip the slow
    interpreter teardown."""
    name, cases = sys.argv[1], sys.argv[1:]
    if os.environ.get("PASSOVER_GRACE_S"):  # a test whose interrupted rank calls again: a grace a loaded host keeps
        from triton_dist_tune.group import passover

        passover.GRACE_S = float(os.environ["PASSOVER_GRACE_S"])
    for each in cases:
        RUNNING[:] = [each] if len(cases) > 1 else []
        CASES[each]()
    RUNNING.clear()
    sys.stdout.flush()
    sys.stderr.flush()
    if mpi if mpi is not None else name.startswith("mpi"):
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    os._exit(0)


def python_calls(call) -> int:
    """How many Python function calls ``call()`` makes (``sys.setprofile``'s ``call`` events, itself included):
    a count, not a time, so a loaded machine cannot move it."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return count[0]
