"""Which configs a search will likely screen next, so that they compile while its current stage is measured.

A first key's compiles wait in stages: each stage of the search (:mod:`~triton_dist_tune.measure.search`) compiles
its new configs, then measures them, then the next stage is known. On one H200 host (16 compile workers, a kernel
0.3-0.4 s in a worker) the 32-config stages of an 840-config GEMM's first key took 1.0-2.1 s each while the workers
were busy 26-64% of the time (``benchmarks/diagnose_compile.py``): the wait of each stage for its slowest compiles,
and the workers idle while a stage is measured.

So once a stage's compiles are started, the configs the next stage will likely hold are compiled too, after them
(:meth:`~triton_dist_tune.measure.precompile.Compiles.submit` ``later``): the neighbours of the leaders so far, both
as if the stage's configs all come in slow (the leaders stay) and as if each comes in just ahead of its best
screened neighbour (the leaders move to them); :func:`likely_next`. Replayed with 5% noise over the corpus's
landscapes it names 62% of the next stage's new configs (the held-out collective ones: 65%; a random guess of as
many: 9%), and one in three of the configs it names is screened next (``benchmarks/replay_ahead.py``). A config
compiled ahead and then needed is not compiled again; one never needed costs only a worker's time.

Pure: a function of the search and its agreed samples. Only a tuning on one rank compiles ahead, and only while
compiles cost it: its last stage waited :data:`AHEAD_WAIT_S` or more for them (a later key whose kernels are in
memory waits for none, and its stages then run no compile pass for configs it may never screen).

A campaign's next key (:func:`likely_for_next_key`, used by :mod:`~triton_dist_tune.function.next_key`): its search
run without a device over a nearby decided key's times names the configs it will likely screen. Replayed over the
corpus's campaigns (``benchmarks/replay_next_key.py``: 3 seeds, ascending and shuffled, Gaussian 5% and 10% and
spiked noise drawn per sample), the cap chosen with each family held out was :data:`NEXT_KEY_CAP` for every family;
on the held-out family the guesses compiled 28-65% of the configs later keys screened for the first time (a random
guess of as many: 11-53%), and 7-23% of what they compiled was never screened (random: 19-64%). On one H200 the
README's MoE campaign then screened 60-65% of the configs compiled ahead for each key (RESULTS.md). After those, at
most :data:`NEXT_KEY_FILL` more: the kept configs the stand-in ranks fastest (replayed, every family: MoE coverage
53-56% to 86-87%, where a random guess as large covers 77-79%; gemm 77-78% against 65-67%; at 3-21 times the
compiles never screened, so the replay's own measure, configs covered less configs never screened, prefers no
fill). Dropped in the twelfth session, when the guesses took CPUs from the key being tuned; kept since they run on
speculative threads in workers of the lowest priority (:mod:`~.daemon_pool`), where a guess never screened costs
little: the campaign then waited 17.6-22.3 s for compiles against 23.2-28.3 s without the fill (docs/search.md).
The fill's size (128, the twelfth session's) was not chosen on held-out data; the campaign figures that kept it are
training figures. A fill of 256 needed no fewer compiles in the campaign on one H200 (docs/search.md).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .replay import run_search
from .search import PatternSearch, Samples, SearchPlan
from .surrogate import AdditiveModel

#: a stage that waited this many seconds for its compiles makes the next one compile ahead
AHEAD_WAIT_S = 0.1
#: a config of the stage, in the optimistic view, reads this share of its best screened neighbour's time
AHEAD_OF_NEIGHBOUR = 0.98


def likely_next(search: PatternSearch, samples: Samples, screening: Collection[int]) -> list[int]:
    """The configs not screened yet that the stage after the one ``screening`` will likely hold (best guess first):
    the leaders' neighbours if ``screening``'s configs all come in slow, then those if each comes in just ahead of
    its best screened neighbour; at most two stages' worth."""
    times = search.estimates(search.history(samples))
    cap = search.plan.stage_cap
    leaders = search.leaders(times, search.plan.leaders)
    if not leaders:
        return []
    slow = search.neighbours(leaders, {**times, **{i: None for i in screening}})[:cap]
    ahead = dict(times)
    for i in screening:
        near = [t for j in search.grid.rings(i)[0] if (t := times.get(j)) is not None]
        ahead[i] = min(near) * AHEAD_OF_NEIGHBOUR if near else None
    moved = search.neighbours(search.leaders(ahead, search.plan.leaders), ahead)[:cap]
    return list(dict.fromkeys(slow + moved))


#: configs compiled ahead for a campaign's next key at most (:func:`likely_for_next_key`)
NEXT_KEY_CAP = 128
#: and after them, at most this many more: those the stand-in landscape ranks fastest
NEXT_KEY_FILL = 128


def likely_for_next_key(configs: Sequence[Mapping[str, Any]], kept: Sequence[int], seed: str, seeds: Sequence[int],
                        landscape: Mapping[int, float], compiled: Collection[int],
                        cap: int = NEXT_KEY_CAP, fill: int = NEXT_KEY_FILL,
                        preferred: Collection[int] = ()) -> list[int]:
    """The configs a key not tuned yet will likely screen, in the order it would, leaving out ``compiled``; at most
    ``cap``. The key's own search (its ``kept`` configs, its plan's ``seed``, its ``seeds``, the configs its first
    look prefers: ``preferred``) is run without a device
    over a stand-in landscape: the times ``landscape`` holds (a nearby decided key's screened configs), and an
    additive model fitted to them for the others (:class:`~.surrogate.AdditiveModel`). Without a landscape: the
    search's first look (which depends on nothing measured)."""
    search = PatternSearch(configs, kept, SearchPlan(seed=seed), seeds, preferred)
    model = AdditiveModel(search.grid)
    fitted = bool(landscape) and model.fit({i: t for i, t in landscape.items() if i in search.grid.point})
    if not fitted:
        order = search.first()
    else:
        order = []

        def time_of(index: int) -> float:
            order.append(index)
            known = landscape.get(index)
            return known if known is not None else math.exp(model.predict(index))

        run_search(search, time_of)
    skip = set(compiled)
    named = [i for i in dict.fromkeys(order) if i not in skip][:cap]
    if not fitted or fill <= 0:  # no landscape: nothing to rank the rest by
        return named
    skip.update(named)
    ranked = sorted((math.log(landscape[i]) if i in landscape else model.predict(i), i)
                    for i in kept if i not in skip and i in search.grid.point)
    return named + [i for _, i in ranked[:fill]]
