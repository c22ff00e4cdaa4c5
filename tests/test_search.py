"""The search of large spaces: the grid and the strategy in-process (replayed landscapes), the whole search on real
gloo ranks (a 600-config collective function), a search killed mid-way and resumed, and the mode agreed."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from dataclasses import replace

import pytest
from harness import HERE, describe, run_ranks, tuner_env

from triton_dist_tune.errors import BadInputError
from triton_dist_tune.function.options import TuneOptions
from triton_dist_tune.function.searched import SearchRecord
from triton_dist_tune.measure.grid import Grid
from triton_dist_tune.measure.probe_screen import ProbeScreen
from triton_dist_tune.measure.replay import run_search, simulate
from triton_dist_tune.measure.search import (
    RESAMPLE_REASONS,
    SEARCH_ABOVE,
    PatternSearch,
    Posterior,
    SearchPlan,
    search_applies,
)
from triton_dist_tune.settings import Settings

CASES = HERE / "scenarios" / "search_cases.py"

#: a GEMM-like space: 5 x 4 x 3 x 2 x 2 x 4 = 960 configs, pruned by a shared-memory rule
GEMM = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, GROUP_M=g, num_warps=w, num_stages=s)
        for m, n, k, g, w, s in itertools.product([16, 32, 64, 128, 256], [32, 64, 128, 256], [32, 64, 128], [1, 8],
                                                  [4, 8], [2, 3, 4, 5])]
KEPT = [i for i, c in enumerate(GEMM)
        if (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2 * c["num_stages"] <= 228 * 1024]


def bowl(seed: int):
    """A smooth landscape over GEMM with its bottom at a random point, and 2% noise of its own per config."""
    r = random.Random(seed)
    bottom = [r.randrange(5), r.randrange(4), r.randrange(3), r.randrange(4)]

    def time_of(i: int) -> float:
        c = GEMM[i]
        at = [math.log2(c["BLOCK_M"] / 16), math.log2(c["BLOCK_N"] / 32), math.log2(c["BLOCK_K"] / 32),
              c["num_stages"] - 2]
        cost = sum(w * (a - b) ** 2 for w, a, b in zip((0.08, 0.06, 0.05, 0.02), at, bottom, strict=True))
        cost += (0.03 if c["num_warps"] == 8 else 0) + (0.01 if c["GROUP_M"] == 1 else 0)
        return (1.0 + cost) * (1 + 0.02 * random.Random(f"{seed}/{i}").random())

    return time_of


# -- the grid ----------------------------------------------------------------------------------------------------------


def test_neighbours_move_one_parameter_to_the_next_kept_value_or_two_block_sizes():
    space = [dict(BLOCK_M=m, BLOCK_N=n, w=w) for m in (16, 32, 64) for n in (16, 32, 64) for w in (4, 8)]
    kept = [i for i, c in enumerate(space) if not (c["BLOCK_M"] == 32 and c["w"] == 4)]  # a hole pruning left
    grid = Grid(space, kept)
    at = {(c["BLOCK_M"], c["BLOCK_N"], c["w"]): i for i, c in enumerate(space)}
    found = {(space[i]["BLOCK_M"], space[i]["BLOCK_N"], space[i]["w"]) for i in grid.neighbours(at[(16, 32, 4)])}
    # BLOCK_M: 32 is pruned at w=4, so the next kept value (64) is adjacent; BLOCK_N both ways; w up; the block
    # pairs from (16, 32) lead to BLOCK_M = 32 at w=4 only, which is pruned
    assert found == {(64, 32, 4), (16, 16, 4), (16, 64, 4), (16, 32, 8)}
    assert (32, 32, 4) not in found and (16, 32, 4) not in found
    assert all(i in kept for i in grid.neighbours(at[(16, 32, 4)]))


def test_a_configs_rings_are_found_once_per_grid_and_cannot_be_changed_by_a_caller():
    """A search asks for the same configs' rings at every stage (its jumps, its leaders' neighbours): on the corpus's
    landscapes finding them anew each time made its computation take 3.7-4.6 s, now 2.5-3.3 s, with the same
    decisions (``benchmarks/search_compute.py``). Before: a new list each time."""
    space = [dict(BLOCK_M=m, BLOCK_N=n, w=w) for m in (16, 32, 64) for n in (16, 32, 64) for w in (4, 8)]
    grid = Grid(space, range(len(space)))
    first = grid.rings(7)
    assert grid.rings(7) is first and isinstance(first, tuple) and all(isinstance(r, tuple) for r in first)
    assert Grid(space, range(len(space))).rings(7) == first  # a new grid finds the same rings
    assert grid.neighbours(7) == [i for ring in first for i in ring]


def test_neighbours_of_a_block_pair_exist_only_where_the_config_exists():
    space = [dict(BLOCK_M=m, BLOCK_N=n) for m in (16, 32) for n in (16, 32)]
    grid = Grid(space, range(4))
    assert sorted(grid.neighbours(0)) == [1, 2, 3]  # (16,32), (32,16) along one axis, (32,32) as the pair
    assert Grid([{"x": "a"}, {"x": "b"}, {"x": 1}], [0, 1, 2]).axes["x"] == [1, "a", "b"]  # numbers first
    # one value in every kept config: no axis (a value some configs leave unset still tells them apart)
    assert Grid([{"x": 1, "y": 2}, {"x": 2, "y": 2}, {"x": 3}], [0, 1, 2]).names == ["x", "y"]
    assert Grid([{"x": 1, "y": 2}, {"x": 2, "y": 2}, {"x": 3}], [0, 1]).names == ["x"]


# -- the strategy ------------------------------------------------------------------------------------------------------


def test_the_first_look_covers_every_value_and_is_the_same_for_the_same_seed():
    first = PatternSearch(GEMM, KEPT, SearchPlan(seed="s")).first()
    assert first == PatternSearch(GEMM, KEPT, SearchPlan(seed="s")).first()
    assert first != PatternSearch(GEMM, KEPT, SearchPlan(seed="t")).first()
    grid = Grid(GEMM, KEPT)
    covered = set().union(*(grid.coverage(i) for i in first))
    assert covered == {(a, p) for a, values in enumerate(grid.axes.values()) for p in range(len(values))}
    assert len(first) == len(set(first)) == round(1.5 * math.sqrt(len(KEPT)))  # within 16..48


def test_seeds_come_first_and_only_kept_ones():
    pruned = next(i for i in range(len(GEMM)) if i not in KEPT)
    search = PatternSearch(GEMM, KEPT, SearchPlan(seed="s"), seeds=[KEPT[5], pruned, KEPT[3], KEPT[5]])
    assert search.first()[:2] == [KEPT[5], KEPT[3]]


def test_a_seeded_first_look_covers_and_draws_from_the_configs_earlier_keys_screened():
    """A campaign's later keys (issue 41): the configs an earlier key screened are compiled already, so a seeded
    search's first look covers every value and fills its random part from them first, and takes another config only
    for a value none of them has (here BLOCK_M = 256). An unseeded search (a campaign's first key) is unchanged.
    Before, the first look drew from the whole space whatever had been screened."""
    screened = [i for i in KEPT if GEMM[i]["BLOCK_M"] != 256][::2]
    seeds = screened[:2]
    first = PatternSearch(GEMM, KEPT, SearchPlan(seed="s"), seeds=seeds, preferred=screened).first()
    outside = [i for i in first if i not in screened]
    assert first[:2] == seeds and len(first) == len(set(first)) == round(1.5 * math.sqrt(len(KEPT)))
    assert len(outside) == 1 and GEMM[outside[0]]["BLOCK_M"] == 256, [GEMM[i] for i in outside]
    grid = Grid(GEMM, KEPT)
    covered = set().union(*(grid.coverage(i) for i in first))
    assert covered == {(a, p) for a, values in enumerate(grid.axes.values()) for p in range(len(values))}
    plain = PatternSearch(GEMM, KEPT, SearchPlan(seed="s")).first()
    assert PatternSearch(GEMM, KEPT, SearchPlan(seed="s"), preferred=screened).first() == plain
    assert len([i for i in plain if i not in screened]) > 1


@pytest.mark.parametrize("seed", range(12))
def test_the_search_finds_the_bottom_of_a_smooth_landscape_measuring_a_fraction(seed):
    time_of = bowl(seed)
    best = min(time_of(i) for i in KEPT)
    finalists, times = simulate(GEMM, KEPT, SearchPlan(seed=f"k{seed}"), time_of)
    assert min(time_of(i) for i in finalists) <= 1.03 * best  # the noise is 2%
    assert len(times) <= len(KEPT) // 3  # no cap: the evidence ends it well inside the space
    assert finalists == sorted(finalists) and len(finalists) == SearchPlan().finalists


def test_a_stage_takes_every_leaders_nearest_moves_before_any_leaders_farther_ones():
    search = PatternSearch(GEMM, KEPT, SearchPlan(seed="r", stage_cap=1000, max_measured=len(KEPT), max_samples=1))
    times = {i: bowl(5)(i) for i in search.first()}
    leaders = search.leaders(times, search.plan.leaders)
    rings = [search.grid.rings(leader) for leader in leaders]
    batch = search.next(times)
    nearest = {i for r in rings for i in r[0] if i not in times}
    assert nearest and set(batch[:len(nearest)]) == nearest
    assert set(batch) == {i for r in rings for ring in r for i in ring if i not in times}
    # before: the best leader's whole neighbourhood, its farthest line ends included, came before the others'
    # one-step moves, and a stage cut at 32 configs left those out


ORACLE = HERE.parent / "benchmarks" / "results" / "search" / "h100_call5" / "oracle5.json"


def replayed(ratios: dict[str, float], seeds: int) -> list[tuple[float, int]]:
    """(best finalist / best, configs screened) of the default search over a recorded landscape, per seed, with 2%
    noise on every screened time; configs as the tuned function's space holds them (MoE: dicts of six ints)."""
    specs = sorted(ratios)
    moe = [re.fullmatch(r"M(\d+)-N(\d+)-K(\d+)-G(\d+)-w(\d+)-s(\d+)", s) for s in specs]
    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    space = ([dict(zip(keys, map(int, m.groups()), strict=True)) for m in moe] if all(moe)
             else [{"config": s} for s in specs])
    best, runs = min(ratios.values()), []
    for seed in range(seeds):
        noise = random.Random(seed)
        noisy = {i: ratios[s] * (1 + 0.02 * noise.gauss(0, 1)) for i, s in enumerate(specs)}
        finalists, times = simulate(space, range(len(specs)), SearchPlan(seed=f"k{seed}"), noisy.get)
        runs.append((min(ratios[specs[i]] for i in finalists) / best, len(times)))
    return runs


@pytest.mark.parametrize("shape", ["gemm|256|840", "gemm|2048|840", "moe|256|1920"])
def test_on_recorded_h100_landscapes_the_best_config_reaches_the_finalists(shape):
    # every kept config's device time, measured once on an H100 (bench_search.py), screened with 2% noise. Before
    # (one leader's whole neighbourhood per stage, a sixth of the space, 8 finalists) the best was left out in 4 of
    # these 30 seeds at GEMM M = 256 (a 1.042-1.131 finalist instead), 12 of 100 in benchmarks/replay_search.py
    ratios = next(e["ratios"] for k, e in json.loads(ORACLE.read_text()).items() if k.endswith(shape))
    for seed, (found, screened) in enumerate(replayed(ratios, 30)):
        assert found <= 1.02 and screened <= len(ratios) // 2, (seed, found, screened)


CORPUS = HERE.parent / "benchmarks" / "results" / "corpus"


#: the corpus's config names with six numbers each: the MoE example's tiles and Triton GEMMs' (benchmarks/corpus.py)
TILE_NAMES = [re.compile(r"M(\d+)-N(\d+)-K(\d+)-G(\d+)-w(\d+)-s(\d+)$"),
              re.compile(r"(\d+)x(\d+)x(\d+)-g(\d+)-w(\d+)-s(\d+)$")]


def test_a_straggler_the_model_puts_near_the_finalists_is_not_left_out():
    """A deferred config still compiling when the search has nothing else to screen is left out when the model
    puts it far behind the finalists (``searched.contenders``). Before, "behind" meant predicted slower than the
    slowest finalist's screened time; but the additive model regresses to the space's mean and predicts the best
    configs slower than they read. Over every complete six-axis landscape of the H200 corpus (8 MoE, the rest
    GEMMs), each config within 1.02 of the best that a noise-free search screened, held out in turn, as if it were
    that straggler: the old rule left out 70 of 125; now (over 5 times the model's own prediction for the slowest
    finalist) none is left out."""
    from triton_dist_tune.function.searched import contenders

    held_out = old_rule = new_rule = 0
    for path in sorted(CORPUS.glob("gpu*.json")):
        for entry in json.loads(path.read_text()).values():
            specs = sorted(entry["ratios"])
            pattern = next((p for p in TILE_NAMES if all(p.match(s) for s in specs)), None)
            if pattern is None or entry.get("complete") is False:
                continue
            configs = [dict(zip("abcdef", map(int, pattern.match(s).groups()), strict=True)) for s in specs]
            ratios = [entry["ratios"][s] for s in specs]
            _, times = simulate(configs, range(len(configs)), SearchPlan(seed="s"), ratios.__getitem__)
            history = {i: [t] for i, t in times.items() if t is not None}
            for i in (i for i in history if ratios[i] <= 1.02 * min(ratios)):
                others = {j: samples for j, samples in history.items() if j != i}
                search = PatternSearch(configs, range(len(configs)), SearchPlan(seed="s"))
                held_out += 1
                named = search.predicted_faster(search.posterior(others).times, [i])  # None: no model, kept
                old_rule += named is not None and i not in named
                new_rule += i not in contenders(search, others, [i])
    assert held_out >= 100 and old_rule >= held_out // 3, (held_out, old_rule)  # what the old rule left out
    assert new_rule == 0, new_rule


@pytest.mark.parametrize("case", ["gpu0.json|gemm_k8192_n2048|256", "gpu2.json|gemm_fp16_bt|4096",
                                  "gpu3.json|moe|512", "gpu1.json|softmax|8192x8192"])
def test_on_the_recorded_corpus_the_best_finalist_is_within_2_percent(case):
    # one landscape of each family of the H200 corpus (benchmarks/corpus.py), each with one config alone within
    # 2% of the best or a runner-up 1.4-8.4% behind it: the landed search (4 leaders, capped at a fifth of the space,
    # no model) left 1.03-1.09x finalists on these in some seeds
    name, key = case.split("|", 1)
    ratios = next(e["ratios"] for k, e in json.loads((CORPUS / name).read_text()).items() if key in k)
    for seed, (found, _) in enumerate(replayed(ratios, 6)):
        assert found <= 1.02, (seed, found)


@pytest.mark.parametrize("case", ["gpu0.json|gemm_k8192_n2048|256", "gpu0.json|gemm_k4096_n4096|1024",
                                  "gpu3.json|moe|512"])
def test_a_corpus_landscape_written_as_nested_configs_is_searched_as_its_flat_form(case):
    # before, a nested mapping was one opaque axis of every config: the search screened the whole space; and a
    # triton.Config's num_ctas (1 in every config) was an axis of one value, which the model counted: other finalists
    # than the flat form's at M = 1024
    name, key = case.split("|", 1)
    ratios = next(e["ratios"] for k, e in json.loads((CORPUS / name).read_text()).items() if key in k)
    specs = sorted(ratios)
    numbers = [re.fullmatch(r"M?(\d+)[x-]N?(\d+)[x-]K?(\d+)-[gG](\d+)-w(\d+)-s(\d+)", s).groups() for s in specs]
    flat = [dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"), map(int, n),
                     strict=True)) for n in numbers]
    forms = [[{"gemm": {k: c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
               "launch": {"num_warps": c["num_warps"], "num_stages": c["num_stages"]}} for c in flat]]
    triton = pytest.importorskip("triton")
    forms.append([{"kernel": {"tile": triton.Config({k: c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
                                                    num_warps=c["num_warps"], num_stages=c["num_stages"])}}
                  for c in flat])
    written = json.dumps(forms[0])
    noisy = {i: ratios[s] * (1 + 0.02 * random.Random(i).gauss(0, 1)) for i, s in enumerate(specs)}
    finalists, times = simulate(flat, range(len(specs)), SearchPlan(seed="k"), noisy.get)
    for form in forms:
        assert Grid(form, range(4)).names[-1].endswith(".num_warps")  # one axis per parameter, named by its path
        nested_finalists, nested_times = simulate(form, range(len(specs)), SearchPlan(seed="k"), noisy.get)
        assert (nested_finalists, list(nested_times)) == (finalists, list(times))  # the same configs, same order
        assert len(nested_times) <= 0.35 * len(specs), len(nested_times)  # about a fifth
    assert json.dumps(forms[0]) == written  # the configs as written: the grid reads a copy


def test_a_first_look_that_only_fails_goes_on_through_untried_configs_until_one_works():
    # before: no leaders, so no next stage: the tuning raised AllConfigsFailedError after the first look
    search = PatternSearch(GEMM, KEPT, SearchPlan(seed="x"))
    first = search.first()
    working = [i for i in KEPT if i not in first][-5:]
    finalists, times = simulate(GEMM, KEPT, SearchPlan(seed="x"), lambda i: 1.0 + i / 1e4 if i in working else None)
    assert set(working) <= set(times) and set(finalists) <= set(working) and finalists
    _, times = simulate(GEMM, KEPT, SearchPlan(seed="x", max_measured=40), lambda i: None)
    assert len(times) == len(KEPT)  # every kept config tried before the search gives up, past its cap


def test_the_model_adds_configs_it_predicts_faster_and_checks_a_bounded_number_of_times():
    # two separate basins: the leaders' neighbourhoods settle in one; the additive model, fitted to everything
    # screened, points at the other
    def time_of(i):
        c = GEMM[i]
        bm, bn, w, st = c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]
        return 1.0 + 0.1 * abs(bm - 64) / 64 + 0.1 * abs(bn - 128) / 128 + (0.0 if (w, st) == (8, 5) else 0.05)
    search = PatternSearch(GEMM, KEPT, SearchPlan(seed="m", model_rounds=2))
    times: dict = {}
    batch = search.first()
    while batch:
        times.update({i: time_of(i) for i in batch})
        batch = search.next(times)
    assert 1 <= search.checks <= 2
    assert min(times.values()) == min(time_of(i) for i in KEPT)


def test_failed_configs_are_never_leaders_and_the_search_ends_at_a_given_cap():
    time_of = bowl(3)
    finalists, times = simulate(GEMM, KEPT, SearchPlan(seed="f", max_measured=70),
                                lambda i: None if i % 3 == 0 else time_of(i))
    assert all(i % 3 for i in finalists) and len(times) <= 70


def _gauss_landscape(key: str):
    """One recorded H200 landscape of the corpus (its configs as the tuned function holds them) and its ratios."""
    name, part = key.split("|", 1)
    ratios = next(e["ratios"] for k, e in json.loads((CORPUS / name).read_text()).items() if part in k)
    specs = sorted(ratios)
    return [{"config": s} for s in specs], [ratios[s] for s in specs]


def test_simulate_takes_a_fresh_sample_for_every_sample_the_search_takes():
    # issue 39: a replay draws fresh noise per sample, so simulate calls time_of once per sample, a config sampled
    # again once more; the same draws replay the same search exactly
    time_of = bowl(2)
    calls: list[int] = []

    def counted(i: int) -> float:
        calls.append(i)
        return time_of(i) * (1 + 0.05 * random.Random(f"{i}/{calls.count(i)}").gauss(0, 1))

    finalists, times = simulate(GEMM, KEPT, SearchPlan(seed="p"), counted)
    assert set(calls) == set(times) and len(calls) > len(times)  # some configs sampled twice or more
    assert max(calls.count(i) for i in times) <= SearchPlan().max_samples
    first = list(calls)
    calls.clear()
    assert simulate(GEMM, KEPT, SearchPlan(seed="p"), counted) == (finalists, times) and calls == first
    calls.clear()
    simulate(GEMM, KEPT, SearchPlan(seed="p", max_samples=1), counted)
    assert len(calls) == len(set(calls))  # one sample each: the screening as before


def test_under_10_percent_noise_per_sample_the_best_config_still_reaches_the_finalists():
    # one sample per config (before issue 39) left the best finalist more than 2% behind in 5 of these 16 replays
    # (10% Gaussian noise drawn afresh per sample, a needle landscape: one config within 2% of the best)
    configs, ratios = _gauss_landscape("gpu0.json|gemm_k4096_n4096|1024")
    misses = {}
    for plan in (SearchPlan(), SearchPlan(max_samples=1)):
        missed = 0
        for seed in range(16):
            noise = random.Random(f"g10/{seed}")
            finalists, _ = simulate(configs, range(len(configs)), replace(plan, seed=f"k{seed}"),
                                    lambda i: ratios[i] * (1 + 0.10 * noise.gauss(0, 1)))
            missed += min(ratios[i] for i in finalists) > 1.02 * min(ratios)
        misses[plan.max_samples] = missed
    assert misses[SearchPlan().max_samples] <= 2 and misses[1] >= 4, misses


def test_a_spiked_sample_of_the_best_config_is_taken_again_and_a_quiet_space_pays_little():
    time_of = bowl(4)
    best = min(KEPT, key=time_of)
    seen: list[int] = []

    def spiked(i: int) -> float:  # the best config's first sample read 60% high (a collective waited on a rank)
        seen.append(i)
        return time_of(i) * (1.6 if i == best and seen.count(i) == 1 else 1.0)

    finalists, times = simulate(GEMM, KEPT, SearchPlan(seed="s"), spiked)
    assert best in finalists and seen.count(best) >= 2
    spike = {best: 1.6}
    before, _ = simulate(GEMM, KEPT, SearchPlan(seed="s", max_samples=1), lambda i: time_of(i) * spike.get(i, 1.0))
    assert best not in before  # one sample: the spike kept it out
    # the same landscape, quiet (2% noise of its own, replayed identically): a few second samples, no more
    seen.clear()
    simulate(GEMM, KEPT, SearchPlan(seed="s"), lambda i: seen.append(i) or time_of(i))
    assert len(seen) <= 1.1 * len(set(seen))


def test_once_a_pair_shows_a_spike_a_spiked_config_next_to_a_finalist_is_taken_again():
    # issue 39: a recorded GEMM landscape whose steps between neighbours are large (their 90th percentile is over 2x,
    # so a spike of +70% does not read as a jump), 2% Gaussian noise, and the best config's one screening sample
    # spiked x1.7. Once one config's second sample reads spiked (x1.5: 5 deviations from its first), every config
    # next to a finalist sampled once is sampled again, and the best reaches the finalists (before: in none of these
    # 4 draws; a 1.027-1.035x finalist)
    configs, ratios = _gauss_landscape("gpu1.json|gemm_k2048_n8192|1024")
    best = min(range(len(ratios)), key=ratios.__getitem__)
    for draw in "abcd":
        taken: list[int] = []
        evidence: list[int] = []

        def spiked(i: int) -> float:
            taken.append(i)
            n = taken.count(i)
            factor = 1.7 if i == best and n == 1 else 1.0
            if n == 2 and i != best and evidence in ([], [i]):  # the first other config sampled twice
                evidence[:] = [i]
                factor = 1.5
            return ratios[i] * factor * (1 + 0.02 * random.Random(f"{draw}{i}/{n}").gauss(0, 1))

        finalists, _ = simulate(configs, range(len(configs)), SearchPlan(seed="k0"), spiked)
        assert evidence and taken.count(best) >= 2 and best in finalists, (draw, taken.count(best))


def test_after_a_spike_only_configs_that_a_spike_that_large_could_hide_are_taken_again():
    """The rule "next to a finalist after a spike" took every config next to a finalist read once, however far
    behind: on one H200 (of a 2-GPU host, GEMM M = 1024) pairs up to 13% apart took 46 configs again, in a 3.46 s
    key. A config read once further behind the best than twice the largest spike seen (in log time,
    with the noise band: 1.3 seen, so 1.69) is left; one within it is taken again."""
    search = PatternSearch(GEMM, KEPT, SearchPlan(seed="s"))
    grid = search.grid
    best = KEPT[len(KEPT) // 2]
    ring = [j for j in grid.rings(best)[0] if j in KEPT]
    near, far, spiked = ring[0], ring[1], ring[2]
    # the other finalists, each read twice alike, in steps of 1.45x between neighbours (no rise of 1.9x reads as a jump)
    others = [i for i in KEPT if i not in ring and i != best][:10]
    history = {best: [1.0, 1.0], spiked: [1.0, 1.3], near: [1.6], far: [1.9],
               **{i: [1.45 if k % 2 else 1.0] * 2 for k, i in enumerate(others)}}
    post = Posterior({i: min(h) for i, h in history.items()}, {}, None)
    ranked = sorted(history, key=lambda i: (min(history[i]), i))
    reasons = search._uncertain(ranked, post, history, 0.02)
    assert reasons.get(near) == "next to a finalist after a spike" and far not in reasons, reasons
    quiet = {**history, spiked: [1.0, 1.01]}  # no spike seen: neither is taken again
    assert near not in search._uncertain(ranked, post, quiet, 0.02)


def test_the_log_says_which_rule_took_each_sample_again():
    """On one H200 a GEMM tuning at M = 256 sampled 87 configs again where two others of the same key sampled 9 and
    11, and took 3.15 s against 2.6 (``benchmarks/results/session_h200_25``, call 4): the line now says which rule of
    step 4 asked for them. A spike seen in a pair takes the configs next to a finalist again, and the line says so."""
    configs, ratios = _gauss_landscape("gpu1.json|gemm_k2048_n8192|1024")
    for spike in (1.5, 1.0):
        taken: list[int] = []

        def sample(i: int) -> float:
            taken.append(i)
            n = taken.count(i)
            factor = spike if n == 2 and len([j for j in set(taken) if taken.count(j) >= 2]) == 1 else 1.0
            return ratios[i] * factor * (1 + 0.02 * random.Random(f"{i}/{n}").gauss(0, 1))

        search = PatternSearch(configs, range(len(configs)), SearchPlan(seed="k0"))
        run_search(search, sample)
        assert sum(search.again.values()) == search.resampled == len(taken) - len(set(taken))
        assert set(search.again) <= set(RESAMPLE_REASONS) and search.again["noise pairs"] >= 1
        spiked = search.again.get("next to a finalist after a spike", 0)
        assert (spiked >= 5) if spike > 1 else (spiked == 0), search.again
    record = SearchRecord(kept=100, resampled=5, again={"noise pairs": 3, "the best": 2})
    assert "5 sampled again (3 noise pairs, 2 the best)" in record.text()


def test_a_config_with_two_spiked_samples_of_four_keeps_the_time_of_its_clean_ones():
    # issue 39: the best config read 1.0, then x1.45 and x1.7 (two spikes: a collective waited on a late rank twice),
    # then 1.0 again; the median of its four (1.22) put it out of the finalists (before: a 1.031x finalist in all 4
    # draws). Samples further above the least than the noise ever reads (5 deviations) no longer count
    configs, ratios = _gauss_landscape("gpu0.json|gemm_k4096_n4096|1024")
    best = min(range(len(ratios)), key=ratios.__getitem__)
    for draw in "abcd":
        taken: list[int] = []

        def spiked(i: int) -> float:
            taken.append(i)
            n = taken.count(i)
            factor = {2: 1.45, 3: 1.7}.get(n, 1.0) if i == best else 1.0
            return ratios[i] * factor * (1 + 0.02 * random.Random(f"{draw}{i}/{n}").gauss(0, 1))

        finalists, _ = simulate(configs, range(len(configs)), SearchPlan(seed="k0"), spiked)
        assert taken.count(best) == 4 and best in finalists, (draw, taken.count(best))


def test_when_the_search_applies_and_plans_are_checked():
    assert not search_applies("auto", SEARCH_ABOVE) and search_applies("auto", SEARCH_ABOVE + 1)
    assert search_applies("search", 2) and not search_applies("search", 1)
    assert not search_applies("exhaustive", 10_000)
    with pytest.raises(ValueError):
        SearchPlan(leaders=0)
    with pytest.raises(BadInputError, match="search must be one of"):
        TuneOptions(search="fast")
    with pytest.raises(BadInputError, match="TRITON_DIST_AUTOTUNE_SEARCH"):
        Settings.from_env({"TRITON_DIST_AUTOTUNE_SEARCH": "always"})
    assert Settings.from_env({"TRITON_DIST_AUTOTUNE_SEARCH": " Exhaustive"}).search == "exhaustive"


# -- on real ranks -----------------------------------------------------------------------------------------------------


def test_a_600_config_collective_function_is_searched_alike_on_ranks_whose_noise_differs(tmp_path):
    results = run_ranks(CASES, 2, ["smooth"], env=tuner_env(tmp_path, 60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, other = (r.results[0] for r in results)
    assert mine["order"] == other["order"]  # the same configs in the same order (rank 1 had 20% noise)
    assert mine["chosen"] == other["chosen"]
    assert mine["chosen_ms"] <= 1.10 * mine["best_ms"]
    assert mine["calls"] <= 2.5 * 600  # calls of the function, all configs' together
    assert len(mine["screened"]) < 600 / 2  # no fixed cap: the evidence ends it (244 of 600 seen)
    # timed on the host, eagerly: every screened config's warm-up probe counted as a sample beside its own
    assert min(mine["samples"]) >= 2, mine["samples"]
    assert re.match(r"search: \d+ of 600 configs screened(, \d+ sampled again \(\d+ [a-z ,\d]+\))? in \d+ stage\(s\), "
                    r"\d+ finalists raced", mine["search"])


@pytest.mark.timeout(240)
def test_the_search_summary_is_the_same_on_every_rank_in_memory_in_the_logs_and_in_the_cache(tmp_path):
    """Rank 1's rank log has a handler that takes 0.3 s over the finalists' race record, so that its own seconds of
    the search run 0.3 s past rank 0's. Before: each rank's decision, its ``search:`` line and its decision line
    carried its own seconds (rank 0's 1.2 s, rank 1's 1.5 s), the cache file rank 0's. Now every rank holds rank
    0's summary, the one in the cache file, and logs it."""
    results = run_ranks(CASES, 2, ["slow_log"], env=tuner_env(tmp_path, 60), timeout=200)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, other = (r.results[0] for r in results)
    assert mine["chosen"] == other["chosen"]
    assert re.match(r"search: \d+ of 600 configs screened.* \d+ finalists raced, \d+\.\d\d s", mine["search"])
    assert other["search"] == mine["search"]
    (cached,) = (tmp_path / "cache").rglob("*.json")
    assert json.loads(cached.read_text())["search"] == mine["search"]
    for rank in (0, 1):  # the summary's own line and the decision line, in both of each rank's logs
        text = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        records = [json.loads(line)["message"] for line in
                   (tmp_path / "logs" / f"rank-{rank}.jsonl").read_text().splitlines()]
        for lines in (text.splitlines(), records):
            said = [line for line in lines if "search: " in line and "[slow_log key=0]" in line]
            assert len(said) == 2 and all(line.endswith(mine["search"]) or f"; {mine['search']}" in line
                                          for line in said), (rank, said, mine["search"])


@pytest.mark.timeout(300)
def test_four_ranks_whose_noise_differs_search_the_600_config_function_alike(tmp_path):
    results = run_ranks(CASES, 4, ["smooth"], env=tuner_env(tmp_path, 60), timeout=280)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, *others = (r.results[0] for r in results)
    for other in others:  # the same configs in the same order, the same choice (ranks 1-3 had 10-20% noise)
        assert (other["order"], other["chosen"], other["calls"]) == (mine["order"], mine["chosen"], mine["calls"])
    # times are on the virtual clock (load cannot reorder configs): the same 10% bound as on 2 ranks
    assert mine["chosen_ms"] <= 1.10 * mine["best_ms"]
    assert len(mine["screened"]) < 600 / 2  # no fixed cap: the evidence ends it (244 of 600 seen)


def test_a_search_killed_mid_way_resumes_without_measuring_a_config_twice(tmp_path):
    env = tuner_env(tmp_path, 30, SEARCH_CALLS=str(tmp_path / "calls"))
    first = run_ranks(CASES, 2, ["killed"], env={**env, "SEARCH_ATTEMPT": "1"}, timeout=200)
    assert first[0].returncode == -9, describe(first)  # every rank killed itself; rank 1 may have seen rank 0 go
    second = run_ranks(CASES, 2, ["killed"], env={**env, "SEARCH_ATTEMPT": "2"}, timeout=200)
    assert all(r.returncode == 0 for r in second), describe(second)
    result, other = second[0].results[0], second[1].results[0]
    assert (result["chosen"], result["finalists"]) == (other["chosen"], other["finalists"])
    # the same search on both ranks: the same summary (the seconds rank 0's)
    assert result["search"] == other["search"]
    assert re.search(r"\((\d+) from the journal\)", result["search"])
    # every config's outcome lines across both attempts (rank 0's log): one per screening sample the search kept
    # for it (a config sampled again has two or three), none measured again by the second attempt; a finalist is
    # raced once more at the end
    log = (tmp_path / "logs" / "rank-0.log").read_text()
    counts: dict[int, int] = {}
    for index in re.findall(r"\[killed key=0\] config (\d+) (?:measured|stopped|FAILED)", log):
        counts[int(index)] = counts.get(int(index), 0) + 1
    finalists = {int(i) for i in re.findall(r"search finalists: ([\d ]+)", log)[-1].split()}
    assert len(finalists) >= SearchPlan().finalists and set(result["finalists"]) <= finalists
    screened = {int(i): n for i, n in result["screened"].items()}
    assert any(n > 1 for n in screened.values())  # the search sampled some configs again
    over = {i: n for i, n in counts.items() if n > (SearchPlan().max_samples + 1 if i in finalists else screened[i])}
    assert not over, (over, finalists)
    attempts = [line.split() for line in (tmp_path / "calls.rank0").read_text().splitlines()]
    assert {a for a, _, _ in attempts} == {"1", "2"}  # the attempt, the config, whether in a steady sample


def test_ranks_that_disagree_on_the_search_mode_get_the_same_clear_error(tmp_path):
    results = run_ranks(CASES, 2, ["mismatch"], env=tuner_env(tmp_path, 20), timeout=120,
                        per_rank_env={1: {"TRITON_DIST_AUTOTUNE_SEARCH": "exhaustive"}})
    assert all(r.returncode == 0 for r in results), describe(results)
    errors = [r.results[0]["error"] for r in results]
    assert errors[0] == errors[1] and "TRITON_DIST_AUTOTUNE_SEARCH" in errors[0], errors


@pytest.mark.triton_dependent
def test_contextual_autotune_searches_an_inner_kernel_of_120_configs_alike_on_every_rank(tmp_path):
    results = run_ranks(HERE / "scenarios" / "contextual_search_cases.py", 2, ["landscape"],
                        env=tuner_env(tmp_path, 60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, other = (r.results[0] for r in results)
    assert mine == other
    assert mine["ok"] and mine["chosen_ms"] <= 1.10 * mine["best_ms"]
    # the search ends on evidence (every leader's neighbourhood screened, the model's checks), before the whole
    # space, in far fewer runs than the limit of 1000
    assert mine["launched"] < len(range(120)) and mine["runs"] < 300
    assert "skipped" in mine["states"]  # the configs the search did not reach


@pytest.mark.timeout(300)
def test_contextual_autotune_searches_alike_on_four_ranks_whose_noise_differs(tmp_path):
    results = run_ranks(HERE / "scenarios" / "contextual_search_cases.py", 4, ["noisy"],
                        env=tuner_env(tmp_path, 60), timeout=280)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, *others = (r.results[0] for r in results)
    assert all(other == mine for other in others)  # the same configs launched, runs and choice on every rank
    assert mine["ok"] and mine["launched"] < 120 and "skipped" in mine["states"]
    # times are on the virtual clock (load cannot reorder configs): the same 10% bound as on 2 ranks
    assert mine["chosen_ms"] <= 1.10 * mine["best_ms"]


def test_a_config_written_as_a_string_of_numbers_or_a_triton_config_is_a_point_of_its_numbers():
    specs = [f"{m}x{n}x64-g8-w{w}-s3" for m in (16, 32, 64) for n in (32, 64) for w in (4, 8)]
    grid = Grid([{"gemm": s} for s in specs], range(len(specs)))
    assert grid.names == ["gemm#0.BLOCK", "gemm#1.BLOCK", "gemm#4"]  # 64, g8 and s3 in every config: no axes
    found = sorted(specs[i] for i in grid.neighbours(specs.index("32x32x64-g8-w4-s3")))
    assert found == ["16x32x64-g8-w4-s3", "16x64x64-g8-w4-s3", "32x32x64-g8-w8-s3", "32x64x64-g8-w4-s3",
                     "64x32x64-g8-w4-s3", "64x64x64-g8-w4-s3"]
    triton = pytest.importorskip("triton")
    space = [{"cfg": triton.Config({"BLOCK_M": m}, num_warps=w)} for m in (16, 32) for w in (4, 8)]
    assert "cfg.BLOCK_M" in Grid(space, range(4)).names and "cfg.num_warps" in Grid(space, range(4)).names
    # configs that differ in maxnreg (or a pre_hook) alone are points of their own: before, 6 configs were 2 points
    space = [{"cfg": triton.Config({"BLOCK_M": m}, maxnreg=r)} for m in (16, 32) for r in (None, 128, 255)]
    grid = Grid(space, range(6))
    assert "cfg.maxnreg" in grid.names and len(grid.at) == 6, grid.names
    assert sorted(grid.neighbours(1)) == [0, 2, 4], grid.names  # along maxnreg and BLOCK_M


def test_a_move_pruning_forbids_is_repaired_and_a_whole_line_is_reached():
    # BLOCK_K 64 -> 128 does not fit at 5 stages: the repaired move takes 128 at 4 stages; a line of 4 tile sizes
    # reaches the farthest too (after the nearer moves and the pairs)
    space = [dict(BLOCK_M=m, BLOCK_K=k, stages=s) for m in (16, 32, 64, 128) for k in (64, 128) for s in (4, 5)]
    kept = [i for i, c in enumerate(space) if not (c["BLOCK_K"] == 128 and c["stages"] == 5)]
    grid = Grid(space, kept)
    at = {(c["BLOCK_M"], c["BLOCK_K"], c["stages"]): i for i, c in enumerate(space)}
    order = [(space[i]["BLOCK_M"], space[i]["BLOCK_K"], space[i]["stages"]) for i in grid.neighbours(at[(16, 64, 5)])]
    assert (16, 128, 4) in order  # repaired: one stage fewer
    assert order.index((32, 64, 5)) < order.index((64, 64, 5)) < order.index((128, 64, 5))


@pytest.mark.triton_dependent
def test_contextual_autotune_races_every_config_when_asked_and_checks_the_option(tmp_path):
    results = run_ranks(HERE / "scenarios" / "contextual_search_cases.py", 2, ["landscape_exhaustive"],
                        env=tuner_env(tmp_path, 60), timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    mine, other = (r.results[0] for r in results)
    assert mine["chosen"] == other["chosen"] and mine["ok"]
    assert mine["launched"] == 120 and "skipped" not in mine["states"]
    from triton_dist_tune import contextual_autotune

    with pytest.raises(BadInputError, match="search must be one of"):
        contextual_autotune(search="all")(lambda: None)


def test_a_contextual_search_is_seeded_by_decided_keys_and_the_perf_model():
    from dataclasses import replace

    from triton_dist_tune.contextual.schedule import Track
    from triton_dist_tune.contextual.stages import estimated_best
    from triton_dist_tune.contextual.tracks import TrackInfo

    params = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w} for m in (16, 32, 64, 128) for n in (16, 32, 64, 128)
              for w in (2, 4, 8, 16, 32)]  # 80 configs: searched
    estimates = {i: float(100 - i) for i in range(80)}  # the perf model likes the last configs best
    info = TrackInfo(name="k", descriptions=[f"c{i}" for i in range(80)], entry="e", space_text="",
                     pruned=list(range(80)), pruning=(list(range(80)), estimates, 80), params=params)
    infos = {0: info, 1: replace(info, pruning=(list(range(80)), {**estimates, 5: 0.5}, 80))}
    assert estimated_best(infos, list(range(80))) == [79, 78, 77, 76]  # the largest estimate over ranks: 5 is not
    track = Track("mod.k", "(1,)", infos, 1, 2, seeds=[42])
    assert track.stages.search is not None and track.stages.batch[:5] == [42, 79, 78, 77, 76]
    assert track.current() == 42
    plain = Track("mod.k", "(1,)", {r: replace(info, pruning=None) for r in (0, 1)}, 1, 2)
    assert plain.stages.batch[:4] != [79, 78, 77, 76]  # without a perf model and seeds: the covering first look


def test_on_one_rank_with_a_device_clock_configs_far_behind_are_screened_by_their_probe_alone(tmp_path):
    (result,) = run_ranks(CASES, 1, ["far_behind"], env=tuner_env(tmp_path, 60), timeout=240)
    assert result.returncode == 0, describe([result])
    found = result.results[0]
    calls = {int(i): n for i, n in found["calls"].items()}
    ms, true_ms = ({int(i): t for i, t in found[k].items()} for k in ("ms", "true_ms"))
    fastest = min(true_ms.values())
    # the warm-up (one run, then a probe: 3 timed calls for the first config, one after a config of 0.5 ms or more:
    # every config here takes 2-8 ms) and nothing else. A steady sample takes 5 ms of settling and 5 ms of span
    # (at least 2 + 2 calls of a config of 3 ms or less, those near the best), so a sampled config near the best
    # makes 5 calls or more
    probed = {i for i in calls if calls[i] <= 4 and i not in set(found["finalists"])}
    assert probed and all(true_ms[i] > 1.5 * fastest for i in probed), (probed, fastest)
    assert all(calls[i] >= 5 for i in calls if true_ms[i] <= 1.5 * fastest)  # those near the best: sampled
    assert all(abs(ms[i] / true_ms[i] - 1) < 0.01 for i in probed)  # the probe reads the config's time
    assert re.search(r"\d+ screened by their probe alone", found["search"]), found["search"]
    assert found["chosen_ms"] <= 1.10 * found["best_ms"]


def test_a_probe_is_far_behind_over_one_and_a_half_times_the_best_raced_configs_probe_widened_where_host_bound():
    screen = ProbeScreen()
    first = {1: 2.0, 2: 3.5, 3: 2.9, 4: 6.0}
    screen.probed(first)
    assert screen.far(first) == [2, 4]  # candidates: over 1.5x the fastest probe (2.0)
    assert screen.stand_ins(first, [2, 4]) == {}  # no config raced yet: the candidates are raced too
    for probe, sample in ((2.0, 1.9), (2.9, 2.755)):  # the stage's others, raced first: 0.95 of their probe
        screen.raced(probe, sample)
    assert screen.stand_ins(first, [2, 4]) == {2: 3.5 * 0.95, 4: 6.0 * 0.95}
    later = {5: 2.95, 6: 3.1, 7: 0.5}  # config 7's probe misread low: the reference stays the best raced's probe
    screen.probed(later)
    assert screen.far(later) == [5, 6]  # over 1.5x the fastest probe (now 0.5): candidates
    assert screen.stand_ins(later, [5, 6]) == {6: 3.1 * 0.95} and screen.indices == {2, 4, 6}  # over 1.5 x 2.0 only
    host = ProbeScreen()  # host-bound probes: samples read 0.3-0.4 of them, 0.15 after a host stall
    host.probed(first)
    host.raced(2.0, 0.6)
    assert host.host_bound and host.stand_ins(first, [2, 4]) == {}  # the first stage races every config
    for ratio in (0.35, 0.4, 0.33, 0.38, 0.31, 0.36, 0.34, 0.37, 0.15):
        host.raced(5.0, ratio * 5.0)
    host.probed({8: 6.5, 9: 7.5})
    # the bar: 1.5 x spread (0.345 / 0.15 = 2.3) x the best raced config's probe (2.0) = 6.9, not 3.0
    assert abs(host.spread - 2.3) < 1e-9 and host.stand_ins({8: 6.5, 9: 7.5}, [8, 9]) == {9: 7.5 * host.scale}


def test_the_best_raced_configs_own_low_probe_puts_no_config_near_it_far_behind():
    """On one H200 the MoE example at M = 32 read probes of about 1.9 times its configs' device time, but its best
    raced config's 1.5 times; 17 configs within 1.05 of the best then stood in by their probe alone
    (``benchmarks/results/session_h200_25``, call 4). The bar's reference is at least what a probe of the best's
    time reads: that time over the median sample / probe."""
    screen = ProbeScreen()
    screen.probed({1: 0.088, 2: 0.1, 3: 0.11, 4: 0.2, 5: 0.21})
    for probe, sample in ((0.088, 0.059), (0.1, 0.06), (0.11, 0.066), (0.2, 0.12), (0.21, 0.122)):
        screen.raced(probe, sample)
    assert abs(screen.scale - 0.6) < 1e-9 and not screen.host_bound  # device-bound
    assert abs(screen.spread - 0.6 / (0.122 / 0.21)) < 1e-9  # probes read their configs alike: about the plain bar
    assert abs(screen.reference - 0.059 / 0.6) < 1e-9  # not its own probe, 0.088
    later = {6: 0.14, 7: 0.2}  # 6's probe reads a config 1.4 times the best's time, scaled
    screen.probed(later)
    assert screen.far(later) == [6, 7]  # over 1.5x the fastest probe: candidates
    # the bar 1.5 x 1.03 x 0.0983 = 0.152; with the best's own probe as the reference it would be 0.136
    assert screen.stand_ins(later, [6, 7]) == {7: 0.2 * 0.6}


def test_where_probes_read_their_configs_unlike_a_device_bound_bar_widens_by_their_spread():
    """On one H200 the MoE example at M = 32 read samples 0.60-0.65 of their probes (device-bound by
    ``HOST_BOUND``), but its probes 1.33-2.23 times the configs' device time (10-90%): under the plain bar, 13 of
    the 38 configs that 3 tunings screened by their probe alone were within 1.05 of the best
    (``benchmarks/results/session_h200_26``, call 1). The first stage's ratios of sample to probe measure that
    spread wherever the probes are, and the bar widens by it."""
    screen = ProbeScreen()
    ratios = (0.75, 0.7, 0.68, 0.65, 0.62, 0.6, 0.6, 0.58, 0.5, 0.45)  # sample / probe of the first stage's configs
    first = {i: 0.06 / r for i, r in enumerate(ratios)}  # each sample 0.06 ms: configs near the best
    screen.probed(first)
    for probe in first.values():
        screen.raced(probe, 0.06)
    assert not screen.host_bound and abs(screen.spread - 0.61 / 0.45) < 1e-9
    near = {20: 1.7 * screen.reference, 21: 2.1 * screen.reference}  # 20: a near-best config whose probe read high
    screen.probed(near)
    assert screen.far(near) == [20, 21]
    assert screen.stand_ins(near, [20, 21]) == {21: near[21] * screen.scale}  # the bar 1.5 x 1.36 x the reference


def test_a_fast_call_probed_in_one_call_widens_no_bar():
    """A fast call probed in one call reads the host's launch on top: on one H200 the MoE example's first stage at
    M = 512 / 1024 read 4-9 such ratios of sample to probe of 0.52-0.78 beside 0.77-0.85 for three-call probes, and
    they widened the bar's spread from 1.11-1.24 to 1.29-1.46 (``benchmarks/results/session_h200_26``, call 2). Such a
    probe is never judged by the bar, so it counts in neither the spread nor the scale."""
    screen = ProbeScreen()
    first = {i: 0.1 for i in range(10)}  # ten three-call probes of 0.1 ms ...
    first.update({10: 0.16, 11: 0.17})  # ... and two fast calls probed once, after a slow config
    screen.short.update({10, 11})
    screen.probed(first)
    for i in range(10):
        screen.raced(0.1, 0.08 + 0.0005 * i, i)
    screen.raced(0.16, 0.078, 10)  # the best sample, read 0.49 of its probe
    screen.raced(0.17, 0.085, 11)
    assert abs(screen.scale - 0.8225) < 1e-9 and abs(screen.spread - 0.8225 / 0.8) < 1e-9  # not 0.8225 / 0.49
    assert abs(screen.reference - 0.078 / 0.8225) < 1e-9  # the best's time over the scale, not its own probe
    later = {20: 0.16, 21: 0.14}
    screen.probed(later)
    assert screen.stand_ins(later, [20, 21]) == {20: 0.16 * screen.scale}  # the bar 1.5 x 1.03 x 0.095 = 0.146


def test_a_fast_call_probed_in_one_call_is_never_far_behind():
    """One call suits a device-bound probe only: on one H200, fast calls probed in one call (after a slow config)
    read 1.15-1.67 times their device time, and were the probes of every near-best config screened by its probe
    alone in 15 tunings (``benchmarks/results/session_h200_24``, call 6). A slow call probed once still may be."""
    screen = ProbeScreen()
    probes = {1: 0.05, 2: 0.09, 3: 0.09, 4: 0.8}
    screen.short.add(2)  # probed in one call after a slow config, read 0.09 ms: the host's launch on top
    screen.probed(probes)
    assert screen.far(probes) == [3, 4]


def test_a_config_screened_by_its_probe_alone_is_never_sampled_again():
    # issue 39: on one H200 a stand-in (a far-behind config's probe, scaled) that the search sampled again gave a
    # pair of a probe and a sample, and 29 such pairs read 88% screening noise. Replayed with probes that read each
    # config 0-10% high and spiked noise (the rule that samples again every config next to a finalist): before,
    # 20-30 stand-ins per run were sampled in a later stage
    configs, ratios = _gauss_landscape("gpu0.json|gemm_k4096_n4096|1024")
    for draw in "ab":
        events: list[tuple[str, int]] = []

        def noisy(i: int) -> float:
            events.append(("sample", i))
            n = sum(1 for e in events if e == ("sample", i))
            r = random.Random(f"{draw}{i}/{n}")
            return ratios[i] * (1 + 0.02 * r.gauss(0, 1)) * (1.5 if r.random() < 0.05 else 1.0)

        def probe(i: int) -> float:
            events.append(("probe", i))
            return ratios[i] * (1 + 0.1 * random.Random(f"p{draw}{i}").random())

        finalists, times = simulate(configs, range(len(configs)), SearchPlan(seed="k0"), noisy, probe_of=probe)
        stage, probed_in, first_sample_in = 0, {}, {}  # a stage's probes come first, then its samples
        for n, (kind, i) in enumerate(events):
            stage += kind == "probe" and n > 0 and events[n - 1][0] == "sample"
            (probed_in if kind == "probe" else first_sample_in).setdefault(i, stage)
        # a config first sampled in a later stage than its probe's: its stand-in was sampled again
        again = [i for i, stage in first_sample_in.items() if stage > probed_in[i]]
        stand_ins = set(times) - set(first_sample_in)
        assert len(stand_ins) >= 50 and not again, (len(stand_ins), again)
        assert min(ratios[i] for i in finalists) <= 1.02 * min(ratios)


def test_where_probes_read_the_host_only_configs_far_behind_beyond_the_host_stalls_get_a_stand_in(tmp_path):
    # the MoE example's probes on an H200 read 1.4-8x its graphs' device time, and a host stall put configs near
    # the best "far behind" (before: 26 of 156 screened configs got a stand-in, 23 of them within 1.5x of the best)
    (result,) = run_ranks(CASES, 1, ["far_behind_host_probe"], env=tuner_env(tmp_path, 60), timeout=240)
    assert result.returncode == 0, describe([result])
    found = result.results[0]
    stand_ins = found["stand_ins"]
    assert all(ms > 1.5 * found["best_ms"] for ms in stand_ins.values()), (found["best_ms"], stand_ins)
    assert found["chosen_ms"] <= 1.02 * found["best_ms"] and "probes: samples read" in found["search"]


def test_a_resumed_search_keeps_an_earlier_attempts_stand_ins_as_bounds_and_counts_them(tmp_path):
    # before: the resumed attempt read the first attempt's stand-ins (configs screened by their probe alone) as
    # ordinary samples, free to be sampled again, and its summary counted only its own stand-ins (7 of 47)
    env = tuner_env(tmp_path, 60, SEARCH_CALLS=str(tmp_path / "calls"), SEARCH_KILL="140")
    first = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "1"}, timeout=240)
    assert first[0].returncode == -9, describe(first)
    (second,) = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "2"}, timeout=240)
    assert second.returncode == 0, describe([second])
    calls: dict[tuple[int, int], list[int]] = {}  # (attempt, config): whether each call was in a steady sample
    for line in (tmp_path / "calls.rank0").read_text().splitlines():
        attempt, index, in_sample = map(int, line.split())
        calls.setdefault((attempt, index), []).append(in_sample)
    probed_first = {i for (a, i), s in calls.items() if a == 1 and not any(s)}
    stand_ins = {i for (a, i), s in calls.items() if not any(s) and not any(calls.get((3 - a, i), []))}
    # a config only probed by the first attempt and sampled, with no warm-up, by the second: a stand-in sampled again
    again = {i for (a, i), s in calls.items() if a == 2 and i in probed_first and all(s)}
    found = second.results[0]
    assert re.search(r"\(\d+ from the journal\)", found["search"]), found["search"]
    probed = re.search(r"(\d+) screened by their probe alone", found["search"])
    assert probed and int(probed.group(1)) == len(stand_ins) > 20, (found["search"], len(stand_ins))
    assert not again, again
    assert found["chosen_ms"] <= 1.02 * found["best_ms"]


@pytest.mark.timeout(300)
def test_a_resumed_search_times_with_the_clock_its_journaled_samples_were_taken_with(tmp_path):
    """Each attempt chose its clock from its own first race: a search killed after screening on the device (CUDA
    graph replays) resumed eagerly where its first race's fastest call read over the bound, and ranked the first
    attempt's device times against its own eager ones (host time included) in one history. The journal now says
    which clock timed each record, and a resumed attempt takes it."""
    env = tuner_env(tmp_path, 60, SEARCH_KILL="140", SEARCH_GRAPHS="1")
    first = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "1"}, timeout=240)
    assert first[0].returncode == -9, describe(first)
    journals = list((tmp_path / "cache").rglob("*.journal"))
    timed = [json.loads(line) for path in journals for line in path.read_text().splitlines()
             if json.loads(line).get("state") in ("measured", "stopped")]
    assert timed and {r.get("clock") for r in timed} == {"graph"}, {r.get("clock") for r in timed}
    (second,) = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "2"}, timeout=240)
    assert second.returncode == 0, describe([second])
    found = second.results[0]
    assert re.search(r"\(\d+ from the journal\)", found["search"]), found["search"]
    assert found["clock"] == "graph", found


