"""Replicas tuned as one (``autotune_replicas``, ``measure/replicas.py``): which configs the replicas race again."""

from __future__ import annotations

import json
import subprocess

import pytest
from harness import HERE, base_env, parse_results, run_cli, run_ranks, torchrun_command, tuner_env

from triton_dist_tune.measure.timing import HEAVY_CYCLES, SETTLED_CYCLES

CASES = HERE / "scenarios" / "replicas_cases.py"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("replicas", [2, 3])
def test_every_shares_winner_is_raced_again_whatever_its_devices_speed(tmp_path, replicas):
    """One-rank replicas, 3 configs each (``replicas_cases.unequal_devices``): config 0, replica 0's, is 5% lighter
    than every other config on every device, and the last replica's device runs every call 15% faster. A share's
    times come from its own replica's device: ranked by them across shares, the last replica's survivors took both
    leader places, config 0 was never raced again, and every replica chose that replica's lowest config (1 of 2
    replicas, 2 of 3: its MAX over replicas 5% over config 0's). Now each share's best survivor is a leader (ranked
    inside its share, on one device), and config 0 is chosen."""
    results = run_ranks(CASES, replicas, ["unequal_devices"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    chosen = {r.result["chosen"] for r in results}
    assert chosen == {0}, [r.result for r in results]
    assert all(set(range(replicas)) <= set(r.result["measured"]) for r in results), [r.result for r in results]


def test_the_leaders_hold_each_replicas_best_survivor_then_the_least_times():
    """``leaders.leaders`` on a hand-made table of 3 replicas (``owners``): replica 2's survivors read least, yet
    replicas 0 and 1 each keep their best survivor among the leaders; ``refine_top`` places beyond them go by time;
    without owners (one share) the least times alone."""
    from triton_dist_tune.measure.leaders import leaders
    from triton_dist_tune.records import Outcome

    times = {0: 0.95, 3: 1.0, 1: 1.0, 4: 1.01, 2: 0.85, 5: 0.86, 6: 0.5}
    table = [Outcome(i, f"c{i}", "stopped" if i == 6 else "measured", time=t, samples=3, round_times=[t] * 3)
             for i, t in sorted(times.items())]
    owners = {0: 0, 3: 0, 6: 0, 1: 1, 4: 1, 2: 2, 5: 2}
    assert leaders(table, 0) == [2, 5]
    assert leaders(table, 0, owners=owners) == leaders(list(reversed(table)), 2, owners=owners) == [0, 1, 2]
    assert leaders(table, 4, owners=owners) == [0, 1, 2, 5]
    assert leaders(table, 7, owners=owners) == [0, 1, 2, 3, 4, 5, 6]  # then a stopped config, last


def _mixed_first_pass():
    """A gathered first pass of 2 replicas under the agreed least statistic: replica 0 (configs 0, 2, 4) raced its
    share heavy (its settled survivors keep their drift-free times, ``settled_time``), replica 1 (1, 3, 5) light and
    noisy (its survivors' times are their least samples, each 8-10% under its drift-free time)."""
    from triton_dist_tune.records import Outcome

    def heavy(i, drift_free, least):
        return Outcome(i, f"c{i}", "measured", time=drift_free, samples=7, round_times=[least + 0.1] + [drift_free] * 5
                       + [least], settled_time=True, drift_free=drift_free)

    def light(i, drift_free, least):
        return Outcome(i, f"c{i}", "measured", time=least, samples=9, round_times=[least] + [drift_free] * 8,
                       drift_free=drift_free)

    table = [heavy(0, 0.52, 0.47), light(1, 0.56, 0.48), heavy(2, 0.525, 0.475), light(3, 0.53, 0.49),
             Outcome(4, "c4", "stopped", time=0.7, samples=1, round_times=[0.7]),
             Outcome(5, "c5", "stopped", time=0.8, samples=1, round_times=[0.8])]
    return table, {0: 0, 2: 0, 4: 0, 1: 1, 3: 1, 5: 1}


def _settle_faked(refine_top, spent, lockstep, worst=None):
    """``replicas._settle`` on :func:`_mixed_first_pass` with fakes for the exchanges (``worst``: the leaders'
    exchange), the budget's clock ``spent`` or not, and ``lockstep`` racing the leaders."""
    import logging
    from types import SimpleNamespace

    from triton_dist_tune.measure import replicas
    from triton_dist_tune.measure.budget import Budget
    from triton_dist_tune.measure.race import RacePlan

    table, owners = _mixed_first_pass()
    layout = SimpleNamespace(gather=lambda *_: (table, owners, True, [], (False, 9.0 if spent else 0.0)), worst=worst)
    plan = RacePlan(final_top=3, final_top_heavy=12, heavy_from_ms=0.5)
    measurer = SimpleNamespace(budget=Budget(seconds=5.0), plan=SimpleNamespace(race=plan), race=None,
                               lockstep=lockstep, log=logging.getLogger("test_replicas"))
    watch = SimpleNamespace(arrive=lambda _, __, t: t, passed=lambda _: None)
    return replicas._settle(layout, measurer, [], lambda i: i, refine_top, "k", 10.0, 3, "steady", watch)


def _settle_mixed(refine_top, spent):
    """:func:`_settle_faked`: (the configs raced as leaders, or None where the first pass decides, the decision or
    None)."""
    raced = []

    class Stop(Exception):
        pass

    def lockstep(todos, plan):
        raced.extend(todos)
        raise Stop

    try:
        chosen = _settle_faked(refine_top, spent, lockstep)
    except Stop:
        return sorted(raced), None
    return None, chosen


def test_the_first_pass_compares_shares_on_drift_free_times_where_some_share_raced_heavy():
    """Under the agreed least statistic, a share raced heavy keeps its settled survivors' drift-free times
    (``settled_time``) where a light share's survivors take their least samples, which read lower than any median:
    the leaders beyond each replica's best (``refine_top=3``) and a time budget's cut compared the two kinds across
    shares. Before, the light share's config 3 (least sample 0.49, drift-free 0.53) took the extra leader place from
    the heavy share's config 2 (drift-free 0.525), and the cut chose the light share's config 1 (least sample 0.48,
    drift-free 0.56) over config 0 (drift-free 0.52, best on either kind). Now every settled time of the table is its
    drift-free time across shares; each share's best stays the one its race ranked first (config 1: its least sample
    leads its share)."""
    assert _settle_mixed(3, spent=False) == ([0, 1, 2], None)
    assert _settle_mixed(0, spent=False) == ([0, 1], None)  # each replica's best: as its race ranked its share
    _, chosen = _settle_mixed(3, spent=True)
    assert (chosen.index, chosen.runner_up, chosen.statistic) == (0, 2, "least"), chosen
    assert {o.index: o.time for o in chosen.outcomes if o.state == "measured"} == {0: 0.52, 1: 0.56, 2: 0.525,
                                                                                   3: 0.53}


@pytest.mark.parametrize("cut", [False, True])
def test_the_next_leaders_are_raced_unless_the_budget_cut_the_leaders_race(cut, caplog):
    """:func:`_settle_faked` whose first leaders (configs 0 and 1, each replica's best) fail on some replica in
    the leaders' exchange: the next leaders of the table without them (configs 2 and 3) are raced on every replica,
    and the least of their MAX over replicas (config 2) chosen, configs 0 and 1 failed with the replicas' errors.
    Where the time budget ended that first leaders' race early (``short``; the clock not spent yet: a race cuts on a
    predicted round), no other race runs: the first pass decides among the next leaders, a cut."""
    from triton_dist_tune.records import Outcome

    raced, exchanged = [], []

    def lockstep(todos, plan):
        raced.append(list(todos))
        return [Outcome(i, f"c{i}", "measured", time=0.5, samples=7, round_times=[0.5] * 7) for i in todos]

    def worst(times, noisy, short, clock, what, deadline):
        exchanged.append(what)
        if len(exchanged) == 1:
            return {i: "replica 0: rank 0: boom" for i in times}, {}, True, cut, (cut, 0.0)
        return {i: 0.5 + i / 100 for i in times}, {i: 0.0 for i in times}, True, False, (False, 0.0)

    chosen = _settle_faked(0, False, lockstep, worst)
    assert raced == ([[0, 1]] if cut else [[0, 1], [2, 3]]), raced
    assert exchanged == ["k leaders across replicas"] + ([] if cut else ["k leaders across replicas (race 2)"])
    assert (chosen.index, chosen.runner_up) == (2, 3), chosen
    assert chosen.time == pytest.approx(0.525 if cut else 0.52), chosen  # the first pass's drift-free, or the MAX
    errors = {o.index: o.error for o in chosen.outcomes if o.state == "failed"}
    assert errors == {0: "on some replica: replica 0: rank 0: boom", 1: "on some replica: replica 0: rank 0: boom"}
    then = "the time budget is spent or ended the leaders' race" if cut else "racing the next leaders"
    assert f"every leader failed on some replica (configs 0, 1); {then}" in caplog.text, caplog.text


@pytest.mark.timeout(240)
def test_a_budget_that_cuts_one_replicas_leaders_race_leaves_the_first_pass_to_decide(tmp_path):
    """Two one-rank replicas on a device that cools between samples (``replicas_cases.leaders_cut``), 2 keys: config
    0 (40% power) is the best alone once a device has run it long enough, config 1 (full power, 5% less work) the
    least in a screening's short samples; replica 1's device runs 25% slower. Both settle their shares (configs 0 and
    1 their winners) and race the two leaders again, and a ``budget=`` whose clock reads spent on replica 1 once its
    leaders' race runs cuts that race after its screening round: its leaders hold one short sample each, where
    replica 0's hold 7 (1 screening, 6 settled). Before, a leader's MAX over replicas joined replica 1's screening
    sample to replica 0's drift-free time: the ranks' records of the same leaders differed (7 samples against 1) and
    key 1 chose config 1 by its screening sample. Now a leaders' race the budget cut on some replica leaves the first
    pass to decide (a cut), on times of one kind, the same table on every rank: config 0 in every key."""
    results = run_ranks(CASES, 2, ["leaders_cut"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert first["measured"] == second["measured"], (first["measured"], second["measured"])
    assert first["chosen"] == second["chosen"] == {"1": 0, "2": 0}, (first["chosen"], second["chosen"])
    assert all(first["cut"].values()) and all(second["cut"].values()), (first["cut"], second["cut"])
    # the first pass's settled survivors decide: 1 screening round and the heavy race's 6 settled ones each
    for key, measured in first["measured"].items():
        assert {"0", "1"} <= set(measured) and set(measured.values()) == {7}, (key, measured)
    # the trap is set: replica 1's leaders' race ran its screening round alone
    log = (tmp_path / "logs" / "rank-1.log").read_text()
    assert log.count("] race: 1 round(s) (settled from 1)") == 2, log


@pytest.mark.timeout(240)
@pytest.mark.parametrize("timing", ["steady", "cold"])
def test_no_leader_leaves_the_leaders_race_on_one_replica_alone(tmp_path, timing):
    """Two one-rank replicas, configs 0 and 1, each its share's winner (``replicas_cases.leader_stopped``): replica
    0's device runs both alike, replica 1's runs config 0 at 2.5 times config 1. Each replica's race of the leaders
    decides on its own samples: before, on replica 1 alone config 0 left it, ``far_behind`` after the first round
    (steady timing on a device clock: config 1, left alone, ended the race there with its one screening sample) or
    clearly slower after 2 of 10 rounds (cold timing), while replica 0 raced both to the end (9 samples, 10). A
    leader's MAX over replicas joined one replica's few samples (a screening one in steady timing) to another's
    settled time, and the ranks recorded different tables (1 sample against 9; 2 against 10) and rounds. Now no
    leader leaves the leaders' race (``leaders_plan``: ``RacePlan.stops`` off): both run every round on both
    replicas, and every rank records the same decision."""
    results = run_ranks(CASES, 2, [f"leader_stopped_{timing}"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert first == second, (first, second)
    rounds = 9 if timing == "steady" else 10  # 1 screening round and 8 settled ones; cold: n_repeat
    assert (first["chosen"], first["runner_up"], first["rounds"]) == (1, 0, rounds), first
    assert {i: (o[0], o[2]) for i, o in first["outcomes"].items()} == {"0": ("measured", rounds),
                                                                        "1": ("measured", rounds)}, first


@pytest.mark.timeout(240)
def test_every_rank_records_the_same_near_tie(tmp_path):
    """Two one-rank replicas, configs 0 and 1 (``replicas_cases.near_tie``): replica 0's device runs config 1 5%
    slower than config 0, the same every sample (its spreads 0), and every leader's MAX over replicas is replica
    0's; replica 1's device runs both in half the time, each sample up to 20% off (its spreads about 10%). A
    decision's near tie is judged on its pair's spreads: before, each replica took its own race's, and the ranks of
    replica 0 recorded no near tie where replica 1's recorded one, of the same choice and margin. Now each leader's
    spread is the MAX over replicas, carried in the leaders' exchange: the same near tie, and the same table, on
    every rank."""
    results = run_ranks(CASES, 2, ["near_tie"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert first == second, (first, second)
    assert (first["chosen"], first["runner_up"], first["near_tie"]) == (0, 1, True), first
    assert first["margin"] == pytest.approx(0.05), first
    # the trap is set: the margin is within replica 1's spreads alone (replica 0's are 0)
    assert all(o[3] > 0.05 for o in first["outcomes"].values()), first


def _leader_failed_alike(tmp_path, case: str, raised: str, rounds: int, time: float) -> dict:
    """Run ``replicas_cases.case`` (a :func:`leader_fails` case: config 1 raises on replica 0 alone, in the leaders'
    race's ``raised`` phase) on two one-rank replicas, and assert what every such case must hold: both ranks exit 0
    (nothing hangs), the trap is set (config 1 raised on rank 0 alone, in that phase), both record the same decision
    (chosen, runner-up, rounds, statistic, each config's state, time, samples, spread, round times and error), config
    1 failed with replica 1's first-pass outcome (1 sample) and its error named, and config 0, which never failed,
    chosen with ``rounds`` samples of ``time`` ms. Returns rank 0's record."""
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert (first.pop("raised"), second.pop("raised")) == ([raised], []), (first, second)  # the trap is set
    assert first == second, (first, second)
    assert (first["chosen"], first["runner_up"], first["rounds"]) == (0, None, rounds), first
    state, failed_time, samples, _, kept, error = first["outcomes"]["1"]
    assert (state, failed_time, samples, kept) == ("failed", None, 1, 1), first  # replica 1's first pass: 1 sample
    assert f"RuntimeError: CUDA error: launch failure of config 1 on replica 0 in its {raised}" in error, error
    assert error.startswith("on some replica: replica 0: rank 0:"), error
    assert first["outcomes"]["0"][:3] == ["measured", pytest.approx(time), rounds], first
    assert first["outcomes"]["0"][4] == rounds, first  # its round times: every round of the leaders' race
    return first


@pytest.mark.timeout(240)
@pytest.mark.parametrize("phase", ["warmup", "screening", "settled"])
def test_a_leader_that_fails_on_one_replica_is_recorded_alike_on_every_rank(tmp_path, phase):
    """Two one-rank replicas, configs 0 and 1, each its share's winner (``replicas_cases.leader_fails``): config 1,
    the faster, raises (a launch failure) on replica 0 alone in the leaders' race (its warm-up, screening round or
    settled rounds; replica 0 runs it there only, never in its first pass), where replica 1 races it to the end. A
    leader that failed on some replica keeps its gathered first-pass outcome, failed, on every rank (before 741a23b
    each rank kept its own race's: no sample on replica 0, 9 on replica 1). And config 0, left alone in replica
    0's race (a failure in its warm-up or screening round): at 741a23b that race ended with its screening round (1
    sample, rounds 1) where replica 1 settled it (9); its MAX over replicas joined the two. Now a race
    that stops none (``RacePlan.stops`` off) runs and settles a leader left alone as its other replicas do: both
    ranks choose config 0 and record the same table (the same samples, rounds and error)."""
    name = {"warmup": "warm-up"}.get(phase, phase)
    _leader_failed_alike(tmp_path, f"leader_fails_{phase}", name, 1 + SETTLED_CYCLES, 0.3)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("phase", ["warm-up", "first round", "later rounds"])
def test_a_leader_that_fails_on_one_replica_in_cold_timing_is_recorded_alike_on_every_rank(tmp_path, phase):
    """:func:`test_a_leader_that_fails_on_one_replica_is_recorded_alike_on_every_rank` in cold timing
    (``replicas_cases.leader_fails_cold``: one cold call a sample, no settled rounds): config 1 raises on replica 0
    alone in the leaders' warm-up, their first round, or a round after it. Config 0, left alone on replica 0, runs
    every one of the ``n_repeat`` rounds (10) there as on replica 1, and both ranks record the same table."""
    case = {"warm-up": "warmup", "first round": "first", "later rounds": "later"}[phase]
    _leader_failed_alike(tmp_path, f"leader_fails_cold_{case}", phase, 10, 0.3)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("phase", ["warmup", "screening", "settled"])
def test_a_leader_that_fails_on_one_replica_of_a_heavy_race_is_recorded_alike_on_every_rank(tmp_path, phase):
    """:func:`test_a_leader_that_fails_on_one_replica_is_recorded_alike_on_every_rank` on heavy calls
    (``replicas_cases.leader_fails_heavy``: 1.5 and 1 ms a call on the device clock, over the 0.5 ms from which a race
    is heavy): the leaders' race is heavy on both replicas and settles after one screening round into
    ``HEAVY_CYCLES`` settled rounds (the sift's path), config 1 raising on replica 0 alone in its warm-up, screening
    round or settled rounds. Config 0 runs 1 + ``HEAVY_CYCLES`` rounds on both replicas, and both ranks record the same
    table."""
    name = {"warmup": "warm-up"}.get(phase, phase)
    _leader_failed_alike(tmp_path, f"leader_fails_heavy_{phase}", name, 1 + HEAVY_CYCLES, 1.5)


def _every_leader_failed(tmp_path, case: str, heavy: bool, races: int) -> tuple[dict, str]:
    """Run ``replicas_cases.case`` (both leaders, configs 0 and 1, raise on replica 0 alone in the leaders' settled
    rounds) on two one-rank replicas, and assert what every such case must hold: both ranks exit 0 (nothing hangs),
    the trap is set (on rank 0 alone, in the settled rounds), both record the same decision or raise the same
    error, and replica 0's first leaders' race ran as one settled block: one make-up step after the first failure,
    both failures logged, and its rounds (9, heavy 7) closed with nothing run after the last failure (``races``: how
    many races of that many rounds rank 0 logs in all). Returns rank 0's record and log."""
    results = run_ranks(CASES, 2, [case], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert (first.pop("raised"), second.pop("raised")) == (["settled"], []), (first, second)  # the trap is set
    assert first == second, (first, second)
    rounds = 1 + (HEAVY_CYCLES if heavy else SETTLED_CYCLES)
    log = (tmp_path / "logs" / "rank-0.log").read_text()
    assert log.count("sample(s) missing on some rank after a failure: taken again") == 1, log  # one make-up step
    assert log.count(f"] race: {rounds} round(s) (settled from 1)") == races, log  # the block's rounds closed, unrun
    assert log.count("FAILED (rank 0: RuntimeError: CUDA error: launch failure of config") == 2, log
    return first, log


def _leaders_error(config: int) -> str:
    """The error every rank records of leader ``config``, raised on replica 0 alone in its settled rounds."""
    return (f"on some replica: replica 0: rank 0: RuntimeError: CUDA error: launch failure of config {config} on "
            f"replica 0 in its settled")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("heavy", [False, True])
def test_a_replica_whose_every_leader_fails_in_its_settled_rounds_runs_no_more_of_them(tmp_path, heavy):
    """Two one-rank replicas (``replicas_cases.every_leader_fails_settled``, ``..._heavy_settled``): both leaders,
    configs 0 and 1, the only configs, raise on replica 0 alone in the leaders' settled rounds, where replica 1
    races both to the end. Replica 0's settled block is one step: the first failure ends it, a make-up step takes the
    other leader's missing samples, whose first fails too; its race then closes the block's other rounds with nothing
    run and no exchange (its log still counts them: 9 rounds, 7 heavy), and goes on to the leaders' exchange across
    replicas, which replica 1 meets. Every config failed on some replica (no other is left to race): both ranks raise
    the same ``AllConfigsFailedError``, each error of replica 0's naming its rank 0, and no second leaders' race
    runs. Before, ``decide.failure_text`` named this process's rank in every error's ``rank 0`` of a one-rank group
    (for a rank tuning alone): rank 1 said replica 0's failures were its own (``replica 0: rank 1``), and the two
    ranks raised different messages."""
    case = "every_leader_fails_heavy_settled" if heavy else "every_leader_fails_settled"
    first, log = _every_leader_failed(tmp_path, case, heavy, races=1)
    assert first["error"] == "AllConfigsFailedError", first
    for config in (0, 1):
        assert f"config {config} ({{v: {config}}}): {_leaders_error(config)}" in first["message"], first
    assert "rank 1" not in first["message"], first
    assert "racing the next leaders" not in log, log


@pytest.mark.timeout(240)
@pytest.mark.parametrize("heavy", [False, True])
def test_the_replicas_race_the_next_leaders_when_every_leader_failed_on_some_replica(tmp_path, heavy):
    """:func:`test_a_replica_whose_every_leader_fails_in_its_settled_rounds_runs_no_more_of_them` on 4 configs
    (``replicas_cases.every_leader_fails_next``, ``..._heavy_next``): configs 2 and 3, slower than the leaders but
    usable in their own replica's first pass (never run on replica 0 or 1 alike), are left. The replicas race them,
    the next leaders of the gathered table, on every replica (a second leaders' race, logged with why), and both
    ranks choose config 2, the faster, which never failed, with the same decision: configs 0 and 1 failed, each
    with replica 0's error, config 3 the runner-up. Before, every rank raised ``AllConfigsFailedError``."""
    case = "every_leader_fails_heavy_next" if heavy else "every_leader_fails_next"
    # rank 0's races of 9 (heavy 7) rounds: its share's, the first leaders' (closed unrun) and the next leaders'
    first, _ = _every_leader_failed(tmp_path, case, heavy, races=3)
    assert "error" not in first, first
    rounds = 1 + (HEAVY_CYCLES if heavy else SETTLED_CYCLES)
    assert (first["chosen"], first["runner_up"], first["rounds"]) == (2, 3, rounds), first
    for config in (0, 1):
        state, time, *_, error = first["outcomes"][str(config)]
        assert (state, time) == ("failed", None), first
        assert error.startswith(_leaders_error(config)), error
    for config in (2, 3):  # raced to the end on every replica, never failed
        state, _, samples, _, kept, error = first["outcomes"][str(config)]
        assert (state, samples, kept, error) == ("measured", rounds, rounds, None), first
    for rank in (0, 1):
        log = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        again = ("every leader failed on some replica (configs 0, 1); racing the next leaders of the first pass on "
                 "every replica (leaders' race 2)")
        assert log.count(again) == 1, log
        assert log.index(again) > log.rfind("FAILED ("), log  # after the leaders' failures (replica 0's)


@pytest.mark.timeout(240)
def test_a_first_pass_failure_names_its_replica_alike_on_every_rank(tmp_path):
    """Config 2 of replica 0's share raises on replica 0 in its first pass (``replicas_cases.first_pass_fails``):
    every rank records it failed with the same error, which names its replica as a leader's failure does
    (``replica 0: rank 0: ...``). Before, the error read ``rank 0: ...`` on every rank, naming no replica: with
    one-rank replicas every replica's errors say rank 0."""
    results = run_ranks(CASES, 2, ["first_pass_fails"], env=tuner_env(tmp_path, 30), timeout=180)
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert (first.pop("raised"), second.pop("raised")) == ([None], []), (first, second)  # the trap is set
    assert first == second and first["chosen"] == 1, (first, second)
    state, time, *_, error = first["outcomes"]["2"]
    assert (state, time) == ("failed", None), first
    assert error.startswith("replica 0: rank 0: RuntimeError: CUDA error: launch failure of config 2"), error


@pytest.mark.timeout(240)
def test_where_every_leader_failed_and_the_budget_is_spent_the_first_pass_decides_among_the_next_leaders(tmp_path):
    """:func:`test_the_replicas_race_the_next_leaders_when_every_leader_failed_on_some_replica` with ``budget=``
    whose clock reads spent on replica 0 once its leaders raised (``replicas_cases.every_leader_fails_next_cut``),
    on real ranks: the replicas' clock, agreed at the leaders' exchange, is spent, so no second leaders' race runs;
    both ranks record the same decision, a cut, config 2 (the first pass's best of the next leaders) chosen, configs
    0 and 1 failed with replica 0's error, and both logs say why."""
    first, log = _every_leader_failed(tmp_path, "every_leader_fails_next_cut", False, races=2)
    assert "error" not in first and first["cut"], first
    assert (first["chosen"], first["runner_up"]) == (2, 3), first
    for config in (0, 1):
        state, _, *_, error = first["outcomes"][str(config)]
        assert state == "failed" and error.startswith(_leaders_error(config)), first
    for rank in (0, 1):
        text = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert "every leader failed on some replica (configs 0, 1); the time budget is spent" in text, text
        assert "(leaders' race 2)" not in text and "(race 2)" not in text, text


def _killed_attempts(tmp_path, kill_rank: int, kill_runs: str, runs: int, own_folders: bool = False) -> list:
    """Run ``replicas_cases.every_leader_fails_next_killed`` as ``runs`` attempts of one job on two one-rank
    replicas (T = 10 s), rank ``kill_rank`` SIGKILLed in the attempts ``kill_runs`` (the first in the second leaders'
    race's settled rounds, the others in the config it died in then), each attempt's ranks ended within 120 s; with
    ``own_folders`` each rank keeps its cache and journals in a folder of its own (ranks on different nodes), else
    they share one. Returns each attempt's rank results."""
    calls = tmp_path / "calls"
    calls.mkdir()
    env = tuner_env(tmp_path, 10, FAULT_DIR=str(calls), KILL_RANK=str(kill_rank), KILL_RUNS=kill_runs)
    own = {r: {"TRITON_DIST_AUTOTUNE_CACHE_DIR": str(tmp_path / f"cache{r}")} for r in (0, 1)} if own_folders else None
    return [run_ranks(CASES, 2, ["every_leader_fails_next_killed"], env={**env, "RUN": str(run)}, timeout=120,
                      per_rank_env=own) for run in range(runs)]


def _calls(tmp_path, rank: int, run: int) -> list[tuple[int, int, str]]:
    """The calls rank ``rank`` ran in attempt ``run``: (config, leaders' race or 0, phase), in order."""
    lines = (tmp_path / "calls" / f"calls.rank{rank}").read_text().split("\n")
    return [(int(v), int(race), phase) for r, v, race, phase in (line.split() for line in lines if line)
            if r == str(run)]


def _lost_a_rank(tmp_path, results, kill_rank: int, run: int) -> int:
    """Assert that attempt ``run`` lost rank ``kill_rank`` (SIGKILLed) and its peer ended at once with a
    ``GroupTimeoutError`` (exit 0: the case prints it); returns the config the rank died in (FAULT_DIR's
    ``killed.<run>``)."""
    survivor = 1 - kill_rank
    assert results[kill_rank].returncode == -9 and results[survivor].returncode == 0, [r.stderr[-2000:]
                                                                                      for r in results]
    assert results[survivor].result["error"] in ("GroupTimeoutError", "RankFailedError"), results[survivor].result
    killed = int((tmp_path / "calls" / f"killed.{run}").read_text())
    assert _calls(tmp_path, kill_rank, run)[-1][0] == killed
    return killed


def _second_race_lost_a_rank(tmp_path, results, kill_rank: int) -> int:
    """Assert the first attempt's trap: leaders 0 and 1 raised on replica 0 in their settled rounds, a second
    leaders' race began on both ranks (logged), and ``kill_rank`` died in one of its leaders (configs 2, 3) there;
    returns that config."""
    killed = _lost_a_rank(tmp_path, results, kill_rank, 0)
    assert killed in (2, 3) and _calls(tmp_path, kill_rank, 0)[-1] == (killed, 2, "settled"), killed
    assert {v for v, race, phase in _calls(tmp_path, 0, 0) if (race, phase) == (1, "settled")} == {0, 1}
    for rank in (0, 1):
        log = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert log.count("every leader failed on some replica (configs 0, 1); racing the next leaders of the first "
                         "pass on every replica (leaders' race 2)") == 1, log
    return killed


def _decided_alike(results) -> dict:
    """Assert that both ranks of an attempt exit 0 with the same record, raising nothing; returns it."""
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    first, second = (r.result for r in results)
    assert first == second, (first, second)
    assert first.pop("raised") == [] and "error" not in first, first
    return first


def _left_out(record: dict, config: int, error: str) -> None:
    """Assert that ``config`` is failed in ``record`` with an error that starts with ``error``, naming what to do."""
    state, time, samples, *_, message = record["outcomes"][str(config)]
    assert (state, time, samples) == ("failed", None, 0), record
    assert message.startswith(error) and message.endswith("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1"), message


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_rank", [0, 1])
def test_a_rank_killed_in_the_second_leaders_race_resumes_alike_on_a_rerun(tmp_path, kill_rank):
    """:func:`test_the_replicas_race_the_next_leaders_when_every_leader_failed_on_some_replica` as a job that loses
    a rank (``replicas_cases.every_leader_fails_next_killed``, one cache folder): leaders 0 and 1 raise on replica 0
    in their settled rounds, and in the second leaders' race (configs 2 and 3) rank ``kill_rank`` is SIGKILLed inside
    one of them; its peer ends at the leaders' exchange (``GroupTimeoutError``: no sign of life, or the store lost
    with rank 0). The rerun, on the same folder, reads every replica's journals: configs 0 and 1 are failed from the
    earlier attempt and never run again on any rank; the config the rank died in is a suspect (one attempt ended
    inside it), measured once more; configs 2 and 3, ``measured`` in the journals (a first pass's times are not
    resumed: raced again), are raced again alike on both replicas; both ranks exit 0 and record the same decision,
    config 2 (runner-up 3, every round's samples), written once to the cache, the journals removed."""
    first, again = _killed_attempts(tmp_path, kill_rank, "0", 2)
    killed = _second_race_lost_a_rank(tmp_path, first, kill_rank)
    owner = killed % 2  # the replica whose share holds it (replica j races positions j, j + 2 of [0, 1, 2, 3])
    log = (tmp_path / "logs" / f"rank-{owner}.log").read_text()
    assert (f"config {killed} from the journal: suspect: ranks [0] were inside this config when 1 earlier attempt(s) "
            "ended without an error") in log, log
    record = _decided_alike(again)
    rounds = 1 + SETTLED_CYCLES
    assert (record["chosen"], record["runner_up"], record["rounds"], record["cut"]) == (2, 3, rounds, False), record
    for config in (0, 1):
        _left_out(record, config, "in an earlier attempt: rank 0: RuntimeError: CUDA error: launch failure of config "
                                  f"{config} on replica 0 in its settled")
    for config in (2, 3):
        state, _, samples, _, kept, error = record["outcomes"][str(config)]
        assert (state, samples, kept, error) == ("measured", rounds, rounds, None), record
    for rank in (0, 1):
        ran = _calls(tmp_path, rank, 1)
        assert {v for v, _, _ in ran} == {2, 3}, ran  # the failed leaders never run again
        # outside the leaders' races: its share's survivor (config 2 + rank), and the decided call of config 2
        assert {v for v, race, _ in ran if race == 0} == {2, 2 + rank}, ran
        assert {(v, race) for v, race, phase in ran if phase == "settled"} == {(2, 1), (3, 1)}, ran
    cache = tmp_path / "cache"
    assert not list(cache.rglob("*.journal")), list(cache.rglob("*"))
    (entry,) = (p for p in cache.rglob("*.json"))
    stored = json.loads(entry.read_text())
    assert stored["index"] == 2, stored
    assert {str(m["index"]): [m["state"], m["time"], m["samples"], m["error"]] for m in stored["measurements"]} == \
        {i: [o[0], o[1], o[2], o[5]] for i, o in record["outcomes"].items()}, (stored, record)


@pytest.mark.timeout(300)
def test_a_config_that_ends_two_attempts_of_the_second_leaders_race_is_left_out_as_crashed(tmp_path):
    """:func:`test_a_rank_killed_in_the_second_leaders_race_resumes_alike_on_a_rerun` where rank 1 dies in the same
    config again in the rerun (a suspect measured once more: in its replica's first pass), each rank keeping its
    journals in a folder of its own (ranks on different nodes). The third attempt leaves that config out as crashed
    (two attempts ended inside it), never running it, with configs 0 and 1 failed as before: both ranks exit 0 and
    choose the other of configs 2 and 3, alike."""
    first, second, third = _killed_attempts(tmp_path, 1, "0,1", 3, own_folders=True)
    killed = _second_race_lost_a_rank(tmp_path, first, 1)
    assert _lost_a_rank(tmp_path, second, 1, 1) == killed
    record = _decided_alike(third)
    other = 5 - killed
    assert (record["chosen"], record["runner_up"], record["cut"]) == (other, None, False), record
    _left_out(record, killed, "crashed: ranks [0] were inside this config when 2 earlier "
                              "attempt(s) ended without an error")
    for config in (0, 1):
        _left_out(record, config, "in an earlier attempt: rank 0: RuntimeError: CUDA error: launch failure of config "
                                  f"{config} on replica 0 in its settled")
    for rank in (0, 1):
        assert {v for v, _, _ in _calls(tmp_path, rank, 2)} == {other}, _calls(tmp_path, rank, 2)
    assert not list(tmp_path.glob("cache*/**/*.journal")), list(tmp_path.glob("cache*/**/*"))


@pytest.mark.timeout(300)
def test_two_one_rank_replicas_killed_in_one_config_in_one_attempt_make_it_a_suspect_in_a_shared_folder(tmp_path):
    """Both one-rank replicas of a node SIGKILLed inside config 0 in the leaders' race of one attempt
    (``replicas_cases.every_replica_killed_in_a_leader``), their journals in one cache folder; the rerun's rank 0
    adopts the folder's journals first. One attempt ended inside config 0: a suspect, raced once more on both
    replicas, both ranks deciding alike; the command line's ``list`` reads the journals so too (before, it merged
    the two replicas' files as one rank's, counted two attempts and showed config 0 crashed). Before, every
    one-process group's journal had one name (``...rank0``), told apart by lock only: rank 0's process adopted both
    files and counted the two processes' ends as two attempts, so config 0 was left out at once (``crashed: ...
    when 2 earlier attempt(s) ended``) on every rank."""
    calls = tmp_path / "calls"
    calls.mkdir()
    env = tuner_env(tmp_path, 10, FAULT_DIR=str(calls))
    first = run_ranks(CASES, 2, ["every_replica_killed_in_a_leader"], env={**env, "RUN": "0"}, timeout=120)
    assert [r.returncode for r in first] == [-9, -9], [r.stderr[-2000:] for r in first]
    for rank in (0, 1):
        assert _calls(tmp_path, rank, 0)[-1][0] == 0 and _calls(tmp_path, rank, 0)[-1][2] != "None"
    journals = sorted(p.name for p in (tmp_path / "cache").rglob("*.journal"))
    assert len(journals) == 2, journals
    listed = run_cli(["list", "--json", "--cache-dir", str(tmp_path / "cache")], base_env(), timeout=120)
    (unfinished,) = json.loads(listed.stdout)["unfinished"]  # as the rerun will read the journals (before: config
    assert unfinished["attempts"] == 1 and len(unfinished["groups"]) == 2, unfinished  # 0 crashed, in 2 attempts)
    assert [(c["index"], c["state"]) for c in unfinished["configs"]] == [(0, "suspect"), (1, "measured")], unfinished
    assert "when 1 earlier attempt(s) ended" in unfinished["configs"][0]["error"], unfinished
    again = run_ranks(CASES, 2, ["every_replica_killed_in_a_leader"], env={**env, "RUN": "1"}, timeout=120)
    record = _decided_alike(again)
    log = (tmp_path / "logs" / "rank-0.log").read_text()  # config 0 is replica 0's share
    assert ("config 0 from the journal: suspect: ranks [0] were inside this config when 1 earlier attempt(s) ended "
            "without an error") in log, log
    for rank in (0, 1):
        assert "crashed" not in (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert 0 in {v for v, race, _ in _calls(tmp_path, rank, 1) if race}, _calls(tmp_path, rank, 1)
    state, _, samples, *_, error = record["outcomes"]["0"]
    assert (state, error) == ("measured", None) and samples > 0, record
    assert record["chosen"] == 1, record
    assert not list((tmp_path / "cache").rglob("*.journal")), list((tmp_path / "cache").rglob("*"))


@pytest.mark.timeout(240)
def test_a_config_that_ends_two_attempts_each_on_another_replica_is_left_out_as_crashed(tmp_path):
    """Under torchrun ``--max-restarts 2`` (``replicas_cases.a_leader_kills_a_replica_each_attempt``, two one-rank
    replicas, one cache folder): attempt 0 loses rank 0 inside config 0 in the leaders' race, attempt 1 (config 0 a
    suspect, raced once more) loses rank 1 there. Two attempts ended inside config 0, each on another replica: the
    third leaves it out (``crashed: replicas [0, 1] ... 2 earlier attempt(s)``), never running it, and both ranks
    choose config 1 alike. Before, each replica's journal held one end and the replicas' views kept the strongest
    (a suspect): config 0 was raced a third time (with more replicas, up to one attempt per replica and one more)."""
    calls = tmp_path / "calls"
    calls.mkdir()
    env = tuner_env(tmp_path, 10, FAULT_DIR=str(calls))
    cmd, full = torchrun_command(["--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                                  "--monitor-interval", "0.1"], CASES, ["a_leader_kills_a_replica_each_attempt"], env)
    job = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=200)
    assert job.returncode == 0, job.stderr[-3000:]
    ran = {rank: [line.split() for line in (calls / f"calls.rank{rank}").read_text().splitlines()] for rank in (0, 1)}
    for attempt in ("0", "1"):  # each attempt ended with rank `attempt` in config 0 of the leaders' race
        last = [call for call in ran[int(attempt)] if call[0] == attempt][-1]
        assert last[1] == "0" and last[3] != "None", ran
    for rank in (0, 1):
        assert "0" not in {v for a, v, _, _ in ran[rank] if a == "2"}, ran  # never run in the third attempt
    first, second = parse_results(job.stdout)  # the third attempt's ranks (the others were killed or stopped)
    assert first == second, (first, second)
    assert first["chosen"] == 1 and first["raised"] == [], first
    state, _, samples, *_, error = first["outcomes"]["0"]
    assert (state, samples) == ("failed", 0), first
    assert error.startswith("crashed: replicas [0, 1] were inside this config when 2 earlier attempt(s) ended "
                            "without an error"), error
    assert not list((tmp_path / "cache").rglob("*.journal")), list((tmp_path / "cache").rglob("*"))
