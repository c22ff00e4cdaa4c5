"""A waiting rank's look-up of which ranks have arrived (``group/store_wait.py``, ``Arrivals``): a few store requests a
look whatever the group's size, over real torch stores; the log of arrivals is a hint, each rank's key the truth."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
import torch.distributed as dist
from test_store_reads import DictStore, Unit, side_made  # (a Python store: no append, no compare-and-set)

from triton_dist_tune.errors import GroupTimeoutError
from triton_dist_tune.faults.progress import RoundWatch


def tcp_store(timeout_s: float = 10) -> dist.TCPStore:
    from harness import free_port

    return dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)


class Counted:
    """A real store client that counts the requests made through it by kind, and the single-key checks by the kind of
    key (``done`` marks, confirmations), and calls ``on_look()`` at each read of several beat counters (a progress
    watch's look: once a slice of its wait has passed)."""

    def __init__(self, store, on_look=None) -> None:
        self.store, self.on_look = store, on_look
        self.requests, self.one_by_one, self.looks = Counter(), 0, 0

    def clone(self):
        return self  # (a watch's own client for the beats: counted too)

    def set_timeout(self, timeout) -> None:
        pass

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            self.requests[name] += 1
            keys = args[0] if args and isinstance(args[0], list) else [args[0]] if args else []
            if name == "check" and len(keys) == 1 and "/done/" in keys[0]:
                self.one_by_one += 1
            if name == "multi_get" and "/beat/" in keys[0]:
                self.looks += 1
                if self.on_look is not None:
                    self.on_look(self.looks)
            return method(*args, **kwargs)

        return request


def arrive(server, scope: str, unit: int, logged: bool = True) -> None:
    """Unit ``unit`` marks round 0, then (``logged``) appends itself to the round's log, as its first look does."""
    server.set(f"{scope}done/0/{unit}", b"1")
    if logged:
        server.append(f"{scope}done/0/log", f"{unit},")


@pytest.mark.timeout(60)
def test_a_progress_watch_with_half_its_units_late_reads_no_unit_one_by_one_at_its_looks():
    """Rank 0 of a watch of 64 units waits at a round with units 32-63 late (beating) for 8 looks, then they mark it.
    Before, each look checked the marks still missing one by one: 32 requests a look per waiting rank, so with half
    the group waiting for the other half about N²/4 a second at the server (63 at the first look). Now a look reads
    the round's log of arrivals and confirms the marks it names in one request: no mark is checked one by one, and
    a look costs a few requests (the log, the marks it names, the beats' two, whether a unit left; the polls between
    looks check the missing marks at once)."""
    server, scope, size = tcp_store(), "t/half/", 64
    late = range(size // 2, size)

    def on_look(looks: int) -> None:
        for unit in late:  # the late units beat (they are alive), and mark the round after 8 looks
            server.add(f"{scope}beat/{unit}", 1)
            if looks == 8:
                arrive(server, scope, unit)

    store = Counted(server, on_look)
    for unit in range(1, size):
        server.add(f"{scope}beat/{unit}", 1)
        if unit not in late:
            arrive(server, scope, unit)
    watch = RoundWatch(Unit(0, size, store), "campaign t", 0.2, scope=scope)  # (a look every 0.05 s)
    side_made(store)
    store.requests.clear()
    watch.wait(0, "round 1")
    assert store.looks >= 8, store.requests
    assert store.one_by_one == 0, (store.one_by_one, store.looks)  # before: 63 + 32 a look
    assert sum(store.requests.values()) <= 8 * store.looks + 4, (store.requests, store.looks)
    assert not server.check([f"{scope}done/0/log"])  # the wait deleted the log it appended to


@pytest.mark.timeout(60)
def test_a_unit_that_marked_the_round_and_ended_before_its_log_entry_is_not_given_up_on():
    """The key is the truth, the log a hint: unit 1 marked the round and ended before appending to the log (its beat
    stands still); unit 2 is late but beats, and marks the round later. The waiting rank never reads unit 1's entry,
    but gives up on no unit whose mark is set: the wait returns once unit 2 marks the round (about 2.5 windows of
    the beats later), instead of raising that unit 1 showed no sign of life."""
    server, scope = tcp_store(), "t/dead/"
    window = 1.2  # exchange_timeout(0.2)

    def on_look(looks: int) -> None:
        server.add(f"{scope}beat/2", 1)
        if looks * 0.05 > 2.5 * window:  # (counted in looks, each at least 0.05 s apart)
            arrive(server, scope, 2)

    store = Counted(server, on_look)
    for unit in (1, 2):
        server.add(f"{scope}beat/{unit}", 1)
    arrive(server, scope, 1, logged=False)
    watch = RoundWatch(Unit(0, 3, store), "campaign t", 0.2, scope=scope)
    watch.wait(0, "round 1")
    assert store.looks * 0.05 > 2.5 * window


@pytest.mark.timeout(60)
def test_a_log_entry_whose_mark_is_not_set_ends_no_wait_and_saves_no_unit():
    """An entry of the log that the keys contradict (another process wrote it; a rank that took its message back):
    the log names unit 1 arrived, but its mark is not set and its beat stands still. The wait does not return, and
    gives up on unit 1 after the window, as without the log."""
    server, scope = tcp_store(), "t/forged/"
    server.add(f"{scope}beat/1", 1)
    server.append(f"{scope}done/0/log", "1,")
    watch = RoundWatch(Unit(0, 2, Counted(server)), "campaign t", 0.2, scope=scope)
    with pytest.raises(GroupTimeoutError, match=r"unit\(s\) \[1\] .*showed no sign of life"):
        watch.wait(0, "round 1")


@pytest.mark.timeout(60)
def test_a_store_without_append_looks_up_each_key_as_before():
    from triton_dist_tune.group.store_wait import ArrivalLog, Arrivals

    store = DictStore()
    keys = {r: f"t/{r}" for r in range(1, 8)}
    for rank in (2, 5):
        store.set(keys[rank], "1")
    arrivals = Arrivals(keys, store.check, ArrivalLog(store, "t/log", 0))
    assert arrivals.missing() == [1, 3, 4, 6, 7]
    store.set(keys[4], "1")
    assert arrivals.missing() == [1, 3, 6, 7]
    assert arrivals.confirm([1, 3]) == [1, 3]
    arrivals.close()


@pytest.mark.timeout(60)
def test_naming_an_attempt_looks_up_the_unconfirmed_ranks_in_a_few_requests():
    """Rank 0 of 64 naming an attempt (each group of a multi-node job started without init_distributed does, at its
    first exchange) looks up once a second which ranks have not confirmed the name. Before, a look checked each
    rank's key: 32 requests with half the ranks confirmed; now it reads the log of the confirmations and confirms the
    ranks it names in one request. A rank that set its confirmation but not its log entry (ended between the two)
    is found by its key wherever a decision or a message needs the truth."""
    from triton_dist_tune.group import epoch

    server, base, size = tcp_store(30), "t/name/", 64
    clients = [dist.TCPStore(server.host, server.port, size, is_master=False, timeout=timedelta(seconds=30))
               for _ in range(2)]
    counted = Counted(clients[0])
    namings = [epoch.Naming(counted if r == 0 else clients[1], base, r, size) for r in range(size)]
    for naming in namings[1:]:
        naming.ask()
    namings[0].answer()
    for naming in namings[1:size // 2]:
        naming.take()
    counted.requests.clear()
    for _ in range(3):
        assert namings[0].unconfirmed() == list(range(size // 2, size))
    assert sum(counted.requests.values()) <= 3 + 2 + 2, counted.requests  # before: 3 x 32 checks
    clients[1].set(f"{base}done/{namings[0].draw}/40", "1")  # rank 40 confirmed, and ended before its log entry
    assert 40 in namings[0].unconfirmed()
    assert 40 not in namings[0].lookup().confirm(list(range(size // 2, size)))
    for naming in namings[size // 2:]:
        naming.take()
    assert namings[0].unconfirmed() == []
