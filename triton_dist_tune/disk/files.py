"""Files written for a person or another program, atomically: readers never see half a file, and each file is as
readable as any other new file under the process's umask."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


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


def write_atomic(path: Path, data: str | bytes, suffix: str = ".tmp", durable: bool = True) -> Path:
    """Write ``data`` to ``path`` so that readers never see half a file: a hidden temporary file beside it (named
    ``.<name>.XXXX<suffix>``), written, fsynced (``durable``: a rewrite whose loss in a machine's crash costs
    nothing may skip it) and renamed over ``path``; removed again when anything fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())  # mkstemp makes it 0600: readable as any other new file instead
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> Path:
    """Write ``data`` as standard JSON (no NaN or Infinity) to ``path`` so that readers never see half a file."""
    return write_atomic(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False), durable=durable)


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


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (links followed). Anything else raises ``OSError`` at once, never
    blocking: a FIFO or a device named like a cache file would hold its reader for ever (opened without waiting for
    a writer, then refused by its type)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{_KINDS.get(stat.S_IFMT(mode), 'no regular file')}, not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)

