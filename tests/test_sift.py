"""The race's sift: heavy calls send more leaders to the settled block, and its first rounds keep the best of them."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from harness import HERE, run_cases, tune_alone, tuner_env

from triton_dist_tune.function.options import TuneOptions
from triton_dist_tune.measure.race import Race, RacePlan, sift_note
from triton_dist_tune.measure.timing import (
    HEAVY_CYCLES,
    POWER_SETTLE_ABOVE_MS,
    SETTLED_LEADERS_HEAVY,
    SIFT_AFTER,
    SIFT_AFTER_GROUP,
    SIFT_CYCLES,
    SIFT_TOP,
)
from triton_dist_tune.stats import median

#: a heavy race's plan: 3 leaders after 3 screening rounds; when the screening leader takes 0.5 ms or more, up to 6
#: after 2 rounds, sifted by 1 settled round to 3, for 5 settled rounds in all
PLAN = RacePlan(max_rounds=14, min_rounds=3, final_top=3, final_rounds=8, final_top_heavy=6, heavy_from_ms=0.5,
                sift_after=2, sift_rounds=1, heavy_rounds=5, seed="s")


def screened(plan: RacePlan, scale: float, rounds: int, configs: int = 8, noisy: bool = False) -> Race:
    """A race of ``configs`` configs within 3% of each other (nobody clearly slower) after ``rounds`` screening
    rounds, at ``scale`` ms per call (``noisy``: every other sample 40% slower)."""
    race = Race(list(range(configs)), plan)
    for r in range(rounds):
        for i in race.order():
            race.record(i, [scale * (1.0 + 0.004 * ((3 * i + 5 * r) % 8)) * (1.4 if noisy and (i + r) % 2 else 1)])
        race.end_round()
    return race


def settle(race: Race, times: dict[int, float], rounds: int) -> None:
    """``rounds`` settled rounds in which each leader running takes ``times[i]``."""
    for _ in range(rounds):
        for i in race.order():
            race.record(i, [times[i]])
        race.end_round()


def test_a_heavy_leader_sends_more_to_the_settled_block_after_two_rounds_and_its_first_round_keeps_three():
    """Eight configs the screening cannot tell apart, at 1.5 ms per call: after 2 screening rounds (not 3) six
    leaders go on; their first settled round is a block of its own, after which the three best of it stay, the
    other three stopped with their settled sample, and the rest of the settled rounds (one block) time the three
    alone, 5 in all."""
    race = screened(PLAN, 1.5, 2)
    assert race.settling and race.settled_from == 2
    leaders = race.running
    assert len(leaders) == 6 and race.sift_until == 3 and race.sift_size == 6
    assert race.block() == 1 and not race.finished(0.0)
    best = sorted(leaders)[-3:]  # the screening's last three are the best once settled (the limiter follows them)
    times = {i: (1.60 if i in best else 1.70) + 0.001 * i for i in leaders}
    settle(race, times, 1)
    assert not race.finished(0.0)  # the sift happens here; 4 settled rounds to go
    assert race.running == best and sorted(race.sifted) == sorted(set(leaders) - set(best))
    assert all(race.entrants[i].state == "stopped" and len(race.entrants[i].settled) == 1 for i in race.sifted)
    assert race.block() == 4
    settle(race, times, 4)
    assert race.finished(0.0) and race.winner() == best[0] and len(race.entrants[best[0]].settled) == 5
    assert "6 leaders sifted to 3 after 1 settled round(s)" in sift_note(race)


def test_no_sift_under_the_heavy_mark_or_without_the_plans_consent_and_a_sift_under_noise_ranks_by_settled_samples():
    """Calls of 0.3 ms (under the 0.5 ms mark) and a plan without the sift settle after 3 rounds with three
    leaders. Noisy heavy samples (every other one 40% slower) sift too, after 2 rounds, and the sift keeps the
    three best settled samples, where the race's statistic (the least of all samples) would rank by the
    screening's."""
    for race in (screened(PLAN, 0.3, 3), screened(RacePlan(max_rounds=14, min_rounds=3, final_top=3, seed="s"), 1.5,
                                                         3)):
        assert race.settled_from == 3 and len(race.running) == 3 and race.sift_until is None
    noisy = screened(replace(PLAN, final_top_fast=8, fast_below_ms=0.1), 1.5, 2, noisy=True)
    assert noisy.location() is min and noisy.sift_until == 3 and len(noisy.running) == 6
    best = sorted(noisy.running, key=lambda i: min(noisy.entrants[i].timed()))[-3:]  # least screened: the worst
    settle(noisy, {i: 1.6 if i in best else 1.8 for i in noisy.running}, 1)
    assert not noisy.finished(0.0) and sorted(noisy.running) == sorted(best)


def test_a_noisy_sifted_races_times_taken_again_from_their_samples_are_the_races_own():
    """Replicas and a resumed tuning take a noisy race's times again from each outcome's samples (``round_times``:
    measure/noise.py retaken, the replicas' least samples). A heavy race's settled leader keeps the drift-free time
    the race ranked it by (``settled_time``, kept through JSON): of all its samples, its least is a screening one
    (what the sift distrusts), and of its settled ones the sample a fast clock gave."""
    from triton_dist_tune.measure.noise import retaken
    from triton_dist_tune.records import Outcome

    race = Race(list(range(4)), PLAN)
    for i in race.order():  # one screening round: config 1 reads fast there
        race.record(i, [{0: 1.50, 1: 1.30, 2: 1.52, 3: 1.51}[i]])
    race.end_round()
    for r in range(5):  # settled: every other round 40% slower for some, so the drift-free ratios are noisy too
        for i in race.order():
            race.record(i, [{0: 1.60, 1: 1.68, 2: 1.70, 3: 1.80}[i] * (1.4 if (i + r) % 2 else 1.0)])
        race.end_round()
        race.finished(0.0)
    assert race.location() is min and race.finished(0.0)
    outcomes = [race.outcome(i, f"c{i}", 0) for i in range(4)]
    leaders = [o for o in outcomes if o.state == "measured"]
    assert leaders and all(o.settled_time for o in leaders)
    assert all(o.least() == o.time for o in leaders)
    again = retaken(outcomes, True, lambda o: True)
    assert [o.time for o in again] == [o.time for o in outcomes]
    assert [o.time for o in retaken([replace(o, settled_time=False) for o in outcomes], True, lambda o: True)] != [
        o.time for o in outcomes]  # of all samples: config 1's screening sample
    back = Outcome.from_json(leaders[0].to_json())
    assert back is not None and back.settled_time and back.least() == leaders[0].time
    damaged = Outcome.from_json({**leaders[0].to_json(), "settled_time": 3})
    assert damaged is not None and not damaged.settled_time
    old = {k: v for k, v in leaders[0].to_json().items() if k != "settled_time"}
    read = Outcome.from_json({**old, "least_of": 5})  # a file of the forty-sixth session's
    assert read is not None and not read.settled_time


