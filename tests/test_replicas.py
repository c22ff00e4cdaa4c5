"""Replicas tuned as one (``autotune_replicas``, ``measure/replicas.py``): which configs the replicas race again."""

from __future__ import annotations

import pytest
from harness import HERE, run_ranks, tuner_env

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
    """``replicas.leaders`` on a hand-made table of 3 replicas (``owners``): replica 2's survivors read least, yet
    replicas 0 and 1 each keep their best survivor among the leaders; ``refine_top`` places beyond them go by time;
    without owners (one share) the least times alone."""
    from triton_dist_tune.measure.replicas import leaders
    from triton_dist_tune.records import Outcome

    times = {0: 0.95, 3: 1.0, 1: 1.0, 4: 1.01, 2: 0.85, 5: 0.86, 6: 0.5}
    table = [Outcome(i, f"c{i}", "stopped" if i == 6 else "measured", time=t, samples=3, round_times=[t] * 3)
             for i, t in sorted(times.items())]
    owners = {0: 0, 3: 0, 6: 0, 1: 1, 4: 1, 2: 2, 5: 2}
    assert leaders(table, 0) == [2, 5]
    assert leaders(table, 0, owners=owners) == leaders(list(reversed(table)), 2, owners=owners) == [0, 1, 2]
    assert leaders(table, 4, owners=owners) == [0, 1, 2, 5]
    assert leaders(table, 7, owners=owners) == [0, 1, 2, 3, 4, 5, 6]  # then a stopped config, last
