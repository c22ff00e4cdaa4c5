"""Bundles: decisions exported from one cache folder into one JSON file (``export``) and imported into another
(``import``), checked against the versions and hardware here, and written all or nothing."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..group.codec import Unreadable, read_json
from .decisions import tuner_named
from .entries import CacheError, Entry, cut_writes, parse_entry
from .files import holding, new_file_mode, read_regular, remove_if, rewrite_atomic, write_json_atomic
from .versions import versions as current_versions

#: what a bundle file says it is (``export`` writes it, ``import`` checks it)
BUNDLE_KIND = "triton-dist-tune bundle"
BUNDLE_FORMAT = 1
#: the most ``import`` reads of a bundle that is no regular file (a FIFO, a stream without end: ``/dev/zero``): refused
#: once this many bytes and one more are read. A regular file is read whole, whatever its size (a bundle of 301
#: decisions of 1,920 configs each is about 300 MiB)
MAX_BUNDLE_BYTES = 256 << 20


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
        data = read_json(_read_capped(path), None)
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
        if not tuner_named(Path(rel)):  # the tuner would never read it, nor 'clear' remove it
            raise CacheError(f"{path}: entry {number} of the bundle, {rel}, is not named as the tuner names its cache "
                             "files (<function>/<20 hex digits>.json): refused, nothing imported")
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


def _read_capped(path: Path) -> bytes:
    """The bytes of the bundle file ``path``: a regular file whole (``export`` writes bundles of any size); anything
    else (a FIFO, ``/dev/zero``) at most :data:`MAX_BUNDLE_BYTES`, a :class:`CacheError` past them."""
    with open(path, "rb") as f:
        if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return f.read()
        data = f.read(MAX_BUNDLE_BYTES + 1)
    if len(data) > MAX_BUNDLE_BYTES:
        raise CacheError(f"{path}: a stream of more than {MAX_BUNDLE_BYTES >> 20} MiB, more than a bundle read from "
                         "other than a regular file may hold (the cap of 'import'): refused, nothing imported")
    return data


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


@dataclass
class Imported:
    """What :func:`write_incoming` did with each decision of a bundle (its place in the cache folder)."""

    #: written where the cache held no file
    new: list[Path]
    #: written over another file: another record of the decision (another choice, or the same choice tuned at
    #: another time) or an unreadable file
    replaced: list[Path]
    #: the cache held this very decision (the same JSON but for its ``served`` time): left as it was, its file not
    #: touched (nor its time)
    unchanged: list[Path]
    #: temporary files of earlier writes of the bundle's decisions cut short (an import or a tuning killed mid-write,
    #: over a minute ago: :func:`~.entries.cut_writes`), removed before this import staged its own
    tidied: list[Path] = field(default_factory=list)

    @property
    def written(self) -> list[Path]:
        """The files this import wrote (new or replaced)."""
        return self.new + self.replaced

    @property
    def held(self) -> list[Path]:
        """Every decision of the bundle, each now in the cache: written, or found there already."""
        return self.new + self.replaced + self.unchanged


def _same_decision(previous: bytes | None, item: Incoming) -> bool:
    """Whether the file's bytes ``previous`` (None: no file) hold the bundle's decision exactly (the same JSON but
    for when it was last served, ``served``: a job that served it since the export keeps its time)."""
    if previous is None:
        return False
    try:
        held = read_json(previous, None)
    except Unreadable:
        return False
    return isinstance(held, dict) and _unserved(held) == _unserved(item.entry.raw)


def _unserved(data: dict[str, Any]) -> dict[str, Any]:
    """A decision's record without its ``served`` time."""
    return {k: v for k, v in data.items() if k != "served"}


def write_incoming(root: Path, incoming: list[Incoming]) -> Imported:
    """Write the bundle's decisions into the cache folder ``root``, all or nothing; a decision the folder holds
    already, the same JSON, is left as it is (:attr:`Imported.unchanged`).

    Every path is checked first (one that leads out of ``root`` through a link, two that name one file through a
    link, or one whose place is taken by a folder, refuses the whole bundle), then every file is staged as a hidden
    temporary file beside its target, and only when every one is staged are they renamed into place. A failure
    while staging removes what was staged (and the folders made for it); a failure while renaming puts back the
    files already replaced, each under its lock where it still holds the import's decision (a decision another
    process wrote meanwhile stays: :func:`_take_back`). Nothing is left half written; only a crash of this process
    between two renames can leave part of the bundle in place. A process killed while it stages (or puts back)
    leaves its temporary files (``.<entry>.json.XXXXXXXX.import``, ``.restore``): they are named as the cut writes
    ``list`` names and ``clear`` removes, and an import of those decisions again, a minute on, removes them first
    (:attr:`Imported.tidied`), as a tuning's write of its entry does.
    """
    unchanged: list[Path] = []
    made: list[Path] = []
    if not root.exists():
        root.mkdir(parents=True)
        made.append(root)
    staged: list[tuple[Path, str, bytes | None]] = []  # (target, temporary file, previous content or None)
    staged_of: dict[str, Incoming] = {}  # temporary file -> the decision it holds
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
        tidied = _tidy(targets)
        for target, item in zip(targets, incoming, strict=True):
            if not target.parent.exists():
                target.parent.mkdir()
                made.append(target.parent)
            previous = read_regular(target) if target.exists() else None  # a FIFO there: OSError, never waited on
            if _same_decision(previous, item):
                unchanged.append(target)
                continue
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".import", dir=target.parent)
            staged.append((target, tmp, previous))
            staged_of[tmp] = item
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
            with holding(target):  # as every replacement: a cache hit's rewrite never puts back what it replaced
                os.replace(tmp, target)
            done.append((target, tmp, previous))
    except BaseException:
        for target, tmp, previous in reversed(done):  # put back what this import replaced
            _take_back(target, previous, staged_of[tmp])
        _discard([s for s in staged if s not in done], made)
        raise
    return Imported(new=[target for target, _, previous in staged if previous is None],
                    replaced=[target for target, _, previous in staged if previous is not None], unchanged=unchanged,
                    tidied=tidied)


def _tidy(targets: list[Path]) -> list[Path]:
    """Remove the temporary files of earlier writes of ``targets`` cut short (:func:`~.entries.cut_writes`: over a
    minute old, never a write in flight); the ones removed."""
    names: dict[Path, set[str]] = {}
    for target in targets:
        names.setdefault(target.parent, set()).add(target.name)
    removed = []
    for folder in sorted(names):  # one look per folder: ``.<entry>.json.XXXXXXXX.<suffix>`` names its target
        for left in cut_writes(folder) if folder.is_dir() else ():
            if left.name[1:].rsplit(".", 2)[0] in names[folder]:
                try:
                    left.unlink()
                    removed.append(left)
                except OSError:  # (removed meanwhile, or a folder that cannot be written: the import says so then)
                    pass
    return removed


def _take_back(target: Path, previous: bytes | None, item: Incoming) -> None:
    """Undo this import's write of ``target``: remove the file (where there was none) or put back the bytes it held
    before, under the file's lock and only where it still holds the import's decision (its ``served`` time aside: a
    cache hit may have served it since). A decision another process wrote meanwhile (a tuning's store, taken under
    the same lock) stays: before, it was removed, or replaced by the bytes the import had replaced."""
    def imported(held: bytes) -> bool:
        return _same_decision(held, item)

    try:
        if previous is None:
            remove_if(target, imported)
        else:
            rewrite_atomic(target, previous, imported, ".restore")
    except OSError:
        pass


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
