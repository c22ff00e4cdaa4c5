"""Several outcomes of one config in the journals (faults/evidence.py ``merge``): which one a resumed tuning starts
from. A race journals a config that left it again at its end (of the race's final statistic, the same samples); a
later attempt races again a config an earlier attempt left ``measured``; a search journals a config's screening,
then a finalist's race. Before, the merge kept the first record of a config unless a later one held more samples:
a later record with as many (or fewer) samples was dropped."""

from __future__ import annotations

import json
import time

import pytest
from harness import tune_alone

from triton_dist_tune.faults.evidence import merge
from triton_dist_tune.faults.journal import SCREENING, Journal
from triton_dist_tune.records import Outcome
from triton_dist_tune.space import describe

DESCRIPTIONS = ["a", "b", "c", "d"]


def timed(index: int, state: str, times: list[float], time_ms: float, session: str, **extra):
    return {"index": index, "state": state, "config": DESCRIPTIONS[index], "time": time_ms, "round_times": times,
            "samples": len(times), "session": session, **extra}


@pytest.mark.timeout(30)
def test_a_config_journaled_again_at_the_end_of_its_race_keeps_its_final_time_whichever_rank_lost_a_record():
    """Config 1 left the race after 2 rounds (126 ms, the median of 120 and 132); the race turned noisy and, at its
    end, journaled it again with the least of the same samples (120 ms). Before: 126 (the first record) was kept.
    A rank whose machine crashed before the second record reached its disk holds only the first: the other
    rank's, which holds more, is taken, whichever rank it is."""
    first = timed(1, "stopped", [120.0, 132.0], 126.0, "s", spread=0.05)
    again = timed(1, "stopped", [120.0, 132.0], 120.0, "s", spread=0.08)
    leader = timed(0, "measured", [40.0, 41.0, 40.0, 60.0], 40.5, "s", settled_time=True)  # a drift-free time
    for per_rank in ([[first, again, leader], [first, again, leader]], [[first, again, leader], [first, leader]],
                     [[first, leader], [first, again, leader]]):
        merged = merge(per_rank, DESCRIPTIONS)
        assert (merged[1]["time"], merged[1]["spread"]) == (120.0, 0.08), per_rank
        kept = Outcome.from_json(merged[0])
        assert kept is not None and kept.settled_time and kept.least() == 40.5  # not its least sample, 40


@pytest.mark.timeout(30)
@pytest.mark.parametrize("samples", [3, 2, 5])
def test_a_config_a_later_attempt_stopped_is_stopped_whatever_its_sample_count(samples):
    """Attempt a ended with configs 0 and 1 in its race (journaled ``measured``, 3 samples each); attempt b raced
    them again and config 0 left the race (``stopped``) after ``samples`` rounds, then b ended too. Before: with 3
    or 2 samples the merge kept a's ``measured`` record, and the next attempt raced config 0 again (it could win),
    although the latest race had found it clearly slower; with 5 it kept b's."""
    a = [timed(0, "measured", [30.0] * 3, 30.0, "a", at=100.0), timed(1, "measured", [20.0] * 3, 20.0, "a", at=101.0)]
    b = [timed(0, "stopped", [31.0] * samples, 31.0, "b", at=200.0)]
    for per_rank in ([a + b, a + b], [a + b, a], [a, a + b]):
        merged = merge(per_rank, DESCRIPTIONS)
        assert (merged[0]["state"], merged[0]["session"]) == ("stopped", "b"), per_rank
        assert merged[1]["state"] == "measured"


@pytest.mark.timeout(30)
def test_attempts_are_ordered_by_when_they_began_not_by_the_file_they_are_in():
    """Attempt a wrote the rank's first journal; attempt b, another job at the same moment, a second slot; attempt c
    adopted both, appending to the first. Read back: a, c, then b. Config 0: measured by a and b, stopped by c."""
    a = timed(0, "measured", [30.0] * 3, 30.0, "a", at=100.0)
    b = timed(0, "measured", [30.0] * 4, 30.0, "b", at=200.0)
    c = timed(0, "stopped", [31.0] * 3, 31.0, "c", at=300.0)
    assert merge([[a, c, b]], DESCRIPTIONS)[0]["session"] == "c"
    assert merge([[{**a, "at": None}, c, b]], DESCRIPTIONS)[0]["session"] == "b"  # no time to tell: as read


