"""A waiting rank's polls of the store (``group/store_wait.py``: ``poll_pause``, ``Pace``): every 50 ms for a wait's
first second, where a healthy exchange or round ends, then less and less often, down to one every 0.25 s, so that a
long wait costs a few requests a second per waiting rank, not 20; and a progress watch's notes (why a unit left,
where one is stuck in user code) read in one request (``faults/unit_notes.py``). Real stores and real ranks."""

from __future__ import annotations

import threading
import time

import pytest
from harness import describe, run_ranks, tuner_env
from test_scale import CASES
from test_store_reads import DictStore, Logged, Unit
from test_wait_lookups import tcp_store

from triton_dist_tune.errors import GroupTimeoutError, RankFailedError
from triton_dist_tune.faults.progress import RoundWatch, user_code
from triton_dist_tune.faults.unit_notes import NoteLog
from triton_dist_tune.group.store_wait import POLL_CAP_S, POLL_S, poll_pause


def test_the_polls_stay_fast_for_a_waits_first_second_then_slow_down_to_a_cap():
    assert [poll_pause(w) for w in (0.0, 0.5, 1.0)] == [POLL_S] * 3  # (where a healthy exchange ends)
    pauses = [poll_pause(w / 10) for w in range(100)]
    assert pauses == sorted(pauses) and max(pauses) == POLL_CAP_S == poll_pause(3.0)
    assert POLL_CAP_S <= 0.25  # (well below the 1 s between a wait's reads of the late ranks' beats)


@pytest.mark.timeout(120)
def test_a_wait_of_ten_seconds_at_an_exchange_checks_a_few_times_a_second_after_its_first_seconds(tmp_path):
    """Ranks 0 and 1 of 3 wait 10 s at a barrier for rank 2. Before, each looked for its keys 20 times a second once
    its first (blocking) second had passed (and once more at each 1 s slice's start): about 150 polls from its third
    second on. Now its looks slow down from its second second on, to one every 0.25 s, paced across the wait's
    slices (a slice does not look again at once after the look that ended the one before): at most 5 a second, 4
    times fewer than before."""
    results = run_ranks(CASES, 3, ["late_barrier_polls"], env=tuner_env(tmp_path, 60), timeout=110)
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in (r.result for r in results if r.rank != 2):
        assert r["seconds"] > 8, r
        assert r["polls_from_3s"] <= 5 * (r["seconds"] - 3) + 2, r  # before: about 21 a second


def _beats(server, scope: str, units, stop: threading.Event, arrive_after: float) -> None:
    """Units ``units`` of a watch beat every 0.2 s, and mark round 0 ``arrive_after`` seconds from now."""
    until = time.monotonic() + arrive_after
    while not stop.wait(0.2):
        for unit in units:
            server.add(f"{scope}beat/{unit}", 1)
        if time.monotonic() >= until:
            for unit in units:
                server.set(f"{scope}done/0/{unit}", b"1")
            return


@pytest.mark.timeout(60)
def test_a_progress_watch_waiting_seconds_for_its_units_checks_their_marks_a_few_times_a_look():
    """Rank 0 of a watch of 3 units waits about 8 s at a round for units 1 and 2, which beat and then mark it; it
    looks up their beats once a second. Before, between two looks it checked their marks 21-22 times (a ``check`` of
    both every 50 ms, and one more after each look); now, from its third second on, at most 5 times (one every
    0.25 s), 4 times fewer."""
    server, scope = tcp_store(), "t/polls/"
    store, stop = Logged(server), threading.Event()
    for unit in (1, 2):
        server.add(f"{scope}beat/{unit}", 1)
    beating = threading.Thread(target=_beats, args=(server, scope, (1, 2), stop, 8.0), daemon=True)
    beating.start()
    try:
        RoundWatch(Unit(0, 3, store), "campaign t", 30.0, scope=scope).wait(0, "round 1")  # (a look a second)
    finally:
        stop.set()
        beating.join()
    intervals = [0]  # checks of the marks between two looks (a read of the beats)
    for name, keys in store.log:
        if name == "multi_get" and "/beat/" in keys[0]:
            intervals.append(0)
        elif name == "check" and all("/done/0/" in k and not k.endswith("/log") for k in keys):
            intervals[-1] += 1
    later = intervals[3:]  # (from the third look on)
    assert len(later) >= 4, intervals
    assert sum(later) <= 5 * len(later), intervals  # before: 21-22 an interval


