"""Files written for a person or another program, atomically: readers never see half a file, and each file is as
readable as any other new file under the process's umask. A file is replaced or removed under its exclusive
``flock`` (:func:`holding`), so that a rewrite made only where the file is still the one read (a cache hit's
``served`` time) never puts back what another process removed or replaced in the meantime. A file written only where
none is there (:func:`write_json_new`) is linked into place in one step that fails where a file is there, so a file
another process writes meanwhile is never replaced by it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: the longest a writer waits for another's lock of the file it replaces (held for a rename only) before it goes on
LOCK_WAIT_S = 5.0
#: seconds after which a temporary file of an atomic write (:func:`write_atomic`) is one cut short, never one in
#: flight: a write takes milliseconds, and waits for the lock of the file it replaces :data:`LOCK_WAIT_S` at most
CUT_WRITE_S = 60.0


def new_file_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``): every file written here for a
    person or another program (cache entries, bundles, vLLM's config file) is created with ``mkstemp`` (mode 0600)
    and set to this, so that it is as readable as any other new file. The umask is read without changing it where
    Linux shows it (/proc), else by setting it back."""
    mask = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                mask = int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    if mask is None:
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def holding(path: Path) -> Iterator[int | None]:
    """While replacing or removing ``path``: a read-only fd of the file ``path`` names now, holding that file's
    exclusive ``flock`` (None where there is none). A lock not had within :data:`LOCK_WAIT_S` (a process stopped
    while it held one), or refused by the file system, is gone without: the caller acts as it would unlocked."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            yield None
            return
        try:
            locked = flock_within(fd, fcntl.LOCK_EX, deadline)
            try:
                same = not locked or os.path.samestat(os.fstat(fd), os.stat(path))
            except OSError:
                same = False  # removed while this process waited for its lock: the file named now, if any
            if same:
                yield fd
                return
        finally:
            os.close(fd)  # closing it releases the lock


def flock_within(fd: int, operation: int, deadline: float) -> bool:
    """Take the ``flock`` ``operation`` (shared or exclusive) on ``fd``, trying until the monotonic ``deadline``;
    whether it is held (False at once where the file system refuses ``flock``)."""
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        except OSError:
            return False


def write_atomic(path: Path, data: str | bytes, suffix: str = ".tmp", durable: bool = True) -> Path:
    """Write ``data`` to ``path`` so that readers never see half a file: a hidden temporary file beside it (named
    ``.<name>.XXXX<suffix>``), written, fsynced (``durable``: a rewrite whose loss in a machine's crash costs
    nothing may skip it) and renamed over ``path`` under the lock of the file there (:func:`holding`); removed
    again when anything fails."""
    _write(path, data, suffix, durable)
    return path


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> Path:
    """Write ``data`` as standard JSON (no NaN or Infinity) to ``path`` so that readers never see half a file."""
    return write_atomic(path, _json(data), durable=durable)


def rewrite_json(path: Path, data: Any, unchanged: Callable[[bytes], bool], durable: bool = True) -> bool:
    """Write ``data`` as :func:`write_json_atomic` does, only where ``path`` still holds a file whose bytes
    ``unchanged`` accepts, read under that file's lock: never over a file another process wrote since, nor where
    it removed one. Whether it was written."""
    return rewrite_atomic(path, _json(data), unchanged, durable=durable)


def rewrite_atomic(path: Path, data: str | bytes, unchanged: Callable[[bytes], bool], suffix: str = ".tmp",
                   durable: bool = True) -> bool:
    """Write ``data`` as :func:`write_atomic` does, only where ``path`` still holds a file whose bytes ``unchanged``
    accepts, read under that file's lock (as :func:`rewrite_json`). Whether it was written."""
    return _write(path, data, suffix, durable, unchanged)


