"""Reads of the job's key-value store that must not wait (``group/store_peek.py``), over real torch stores."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from datetime import timedelta

import pytest
import torch.distributed as dist

from triton_dist_tune.group.channel import FailureReport
from triton_dist_tune.group.clients import side_client
from triton_dist_tune.group.store_board import StoreBoard
from triton_dist_tune.group.store_peek import peek


def side_made(store) -> None:
    """Wait until the process's side client of ``store`` is made (it connects on a helper thread; until then the
    beats are read in an ``add`` each): the counts below are a look's once it is."""
    deadline = time.monotonic() + 20
    while side_client(store) is None and time.monotonic() < deadline:
        time.sleep(0.01)

class DictStore(dist.Store):
    """A Python store that implements no compare-and-set (as a user's own store may)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value) -> None:
        self.values[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key: str) -> bytes:
        return self.values[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values for k in keys)


def _stores():
    from harness import free_port

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=5),
                           wait_for_workers=False)
    legacy = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=5),
                           wait_for_workers=False, use_libuv=False)
    return {"tcp": server, "tcp-legacy": legacy, "file": dist.FileStore(tempfile.mktemp(), 1),
            "hash": dist.HashStore(), "prefix": dist.PrefixStore("p/", server), "python": DictStore()}


@pytest.mark.timeout(60)
def test_peek_reads_a_key_and_misses_one_at_once_without_creating_or_changing_either():
    for name, store in _stores().items():
        store.set("there", "value")
        store.set("empty", "")
        assert peek(store, "there") == b"value", name
        assert peek(store, "empty") == b"", name
        assert peek(store, "missing") is None, name
        assert not store.check(["missing"]), name  # nothing created
        assert store.get("there") == b"value", name  # nothing changed


class Owner:
    """A group rank as a board needs it: its rank, the group's size and a client of the job's store."""

    def __init__(self, rank: int, size: int, store) -> None:
        self.rank, self.size, self.store = rank, size, store

    def board_closed(self, board: StoreBoard) -> None:
        pass


class DeletedAfterTheFirstLook:
    """A real store client through which the first request about ``key`` is answered, then another rank (``close``)
    deletes that key before this client's next request: the interleaving a loaded machine makes now and then, here
    every time."""

    def __init__(self, store, key: str, close) -> None:
        self.store, self.key, self.close, self.closed = store, key, close, False

    def clone(self):
        """The board's own client (:func:`~triton_dist_tune.group.clients.own_client`): this same interleaving."""
        return self

    def set_timeout(self, timeout) -> None:
        pass  # (its own client's timeout: the real client keeps the test's)

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            answer = method(*args, **kwargs)
            if not self.closed and self.key in repr(args):
                self.closed = True
                self.close()
            return answer

        return request


@pytest.mark.timeout(60)
def test_a_failure_report_deleted_by_rank_0s_close_while_a_peer_reads_it_does_not_hold_the_peer():
    """Rank 1 reads the board while rank 0 closes it, which deletes its reports; the deletion falls between rank 1's
    first look at a report and its read. Before, the look was ``check`` and the read ``get``, which waited for the
    deleted key for the store's whole timeout and then raised, holding every other request of rank 1's client (its
    exchange's compare-and-set, seen for 26 s under load). Now the read is one request that does not wait: it
    returns the report."""
    from harness import free_port

    port, scope = free_port(), "t/board/"
    server = dist.TCPStore("127.0.0.1", port, 3, is_master=True, timeout=timedelta(seconds=20),
                           wait_for_workers=False)
    rank0 = StoreBoard(Owner(0, 2, server), scope)
    client = dist.TCPStore("127.0.0.1", port, 3, is_master=False, timeout=timedelta(seconds=20))
    rank0.post(FailureReport(1, 3, "config 3", "RuntimeError: boom", step="config 3 warmup"))
    store = DeletedAfterTheFirstLook(client, f"{scope}1", rank0.close)
    rank1 = StoreBoard(Owner(1, 2, store), scope)
    try:
        reports = rank1.read()
    except Exception as exc:  # before: DistStoreError after the store's 20 s timeout
        pytest.fail(f"the board read waited for a deleted report and raised {type(exc).__name__}: {exc}")
    assert store.closed and not server.check([f"{scope}1"]), "the report was not deleted during the read"
    assert [(r.rank, r.index, r.error) for r in reports] == [(1, 3, "RuntimeError: boom")]
    assert rank1.read() == reports  # read once: the deleted key is not looked for again