@pytest.mark.timeout(300)
def test_a_resumed_search_that_cannot_keep_the_journaled_clock_measures_those_configs_again(tmp_path):
    """A reviewer's: the resumed attempt means to keep the journals' device clock, but none of its captures works
    (out of device memory) and it times eagerly; before, the journaled device times of its first stage (139 of
    them) were still ranked beside its eager ones. Now they are given back and measured again if proposed."""
    env = tuner_env(tmp_path, 60, SEARCH_KILL="140", SEARCH_GRAPHS="1", SEARCH_UNCAPTURABLE="1")
    first = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "1"}, timeout=240)
    assert first[0].returncode == -9, describe(first)
    (second,) = run_ranks(CASES, 1, ["far_behind_killed"], env={**env, "SEARCH_ATTEMPT": "2"}, timeout=240)
    assert second.returncode == 0, describe([second])
    found = second.results[0]
    assert found["clock"] == "eager", found
    assert "from the journal" not in found["search"], found["search"]
    log = (tmp_path / "logs" / "rank-0.log").read_text()
    assert re.search(r"\d+ config\(s\) screened on another clock by an earlier attempt are measured again", log)
    assert found["chosen_ms"] <= 1.02 * found["best_ms"], found


def test_the_journaled_clock_is_the_one_clock_the_timed_records_name():
    from triton_dist_tune.measure.graphs import device_time_applies, journaled_clock

    graph = {"state": "stopped", "clock": "graph"}
    assert journaled_clock([graph, {"state": "failed", "clock": "eager"}]) == "graph"  # a failure has no time
    assert journaled_clock([{**graph, "state": "measured", "screening": {**graph, "state": "measured"}}]) == "graph"
    assert journaled_clock([graph, {"state": "measured", "clock": "eager"}]) is None  # both: choose afresh
    assert journaled_clock([{"state": "measured"}]) is None  # written before the clock was journaled
    assert journaled_clock([graph, {"state": "measured"}]) is None  # some name none: choose afresh
    assert journaled_clock([{"state": "measured", "clock": "sundial"}]) is None
    assert device_time_applies(False, 1, "cuda", 50.0, "graph") and not device_time_applies(False, 1, "cuda", 0.1,
                                                                                            "eager")
    assert not device_time_applies(False, 2, "cuda", 0.1, "graph")  # still one rank only


