"""Rotation of the rank log files: split each file by job and drop all but the last jobs' records."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..records import finite_number
from .files import flock_within
from .identity import job_name

_HEADER = re.compile(r"^==== triton-dist-tune job (\S+) .*? started (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ====|"
                     r"^==== triton-dist-tune job (\S+) ")
#: the longest a process waits for a lock of its log folder (another's rotation) before it goes on without it
LOCK_WAIT_S = 5.0


def _header(line: str) -> tuple[str, float | None, bool] | None:
    """(job, start time or None, whether that time is precise) of a header line, None for any other line. A JSON
    header's time is the exact one; a readable header's is to the second (jobs started within one second tie)."""
    found = _HEADER.match(line)
    if found:
        if found.group(1) is None:
            return found.group(3), None, False
        try:
            return found.group(1), time.mktime(time.strptime(found.group(2), "%Y-%m-%d %H:%M:%S")), False
        except (ValueError, OverflowError):
            return found.group(1), None, False
    if line.startswith("{") and '"header": true' in line:
        try:
            data = json.loads(line)
            started = data.get("time")
            return str(data["job"]), float(started) if finite_number(started) else None, True
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
    return None


def _record_job(line: str) -> str | None:
    """The job a JSON record line names, None when it is not one."""
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
        return str(data["job"]) if isinstance(data, dict) and "job" in data else None
    except (ValueError, RecursionError):
        return None


@dataclass
class _Starts:
    """When each job started, by its headers in every file: the earliest precise (JSON) time where one was read,
    else the earliest readable one (to the second); an unknown time (lines before any header) sorts first."""

    precise: dict[str | None, float] = field(default_factory=dict)
    rough: dict[str | None, float] = field(default_factory=dict)

    def learn(self, job: str | None, started: float | None, precise: bool) -> None:
        times = self.precise if precise else self.rough
        times[job] = min(times.get(job, float("inf")), started if started is not None else float("-inf"))

    def __contains__(self, job: object) -> bool:
        return job in self.precise or job in self.rough

    def of(self, job: str | None) -> float:
        return self.precise[job] if job in self.precise else self.rough[job]

    def jobs(self) -> set[str | None]:
        return {*self.precise, *self.rough}


@dataclass
class _LogFile:
    """A rank's log file, split by job: (job or None for lines before the first header, its lines)."""

    path: Path
    segments: list[tuple[str | None, list[str]]]

    @classmethod
    def read(cls, path: Path, starts: _Starts) -> _LogFile:
        """The file's segments; ``starts`` learns each job's header times."""
        segments: list[tuple[str | None, list[str]]] = [(None, [])]
        jsonl = path.suffix == ".jsonl"
        for line in path.read_text(errors="replace").splitlines(keepends=True):
            header = _header(line)
            if header is not None:
                segments.append((header[0], []))
                starts.learn(*header)
            elif jsonl:  # a JSON record names its job: jobs that ran at once interleave their records
                own = _record_job(line)
                if own is not None and own != segments[-1][0] and own in starts:
                    segments.append((own, []))
            segments[-1][1].append(line)
        segments = [(job, lines) for job, lines in segments if lines]
        if any(job is None for job, _ in segments):
            starts.learn(None, None, True)
        return cls(path, segments)

    @property
    def jobs(self) -> set[str | None]:
        return {job for job, _ in self.segments}

    def rewrite(self, drop: set[str | None]) -> None:
        """Write the file again without the records of ``drop`` (through a temporary file of its own), or remove it
        when nothing is left."""
        kept = "".join(line for job, lines in self.segments if job not in drop for line in lines)
        if not kept:
            self.path.unlink(missing_ok=True)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent)
        try:
            os.fchmod(fd, stat.S_IMODE(self.path.stat().st_mode))  # as the file was (mkstemp makes 0600)
            with os.fdopen(fd, "w") as f:
                f.write(kept)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


@contextlib.contextmanager
def _rotation_lock(folder: Path) -> Iterator[bool]:
    """Hold the folder's rotation lock (an exclusive ``flock`` on the folder itself: no file of its own), waiting at
    most :data:`LOCK_WAIT_S`; yields whether it is held (if not, the caller goes on without rotating: a process
    that stops while rotating must not stop every job that starts later)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        yield flock_within(fd, fcntl.LOCK_EX, time.monotonic() + LOCK_WAIT_S)
    finally:
        os.close(fd)  # releases the lock


def rotate(folder: Path, keep: int, current: str | None = None) -> list[str | None]:
    """Drop from every rank log file in ``folder`` the records of all but the last ``keep`` jobs (by start time;
    ``current``, this process's job by default, counts as the newest). A job with records in a file that a
    running process holds (its shared lock) is kept; the other files, each locked before it is read, are rewritten
    without the dropped jobs (removed when nothing is left), so a job is dropped from all of its ranks' files at
    once. Returns the jobs dropped. Call it holding :func:`_rotation_lock`."""
    current = job_name() if current is None else current
    starts = _Starts()
    files, handles = [], []
    try:
        for path in sorted([*folder.glob("rank-*.log"), *folder.glob("rank-*.jsonl")]):
            try:
                handle = open(path, "r+")  # noqa: SIM115 - held while the folder is rotated
            except OSError:
                continue
            handles.append(handle)
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                busy = False
            except OSError:
                busy = True  # a running process writes it
            files.append((_LogFile.read(path, starts), busy))  # read once locked: no writer adds lines since
        when = {job: starts.of(job) for job in starts.jobs()}
        when[current] = float("inf")
        order = sorted(when, key=lambda job: (when[job], "" if job is None else job))
        drop = set(order[:max(0, len(order) - keep)])
        for log_file, busy in files:
            if busy:
                drop -= log_file.jobs
        for log_file, busy in files:
            if not busy and (drop & log_file.jobs or not log_file.segments):
                log_file.rewrite(drop)
        return sorted(drop, key=lambda job: (when[job], "" if job is None else job))
    finally:
        for handle in handles:
            handle.close()


def keep_last_jobs(path: Path, keep: int) -> None:
    """Drop from the one log file ``path`` the records of all but its last ``keep`` jobs other than this
    process's (in the order they appear; lines before the first header count as one job); rewritten through a
    temporary file of its own, untouched when nothing is dropped or when a running process holds the file."""
    if not path.is_file():
        return
    log_file = _LogFile.read(path, _Starts())
    order = list(dict.fromkeys(job for job, _ in log_file.segments if job != job_name()))
    if len(order) <= keep:
        return
    kept = set(order[len(order) - keep:] if keep > 0 else []) | {job_name()}
    with open(path, "r+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return
        log_file.rewrite(set(order) - kept)
