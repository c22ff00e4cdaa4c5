"""The crash journal: every step of a tuning, appended to disk as it happens, one JSON object per line.

Each rank keeps its own journal next to the cache entry it is tuning, in its own cache folder
(``<entry>.<group>.rank<r>.journal``, where ``<group>`` is a fingerprint of the group's name and global ranks, and for a
group of one process of that process's global rank, torch.distributed's or else mpi4py's ``COMM_WORLD`` rank, so that
two groups tuning the same entry on one node, one-rank replicas included, never adopt each other's journals). Every
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
(``<entry>.rank<r>.<k>.journal``), so it never mistakes a live job's configs in flight for crashed ones. A lock
held by a dead process is released by the kernel, so the next attempt adopts every unlocked journal of the entry:
the leftovers of every earlier, dead attempt.

On the next attempt the ranks gather their journals and merge them (:func:`merge`, through
:mod:`~triton_dist_tune.faults.recovery`; of several outcomes of a config, the latest): configs whose group result
is known are not measured again; configs that hung past the watchdog or failed on some rank are left out, with an
error that says it comes from an earlier attempt and how to measure it again; configs in flight when an attempt
ended without an error are *suspects*, measured once more, and left out after two such attempts (each counted once
over every rank and replica, by the ``attempt`` the tuning agreed and wrote into its records: :func:`crashed`); an
interrupted attempt (SIGINT, SIGTERM) blames nothing; an attempt that ended inside a config's compile pass blames
nothing either, and the next one runs no compile pass for that config (it would end the same way). Every record
names its attempt (``session``), so that readers know which config each attempt was inside when it ended.

A tuning that ends (decided, or every config failed) removes its journals: nothing of it is replayed later. Only a
tuning cut short (a crash, a hang, a lost rank, a poisoned GPU) leaves journals for the next attempt. With
``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1`` only records of the current job (its restarts) are used.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from ..group.codec import Unreadable, read_json
from ..records import COMPILE_PASS, Outcome, finite_number

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking, one job per cache folder
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("triton_dist_tune")

#: states written when the group agreed on a config's outcome
FINAL = ("measured", "stopped", "failed")
#: states one rank writes about itself, before the group knows
LOCAL = ("started", "local_failure", "hung", "interrupted")
#: how many journals of one entry and rank may exist side by side (jobs tuning it at the same moment)
MAX_SLOTS = 16
#: the ``stage`` of the records a search writes while it screens (:attr:`Journal.stage`), kept apart by :func:`merge`
SCREENING = "screening"


class Journal:
    """Append-only record of one rank's tuning of one cache entry.

    The files are opened and locked on first use (:meth:`read` or :meth:`append`) and released by :meth:`remove`
    (after the decision is in the cache) or :meth:`close` (when the tuning ends with an error: the records stay
    for the next attempt). Writing is best effort: a journal that cannot be written is a warning, not a failure.
    With ``create=False`` it only reads the journals that exist (nothing is created).
    """

    def __init__(self, path: Path, identity: dict[str, Any] | None = None, create: bool = True) -> None:
        #: where this rank's records go: ``path`` itself, or a free slot next to it when another job holds it
        self.path = path
        #: written into every record: the job (``job``), the group's name (``group``) and global ranks (``ranks``)
        self.identity = dict(identity or {})
        self._base = path
        #: names this attempt in every record, so that readers know where one attempt's records end
        self.session = os.urandom(6).hex()
        self._torn = False  # a short write left part of a line: the next record starts a line of its own
        self._lost = 0  # records lost since the last one written (the first loss is said, the others not)
        self._held: list[tuple[Path, int]] = []  # (path, locked fd) of every journal adopted, the first written
        self._warned: set[tuple[Path, int]] = set()  # the damaged lines a read warned of: warned once
        self._broken = False
        self._create = create  # False: only read what exists (a reader of other entries' journals)
        #: written into every record while set: :data:`SCREENING` while a search screens (see :func:`merge`)
        self.stage = ""
        #: written into every record once set: the attempt as the whole tuning agreed it (every rank of the group,
        #: and of every replica, writes the same; :mod:`~triton_dist_tune.faults.recovery`), so that ends inside a
        #: config count once per attempt over ranks and replicas (:func:`crashed`)
        self.attempt: str | None = None

    # -- files ---------------------------------------------------------------------------------------------------

    def _slot(self, k: int) -> Path:
        if k == 0:
            return self._base
        stem = self._base.name.removesuffix(".journal")
        return self._base.with_name(f"{stem}.{k}.journal")

    def _lock(self, path: Path, create: bool) -> int | None:
        """An fd of ``path`` locked by this process, or None when it is missing (and not created) or locked."""
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), 0o644)
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
                return fd
            os.close(fd)
            if not create:
                return None

    def _open(self) -> bool:
        """Adopt every unlocked journal of this entry and rank (creating one if need be); False if impossible."""
        if self._held:
            return True
        if self._broken:
            return False
        try:
            self._base.parent.mkdir(parents=True, exist_ok=True)
            for k in range(MAX_SLOTS):
                path = self._slot(k)
                fd = self._lock(path, create=False)
                if fd is not None:
                    self._held.append((path, fd))
            if not self._held and not self._create:
                return False
            if not self._held:
                for k in range(MAX_SLOTS):
                    fd = self._lock(self._slot(k), create=True)
                    if fd is not None:
                        self._held.append((self._slot(k), fd))
                        break
            if not self._held:
                raise OSError(f"all {MAX_SLOTS} journal slots are held by other processes")
            self.path, fd = self._held[0]
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.write(fd, b"\n")  # end a torn last line, so that the next record starts a line of its own
        except OSError as exc:
            self.close()
            self._broken = True
            log.warning("triton_dist_tune: cannot use the journal %s (%s): this tuning will not be resumable",
                        self._base, exc)
            return False
        if len(self._held) > 1 or self.path != self._base:
            log.info("triton_dist_tune: journal %s (adopted %s)", self.path, [str(p) for p, _ in self._held[1:]])
        return True

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
        if self.stage:
            record["stage"] = self.stage
        if self.attempt:
            record["attempt"] = self.attempt
        line = (json.dumps(record, allow_nan=False, default=str) + "\n").encode()
        if not self._open():
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

    def record(self, outcome: Outcome) -> None:
        """Record the group's final outcome of one config (measured, stopped or failed: a failure during any phase,
        refinement included, is the config's outcome, so that no later attempt measures it again)."""
        fields = outcome.to_json()
        fields.pop("index")
        fields.pop("state")
        self.append(outcome.index, outcome.state, durable=outcome.state == "failed", **fields)

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

    def remove(self) -> None:
        """Delete the adopted journals (once the decision is in the cache) and release them."""
        for path, _ in self._held:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("triton_dist_tune: cannot remove journal %s (%s)", path, exc)
        self.close()

    def __del__(self) -> None:
        if self._held:  # a journal dropped without close() must not keep its lock for the process's lifetime
            self.close()

    def close(self) -> None:
        """Release the journals, keeping their records for the next attempt."""
        held, self._held = self._held, []
        for _, fd in held:
            try:
                os.close(fd)  # closing the last fd of the file releases the flock
            except OSError:
                pass