@pytest.mark.timeout(60)
def test_a_look_at_the_beats_from_long_ago_is_taken_again_before_a_rank_is_read_alive():
    """``StoreBoard.stopped`` compares each rank's beat with the board's last look. A look from an earlier phase
    (seconds ago) saw rank 1 at 5; rank 1 then beat once and was killed. Before, the stale look read it alive (6
    against 5) and the rank whose beat stopped went unnamed; now an old look is taken again, a span before."""
    import time

    from harness import free_port

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    board = StoreBoard(Owner(0, 2, server), "t/look/", window=0.5)  # beats every 0.1 s: a span of 0.8 s
    try:
        server.add("t/look/beat/1", 5)
        board.look()  # an earlier phase's look
        time.sleep(board.beats_span + 1.5)
        server.add("t/look/beat/1", 1)  # rank 1's last beat, then it is killed
        assert board.stopped([1]) == [1]
    finally:
        board.close()


class Counted:
    """A real store client that counts the requests made through it, by method."""

    def __init__(self, store) -> None:
        self.store, self.requests = store, Counter()

    def clone(self):
        return self  # (the board's own client: counted too)

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            self.requests[name] += 1
            return method(*args, **kwargs)

        return request


@pytest.mark.timeout(60)
def test_a_look_at_the_beats_of_a_large_group_is_two_store_requests():
    """Rank 0 of a group of 64 looks at its 63 peers' beats (the watchdog, a span before a deadline; every rank
    does so at once) and then reads which stopped. Before, each read was one ``add`` per peer: 63 requests per rank,
    about 8,000 over the group at one deadline; now ``check`` and ``multi_get``. A peer whose board is not open
    yet (no counter) is read through the adds, as 0, and the counts read are the beats'."""
    from harness import free_port

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    scope = "t/beats/"
    for rank in range(1, 64):
        server.add(f"{scope}beat/{rank}", rank)
    store = Counted(server)
    board = StoreBoard(Owner(0, 64, store), scope, window=0.5)
    try:
        board._stop.set()  # (its beat thread stops: the counts below are the look's and the read's alone; not a
        board._beater.join()  # close, which, the last of the group's boards to close, deletes every counter)
        side_made(store)
        store.requests.clear()
        board.look()
        assert sum(store.requests.values()) == 2, store.requests
        server.add(f"{scope}beat/5", 1)  # rank 5 beats; the others stand still
        assert board.stopped([3, 5, 7]) == [3, 7]
        assert sum(store.requests.values()) == 4, store.requests
        assert board._counts([1, 63]) == {1: 1, 63: 63}
        store.requests.clear()
        assert board._counts([2, 64]) == {2: 2, 64: 0}  # rank 64's board is not open: read through the adds
        assert store.requests["add"] == 2, store.requests
    finally:
        board.close()


class Logged:
    """A real store client that logs each request made through it (method and keys), and runs ``on_beats`` at the
    first read of several beat counters (a waiting rank's look, once a slice of its wait has passed)."""

    def __init__(self, store, on_beats=None) -> None:
        self.store, self.log, self.on_beats = store, [], on_beats
        self.first = self  # (the client the test made: a clone logs into its log and runs its hook)

    def clone(self) -> Logged:
        """A client of its own (:func:`~triton_dist_tune.group.clients.own_client`), logged as this one."""
        twin = Logged(self.store.clone())
        twin.log, twin.first = self.log, self
        return twin

    def set_timeout(self, timeout) -> None:  # (not a request to the store: not logged)
        self.store.set_timeout(timeout)

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            keys = args[0] if args and isinstance(args[0], list) else [args[0]] if args else []
            self.log.append((name, keys))
            first = self.first
            if first.on_beats is not None and name in ("multi_get", "add") and "/beat/" in keys[0]:
                first.on_beats(), setattr(first, "on_beats", None)
            return method(*args, **kwargs)

        return request


