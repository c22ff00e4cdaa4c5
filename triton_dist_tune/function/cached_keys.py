"""The decided keys of a tuned function that its disk cache folder holds, as ``undecided="nearest"`` candidates: a
key an earlier job or campaign decided is a neighbour even where this process has never met it.

A file counts only where its name recomputes exactly from what this call's own tuning would name it by
(:func:`~triton_dist_tune.disk.cache.entry_id`: the function's source, the key text the file records, the config
space, the group size and this call's ``entry_extra``, with the kept set its measurements record; with a layout,
the layout's entry): so it provably belongs to this function, space, group size and code. The key is rebuilt from
its text by ``ast.literal_eval`` (never executed), and must describe back to the same text. Read by group rank 0
alone for a collective function (:mod:`.policy` sends what it found inside the serving's one exchange), by each
rank alone for a rank-local one. A file unchanged since this process read it is not read again (a served key
after another costs the folder's listing, not its files' reads again).
"""

from __future__ import annotations

import ast
import weakref
from collections.abc import Hashable
from typing import Any

from .. import settings
from ..errors import BadInputError
from ..measure.replicas import Layout
from ..space import describe_key
from .tuned import TunedFunction
from .tuning import entry_of, kept_text

#: at most this many files of the folder are read per served key (the newest first: a folder of many decisions
#: costs a bounded read)
MAX_FILES = 256


def cached_keys(tuner: TunedFunction, group_size: int, extra: str,
                layout: Layout | None = None) -> list[tuple[Hashable, str, int]]:
    """(key, key text, config index) of every decision in ``tuner``'s cache folder whose file name is the entry a
    tuning of that key on a group of ``group_size`` (and ``layout``) with ``extra`` (the call's
    :meth:`~.tuned.TunedFunction.entry_extra`) writes; provisional ones, and files that are not this space's, left
    out. A file unchanged since this process read it (its inode, size and modification time: every writer replaces
    a file by a new one) is not read again. Never raises for what the folder holds."""
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
    held, kept = _READ.get(tuner, {}), {}
    found = []
    for _, path, stamp in listed[:MAX_FILES]:
        stamp = (*stamp, checks)
        read = held.get(path.name)
        if read is None or read[0] != stamp:
            try:
                read = (stamp, _decided_key(tuner, path.stem))
            except Exception:  # a file removed or replaced while read, a key text that is no literal
                read = (stamp, None)
        kept[path.name] = read
        item = read[1]
        if item is not None and _named(tuner, item, group_size, extra, layout) == path.stem:
            found.append(item[:3])
    _READ[tuner] = kept
    return found


#: per tuned function, what :func:`cached_keys` read of each file of its folder: file name -> (the file's stamp,
#: what :func:`_decided_key` made of it)
_READ: weakref.WeakKeyDictionary[TunedFunction, dict[str, tuple[tuple, Any]]] = weakref.WeakKeyDictionary()


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


def _named(tuner: TunedFunction, item: tuple[Hashable, str, int, list[int]], group_size: int, extra: str,
           layout: Layout | None) -> str:
    """The entry a tuning of ``item``'s key on a group of ``group_size`` (and ``layout``) with ``extra`` names."""
    return entry_of(tuner, item[1], group_size, extra + kept_text(item[3], len(tuner.space)), layout)