@pytest.mark.timeout(60)
def test_the_notes_of_the_units_that_left_are_read_in_one_request():
    """Every unit of 64 marked round 0, then units 7 and 9 left (interrupted while they waited for the round's
    exchange). Rank 0, at the end of its wait, read whether some unit left (one request), then each other unit's
    note of leaving one by one: 63 requests; now every note in one."""
    server, scope, size = tcp_store(), "t/a/", 64
    for unit in range(1, size):
        server.set(f"{scope}done/0/{unit}", b"1")
    for unit, why in ((7, "KeyboardInterrupt"), (9, "SIGTERM")):
        RoundWatch(Unit(unit, size, server), "campaign t", 0.2, scope=scope).leave(why)
    store = Logged(server)
    with pytest.raises(RankFailedError, match=r"unit 7 \(global rank 7\) left the campaign with KeyboardInterrupt; "
                                              r"unit 9 \(global rank 9\) left the campaign with SIGTERM"):
        RoundWatch(Unit(0, size, store), "campaign t", 0.2, scope=scope).wait(0, "round 1")
    notes = [(name, keys) for name, keys in store.log if "/left/" in keys[0]]
    assert len(notes) <= 2, notes  # whether some unit left, and every note: before, 1 + 63


@pytest.mark.timeout(60)
def test_where_the_lost_units_are_stuck_is_read_in_one_request():
    """Units 32-63 of 64 show no sign of life at a round: their beats stand still; unit 40's because its thread has
    been in user code (``key_fn``) for longer than the window, which its beat thread noted. Rank 0 gives up on them
    and says where unit 40 is stuck. Before, it read each lost unit's note one by one (32 requests); now all in one."""
    server, scope, size = tcp_store(), "t/b/", 64
    for unit in range(1, size):
        server.add(f"{scope}beat/{unit}", 1)
        if unit < 32:
            server.set(f"{scope}done/0/{unit}", b"1")
    stuck = RoundWatch(Unit(40, size, server), "campaign t", 0.2, scope=scope)  # (notes after 1.2 s in user code)
    inside, back = threading.Event(), threading.Event()

    def in_user_code() -> None:
        with user_code("key_fn"):
            inside.set()
            back.wait(60)

    owner = threading.Thread(target=in_user_code, daemon=True)
    owner.start()
    inside.wait(10)
    keys = server.num_keys()
    stuck._owner, stuck._thread = owner.ident, threading.Thread(target=stuck._beating, daemon=True)
    stuck._thread.start()
    try:
        deadline = time.monotonic() + 30
        while server.num_keys() == keys and time.monotonic() < deadline:  # (its note is a key more in the store)
            time.sleep(0.05)
        assert server.num_keys() > keys, "unit 40 never noted that it is stuck"
        store = Logged(server)
        with pytest.raises(GroupTimeoutError, match=r"unit 40 has been stuck in key_fn"):
            RoundWatch(Unit(0, size, store), "campaign t", 0.2, scope=scope).wait(0, "round 1")
    finally:
        back.set()
        stuck.close()
        owner.join()
    reads = [(name, keys) for name, keys in store.log if "/stuck/" in keys[0]]
    assert len(reads) == 1, reads  # before: one per lost unit, 32