class Unit:
    """A rank of a progress watch's group, as :class:`RoundWatch` needs it."""

    def __init__(self, rank: int, size: int, store) -> None:
        self.rank, self.size, self.store = rank, size, store
        self.title, self.global_ranks = "default", list(range(size))


@pytest.mark.timeout(60)
def test_a_rank_waiting_at_a_round_of_a_large_group_reads_no_unit_one_by_one_while_none_is_late():
    """Rank 0 of a group of 64 waits at a round of a progress watch (a campaign's, a sharded or replicas tuning's).
    Before, each wait read every other unit's mark and its note of leaving one by one: 126 requests per rank and round
    where every unit had finished (8,000 at the server for the group), and as many again at each look while one was
    late. Now: the marks at once, and whether some unit left at all (2 requests); with units 5 and 9 late, the
    look reads the round's log of arrivals (each unit that marked the round appends to it at its own first look)
    and confirms the marks it names in one request, reads no mark one by one (before the log: the first look read
    the 63 marks one by one), the beats in two requests, and no note of leaving; the log is deleted when the wait
    ends. A unit that leaves is still found, and its error raised."""
    from harness import free_port

    from triton_dist_tune.errors import RankFailedError
    from triton_dist_tune.faults.progress import RoundWatch

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    scope, size = "t/watch/", 64
    store = Logged(server)
    watch = RoundWatch(Unit(0, size, store), "campaign t", 0.2, scope=scope)  # (a look every 0.05 s)
    side_made(store)
    for unit in range(1, size):
        server.set(f"{scope}done/0/{unit}", b"1")
    watch.wait(0, "round 1")
    assert len(store.log) == 2, store.log

    late = (5, 9)
    for unit in range(1, size):
        server.add(f"{scope}beat/{unit}", 1)
        if unit not in late:  # (its mark, then its entry in the round's log, at its own first look)
            server.set(f"{scope}done/1/{unit}", b"1")
            server.append(f"{scope}done/1/log", f"{unit},")
    store.log.clear()
    store.on_beats = lambda: [server.set(f"{scope}done/1/{unit}", b"1") for unit in late]
    watch.wait(1, "round 2")
    one_by_one = [keys[0] for name, keys in store.log if name == "check" and len(keys) == 1 and "/done/" in keys[0]]
    assert not one_by_one, store.log
    assert [name for name, keys in store.log if "/beat/" in keys[0]] == ["check", "multi_get"], store.log
    assert [name for name, keys in store.log if keys[0].endswith("/log")] == ["append", "compare_set",
                                                                               "delete_key"], store.log
    assert not [name for name, keys in store.log if name in ("compare_set", "get", "add")
                and not keys[0].endswith("/log")], store.log
    assert not server.check([f"{scope}done/1/log"])

    for unit in range(1, size):
        server.set(f"{scope}done/2/{unit}", b"1")
    RoundWatch(Unit(7, size, server), "campaign t", 0.2, scope=scope).leave("KeyboardInterrupt")
    with pytest.raises(RankFailedError, match="left the campaign with KeyboardInterrupt"):
        watch.wait(2, "round 3")


def test_a_note_whose_second_line_nests_deeper_than_json_reads_is_a_note_of_unknown_calls_not_a_crash():
    """A value under a rank's note key whose second line is 100,000 ``[`` (written by another process: the store has
    no authentication) raised RecursionError out of the note's reading, so out of every waiting rank's look between
    its store waits; now the line is not understood: a note about any call, posted at an unknown time."""
    from triton_dist_tune.group.unresolved import Notes, _prefix

    store = dist.HashStore()
    store.add(f"{_prefix()}count", 1)
    store.set(f"{_prefix()}1", "root\n" + "[" * 100_000 + "\nBadInputError: x")
    notes = Notes.read(store, [0, 1])
    assert list(notes) == [1] and notes[1].about == () and notes[1].text == "BadInputError: x"