def parse_records(data: bytes, path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The well-formed records of a journal's bytes (each naming ``path`` in ``file``), and the numbers of the
    damaged lines skipped (a torn last line, garbage, an invalid record)."""
    records, damaged = [], []
    for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        try:  # checked to the limits of what is sent: the ranks exchange their records
            record = read_json(line)
        except Unreadable:
            record = None
        if well_formed(record):
            records.append({**record, "file": str(path)})
        elif line.strip():
            damaged.append(number)
    return records, damaged


def well_formed(record: Any) -> bool:
    """Whether ``record`` is a usable journal record (a measured one needs a finite, non-negative time)."""
    if not isinstance(record, dict) or type(record.get("index")) is not int:
        return False
    if record.get("state") not in FINAL + LOCAL or not isinstance(record.get("config"), str):
        return False
    if record["state"] in ("measured", "stopped"):
        time = record.get("time")
        return finite_number(time) and time >= 0
    return True


def _samples(record: dict[str, Any]) -> int:
    """How many group samples a timed record holds (its ``round_times``)."""
    return len(record["round_times"]) if isinstance(record.get("round_times"), list) else 0


def _chronological(sessions: dict[Any, list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """One rank's attempts (its records grouped by ``session``) in the order they began: by the wall time of each
    one's first record where every attempt has one (a later attempt appends to the first journal it adopts, which
    may hold an attempt older than another file's), else in the order read; each attempt's records in the order
    written."""
    attempts = list(sessions.values())
    starts = [a[0].get("at") for a in attempts]
    if all(finite_number(t) for t in starts):
        return [a for _, a in sorted(zip(starts, attempts, strict=True), key=lambda pair: pair[0])]
    return attempts


def _latest(by_rank: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """The latest of a config's records, each rank's in the order written: the last one of the rank that holds
    the most (every rank journals the same group outcomes, so a rank holding fewer lost some: a machine's crash
    before they reached its disk), of equals the lowest rank's."""
    rank = max(by_rank, key=lambda r: (len(by_rank[r]), -r))
    return by_rank[rank][-1]


def merge(per_rank: list[list[dict[str, Any]]] | dict[int, list[dict[str, Any]]], descriptions: list[str],
          only_job: str | None | bool = False, kept: str | None = None) -> dict[int, dict[str, Any]]:
    """Merge the journals of every rank (``per_rank``, by group rank: a list's position, or a dict's key where
    ranks are absent) into one outcome per config index, the same on every rank that merges the same records.

    With ``only_job`` (a job id, or None for "no job id known"), records of other jobs are ignored (and with None,
    every record: ``ALWAYS_TUNE`` outside a launcher that names its job). Records whose description does not match
    the current space are ignored; configs no rank started are absent. An outcome is, by evidence:

    - ``failed`` when some rank recorded that it failed or hung in it (a failure recorded after a ``measured``
      one wins: the config failed in a later round), with "failed on rank r: <error>" / "hung on rank r: ...";
    - ``failed`` when ranks were inside it at the end of two attempts that ended without an error (``kill -9``,
      the OOM killer, a lost node); after one such attempt it is a ``suspect``: measured again once (the other
      ranks' lost-peer errors in it are then taken for consequences: a peer that vanished inside a collective);
    - the group's ``measured`` / ``stopped`` record otherwise; of several, the latest: attempts in the order they
      began, each one's records in the order written (a race journals a config that left it again at its end, of
      the race's final statistic; a later attempt races again a config an earlier one left ``measured``, and its
      record, ``stopped`` or not, whatever its sample count, is the evidence now). A search's screening records
      (``stage``: :data:`SCREENING`) are kept apart: the one with the most samples (a config sampled again is
      journaled with every sample it took; of equals the first, as a sample taken again is journaled alone before
      the record of them all), carried in ``screening`` beside a finalist's race record, and the outcome where
      the config has no other. An ``interrupted`` attempt (SIGINT, SIGTERM) blames nothing: the config it was
      inside is measured again.

    Evidence belongs to the config, not to the kept set: the journals of an entry are shared by every kept set of
    its key, and a failure, a hang or a crash recorded under any kept set counts. A time, though, ranks a config
    only against the configs it raced: with ``kept`` (the fingerprint of this tuning's kept set), a ``measured`` or
    ``stopped`` record written under another kept set (its ``kept`` field differs) is ignored, and the config is
    measured again.

    An attempt whose last record on some rank is in a config's compile pass (its ``started`` record there, or the
    ``interrupted`` one of a hang or of another rank's failure there: the record's ``phase``) ended in that pass,
    which is best-effort: it blames nothing (no suspect), and the config's outcome gets ``skip_pass`` (true), so
    that the next attempt warms it up without a compile pass. Without another outcome, that is an
    ``interrupted`` one (measured as if new).

    Every rank gathers the same records and merges them in the same order (by group rank, then as above), so every
    rank takes the same outcome of each config.
    """
    final: dict[int, dict[str, Any]] = {}  # index -> its first failure
    timed: dict[int, dict[int, list[dict[str, Any]]]] = {}  # index -> rank -> its timed records, in order
    screened: dict[int, dict[str, Any]] = {}  # index -> its screening record with the most samples
    local: dict[int, dict[int, dict[str, dict[str, Any]]]] = {}  # index -> rank -> state -> last record
    crashes: dict[int, dict[int, int]] = {}  # index -> rank -> attempts that ended inside it
    launches: dict[int, set[str]] = {}  # index -> the agreed attempts (``attempt``) that ended inside it
    passes: dict[int, set[int]] = {}  # index -> ranks with an attempt that ended in its compile pass
    for rank, records in sorted(per_rank.items()) if isinstance(per_rank, dict) else enumerate(per_rank):
        usable = [r for r in records if well_formed(r) and 0 <= r["index"] < len(descriptions)
                  and r["config"] == descriptions[r["index"]]
                  and (only_job is False or (only_job is not None and r.get("job") == only_job))]
        sessions: dict[Any, list[dict[str, Any]]] = {}
        for record in usable:
            sessions.setdefault(record.get("session"), []).append(record)
        for attempt in _chronological(sessions):
            for record in attempt:
                i, state = record["index"], record["state"]
                if state in ("measured", "stopped") and kept is not None and record.get("kept", kept) != kept:
                    continue  # timed against another kept set's configs: measured again
                if state == "failed":
                    final.setdefault(i, record)  # a failure outweighs any time, earlier or later
                elif state in FINAL and record.get("stage") == SCREENING:
                    if i not in screened or _samples(record) > _samples(screened[i]):
                        screened[i] = record
                elif state in FINAL:
                    timed.setdefault(i, {}).setdefault(rank, []).append(record)
                elif state in ("local_failure", "hung"):
                    local.setdefault(i, {}).setdefault(rank, {})[state] = record
            last = attempt[-1]
            if last.get("phase") == COMPILE_PASS:  # the attempt ended in this config's compile pass: no evidence
                passes.setdefault(last["index"], set()).add(rank)
            elif last["state"] == "started":  # the attempt ended inside this config, with no error recorded
                by_rank = crashes.setdefault(last["index"], {})
                by_rank[rank] = by_rank.get(rank, 0) + 1
                if isinstance(last.get("attempt"), str):
                    launches.setdefault(last["index"], set()).add(last["attempt"])
    outcomes: dict[int, dict[str, Any]] = {}
    for i in sorted({*final, *timed, *screened}):
        if i in final:
            record = final[i]
            outcomes[i] = {**record, "error": f"in an earlier attempt: {record.get('error', '')}{AGAIN}"}
        elif i in timed:
            outcomes[i] = _latest(timed[i]) if i not in screened else {**_latest(timed[i]), "screening": screened[i]}
        else:
            outcomes[i] = screened[i]
    for i, by_rank in sorted(local.items()):
        if outcomes.get(i, {}).get("state") == "failed":
            continue
        # a rank that died inside it leaves the others failing with a lost peer: no evidence then
        parts = [f"failed on rank {r}: {states['local_failure'].get('error', '')}"
                 for r, states in sorted(by_rank.items()) if "local_failure" in states
                 and not (i in crashes and LOST_PEER.search(states["local_failure"].get("error", "")))]
        parts += [f"hung on rank {r}: {states['hung'].get('error', '')}" for r, states in sorted(by_rank.items())
                  if "hung" in states and "local_failure" not in states]  # a hang stays a hang
        if not parts:
            continue
        error = "in an earlier attempt, " + "; ".join(p.rstrip(": ") for p in parts) + AGAIN
        outcomes[i] = {"index": i, "state": "failed", "error": error, "config": descriptions[i]}
    for i, by_rank in sorted(crashes.items()):
        if outcomes.get(i, {}).get("state") != "failed":
            outcomes[i] = crashed(i, descriptions[i], f"ranks {sorted(by_rank)}", launches.get(i, set()),
                                  max(by_rank.values()))
    for i, ranks in sorted(passes.items()):
        ended = {"index": i, "state": "interrupted", "config": descriptions[i],
                 "error": f"an earlier attempt ended in its {COMPILE_PASS} on rank(s) {sorted(ranks)}, blaming "
                          f"nothing: warmed up without a {COMPILE_PASS}"}
        outcomes[i] = {**outcomes.get(i, ended), "skip_pass": True}
    return outcomes


def crashed(index: int, config: str, who: str, attempts: set[str], most: int = 0) -> dict[str, Any]:
    """A config that attempts ended inside without an error: a suspect after one, failed after two. They count as
    the distinct ``attempts`` named by the records (:attr:`Journal.attempt`: one attempt that ended inside it on
    several ranks or replicas counts once) or ``most``, the most ends one rank's journal holds (records that name
    no attempt), whichever is more. The outcome carries ``attempts``, so that
    :func:`~triton_dist_tune.faults.recovery.across` can count them over the replicas too."""
    times = max(most, len(attempts))
    what = (f"{who} were inside this config when {times} earlier attempt(s) ended without an error (killed, out of "
            "memory, or a lost node)")
    if times >= 2:
        error, state = f"crashed: {what}{AGAIN}", "failed"
    else:
        error, state = f"suspect: {what}; measured once more", "suspect"
    return {"index": index, "state": state, "error": error, "config": config, "attempts": sorted(attempts)}


#: errors of a collective whose peer process went away (a consequence of another rank's crash, not evidence)
LOST_PEER = re.compile(r"by peer|Connection (?:reset|refused|closed)|Broken pipe|peer (?:process )?(?:died|exited)",
                       re.IGNORECASE)
#: what every "left out" message ends with: how to measure the config again
AGAIN = "; to measure it again: `triton-dist-tune clear` or TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1"
