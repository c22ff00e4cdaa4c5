"""A thread's blocking store wait (``group/store_wait.py``) on a real TCP store, beside another thread's requests."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
from harness import free_port
from test_store_reads import DictStore

from triton_dist_tune.group.store_wait import quiet_store_wait


@pytest.mark.timeout(60)
def test_a_blocking_wait_of_one_thread_does_not_hold_a_request_of_another_thread_that_ends_it():
    # before: thread A's blocking wait held the store's one client, so thread B's request, which A's key waits on,
    # went out only once A's wait had run out: A raised DistStoreError after its 5 s ('wait timeout after 5000ms')
    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=30),
                           wait_for_workers=False)
    store = dist.PrefixStore("job/", server)
    store.set("warm", "1")  # (the store answers: A's first blocking wait makes its own client now)
    parked, ended = threading.Event(), []

    def thread_a() -> None:
        parked.set()
        try:
            quiet_store_wait(store, ["from_b"], 5.0, block=True)
            ended.append("returned")
        except Exception as exc:
            ended.append(f"{type(exc).__name__}: {exc}")

    a = threading.Thread(target=thread_a)
    a.start()
    parked.wait(10)
    time.sleep(0.3)  # (A enters the store's wait: a few bytecodes after the event)
    store.set("b_request", "1")  # B's request, then the key A waits for
    store.set("from_b", "1")
    a.join(30)
    assert ended == ["returned"], ended


@pytest.mark.timeout(60)
def test_each_thread_waits_on_one_client_of_its_own_and_a_store_that_cannot_be_cloned_on_itself():
    from triton_dist_tune.group.store_wait import own_waiter

    server = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=30),
                           wait_for_workers=False)
    store = dist.PrefixStore("job/", server)
    mine = own_waiter(store)
    assert mine is not store and own_waiter(store) is mine  # one clone per thread, kept
    store.set("k", "v")
    assert mine.get("k") == b"v"  # the same keys, prefix and all
    other: list = []
    thread = threading.Thread(target=lambda: other.append(own_waiter(store)))
    thread.start()
    thread.join(30)
    assert other[0] is not mine and other[0] is not store
    local, python = dist.HashStore(), DictStore()
    assert own_waiter(local) is local and own_waiter(python) is python  # (served in-process; no clone)
