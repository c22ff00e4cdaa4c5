"""The store host's wait at exit (``group/exits.py``) stops for a peer known gone, with real ranks: one ended by
its watchdog, one SIGKILLed on this host, one SIGKILLed in another pid namespace that the host gave up on at an
exchange. docs/fault-tolerance.md (the paragraph on lingering) says what each guarantees. The assertions read the
reason rank 0 logs when its wait ends (never a time): before, it had none to give and waited its whole 5 s."""

from __future__ import annotations

import signal

import pytest
from harness import HERE, describe, run_ranks, tuner_env
from test_layout import UNSHARED, unshare_refused

CASES = HERE / "scenarios" / "linger_cases.py"
WATCHDOG_EXIT = 86
KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)


def linger_line(stderr: str) -> str:
    """Rank 0's line saying how its wait at exit ended ("" where it said none)."""
    lines = [line for line in stderr.splitlines() if "stopped waiting at exit" in line]
    return lines[-1] if lines else ""


@pytest.mark.timeout(120)
def test_the_store_host_stops_lingering_for_a_peer_its_watchdog_ended(tmp_path):
    """Config 1 hangs on rank 1; its watchdog ends its process with exit status 86 (``os._exit``: no exit hook), but
    counts the rank out first. Rank 0 catches its tuning's error and exits normally: its wait at exit ends because
    every rank counted out, rank 1 by its watchdog (before: rank 1 never counted out, and rank 0 waited 5 s)."""
    results = run_ranks(CASES, 2, ["watchdog_ends_a_peer"], env=tuner_env(tmp_path, timeout=2), timeout=90)
    assert results[1].returncode == WATCHDOG_EXIT, describe(results)
    assert results[0].returncode == 0, describe(results)
    line = linger_line(results[0].stderr)
    assert "every rank has counted out (global rank 1 was ended by its watchdog (exit status 86" in line, \
        describe(results)


@pytest.mark.timeout(120)
def test_the_store_host_stops_lingering_for_a_peer_killed_on_this_host(tmp_path):
    """Rank 1 SIGKILLs itself after a barrier; rank 0 exits normally. Rank 0 reads rank 1's process gone from
    ``/proc`` (its pid, start time and host as rank 1 recorded them in the store), and rank 1 never counted out: its
    wait ends on that evidence (before: 5 s, for a rank that could never count out)."""
    results = run_ranks(CASES, 2, ["peer_killed"], env=tuner_env(tmp_path), timeout=90)
    assert results[1].returncode in KILLED, describe(results)
    assert results[0].returncode == 0, describe(results)
    line = linger_line(results[0].stderr)
    assert "every rank has counted out or is known gone" in line, describe(results)
    assert "global rank 1 is gone without counting out (its process, pid" in line and "on this host" in line, line


@pytest.mark.timeout(150)
def test_the_store_host_stops_lingering_for_a_peer_it_gave_up_on_by_its_beat(tmp_path):
    """Rank 1, in a pid namespace of its own (as on another host: rank 0 cannot read its process in ``/proc``),
    SIGKILLs itself in the first steady round. Rank 0 gives up on it at the round's exchange, its failure board's
    beat standing still (GroupTimeoutError, before the exchange's deadline), catches that and exits normally: its
    wait at exit ends at once on that evidence (before: 5 s)."""
    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    results = run_ranks(CASES, 2, ["peer_killed_mid_tuning"], env=tuner_env(tmp_path, timeout=2), timeout=120,
                        wrap={1: UNSHARED})
    assert results[1].returncode in KILLED, describe(results)
    assert results[0].returncode == 0, describe(results)
    assert results[0].result["error"] == "GroupTimeoutError", results[0].result
    assert "showed no sign of life" in results[0].result["message"], results[0].result
    line = linger_line(results[0].stderr)
    assert "every rank has counted out or is known gone" in line, describe(results)
    assert "global rank 1 is gone without counting out (this rank gave up on it: its beat stood still" in line, line


class Counted:
    """A real store client that counts the requests made through it."""

    def __init__(self, store) -> None:
        self.store, self.requests = store, 0

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            self.requests += 1
            return method(*args, **kwargs)

        return request


@pytest.mark.timeout(60)
def test_the_store_hosts_wait_at_exit_reads_the_count_at_the_pace_of_the_waits():
    """The host's wait at exit for a rank that never counts out (nothing tells it is gone: the whole 5 s), on a real
    TCP store. Before, it read the count every 20 ms: about 250 requests; now at the pace of the exchanges' waits
    (``store_wait.poll_pause``: every 50 ms for its first second, then less and less often, every 0.25 s from
    2.2 s on): about 4 x 5 + 23 = 43."""
    from datetime import timedelta

    import torch.distributed as dist
    from harness import free_port

    from triton_dist_tune.group import exits

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=30),
                           wait_for_workers=False)
    store = Counted(dist.PrefixStore("job/", server))
    outcome = exits.linger(exits.Job(store, "attempt0/", 0, 2, host=True))
    assert outcome.ended == "timeout" and outcome.counted == 1, outcome
    assert store.requests <= 60, store.requests