@pytest.mark.timeout(60)
def test_a_unit_that_closes_its_watch_while_its_beat_is_read_is_not_a_lost_store():
    """Rank 0 waits at a round for unit 1, which marks it and closes its watch (deleting its beat counter) between
    rank 0's ``check`` of the beat counters and its ``multi_get`` of them. A ``multi_get`` of a missing key waits for
    the store's timeout: rank 0 waited it out and raised that it lost the key-value store (which is alive; the job's
    client waits up to its timeout, 600 s under init_distributed's default). Now the round ends: unit 1 marked it."""
    from harness import free_port

    from triton_dist_tune.faults.progress import RoundWatch

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    scope = "t/watch/"
    store = Logged(server)
    server.add(f"{scope}beat/1", 1)
    store.on_beats = lambda: (server.set(f"{scope}done/0/1", b"1"), server.delete_key(f"{scope}beat/1"))
    watch = RoundWatch(Unit(0, 2, store), "campaign t", 0.2, scope=scope)  # (a look every 0.05 s)
    began = time.monotonic()
    watch.wait(0, "round 1")
    assert time.monotonic() - began < 9, "waited for the store's timeout"


class Member(Unit):
    """A rank of a group a progress watch starts on (:meth:`RoundWatch.start`): a unit whose group numbers its
    exchanges (here always at exchange 0)."""

    def at_exchange(self, name: str) -> str:
        return f"t/{name}/0/"


class ClosesBetween:
    """A real store client (and each clone of it, :func:`~triton_dist_tune.group.clients.own_client`) through which,
    right after the first ``check`` of beat counters, another rank closes its board or watch (``close``): between a
    reader's ``check`` of the counters and its ``multi_get`` of them, the interleaving a loaded machine makes now and
    then, here every time."""

    def __init__(self, store, close, shared: dict | None = None) -> None:
        self.store, self.shared = store, {"close": close, "closed": False} if shared is None else shared

    def clone(self) -> ClosesBetween:
        return ClosesBetween(self.store.clone(), None, self.shared)

    def set_timeout(self, timeout) -> None:
        self.store.set_timeout(timeout)

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def request(*args, **kwargs):
            answer = method(*args, **kwargs)
            if name == "check" and "/beat/" in repr(args) and not self.shared["closed"]:
                self.shared["closed"] = True
                self.shared["close"]()
            return answer

        return request


def _keys_under(server, scope: str) -> list[str]:
    return sorted(k for k in server.list_keys() if k.startswith(scope))