def test_the_configs_compiled_ahead_are_the_leaders_neighbours_whether_the_stage_comes_in_slow_or_ahead():
    """While a stage is measured, the configs the next stage will likely hold compile (``measure/ahead.py``): the
    leaders' unscreened neighbours if the stage's configs come in slow, then those around the stage's configs if each
    comes in just ahead of its best screened neighbour; never a config screened or in the stage."""
    from triton_dist_tune.measure.ahead import likely_next
    from triton_dist_tune.measure.search import PatternSearch, SearchPlan

    configs = [{"a": a, "b": b} for a in range(10) for b in range(10)]
    search = PatternSearch(configs, list(range(100)), SearchPlan(leaders=1, stage_cap=4, seed="t"))
    index = {(c["a"], c["b"]): i for i, c in enumerate(configs)}
    samples = {index[(5, 5)]: [1.0], index[(0, 0)]: [3.0]}  # the leader is (5, 5)
    stage = [index[(5, 6)], index[(5, 4)]]
    likely = likely_next(search, samples, stage)
    named = {(configs[i]["a"], configs[i]["b"]) for i in likely}
    assert {(4, 5), (6, 5)} <= named  # (5, 5)'s neighbours outside the stage
    assert not named & {(5, 5), (0, 0), (5, 6), (5, 4)}
    assert len(likely) <= 2 * 4 and len(likely) == len(set(likely))
    around = {j for i in [index[(5, 5)], *stage] for ring in search.grid.rings(i) for j in ring}
    assert set(likely) <= around  # the leader's neighbourhood, or a stage config's that might lead
    assert likely_next(search, {index[(0, 0)]: None}, stage) == []  # no leader yet: no guess


