"""A settled leader's time read back from a journal (real files) is the time the race it came from gives it.

``autotune``: a quiet race that is not heavy times a settled leader by its drift-free time (its settled samples
relative to their round's median leader sample); journaled and read back beside another race, that time was taken
again as the median of all its samples, screening ones included (``retaken``). ``settled_time`` keeps a time under
either statistic, right for a heavy race only; a settled leader now journals its drift-free time apart
(``drift_free``), which a time taken again as a median takes.
"""

from __future__ import annotations

import statistics

import pytest

from triton_dist_tune.contextual.exchange import measured_record
from triton_dist_tune.contextual.schedule import Track
from triton_dist_tune.contextual.tracks import TrackInfo
from triton_dist_tune.faults.evidence import merge
from triton_dist_tune.faults.journal import Journal
from triton_dist_tune.function.decide import decide
from triton_dist_tune.measure.race import Race, RacePlan
from triton_dist_tune.records import Outcome

#: the machine's speed in each round (a drift alike for every config): the screening round, then the settled rounds
DRIFT = (1.0, 0.97, 1.0, 1.03, 0.97, 1.0, 1.03)
#: each config's time at speed 1 in the screening round (config 3 reads fastest there), then in each settled round:
#: configs 1-3 read 2-3% behind config 0 in most rounds, none clearly slower (each reads faster in one round)
SCREENING = (1.0, 1.0, 1.0, 0.9)
SETTLED = ((1.0, 1.0, 1.0), (1.03, 0.998, 1.02), (1.04, 0.999, 1.025), (1.05, 0.96, 1.04))


def raced() -> Race:
    """A search's finalists' race (a near-tie block: ``tie_blocks``), quiet and not heavy: one screening round, 3
    settled rounds of the 4 configs; 0 and 1 are 2% apart, a near-tie more samples could settle, so a near-tie block
    follows, and config 3, 4th of the 4 tied leaders, leaves the race before it (``stopped``) with its 3 settled
    samples."""
    race = Race([0, 1, 2, 3], RacePlan(max_rounds=12, min_rounds=1, final_top=4, final_rounds=3, tie_blocks=1,
                                       seed="read-back"))
    while not race.finished(0.0):
        for index in race.order():
            base = SCREENING[index] if race.rounds == 0 else SETTLED[index][(race.rounds - 1) % 3]
            race.record(index, [base * DRIFT[race.rounds]])
        race.end_round()
    return race


def test_a_quiet_races_settled_leader_read_back_keeps_the_time_its_race_gives_it(tmp_path):
    """Attempt 1's race (:func:`raced`) journals every config at its end, as a race does (``Measurer._final``),
    into a real journal file, and the attempt ends before its decision is written. The journal is read back and
    merged as the next attempt does (``merge``, ``Outcome.from_json``), and config 3, ``stopped``, is taken as
    ``_resume`` takes it, beside a quiet race of the others that decides. Config 3's time must be the one attempt
    1's race gave it, its drift-free time of its settled rounds (about 1.02); before, it was taken again as the
    median of all 4 of its samples, its fast screening sample included (0.989).

    (End to end, ``autotune`` reaches this read-back with no config today: ``_resume`` reads back ``stopped`` and
    ``failed`` records only, a quiet race that is not heavy stops a settled leader only before a near-tie block,
    which only a search's finalists' race runs, and a resumed search races its finalists again from their
    screening records: ``Searched._known``.)"""
    race = raced()
    assert race.tie_blocks == 1 and race.entrants[3].state == "stopped" and race.entrants[3].settled
    assert race.winner() == 0 and race.location().__name__ == "median" and not race.settled_noise  # quiet, light
    journal = Journal(tmp_path / "entry.g.rank0.journal")
    uninterrupted = {i: race.outcome(i, f"c{i}", 0) for i in sorted(race.entrants)}
    for outcome in uninterrupted.values():
        journal.record(outcome)
    journal.close()

    reader = Journal(tmp_path / "entry.g.rank0.journal", create=False)
    merged = merge([reader.read()], [f"c{i}" for i in range(4)])
    reader.close()
    read_back = Outcome.from_json({**merged[3], "index": 3})
    assert read_back is not None and read_back.state == "stopped" and len(read_back.round_times) == 4
    read_back.resumed = True

    again = Race([0, 1, 2], RacePlan(max_rounds=3, min_rounds=1, seed="again"))  # attempt 2: the others, quiet
    while not again.finished(0.0):
        for index in again.order():
            again.record(index, [SETTLED[index][0]])
        again.end_round()
    decision = decide([*(again.outcome(i, f"c{i}", 0) for i in range(3)), read_back], again, "steady")
    assert decision.statistic == "median" and decision.index == 0
    (three,) = [o for o in decision.outcomes if o.index == 3]
    expected = uninterrupted[3].time
    assert expected > 1.02 * statistics.median(read_back.round_times), (expected, read_back)
    assert three.time == pytest.approx(expected, rel=1e-12), (three.time, expected,
                                                              statistics.median(read_back.round_times))


