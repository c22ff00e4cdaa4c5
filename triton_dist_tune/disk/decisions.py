"""Reading, filtering, removing and bundling the decisions in a cache folder (the command line's model).

A cache folder holds ``<root>/<function name>/<entry>.json`` (one decision each; contextual decisions under
``<root>/contextual/``) and the crash journals ``<entry>.<group>.rank<r>[.<k>].journal`` beside them. Entries of
format 2 (measurements as :meth:`~triton_dist_tune.records.Outcome.to_json` objects, margin, timing, creation
time) and of format 1 (measurements as rows of the summary table, no margin) are both read into one typed
:class:`Entry`.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..group.codec import Unreadable, read_json
from .entries import CacheError as CacheError
from .entries import Entry as Entry
from .entries import LinkOut as LinkOut
from .entries import lineage as lineage
from .entries import parse_entry as parse_entry
from .entries import read_entry as read_entry
from .entries import recorded_near_tie as recorded_near_tie
from .entries import superseded as superseded
from .files import new_file_mode, write_json_atomic
from .versions import versions as current_versions

#: what a bundle file says it is (``export`` writes it, ``import`` checks it)
BUNDLE_KIND = "triton-dist-tune bundle"
BUNDLE_FORMAT = 1


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
            outside.append(LinkOut(f"{path}: a link out of the cache folder (to {path.resolve()}); not followed"))
    return found, outside


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
           older_than: float | None = None, now: float | None = None,
           current: dict[str, str] | None = None) -> list[Entry]:
    """The entries of ``function`` (its name or its cache folder's), only stale ones (against the versions
    ``current``, else read exactly), only those older than ``older_than`` seconds."""
    now = time.time() if now is None else now
    if stale and current is None:
        current = current_versions()
    return [e for e in entries
            if (function is None or function in (e.function, e.path.parent.name))
            and (not stale or e.stale(current))
            and (older_than is None or now - e.created > older_than)]


def find(entries: list[Entry], name: str) -> Entry:
    """The entry called ``name``: its path, ``<function>/<file>``, or a unique prefix of its file name."""
    if not name.strip():
        raise CacheError("no decision called '' (give a name from the 'list' command)")
    matches = [e for e in entries if name in (str(e.path), e.name, e.path.name, e.path.stem)]
    if not matches:
        matches = [e for e in entries if e.path.stem.startswith(name) or e.name.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CacheError(f"no decision called {name!r} (see the 'list' command for names)")
    raise CacheError(f"{name!r} names {len(matches)} decisions: {', '.join(e.name for e in matches[:5])}")


#: a journal's name after its entry: ``.<group tag>.rank<r>[.<k>].journal`` (the tag is absent in old journals)
_JOURNAL_TAIL = re.compile(r"^(?:\.[0-9a-f]{10})?\.rank\d+(?:\.\d+)?\.journal$")


def journals_of(entry_path: Path) -> list[Path]:
    """The crash journals beside a cache entry: every group, every rank, every slot, of ``autotune`` and
    ``contextual_autotune`` alike (``<entry>.<group>.rank<r>[.<k>].journal``); links out of its folder left out."""
    stem, folder = entry_path.stem, entry_path.parent
    return sorted(p for p in folder.glob(f"{stem}.*journal")
                  if _JOURNAL_TAIL.match(p.name[len(stem):]) and inside(folder, p))


@dataclass
class Removal:
    """What :func:`remove` did: the files deleted, and each it could not delete with the reason."""

    gone: list[Path]
    failed: list[tuple[Path, OSError]]


def remove(paths: list[Path]) -> Removal:
    """Delete ``paths`` (already gone is fine); a file that cannot be deleted (a read-only folder) is kept in
    ``failed`` and the others are still deleted."""
    gone, failed = [], []
    for path in paths:
        try:
            path.unlink()
            gone.append(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append((path, exc))
    for folder in sorted({p.parent for p in gone}):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    return Removal(gone, failed)


# -- bundles ---------------------------------------------------------------------------------------------------


def export_bundle(entries: list[Entry], out: Path) -> Path:
    """Write ``entries`` (as stored) into one JSON bundle file at ``out``."""
    bundle = {"kind": BUNDLE_KIND, "format": BUNDLE_FORMAT, "created": time.time(), "versions": current_versions(),
              "entries": [{"path": e.name, "data": e.raw} for e in entries]}
    return write_json_atomic(out, bundle)


@dataclass
class Incoming:
    """One decision of a bundle, checked against this machine before it is written."""

    path: str
    entry: Entry
    #: differences that make the decision doubtful here: "<name>: <theirs> here <ours>"
    mismatches: list[str]
    #: the file's text as it will be written (encoded while the bundle is checked, so writing cannot fail on it)
    text: str = ""


def read_bundle(path: Path) -> list[Incoming]:
    """The decisions in the bundle file ``path``, each with its version and hardware mismatches."""
    try:  # each entry is checked to the limits of what the tuner reads where it is parsed (parse_entry)
        data = read_json(path.read_bytes(), None)
    except FileNotFoundError:
        raise CacheError(f"{path}: no such bundle file") from None
    except (OSError, Unreadable) as exc:
        raise CacheError(f"{path}: not a readable bundle ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND or not isinstance(data.get("entries"), list):
        raise CacheError(f"{path}: not a triton-dist-tune bundle (made by 'triton-dist-tune export')")
    if data.get("format") != BUNDLE_FORMAT:
        raise CacheError(f"{path}: bundle format {data.get('format')!r}, this version reads {BUNDLE_FORMAT}")
    from .cache import hardware

    now, hw = current_versions(), hardware()
    incoming: list[Incoming] = []
    seen: dict[str, int] = {}
    for number, item in enumerate(data["entries"], 1):
        rel = item.get("path") if isinstance(item, dict) else None
        if not _relative_entry_path(rel):
            raise CacheError(f"{path}: bad entry path {rel!r} in the bundle (an entry is <function>/<entry>.json, "
                             "inside the cache folder)")
        rel = str(PurePosixPath(rel))
        if rel in seen:
            raise CacheError(f"{path}: entries {seen[rel]} and {number} of the bundle are both {rel}: a bundle "
                             "holds one decision per file (refused, nothing imported)")
        seen[rel] = number
        try:  # a decision the tuner would not read (malformed, nested too deep) is refused here, not at each call
            entry = parse_entry(Path(rel), item.get("data"))
        except CacheError as exc:
            raise CacheError(f"{path}: entry {number} of the bundle: {exc}; refused, nothing imported") from None
        try:
            text = json.dumps(entry.raw, indent=1, sort_keys=True, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:
            raise CacheError(f"{path}: entry {number} ({rel}) cannot be written as standard JSON "
                             f"({type(exc).__name__}: {exc}); refused, nothing imported") from None
        mismatches = [f"{k}: {entry.versions.get(k)} here {now.get(k)}" for k in sorted(set(now) | set(entry.versions))
                      if entry.versions.get(k) != now.get(k)]
        if entry.gpu != hw["gpu"] or (entry.gpu_count is not None and entry.gpu_count != hw["gpu_count"]):
            mismatches.append(f"gpu: {entry.gpu} x{entry.gpu_count} here {hw['gpu']} x{hw['gpu_count']}")
        incoming.append(Incoming(rel, entry, mismatches, text))
    return incoming


def _relative_entry_path(rel: Any) -> bool:
    """Whether ``rel`` is ``<function>/<entry>.json``: relative, two plain parts, no ``..``, no hidden file."""
    if not isinstance(rel, str) or "\\" in rel or "\0" in rel:
        return False
    pure = PurePosixPath(rel)
    parts = pure.parts
    return (not pure.is_absolute() and len(parts) == 2 and all(p not in (".", "..") for p in parts)
            and parts[1].endswith(".json") and not parts[1].startswith("."))


def _inside(root: Path, rel: str) -> Path:
    """Where entry ``rel`` goes under ``root``; raises :class:`CacheError` when that place, through links, is
    outside ``root``."""
    top = root.resolve()
    target = (root / rel).resolve()
    if target.parent.parent != top:
        raise CacheError(f"entry path {rel!r} of the bundle leads out of the cache folder {root} (to {target}, "
                         "through a link): refused")
    return root / rel


def write_incoming(root: Path, incoming: list[Incoming]) -> list[Path]:
    """Write the bundle's decisions into the cache folder ``root``, all or nothing.

    Every path is checked first (one that leads out of ``root`` through a link, two that name one file through a
    link, or one whose place is taken by a folder, refuses the whole bundle), then every file is staged as a hidden
    temporary file beside its target, and only when every one is staged are they renamed into place. A failure
    while staging removes what was staged (and the folders made for it); a failure while renaming puts back the
    files already replaced. Nothing is left half written; only a crash of this process between two renames can
    leave part of the bundle in place.
    """
    made: list[Path] = []
    if not root.exists():
        root.mkdir(parents=True)
        made.append(root)
    staged: list[tuple[Path, str, bytes | None]] = []  # (target, temporary file, previous content or None)
    try:
        targets = [_inside(root, item.path) for item in incoming]
        files: dict[Path, str] = {}
        for target, item in zip(targets, incoming, strict=True):  # two entry paths may name one file through a link
            other = files.setdefault(target.resolve(), item.path)
            if other != item.path:
                raise CacheError(f"entries {other} and {item.path} of the bundle are one file ({target.resolve()}) "
                                 "through a link: a bundle holds one decision per file (refused, nothing imported)")
        for target in targets:
            if target.is_dir() or (target.parent.exists() and not target.parent.is_dir()):
                raise CacheError(f"{target} (or its folder) is in the way of the bundle's entry: refused, nothing "
                                 "imported")
        for target, item in zip(targets, incoming, strict=True):
            if not target.parent.exists():
                target.parent.mkdir()
                made.append(target.parent)
            previous = target.read_bytes() if target.exists() else None
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".import", dir=target.parent)
            staged.append((target, tmp, previous))
            os.fchmod(fd, new_file_mode())
            with os.fdopen(fd, "w") as f:
                f.write(item.text or json.dumps(item.entry.raw, indent=1, sort_keys=True, allow_nan=False))
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        _discard(staged, made)
        raise
    done: list[tuple[Path, str, bytes | None]] = []
    try:
        for target, tmp, previous in staged:
            os.replace(tmp, target)
            done.append((target, tmp, previous))
    except BaseException:
        for target, _, previous in reversed(done):  # put back what this import replaced
            try:
                if previous is None:
                    target.unlink()
                else:
                    write_json_atomic_bytes(target, previous)
            except OSError:
                pass
        _discard([s for s in staged if s not in done], made)
        raise
    return [target for target, _, _ in staged]


def write_json_atomic_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".restore", dir=path.parent)
    os.fchmod(fd, new_file_mode())
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _discard(staged: list[tuple[Path, str, bytes | None]], made: list[Path]) -> None:
    """Remove staged temporary files and the (then empty) folders made for them."""
    for _, tmp, _ in staged:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass


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
