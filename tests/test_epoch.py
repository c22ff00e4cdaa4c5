"""The naming of an attempt (``group/epoch.py``): ranks threads of this process, each with a client of one real
TCPStore, over keys an earlier attempt left behind."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
import torch.distributed as dist

from triton_dist_tune.group import epoch


class CountingStore:
    """A store client that counts its requests by kind, and the checks that found a hello not written yet."""

    def __init__(self, store: dist.TCPStore) -> None:
        self.store, self.requests, self.unwritten_hellos = store, Counter(), 0

    def __getattr__(self, name: str):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.requests[name] += 1
            found = method(*args, **kwargs)
            if name == "check" and not found and "/hello/" in args[0][0]:
                self.unwritten_hellos += 1
            return found

        return counted


@pytest.mark.timeout(60)
def test_ranks_agree_on_rank_0s_draw_over_an_earlier_attempts_hellos_reading_each_hello_once():
    """Five ranks name an attempt under keys where an earlier attempt's three hellos, an entry counted and never
    written (a rank that ended between its two requests), and an outsider's entry stand; rank 4 comes after rank
    0's tenth look. Every rank returns rank 0's draw; rank 0 reads each written entry once, and a look that finds no
    new entry costs it at most three requests (the log's count, the confirmations, the unwritten entry), whatever
    the ranks, and one more for each entry of this attempt counted but not yet written when it looked (a loaded run
    of the suite saw one: 37 requests against a bound of 36 that left it out)."""
    from harness import free_port

    port, base, size = free_port(), "t/attempt/", 5
    server = dist.TCPStore("127.0.0.1", port, size + 1, is_master=True, timeout=timedelta(seconds=30),
                           wait_for_workers=False)
    for rank in range(1, 4):  # an earlier attempt's hellos, answered then
        epoch.Naming(server, base, rank, size).ask()
    server.add(f"{base}hellos", 1)  # counted, never written
    server.set(f"{base}hello/{int(server.add(f'{base}hellos', 1))}", "x; not a draw")
    stale_entries = 5

    stores = [CountingStore(dist.TCPStore("127.0.0.1", port, size + 1, is_master=False,
                                          timeout=timedelta(seconds=30))) for _ in range(size)]
    namings = [epoch.Naming(stores[r], base, r, size) for r in range(size)]
    names: dict[int, str] = {}
    looks = [0]

    def rank(r: int) -> None:
        def wait(keys, missing, poll):
            deadline = time.monotonic() + 30
            while True:
                if poll is not None:
                    looks[0] += 1
                    poll()
                if stores[r].check(keys):
                    return
                assert time.monotonic() < deadline, missing.missing()
                time.sleep(0.02)

        if r == 4:  # late: until rank 0 has looked 10 times (counted, not timed: a loaded machine looks slower)
            deadline = time.monotonic() + 20
            while looks[0] < 10 and time.monotonic() < deadline:
                time.sleep(0.01)
        names[r] = epoch.name_among(namings[r], wait)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    assert names == {r: namings[0].draw for r in range(size)}
    requests = stores[0].requests
    written = stale_entries - 1 + (size - 1)
    assert requests["get"] == written  # every written entry read once (the unwritten one never)
    assert requests["set"] == 3 + (size - 1)  # replies: the earlier attempt's hellos, for nobody, and this one's
    assert looks[0] >= 10, looks  # rank 4 came after 10 looks, most of them finding no new entry
    # the unwritten entry is checked once a look; a hello of this attempt counted and not yet written when a look
    # came (its rank between its two requests: seen under load) is checked again at the next, once more each
    in_flight = stores[0].unwritten_hellos - looks[0]
    assert in_flight >= 0, (stores[0].unwritten_hellos, looks)
    assert sum(requests.values()) - 2 * written - requests["set"] <= 3 * looks[0] + in_flight, (requests, looks)
