"""Side effects, correctness checks, parallel compilation and sharded tuning, on real gloo ranks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import HERE, describe, run_ranks, tuner_env

CASES = HERE / "scenarios" / "feature_cases.py"


@pytest.fixture
def env(tmp_path):
    return tuner_env(tmp_path, 30)


def env_logs(env) -> list[Path]:
    """The rank logs a job wrote into its log folder."""
    return sorted(Path(env["TRITON_DIST_AUTOTUNE_LOG_DIR"]).rglob("rank-*.log"))


def run(case, env, n=2, full=False):
    results = run_ranks(CASES, n, [case], env=env, timeout=100)
    assert all(r.returncode == 0 for r in results), describe(results)
    return results if full else [r.result for r in results]


@pytest.mark.timeout(120)
def test_restore_value_applies_an_in_place_update_exactly_once(env):
    for r in run("restore_value", env, full=True):
        assert r.result["restored"] == {"x": [1.0, 2.0, 3.0, 4.0], "total": 10.0}
        # undeclared, the in-place update is found (version counter) and undone before every run too, with a warning
        assert r.result["plain"] == {"x": [1.0, 2.0, 3.0, 4.0], "total": 10.0}
        assert "changed its argument 'x' in place" in r.stderr and "restore_value=['x']" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_reset_to_zero_leaves_one_contribution(env):
    for r in run("reset_to_zero", env, full=True):
        assert r.result["reset"] == [2.0, 2.0, 2.0]
        assert r.result["plain"] == [2.0, 2.0, 2.0]  # undeclared: found changed, restored to zeros before each run
        assert "changed its argument 'acc' in place" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_an_output_written_whole_is_not_copied_back_before_every_run(env):
    """Before, an output buffer every config wrote whole (a GEMM's ``c``) was copied back from its saved copy before
    every run, with a warning: on one H200 0.16-0.17 s of a 2.1 s tuning for a 256 MB output, timed inside every
    sample. Now it is left as the last run wrote it; each config's warm-up run is checked from NaN."""
    for r in run("written_output", env, full=True):
        whole, part = r.result["whole"], r.result["part"]
        assert whole["c"] == [float(i * (whole["chosen"] + 1)) for i in range(4)]  # one call's result
        # the first run from the saved values (found changed), and so the runs before the next config's warm-up run
        # (restored until checked: config 0's probe), which starts from NaN, as the other config's (n_warmup 1: no
        # timed run); the rest from what the run before left; the final call from the saved values (put back)
        seen = whole["seen"]
        assert seen["nan"] == 2 and 2 <= seen["saved"] <= 6 and seen["left"] > seen["saved"], whole
        assert "changed its argument 'c'" not in r.stderr.split("written_part")[0], r.stderr[-3000:]
        # variant 2 writes 2 of 4 elements: its run from NaN leaves NaN, so c is restored before every run from then
        want = [float(i * (part["chosen"] + 1)) for i in range(4)]
        assert part["c"] == (want if part["chosen"] != 2 else want[:2] + [-1.0, -1.0]), part
        assert "changed its argument 'c' in place" in r.stderr, r.stderr[-3000:]


@pytest.mark.timeout(120)
def test_config_wrong_on_one_rank_is_left_out_everywhere(env):
    for result in run("wrong_on_one_rank", env):
        assert result["chosen"] == 1 and result["out"] == [2.0] * 4
        assert result["states"] == ["measured", "measured", "failed"]
        assert result["error"].startswith("rank 1: wrong result")


@pytest.mark.timeout(120)
def test_config_that_does_not_compile_is_skipped_everywhere(env):
    for result in run("compile_failure", env):
        assert result["ok"] and result["states"] == ["failed", "measured", "measured"]
        assert "3" not in result["launched"]  # never launched by the tuned function
        # compiled once on the node: by rank 0, whose share holds config 0; failed on every rank with its error
        assert "rank 0: compile:" in result["error"] and "rank 1" not in result["error"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_precompile_is_split_across_the_node_and_failures_are_agreed(env, n):
    results = run("precompile_split", env, n)
    for rank, r in enumerate(results):
        assert r["compiled"] == [v for v in range(6) if v % n == rank]  # its share of the node's configs only
        assert r["states"][4] == "failed" and r["states"].count("failed") == 1
        assert r["error"] == f"rank {4 % n}: compile: ValueError: config 4 does not compile"
    assert sorted(v for r in results for v in r["compiled"]) == list(range(6))  # each config compiled once


@pytest.mark.timeout(120)
def test_compiles_overlap_the_warm_up_and_a_failed_compile_is_never_run(env):
    """Outside the interpreter ``precompile_fn`` runs in threads while the configs are warmed up in order: config 3's
    compile waits for config 0 to have run (it would time out if measuring waited for every compile first)."""
    results = run("compile_overlap", {**env, "TRITON_INTERPRET": "0"})
    for rank, r in enumerate(results):
        assert r["compiled"] == [v for v in range(5) if v % 2 == rank]  # its node share only
        assert r["states"][2] == "failed" and r["states"].count("failed") == 1
        assert r["error"] == "rank 0: compile: ValueError: config 2 does not compile"
        assert 2 not in r["ran"] and 0 in r["ran"] and 3 in r["ran"]  # never run anywhere


@pytest.mark.timeout(120)
@pytest.mark.parametrize("interpret", ["0", "1"])
def test_on_one_rank_the_configs_the_next_stage_will_likely_screen_compile_while_this_one_is_measured(env, interpret):
    """A first key's stages waited for their compiles one after the other (on one H200 the 32-config stages took
    1.0-2.1 s each with the compile workers 26-64% busy): once a stage has waited for its compiles, the configs the
    next stage will likely hold are compiled after this stage's, while it is measured. Before, no config compiled
    before its own stage. Under Triton's interpreter each config compiles only when its warm-up asks: nothing is
    compiled ahead, and no stage loses its own compiles to a guess."""
    result = run("compile_ahead", {**env, "TRITON_INTERPRET": interpret}, n=1)[0]
    compiled, screened = [tuple(c) for c in result["compiled"]], [tuple(c) for c in result["screened"]]
    assert len(compiled) == len(set(compiled))  # a config compiled ahead is not compiled again in its stage
    assert set(screened) <= set(compiled)  # every screened config compiled first
    if interpret == "1":
        assert "compiled ahead" not in result["search"] and set(compiled) == set(screened), result["search"]
        return
    ahead = re.search(r"(\d+) compiled ahead \((\d+) of them screened\)", result["search"])
    assert ahead is not None, result["search"]
    named, used = int(ahead.group(1)), int(ahead.group(2))
    assert named > 0 and used > 0, result["search"]  # the guesses were right for some configs
    assert len(compiled) <= len(screened) + named  # nothing compiled beyond the stages and the guesses
    # the rank log's line per compile: each config once, its seconds (each sleeps 0.15 s), needed or a guess
    logged = [re.search(r"compile of config (\d+): ([0-9.]+) s \((needed|guess)\)$", line)
              for log in env_logs(env) for line in log.read_text().splitlines() if " compile of config " in line]
    assert all(logged) and len(logged) == len(compiled), logged
    assert len({m.group(1) for m in logged}) == len(compiled) and min(float(m.group(2)) for m in logged) >= 0.15
    assert {m.group(3) for m in logged} == {"needed", "guess"}, logged


@pytest.mark.timeout(120)
def test_on_one_rank_a_config_still_compiling_when_its_stage_is_measured_is_screened_in_a_later_stage(env):
    """On one H200 a first key waited 2.5-3.2 s for one kernel of its first stage (4.1-4.6 s to compile; the other
    42 took 0.3-1.5 s), and warmed no config after it in the meantime. Now the stage's configs are warmed up as
    their compiles end, and a config still compiling once the rest of its stage is measured is deferred to a later
    stage. Before: the straggler was warmed up in its own stage, before the configs after it (here its compile
    could end only once a later stage ran, or after 30 s)."""
    r = run("compile_straggler", {**env, "TRITON_INTERPRET": "0"}, n=1)[0]
    assert r["state"] in ("measured", "stopped"), r  # screened in the end
    assert r["before"] >= r["first_look"], r  # after every other config of its stage, and after a later stage's
    assert re.search(r"\d+ deferred to a later stage", r["search"]), r["search"]
    # the rank log's grace lines, read with the compile lines by benchmarks/grace_events.py: the deferring grace
    # waited its 0.25 s, and the straggler's compile ended after it
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(HERE.parent / "benchmarks" / "grace_events.py"),
                          *map(str, env_logs(env)), "--graces", "0.1,0.25"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    graces = re.search(r"(\d+) graces, ([0-9.]+) s; (\d+) ended .*, (\d+) deferred \(([0-9.]+) s\)", out.stdout)
    assert graces is not None and int(graces[4]) >= 1 and float(graces[5]) >= 0.2 * int(graces[4]), out.stdout
    assert re.search(r"deferred: the first pending compile ended [0-9.]+ / ", out.stdout), out.stdout
    assert re.search(r"grace 0\.10 s: [0-9.]+ s waited, \d+ stage\(s\) deferring", out.stdout), out.stdout


@pytest.mark.timeout(120)
def test_the_first_race_of_a_tuning_holds_its_whole_first_stage_whatever_compiles_first(env, tmp_path):
    """The first race of a tuning decides from its configs' probes whether samples are timed on the device and how
    many calls a CUDA graph holds. A stage that screens what it warmed up while the rest compiles made that first
    race of the 4 configs that compiled first: 4 slow ones would have timed the whole tuning eagerly though the
    stage held faster ones. So no stage pauses before the tuning's clock is chosen: here the first stage's configs
    compile in 10 ms each but its straggler never, and its first race holds every other config of the stage
    (before: 4)."""
    env = {**env, "TRITON_INTERPRET": "0", "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    r = run("compile_straggler", env, n=1)[0]
    log = "".join(path.read_text() for path in (tmp_path / "logs").rglob("*.log"))
    first = re.search(r"warm-up: (\d+) config\(s\) in", log)
    assert first is not None, log[-2000:]
    assert int(first.group(1)) == r["first_look"] - 1, log[-3000:]  # the stage but its straggler, deferred


@pytest.mark.timeout(120)
def test_a_straggler_still_compiling_when_the_search_is_over_is_left_out_when_the_model_puts_it_behind(env):
    """In the README's MoE campaign a search's last stage could wait seconds for the compile of one deferred
    straggler (1.9-3.5 s at 384 tokens: a 256 x 256 tile of 4 warps, which its probe read 5.7 times the best). Now a
    config still compiling once the search has nothing else to screen is left out, unscreened, when the additive
    model of the screened times predicts it far behind the finalists. Before: the search waited for its compile (here
    until the 30 s compile timeout, which then failed it)."""
    r = run("compile_straggler_left_out", {**env, "TRITON_INTERPRET": "0"}, n=1)[0]
    assert r["still_compiling"], r  # the tuning returned before its compile ended
    assert r["state"] == "pruned" and "outlasted the search" in r["error"], r
    assert re.search(r"1 left out still compiling when nothing else was left to screen", r["search"]), r["search"]


@pytest.mark.timeout(120)
def test_a_straggler_the_search_names_again_is_left_out_when_the_model_puts_it_far_behind(env, tmp_path):
    """The rule above applied only when the search named nothing at all. But a deferred straggler next to a leader
    is named again, alone, once the rest of its neighbourhood is screened, and that stage waited for its compile:
    every README MoE campaign on an H200 waited 1.8-3.3 s at 384 tokens so for a 256 x 256 tile of 4 warps that
    read 4.3-17 times the choice. Here the straggler (9, 4) sits next to the leader (8, 4) behind a cliff (every
    config with a = 9 takes 30 times as long): before, the stage waited for it until the 30 s compile timeout, which
    failed it; now it is left out and the search goes on."""
    env = {**env, "TRITON_INTERPRET": "0", "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    r = run("compile_straggler_named_again", env, n=1)[0]
    assert r["submitted"] and r["still_compiling"], r  # the tuning returned before its compile ended
    assert r["state"] == "pruned" and "outlasted the search" in r["error"], r
    assert re.search(r"1 left out still compiling when nothing else was left to screen", r["search"]), r["search"]
    # the stage that deferred it says so by index, as the one that left it out (benchmarks/straggler_rule.py)
    log = "".join(path.read_text() for path in (tmp_path / "logs").rglob("*.log"))
    left = re.search(r"left out: (\d+)", log)
    assert left is not None and re.search(rf"deferred while they compile: [\d ]*\b{left.group(1)}\b", log), log[-2000:]


@pytest.mark.timeout(60)
def test_a_straggler_deferred_once_is_deferred_again_without_another_grace(caplog):
    """A stage whose other configs are warmed up waits :data:`STRAGGLER_GRACE_S` for a straggler's compile, then
    defers it. In the README's MoE campaign on one H200 the same stragglers (tiles that compile for seconds) were
    deferred again by later stages of the same key, and each stage waited the grace again, in vain: 1-7 of a
    campaign's 7-21 graces spent in full. Now a straggler gets its grace once. Here a real pool compiles two configs
    at once and the straggler until released; the second stage defers it without waiting (before: it waited 0.25 s
    more, counted in the pool's ``waited``)."""
    import threading

    from triton_dist_tune.disk import logs
    from triton_dist_tune.measure.daemon_pool import DaemonPool
    from triton_dist_tune.measure.precompile import Compiles
    from triton_dist_tune.measure.warm_order import STRAGGLER_GRACE_S, WarmOrder

    release = threading.Event()
    compiles = Compiles(DaemonPool(2, "tdt-grace"), limit=30.0, active=True, label="[grace test]")
    logs.rank_log().addHandler(caplog.handler)
    try:
        compiles.submit(0, lambda: None)
        compiles.submit(1, lambda: release.wait(30))  # the straggler
        compiles.submit(2, lambda: None)
        compiles.wait_first([0], 30)
        compiles.wait_first([2], 30)
        first = WarmOrder([(0, {}, "a"), (1, {}, "straggler")], compiles, alone=True, defer=True)
        assert [item[0] for item in first if item is not None] == [0] and first.deferred == [1]
        graced = compiles.waited
        assert graced >= STRAGGLER_GRACE_S * 0.9  # its one grace
        second = WarmOrder([(1, {}, "straggler"), (2, {}, "b")], compiles, alone=True, defer=True)
        assert [item[0] for item in second if item is not None] == [2] and second.deferred == [1]
        assert compiles.waited == graced  # no second grace
        # the rank log has a line for the one grace (benchmarks/grace_events.py reads it)
        lines = [r.getMessage() for r in caplog.records if " grace: " in r.getMessage()]
        line = re.fullmatch(r"\[grace test\] grace: (\d+\.\d{3}) s for 1 config\(s\) compiling \(1\): deferred",
                            lines[0]) if len(lines) == 1 else None
        # at least the grace; no upper bound: a loaded machine may wake the rank late
        assert line is not None and float(line[1]) >= STRAGGLER_GRACE_S * 0.9, lines
        # a stage of the straggler alone (the search has nothing else to screen) still waits for it
        release.set()
        last = WarmOrder([(1, {}, "straggler")], compiles, alone=True, defer=True)
        assert [item[0] for item in last if item is not None] == [1] and last.deferred == []
    finally:
        logs.rank_log().removeHandler(caplog.handler)
        release.set()
        compiles.close()


@pytest.mark.timeout(120)
def test_a_stage_screens_the_configs_it_warmed_up_while_the_rest_of_it_compiles(env):
    """In the README's MoE campaign each search stage waited for its last compiles (0.3 s a stage, over 80 stages)
    before it screened the configs it had warmed up. Now, on one rank, a stage that would wait for compiles first
    screens what it has warmed up, then goes on. Here the straggler's compile ends only once another config was
    sampled: before, the stage waited for it, gave up and deferred it to a later stage, and only then screened the
    rest; now the rest is screened while it compiles, and it is screened in its own stage."""
    r = run("screened_while_compiling", {**env, "TRITON_INTERPRET": "0"}, n=1)[0]
    assert r["state"] in ("measured", "stopped"), r
    assert re.search(r"screening while compiling \d+ time\(s\)", r["search"]), r["search"]
    assert "deferred" not in r["search"], r["search"]


@pytest.mark.timeout(120)
def test_a_time_budget_spent_in_a_pause_leaves_the_straggler_that_compiles_after_it_unmeasured(env):
    """A stage that pauses to screen what it warmed up starts its next chunk with no config warmed up. Without a
    guard the first warm-up after the pause ran whatever the budget said (a budget is checked before a warm-up only
    once a config of the chunk is warmed up): here the straggler was then called 9 times and measured after the
    budget was spent in the pause's race. Now a budget spent stops that warm-up too: the straggler is left out
    unmeasured, never called, and the decision is cut."""
    r = run("budget_spent_in_a_pause", {**env, "TRITON_INTERPRET": "0"}, n=1)[0]
    assert re.search(r"screening while compiling \d+ time\(s\)", r["search"]), r  # the stage paused
    assert r["called"] == 0 and r["state"] == "pruned" and "time budget" in (r["error"] or ""), r
    assert r["cut"] and "the time budget ended the screening" in r["search"], r


@pytest.mark.timeout(180)
def test_a_campaign_on_one_rank_compiles_its_next_keys_configs_while_it_tunes_the_current_one(env, tmp_path):
    """The README's MoE campaign waited 31 s of its 63 s for compiles, its workers idle while each key was measured.
    Now a unit of one rank compiles the configs its next key will likely screen, with that key's arguments, while
    it tunes the current key; the rank's log says how many of them the next key screened. Off with
    ``TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY=0``: every key's compiles start with its own tuning (as before)."""
    env = {**env, "TRITON_INTERPRET": "0", "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    r = run("next_key_compiled_ahead", env, n=1)[0]
    assert r["decided"] == ["tuned"] * 3, r
    # key 2 compiled while key 1 was tuned (none decided), key 3 while key 2 was (one decided)
    assert [2, 0] in r["ahead"] and [3, 1] in r["ahead"], r
    log = "".join(path.read_text() for path in (tmp_path / "logs").rglob("*.log"))
    hits = [int(n) for n in re.findall(r"screened (\d+) of the \d+ config\(s\) compiled ahead for it", log)]
    assert len(hits) == 2 and all(n >= 1 for n in hits), hits

    assert r["builds"] == [2, 3, 3], r  # the keys, the tunings, and keys 2 and 3 built once more to compile ahead

    off = run("next_key_compiled_ahead", {**env, "TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY": "0",
                                          "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "off")}, n=1)[0]
    assert off["decided"] == ["tuned"] * 3 and off["ahead"] == [] and off["builds"] == [2, 2, 2], off

    # the next key's call cannot be built: nothing is compiled ahead for it, and it is tuned as any key
    failing = run("next_key_compiled_ahead", {**env, "NEXT_KEY_BUILD_FAILS": "1",
                                              "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "failing")}, n=1)[0]
    assert failing["decided"] == ["tuned"] * 3 and [2, 0] not in failing["ahead"], failing
    assert "building its call raised RuntimeError: out of memory" in "".join(
        path.read_text() for path in (tmp_path / "logs").rglob("*.log")), "no log line"


@pytest.mark.timeout(180)
def test_a_campaigns_compiles_ahead_pass_over_a_key_its_disk_cache_serves_to_the_key_it_tunes_next(env, tmp_path):
    """The acceptance's README campaign met its batch size 256 decided (by the MoE example's run before it): the
    guess compiled 80 configs ahead for 256, a cache hit, and none for 384, whose tuning then waited 2.1-2.3 s for
    compiles on one H200 (``benchmarks/results/session_h200_30``). Now the unit reads its disk cache before it
    guesses: with key 2 decided before the campaign, key 3's configs compile while key 1 is tuned, and none of key
    2's compile during the campaign. The look ahead reads quietly: a file it cannot read is warned of once, by the
    tuning that then reads it (before this fix: twice)."""
    env = {**env, "TRITON_INTERPRET": "0", "NEXT_KEY_TUNED_BEFORE": "2"}
    r = run("next_key_compiled_ahead", env, n=1)[0]
    assert r["decided"] == ["tuned", "cached", "tuned"], r
    assert [3, [2]] in r["during"], r  # key 3's configs compiled while key 1 was tuned (only key 2 decided)
    assert not [m for m, _ in r["during"] if m == 2], r  # nothing compiled for the key the cache serves

    # key 2's file cannot be read: it is tuned again, and the look ahead does not repeat the tuning's warning
    corrupt = run("next_key_compiled_ahead", {**env, "NEXT_KEY_CACHE_CORRUPT": "1",
                                              "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "corrupt")}, n=1)[0]
    assert corrupt["decided"] == ["tuned"] * 3 and corrupt["unreadable"] == 1, corrupt


@pytest.mark.timeout(180)
def test_the_next_keys_compile_pass_runs_the_function_with_that_keys_arguments_and_nothing_else(env, tmp_path):
    """Without ``precompile_fn`` the next key compiles through the compile pass: the function runs with the next
    key's arguments, as a pass only (never measured before its own key), while the key before it is tuned."""
    env = {**env, "TRITON_INTERPRET": "0"}
    r = run("next_key_compile_pass", env, n=1)[0]
    assert r["decided"] == ["tuned"] * 3, r
    assert [2, 0] in r["ahead"] and [3, 1] in r["ahead"], r
    assert r["early_runs"] == 0, r  # a key's measured runs come with its own tuning only
    off = run("next_key_compile_pass", {**env, "TRITON_DIST_AUTOTUNE_COMPILE_NEXT_KEY": "0",
                                        "TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / "off")}, n=1)[0]
    assert off["decided"] == ["tuned"] * 3 and off["ahead"] == [], off


@pytest.mark.timeout(180)
def test_a_search_the_time_budget_ends_drops_the_next_keys_guess_instead_of_running_it(env, tmp_path):
    """The rank's idle work (a campaign's next key's guess and compile passes, each stage's guess of the next) runs
    once a stage is measured; after a stage that spends the time budget, the search ends, so that work is dropped
    and the key ends with its best screened (before: the next key's guess, a search run without a device, ran
    first on the rank's thread, after the budget; its passes then stopped at the budget). The next key is then
    tuned as any key, under its own budget."""
    env = {**env, "TRITON_INTERPRET": "0", "TRITON_DIST_AUTOTUNE_LOG_DIR": str(tmp_path / "logs")}
    r = run("next_key_guess_after_the_budget", env, n=1)[0]
    assert r["cut"] == [True, True], r  # each key's first stage spent the budget
    assert r["ahead"] == 0, r  # no compile pass of key 2 while key 1 was tuned
    assert r["decided"] == ["tuned"] * 2, r
    log = "".join(path.read_text() for path in (tmp_path / "logs").rglob("*.log"))
    assert "search stage 1" in log and "it will likely screen" not in log, log[-3000:]  # no guess ran


@pytest.mark.timeout(60)
def test_a_stage_is_warmed_in_compile_order_alone_and_in_its_own_order_in_a_group():
    """``WarmOrder`` with real compile futures: config 0's compile ends only when released. Alone, the others come
    first; without ``defer`` it then waits for config 0 (and defers nothing); in a group, the stage's own order."""
    import threading

    from triton_dist_tune.measure.daemon_pool import DaemonPool
    from triton_dist_tune.measure.precompile import Compiles
    from triton_dist_tune.measure.warm_order import WarmOrder

    release = threading.Event()
    compiles = Compiles(DaemonPool(2, "tdt-order-test"), limit=30.0, active=True)
    compiles.submit(0, lambda: release.wait(30))
    for index in (1, 2, 3):
        compiles.submit(index, lambda: None)
    for index in (1, 2, 3):
        compiles.futures[index][0].result(timeout=30)  # ended: the order below is counted, not timed
    todo = [(i, {}, f"config {i}") for i in range(4)]
    assert [i for i, _, _ in WarmOrder(todo, compiles, alone=False, defer=True)] == [0, 1, 2, 3]
    deferring = WarmOrder(todo, compiles, alone=True, defer=True)
    assert [i for i, _, _ in deferring] == [1, 2, 3] and deferring.deferred == [0]
    outcomes = deferring.deferred_outcomes()
    assert list(outcomes) == [0] and "compile had not ended" in (outcomes[0].error or "")
    waiting = WarmOrder(todo, compiles, alone=True, defer=False)
    seen = []
    for item in waiting:
        seen.append(item[0])
        if len(seen) == 3:
            threading.Timer(0.3, release.set).start()
    assert seen == [1, 2, 3, 0] and waiting.deferred == []
    compiles.pool.shutdown()


@pytest.mark.timeout(60)
def test_before_waiting_for_compiles_the_order_runs_the_idle_work_until_a_config_is_ready():
    """A campaign's next key's compile passes ran on the rank's thread before the first stage's warm-up (0.15 s a
    key, 2.4 s over the README's MoE campaign on one H200). Now they are idle work: ``WarmOrder`` runs them, a unit
    at a time, only while no config of its stage is ready, and the search runs what is left once that stage is
    measured.
    Here config 0's compile ends when the second unit releases it: the third waits in the queue; a unit returning
    False drops the rest."""
    import threading

    from triton_dist_tune.measure.daemon_pool import DaemonPool
    from triton_dist_tune.measure.precompile import Compiles
    from triton_dist_tune.measure.warm_order import WarmOrder

    release = threading.Event()
    compiles = Compiles(DaemonPool(1, "tdt-idle-test"), limit=30.0, active=True)
    compiles.submit(0, lambda: release.wait(30))
    ran: list[int] = []

    def unit(k: int) -> bool:
        ran.append(k)
        if k == 2:
            release.set()
            compiles.futures[0][0].result(timeout=30)  # ended: the order below is counted, not timed
        return k != 4

    compiles.idle.extend(lambda k=k: unit(k) for k in (1, 2, 3, 4, 5))
    try:
        assert [i for i, _, _ in WarmOrder([(0, {}, "config 0")], compiles, alone=True, defer=False)] == [0]
        assert ran == [1, 2] and len(compiles.idle) == 3
        compiles.run_idle()
        assert ran == [1, 2, 3, 4] and not compiles.idle  # unit 4 said to stop: 5 dropped
    finally:
        release.set()
        compiles.pool.shutdown()


@pytest.mark.timeout(60)
def test_a_compile_hung_past_the_timeout_fails_its_config_one_timeout_after_the_first_wait_for_it():
    """``WarmOrder`` waits up to the compile timeout for the first of a stage's compiles to end; a config whose
    compile hangs is then failed at once, not after a second timeout of its own wait (before: 2 timeouts)."""
    import threading
    import time

    from triton_dist_tune.measure.daemon_pool import DaemonPool
    from triton_dist_tune.measure.precompile import Compiles
    from triton_dist_tune.measure.warm_order import WarmOrder

    release = threading.Event()
    compiles = Compiles(DaemonPool(1, "tdt-hung-test"), limit=2.0, active=True)
    compiles.submit(0, lambda: release.wait(30))
    try:
        order = WarmOrder([(0, {}, "config 0")], compiles, alone=True, defer=False)
        assert [i for i, _, _ in order] == [0]  # after the timeout: nothing ended, the stage's first comes
        started = time.monotonic()
        error = compiles.wait(0)
        assert error is not None and "did not finish within 2 s" in error, error
        assert time.monotonic() - started < 0.5  # its deadline had passed (before: another 2 s)
    finally:
        release.set()
        compiles.pool.shutdown()


@pytest.mark.timeout(120)
def test_the_compile_pass_splits_the_node_and_agrees_its_failures(env):
    """The real compile pass on 2 CPU ranks outside the interpreter (forced on; every compile fails for want of a
    GPU compiler): each config's compile is submitted by one rank of the node, and each fails everywhere with
    that rank's error, before any rank runs the config again."""
    results = run("compile_pass_split", {**env, "TRITON_INTERPRET": "0"})
    for rank, r in enumerate(results):
        assert r["submitted"] == [v for v in range(4) if v % 2 == rank]  # its node share of the launches only
        assert r["ran"] == [0, 1, 2, 3]  # once each, in the pass; never again after its compile failed
        for v in range(4):
            assert f"config {v} ({{variant: {v}}}): rank {v % 2}: compile: RuntimeError: 0 active drivers" in r["error"]
            assert f"config {v} ({{variant: {v}}}): rank {1 - v % 2}" not in r["error"]
    assert results[0]["error"] == results[1]["error"]


@pytest.mark.timeout(120)
def test_on_one_rank_a_searchs_stages_share_one_compile_pool_and_submit_each_config_once(env):
    """On one rank the search's stages add to one pool of compiles (so that configs compiled ahead of their stage
    are not compiled again): the real compile pass, forced on a CPU rank where every compile fails, over 100
    configs in stages."""
    r = run("compile_pass_one_rank_search", {**env, "TRITON_INTERPRET": "0"}, n=1)[0]
    assert r["submitted"] == list(range(100)), r["submitted"]
    assert r["error"] is not None and "all 100 with the same error" in r["error"], r["error"]
    assert "compile: RuntimeError: 0 active drivers" in r["error"], r["error"]


@pytest.mark.timeout(120)
def test_an_argument_a_kernel_writes_is_found_after_the_compile_pass(env):
    """The check of the arguments after each config's first run must look at a run that launched its kernels: the
    compile pass launches none (before: the pass was taken as each config's first run, the write was never found
    nor undone, and the argument held every tuning run's write, 4056 on CPU ranks instead of 1)."""
    for r in run("compile_pass_in_place", {**env, "TRITON_INTERPRET": "0"}, full=True):
        assert r.result["passed"] == [0, 1, 2] and r.result["x"] == [1.0] * 4, r.result
        assert "changed its argument 'x' in place" in r.stderr, r.stderr[-2000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["pass", "precompile_fn"])
def test_the_time_budget_bounds_the_first_looks_compiles(env, how):
    """Issue 41 item 5: ``budget=0.1`` over 80 configs (searched) whose compile step takes 40 ms per config. The
    compile pass of the first look's 16 configs stops once the group's clock says the budget is spent (before:
    every rank ran all 16, 640 ms, before the budget was first read); a ``precompile_fn`` under the interpreter
    compiles a config only when its warm-up needs it (before: each rank's share of the 16, 8 per rank, before any
    warm-up). The count is of compiles made, which load can only lower (the budget is spent sooner)."""
    mode = {"COMPILE": "pass", "TRITON_INTERPRET": "0"} if how == "pass" else {}
    first, second = run("budget_bounds_compiles", {**env, **mode})
    assert first["cut"] is True and first["chosen"] == second["chosen"], (first, second)
    if how == "pass":  # every rank runs every config's pass, in the agreed order, until the budget (a loaded
        # machine can spend it before the first: none compiled, as a fresh-clone CI run beside other jobs saw)
        assert first["compiled"] == second["compiled"] and len(first["compiled"]) <= 5, (first, second)
    else:  # each config by one rank of the node, as its warm-up comes
        assert len(first["compiled"] + second["compiled"]) <= 5, (first, second)
        assert not set(first["compiled"]) & set(second["compiled"]), (first, second)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_sharded_tuning_agrees_in_a_fraction_of_the_time(env, n):
    results = run("sharded", env, n)
    assert all(r["chosen"] == {"False": 5, "True": 5} for r in results)
    for rank, r in enumerate(results):
        assert r["runs"]["False"] == list(range(8))  # lock-step: every rank runs every config
        assert r["runs"]["True"] == [v for v in range(8) if v % n == rank]  # sharded: its share only


@pytest.mark.timeout(120)
def test_tritons_version_key_is_found_where_triton_3_2_to_3_4_define_it(monkeypatch):
    """Triton 3.2 to 3.4 define ``triton_key`` in ``triton.compiler.compiler`` (3.5 and newer in
    ``triton.runtime.cache``): there too the compile pool computes it once and hands it to its workers, which key
    their compiles with it (before: looked up in ``triton.runtime.cache`` only, so with those versions no key was
    computed ahead, and every compile thread and worker computed its own). Such a Triton is made here by moving the
    function."""
    import triton.compiler.compiler
    import triton.runtime.cache

    from triton_dist_tune.measure import compile_worker
    from triton_dist_tune.measure.compile_workers import triton_version_key

    monkeypatch.delattr(triton.runtime.cache, "triton_key", raising=False)
    monkeypatch.setattr(triton.compiler.compiler, "triton_key", lambda: "the key of an older triton", raising=False)
    assert compile_worker.triton_key_module() is triton.compiler.compiler
    assert triton_version_key() == "the key of an older triton"


def test_compile_threads_compute_tritons_version_key_once(monkeypatch):
    """Every compile needs Triton's version key (a hash of its C library); compile threads that all start before it is
    cached must not each compute it (measured on a 16-CPU H100 host: ~22 s of the compile threads' time)."""
    from triton_dist_tune.measure.compile_worker import triton_key_module
    from triton_dist_tune.measure.precompile import start_pool

    triton_key = triton_key_module().triton_key
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton_key.cache_clear()
    compiles = start_pool(4, timeout=60)
    for index in range(8):
        compiles.submit(index, triton_key)
    assert [compiles.wait(index) for index in range(8)] == [None] * 8
    compiles.close()
    assert triton_key.cache_info().misses == 1