def test_a_damaged_drift_free_time_reads_as_none():
    record = {"index": 0, "config": "c0", "state": "stopped", "time": 1.0, "round_times": [1.0, 2.0]}
    for damaged in ("1.0", -1.0, [1.0], True):
        outcome = Outcome.from_json({**record, "drift_free": damaged})
        assert outcome is not None and outcome.drift_free is None, damaged
    kept = Outcome.from_json({**record, "drift_free": 1.5})
    assert kept is not None and kept.drift_free == 1.5


#: ``contextual_autotune``'s samples of each config, in the order launched (ms): 3 screening rounds, then config 0
#: and 1's 4 closing rounds (config 2, 3x slower, leaves after 2), on a machine whose speed swings by 1.5x from one
#: round to the next: the race reads noisy, and its times are least samples. Config 1 leads every closing round by
#: 10%: its drift-free time leads; the median of all samples (screening included) would choose config 0
CONTEXTUAL = {0: [1.0, 1.5, 1.0, 0.99, 1.485, 0.99, 1.485], 1: [1.05, 1.05, 1.5, 0.9, 1.35, 0.9, 1.35],
              2: [3.0, 4.5, 3.0]}


def track() -> Track:
    info = TrackInfo(name="k", descriptions=[f"c{i}" for i in range(3)], entry="e", space_text="",
                     pruned=[0, 1, 2])
    return Track("mod.k", "(1,)", {0: info, 1: info}, 0, 3)


def test_a_close_contender_journaled_under_noise_keeps_its_drift_free_time_read_back_beside_a_quiet_race(tmp_path):
    """Attempt 1's contextual race reads noisy, so its close contenders are timed by their least sample (config 1
    chosen, 0.9 ms to 0.99); their journal records (a real file, as ``journal_outcomes`` writes them) are read back
    by attempt 2, which races nothing (every config known: its statistic is the median). There each contender must
    take the time its own race gives it under the median, the drift-free median of its closing rounds (config 1
    leads by 10%), as commit ff9cb45 made a contender journaled by a quiet race keep it; before, it took the median
    of all its samples (1.0 and 1.05 ms: config 0 chosen by its screening)."""
    first = track()
    launched = {i: 0 for i in CONTEXTUAL}
    while not first.done:
        index = first.current()
        ms = CONTEXTUAL[index][launched[index]]
        launched[index] += 1
        first.advance({r: [(index, ms, None)] for r in range(2)})
    assert first.statistic == "least" and launched == {0: 7, 1: 7, 2: 2}, (first.statistic, launched)
    assert first.best == 1 and first.times == {0: 0.99, 1: 0.9, 2: 3.0}, first.times
    race = first.race
    assert race is not None and race.entrants[0].settled and race.entrants[1].settled
    drift_free = {i: race.outcome(i, f"c{i}", 0).drift_free for i in (0, 1)}
    assert drift_free[1] < drift_free[0] / 1.05, drift_free  # config 1 leads every closing round by 10%

    journal = Journal(tmp_path / "e.g.rank0.journal")
    for index in (0, 1, 2):
        journal.append(index, "measured", config=f"c{index}", **measured_record(first, index))
    journal.close()
    reader = Journal(tmp_path / "e.g.rank0.journal", create=False)
    merged = merge([reader.read()], [f"c{i}" for i in range(3)])
    reader.close()

    second = track()
    second.resume(merged)
    assert second.done and second.statistic == "median" and second.resumed == {0, 1, 2}
    assert second.times[0] == pytest.approx(drift_free[0], rel=1e-12), (second.times, drift_free)
    assert second.times[1] == pytest.approx(drift_free[1], rel=1e-12), (second.times, drift_free)
    assert second.times[2] == 3.75 and second.best == 1, (second.times, second.best)  # before: 0, by 1.0 to 1.05


def test_a_max_runs_cut_in_the_closing_rounds_leaves_its_contenders_to_race_again():
    """Not a defect: a cut (``max_runs``) during the closing rounds journals none of the contenders, by design. Its
    choice is provisional (never served), and the next job tunes the key again from the journals the cut keeps: the
    contenders race their closing rounds in full. Had the cut journaled their cut-short times, the next job would
    read every config back, race nothing and decide at once, ``tuned`` (a final, served record), on the evidence
    the cut left provisional: ``second`` shows it."""
    first = track()
    launched = {i: 0 for i in CONTEXTUAL}
    while launched[0] + launched[1] < 8:  # the screening, then one closing round of the 4
        index = first.current()
        ms = CONTEXTUAL[index][launched[index]]
        launched[index] += 1
        first.advance({r: [(index, ms, None)] for r in range(2)})
    assert first.race is not None and first.race.settling and not first.done
    first.force("best so far at max_runs")
    assert first.cut and first.done

    journaled_if_cut = {i: {"state": "measured", "config": f"c{i}", **measured_record(first, i)} for i in (0, 1, 2)}
    second = track()
    second.resume(journaled_if_cut)
    assert second.done and second.how == "tuned" and not second.cut  # decided at once: no closing round run

    third = track()  # what the cut journals: config 2 (it left the race), the contenders race again
    third.resume({2: journaled_if_cut[2]})
    launched = {0: 0, 1: 0}
    while not third.done:
        index = third.current()
        ms = CONTEXTUAL[index][launched[index]]
        launched[index] += 1
        third.advance({r: [(index, ms, None)] for r in range(2)})
    assert launched == {0: 7, 1: 7} and third.how == "tuned" and third.best == 1, (launched, third.how)