#: a heavy race recorded on one H200 (``results/session_h200_47/call1_sift_ab``, bench_fidelity's down projection
#: N = 4096, K = 14336 at M = 16384, tuning 3 of ``ours``): every config's group samples by round (ms); alone, config
#: 2 (128x256) is the best, config 3 within 0.5% and config 20 (64x256) 1.10x. Its settled leaders' drift-free
#: ratios read noisy, and the least of their settled samples chose config 20 by one sample (2.99 ms) 9% under its
#: others.
RECORDED_H200 = {
    0: [18.4748, 18.935], 1: [18.1128, 18.6161],
    2: [2.9586, 3.4161, 3.1857, 3.226, 3.2797, 3.1285, 3.2529, 3.1355],
    3: [3.1694, 3.3208, 3.2169, 3.389, 3.1209, 3.4168, 3.277, 3.111], 4: [19.3793, 17.9333], 5: [12.2641, 13.2043],
    6: [3.3338, 3.0008, 3.6624], 7: [3.5666, 3.7728], 8: [2.9299, 2.9446, 3.3932], 9: [3.4579, 3.228, 3.7003],
    10: [3.016, 3.6052, 3.756], 11: [3.1338, 3.0665, 3.6049], 12: [3.3744, 3.459, 3.8752],
    13: [3.2609, 3.0627, 3.5021], 14: [3.9674, 3.8491], 15: [4.1592, 3.8106], 16: [3.6936, 4.102],
    17: [3.0917, 3.104, 3.3912], 18: [2.9449, 2.9691, 3.6605], 19: [3.5398, 3.9665],
    20: [3.2219, 3.2802, 2.9886, 3.4958, 3.2762, 3.4086, 3.2715, 3.4408], 21: [3.4905, 3.41],
    22: [4.6472, 4.8322], 23: [5.0734, 4.549], 24: [4.0392, 4.4681], 25: [4.7149, 4.8437], 26: [4.6271, 4.6095],
    27: [4.5112, 4.1374], 28: [4.7266, 4.832], 29: [4.9349, 4.8851], 30: [3.9815, 3.6007], 31: [4.454, 4.4584],
    32: [4.4971, 4.4882], 33: [3.5824, 3.8369], 34: [6.129, 6.5139], 35: [6.3595, 6.0538], 36: [6.2098, 5.2251],
    37: [6.0511, 6.2926], 38: [6.158, 5.5084], 39: [7.0209, 6.6679]}


def test_a_noisy_heavy_race_ranks_its_settled_leaders_by_their_drift_free_medians():
    """The recorded race (:data:`RECORDED_H200`) fed to the default steady plan round by round: it sifts to configs
    2, 3 and 20, reads noisy on their drift-free ratios, and chooses config 2 by their medians (before: config 20,
    by its least settled sample). The sift keeps 3 here, as the recorded race did (its fourth, config 17, has no
    later samples) and settled after 2 screening rounds, as the recorded race did."""
    plan = replace(TuneOptions().plan(60.0, "steady", "k").race, max_rounds=8, sift_top=3, sift_after=2)
    race, r = Race(sorted(RECORDED_H200), plan), 0
    while not race.finished(0.0):
        for _ in range(race.block()):
            for i in race.running:
                if r < len(RECORDED_H200[i]):
                    race.record(i, [RECORDED_H200[i][r]])
            race.end_round()
            r += 1
    assert sorted(race.running) == [2, 3, 20] and race.location() is min
    assert race.winner() == 2
    times = {i: race.outcome(i, "", 0).time for i in (2, 3, 20)}
    assert times[2] < min(times[3], times[20]), times


def test_a_budget_spent_in_the_sift_ends_the_race_with_every_leader_ranked():
    """The time budget reached in the sift's round: the race is cut there, and the six leaders' settled samples
    rank them (no sift: the race is over)."""
    race = screened(replace(PLAN, budget_s=1.0), 1.5, 2)
    times = {i: 1.7 - 0.01 * i for i in race.running}
    settle(race, times, 1)
    assert race.finished(elapsed_s=1e9) and race.cut and not race.sifted
    assert race.winner() == max(times)  # the fastest settled leader


def test_a_sifted_race_judges_its_noise_on_the_settled_leaders_drift_free_samples():
    """At the power limit a device's clock swings from one settled round to the next, alike for every leader (on
    one H200, 1.6 ms GEMMs read 1.58-1.75 ms over six settled rounds). Judged on raw samples that read as noise, so
    the race took least samples of all rounds and chose config 1 by a screening sample (1.45) where every settled
    round had it 5% behind config 0. The drift-free ratios are steady: the race keeps medians and chooses 0."""
    race = Race(list(range(4)), PLAN)
    screening = {0: 1.50, 1: 1.45, 2: 1.52, 3: 1.51}
    for i in race.order():  # 4 configs: at most 6 go on, so the settled rounds start after 1 screening round
        race.record(i, [screening[i]])
    race.end_round()
    assert race.sift_until == 2 and len(race.running) == 4
    true = {0: 1.60, 1: 1.68, 2: 1.70, 3: 1.80}
    swing = [1.0, 1.12, 0.97, 1.10, 1.0]
    for r in range(5):
        for i in race.order():
            race.record(i, [true[i] * swing[r]])
        race.end_round()
        race.finished(0.0)
    assert race.sifted == [3] and race.finished(0.0)
    assert race.location() is median and race.winner() == 0
    race.settled_noise = False  # judged on every raw sample, as before
    race._noisy = None
    assert race.location() is min and race.winner() == 1


def test_under_noise_a_sifted_race_ranks_its_settled_leaders_drift_free():
    """A sifted race whose drift-free ratios read noisy (over 5%). Of all samples, screening ones included, the
    least chose config 1 by its screening sample (1.50) where every settled round had it behind config 0, and config
    3, sifted out by its settled sample, read 1.40 (a screening sample) below the chosen: the decision named it
    runner-up at a margin of -7%. The settled leaders are ranked by their drift-free ratios, noisy or not: config 0
    wins, and the runner-up is a leader behind it."""
    from triton_dist_tune.function.decide import decide

    race = Race(list(range(4)), PLAN)
    screening = {0: 1.52, 1: 1.50, 2: 1.51, 3: 1.40}  # 3 reads fastest in the screening's short samples
    for i in race.order():
        race.record(i, [screening[i]])
    race.end_round()
    settled = {0: [1.60, 1.80, 1.62, 1.85, 1.61], 1: [1.66, 1.68, 1.90, 1.67, 1.92],
               2: [1.70, 1.95, 1.72, 1.71, 1.98], 3: [1.80]}
    run_settled(race, settled)
    assert race.sifted == [3] and race.location() is min
    decision = decide([race.outcome(i, str(i), 0) for i in range(4)], race, "steady")
    times = {o.index: o.time for o in decision.outcomes}
    assert decision.index == 0 and times[0] < times[1] < times[2] and times[0] < times[3]
    assert decision.runner_up == 1 and decision.margin == pytest.approx(times[1] / times[0] - 1)


