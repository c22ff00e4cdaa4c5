"""The crash journal: every step of a tuning, appended to disk as it happens, one JSON object per line.

Each rank keeps its own journal next to the cache entry it is tuning, in its own cache folder
(``<entry>.<group>.rank<r>.journal``, where ``<group>`` is a fingerprint of the group's name and global ranks, and for a
group of one process of that process's global rank, torch.distributed's or else mpi4py's ``COMM_WORLD`` rank, so that
two groups tuning the same entry on one node, one-rank replicas included, never adopt each other's journals). An
``autotune`` record also names the kept set and timing mode it was timed under (``kept``) and the entry its decision
will be written as (``decision``: the file is named after the steady, unpruned one). Every
record carries the job's identity (``TRITON_DIST_AUTOTUNE_JOB_ID``, torchrun's run id or Slurm's job id) and attempt
(:attr:`Journal.attempt`), the group's name and global ranks and the wall time it was written (``at``, unix
seconds). A record is one line written with a single ``write``, so a record is either in the file whole or (after a
power loss or a full disk) a torn last line, which readers skip and the next writer ends with a newline before
appending. A write is in the operating system's hands when :meth:`Journal.append` returns: it survives the process's
crash, whatever ends it. Surviving the machine's crash (a power loss, a GPU fault that takes the host down) takes an
fsync, which is done for the records that matter there (``durable``): the ``started`` record of a config's warm-up
(where its kernels first meet the device), every failure, hang and interruption, and a failed outcome.
The fsync of one writes every record before it too, so each outcome is on disk once the next config's warm-up starts,
and a machine crash loses at most the records written since the last warm-up began: outcomes, which are measured again,
and the ``started`` records of a compile pass (which launches no kernel), a capture or a sample. (The README's MoE
campaign fsynced 15,600-16,000 records, one before every warm-up, capture and sample; on one H200 host it took 67.2 /
65.8 s with none fsynced and 69.5 / 70.7 s with all: ``benchmarks/results/session_h200_15``. With a warm-up's, a compile
pass's and every outcome fsynced, about 7,500 per campaign, the rank spent 8.0-9.0 s in the journal's ``append``,
sampled on another host: ``benchmarks/results/session_h200_16``.)

While a process tunes an entry it holds an exclusive ``flock`` on its journal file. A second job tuning the same
entry into the same folder at the same moment finds the file locked and uses a slot of its own
(``<entry>.<group>.rank<r>.<k>.journal``), so it never mistakes a live job's configs in flight for crashed ones. A lock
held by a dead process is released by the kernel, so the next attempt adopts every unlocked journal of the entry:
the leftovers of every earlier, dead attempt.

On the next attempt the ranks gather their journals and merge them (:func:`~.evidence.merge`, through
:mod:`~triton_dist_tune.faults.recovery`; of several outcomes of a config, the latest): configs whose group result
is known are not measured again; configs that hung past the watchdog or failed on some rank are left out, with an
error that says it comes from an earlier attempt and how to measure it again; configs in flight when an attempt
ended without an error are *suspects*, measured once more, and left out after two such attempts (each counted once
over every rank and replica, by the ``attempt`` the tuning agreed and wrote into its records:
:func:`~.evidence.crashed`); an interrupted attempt (SIGINT, SIGTERM) blames nothing; an attempt that ended inside a
config's compile pass blames nothing either, and the next one runs no compile pass for that config (it would end the
same way). Every record names its attempt (``session``), so that readers know which config each attempt was inside
when it ended.

A cache folder this process cannot write (a read-only mount, a shared folder of another user) is still read: its
journals are opened read-only (their ``flock`` needs no write access) and their records merged as ever, so a
resumed attempt still leaves out the configs that hung or failed and adopts the times measured; nothing new is
journaled, said once per folder. Before, the journals were opened for appending, which failed, so they were not
read at all and the next attempt measured the culprit again (and hung again: ``tests/test_read_only_cache.py``).

A tuning that ends (decided, or every config failed) removes its records, those of its kept set (another kept set's
records are that set's cut attempt, and stay): nothing of it is replayed later. Only a tuning cut short (a crash, a
hang, a lost rank, a poisoned GPU) leaves records for the next attempt. A call served from the cache deletes only
this job's (or this process's) records of the entry: another job's unlocked journal may be that job's between two
attempts. With ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1`` only records of the current job (its restarts) are used.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..records import Outcome
from .journal_lines import FINAL, LOCAL, parse_records, removed_lines, well_formed

__all__ = ["FINAL", "LOCAL", "MAX_SLOTS", "SCREENING", "Journal", "parse_records", "well_formed"]

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking, one job per cache folder
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("triton_dist_tune")

#: how many journals of one entry and rank may exist side by side (jobs tuning it at the same moment)
MAX_SLOTS = 16
#: what an ``open`` of a file for writing fails with where the file or folder may be read but not written
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
#: the folders whose journals this process could not write, each said once (:meth:`Journal.append`)
_UNWRITABLE: set[Path] = set()
#: the attempts (``session``) of this process's journals: a cache hit's cleanup deletes their records
#: (:meth:`Journal.remove` with ``own``)
_SESSIONS: set[str] = set()
#: the ``stage`` of the records a search writes while it screens (:attr:`Journal.stage`), kept apart by
#: :func:`~.evidence.merge`
SCREENING = "screening"


class Journal:
    """Append-only record of one rank's tuning of one cache entry.

    The files are opened and locked on first use (:meth:`read` or :meth:`append`) and released by :meth:`remove`
    (after the decision is in the cache) or :meth:`close` (when the tuning ends with an error: the records stay
    for the next attempt). Writing is best effort: a journal that cannot be written is a warning, not a failure;
    one that can be read but not written (a read-only folder) is still read. With ``create=False`` it only reads
    the journals that exist (nothing is created).
    """

    def __init__(self, path: Path, identity: dict[str, Any] | None = None, create: bool = True) -> None:
        #: where this rank's records go: ``path`` itself, or a free slot next to it when another job holds it
        self.path = path
        #: written into every record: the job (``job``), the group's name (``group``) and global ranks (``ranks``)
        self.identity = dict(identity or {})
        self._base = path
        #: names this attempt in every record, so that readers know where one attempt's records end
        self.session = os.urandom(6).hex()
        _SESSIONS.add(self.session)
        self._torn = False  # a short write left part of a line: the next record starts a line of its own
        self._lost = 0  # records lost since the last one written (the first loss is said, the others not)
        self._held: list[tuple[Path, int]] = []  # (path, locked fd) of every journal adopted, the first written
        self._read_only: set[int] = set()  # the fds of ``_held`` opened read-only (the file cannot be written)
        self._unwritable = ""  # why no journal here can be written (a read-only folder), or "" when one can
        self._warned: set[tuple[Path, int]] = set()  # the damaged lines a read warned of: warned once
        self._broken = False
        self._create = create  # False: only read what exists (a reader of other entries' journals)
        #: written into every record while set: :data:`SCREENING` while a search screens (see :func:`~.evidence.merge`)
        self.stage = ""
        #: written into every record once the tuning's clock is chosen (``graph`` or ``eager``): a resumed attempt
        #: times as the attempts whose times it reads did (:func:`~triton_dist_tune.measure.graphs.journaled_clock`)
        self.clock = ""
        #: written into every record once set: the attempt as the whole tuning agreed it (every rank of the group,
        #: and of every replica, writes the same; :mod:`~triton_dist_tune.faults.recovery`), so that ends inside a
        #: config count once per attempt over ranks and replicas (:func:`~.evidence.crashed`)
        self.attempt: str | None = None

    # -- files ---------------------------------------------------------------------------------------------------

    def _slot(self, k: int) -> Path:
        if k == 0:
            return self._base
        stem = self._base.name.removesuffix(".journal")
        return self._base.with_name(f"{stem}.{k}.journal")

    def _lock(self, path: Path, create: bool) -> int | None:
        """An fd of ``path`` locked by this process, or None when it is missing (and not created) or locked. An
        existing file this process may read but not write is opened read-only (its fd in :attr:`_read_only`)."""
        while True:
            read_only = False
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if create or exc.errno not in _READ_ONLY:
                    raise
                try:
                    fd, read_only = os.open(path, os.O_RDONLY), True
                except FileNotFoundError:
                    return None
            if fcntl is None:
                return fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:  # the holder may have removed the file between our open and our lock: then try again
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                if read_only:
                    self._read_only.add(fd)
                return fd
            os.close(fd)
            if not create:
                return None

    def _open(self) -> bool:
        """Adopt every unlocked journal of this entry and rank (creating one if need be); False if impossible."""
        if self._held or self._unwritable:
            return True
        if self._broken or (not self._create and not self._base.parent.is_dir()):
            return False
        try:
            self._make_folder()
            for k in range(MAX_SLOTS):
                path = self._slot(k)
                fd = self._lock(path, create=False)
                if fd is not None:
                    self._held.append((path, fd))
            if not self._held and not self._create:
                return False
            writable = [item for item in self._held if item[1] not in self._read_only]
            if self._create and not writable and not self._unwritable:
                writable = self._new_slot()
            if not self._held and not self._unwritable:
                raise OSError(f"all {MAX_SLOTS} journal slots are held by other processes")
            if not self._held:
                return True  # nothing to read, nowhere to write: records are dropped (:meth:`append` says so)
            self._held.sort(key=lambda item: item not in writable)  # the one written first (stable: slots' order)
            self.path, fd = self._held[0]
            size = os.fstat(fd).st_size
            # a torn last line: the next record starts with a newline (:meth:`append`). Not written here: on a full
            # disk that write failed and the journals were given up, unread and never removed (a finished tuning
            # left an earlier attempt's journal behind, read by the next job as a tuning cut short)
            self._torn = bool(size) and os.pread(fd, 1, size - 1) != b"\n"
        except OSError as exc:
            self.close()
            self._broken = True
            if self._create:  # (a reader of what exists has nothing to resume)
                log.warning("triton_dist_tune: cannot use the journal %s (%s): this tuning will not be resumable",
                            self._base, exc)
            return False
        if len(self._held) > 1 or self.path != self._base:
            log.info("triton_dist_tune: journal %s (adopted %s)", self.path, [str(p) for p, _ in self._held[1:]])
        return True

    def _make_folder(self) -> None:
        """Make the journal's folder where it is missing; one that cannot be made is noted in :attr:`_unwritable`
        (a read-only folder above it: there is nothing there to read either)."""
        try:
            self._base.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self._create or exc.errno not in _READ_ONLY:
                raise
            self._unwritable = f"{type(exc).__name__}: {exc.strerror or exc}"

    def _new_slot(self) -> list[tuple[Path, int]]:
        """Create and lock a journal in the first free slot (in :attr:`_held`, and returned as a list of it), or
        note in :attr:`_unwritable` that the folder cannot be written (and return [])."""
        for k in range(MAX_SLOTS):
            try:
                fd = self._lock(self._slot(k), create=True)
            except OSError as exc:
                if exc.errno not in _READ_ONLY:
                    raise
                if self._slot(k).exists():  # a file this process may not write (adopted read-only): the next slot
                    continue
                self._unwritable = f"{type(exc).__name__}: {exc.strerror or exc}"
                return []
            if fd is not None:
                self._held.append((self._slot(k), fd))
                return [self._held[-1]]
        return []

    def adopt(self) -> bool:
        """Open and lock this entry's journals now (the earlier attempts' files included), so that
        :meth:`remove` deletes them even when nothing is appended; False when impossible."""
        return self._open()

    # -- records -------------------------------------------------------------------------------------------------

    def append(self, index: int, state: str, *, durable: bool = True, **fields: Any) -> None:
        """Record that config ``index`` reached ``state``; written whole before returning, and fsynced when
        ``durable`` (see the module docstring)."""
        record = {"index": index, "state": state, **fields, **self.identity, "session": self.session,
                  "at": round(time.time(), 3)}
        for name in ("stage", "clock", "attempt"):
            record.update({name: getattr(self, name)} if getattr(self, name) else {})
        line = (json.dumps(record, allow_nan=False, default=str) + "\n").encode()
        if not self._open():
            return
        if self._unwritable or not self._held or self._first_read_only:
            self._say_unwritable()
            return
        fd = self._held[0][1]
        if self._torn:
            line = b"\n" + line
        written = 0
        try:
            while written < len(line):  # a short write (a full disk, a file size limit) is retried, then reported
                n = os.write(fd, line[written:])
                if n <= 0:
                    raise OSError("the write wrote nothing")
                written += n
            if durable:
                os.fsync(fd)
            self._torn = False
            self._lost = 0
        except OSError as exc:
            self._torn = self._torn or written > 0
            self._lost += 1
            if self._lost == 1:  # said once until a record is written again: a full disk fails every record
                log.warning("triton_dist_tune: cannot write the journal %s: %d of %d bytes of a record written (%s; "
                            "is the disk full?): this record is lost, and so are the next ones until a write "
                            "succeeds (not said again); the next one starts a line of its own",
                            self.path, written, len(line), exc)

    @property
    def _first_read_only(self) -> bool:
        """Whether the journal written first (``_held[0]``) was opened read-only: no record can be written."""
        return bool(self._held) and self._held[0][1] in self._read_only

    @property
    def unwritten(self) -> str:
        """Why this journal's records are not reaching its file ("" while they are): a cache folder or journal this
        process cannot write, a journal it could not open, or a last write that failed. The watchdog's last words
        say it (:mod:`~triton_dist_tune.measure.guarding`): before, a hang in a read-only folder was said to be
        "recorded as hung in the journal", which it was not (``tests/test_read_only_cache.py``)."""
        if self._unwritable or self._first_read_only:
            why = self._unwritable or "a read-only journal"
            return f"its cache folder {self._base.parent} cannot be written: {why}"
        if self._broken:
            return f"the journal in {self._base.parent} could not be opened"
        if self._lost:
            return f"the journal's last write in {self._base.parent} failed"
        return ""

    def _say_unwritable(self) -> None:
        """Warn, once per folder in this process, that nothing can be journaled there (the records there are read)."""
        folder = self._base.parent
        if folder in _UNWRITABLE:
            return
        _UNWRITABLE.add(folder)
        why = self._unwritable or "the journal is read-only"
        log.warning("triton_dist_tune: cannot journal into %s (%s): the tunings there resume from the records "
                    "already there (which stay), but write none, so a later attempt cannot resume from what they "
                    "measure; said once for this folder", folder, why)

    def record(self, outcome: Outcome, **extra: Any) -> None:
        """Record the group's final outcome of one config (measured, stopped or failed: a failure during any phase,
        refinement included, is the config's outcome, so that no later attempt measures it again); ``extra``: more
        fields of the record (``share``: a sharded rank's whole measurement of the config)."""
        fields = outcome.to_json()
        fields.pop("index")
        fields.pop("state")
        self.append(outcome.index, outcome.state, durable=outcome.state == "failed", **fields, **extra)

    def read(self) -> list[dict[str, Any]]:
        """Every well-formed record of every adopted journal, oldest first (damaged lines, and lines nested deeper
        than the tuner's exchanges carry, are skipped with a warning); each record names its file in ``file``."""
        if not self._open():
            return []
        records = []
        for path, fd in self._held:
            try:
                data = os.pread(fd, os.fstat(fd).st_size, 0)
            except OSError as exc:
                log.warning("triton_dist_tune: cannot read journal %s (%s); ignoring it", path, exc)
                continue
            found, damaged = parse_records(data, path)
            records += found
            for number in sorted({*damaged} - {n for p, n in self._warned if p == path}):  # once each
                self._warned.add((path, number))
                log.warning("triton_dist_tune: skipping damaged line %d of journal %s", number, path)
        return records

    def interrupt_started(self, reason: str) -> None:
        """Where this attempt's last record here is a config's ``started`` one (the phase in flight), journal that
        config ``interrupted``, in the same phase (a compile pass stays one: best-effort, skipped next time)."""
        mine = [r for r in self.read() if r.get("session") == self.session]
        if mine and mine[-1]["state"] == "started":
            last = mine[-1]
            phase = {"phase": last["phase"]} if isinstance(last.get("phase"), str) else {}
            self.append(last["index"], "interrupted", config=last["config"], error=reason, **phase)

    def remove(self, kept: str | None = None, own: bool = False) -> None:
        """Delete the adopted journals (once the decision is in the cache; adopted now if need be: those no other
        process holds) and release them. ``kept``: delete only the records written under that kept set (see
        :func:`~.evidence.merge`; a record that names none counts as this set's): another kept set's records are
        that set's cut attempt, the evidence its next tuning resumes from, and stay; a journal left empty goes.
        ``own`` (a cache hit's cleanup): delete only the records of this job (its ``job``, where it has one) or of
        this process's attempts: another job's unlocked journal may be that job's between two attempts (a restart
        resumes from it), and stays (:func:`~.journal_lines.removed_lines`)."""
        if not self._held and not self._broken:
            self._open()
        for path, fd in self._held:
            _remove_lines(path, fd, fd in self._read_only, kept, self.identity.get("job"), _SESSIONS if own else None)
        self.close()

    def __del__(self) -> None:
        if self._held:  # a journal dropped without close() must not keep its lock for the process's lifetime
            self.close()

    def close(self) -> None:
        """Release the journals, keeping their records for the next attempt."""
        held, self._held = self._held, []
        self._read_only.clear()
        self._unwritable = ""  # (looked at again by the next use)
        for _, fd in held:
            try:
                os.close(fd)  # closing the last fd of the file releases the flock
            except OSError:
                pass


def _remove_lines(path: Path, fd: int, read_only: bool, kept: str | None, job: str | None,
                  sessions: set[str] | None) -> None:
    """Delete what :meth:`Journal.remove` deletes of one journal it holds locked (``fd``): the file, or its lines
    that :func:`~.journal_lines.removed_lines` deletes (the others written back in place)."""
    try:
        whole = kept is None and sessions is None
        data = b"" if whole else os.pread(fd, os.fstat(fd).st_size, 0)
        others, removes = (b"", True) if whole else removed_lines(data, kept, job, sessions)
        if not removes:
            return
        if read_only:  # not this process's to change; unlinked where its folder allows
            if not others:
                _unlink_quietly(path)
        elif others:
            os.ftruncate(fd, 0)  # in place, under the lock: a file renamed over it would not be locked
            os.write(fd, others)  # (O_APPEND: at the new end, the start)
            os.fsync(fd)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("triton_dist_tune: cannot remove journal %s (%s)", path, exc)


def _unlink_quietly(path: Path) -> None:
    """Remove ``path`` where its folder allows (a journal opened read-only: the folder's warning said it may stay)."""
    try:
        path.unlink()
    except OSError as exc:
        if exc.errno not in (*_READ_ONLY, errno.ENOENT):
            log.warning("triton_dist_tune: cannot remove journal %s (%s)", path, exc)
