"""Reading, filtering and removing the decisions in a cache folder (the command line's model; bundles of them:
:mod:`.bundles`).

A cache folder holds ``<root>/<function name>/<entry>.json`` (one decision each; contextual decisions under
``<root>/contextual/``) and the crash journals ``<entry>.<group>.rank<r>[.<k>].journal`` beside them. Entries of
format 2 (measurements as :meth:`~triton_dist_tune.records.Outcome.to_json` objects, margin, timing, creation
time) and of format 1 (measurements as rows of the summary table, no margin) are both read into one typed
:class:`Entry`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .entries import CUT_WRITE_S as CUT_WRITE_S
from .entries import MAX_ENTRY_BYTES as MAX_ENTRY_BYTES
from .entries import WRITE_TMP_GLOB as WRITE_TMP_GLOB
from .entries import CacheError as CacheError
from .entries import Entry as Entry
from .entries import ForeignFile as ForeignFile
from .entries import LinkOut as LinkOut
from .entries import cut_writes as cut_writes
from .entries import parse_entry as parse_entry
from .entries import read_entry as read_entry
from .entries import recorded_near_tie as recorded_near_tie
from .entries import superseded as superseded
from .entries import tuner_named as tuner_named
from .files import holding
from .versions import versions as current_versions

try:
    import fcntl
except ImportError:  # not on POSIX: journals are not locked (faults/journal.py)
    fcntl = None  # type: ignore[assignment]


def check_root(root: Path) -> None:
    """Raise :class:`CacheError` unless ``root`` is an existing folder."""
    if not root.exists():
        raise CacheError(f"no cache folder at {root} (set TRITON_DIST_AUTOTUNE_CACHE_DIR or pass --cache-dir)")
    if not root.is_dir():
        raise CacheError(f"{root} is not a folder (the cache is a folder of <function>/<entry>.json files)")


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, with every link on its way followed, is inside the cache folder ``root``: the command line
    reads, lists and deletes nothing else (a link out of the folder is skipped, never followed)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return False


def _files(root: Path, pattern: str) -> tuple[list[Path], list[CacheError]]:
    """The files ``pattern`` names under ``root``, sorted, inside it (:func:`inside`), and a :class:`CacheError`
    (a :class:`LinkOut`, its ``path`` None: never deleted either) for each one skipped because a link leads out of
    the folder."""
    check_root(root)
    found, outside = [], []
    for path in sorted(p for p in root.glob(pattern) if not p.name.startswith(".")):
        if inside(root, path):
            found.append(path)
        else:
            outside.append(LinkOut(f"{path}: a link out of the cache folder (to {_target(path)}); not followed"))
    return found, outside


def _target(path: Path) -> str:
    """Where the links from ``path`` lead, for a message: the path they resolve to, or that they loop."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13): named, never a traceback
        return "a loop of links"


def entry_files(root: Path) -> list[Path]:
    """Every ``<root>/<function>/<entry>.json`` file inside ``root``, sorted (temporary files of writers in flight,
    and links out of the folder, excluded)."""
    return _files(root, "*/*.json")[0]


def journal_files(root: Path) -> list[Path]:
    """Every crash journal inside the cache folder, sorted."""
    return _files(root, "*/*.journal")[0]


def scan(root: Path) -> tuple[list[Entry], list[CacheError]]:
    """Every readable decision under ``root`` and a :class:`CacheError` for each file that is not one (unreadable,
    corrupt, not UTF-8, nested too deep) or that a link out of the folder leads to (skipped, not read)."""
    paths, problems = _files(root, "*/*.json")
    entries = []
    for path in paths:
        try:
            entries.append(read_entry(path))
        except CacheError as exc:
            problems.append(exc)
    return entries, problems


def select(entries: list[Entry], function: str | None = None, stale: bool = False,
           older_than: float | None = None, current: dict[str, str] | None = None) -> list[Entry]:
    """The entries of ``function`` (its name, its cache folder's, or the heading ``list`` shows), only stale ones
    (against the versions ``current``, else read exactly), only those older than ``older_than`` seconds."""
    now = time.time()
    if stale and current is None:
        current = current_versions()
    return [e for e in entries
            if (function is None or function in (e.function, e.path.parent.name, e.heading))
            and (not stale or e.stale(current))
            and (older_than is None or now - e.created > older_than)]


def find(entries: list[Entry], name: str) -> Entry:
    """The entry called ``name``: its path, ``<function>/<file>`` (the function's folder, or the heading ``list``
    shows it under), or a unique prefix of its file name."""
    if not name.strip():
        raise CacheError("no decision called '' (give a name from the 'list' command)")
    matches = [e for e in entries if name in (str(e.path), e.name, e.path.name, e.path.stem)]
    if not matches:
        matches = [e for e in entries if e.path.stem.startswith(name) or e.name.startswith(name)
                   or any(f"{f}/{e.path.name}".startswith(name) for f in (e.function, e.heading))]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CacheError(f"no decision called {name!r} (see the 'list' command for names)")
    raise AmbiguousName(f"{name!r} names {len(matches)} decisions: {', '.join(e.name for e in matches[:5])}"
                        f"{', ...' if len(matches) > 5 else ''} (give more of one's name)")


class AmbiguousName(CacheError):
    """A name that names several decisions (:func:`find`): no other lookup (a tuning never finished) is tried."""


@dataclass
class Removal:
    """What :func:`remove` did: the files deleted (or, for a dry run, that would be), each it could not delete with
    the reason, and the journals it kept because a tuning in flight holds them."""

    gone: list[Path]
    failed: list[tuple[Path, OSError]]
    kept: list[Path] = field(default_factory=list)


def remove(paths: list[Path], dry_run: bool = False, keep: Path | None = None) -> Removal:
    """Delete ``paths`` (already gone is fine), then each folder that held one and is empty now but ``keep`` (the
    cache folder); a file that cannot be deleted (a read-only folder) is kept in
    ``failed`` and the others are still deleted. A journal is deleted only under its lock (the exclusive ``flock``
    a tuning holds while it runs: :mod:`~triton_dist_tune.faults.journal`): one a tuning in flight holds is kept
    (``kept``). ``dry_run``: deletes nothing, says what it would."""
    gone, failed, kept = [], [], []
    for path in paths:
        try:
            if _remove_unlocked(path, dry_run):
                gone.append(path)
            else:
                kept.append(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append((path, exc))
    for folder in sorted({p.parent for p in gone} - {keep} if not dry_run else ()):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    return Removal(gone, failed, kept)


def _remove_unlocked(path: Path, dry_run: bool) -> bool:
    """Delete ``path`` while holding its lock, then released (a decision's: :func:`~.files.holding`); False, and
    nothing deleted, when it is a journal a tuning in flight holds. Raises ``FileNotFoundError`` when it is gone."""
    if path.suffix != ".journal" or fcntl is None:
        if dry_run:
            if not path.exists():
                raise FileNotFoundError(path)
            return True
        with holding(path):  # (a decision's lock: a cache hit's rewrite never puts it back, files.rewrite_json)
            path.unlink()
        return True
    for _ in range(3):  # a tuning may put a new journal in its place between the open and the lock: try that one
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                if not dry_run:
                    path.unlink()
                return True
        finally:
            os.close(fd)  # closing it releases the lock
    return False


def age_text(seconds: float) -> str:
    """A short age: ``45s``, ``12m``, ``3h``, ``5d``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def parse_age(text: str) -> float:
    """Seconds in ``30s``, ``15m``, ``6h``, ``7d`` or ``2w`` (a bare number is days); raises ValueError."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "d")
    value = float(number)
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return value * units[unit]