def test_the_next_keys_guess_is_the_search_that_key_would_run_over_the_landscape_it_is_given():
    """A campaign compiles its next key's likely configs (``measure/ahead.py``, ``likely_for_next_key``): that key's
    own search (kept configs, plan seed, seeds) run over a stand-in landscape. Given the whole landscape, the guess is
    exactly the order the search screens it in, then (the fill) the configs that landscape ranks fastest among the
    rest; given part of it, the model fills the rest and the guess still reaches the bottom; with none, it is the
    first look; what is compiled already is left out, and the cap and the fill hold."""
    from triton_dist_tune.measure.ahead import likely_for_next_key

    time_of = bowl(3)
    plan = SearchPlan(seed="next")
    order: list[int] = []
    simulate(GEMM, KEPT, plan, lambda i: order.append(i) or time_of(i))
    order = list(dict.fromkeys(order))
    whole = {i: time_of(i) for i in KEPT}
    assert likely_for_next_key(GEMM, KEPT, "next", [], whole, (), cap=len(KEPT), fill=0) == order
    rest = sorted((i for i in KEPT if i not in order), key=lambda i: (time_of(i), i))
    assert likely_for_next_key(GEMM, KEPT, "next", [], whole, (), cap=len(KEPT), fill=5) == order + rest[:5]

    best = min(KEPT, key=time_of)
    part = {i: t for i, t in whole.items() if random.Random(i).random() < 0.3 and i != best}
    guess = likely_for_next_key(GEMM, KEPT, "next", [], part, part, cap=len(KEPT))
    assert best in guess and not set(guess) & set(part)

    first = PatternSearch(GEMM, KEPT, plan, [KEPT[5]]).first()
    compiled = set(first[:4])
    assert likely_for_next_key(GEMM, KEPT, "next", [KEPT[5]], {}, compiled) == [i for i in first if i not in compiled]
    assert len(likely_for_next_key(GEMM, KEPT, "next", [], part, (), cap=7, fill=0)) == 7
    assert len(likely_for_next_key(GEMM, KEPT, "next", [], part, (), cap=7, fill=3)) == 10
    assert likely_for_next_key(GEMM, KEPT, "next", [KEPT[5]], {}, (), fill=3) == first  # no landscape: no fill