@pytest.mark.timeout(60)
def test_a_board_closed_between_a_peers_check_and_read_of_its_beat_does_not_hold_the_peer():
    """Rank 1 closes its failure board (its tuning is over) between rank 0's ``check`` of rank 1's beat counter and
    its ``multi_get`` of it (rank 0 still waits at the tuning's last exchange). Before, the close deleted the counter
    and the ``multi_get`` waited for it for the side client's whole timeout (2 s), holding every board's beats on
    that client, then the counter was read again with an ``add``, which wrote it again (a key left behind). Now a
    counter is deleted only by the last board of the group to close: rank 0's look returns at once, and once it
    closes too, no key of the boards is left."""
    from harness import free_port

    port, scope = free_port(), "t/closing/"
    server = dist.TCPStore("127.0.0.1", port, 3, is_master=True, timeout=timedelta(seconds=20),
                           wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", port, 3, is_master=False, timeout=timedelta(seconds=20)) for _ in (0, 1)]
    rank1 = StoreBoard(Owner(1, 2, clients[1]), scope, window=10.0)
    store = ClosesBetween(clients[0], rank1.close)
    rank0 = StoreBoard(Owner(0, 2, store), scope, window=10.0)
    side_made(store)  # (before it is made, a look reads the beats with adds, and no check comes to close between)
    try:
        began = time.monotonic()
        assert rank0.silent([1]) == []
        took = time.monotonic() - began
        assert store.shared["closed"], "rank 1 never closed its board during rank 0's look"
        assert took < 0.5, f"rank 0's look at the beats took {took:.2f} s (the side client's timeout: 2 s)"
    finally:
        rank0.close()
    assert _keys_under(server, scope) == []


@pytest.mark.timeout(60)
def test_a_unit_that_leaves_between_a_peers_check_and_read_of_its_beat_does_not_hold_the_peer():
    """Unit 1 leaves the campaign with an error (its note, then its watch's close) between unit 0's ``check`` of its
    beat counter and its ``multi_get`` of it, while unit 0 waits at a round. Before, the close deleted the counter and
    the ``multi_get`` waited the side client's whole timeout (2 s) before unit 0 read the note; now unit 0 raises at
    that look, and once its watch closes too, no key of the watch is left (the note of leaving with it)."""
    from harness import free_port

    from triton_dist_tune.errors import RankFailedError
    from triton_dist_tune.faults.progress import RoundWatch

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, 3, is_master=True, timeout=timedelta(seconds=20),
                           wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", port, 3, is_master=False, timeout=timedelta(seconds=20)) for _ in (0, 1)]
    unit1 = RoundWatch.start(Member(1, 2, clients[1]), "campaign t", 0.2)
    store = ClosesBetween(clients[0], lambda: unit1.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None))
    unit0 = RoundWatch.start(Member(0, 2, store), "campaign t", 0.2)  # (a look every 0.05 s)
    side_made(store)  # (the look timed below is one with a check, not the adds read before the client is made)
    try:
        began = time.monotonic()
        with pytest.raises(RankFailedError, match="unit 1 .*left the campaign with KeyboardInterrupt"):
            unit0.wait(0, "round 1")
        took = time.monotonic() - began
        assert store.shared["closed"], "unit 1 never left during unit 0's look"
        assert took < 0.5, f"unit 0's wait took {took:.2f} s (the side client's timeout: 2 s)"
    finally:
        unit0.__exit__(RankFailedError, RankFailedError("unit 1 left"), None)
    assert _keys_under(server, unit0.scope) == []


def test_a_members_close_is_taken_back_only_where_it_did_not_make_the_count():
    """group/beat.py Members, on a real store, 2 members. A side watch of member 0 alone, then the group's next
    watch at the same scope: member 0 takes its side close back at its second open, so that the keys are deleted
    only by the last of the two to close the shared watch, whichever it is (before: member 0's second close deleted
    them at once, and member 1's close wrote the count again, left behind). Two watches of the whole group at one
    scope, one after the other: the count made by the first, member 0's reopening takes nothing back, and the
    second's keys are deleted too."""
    from harness import free_port

    from triton_dist_tune.group.beat import Members

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=5),
                           wait_for_workers=False)
    keys = ["s/beat/0", "s/beat/1"]

    def member(rank: int) -> Members:
        server.add(keys[rank], 1)  # (its beat)
        opened = Members(server, "s/closed", 2, rank)
        opened.open()
        return opened

    for first_out in (0, 1):
        member(0).close(lambda: keys)  # the side watch: member 0 alone
        assert _keys_under(server, "s/") == ["s/beat/0", "s/closed"]
        shared = [member(0), member(1)]
        shared[first_out].close(lambda: keys)
        assert _keys_under(server, "s/") == ["s/beat/0", "s/beat/1", "s/closed"], first_out  # the other still reads
        shared[1 - first_out].close(lambda: keys)
        assert _keys_under(server, "s/") == [], first_out
    first = [member(0), member(1)]
    first[0].close(lambda: keys)
    first[1].close(lambda: keys)
    second = [member(0), member(1)]
    for each in second:
        each.close(lambda: keys)
    assert _keys_under(server, "s/") == []
