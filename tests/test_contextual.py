"""Multi-rank tests of ``contextual_autotune`` with real Triton kernels in the interpreter (gloo, one process per
rank); the scenarios are in tests/scenarios/contextual_cases.py."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from harness import HERE, describe, parse_results, run_mpiexec, run_process, run_ranks, tuner_env

CASES = HERE / "scenarios" / "contextual_cases.py"
COMPILE_CASES = HERE / "scenarios" / "contextual_compile_cases.py"
ADD = "add_kernel(64, 'torch.float32', 'torch.float32', 'torch.float32')"
SCALE = "scale_kernel(64, 'torch.float32', 'torch.float32')"


@pytest.fixture
def env(tmp_path):
    return tuner_env(tmp_path, 60)


def run(case, n, env, **kw):
    results = run_ranks(CASES, n, [case], env=env, timeout=kw.pop("timeout", 100), **kw)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results


def single(case, env):
    proc = run_process(CASES, [case], env, timeout=100)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0]), proc.stderr


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 4])
def test_two_kernels_around_a_collective(env, n, tmp_path):
    results = run("two_kernels", n, {**env, "TRITON_PRINT_AUTOTUNING": "1"})
    for r in results:
        res = r.result
        # alone, rank 0 would choose add=0 and scale=0, rank 1 add=1; the group's max times choose add=2, scale=1
        assert res["chosen"] == {ADD: 2, SCALE: 1}, describe(results)
        assert res["ok"] and res["second_ok"]
        # the schedule (n_warmup=1, n_repeat=2): a warm-up of each config in turn, then 2 rounds with each config
        # once, in a shuffled order; scale has fewer configs, finishes first and runs its best
        add = [c for run in res["seq"] for k, _, c in run if k == "add"]
        scale = [c for run in res["seq"] for k, _, c in run if k == "scale"]
        assert add[:3] == [0, 1, 2] and sorted(add[3:6]) == sorted(add[6:9]) == [0, 1, 2] and add[-1] == 2
        # then add's choice; before it, closing rounds only where the race was close, which a 4x gap is not on an
        # idle machine (a loaded one, with 2 busy processes beside the suite, once stalled config 2 enough)
        closing, close = add[9:-1], sorted(set(add[9:-1]))
        assert all(sorted(closing[i:i + len(close)]) == close for i in range(0, len(closing), len(close) or 1))
        assert scale[:2] == [0, 1] and sorted(scale[2:4]) == sorted(scale[4:6]) == [0, 1] and set(scale[6:]) == {1}
        assert res["runs"] == 10 + len(closing) and res["second_runs"] == 1  # a decided call is a single run
        assert res["stock_hit"] and res["cache"]  # a stock launch afterwards uses the choice (no benchmarking)
        assert res["patched_after"] is False
        assert len(res["tables"]["add_kernel"][0]["per_rank"]) == n
    job = tmp_path / "logs"  # the log folder: rank-{i}.log (and .jsonl) of every rank
    logs = sorted(p.name for p in job.glob("*.log"))
    assert logs == [f"rank-{i}.log" for i in range(n)]
    text = (job / "rank-1.log").read_text()
    text = re.sub(r"(kernel=__main__\.\w+)@[0-9a-f]{8}", r"\1", text)  # the wrapper's digest
    assert "step run=0 kernel=__main__.add_kernel key=(64, 'torch.float32', 'torch.float32', 'torch.float32') " \
           "config=0 phase=warmup iter=0 launches=1 times_ms=[" in text
    assert "step run=8 kernel=__main__.add_kernel" in text and "config=2 phase=measure iter=1" in text
    assert "decision kernel=__main__.scale_kernel key=(64, 'torch.float32', 'torch.float32') config=1" in text
    # TRITON_PRINT_AUTOTUNING: Triton's summary, on group rank 0 only
    assert ("Triton autotuning for function add_kernel,\nwith key as (64, 'torch.float32', 'torch.float32', "
            "'torch.float32'),\nfinished after ") in results[0].stderr
    # add's config 2, as the table below and the logs show it (before: by Triton's str, "BLOCK: 512, num_warps: 4")
    assert "best config selected: Config({BLOCK: 512, num_ctas: 1, num_stages: 3, num_warps: 4});" in results[0].stderr
    assert all("Triton autotuning" not in r.stderr for r in results[1:])
    # its table's rank column is rank 0's own time of each config, as autotune's summary shows it (before: '-' in
    # every row of a contextual summary)
    summary = results[0].stderr.split("Triton autotuning for function add_kernel,", 1)[1].split("cache file:")[0]
    rows = [m.groups() for m in re.finditer(r"^(?:->)?\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\w+)", summary,
                                            re.MULTILINE)]
    assert [row[0] for row in rows] == ["0", "1", "2"], summary
    assert all(own != "-" and float(own) > 0 for _, _, _, own, _, _ in rows), summary


@pytest.mark.timeout(150)
def test_subgroups_tune_over_their_own_group(env):
    results = run("subgroups", 4, env)
    for r in results:
        parity = r.rank % 2
        assert r.result["chosen"] == {ADD: parity, SCALE: parity}, describe(results)
        assert r.result["ok"] and r.result["runs"] == 7


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 4])
def test_config_failing_on_one_rank_is_left_out_everywhere(env, n):
    results = run("fail_one_rank", n, env)
    for r in results:
        res = r.result
        assert res["chosen"] == 1 and res["ok"], describe(results)
        # configs 0 and 1: 3 runs each, config 2 fails in its first run, then the final run; config 0 (320 ms on
        # the odd ranks against 5) is clearly slower in both rounds, so there are no closing rounds
        assert res["runs"] == 8
        assert [s.replace("stopped", "measured") for s in res["states"]] == ["measured", "measured", "failed"]
        assert res["errors"][2].startswith("rank 1: InterpreterError: AssertionError('BLOCK too large")


@pytest.mark.timeout(120)
def test_one_kernel_with_two_keys_in_one_run(env):
    results = run("two_keys", 2, env)
    for r in results:
        res = r.result
        assert res["chosen"] == {"copy_kernel(128, 'torch.float32', 'torch.float32')": 0,
                                 "copy_kernel(64, 'torch.float32', 'torch.float32')": 2}, describe(results)
        assert res["ok"] and res["same_config_per_key"] and res["runs"] == 7
        assert res["seq"][-1] == [["copy", 64, 2], ["copy", 128, 0], ["copy", 64, 2]]


@pytest.mark.timeout(120)
def test_rank_dependent_keys(env):
    results = run("rank_keys", 2, env)
    for r in results:  # each key is tuned from the one rank that launches it; every rank knows both decisions
        assert r.result["chosen"] == {"add_kernel(128, 'torch.float32', 'torch.float32', 'torch.float32')": 1,
                                      ADD: 0}, describe(results)
        assert r.result["ok"] and r.result["runs"] == 7


@pytest.mark.timeout(120)
def test_nested_repeated_and_threads(env):
    results = run("nested_repeated", 2, env)
    for r in results:
        res = r.result
        joined = res["joined"]  # the inner function joins the outer tuning of the same group
        assert joined == {"outer_runs": 7, "inner_runs": 7, "ok": True, "outer": {ADD: 2, SCALE: 1}, "inner": {}}
        assert res["repeat"] == {"outer_runs": 1, "inner_runs": 1, "ok": True}
        other = res["other_group"]  # another group: the inner tunes in its own loop inside the outer's first run
        assert other["outer_runs"] == 7 and other["inner_runs"] == 5 + 6 and other["ok"]
        assert other["outer"] == {"add_kernel(96, 'torch.float32', 'torch.float32', 'torch.float32')": 2}
        assert other["inner"] == {"scale_kernel(96, 'torch.float32', 'torch.float32')": 1}
        # another thread launched stock Triton during the tuning: never intercepted, its cache entry untouched
        assert res["thread_launches"] > 0 and res["thread_ok"] and not res["thread_errors"]
        assert res["thread_key_untouched"] and res["patched_after"] is False
        assert res["alone_then_group"] == [r.rank % 2, 2]  # each rank alone, then the group


@pytest.mark.timeout(120)
def test_new_process_loads_choices_from_disk(env, tmp_path):
    first = run("disk", 2, env)
    assert [r.result["how"] for r in first] == [["tuned"]] * 2
    # the examples' line (fla_contextual.py's): before, that example printed none
    assert {r.result["cache_line"] for r in first} == {"layer keys: 2 tuned, 0 served from the cache"}, first
    files = sorted((tmp_path / "cache" / "contextual").glob("*.json"))
    assert len(files) == 2
    data = [json.loads(f.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}")) for f in files]
    assert sorted(d["index"] for d in data) == [1, 2] and all(d["group_size"] == 2 for d in data)
    second = run("disk", 2, env)
    for r in second:
        assert r.result["how"] == ["disk cache"] and r.result["chosen"] == {ADD: 2, SCALE: 1}
        assert r.result["cache_line"] == ("layer keys: 0 tuned, 2 served from the cache (decided by an earlier run; "
                                          "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1 tunes again)"), r.result
        assert r.result["runs"] == 2 and r.result["ok"]  # one run to meet the kernels, one with the choices
        assert r.result["seq"] == [[["add", 64, 0], ["scale", 64, 0]], [["add", 64, 2], ["scale", 64, 1]]]


@pytest.mark.timeout(150)
def test_a_disk_cache_hit_sets_configs_timings_to_the_cached_group_times(env):
    """docs/contextual.md: configs_timings holds each config's group time again where it came from the disk cache
    (``[inf] * 3`` only for a config that failed). Before, a new process's cache hit set ``[inf] * 3`` for every
    config, the chosen one included, as if every config had failed."""
    first = run("disk", 2, env)
    second = run("disk", 2, env)
    assert [r.result["how"] for r in second] == [["disk cache"]] * 2, describe(second)
    for tuned, hit in zip(first, second, strict=True):
        for kernel, timings in tuned.result["timings"].items():
            assert timings and all(t[0] < float("inf") for t in timings.values()), describe(first)
            cached = hit.result["timings"][kernel]
            assert cached == {block: [t[0]] * 3 for block, t in timings.items()}, (kernel, cached, timings)


@pytest.mark.timeout(150)
def test_ranks_with_different_cache_folders_follow_rank_0(env, tmp_path):
    folders = {r: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / f"home{r}")} for r in range(2)}
    run("disk", 2, env, per_rank_env=folders)
    assert not list((tmp_path / "home1").rglob("*.json"))  # only group rank 0 writes the cache
    assert not list(tmp_path.rglob("*.journal"))  # each rank's journals are removed once decided
    assert [r.result["runs"] for r in run("disk", 2, env, per_rank_env=folders)] == [2, 2]
    shutil.move(tmp_path / "home0", tmp_path / "home1")  # now only rank 1 has the choices: nobody uses them
    again = run("disk", 2, env, per_rank_env=folders)
    assert [r.result["how"] for r in again] == [["tuned"]] * 2 and [r.result["runs"] for r in again] == [7, 7]


@pytest.mark.timeout(120)
def test_function_raising_on_one_rank_raises_the_same_error_everywhere(env):
    results = run("user_raises", 2, env)
    messages = {r.result["message"] for r in results}
    assert len(messages) == 1, describe(results)
    assert "tuning run 3" in messages.pop() and all(r.result["error"] == "AutotuneError" for r in results)
    assert [r.result["runs"] for r in results] == [4, 4]
    assert [r.result["cause"] for r in results] == [None, "ValueError"]
    assert all(r.result["patched_after"] is False for r in results)


@pytest.mark.timeout(60)
def test_single_process_bare_decorator_and_nesting(env):
    result, _ = single("single", env)
    assert result["ok"] and result["patched_after"] is False
    # the inner joins the outer (one process is one group), so the outer's defaults apply: 3 warm-up runs per
    # config, then at most 5 rounds of the race (clearly slower configs leave after 2), then the final run
    assert 3 * 3 + 2 * 3 + 1 <= result["runs"] <= 3 * 8 + 1 and result["inner_runs"] == result["runs"]
    assert result["chosen"] == {ADD: 0, SCALE: 0}  # rank 0's own fastest


@pytest.mark.timeout(60)
def test_precompile_in_threads_and_a_config_that_does_not_compile(env):
    result, _ = single("precompile", env)
    # config 0 was compiled by the first run's launch; 1 and 2 in the pool; 1 fails and is never launched
    assert result["compiled"] == [[256, True], [512, True]]
    assert [s.replace("stopped", "measured") for s in result["states"]] == ["measured", "failed", "measured"]
    assert result["errors"][1] == "rank 0: compile: RuntimeError: ptxas error"
    assert all(c != 1 for run in result["seq"] for _, _, c in run) and result["ok"]


def share(todo, rank, peers):
    """The configs of ``todo`` rank ``rank`` of ``peers`` compiles (the k-th goes to rank k mod peers)."""
    return [c for k, c in enumerate(todo) if k % peers == rank]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [2, 4])
def test_precompile_is_split_across_the_node_and_failures_are_agreed(env, n):
    env = {**env, "TRITON_DIST_AUTOTUNE_NEW_KEY_GRACE": "4"}
    results = run_ranks(COMPILE_CASES, n, ["split_precompile"], env=env, timeout=180)
    assert all(r.returncode == 0 for r in results), describe(results)
    wide64, wide128 = ("wide_kernel(64, 'torch.float32', 'torch.float32')",
                       "wide_kernel(128, 'torch.float32', 'torch.float32')")
    calls = [r.result["compiled"] for r in results]
    for r, per_call in zip(results, calls, strict=True):
        res = r.result
        assert res["ok"] and all(pool for call in per_call for _, _, pool in call), describe(results)
        # call 1: wide's configs but the one every rank launched first (0), split over the node's n ranks; add,
        # met by rank 0 alone, all compiled by rank 0
        first = [[k, c] for k, c, _ in per_call[0]]
        assert first == [["wide_kernel", c] for c in share([1, 2, 3, 4, 5], r.rank, n)] + \
            ([["add_kernel", 1], ["add_kernel", 2]] if r.rank == 0 else []), describe(results)
        # call 2 is hot and call 3 meets n=128 on rank 0 only (pending): nothing compiled, no collective;
        # call 4 tunes n=128 (met by every rank): its 6 configs split (the hot run's defaults are not timed)
        assert per_call[1] == per_call[2] == []
        assert [c for _, c, _ in per_call[3]] == share([0, 1, 2, 3, 4, 5], r.rank, n)
        # the config whose compile raised is failed on every rank with its owner's error, and never launched
        owner64, owner128 = 3 % n, 4 % n
        assert res["errors"][wide64][4] == f"rank {owner64}: compile: RuntimeError: ptxas error on rank {owner64}"
        assert res["errors"][wide128][4] == f"rank {owner128}: compile: RuntimeError: ptxas error on rank " \
                                            f"{owner128}"
        assert not [k for run in res["seq"] for k in run if k[0] == "wide" and k[2] == 4]
        assert res["chosen"] == results[0].result["chosen"]
        assert res["chosen"][wide64] == 5 and res["chosen"][wide128] == 3
        assert res["errors"] == results[0].result["errors"]
    # each config compiled exactly once over the node
    for call, kernel, todo in ((0, "wide_kernel", [1, 2, 3, 4, 5]), (0, "add_kernel", [1, 2]),
                               (3, "wide_kernel", [0, 1, 2, 3, 4, 5])):
        assert sorted(c for per_call in calls for k, c, _ in per_call[call] if k == kernel) == todo


@pytest.mark.timeout(100)
def test_precompile_needs_every_rank_to_compile_ahead(env):
    results = run_ranks(COMPILE_CASES, 2, ["precompile_not_everywhere"], env=env, timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    # rank 0 alone would compile ahead: the exchange says the others do not, so nobody splits (no collective that
    # only rank 0 makes) and nothing is compiled ahead
    assert [r.result["compiled"] for r in results] == [[], []], describe(results)
    assert all(r.result["ok"] and r.result["chosen"] == results[0].result["chosen"] for r in results)


@pytest.mark.timeout(60)
def test_key_is_the_key_stock_triton_caches_under(env):
    result, _ = single("keys", env)
    assert result["keys_match"] == [True, True], result


@pytest.mark.timeout(120)
def test_mpi4py_communicator(env):
    proc = run_mpiexec(CASES, 2, ["mpi_two_kernels"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = parse_results(proc.stdout)
    assert len(results) == 2, proc.stdout + proc.stderr
    for r in results:
        assert r["chosen"] == {ADD: 2, SCALE: 1} and r["runs"] == 7 and r["ok"]


@pytest.mark.timeout(150)
def test_gpu_benchmark_script_runs_on_cpu(env, tmp_path):
    """benchmarks/bench_contextual.py on 2 ranks with gloo and the interpreter, as the lead checks it (the ranks are
    forks of the test server with torchrun's variables)."""
    script = HERE.parent / "benchmarks" / "bench_contextual.py"
    ranks = run_ranks(script, 2, ["--out", str(tmp_path / "bench"), "--cpu"], env=env, timeout=140)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    result = json.loads((tmp_path / "bench" / "bench_contextual.json").read_text())
    assert result["same_choices_on_every_rank"] and result["rel_err"] < 1e-4 and result["hot_call_runs"] == 1
    assert result["runs"] == 3 * 2 + 1 and len(result["decisions"]) == 2
    stateful = result["stateful"]  # restore_value and the caller's own meta-parameters
    assert stateful["state_rel_err"] < 1e-6 and stateful["rel_err"] < 1e-6 and stateful["same"]
    assert stateful["runs"] == 3 * 2 + 1 and len(stateful["decisions"]) == 2
    assert (tmp_path / "bench" / "bench_contextual.md").read_text().startswith("## contextual_autotune")


# -- the schedule alone (no processes, no Triton) ------------------------------------------------------------------


def make_track(configs=3, n_warmup=1, n_repeat=2, pruned=None):
    from dataclasses import replace

    from triton_dist_tune.contextual.schedule import Track
    from triton_dist_tune.contextual.tracks import TrackInfo

    info = TrackInfo(name="k", descriptions=[f"c{i}" for i in range(configs)], entry="e", space_text="",
                     pruned=list(range(configs)))
    infos = {r: replace(info, pruned=(pruned or {}).get(r, info.pruned)) for r in range(2)}
    return Track("mod.k", "(1,)", infos, n_warmup, n_repeat)


def test_schedule_steps_warmup_then_measure_and_picks_least_group_time():
    track = make_track()
    times = {0: (1.0, 9.0), 1: (5.0, 5.0), 2: (2.0, 8.0)}  # per config: rank 0, rank 1
    seen = []
    while not track.done:
        index, (phase, iteration) = track.current(), track.phase()
        seen.append((index, phase, iteration))
        assert track.advance({r: [(index, times[index][r], None)] for r in range(2)}) == "advanced"
    # warm-ups config by config, then 2 rounds (n_repeat) with every config once each, in a shuffled order
    assert seen[:3] == [(i, "warmup", 0) for i in range(3)]
    for round_ in (0, 1):
        steps = seen[3 + 3 * round_: 6 + 3 * round_]
        assert sorted(i for i, _, _ in steps) == [0, 1, 2] and {(p, it) for _, p, it in steps} == {("measure", round_)}
    assert track.best == 1 and track.how == "tuned" and track.times == {0: 9.0, 1: 5.0, 2: 8.0}
    assert len(seen) == 9  # rank 1's 9, 5 and 8 ms: no config is more than 25% behind twice, none leaves early


def test_schedule_races_and_drops_clearly_slower_configs_early():
    track = make_track(configs=3, n_warmup=0, n_repeat=8)
    times = {0: 1.0, 1: 4.0, 2: 1.05}
    steps = []
    while not track.done:
        index = track.current()
        steps.append(index)
        track.advance({r: [(index, times[index], None)] for r in range(2)})
    assert steps.count(1) == 2  # 4x slower: out after two rounds
    assert steps.count(2) == 3 and steps.count(0) == 3  # 5% slower every round: out after three (sign test)
    assert track.best == 0 and track.spreads[0] == 0.0
    # the summary says which configs left the race, with their samples (not "ok" with n 0)
    from triton_dist_tune.contextual import report

    rows = {o.index: (o.state, o.samples) for o in report.outcomes(track)}
    assert rows == {0: ("measured", 3), 1: ("stopped", 2), 2: ("stopped", 3)}
    assert [r["state"] for r in report.table(track)] == ["measured", "stopped", "stopped"]


@pytest.mark.parametrize("turn", ["late", "early"])
def test_schedule_times_are_all_of_the_statistic_the_track_records_when_its_race_turns(turn):
    """Config 2 (three times slower, samples 120 and 132) leaves after two rounds, then the race turns noisy
    (``late``: the others' samples wait 1 to 4 times their time) or quiet (``early``: config 1's first sample
    waited 1.5 times). Its time was taken when it left, of the statistic then: its median under a track that
    records "least", its least sample under one that records "median". Now every time is taken at the race's end."""
    from statistics import median as median_of

    track = make_track(configs=3, n_warmup=0, n_repeat=8)
    waits, given = [1.0, 3.0, 1.4, 4.0, 1.1, 2.6, 1.0, 3.4], {0: [], 1: [], 2: []}
    while not track.done:
        index = track.current()
        n = len(given[index])
        if index == 2:
            ms = 120 * (1.0 if n % 2 == 0 else 1.1)
        elif turn == "late":
            ms = 40 * (waits[n % len(waits)] if n >= 2 else 1.0)
        else:
            ms = 40 * (1.5 if n == 0 and index == 1 else 1.0)
        given[index].append(ms)
        track.advance({r: [(index, ms, None)] for r in range(2)})
    assert track.statistic == ("least" if turn == "late" else "median") and len(given[2]) == 2
    assert track.times[2] == (min if turn == "late" else median_of)(given[2]), (track.times, given)
    if turn == "late":
        assert track.times == {i: min(given[i]) for i in range(3)}, (track.times, given)


@pytest.mark.parametrize("first,second", [("quiet", "noisy"), ("noisy", "quiet")])
def test_a_resumed_time_is_taken_again_of_the_statistic_the_track_records(first, second):
    """Config 2 left an earlier attempt's race (samples 120 and 132) with that race's statistic: 126, their
    median, in a quiet race, 120, their least, in a noisy one; this attempt reads it back from the journal and races
    the others with the other statistic. Its time stayed the journal's, in a table whose statistic said otherwise.
    Now the journal keeps its samples and a resumed time is taken again of the track's statistic."""
    from statistics import median as median_of

    track = make_track(configs=3, n_warmup=0, n_repeat=8)
    samples = [120.0, 132.0]
    journaled = min(samples) if first == "noisy" else median_of(samples)
    track.resume({2: {"state": "measured", "time": journaled, "per_rank": [journaled] * 2, "round_times": samples}})
    given = {0: [], 1: []}
    while not track.done:
        index = track.current()
        n = len(given[index])
        ms = 40 * (1.5 if second == "noisy" and n % 2 else 1.0) * (1 + 0.001 * index)
        given[index].append(ms)
        track.advance({r: [(index, ms, None)] for r in range(2)})
    assert track.statistic == ("least" if second == "noisy" else "median") and 2 in track.resumed
    assert track.times[2] == (min if second == "noisy" else median_of)(samples), track.times


@pytest.mark.parametrize("second", ["quiet", "noisy"])
def test_a_resumed_close_contender_keeps_its_drift_free_time_where_the_race_is_quiet(second):
    """Config 2 was a close contender of an earlier attempt's quiet race: journaled with the drift-free median of its
    closing rounds (1.3357: its screening read 1.0, its closing rounds 0.55 and 2.2 on a drifting machine) and
    ``settled_time``. Read back beside a quiet race it keeps that time, as the race's own contenders are timed
    (before: the median of all its samples, 1.0); beside a noisy race it takes its least sample, as those are."""
    track = make_track(configs=3, n_warmup=0, n_repeat=8)
    samples = [1.0, 1.0, 1.0, 0.55, 0.55, 2.2, 2.2]
    track.resume({2: {"state": "measured", "time": 1.3357, "per_rank": [1.3357] * 2, "round_times": samples,
                      "settled_time": True}})
    given = {0: [], 1: []}
    while not track.done:
        index = track.current()
        ms = 40 * (1.5 if second == "noisy" and len(given[index]) % 2 else 1.0) * (1 + 0.001 * index)
        given[index].append(ms)
        track.advance({r: [(index, ms, None)] for r in range(2)})
    assert track.statistic == ("least" if second == "noisy" else "median") and 2 in track.resumed
    assert track.times[2] == (0.55 if second == "noisy" else 1.3357), track.times


def test_schedule_close_contenders_race_closing_rounds():
    track = make_track(configs=4, n_warmup=0, n_repeat=3)
    screening = {0: 1.0, 1: 1.004, 2: 1.006, 3: 3.0}  # 1 and 2 within 1% of 0; 3 is 3x slower
    closing = {0: 1.0, 1: 1.0, 2: 0.9}  # the closing rounds alone decide: 2 wins
    steps = []
    while not track.done:
        index, (_, round_) = track.current(), track.phase()
        steps.append((index, round_))
        ms = screening[index] if round_ < 3 else closing[index]
        track.advance({r: [(index, ms, None)] for r in range(2)})
    count = {i: sum(1 for s, _ in steps if s == i) for i in range(4)}
    assert count == {0: 3 + 4, 1: 3 + 4, 2: 3 + 4, 3: 2}  # 2 x (n_repeat - 1) closing rounds for the three
    assert {i for i, r in steps if r >= 3} == {0, 1, 2} and max(r for _, r in steps) == 6
    assert track.best == 2 and track.times[2] == 0.9 and track.times[0] == 1.0
    one_round = make_track(configs=2, n_warmup=0, n_repeat=1)  # a one-round race has no closing rounds
    for index in (one_round.current(), 1 - one_round.current()):
        one_round.advance({r: [(index, 1.0, None)] for r in range(2)})
    assert one_round.done and one_round.runs == 2


@pytest.mark.timeout(120)
def test_closing_rounds_on_real_ranks(env):
    results = run("closing", 2, env)
    seqs = [r.result["seq"] for r in results]
    assert seqs[0] == seqs[1], describe(results)  # every rank launches the same configs in the same runs
    tuning = [index for run_ in seqs[0][:-1] for _, _, index in run_]  # the last run is the final one
    count = {i: tuning.count(i) for i in range(4)}
    best = results[0].result["chosen"]["close_kernel(64, 'torch.float32', 'torch.float32')"]
    assert best in (0, 1, 2) and all(r.result["chosen"] == results[0].result["chosen"] for r in results)
    assert count[3] == 1 + 2  # 6x slower: its warm-up and 2 screening rounds, no closing round
    assert count[best] == 1 + 2 + 2  # the leader: warm-up, 2 screening and 2 closing rounds
    assert sum(count[i] == 5 for i in (0, 1, 2)) >= 2 and set(count.values()) <= {3, 5}, count
    assert all(r.result["ok"] for r in results)


def test_schedule_failures_waiting_pruning_and_ties():
    from triton_dist_tune.errors import AllConfigsFailedError, BadInputError

    track = make_track(pruned={1: [1, 2]})  # rank 1 prunes config 0: only 1 and 2 are tried
    assert track.order == [1, 2]
    assert track.advance({0: [(1, 1.0, None)]}) == "waiting"  # rank 1 did not launch: no step
    assert track.advance({0: [(1, 1.0, None)], 1: [(1, None, "OutOfResources")]}) == "failed"
    assert track.current() == 2 and "rank 1: OutOfResources" in track.failed[1]
    for _ in range(3):
        track.advance({r: [(2, 3.0, None)] for r in range(2)})
    assert track.best == 2
    tie = make_track(configs=2, n_warmup=0, n_repeat=1)
    tie.advance({r: [(0, 2.0, None)] for r in range(2)})
    tie.advance({r: [(1, 2.0, None)] for r in range(2)})
    assert tie.best == 0  # ties go to the earlier config
    doomed = make_track(configs=2, n_warmup=0, n_repeat=1)
    doomed.advance({0: [(0, None, "boom")], 1: [(0, 1.0, None)]})
    with pytest.raises(AllConfigsFailedError, match="every config failed on some rank: config 0 .*boom.*bang"):
        doomed.advance({0: [(1, 1.0, None)], 1: [(1, None, "bang")]})
    alike = make_track(configs=2, n_warmup=0, n_repeat=1)  # the same error everywhere: said once, as the cause
    alike.advance({0: [(0, None, "no driver")], 1: [(0, 1.0, None)]})
    with pytest.raises(AllConfigsFailedError, match="all 2 with the same error, so the cause is most likely the "
                                                    "function or its environment, not the configs: rank 0: no driver"):
        alike.advance({0: [(1, None, "no driver")], 1: [(1, 1.0, None)]})
    with pytest.raises(BadInputError, match="keeps no config"):
        make_track(pruned={0: [0], 1: [1]})
    assert make_track(pruned={0: [2], 1: [2]}).how == "only config"
    forced = make_track()
    forced.force()
    assert forced.best == 0 and forced.how == "forced, unmeasured"
