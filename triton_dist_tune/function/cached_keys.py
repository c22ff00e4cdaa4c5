"""The decided keys of a tuned function that its disk cache folder holds, as ``undecided="nearest"`` candidates: a
key an earlier job or campaign decided is a neighbour even where this process has never met it.

A file counts only where its name recomputes exactly from what this call's own tuning would name it by
(:func:`~triton_dist_tune.disk.cache.entry_id`: the function's source, the key text the file records, the config
space, the group size and this call's ``entry_extra``, with the kept set its measurements record; with a layout,
the layout's entry): so it provably belongs to this function, space, group size and code. The key is rebuilt from
its text by ``ast.literal_eval`` (never executed), and must describe back to the same text. Read by group rank 0
alone for a collective function (:mod:`.policy` sends what it found inside the serving's one exchange), by each
rank alone for a rank-local one.

The window is the :data:`MAX_FILES` newest files that are this call's decisions, whatever the folder holds besides
(other group sizes, GPUs, code versions, spaces, ``cache_key_extra``: their names tell nothing, they are content
fingerprints). What a file held is remembered by its inode, size and modification time (every writer replaces a
file by a new one), and whether it is this call's entry by the call's identity: a file unchanged since this process
read it is never read again, a file found to be another entry's costs a look-up, not a read. Files not read before
are read newest first, at most :data:`MAX_READS` of them (and :data:`MAX_READ_BYTES`) per call: a folder with more
of other entries' files is covered by the calls that follow.
"""

from __future__ import annotations

import ast
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from .. import settings
from ..errors import BadInputError
from ..measure.replicas import Layout
from ..space import describe_key, fingerprint
from .tuned import TunedFunction
from .tuning import entry_of, kept_text

#: the window: at most this many decisions of the call's entry, the newest first, are candidates per served key
MAX_FILES = 256
#: at most this many files not read before are read per served key (the newest first; those left are read by the
#: calls that follow)
MAX_READS = 1024
#: ... and no more bytes of them than this (a file begun under it is read whole)
MAX_READ_BYTES = 64 << 20


@dataclass
class _Read:
    """What :func:`cached_keys` read of one file of the folder."""

    #: the file's inode, size, modification time (ns), and the version check it was read under
    stamp: tuple
    #: (key, key text, config index) of the decision it holds, or None (none, provisional, not this space's, ...)
    item: tuple[Hashable, str, int] | None
    #: :func:`~.tuning.kept_text` of the configs its measurements record as kept
    kept: str = ""
    #: call identity (:func:`_identity`) -> whether the file's name is the entry that call names its key by
    named: dict[str, bool] = field(default_factory=dict)


def cached_keys(tuner: TunedFunction, group_size: int, extra: str,
                layout: Layout | None = None) -> list[tuple[Hashable, str, int]]:
    """(key, key text, config index) of the newest :data:`MAX_FILES` decisions in ``tuner``'s cache folder whose
    file name is the entry a tuning of that key on a group of ``group_size`` (and ``layout``) with ``extra`` (the
    call's :meth:`~.tuned.TunedFunction.entry_extra`) writes; provisional ones, and files that are not this space's,
    left out. A file unchanged since this process read it is not read again; of those not read before, at most
    :data:`MAX_READS` (and :data:`MAX_READ_BYTES`), newest first. Never raises for what the folder holds."""
    listed = []
    try:
        for path in tuner.cache.folder.glob("*.json"):
            try:
                seen = path.stat()
            except OSError:  # removed since it was listed
                continue
            listed.append((seen.st_mtime_ns, path, (seen.st_ino, seen.st_size, seen.st_mtime_ns)))
    except OSError:
        return []
    listed.sort(key=lambda item: item[0], reverse=True)
    checks = settings.Settings.from_env(lenient=True).version_check  # (what DiskCache.load refuses depends on it)
    call = _identity(group_size, extra, layout)
    held, kept = _READ.get(tuner, {}), {}
    found: list[tuple[Hashable, str, int]] = []
    reads = size = 0
    for _, path, stamp in listed:
        stamp = (*stamp, checks)
        read = held.get(path.name)
        if read is None or read.stamp != stamp:
            if len(found) >= MAX_FILES or reads >= MAX_READS or size >= MAX_READ_BYTES:
                continue  # not known: a later call reads it
            reads, size = reads + 1, size + stamp[1]
            read = _read(tuner, path, stamp)
        kept[path.name] = read
        if read.item is None or len(found) >= MAX_FILES:
            continue
        if call not in read.named:
            read.named[call] = _named(tuner, read.item[1], read.kept, group_size, extra, layout) == path.stem
        if read.named[call]:
            found.append(read.item)
    _READ[tuner] = kept
    return found


#: per tuned function, what :func:`cached_keys` read of each file of its folder, by file name
_READ: weakref.WeakKeyDictionary[TunedFunction, dict[str, _Read]] = weakref.WeakKeyDictionary()


def _identity(group_size: int, extra: str, layout: Layout | None) -> str:
    """What names a call's entries besides the key and the kept set, as one short text (the memo's key)."""
    return fingerprint(f"{group_size}\n{layout.entry('') if layout is not None else ''}\n{extra}")


def _read(tuner: TunedFunction, path: Path, stamp: tuple) -> _Read:
    """What the file at ``path`` holds, as :func:`cached_keys` remembers it."""
    try:
        found = _decided_key(tuner, path.stem)
    except Exception:  # a file removed or replaced while read, a key text that is no literal
        found = None
    if found is None:
        return _Read(stamp, None)
    return _Read(stamp, found[:3], kept_text(found[3], len(tuner.space)))


def _decided_key(tuner: TunedFunction, entry: str) -> tuple[Hashable, str, int, list[int]] | None:
    """(key, key text, config index, the kept configs its measurements record) of the decision in the file of
    ``entry``, or None (none there, provisional, not this space's, a key text that is no literal of its own)."""
    data = tuner.cache.load(entry, tuner.space_text, quiet=True)
    if data is None or data.get("provisional") or not isinstance(data.get("key"), str):
        return None
    index, text = data["index"], data["key"]
    if not (0 <= index < len(tuner.space) and data["config"] == tuner.descriptions[index]):
        return None
    key = ast.literal_eval(text)
    try:
        if describe_key(key) != text:
            return None
        hash(key)
    except (BadInputError, TypeError):
        return None
    pruned = {row.get("index") for row in data.get("measurements") or [] if row.get("state") == "pruned"}
    return key, text, index, [i for i in range(len(tuner.space)) if i not in pruned]


def _named(tuner: TunedFunction, text: str, kept: str, group_size: int, extra: str, layout: Layout | None) -> str:
    """The entry a tuning of the key ``text`` with the kept set ``kept`` (:func:`~.tuning.kept_text`) on a group of
    ``group_size`` (and ``layout``) with ``extra`` names."""
    return entry_of(tuner, text, group_size, extra + kept, layout)