def run_settled(race: Race, settled: dict[int, list[float]]) -> None:
    """The race's settled rounds to its end, leader ``i`` taking ``settled[i][j]`` in its ``j``-th settled round."""
    taken = 0
    while not race.finished(0.0):
        for _ in range(race.block()):
            for i in race.order():
                race.record(i, [settled[i][taken]])
            race.end_round()
            taken += 1


def raced(plan: RacePlan, screening: dict[int, float], settled: dict[int, list[float]]) -> Race:
    """A race of ``screening``'s configs: one screening round of those samples, then :func:`run_settled`."""
    race = Race(sorted(screening), plan)
    for i in race.order():
        race.record(i, [screening[i]])
    race.end_round()
    run_settled(race, settled)
    return race


@pytest.mark.parametrize("configs", [3, 2])
def test_a_heavy_race_with_three_configs_or_fewer_left_judges_its_noise_as_a_sifted_one(configs):
    """A heavy race (1.5 ms per call) with at most 3 configs left settles them all after 1 screening round: nothing
    to sift. It judged its noise on every raw sample, so the clock's swing from one settled round to the next
    (alike for every leader, at the power limit) read as noise, and its times became the least of all samples:
    config 1's screening sample (1.45), where every settled round had it 5% behind config 0. 2 configs are what
    replicas race their leaders with (``measure/replicas.py``: the 2 least times among the first pass's survivors).
    A race whose settled block is heavy judges its noise on the drift-free ratios, sifted or not: quiet, it keeps
    medians and chooses 0."""
    from triton_dist_tune.measure.replicas import _noisy

    race = Race(list(range(configs)), PLAN)
    screening = {0: 1.50, 1: 1.45, 2: 1.52}
    for i in race.order():
        race.record(i, [screening[i]])
    race.end_round()
    assert race.settled_from == 1 and race.sift_until is None and len(race.running) == configs
    swing = [1.0, 1.12, 0.97, 1.10, 1.0]  # PLAN's heavy_rounds: 5 settled rounds, sifted or not
    run_settled(race, {i: [t * s for s in swing] for i, t in {0: 1.60, 1: 1.68, 2: 1.70}.items()})
    assert not race.sifted and race.location() is median and race.winner() == 0, [
        race.outcome(i, "", 0).time for i in race.entrants]
    assert not _noisy(type("Measurer", (), {"race": race})())  # what a replica tells the others of its race


@pytest.mark.parametrize(("configs", "top"), [(3, 0), (2, 0), (3, 3), (2, 2)])
def test_a_heavy_race_with_nothing_to_sift_runs_as_many_settled_rounds_as_a_sifted_one(configs, top):
    """A heavy race (1.5 ms per call, the default steady plan) with no more configs left when it settles than stay
    (3 or 2, ``refine_top`` off or at least that many; 2 is what replicas race their leaders with) settles them all
    after 1 screening round, with nothing to sift. It ran ``final_rounds`` (8) settled rounds, where a sifted race
    runs ``heavy_rounds`` (6) in all: 3 leaders took 24 heavy settled samples against the 19 of a race of 4 that
    sifts one (4 + 3 x 5), each leader 8 where the sifted race's got 6. It runs ``heavy_rounds`` too: each leader
    as many settled samples as a sifted race's, and never more device time in all."""
    plan = TuneOptions(refine_top=top).plan(60.0, "steady", "k").race

    def run(configs: int) -> Race:
        race = screened(plan, 1.5, 1, configs=configs)
        while not race.finished(0.0):
            settle(race, {i: 1.6 + 0.01 * i for i in race.running}, race.block())
        return race

    race = run(configs)
    assert race.settled_from == 1 and not race.sifted and race.winner() == 0
    settled = {i: len(e.settled) for i, e in race.entrants.items()}
    assert settled == dict.fromkeys(range(configs), HEAVY_CYCLES), settled
    assert race.rounds == 1 + HEAVY_CYCLES
    sifted = run(race.sift_keeps() + 1)  # one more config than stay: the sift stops one after its 1 round
    assert len(sifted.sifted) == 1 and max(len(e.settled) for e in sifted.entrants.values()) == HEAVY_CYCLES
    assert sum(settled.values()) <= sum(len(e.settled) for e in sifted.entrants.values())


def test_under_noise_a_heavy_race_of_three_configs_ranks_its_leaders_drift_free():
    """The same race (3 configs, heavy, no sift) with drift-free ratios that read noisy: its leaders are ranked by
    the median of their drift-free ratios, not by the least of all their samples (config 1's screening sample,
    1.40, chose it before where every settled round had it behind config 0), and each outcome says so
    (``settled_time``), so a replica's least sample (``Outcome.least``) and a decision's table are the race's
    own times."""
    from triton_dist_tune.function.decide import decide

    race = raced(PLAN, {0: 1.52, 1: 1.40, 2: 1.51}, {0: [1.60, 1.80, 1.62, 1.85, 1.61],
                                                     1: [1.66, 1.68, 1.90, 1.67, 1.92],
                                                     2: [1.70, 1.95, 1.72, 1.71, 1.98]})
    assert not race.sifted and race.location() is min
    outcomes = [race.outcome(i, str(i), 0) for i in range(3)]
    assert all(o.settled_time for o in outcomes) and [o.least() for o in outcomes] == [o.time for o in outcomes]
    assert outcomes[0].time < outcomes[1].time < outcomes[2].time
    decision = decide(outcomes, race, "steady")
    assert decision.index == 0 and {o.index: o.time for o in decision.outcomes} == {o.index: o.time
                                                                                     for o in outcomes}


def test_under_noise_a_heavy_race_timed_on_the_device_logs_the_leaders_its_two_level_rule_raised():
    """A heavy race timed on the device (``levels``) ranks its settled leaders drift-free under noise too, and so
    raises a leader whose samples hold a slower level (config 0: 1.90 in 3 of its 8 settled rounds, ``heavy_rounds``
    8 here, 1.50 in the others), which changes the choice (2, not 0). The rank's log must name it, and the config
    the medians would have chosen (docs/protocol.md: "the rank's log names such leaders on the race's line"). Before:
    ``slower_levels`` read nothing under noise (a quiet race's rule alone), and the log said nothing."""
    from triton_dist_tune.measure.standings import levels_note

    race = raced(replace(PLAN, levels=True, heavy_rounds=8), {0: 1.50, 1: 1.52, 2: 1.55},
                 {0: [1.50, 1.50, 1.90, 1.50, 1.90, 1.50, 1.90, 1.50],
                  1: [1.70, 1.50, 1.62, 1.75, 1.55, 1.72, 1.56, 1.74],
                  2: [1.56, 1.74, 1.72, 1.55, 1.75, 1.58, 1.71, 1.57]})
    assert race.location() is min and race.settled_noise and not race.sifted
    assert race.winner() == 2 and race.median_winner() == 0
    assert list(race.slower_levels()) == [0]
    assert levels_note(race).endswith("(by their medians config 0 would have won)")


