"""Replays of the search with no device: a recorded or synthetic landscape's times stand in for the samples (and
probes) a live tuning would take, in the order it would take them. For tests, for choosing the search's defaults on
data measured once on a GPU (``benchmarks/replay_search.py``), and for the campaign's guesses of the next key's
configs (:mod:`~triton_dist_tune.measure.ahead`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .probe_screen import ProbeScreen
from .search import PatternSearch, SearchPlan

#: a replayed config's warm-up probe: ms per call, or (ms, whether it is a fast call probed in one call:
#: :attr:`~.probe_screen.ProbeScreen.short`)
ProbeOf = Callable[[int], "float | tuple[float, bool]"]


def simulate(configs: Sequence[Mapping[str, Any]], kept: Sequence[int], plan: SearchPlan,
             time_of: Callable[[int], float | None], seeds: Sequence[int] = (),
             probe_of: ProbeOf | None = None,
             preferred: Collection[int] = ()) -> tuple[list[int], dict[int, float | None]]:
    """Replay a search over a recorded or synthetic landscape; returns (the finalists, every screened config's time:
    the median of its samples, None for a failed one). ``time_of(index) -> ms or None`` is called once for every
    sample the search takes, in the order the live tuner takes them (a config sampled twice: twice), so that a
    replay can draw fresh noise per sample; None fails the config, as an error in its run does. ``probe_of(index)
    -> ms``: each new config's warm-up probe, for a replay of the far-behind screening of one rank on a device clock
    (:mod:`~triton_dist_tune.measure.probe_screen`: the configs a probe puts far behind take no sample), or (ms,
    short): ``short`` for a fast call probed in one call (:attr:`~.probe_screen.ProbeScreen.short`); None: none, as
    on a group of ranks. ``preferred``: the configs earlier keys screened (a seeded search's first look takes them
    first). For tests and for trying strategies on data measured once on a GPU."""
    return run_search(PatternSearch(configs, kept, plan, seeds, preferred), time_of, probe_of)


def run_search(search: PatternSearch, time_of: Callable[[int], float | None],
               probe_of: ProbeOf | None = None) -> tuple[list[int], dict[int, float | None]]:
    """:func:`simulate`'s loop over a search already made (a replay's variant of :class:`PatternSearch`). With
    ``probe_of``, each stage's new configs are screened as the live tuner screens them: every one probed, those not
    far behind sampled (their samples the evidence of how probes read), then those behind the measured bar given
    their probe's stand-in, the others sampled too (:class:`~.probe_screen.ProbeScreen`)."""
    history: dict[int, list[float] | None] = {}
    screen = ProbeScreen()

    def sample(i: int, probe: float) -> None:
        taken = time_of(i)
        if taken is None:
            history[i] = None
        elif i not in history or history[i] is not None:
            history.setdefault(i, []).append(taken)  # type: ignore[union-attr]
            screen.raced(probe, taken, i)

    batch = search.first()
    while batch:
        probes: dict[int, float] = {}
        for i in (i for i in batch if i not in history) if probe_of is not None else ():
            got = probe_of(i)
            probes[i], short = got if isinstance(got, tuple) else (got, False)
            if short:
                screen.short.add(i)
        screen.probed(probes)
        far = screen.far(probes)
        for i in (i for i in batch if i not in far):  # the others first: their samples are the evidence
            sample(i, probes.get(i, 0.0))
        stand_ins = screen.stand_ins(probes, far)
        history.update((i, [t]) for i, t in stand_ins.items())
        for i in (i for i in far if i not in stand_ins):
            sample(i, probes[i])
        batch = search.next(history, screen.indices)
    return search.finalists(history), search.estimates(history)
