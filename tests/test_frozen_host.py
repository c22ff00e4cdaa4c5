"""The process hosting the job's key-value store frozen (SIGSTOP, a debugger, a host paused) while the other ranks
tune with it: they end within the documented bound, naming it, as when it is killed (docs/fault-tolerance.md).
Found by ``benchmarks/chaos.py`` (seeds 2107977240, 824312892). Scenario: tests/scenarios/frozen_host_cases.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import ROOT, describe, run_ranks, tuner_env

SCRIPT = ROOT / "tests" / "scenarios" / "frozen_host_cases.py"
T = 4.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("collective", "at"), [("0", "1"), ("0", "2"), ("1", "1")],
                         ids=["at-a-warm-up-exchange", "at-a-sample-exchange", "inside-a-collective"])
def test_peers_of_a_frozen_store_host_end_within_the_bound_naming_it(tmp_path: Path, collective: str, at: str):
    """Rank 0 of 2 (the store's host) stops itself in config 1's warm-up (or its first sample). Rank 1 waits for it
    at the exchange after that run (no collective in the function: the warm-up's exchange is inside its guarded
    phase, a sample's is not) or inside the function's all_reduce. Either way it must end with
    the library's error, naming rank 0 or its store, within ``3 T + 10`` s of the freeze (the bound for a lost peer
    is ``T + max(1, T/10)``). Before: every store request to a frozen host blocks without end (torch's client has
    no timeout on a reply; a blocking wait that times out waits for its cancel's reply), so rank 1 waited at a
    sample's exchange until rank 0 was continued (52 s in the chaos run, for ever here: TimeoutError), and inside
    a guarded phase (the warm-up's exchange, the collective) the watchdog's read of rank 0's beat blocked until the
    faulthandler backstop ended it (exit 1, every thread's stack)."""
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {**tuner_env(tmp_path, timeout=T), "FAULT_DIR": str(faults), "COLLECTIVE": collective,
           "AT_CALL": at}
    results = run_ranks(SCRIPT, 2, ["frozen_host"], env=env, timeout=90, stuck=[0])
    frozen = float((faults / "frozen").read_text())
    peer = results[1]
    assert peer.returncode in (3, 86), describe(results)
    if peer.returncode == 3:
        said = peer.result
        assert said["error"] in ("GroupTimeoutError", "RankFailedError"), said
        assert "global rank 0" in said["message"] or "global [0]" in said["message"], said
        assert said["ended"] - frozen < 3 * T + 10, said
    else:  # inside a run: its watchdog ends it, blaming no config on a frozen peer (as for any frozen peer)
        assert "rank 0 showed no sign of life" in peer.stderr, peer.stderr[-3000:]
        assert "recorded as hung" not in peer.stderr, peer.stderr[-3000:]
    assert time.time() - frozen < 3 * T + 20, describe(results)


@pytest.mark.timeout(120)
def test_a_campaign_unit_waiting_at_a_round_for_a_frozen_store_host_ends_naming_it(tmp_path: Path):
    """A campaign of units of one rank each has no failure board: its rounds are watched by a progress watch. Rank 0
    (the store's host) stops itself inside its second key's tuning; rank 1, its key tuned, waits for it at the round.
    It must end with the library's error within ``3 T + 10`` s of the freeze. Before, the watch's requests to the
    frozen host blocked without end (torch's client bounds no reply): rank 1 waited until rank 0 was continued."""
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {**tuner_env(tmp_path, timeout=T), "FAULT_DIR": str(faults)}
    results = run_ranks(SCRIPT, 2, ["frozen_host_in_a_campaign"], env=env, timeout=90, stuck=[0])
    frozen = float((faults / "frozen").read_text())
    peer = results[1]
    assert peer.returncode == 3, describe(results)
    said = peer.result
    assert said["error"] in ("GroupTimeoutError", "RankFailedError"), said
    assert "did not answer" in said["message"], said
    assert said["ended"] - frozen < 3 * T + 10, said