def remove_if(path: Path, unchanged: Callable[[bytes], bool]) -> bool:
    """Remove ``path`` only where it holds a file whose bytes ``unchanged`` accepts, read under that file's lock
    (:func:`holding`): never a file another process wrote since (a tuning's decision, written under the same lock).
    Whether it was removed."""
    with holding(path) as held:
        if held is None or not unchanged(read_regular(path)):
            return False
        os.unlink(path)
        return True


def write_json_new(path: Path, data: Any, durable: bool = True) -> bool:
    """Write ``data`` as :func:`write_json_atomic` does, only where no file is at ``path``: the finished temporary
    file is hard-linked to ``path``, which fails where a file is there, so the check and the write are one step
    and a file another process writes meanwhile (a tuning, an ``import``) is never replaced. Whether it was written.
    Where the file system has no hard links, the check and the rename follow each other closely instead."""
    return _write(path, _json(data), ".tmp", durable, new=True)


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False)


def _write(path: Path, data: str | bytes, suffix: str, durable: bool,
           unchanged: Callable[[bytes], bool] | None = None, new: bool = False) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())  # mkstemp makes it 0600: readable as any other new file instead
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if new:
            return _link_new(tmp, path)
        with holding(path) as held:
            if unchanged is not None and (held is None or not unchanged(read_regular(path))):
                os.unlink(tmp)
                return False
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


#: what ``link`` fails with where the file system has no hard links
_NO_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK)


def _link_new(tmp: str, path: Path) -> bool:
    """Put the temporary file ``tmp`` at ``path`` only where no file is there (its link removed either way)."""
    try:
        os.link(tmp, path)  # fails where any file is at ``path``: the check and the write in one step
        written = True
    except FileExistsError:
        written = False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        written = not os.path.lexists(path)
        if written:
            os.replace(tmp, path)
            return True
    os.unlink(tmp)
    return written


#: what a file that is not a regular file is, by its type (``stat.S_IFMT``)
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it is there and no regular file (``a FIFO``, ``a folder``, ``a symbolic link (to
    ...)``, links not followed), else None: :func:`write_atomic` would replace it by a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)})"
    return _KINDS.get(stat.S_IFMT(mode), "no regular file")


class TooLarge(OSError):
    """A file larger than its reader takes (:func:`read_regular`'s ``limit``): refused before a byte of it is read."""


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (links followed). Anything else raises ``OSError`` at once, never
    blocking: a FIFO or a device named like a cache file would hold its reader for ever (opened without waiting for
    a writer, then refused by its type). ``limit``: a file of more bytes raises :class:`TooLarge` unread (a cache
    file is a few kilobytes; one edited into gigabytes took minutes and tens of GB to read and parse)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        held = os.fstat(fd)
        mode = held.st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{_KINDS.get(stat.S_IFMT(mode), 'no regular file')}, not a regular file")
        if limit is not None and held.st_size > limit:
            raise TooLarge(f"{held.st_size / (1 << 20):.1f} MiB, more than a decision holds (a cache file is read up "
                           f"to {limit >> 20} MiB)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)



def left_behind(folder: Path, pattern: str, name: re.Pattern[str],
                keep: Callable[[re.Match[str]], bool] = lambda match: True) -> list[Path]:
    """The regular files of ``folder`` that ``pattern`` (a glob) finds, whose name ``name`` matches whole (and whose
    match ``keep`` accepts), last modified over :data:`CUT_WRITE_S` ago, sorted: the temporary files of atomic writes
    cut short (a writer killed between its temporary file and the rename), never one in flight."""
    limit = time.time() - CUT_WRITE_S
    found = []
    try:
        paths = sorted(folder.glob(pattern))
    except OSError:
        return []
    for path in paths:
        match = name.fullmatch(path.name)
        try:
            held = path.lstat()
            if match and keep(match) and stat.S_ISREG(held.st_mode) and held.st_mtime < limit:
                found.append(path)
        except OSError:  # (renamed or removed meanwhile)
            pass
    return found