def test_refine_top_bounds_the_leaders_a_sift_keeps():
    """``refine_top=n`` keeps at most ``n`` configs in the race after 3 rounds. A heavy race settles after 2 rounds
    (or 1), where ``keep_top`` never applies, and nobody leaves a settled block: with the sift, ``refine_top`` 1 or 2
    raced three leaders through six settled rounds. The sift keeps at most ``n`` (one: the race is over)."""
    for top in (1, 2):
        race = screened(TuneOptions(refine_top=top).plan(60.0, "steady", "k").race, 1.5, 1)
        settle(race, {i: 1.6 + 0.01 * i for i in race.running}, 1)
        done = race.finished(0.0)
        assert race.running == list(range(top)) and done == (top == 1), (top, race.running)
        assert f"8 leaders sifted to {top} after" in sift_note(race)
        while not race.finished(0.0):
            settle(race, {i: 1.6 + 0.01 * i for i in race.running}, race.block())
        assert race.winner() == 0 and all(len(e.timed()) <= 2 for i, e in race.entrants.items() if i >= top)


class _Placing:
    """A stand-in for the measurer's graphs (no CUDA): every config captured once, each placement a capture."""

    def __init__(self, indices: list[int]) -> None:
        self.graphs = dict.fromkeys(indices)
        self.placed: dict[int, list[None]] = {}
        self.placing = True
        self.captures = 0

    def placements(self, index: int) -> int:
        return (index in self.graphs) + len(self.placed.get(index, ()))

    def place(self, index: int, call) -> bool:
        self.captures += 1
        self.placed.setdefault(index, []).append(None)
        return True


def test_a_sifts_round_captures_no_output_placement_its_leaders_never_replay():
    """Timed on the device, each settled leader is captured at 4 output placements, settled round j replaying
    placement j mod 4. The sift's one round replays the first alone, and then stops all but 3 of up to 12
    leaders: capturing 3 more for each of them took 27 captures never replayed, their memory counted against the
    placements' bound (reached, no leader is placed: the survivors lose the placement rule). The sift's round
    places nobody; the block after it places its 3 leaders."""
    from triton_dist_tune.measure.sampling import Sampling

    class Measurer(Sampling):
        label, log = "[t]", None

        def started(self, index, desc, phase):
            pass

        def _guarded(self, index, desc, phase, runs):
            return runs(), None

    from triton_dist_tune.measure.budget import Budget

    measurer = Measurer()
    measurer.trial = type("Trial", (), {"call": staticmethod(lambda config: None)})()
    measurer.budget, measurer.per_call = Budget(), {}  # no time budget: every round of a block runs
    race = screened(replace(PLAN, final_top_heavy=12, placements=4, levels=True), 1.5, 2, configs=14)
    entries = {i: ({}, str(i)) for i in race.entrants}
    measurer.graphs = placing = _Placing(list(race.entrants))
    assert len(race.running) == 12 and race.block() == 1
    assert measurer._place_leaders(race, entries) == {} and placing.captures == 0
    settle(race, {i: 1.6 + 0.01 * i for i in race.running}, 1)
    assert not race.finished(0.0) and len(race.running) == 3
    assert measurer._place_leaders(race, entries) == {} and placing.captures == 9
    assert race.plan.placements == 4 and all(placing.placements(i) == 4 for i in race.running)


@pytest.mark.parametrize(("seconds", "rounds"), [(0.85, 1), (1.15, 2), (1.45, 3), (None, 8)])
def test_under_a_time_budget_a_settled_block_captures_only_the_placements_of_the_rounds_it_runs(seconds, rounds):
    """A settled block of 8 rounds, 3 leaders timed on the device at 4 output placements (round j replays placement
    j mod 4). A time budget that leaves 1, 2 or 3 rounds (0.5 s spent, 0.3 s a round) cuts the block there, yet the
    placements were captured for the whole block: 3 more per leader, 9 captures where 1 round replays none of them
    (their memory counted against the placements' bound all the same). The block's placements are those of the
    rounds the budget leaves it, and the block runs those rounds."""
    from triton_dist_tune.measure.budget import Budget
    from triton_dist_tune.measure.sampling import Sampling
    from triton_dist_tune.measure.steps import SteadySteps

    class Measurer(Sampling, SteadySteps):
        label, log = "[t]", None

        def started(self, index, desc, phase):
            pass

        def _guarded(self, index, desc, phase, runs, **_):
            return runs(), None

        def round_seconds(self, indices, configs, per_call, settled):
            return 0.3  # a settled round of the leaders

        def _steady_step(self, race, entries, per_call, orders, wanted, phase):
            self.steps.append(len(orders))
            return []

    measurer = Measurer()
    measurer.trial = type("Trial", (), {"call": staticmethod(lambda config: None)})()
    measurer.budget, measurer.steps = Budget(seconds=seconds, began=0.0), []
    measurer.budget.agreed(0.5)
    race = screened(replace(PLAN, placements=4, levels=True, budget_s=seconds), 0.3, 1, configs=3)
    assert race.settling and race.block() == 8 and len(race.running) == 3
    entries = {i: ({}, str(i)) for i in race.entrants}
    measurer.graphs = placing = _Placing(list(race.entrants))
    measurer.per_call = per_call = dict.fromkeys(race.entrants, 0.3)
    assert measurer._place_leaders(race, entries) == {}
    assert placing.captures == 3 * (min(4, rounds) - 1), placing.captures
    measurer._steady_rounds(race, entries, per_call)
    assert measurer.steps == [rounds]


def test_a_near_tie_block_after_a_sift_is_as_long_as_its_settled_rounds():
    """A search's finalists get near-tie blocks of ``final_rounds`` rounds each, the length of the settled rounds
    before them: after a sift those were ``heavy_rounds`` (5 here), yet the block ran the plan's first
    ``final_rounds`` (8)."""
    race = screened(replace(PLAN, tie_blocks=1), 1.5, 2)
    settle(race, {i: 1.6 + 0.01 * i for i in race.running}, 1)
    assert not race.finished(0.0) and len(race.running) == 3
    first, second = race.running[:2]
    for r in range(4):  # the leaders 1.5% apart, the runner-up ahead in one round of the four: not clearly slower
        times = {i: 1.7 for i in race.running}
        times[first], times[second] = (1.6, 1.624) if r else (1.624, 1.6)
        settle(race, times, 1)
    assert race.rounds - race.settled_from == 5 and not race.finished(0.0)
    assert race.tie_blocks == 1 and race.block() == 5