@pytest.mark.timeout(30)
def test_a_failure_outweighs_any_time_before_or_after_it():
    failed = {"index": 0, "state": "failed", "config": "a", "error": "boom", "session": "a"}
    for records in ([timed(0, "measured", [1.0], 1.0, "a"), failed], [failed, timed(0, "stopped", [1.0], 1.0, "b")]):
        merged = merge([records], DESCRIPTIONS)
        assert merged[0]["state"] == "failed" and "boom" in merged[0]["error"], records


@pytest.mark.timeout(30)
def test_a_finalists_race_record_keeps_its_screening_beside_it():
    """A search screened config 2 (one sample), sampled it again (journaled alone, then with both samples), and
    raced it as a finalist: its race left it after 2 rounds. Before: the race's record, no longer than the
    screening's, was dropped (and one with more samples replaced the screening's, whose samples a resumed search
    replays, with the race's). Now the outcome is the race's, its screening kept beside it."""
    screen = {"stage": SCREENING}
    one = timed(2, "measured", [50.0], 50.0, "s", **screen)
    alone = timed(2, "measured", [52.0], 52.0, "s", **screen)  # the sample taken again, journaled by its race
    both = timed(2, "measured", [50.0, 52.0], 51.0, "s", **screen)
    for raced in ([49.0, 49.5], [49.0, 49.5, 48.0, 49.0]):
        race = timed(2, "stopped", raced, 49.25, "s")
        merged = merge([[one, alone, both, race]], DESCRIPTIONS)
        assert merged[2]["round_times"] == raced and merged[2]["state"] == "stopped"
        assert merged[2]["screening"]["round_times"] == [50.0, 52.0]
    # killed between the sample taken again and the record of both: the first screening sample is kept
    assert merge([[one, alone]], DESCRIPTIONS)[2]["round_times"] == [50.0]


RESUMED = '''
import os, sys, torch, triton_dist_tune as tdt
sys.path.insert(0, 'tests/scenarios')
from _cases import spend, virtual_clock
ATTEMPT = os.environ["ATTEMPT"]

@tdt.autotune([{"v": v} for v in range(3)], key_fn=lambda x: x.numel(), timing="cold", n_warmup=1, n_repeat=6)
def resumed(x, *, v):
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(f"{ATTEMPT} {v}\\n")
    if ATTEMPT == "1":
        raise KeyboardInterrupt  # the first attempt ends in its first run, blaming nothing
    spend({0: 10, 1: 20, 2: 40}[v])  # config 0 is now the fastest
    return x

with virtual_clock():
    try:
        resumed(torch.ones(4))
    except KeyboardInterrupt:
        pass
print(resumed.tuner.decided)
'''


