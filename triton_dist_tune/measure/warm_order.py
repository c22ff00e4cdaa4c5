"""The order in which one rank warms up a stage's configs: as their compiles end, a straggler deferred.

A stage's configs compile in parallel, but their warm-ups ran in the stage's order, each waiting for its own
compile: one slow kernel held up every config after it, though their kernels were ready. On one H200 host the
first key of an 840-config GEMM waited 2.5-3.2 s for one config of its first stage, whose kernel took 4.1-4.6 s in
a compile worker while the other 42 took 0.3-1.5 s (``benchmarks/results/session_h200_10``).

So on a rank tuning alone, with compiles running ahead of the warm-ups, :class:`WarmOrder` gives the configs whose
compiles have ended first (in the stage's order among them), and waits only when none has. In a search's screening
(``defer``), once every other config of the stage is warmed up, a config whose compile has still not ended
:data:`STRAGGLER_GRACE_S` later is deferred: it is not measured in this stage, and the search screens it with the next
stage of new configs (:mod:`~triton_dist_tune.function.searched`; a stage that samples screened configs again goes
first), while its compile goes on. A config gets that grace once: a later stage whose other configs are all warmed up
defers it again at once, if its compile has still not ended (in the README's MoE campaign on one H200, later graces of a
straggler already deferred were 1 to 7 of the 7 to 21 graces a campaign waited in full, in vain: 0.25-1.75 s of its
55-67 s, ``benchmarks/results/session_h200_23``; replayed with stragglers 1-6 stages behind instead of 1-3, the
search's misses were no more than without deferral at 5% and 10% Gaussian noise and spikes:
``benchmarks/replay_deferral.py --behind``). Nothing is deferred when no config of the call was warmed up (a stage
of stragglers alone waits for them), so each deferred config is screened by a later stage, at the latest by one made of
the deferred configs alone once the search has nothing else to screen; there a config still compiling is left out,
unscreened, when the search's model predicts it far behind the finalists (a tile so large that it compiles slowly is
seldom fast; :func:`~triton_dist_tune.function.searched.contenders`).

**Screening while compiling.** Each search stage waited for its last compiles (0.3 s a stage, over 80 stages of the
README's MoE campaign on one H200), and only then screened the configs it had warmed up (0.1-0.2 s a stage, device
time mostly), one after the other. So in a search's screening, when no config is ready and :data:`PAUSE_AFTER` or
more have been warmed up since the last pause, the order yields a pause (``None``) before it waits: the caller
screens the configs warmed up so far while the rest compile, then goes on (``benchmarks/results/session_h200_17``).
Not before the tuning's clock is chosen: its first race decides, from the probes of the configs it holds, whether
samples are timed on the device and how many calls a graph holds, and a pause would decide it from the few
configs that compiled first (4 slow ones would time the whole tuning eagerly).
Before it pauses or waits, the rank runs the work it was given for such waits (:meth:`~.precompile.Compiles.run_idle`:
the guesses of what the next stage and a campaign's next key will screen, and their compile passes) until some
config is ready, so that their compiles start as early as they can.

A config's compile deadline (the tuning's timeout) runs from the first wait for it, this order's or its own
(:meth:`~triton_dist_tune.measure.precompile.Compiles.wait`): a hung compile fails its config one timeout after
the stage began waiting, not two.

Groups keep the stage's order: every rank must warm the same config at the same step, and each rank knows only its
own compiles.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..disk import logs
from ..records import Outcome
from . import breakdown
from .precompile import Compiles

#: seconds a search stage waits for the compiles of its last configs, once every other config of it is warmed up,
#: before it defers them to the next stage
STRAGGLER_GRACE_S = 0.25

#: a grace that ended sooner (the next compile of the stage ended) gets no rank-log line (:func:`log_grace`): most
#: graces are such short waits between the ends of a stage's compiles
GRACE_LOGGED_FROM_S = 0.05

#: configs warmed up since the last pause that make a search's screening pause to measure them before it waits for
#: compiles (see the module docstring): a pause costs a step (its first sample settles longer after the device idled)
PAUSE_AFTER = 4

#: a deferred config's error text in its outcome of the stage (it is screened in the next)
DEFERRED = "not measured yet: its compile had not ended when the rest of its stage was measured"

Todo = tuple[int, dict[str, Any], str]


class WarmOrder:
    """Iterate a stage's ``todo`` in the order to warm it up (see the module docstring); :attr:`deferred` holds
    the indices left out once the iteration ends. ``alone``: the rank tunes without a group; ``defer``: a search's
    screening, which may defer a straggler; ``pause`` (with ``defer``): it pauses (yields None) to measure what it
    warmed up before it waits."""

    def __init__(self, todo: Sequence[Todo], compiles: Compiles, alone: bool, defer: bool, pause: bool = False) -> None:
        self.todo = list(todo)
        self.compiles = compiles
        self.reorder = alone and compiles.open
        self.defer = defer
        self.pause = pause and defer
        self.deferred: list[int] = []
        #: the pauses yielded so far
        self.pauses = 0

    def deferred_outcomes(self) -> dict[int, Outcome]:
        """The deferred configs' outcomes of this stage (their error :data:`DEFERRED`), by index."""
        return {index: Outcome(index, desc, "pruned", error=DEFERRED) for index, _, desc in self.todo
                if index in self.deferred}

    def __iter__(self) -> Iterator[Todo | None]:
        if not self.reorder:
            yield from self.todo
            return
        pending = list(self.todo)
        warmed = False
        since = 0  # configs given since the last pause
        while pending:
            ready = next((item for item in pending if self.compiles.done(item[0])), None)
            if ready is None and self.defer and warmed and all(item[0] in self.compiles.graced for item in pending):
                self.deferred = [item[0] for item in pending]  # stragglers whose grace an earlier stage spent
                return
            if ready is None and self.compiles.idle:  # the guesses first: their compiles start before any wait
                with breakdown.part("compile"):
                    self.compiles.run_idle(lambda: any(self.compiles.done(item[0]) for item in pending))
                continue
            if ready is None and self.pause and since >= PAUSE_AFTER:
                since = 0
                self.pauses += 1
                yield None
                continue  # compiles ended during the pause: warm those first
            if ready is None:
                grace, indices, waited = self.defer and warmed, [item[0] for item in pending], self.compiles.waited
                with breakdown.part("compile"):
                    ended = self.compiles.wait_first(indices, STRAGGLER_GRACE_S if grace else self.compiles.limit)
                waited = self.compiles.waited - waited
                if grace and (not ended or waited >= GRACE_LOGGED_FROM_S):
                    log_grace(self.compiles.label, indices, waited, ended)
                if not ended and grace:
                    self.deferred = indices
                    self.compiles.graced.update(self.deferred)
                    return
                ready = next((item for item in pending if self.compiles.done(item[0])), pending[0])
            pending.remove(ready)
            warmed = True
            since += 1
            yield ready


def log_grace(label: str, pending: Sequence[int], seconds: float, ended: bool) -> None:
    """One line in the rank log per grace a stage waited (:data:`STRAGGLER_GRACE_S`; not those that ended within
    :data:`GRACE_LOGGED_FROM_S`): the configs still compiling, the seconds waited, and whether one's compile ended
    (the stage goes on) or none did (deferred). With the line per compile (:func:`~.precompile.log_compile`),
    ``benchmarks/grace_events.py`` reads what the graces cost a campaign and what a shorter one would have
    deferred."""
    logs.rank_log().info("%s grace: %.3f s for %d config(s) compiling (%s): %s", label, seconds, len(pending),
                         " ".join(map(str, pending[:8])) + (" ..." if len(pending) > 8 else ""),
                         "one ended" if ended else "deferred")