@pytest.mark.parametrize("top", [1, 2])
def test_refine_top_bounds_a_heavy_race_with_three_configs_left_by_a_sift_of_them(top):
    """``refine_top`` 1 or 2, a heavy race of 3 configs: nothing to sift (at most 3 left), so all 3 settled after
    1 screening round and raced 8 settled rounds each, more than ``refine_top``. They are sifted now: one settled
    round ranks them (here the screening's worst is the best settled) and the ``refine_top`` best go on (one: the
    race is over), the other with its screening sample and one settled sample."""
    race = screened(TuneOptions(refine_top=top).plan(60.0, "steady", "k").race, 1.5, 1, configs=3)
    settled = {i: 1.62 - 0.01 * i for i in range(3)}  # settled, config 2 is the best and 0 the worst
    while not race.finished(0.0):
        settle(race, {i: settled[i] for i in race.running}, race.block())
    raced = sorted(i for i, e in race.entrants.items() if len(e.settled) > 1)
    assert raced == ([] if top == 1 else [1, 2]) and race.winner() == 2, {
        i: len(e.settled) for i, e in race.entrants.items()}
    assert race.sifted == list(range(3 - top)) and f"3 leaders sifted to {top} after" in sift_note(race)
    assert race.rounds == (2 if top == 1 else 1 + HEAVY_CYCLES)


@pytest.mark.parametrize(("scale", "configs"), [(0.3, 3), (0.05, 6)])
@pytest.mark.parametrize("top", [1, 2])
def test_refine_top_bounds_the_settled_block_of_a_race_that_settles_before_three_rounds(scale, configs, top):
    """``refine_top`` promises at most that many configs in the race after 3 rounds. A race with at most 3 configs
    left (6 when the leader is fast) settles at once, and nobody leaves a settled block: all 3 (or 6) raced 8 settled
    rounds. Now such a race screens on to 3 rounds while more than ``refine_top`` are left, and ``refine_top``
    applies there: at most that many get the settled rounds (one: the race ends after 3 rounds)."""
    race = screened(TuneOptions(refine_top=top).plan(60.0, "steady", "k").race, scale, 1, configs=configs)
    assert not race.settling
    race = screened(TuneOptions(refine_top=top).plan(60.0, "steady", "k").race, scale, 3, configs=configs)
    assert len(race.running) == top and race.settling == (top > 1)
    while not race.finished(0.0):
        settle(race, {i: scale for i in race.running}, race.block())
    assert len([e for e in race.entrants.values() if e.settled]) == (top if top > 1 else 0)
    assert race.rounds == (3 if top == 1 else min(race.plan.max_rounds, 3 + race.plan.final_rounds))


def test_a_sift_that_keeps_one_ends_the_race_on_every_call_after_it():
    """``refine_top=1``: the sift keeps one leader and the race is over; asked again, it stays over (it said not
    over, and its settled block of one config had five rounds to go)."""
    race = screened(TuneOptions(refine_top=1).plan(60.0, "steady", "k").race, 1.5, 1)
    settle(race, {i: 1.6 + 0.01 * i for i in race.running}, 1)
    assert race.finished(0.0) and race.running == [0]
    assert race.finished(0.0) and race.finished(1e9) and not race.cut and race.winner() == 0


def test_the_defaults_sift_heavy_steady_tunings_only():
    """``autotune``'s steady races sift (twelve leaders, one cycle, from the heavy settle's mark); cold ones never
    settle, so never sift."""
    steady = TuneOptions().plan(60.0, "steady", "k").race
    assert (steady.final_top_heavy, steady.sift_after, steady.sift_rounds, steady.heavy_rounds) == (
        SETTLED_LEADERS_HEAVY, SIFT_AFTER, SIFT_CYCLES, HEAVY_CYCLES)
    assert TuneOptions().plan(60.0, "steady", "k", ranks=4).race.sift_after == SIFT_AFTER_GROUP
    assert steady.heavy_from_ms == POWER_SETTLE_ABOVE_MS
    assert TuneOptions().plan(60.0, "cold", "k").race.final_top_heavy == 0
    with pytest.raises(ValueError, match="sift_rounds"):
        RacePlan(sift_rounds=0)
    with pytest.raises(ValueError, match="heavy_rounds"):
        RacePlan(final_top_heavy=6, sift_rounds=2, heavy_rounds=2)


#: one process tunes 16 keys of 7 configs on the virtual clock, timed as a device's clock (``KIND``) or the host's, on
#: a device at its power limit (``sift_cases.PowerLimited``: the limiter follows the power of the calls it ran, and a
#: call's time is its work slowed by it). Configs 0-4 draw full power, 5 and 6 60%: alone, 5 and 6 are 5% faster;
#: among the others (the screening's samples, 2 ms of settling and 5 of span) all read alike within noise
POWER_LIMITED = '''
import sys, torch, triton_dist_tune as tdt
sys.path.insert(0, 'tests/scenarios')
from _cases import virtual_clock
from sift_cases import SPACE, PowerLimited
limited = PowerLimited(seed=0)

@tdt.autotune(SPACE, key_fn=lambda x: x.numel(), n_warmup=1)
def heavy(x, *, v):
    limited(v)
    return x

with virtual_clock("KIND"):
    for n in range(1, 17):
        heavy(torch.ones(n))
'''


@pytest.mark.timeout(300)
def test_on_a_device_at_its_power_limit_the_sift_finds_the_config_that_is_fastest_alone(tmp_path):
    """Before the sift three leaders went on from the screening, where seven configs read alike: 3 of these 16
    tunings chose a full-power config, 5% slower alone than configs 5 and 6. Now all seven go on (at most 12, after
    at most 2 rounds), and one settled round (20 ms of settling each: the limiter follows its config) keeps the
    four best (:data:`SIFT_TOP`): 16 of 16 choose 5 or 6. Timed as the host's clock (no power limiter: CPU ranks)
    nothing is sifted."""
    for kind in ("device", "host"):
        (tmp_path / kind).mkdir()
        cache, _ = tune_alone(tmp_path / kind, POWER_LIMITED.replace("KIND", kind))
        logs = "".join(p.read_text() for p in sorted((tmp_path / kind / "logs").glob("*.log")))
        sifted = re.findall(rf"7 leaders sifted to {SIFT_TOP} after 1 settled round\(s\)", logs)
        if kind == "host":
            assert not sifted
            continue
        chosen = {d["key"]: d["index"] for d in (json.loads(p.read_text()) for p in cache.glob("*/*.json"))}
        assert len(chosen) == 16 and set(chosen.values()) <= {5, 6}, chosen
        assert len(sifted) >= 12, logs[-3000:]  # a key whose screening stopped a config sifts fewer