@pytest.mark.timeout(200)
def test_a_resumed_tuning_does_not_race_again_a_config_the_latest_attempt_stopped(tmp_path):
    """The journals hold two earlier attempts (as a cut or a crash after the race leaves them): a, whose race ended
    with configs 0 and 1 (``measured``, 3 samples each) and config 2 stopped; b, which raced 0 and 1 again and
    stopped config 0 after 3 rounds, then ended. The next attempt starts from b's evidence: config 0 is not
    measured again, config 1 is raced and chosen. Before: a's record of config 0 (as many samples) was kept, config
    0 was raced again and chosen (it now takes 10 ms to config 1's 20)."""
    calls = tmp_path / "calls"
    cache, _ = tune_alone(tmp_path, RESUMED, ATTEMPT="1", CALLS=str(calls))
    (path,) = cache.glob("*/*.journal")  # the first attempt's: config 0 started, then interrupted
    *_, interrupted = [json.loads(line) for line in path.read_text().splitlines()]
    assert interrupted["state"] == "interrupted", interrupted
    identity = {k: interrupted[k] for k in ("job", "group", "ranks", "kept")}
    names = [describe({"v": v}) for v in range(3)]
    now = time.time()

    def record(index, state, times, session, at):
        return {"index": index, "state": state, "config": names[index], "time": times[0], "round_times": times,
                "samples": len(times), "per_rank": [times[0]], **identity, "session": session, "at": at}

    earlier = [record(0, "measured", [30.0] * 3, "a", now - 200), record(1, "measured", [20.0] * 3, "a", now - 199),
               record(2, "stopped", [40.0], "a", now - 198), record(0, "stopped", [31.0] * 3, "b", now - 100)]
    with path.open("a") as journal:
        journal.writelines(json.dumps(r) + "\n" for r in earlier)
    cache, _ = tune_alone(tmp_path, RESUMED, ATTEMPT="2", CALLS=str(calls))
    second = [int(v) for attempt, v in (line.split() for line in calls.read_text().splitlines()) if attempt == "2"]
    assert 0 not in second and second.count(1) > 1, second  # config 1's warm-up, samples and the final call
    (decision,) = [json.loads(p.read_text()) for p in cache.glob("*/*.json")]
    assert decision["index"] == 1, decision
    states = {o["index"]: (o["state"], o.get("resumed")) for o in decision["measurements"]}
    assert states == {0: ("stopped", True), 1: ("measured", False), 2: ("stopped", True)}, states


def started(index: int, session: str, at: float, attempt: str | None = None) -> dict:
    record = {"index": index, "state": "started", "config": DESCRIPTIONS[index], "session": session, "at": at}
    return record if attempt is None else {**record, "attempt": attempt}


def interrupted(index: int, session: str, at: float, attempt: str | None = None) -> dict:
    return {**started(index, session, at, attempt), "state": "interrupted"}


@pytest.mark.timeout(30)
def test_ends_inside_a_config_count_each_agreed_attempt_once_over_ranks_and_replicas():
    """Attempt 0 lost rank 0 inside config 2 (rank 1, stopped by its launcher, journaled ``interrupted``); attempt
    1 lost rank 1 there (rank 0 interrupted). Each rank's journal holds one end: before, the most of one rank, 1,
    made config 2 a suspect, measured a third time. Counted as the attempts the records name (``attempt``, agreed
    by each tuning's journal exchange) it ended 2: left out as crashed. Both ranks ending inside it in one attempt
    count once (a node lost), whether they are ranks of one group or replicas (``recovery.strongest``); records
    that name no attempt (written by an older version) count as the most of one rank, as before."""
    from triton_dist_tune.faults.recovery import strongest

    rank0 = [started(2, "p0", 1.0, "run#0"), started(1, "q0", 5.0, "run#1"), interrupted(2, "q0", 6.0, "run#1")]
    rank1 = [started(2, "p1", 1.0, "run#0"), interrupted(2, "p1", 2.0, "run#0"), started(2, "q1", 6.0, "run#1")]
    merged = merge([rank0, rank1], DESCRIPTIONS)
    assert merged[2]["state"] == "failed" and merged[2]["error"].startswith(
        "crashed: ranks [0, 1] were inside this config when 2 earlier attempt(s)"), merged[2]
    anonymous = [[{k: v for k, v in r.items() if k != "attempt"} for r in rank] for rank in (rank0, rank1)]
    assert merge(anonymous, DESCRIPTIONS)[2]["state"] == "suspect"  # no attempt named: one end per rank
    both = merge([[started(2, "p0", 1.0, "run#0")], [started(2, "p1", 1.0, "run#0")]], DESCRIPTIONS)
    assert both[2]["state"] == "suspect" and both[2]["attempts"] == ["run#0"], both  # one attempt, two ranks
    views = [list(merge([[started(2, "p0", 1.0, a)]], DESCRIPTIONS).values()) for a in ("run#0", "run#1")]
    across = {r["index"]: r for r in strongest(views)}
    assert across[2]["state"] == "failed" and across[2]["error"].startswith(
        "crashed: replicas [0, 1] were inside this config when 2 earlier attempt(s)"), across[2]
    same = [list(merge([[started(2, p, 1.0, "run#0")]], DESCRIPTIONS).values()) for p in ("p0", "p1")]
    assert {r["index"]: r for r in strongest(same)}[2]["state"] == "suspect"  # one attempt on two replicas


