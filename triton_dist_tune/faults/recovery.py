"""The recovery layer of both tuners: journals named by group, gathered and merged once per tuning into a view
every rank shares, from which every resume decision is taken (never from a rank's own file).

- :func:`journal_path`: where a rank's journal of a cache entry lives: ``<entry>.<group>.rank<r>.journal``, where
  ``<group>`` fingerprints the group's identity (kind, name, global ranks; for a group of one process, that
  process's global rank too: torch.distributed's, else mpi4py's ``COMM_WORLD`` rank), for ``autotune`` and
  ``contextual_autotune`` alike, so that two groups of one job never read or delete each other's journals.
- :func:`shared_view`: one exchange of every rank's records, merged (:func:`~.evidence.merge`) into the same
  outcome per config on every rank; :func:`across` widens it over the replicas of a layout (a failure anywhere is a
  failure everywhere); :func:`gather_entries` gathers every journal of a group's contextual entries at once.
- :func:`warn_timeouts_differ`: ranks whose timeouts differ each journal as hung what is slower than their own: a
  warning, from the first agreement of each tuner (``autotune``'s in its group and across replicas, a contextual
  call's journal exchange).
- :func:`interruptible`: while a tuning runs on the main thread, SIGTERM (from the user or the launcher) raises
  ``SystemExit`` like Ctrl-C raises ``KeyboardInterrupt``, so that the attempt is journaled as interrupted and no
  config is blamed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import settings
from ..errors import BadInputError, MismatchError
from ..group.channel import Group
from ..space import fingerprint
from .evidence import crashed, merge
from .journal import Journal

log = logging.getLogger("triton_dist_tune")

#: the preference between outcomes of one config seen by different replicas: the strongest evidence wins (an
#: attempt that ended in the config's compile pass, ``interrupted``, is none)
_WEIGHT = {"failed": 3, "suspect": 2, "stopped": 1, "measured": 0, "interrupted": -1}


def group_tag(group: Group) -> str:
    """A short fingerprint of the group's identity (kind, name, global ranks), for file names. A group of this
    process alone (``("single",)``, every one-rank group: each one-rank replica of ``autotune_replicas``, an
    ``autotune_pg=MPI.COMM_SELF``) adds this process's global rank (:func:`_process_rank`: torch.distributed's, else
    mpi4py's ``COMM_WORLD`` rank), so that the processes of a job on one node keep journals of their own names in a
    shared folder, found again by the same process rank on a restart. (Before, they all wrote ``...rank0`` and told
    their files apart by lock only; a rerun's first process adopted every one, counting two processes' ends inside a
    config in one attempt as two attempts: left out as crashed at once; so did mpi4py jobs without torch.distributed
    until :func:`_process_rank` read ``COMM_WORLD``'s rank.)"""
    identity = group.identity
    if group.size == 1:
        process = _process_rank()
        if process is not None:
            identity = (*identity, "process", process)
    return fingerprint(repr(identity))[:10]


def _process_rank() -> int | None:
    """This process's global rank: its rank in torch.distributed's default group where that is initialized, else
    its rank in mpi4py's ``COMM_WORLD`` where MPI is initialized and not finalized, else None (one process alone).
    Neither module is imported for it: a process that has not imported one cannot have initialized it."""
    rank = _torch_rank()
    return rank if rank is not None else _mpi_world_rank()


def _torch_rank() -> int | None:
    """This process's rank in torch.distributed's default group, or None where it is not initialized."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # a torch without a working distributed package: no rank
        pass
    return None


def _mpi_world_rank() -> int | None:
    """This process's rank in mpi4py's ``COMM_WORLD``, or None where mpi4py's ``MPI`` is not imported, not
    initialized (``mpi4py.rc.initialize`` off, no ``MPI.Init`` yet) or already finalized."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return int(mpi.COMM_WORLD.Get_rank())
    except Exception:  # a broken MPI library: no rank
        pass
    return None


def journal_path(folder: Path, entry: str, group: Group) -> Path:
    """This rank's journal of ``entry`` in ``folder``: ``<entry>.<group>.rank<r>.journal``."""
    return folder / f"{entry}.{group_tag(group)}.rank{group.rank}.journal"


def shared_view(group: Group, journal: Journal, descriptions: list[str], only_job: str | None | bool, what: str,
                timeout: float, kept: str | None = None) -> dict[int, dict[str, Any]]:
    """Every rank's records of ``journal``, gathered in one exchange and merged: the same view on every rank
    (``kept``: the kept set of this tuning, see :func:`~.evidence.merge`). The exchange also agrees this attempt's
    name, group rank 0's session, which every rank then writes into its records (:attr:`~.journal.Journal.attempt`):
    the ranks of one attempt name it alike, on any node, under any launcher."""
    gathered = group.allgather([journal.session, journal.read()], what, timeout=timeout)
    journal.attempt = _attempt_of(gathered)
    return merge([records for _, records in gathered], descriptions, only_job=only_job, kept=kept)


def _attempt_of(contributions: list[Any]) -> str | None:
    """The attempt's name from an exchange whose contributions start with each rank's: group rank 0's."""
    first = contributions[0][0] if contributions and isinstance(contributions[0], list) and contributions[0] else None
    return first if isinstance(first, str) and first else None


def across(replicas: Group, view: dict[int, dict[str, Any]], what: str, timeout: float,
           journal: Journal) -> dict[int, dict[str, Any]]:
    """The views of every replica merged into one (per config, the strongest evidence: failed, suspect, stopped,
    measured; ``skip_pass`` where any replica's view has it), identical on every rank of every replica. A suspect
    whose ends on the replicas were two or more attempts is failed (crashed): a config that took down one replica
    in one attempt and another in the next is left out, as on one replica. The exchange also agrees the attempt's
    name over the replicas (replica 0's), written into ``journal``'s records from now on."""
    mine = [journal.attempt, sorted(view.values(), key=lambda r: r["index"])]
    attempt, merged = replicas.combine(mine, what, _over_replicas, timeout)
    journal.attempt = attempt if isinstance(attempt, str) and attempt else journal.attempt
    return {record["index"]: record for record in merged}


def _over_replicas(contributions: list[list[Any]]) -> list[Any]:
    return [_attempt_of(contributions), strongest([view for _, view in contributions])]


def strongest(views: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The replicas' views (each a list of merged outcomes, by index) as one: per config the strongest evidence,
    ``skip_pass`` where any view has it; a suspect whose ends were two or more attempts over the replicas is failed
    (crashed)."""
    best: dict[int, dict[str, Any]] = {}
    skip_pass: set[int] = set()
    ends: dict[int, tuple[set[int], set[str]]] = {}  # index -> (replicas, attempts) that ended inside it
    for replica, view in enumerate(views):
        for record in view:
            held = best.get(record["index"])
            if held is None or _WEIGHT.get(record["state"], 0) > _WEIGHT.get(held["state"], 0):
                best[record["index"]] = record
            if record.get("skip_pass"):
                skip_pass.add(record["index"])
            if isinstance(record.get("attempts"), list):
                replicas, attempts = ends.setdefault(record["index"], (set(), set()))
                replicas.add(replica)
                attempts.update(a for a in record["attempts"] if isinstance(a, str))
    for i, (replicas, attempts) in sorted(ends.items()):
        if best[i]["state"] == "suspect" and len(attempts) >= 2:  # ends on several replicas, in several attempts
            best[i] = crashed(i, best[i]["config"], f"replicas {sorted(replicas)}", attempts)
    return [{**best[i], "skip_pass": True} if i in skip_pass else best[i] for i in sorted(best)]


_SLOT = re.compile(r"^(?P<entry>.+)\.(?P<tag>[0-9a-f]{10})\.rank(?P<rank>\d+)(?:\.\d+)?\.journal$")


#: the first agreement's field that says which earlier records a tuning resumes from (:func:`always_tune`)
ALWAYS_TUNE_FIELD = ("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE (and the job id: TRITON_DIST_AUTOTUNE_JOB_ID, "
                     "TORCHELASTIC_RUN_ID or SLURM_JOB_ID.SLURM_STEP_ID)")


def always_tune() -> str:
    """This rank's ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE`` and the job id it reads journals by, as text (``off``, ``on,
    job J``): under it an earlier job's journal records are left out of the shared view, so ranks that differ in
    it would plan from different views (:data:`ALWAYS_TUNE_FIELD`; agreed by both tuners)."""
    env = settings.current()
    return f"on, job {env.job_id}" if env.always_tune else "off"


def gather_entries(group: Group, folder: Path, what: str, timeout: float, problem: str | None = None,
                   label: str = "", own_timeout: float | None = None,
                   ) -> tuple[dict[str, list[list[dict[str, Any]]]], str | None]:
    """Every rank's records of every journal of this group in ``folder``, by entry and then by group rank (one
    exchange; the same on every rank): the shared view of a contextual tuning, taken before its first run. Each
    journal is read under its lock and released at once (one locked by a live tuner is skipped; none is created).
    ``problem``: this rank's malformed variable (:func:`~triton_dist_tune.settings.problem`), carried by the
    exchange so that every rank raises it (a :class:`~triton_dist_tune.errors.BadInputError` naming the ranks,
    after ``label``) rather than this rank alone while the others wait for it. ``own_timeout``: this rank's
    timeout, carried too: where the ranks' differ, every rank warns (:func:`warn_timeouts_differ`). So is this
    rank's :func:`always_tune`, which decides the records each rank's view of them keeps: where the ranks' differ,
    every rank raises :class:`~triton_dist_tune.errors.MismatchError` naming it (before, a rank with it off resumed
    an earlier job's failure and launched another config than a rank with it on, and the ranks chose apart). Also
    returns the attempt's name the exchange agreed (group rank 0's draw), for the journals the call opens
    (:attr:`~.journal.Journal.attempt`)."""
    tag, mine = group_tag(group), {}
    bases = set()
    for path in folder.glob(f"*.{tag}.rank{group.rank}*.journal") if folder.is_dir() else []:
        found = _SLOT.match(path.name)
        if found and int(found["rank"]) == group.rank:
            bases.add(found["entry"])
    for entry in sorted(bases):
        journal = Journal(journal_path(folder, entry, group), create=False)
        try:
            mine[entry] = journal.read()
        finally:
            journal.close()
    gathered = group.allgather([os.urandom(6).hex(), problem, mine, own_timeout, always_tune()], what,
                               timeout=timeout)
    _, said_problems, by_rank, timeouts, modes = zip(*gathered, strict=True)
    problems = [f"rank {r}: {p}" for r, p in enumerate(said_problems) if p]
    if problems:
        raise BadInputError(f"{label}: " + "; ".join(problems))
    by_mode = _ranks_by([str(mode) for mode in modes])
    if len(by_mode) > 1:
        raise MismatchError(f"{label}: the ranks of group '{group.title}' differ in {ALWAYS_TUNE_FIELD}: "
                            + _ranks_text(by_mode))
    by_timeout = _ranks_by([f"{t:g} s" if isinstance(t, (int, float)) else "not said" for t in timeouts])
    if own_timeout is not None and len(by_timeout) > 1:
        warn_timeouts_differ(label, f"the ranks of group '{group.title}'", _ranks_text(by_timeout))
    entries = sorted({entry for by_entry in by_rank for entry in by_entry})
    return {entry: [list(by_entry.get(entry, [])) for by_entry in by_rank] for entry in entries}, _attempt_of(gathered)


def _ranks_by(values: list[str]) -> dict[str, list[int]]:
    """Each value of ``values`` (by group rank) -> the ranks that said it."""
    ranks: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        ranks.setdefault(value, []).append(rank)
    return ranks


def _ranks_text(by_value: dict[str, list[int]]) -> str:
    return "; ".join(f"ranks {ranks}: {value}" for value, ranks in by_value.items())


def warn_timeouts_differ(name: str, whose: str, detail: str) -> None:
    """Warn (once per function, group and values) that ranks' timeouts differ (``whose``: ``the ranks of group
    'tp'``, ``the replicas linked by group 'dp'``; ``detail``: which ranks hold each value). Each rank's watchdog and
    waits follow its own, so a config slower than one rank's timeout and faster than another's is journaled ``hung``
    by that rank alone, and every later attempt leaves it out (seen under mpiexec with the variable exported on one
    rank only). Not an error: the outcome is still one for every rank, from the journals they share, and a job may
    give ranks different deadlines on purpose (the fault tests order which watchdog fires first so)."""
    said = f"{name}: {whose} differ in their timeout (timeout=, else TRITON_DIST_AUTOTUNE_TIMEOUT)"
    if (said, detail) in _WARNED:
        return
    _WARNED.add((said, detail))
    log.warning("triton_dist_tune: %s: %s. A config slower than the shortest is journaled as hung by the ranks "
                "that have it, and left out by every later attempt: set one timeout on every rank", said, detail)


#: the timeout warnings given, (what, each rank's value): each once per process
_WARNED: set[tuple[str, str]] = set()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While the body runs on the main thread with SIGTERM's default action, SIGTERM raises ``SystemExit(143)``
    (journaled as an interruption on the way out) instead of ending the process on the spot."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is terminate:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