@pytest.mark.timeout(300)
def test_a_tuning_with_refine_top_on_a_device_races_at_most_that_many_leaders_after_the_sift(tmp_path):
    """``refine_top=2`` on the power-limited device: the sift keeps 2 leaders, not 3, and the other configs end
    with their screening sample and one settled sample at the most."""
    script = POWER_LIMITED.replace("KIND", "device").replace("n_warmup=1)", "n_warmup=1, refine_top=2)").replace(
        "range(1, 17)", "range(1, 5)")
    cache, _ = tune_alone(tmp_path, script)
    logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
    assert len(re.findall(r"7 leaders sifted to 2 after 1 settled round\(s\)", logs)) == 4, logs[-3000:]
    for path in cache.glob("*/*.json"):
        samples = sorted(o["samples"] for o in json.loads(path.read_text())["measurements"])
        assert samples == [2] * 5 + [7] * 2, samples


def test_replicas_choose_their_leaders_among_each_shares_settled_survivors_first():
    """The table two replicas gather after their shares (``measure/replicas.py``), made by hand from what a device at
    its power limit gives (``sift_cases.Bursts``): each share's survivors (``measured``) with their settled,
    drift-free times, the configs its sift stopped with theirs, and the configs its screening stopped with their
    screening samples' times, which read a few % faster in ms than any settled time. Config 1, replica 1's settled
    winner, is the best. The 2 leaders are the least times among the survivors: 1 and 0. Before, they were the 2 least
    of the whole table, config 6 that a screening stopped and config 8, one read back from an earlier attempt's
    journal that left its race there (resumed), and config 1 was never raced again. The others fill the leaders'
    places the survivors leave (``refine_top`` 6 of 4 survivors), by time; and where a time budget leaves the first
    pass to decide (``decision`` over the leaders), the choice is config 1, not config 8."""
    from triton_dist_tune.measure.leaders import decision, leaders
    from triton_dist_tune.records import Outcome

    def outcome(index, state, time, settled=True, resumed=False):
        samples = [time] * (8 if state == "measured" else 3 if settled else 2)
        return Outcome(index, f"c{index}", state, time=time, samples=len(samples), round_times=samples,
                       settled_time=settled, resumed=resumed)

    table = [outcome(0, "measured", 1.69), outcome(1, "measured", 1.57), outcome(2, "measured", 1.70),
             outcome(3, "measured", 1.71), outcome(4, "stopped", 1.72), outcome(5, "stopped", 1.54, settled=False),
             outcome(6, "stopped", 1.53, settled=False), outcome(7, "stopped", 1.55, settled=False),
             outcome(8, "stopped", 1.50, settled=False, resumed=True), Outcome(9, "c9", "failed", error="x"),
             Outcome(10, "c10", "pruned")]
    assert leaders(table, 0) == leaders(table, 1) == leaders(table, 2) == [0, 1]
    assert leaders(list(reversed(table)), 2) == [0, 1]  # the order of the table does not matter
    assert leaders(table, 3) == [0, 1, 2]
    assert leaders(table, 6) == [0, 1, 2, 3, 6, 8]  # 4 survivors, then the least others
    assert leaders(table[4:], 0) == [6, 8]  # no survivor: the least times
    assert leaders([table[1]] + table[4:], 0) == [1, 8]  # one survivor, and the least of the others
    cut = decision(table, leaders(table, 0), "steady", 8)
    assert (cut.index, cut.runner_up) == (1, 0)
    # survivors a time budget cut before they settled (``screened``, here 1 and 3) rank after the settled ones, in
    # the leaders and in the first pass's decision
    assert leaders(table, 3, screened=[1, 3]) == [0, 1, 2]
    assert decision(table, [0, 1], "steady", 8, screened=[1, 3]).index == 0
    assert decision(table, [1, 3], "steady", 8, screened=[1, 3]).index == 1  # only screened ones: by their time


# -- on real ranks ----------------------------------------------------------------------------------------------------