def _record(index: int, state: str, at: float, **extra) -> dict:
    return {"index": index, "state": state, "config": DESCRIPTIONS[index], "session": "s", "attempt": "A",
            "at": at, **extra}


@pytest.mark.timeout(30)
def test_a_hang_the_nan_fills_raise_left_blames_nothing_but_a_hang_after_the_group_went_on_does():
    """Over mpi4py (no failure board) a rank whose run raised from the tuner's NaN fill leaves its peer inside a
    collective, which the watchdog ends as ``hung``: no evidence (the raise's). A reviewer's: the first version also
    excused a real hang in a later round of that config, after the group had run its warm-up again and gone on
    (the next attempt then hung in it again); and a damaged ``attempt`` field (a list) raised ``TypeError`` from
    the merge on every rank."""
    fill = _record(1, "interrupted", 1.0, fill=True, error="interrupted: raised from the tuner's NaN fill")
    peer = [_record(1, "started", 0.5, phase="warmup"), _record(1, "hung", 3.0, error="hung: warmup exceeded 2 s")]
    assert 1 not in merge([[_record(1, "started", 0.4, phase="warmup"), fill], peer], DESCRIPTIONS)
    went_on = [_record(1, "started", 0.4, phase="warmup"), fill, _record(1, "started", 1.5, phase="warmup (2)"),
               _record(1, "started", 2.0, phase="round 3")]
    late = [_record(1, "started", 2.0, phase="round 3"), _record(1, "hung", 5.0, error="hung: round 3 exceeded 2 s")]
    merged = merge([went_on, late], DESCRIPTIONS)
    assert merged[1]["state"] == "failed" and "hung on rank 1" in merged[1]["error"], merged
    damaged = [{**record, "attempt": ["A"]} for record in peer]
    assert merge([[fill], damaged], DESCRIPTIONS)[1]["state"] == "failed"


def test_a_resumed_configs_journal_line_in_the_rank_log_is_readable():
    """The rank log said "config 2 from the journal: Outcome(index=2, config='{v: 2}', state='stopped', ...)", the
    record's Python text; now its state and time, or its error."""
    from triton_dist_tune.faults.evidence import outcome_text

    assert outcome_text({"index": 2, "state": "stopped", "time": 0.12345, "config": "{v: 2}"}) == "stopped: 0.1235 ms"
    assert outcome_text({"state": "failed", "error": "in an earlier attempt, hung on rank 0"}) == \
        "failed: in an earlier attempt, hung on rank 0"
    assert outcome_text({"state": "suspect", "error": "suspect: ranks [1] were inside"}) == \
        "suspect: ranks [1] were inside"


def test_a_cache_hit_removes_only_its_own_kept_sets_journal(tmp_path):
    """The journals of an entry are shared by every kept set of its key (evidence belongs to the config). A call
    served from the cache under kept set A ends A's cut attempt; a journal holding kept set B's hang stays, so
    that B's tuning still leaves the hung config out (a reviewer's find: the first cache-hit cleanup removed it)."""
    path = tmp_path / "entry.g.rank0.journal"
    cut = Journal(path, {"kept": "B"})
    cut.append(5, "started", config="{v: 5}")
    cut.append(5, "hung", config="{v: 5}", error="warmup exceeded 2 s")
    cut.close()
    Journal(path, create=False).remove(kept="A")
    assert path.exists() and [r["state"] for r in Journal(path, create=False).read()] == ["started", "hung"]
    Journal(path, create=False).remove(kept="B")
    assert not path.exists()
    Journal(tmp_path / "absent" / "x.journal", create=False).remove(kept="A")  # nothing made, nothing said
    assert not (tmp_path / "absent").exists()