def test_notes_on_a_store_without_append_are_kept_a_key_per_unit_and_a_withdrawn_note_is_gone():
    for store in (DictStore(), tcp_store()):
        notes = NoteLog(store, "t/notes", lambda unit: f"t/{unit}")
        assert not notes.noted() and notes.read([1, 2]) == {}
        notes.write(1, "key_fn")
        notes.write(2, 'a "quoted"\nnote')
        assert notes.noted() and notes.read([1, 2, 3]) == {1: "key_fn", 2: 'a "quoted"\nnote'}
        if not isinstance(store, DictStore):  # (a Python store without delete_key cannot withdraw a note)
            notes.write(1, None)
            assert notes.read([1, 2]) == {2: 'a "quoted"\nnote'}


def _until(what: str, condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_a_unit_that_was_stuck_and_came_back_leaves_no_key_once_the_round_ends():
    """Unit 1 of 2 is stuck in user code (``key_fn``) for longer than the window, so it notes where (its watch's log
    of such notes), then comes back and withdraws the note; both units finish the round, pass it and close their
    watches. Before, the log of notes stayed in the store after the round (a withdrawal is a line more in it);
    now no key of the watch is left."""
    from test_store_reads import Member, _keys_under

    from triton_dist_tune.group.store_peek import peek

    server = tcp_store()
    back, errors, exchange = threading.Event(), [], threading.Barrier(2, timeout=30)  # (the round's exchange)

    def unit_1() -> None:  # (its own thread: the one whose user code the watch's beat looks at)
        try:
            with RoundWatch.start(Member(1, 2, server), "campaign t", 0.2) as watch:
                notes = f"{watch.scope}stuck/notes"
                with user_code("key_fn"):  # (noted after 1.2 s inside)
                    _until("unit 1 never noted that it is stuck", lambda: b'1 "key_fn"' in (peek(server, notes) or b""))
                _until("unit 1 never withdrew its note", lambda: b"1 -" in (peek(server, notes) or b""))
                back.set()
                watch.arrive(0, "round 1", 10.0)
                exchange.wait()
                watch.passed(0)
        except BaseException as exc:  # (for the main thread to raise)
            errors.append(exc)
            back.set()
            exchange.abort()

    watch = RoundWatch.start(Member(0, 2, server), "campaign t", 0.2)
    scope = watch.scope
    other = threading.Thread(target=unit_1, daemon=True)
    other.start()
    with watch:
        assert back.wait(40) and not errors, errors
        watch.arrive(0, "round 1", 10.0)
        exchange.wait()
        watch.passed(0)
    other.join(30)
    assert not errors, errors
    assert _keys_under(server, scope) == []


@pytest.mark.timeout(60)
def test_a_unit_that_left_before_another_opened_its_watch_is_read_as_left():
    """Unit 1 of 2 leaves the campaign with an error (its note of leaving, then its watch's close) before unit 0 has
    started its watch (unit 0 left the exchange before the watch later than unit 1: a wait past its first slice polls
    every 0.25 s). Unit 0 then waits at round 1 for unit 1's mark. Its wait must end on unit 1's note: unit 1 said
    why it left. Before, unit 1, the only member then open, was the last one out and deleted the notes with the beat
    counters, so unit 0 found no note and waited for unit 1's beat to stand still for the whole window
    (``exchange_timeout(T)``), then said unit 1 showed no sign of life. Once both have closed, no key is left."""
    from test_store_reads import Member, _keys_under

    server = tcp_store()
    with pytest.raises(KeyboardInterrupt):
        with RoundWatch.start(Member(1, 2, server), "campaign t", 0.2):
            raise KeyboardInterrupt
    watch = RoundWatch.start(Member(0, 2, server), "campaign t", 0.2)
    scope = watch.scope
    with pytest.raises(RankFailedError, match="unit 1 .*left the campaign with KeyboardInterrupt"):
        with watch:
            watch.wait(0, "round 1")
    assert _keys_under(server, scope) == []
