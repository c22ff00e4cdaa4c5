"""What one measured run of a tuning is: the function, its arguments, the hooks around it, and the samples it gives
(a probe, a steady sample enqueued for its round, a cold sample); see :mod:`~triton_dist_tune.measure.timing`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import timing
from .arguments import ArgumentState
from .clocks import Clock
from .guarding import POISONED
from .reference import Reference
from .timing import Steady


@dataclass
class Trial:
    """One tuning call: the function, its arguments and everything that runs around each measured call."""

    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    clock: Clock
    state: ArgumentState | None = None
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    reference: Reference | None = None
    #: whether the samples' call counts follow the host clock's rules (agreed: some rank times on the host)
    host_counts: bool = False
    #: the calls made so far (for the device-time floor of :mod:`~triton_dist_tune.measure.breakdown`)
    calls: int = 0
    #: the undeclared arguments ``ref_prog`` wrote (a GEMM's ``c``), by name, as it left them: a checked run that
    #: writes one must leave it alike (NaN matching NaN: parts neither wrote)
    buffers: Reference | None = None
    #: the names of :attr:`buffers` some config's checked run wrote on this rank: outputs of the function, compared
    #: for every later checked run, one that leaves them as the caller had them too (a config whose grid launches
    #: no program, ``n // BLOCK`` with ``BLOCK > n``)
    written_by_runs: set[str] = field(default_factory=set)
    #: the names of :attr:`buffers` whose caller's values differ from ``ref_prog``'s, each with the verdict of a run
    #: that leaves it as the caller had it (None until the first checked run works them out from the copies the
    #: arguments' state keeps of the caller's values: no copy of its own)
    stale: dict[str, str] | None = None
    #: per name of :attr:`stale` no checked run wrote yet on this rank: the configs whose checked run passed leaving it
    #: as the caller had it, wrong once some config's run is found writing it (before, they passed)
    left_unwritten: dict[str, list[int]] = field(default_factory=dict)
    #: configs of :attr:`left_unwritten` found wrong by a later config's run (index -> verdict), not yet sent to the
    #: group (:meth:`take_late`): the group fails them on every rank at the warm-up's exchange
    found_late: dict[int, str] = field(default_factory=dict)
    #: the last exception a config's run raised on this rank (with its traceback): the cause of the error raised
    #: when every config failed
    last_error: BaseException | None = None

    def call(self, config: dict[str, Any], restored: bool = False, exact: bool = False,
             warmup: bool = False) -> Any:
        """Prepare the arguments (unless ``restored``: the caller did) and run once with ``config``; returns the
        function's result. ``exact``: the result counts, so every argument is put back first (outputs written whole
        too: :meth:`~triton_dist_tune.measure.arguments.ArgumentState.before_run`); ``warmup``: a plain warm-up run,
        untimed, the only kind that checks whether an output is written whole."""
        self.calls += 1
        if self.state is not None and not restored:
            self.state.before_run(exact=exact, warmup=warmup)
        try:
            return self._run(config)
        except _FromTheFill:  # it raised from the tuner's NaN fill, alone: once more from the caller's values
            assert self.state is not None
            self.calls += 1
            self.state.before_run(exact=True)  # every argument put back, the filled ones too
            out = self._run(config)  # raises: the config's own error; runs: the fill made it raise
            self.state.fill_raised()
            return out

    def _run(self, config: dict[str, Any]) -> Any:
        if self.pre_hook is not None:
            self.pre_hook(config, *self.args, **self.kwargs)
        try:
            out = self.fn(*self.args, **self.kwargs, **config)
        except Exception as exc:
            filled = self.state.run_failed() if self.state is not None else False
            if self.post_hook is not None:  # it closes what pre_hook opened (a phase counter) for the next run;
                with contextlib.suppress(Exception):  # the run's own error is the one that counts
                    self.post_hook(config, *self.args, **self.kwargs)
            if filled and self.state.retry_fill and not POISONED.search(str(exc)):  # type: ignore[union-attr]
                raise _FromTheFill from exc  # (a device left unusable runs nothing again: the next attempt fills none)
            raise
        if self.post_hook is not None:
            self.post_hook(config, *self.args, **self.kwargs)
        if self.state is not None:
            try:
                self.state.after_run()
            except Exception:  # an error the run left on the device, met by the check's synchronize: the run's
                self.state.run_failed()  # (from the fill or not: raised_from_fill says which)
                raise
        return out

    def probe(self, config: dict[str, Any], lead: bool = True, calls: int = timing.PROBE_CALLS) -> float:
        """The config's time per call, for sizing its samples (:func:`~triton_dist_tune.measure.timing.probe`;
        ``lead`` false: a warm-up run just ran; ``calls`` timed)."""
        return timing.probe(self.clock, lambda: self.call(config), lead, calls)

    def cold(self, config: dict[str, Any]) -> float:
        """One cold sample, ms (:func:`~triton_dist_tune.measure.timing.cold_sample`). The arguments are restored
        before the L2 flush, not inside the timed call: the tuner's copies (``restore_value``, ``reset_to_zero``,
        changed arguments) are no part of one call after a flush, and would put the restored tensors back in L2."""
        if self.state is not None:
            self.state.before_run()
        return timing.cold_sample(self.clock, lambda: self.call(config, restored=True))

    def steady(self, config: dict[str, Any], steady: Steady) -> timing.SampleToken:
        """Enqueue one steady sample; returns the clock's tokens (read with :func:`timing.read_sample` after a
        synchronize)."""
        return timing.steady_span(self.clock, lambda: self.call(config), steady)

    def steady_now(self, config: dict[str, Any], steady: Steady) -> float:
        """One steady sample, synchronized at once; ms per call (for a rank measuring alone)."""
        token = self.steady(config, steady)
        self.clock.synchronize()
        return timing.read_sample(self.clock, token, steady)

    def checked_run(self, config: dict[str, Any], index: int = -1) -> str | None:
        """One untimed run of config ``index`` compared against the reference; None when it matches."""
        out = self.call(config, exact=True)
        self.clock.synchronize()
        produced = (out, *self.state.outputs) if self.state is not None else (out,)
        wrong = self.reference.mismatch(produced) if self.reference is not None else None
        if self.buffers is not None and self.state is not None:
            # those this run wrote, and those an earlier config's run wrote: what ref_prog alone writes is no output
            # of the function (a scratch argument), but one that some config writes is (a config whose result
            # differs too), and a config that leaves it unwritten is wrong (before, it passed: only what the run
            # itself wrote was compared)
            written = set(self.state.changed_now())
            first = [name for name in self.buffers.value if name in written and name not in self.written_by_runs]
            self.written_by_runs.update(first)
            names = [name for name in self.buffers.value if name in self.written_by_runs]
            if names and wrong is None:
                wrong = self.buffers.mismatch_of({name: self.state.watched[name][0] for name in names})
            self._left_unwritten(index, first, wrong is None)
        return wrong

    def _left_unwritten(self, index: int, first: list[str], passed: bool) -> None:
        """After config ``index``'s checked run, which wrote ``first`` before any other config on this rank and
        ``passed``: the configs checked earlier found wrong (each left those as the caller had them, where
        ``ref_prog`` left other values: exactly what a check after ``first``'s writer says of a config leaving them
        so, with no run again), and this one noted where it passed leaving such a name unwritten."""
        assert self.buffers is not None and self.state is not None
        if self.stale is None:  # the caller's values against ref_prog's: a run that leaves a buffer unwritten
            caller = {name: self.state.watched[name][1] for name in self.buffers.value}
            self.stale = {name: wrong for name in self.buffers.value
                          if (wrong := self.buffers.mismatch_of({name: caller[name]})) is not None}
        for name in first:
            for earlier in self.left_unwritten.pop(name, []):
                self.found_late.setdefault(earlier, f"{self.stale[name]} (left as the caller had it; found when "
                                                    f"config {index}, checked later, wrote it)")
        if passed:
            for name in self.stale:
                if name not in self.written_by_runs and index >= 0:
                    self.left_unwritten.setdefault(name, []).append(index)

    def unwritten_report(self) -> tuple[list[str], dict[str, tuple[str, list[int]]]]:
        """For a sharded tuning, whose ranks each check a share of the configs: the undeclared outputs some config's
        run on this rank wrote (sorted), and per output none wrote here, ``ref_prog``'s verdict on the caller's
        values and the configs that passed leaving it so (:func:`~.late.unwritten_across` reads every rank's)."""
        stale = self.stale or {}
        return sorted(self.written_by_runs), {name: (stale[name], list(indices))
                                              for name, indices in sorted(self.left_unwritten.items()) if indices}

    def take_late(self) -> dict[int, str]:
        """The configs found wrong after their own check since the last call (:attr:`found_late`), for the group."""
        late, self.found_late = self.found_late, {}
        return late


class _FromTheFill(Exception):
    """A run that started from the NaN fill raised on a rank alone (:meth:`~.arguments.ArgumentState.run_failed`)."""