def test_an_ended_tuning_deletes_its_own_kept_sets_records_and_keeps_another_sets(tmp_path):
    """One journal holds kept set B's cut attempt (a hang) and then kept set A's tuning, which ends: A's records go,
    B's stay whole and readable (before: A's end deleted the file, and B's next tuning ran the hung config again)."""
    path = tmp_path / "entry.g.rank0.journal"
    cut = Journal(path, {"kept": "B"})
    cut.append(5, "started", config="{v: 5}")
    cut.append(5, "hung", config="{v: 5}", error="warmup exceeded 2 s")
    cut.close()
    with open(path, "ab") as f:
        f.write(b'{"torn": \n')  # a damaged line: dropped by the rewrite
    ended = Journal(path, {"kept": "A"})
    ended.append(0, "started", config="{v: 0}")
    ended.append(0, "measured", config="{v: 0}", time=1.0)
    assert len(ended.read()) == 4
    ended.remove(kept="A")
    left = Journal(path, create=False)
    assert [(r["state"], r["kept"]) for r in left.read()] == [("started", "B"), ("hung", "B")]
    left.append(6, "started", config="{v: 6}")  # appends after the rewrite start a line of their own
    assert [r["index"] for r in left.read()] == [5, 5, 6]
    left.remove(kept="B")
    assert not path.exists()


def test_journal_evidence_on_a_renumbered_group_names_global_ranks_too():
    """On the group of global ranks [2, 3], the journals' evidence said "hung on rank 1" and "suspect: ranks [1]
    were inside": group ranks, read as global rank 1, the wrong process. Records name their group's global ranks
    (``ranks``), so the messages now name both; on the default group they read as before."""
    def record(index: int, state: str, ranks: list[int], **extra):
        return {"index": index, "state": state, "config": DESCRIPTIONS[index], "session": "s", "ranks": ranks, **extra}

    for ranks, hung, inside in (([2, 3], "hung on group rank 1 (global rank 3)", "group ranks [1] (global ranks [3])"),
                                ([0, 1], "hung on rank 1", "ranks [1]")):
        per_rank = [[record(0, "started", ranks), record(2, "started", ranks)],
                    [record(0, "started", ranks), record(0, "hung", ranks, error="warmup exceeded 2 s"),
                     record(1, "started", ranks)]]
        merged = merge(per_rank, DESCRIPTIONS)
        assert merged[0]["error"].startswith(f"in an earlier attempt, {hung}: warmup exceeded 2 s"), merged[0]
        assert merged[1]["error"].startswith(f"suspect: {inside} were inside this config"), merged[1]
        assert merged[2]["error"].startswith("suspect: ranks [0] were inside") == (ranks == [0, 1]), merged[2]


@pytest.mark.parametrize("field, value", [("session", ["x"]), ("clock", ["graph"]),
                                          ("error", 5), ("phase", [1]), ("stage", {})])
def test_a_journal_line_whose_text_field_is_no_text_is_skipped_not_a_crash_of_every_rank(tmp_path, field, value):
    """One line of one rank's journal with ``"session": ["x"]`` (or a ``clock`` that is a list) failed every rank's
    merge (or its clock's choice) with ``TypeError: unhashable type: 'list'``, at every restart, on 2 gloo ranks; an
    ``error`` that is a number failed the merge's lost-peer check. Now the line is damaged: skipped, named."""
    from triton_dist_tune.faults.journal import parse_records
    from triton_dist_tune.measure.graphs import journaled_clock

    good = timed(0, "measured", [1.0], 1.0, "s", clock="eager")
    lost = {"index": 1, "state": "local_failure", "config": "b", "error": "Connection reset by peer", "session": "s"}
    started = {"index": 1, "state": "started", "config": "b", "session": "s"}
    bad = {**timed(0, "measured", [2.0], 2.0, "t", clock="eager"), field: value}
    if field == "error":
        bad = {**lost, "error": value}
    text = "\n".join(json.dumps(r) for r in (good, bad, lost, started)).encode()
    records, damaged = parse_records(text, tmp_path / "e.rank0.journal")
    assert damaged == [2] and len(records) == 3
    merged = merge([[good, bad, lost, started], [good, started]], DESCRIPTIONS)
    assert merged[0]["time"] == 1.0 and merged[1]["state"] == "suspect"
    assert journaled_clock(merged.values()) == "eager"
