"""One rank number, one process: two processes of a job started with the same rank (a launch script that forgot to
set ``RANK`` per process, two copies of a launch by hand) are told apart at
:func:`~triton_dist_tune.group.dist.init_distributed`'s start, where global rank 0 hosts the job's store (no
torchrun agent).

Before, with ``WORLD_SIZE=2`` and ``RANK=0,1,1`` the extra process failed inside gloo ("Connection reset by peer",
a C++ traceback) or waited the init timeout for "ranks [0]"; with ``WORLD_SIZE=3`` and ``RANK=0,1,1`` every rank
waited the init timeout and was told "ranks [2] never joined", not that rank 1 was there twice. Now:

- each rank other than 0, once it has checked the job's token, claims its rank number in the store with a
  compare-and-set of a value of its own process (:func:`claim`); a second claimant reads the first's value, writes
  a report into a log (a counter and one key per entry), and ends at once with one line naming the rank, both
  processes (pid and host) and the launcher's variable;
- global rank 0 reads that log at each look of its wait for the ranks to join (:class:`Reports`): a report made
  since this start ends the naming (:class:`~triton_dist_tune.group.epoch.Halt`), and rank 0 tells every rank that
  claimed its number why the start ended, naming the ranks no process claimed (the ranks meant instead), before
  raising the same line itself.

The store rank 0 hosts lives with rank 0's process, so its claims are this job's: a later ``init_distributed`` in
the same processes (after ``destroy_process_group``) claims the same values again, and only reports made since each
start count. Under torchrun's agent (``TORCHELASTIC_USE_AGENT_STORE``) the store outlives an attempt and a restarted
attempt's new processes reuse its rank numbers, so nothing is claimed there (torchrun assigns the ranks itself); nor
in a job of one rank. A duplicate that comes after the job started is refused the same way, and the job goes on.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from .. import settings
from ..errors import AutotuneError
from .epoch import Halt

#: the key prefix of the claims: ``<CLAIM><rank>`` holds the value of the process that claimed it
CLAIM = "triton_dist_tune/rank/"
#: the log of the reports of a rank claimed twice: the counter, and ``<REPORTS>/<n>`` its n-th entry
REPORTS = "triton_dist_tune/claimed_twice"
#: this process's claim value, by pid (a fork of a process that imported this module draws its own)
_mine: dict[int, str] = {}


def this_process() -> str:
    """This process's claim value: its pid and host, and a draw that no other process has."""
    pid = os.getpid()
    if pid not in _mine:
        _mine[pid] = json.dumps({"pid": pid, "host": socket.gethostname(), "draw": os.urandom(8).hex()})
    return _mine[pid]


def _who(value: str) -> str:
    try:
        record = json.loads(value)
        return f"pid {int(record['pid'])} on {str(record['host'])[:80]}"
    except Exception:  # (a value of another program's: quoted, cut)
        return f"a process that wrote {value[:40]!r}"


def _gone(value: str) -> bool:
    """Whether the process that wrote the claim ``value`` ran on this host and has ended (a rank that failed at its
    start, started again by hand while rank 0 still waits: it replaces the one that ended, as before claims). One on
    another host, or whose pid is still taken, is not known to have ended."""
    try:
        record = json.loads(value)
        pid, host = int(record["pid"]), str(record["host"])
    except Exception:  # (a value of another program's)
        return False
    if host != socket.gethostname() or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # (another user's process: it lives)
        return False
    return False


def _started_with(rank: int) -> str:
    """How the launcher gave this process its rank (``RANK=1``): the first of the rank variables set."""
    name = next((name for name in settings.RANK_VARIABLES if os.environ.get(name, "").strip()), "RANK")
    return f"{name}={rank}"


def twice_said(rank: int, first: str, second: str, started_with: str) -> str:
    """The words for global rank ``rank`` claimed by two processes, ``first`` and then ``second``."""
    return (f"global rank {rank} was claimed by two processes ({first}, then {second}): two processes of the job "
            f"were started with {started_with}")


def claim(store: Any, rank: int, world: int, where: str) -> None:
    """A rank other than 0, its job's token checked: claim ``rank`` in ``store`` for this process. Another process's
    claim there: report it (:class:`Reports`) and raise an :class:`~triton_dist_tune.AutotuneError` naming the
    rank and both processes. This process's own (a later start after ``destroy_process_group``): return."""
    mine, key = this_process(), f"{CLAIM}{rank}"
    theirs = bytes(store.compare_set(key, "", mine)).decode(errors="replace")
    if theirs != mine and _gone(theirs):  # a process of this host that claimed it has ended: this one replaces it
        theirs = bytes(store.compare_set(key, theirs, mine)).decode(errors="replace")
    if theirs == mine:
        return
    first, started_with = _who(theirs), _started_with(rank)
    try:
        entry = int(store.add(REPORTS, 1))
        said = twice_said(rank, first, _who(mine), started_with)
        store.set(f"{REPORTS}/{entry}", json.dumps({"rank": rank, "said": said}))
    except Exception:  # (best effort: this process ends with the line below either way)
        pass
    raise AutotuneError(f"init_distributed: rank {rank}: at {where}, "
                        f"{twice_said(rank, first, f'this one, {_who(mine)}', started_with)}: start each rank of "
                        f"0..{world - 1} once")


class Reports:
    """Global rank 0, hosting the store: the reports of a rank claimed twice (:func:`claim`) made since this start
    (those of an earlier start in the same processes are not read)."""

    def __init__(self, store: Any, world: int) -> None:
        self.store, self.world = store, world
        self._seen = int(store.add(REPORTS, 0))

    def halt(self) -> Halt | None:
        """The first report made since this start, as the reason to end the job's start (naming the ranks no
        process has claimed yet) and the number of ranks that will read rank 0's word (those claimed); None
        where there is none yet. One request where there is none."""
        if int(self.store.add(REPORTS, 0)) <= self._seen:
            return None
        key = f"{REPORTS}/{self._seen + 1}"
        if not self.store.check([key]):  # (counted, not written yet: read at the next look)
            return None
        said = str(json.loads(self.store.get(key))["said"])
        unclaimed = [r for r in range(1, self.world) if not self.store.check([f"{CLAIM}{r}"])]
        if unclaimed:
            said += f", and no process has joined as {_listed(unclaimed)} so far"
        return Halt(f"{said}: start each rank of 0..{self.world - 1} once", self.world - 1 - len(unclaimed))


def _listed(ranks: list[int]) -> str:
    """``rank 2`` / ``ranks [2, 3]``, as the rank variables would say them."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