CASES = HERE / "scenarios" / "sift_cases.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The scenarios of ``sift_cases.py``, one after another in one job of 2 gloo ranks (once per module): case ->
    each rank's results, and the rank logs (rank -> its log's text)."""
    folder = tmp_path_factory.mktemp("sift")
    results = run_cases(CASES, 2, ["sift_ranks", "sift_ranks_wide", "sift_replicas", "sift_replicas_top1",
                                   "sift_replicas_top4", "sift_replicas_bursts", "sift_replicas_cut",
                                   "sift_replicas_unequal"],
                        env=tuner_env(folder, 30), timeout=300)
    return results, {r: (folder / "logs" / f"rank-{r}.log").read_text() for r in range(2)}


def race_lines(log: str, name: str) -> dict[int, list[str]]:
    """Each key's race lines of the function ``name`` in one rank's log (their text after ``race:``, without the
    race's seconds: each rank reads its own wall clock)."""
    lines: dict[int, list[str]] = {}
    for key, text in re.findall(rf"\[{name} key=(\d+)\] race: (.*)", log):
        lines.setdefault(int(key), []).append(re.sub(r" in [\d.]+ s", "", text))
    return lines


@pytest.mark.timeout(330)
def test_on_two_ranks_at_their_power_limit_every_key_sifts_alike_and_chooses_a_config_fastest_alone(ranks):
    """Two gloo ranks tune the power-limited landscape of the one-process test (each rank its own limiter, jitter
    of its own; every call all-reduces), 16 keys: a sample is the MAX over both ranks, and the ranks decide each
    step from the exchanged samples. Every key's race sifts all seven leaders to four, both rank logs name the same
    stopped configs (one race, not two), both ranks choose alike, and every choice is config 5 or 6. With the sift
    turned off 2 of these 16 keys chose a full-power config (4 and 2)."""
    results, logs = ranks
    first, second = (r.result["chosen"] for r in results["sift_ranks"])
    assert first == second and len(first) == 16, (first, second)
    assert set(first.values()) <= {5, 6}, first
    lines = [race_lines(logs[r], "sift_ranks") for r in range(2)]
    assert lines[0] == lines[1] and sorted(lines[0]) == list(range(1, 17)), lines
    for key, (line,) in lines[0].items():
        stopped = re.search(rf"7 leaders sifted to {SIFT_TOP} after 1 settled round\(s\), config\(s\) ([\d, ]+) "
                            r"stopped", line)
        assert stopped, (key, line)
        configs = stopped.group(1).split(", ")
        assert len(configs) == 7 - SIFT_TOP and not {"5", "6"} & set(configs), line


@pytest.mark.timeout(330)
def test_a_group_of_two_ranks_screens_two_rounds_before_its_sift_where_one_rank_screens_one(ranks):
    """32 heavy configs (more than the sift's 12): the two ranks' race (``sift_ranks_wide``) settles from round
    :data:`SIFT_AFTER_GROUP` (2), each one-rank replica's share of 16 (``sift_replicas_bursts``) from round
    :data:`SIFT_AFTER` (1): a group's samples are the MAX over its ranks beside collectives, noisier than one rank's,
    and the evidence for one screening round is one rank's. Both ranks log the same race and choose alike."""
    results, logs = ranks
    first, second = (r.result["chosen"] for r in results["sift_ranks_wide"])
    assert first == second and len(first) == 1, (first, second)
    lines = [race_lines(logs[r], "sift_ranks_wide") for r in range(2)]
    assert lines[0] == lines[1] and sorted(lines[0]) == [1], lines
    assert all(f"(settled from {SIFT_AFTER_GROUP})" in line for (line,) in lines[0].values()), lines[0]
    alone = [line for r in range(2) for key in race_lines(logs[r], "sift_replicas_bursts").values() for line in key]
    assert alone and all(f"(settled from {SIFT_AFTER})" in line for line in alone), alone
    assert (SIFT_AFTER, SIFT_AFTER_GROUP) == (1, 2)


@pytest.mark.timeout(330)
def test_replicas_at_their_power_limit_sift_their_shares_and_end_on_one_config_fastest_alone(ranks):
    """Two one-rank replicas tuned as one (``autotune_replicas``), 16 keys, on a wider landscape
    (``sift_cases.WIDE_SPACE``): 12 configs, 0-9 at full power, 10 and 11 at 60% (alone, 5% faster). Replica 0
    races configs 0, 2, ..., 10, replica 1 configs 1, 3, ..., 11: six each, one efficient config in each share.
    Every key's share race settles all six after 1 screening round and sifts them to four (the stopped ones its
    own, never 10 or 11), then both race the two leaders again (nothing to sift). Both replicas end on the same
    config for every key, and it is 10 or 11. With the sift turned off a share keeps three of its six from the
    screening: key 12 chose config 8 (a full-power one; the 2-rank case's keys 12 and 16 chose 4 and 2)."""
    results, logs = ranks
    first, second = (r.result["chosen"] for r in results["sift_replicas"])
    assert first == second and len(first) == 16, (first, second)
    assert set(first.values()) <= {10, 11}, first
    for rank in range(2):
        lines = race_lines(logs[rank], "sift_replicas")
        assert sorted(lines) == list(range(1, 17)), lines
        for key, (share, leaders) in lines.items():
            stopped = re.search(rf"6 leaders sifted to {SIFT_TOP} after 1 settled round\(s\), config\(s\) ([\d, ]+) "
                                r"stopped", share)
            assert stopped, (rank, key, share)
            configs = [int(c) for c in stopped.group(1).split(", ")]
            assert len(configs) == 6 - SIFT_TOP and all(c % 2 == rank and c < 10 for c in configs), (rank, key, share)
            assert "sifted" not in leaders, (rank, key, leaders)


@pytest.mark.timeout(330)
def test_replicas_with_refine_top_1_still_race_two_leaders_to_the_end(ranks):
    """Replicas race the 2 best survivors of the first pass again (``refine_top`` if larger:
    ``leaders.MIN_LEADERS``), on every replica. ``refine_top=1`` bounds each share's race (its sift keeps one), not
    the leaders' race: there both leaders run every round (a heavy race of 2 with nothing to sift: 1 screening round
    and ``heavy_rounds`` settled ones, 7 samples each; 9 before it ran 8 settled rounds), where a ``refine_top`` that
    bounded that race too would sift its 2 leaders to 1 after one settled round."""
    results, logs = ranks
    first, second = (r.result for r in results["sift_replicas_top1"])
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 4, (first, second)
    for key, measured in first["measured"].items():
        assert sorted(measured.values()) == [1 + HEAVY_CYCLES] * 2, (key, measured)
    for rank in range(2):
        for key, (share, leaders) in race_lines(logs[rank], "sift_replicas_top1").items():
            assert "sifted to 1" in share and "sifted" not in leaders, (rank, key, share, leaders)


@pytest.mark.timeout(330)
def test_replicas_with_refine_top_4_race_all_four_leaders_to_the_end_unsifted(ranks):
    """``refine_top=4``: each share's sift keeps 4 (:data:`SIFT_TOP`, at most ``refine_top``), and the
    replicas race the 4 best survivors again. Heavy calls, and 4 leaders, more than the 3 a heavy race's sift keeps:
    that race sifted them to 3 after one settled round, on each replica alone (so a leader's MAX over replicas could
    join a sifted time to settled ones). Now its settled block holds all 4 (``leaders.leaders_plan``): no sift, and
    every leader runs every round (1 screening round and the heavy race's 6 settled ones, 7 samples each)."""
    results, logs = ranks
    first, second = (r.result for r in results["sift_replicas_top4"])
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 2, (first, second)
    for key, measured in first["measured"].items():
        assert sorted(measured.values()) == [1 + HEAVY_CYCLES] * 4, (key, measured)
    for rank in range(2):
        for key, (share, leaders) in race_lines(logs[rank], "sift_replicas_top4").items():
            assert f"sifted to {SIFT_TOP}" in share and "sifted" not in leaders, (rank, key, share, leaders)


def test_the_leaders_race_of_replicas_neither_sifts_nor_settles_fewer_than_its_leaders():
    """The plan of the replicas' leaders' race (``leaders.leaders_plan``) over a heavy race of 4 and of 12 leaders
    (at and above ``final_top_heavy``) and a light one of 4 (above ``final_top``): every leader settles after the
    first round and runs every settled round; nobody is sifted or stopped. A light race of 4 under the plan as it
    was (``keep_top`` off alone) settled 3 after 3 screening rounds."""
    from triton_dist_tune.measure.leaders import leaders_plan

    for scale, count in ((1.5, 4), (1.5, 12), (0.3, 4)):
        race = screened(leaders_plan(replace(PLAN, keep_top=2), count), scale, 1, configs=count)
        assert race.settling and race.settled_from == 1 and len(race.running) == count, (scale, count)
        settle(race, {i: scale * (1 + 0.01 * i) for i in range(count)}, PLAN.final_rounds)
        assert race.finished(0.0) and not race.sifted and len(race.running) == count, (scale, count)


@pytest.mark.timeout(330)
def test_replicas_race_again_each_shares_settled_leaders_not_the_configs_its_screening_stopped(ranks):
    """Two one-rank replicas on a device that cools between samples (``sift_cases.Bursts``), 32 configs in shares of
    16, 8 keys: config 31 (60% power, 3% less work: alone 8% faster than the others) is replica 1's settled winner
    in every key. Each share's screening stops 4 configs (12 settle), and its short samples read them faster in ms
    than config 31's settled ones. The leaders are chosen among each share's settled survivors (``measured``): both
    replicas race config 31 again and end on it. Before, the leaders were the 2 least times of the whole table, two
    configs a screening had stopped: config 31 was never raced again, and every key chose a full-power config (22,
    30, 30, 30, 16, 25, 11, 3)."""
    results, _ = ranks
    first, second = (r.result for r in results["sift_replicas_bursts"])
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 8, (first, second)
    assert set(first["chosen"].values()) == {31}, first["chosen"]
    # the trap is set in every key: at least 2 configs the screening stopped read faster than the choice
    assert all(n >= 2 for n in first["screened_faster"].values()), first["screened_faster"]


@pytest.mark.timeout(330)
def test_where_a_cut_leaves_a_replicas_survivors_screened_alone_the_first_pass_chooses_a_settled_winner(ranks):
    """The :func:`test_replicas_race_again_each_shares_settled_leaders_not_the_configs_its_screening_stopped`
    device, 4 keys, ``budget=`` whose clock reads spent on replica 0 once its race runs: its race of 16 configs is cut
    after one screening round, as its settled block begins (a heavy race's starts after one screening round), its 12
    leaders (``measured``) with one short screening sample each, which reads them faster in ms than any settled one;
    replica 1 settles its share, config 31 (alone 8% faster than the others) its settled winner. The first pass
    decides (a cut). Before, replica 0's screened survivors took the leaders' places by those times and the cut chose
    one of them (0, 8, 16, 4: full-power configs); now a survivor a cut left screened alone ranks after the settled
    ones, and every key chooses 31. (With the block's start counted as a settled round, as before 1159fd7, the cut
    chose 0, 8, 16, 4 again.)"""
    results, _ = ranks
    first, second = (r.result for r in results["sift_replicas_cut"])
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 4, (first, second)
    assert set(first["chosen"].values()) == {31} and all(first["cut"].values()), first
    for key, measured in first["measured"].items():  # replica 0's share: its 12 leaders screened once each, cut
        once = [int(c) for c, n in measured.items() if n == 1]
        assert len(once) == 12 and all(c % 2 == 0 for c in once), (key, measured)
    # the trap is set in every key: some survivor of replica 0 reads faster than the choice
    assert all(any(c % 2 == 0 for c in faster) for faster in first["faster"].values()), first["faster"]


@pytest.mark.timeout(330)
def test_replicas_on_devices_of_unequal_speed_race_the_leaders_alike_heavy_on_every_replica(ranks):
    """Two one-rank replicas of :data:`sift_cases.WIDE_SPACE`, 2 keys, replica 1's device 4x faster
    (``sift_cases.sift_replicas_unequal``): its calls take 0.4 ms, under the 0.5 ms from which a race is heavy, and
    replica 0's 1.5 ms. A leader's time is the MAX over replicas, replica 0's, whose calls are heavy. Before, each
    replica judged its leaders' race heavy or not on its own leader's time: replica 0's leaders ran the heavy race's
    6 settled rounds and kept their drift-free times under either statistic (``settled_time``), replica 1's ran the
    light race's 8 and under the least statistic took their least samples, so a leader's MAX could join a drift-free
    median of one replica to a least sample of the other (the two ranks' records of the same leaders differed: 7
    samples and ``settled_time`` against 9 without). Now the replicas agree on it before the race from the gathered
    first pass (the slowest replica's best leader: 1.5 ms), and every replica races the leaders alike: heavy, 7
    samples each, drift-free times."""
    results, _ = ranks
    first, second = (r.result for r in results["sift_replicas_unequal"])
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 2, (first, second)
    for result in (first, second):
        for key, measured in result["measured"].items():
            assert sorted(measured.values()) == [1 + HEAVY_CYCLES] * 2, (key, first["measured"], second["measured"])
            assert result["settled_time"][key] == sorted(int(c) for c in measured), (key, result["settled_time"])


def test_a_race_judges_its_noise_again_when_a_config_fails_or_is_sifted_without_a_new_sample():
    """The race's noise judgement is kept per (sample position, round): a config failing, or the sift stopping
    leaders, changes the configs it is judged on without a new sample, and the judgement read before it stood."""
    race = Race(list(range(5)), PLAN)  # 0.3 ms calls: no sift, still screening after 2 rounds
    for r in range(2):
        for i in race.order():  # configs 2, 3 and 4 jump 50% in round 2
            race.record(i, [0.30 * (1 + 0.005 * i) * (1.5 if i >= 2 and r else 1.0)])
        race.end_round()
    assert race.settled_from is None and race.location() is min  # most configs' consecutive samples read noisy
    race.fail(3, "boom")
    race.fail(4, "boom")
    assert race.location() is median  # configs 0, 1 and 2: the median pair is quiet


def test_a_config_far_behind_by_its_first_sample_and_its_probe_leaves_after_the_first_round():
    """Two measurements at least ``far_behind`` (2) times the leader's: the config leaves after the first round
    (before, every config ran the screening's rounds). One of them alone is no reason: a sample that far behind with
    a close probe (a spike), or a probe that far behind with a close sample, stays."""
    plan = replace(PLAN, far_behind=2.0, final_top_heavy=0)
    probes = {0: 1.0, 1: 2.2, 2: 1.1, 3: 2.5, 4: 1.05}
    race = Race(list(range(5)), plan, probes=probes)
    first = {0: 1.0, 1: 2.1, 2: 2.4, 3: 1.2, 4: 1.02}
    for i in race.order():
        race.record(i, [first[i]])
    assert race.end_round() == [1]
    assert race.running == [0, 2, 3, 4]
    plain = Race(list(range(5)), replace(plan, far_behind=0.0), probes=probes)  # off: nobody leaves after one round
    for i in plain.order():
        plain.record(i, [first[i]])
    assert plain.end_round() == []


@pytest.mark.timeout(300)
def test_a_tuning_on_a_device_clock_times_a_config_far_behind_once(tmp_path):
    """Config 0 takes 3 times the others' work: on the device clock its probe and first sample read it so, and it
    leaves after one screening round (1 sample; before: 2, the heavy race's screening); timed as the host's clock
    (whose probe and sample may both read a stall) it runs the screening's rounds as before."""
    samples = {}
    for kind in ("device", "host"):
        (tmp_path / kind).mkdir()
        script = POWER_LIMITED.replace("KIND", kind).replace("PowerLimited(seed=0)",
                                                             "PowerLimited(seed=0, work=[3.0] + [1.0] * 6)")
        cache, _ = tune_alone(tmp_path / kind, script.replace("range(1, 17)", "range(1, 4)"))
        samples[kind] = [{o["index"]: o["samples"] for o in json.loads(p.read_text())["measurements"]}[0]
                         for p in sorted(cache.glob("*/*.json"))]
    assert samples["device"] == [1, 1, 1], samples
    assert min(samples["host"]) >= 2, samples
