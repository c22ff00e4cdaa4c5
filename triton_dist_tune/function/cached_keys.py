"""The decided keys of a tuned function that its disk cache folder holds, as ``undecided="nearest"`` candidates: a
key an earlier job or campaign decided is a neighbour even where this process has never met it.

A file counts only where its name recomputes exactly from what this call's own tuning would name it by
(:func:`~triton_dist_tune.disk.cache.entry_id`: the function's source, the key text the file records, the config
space, the group size and this call's ``entry_extra``, with the kept set its measurements record; with a layout,
the layout's entry): so it provably belongs to this function, space, group size and code. The key is rebuilt from
its text by ``ast.literal_eval`` (never executed), and must describe back to the same text. Read by group rank 0
alone for a collective function (:mod:`.policy` sends what it found inside the serving's one exchange), by each
rank alone for a rank-local one.
"""

from __future__ import annotations

import ast
from collections.abc import Hashable

from ..disk.cache import entry_id
from ..errors import BadInputError
from ..measure.replicas import Layout
from ..space import describe_key
from .tuned import TunedFunction
from .tuning import kept_text

#: at most this many files of the folder are read per served key (the newest first: a folder of many decisions
#: costs a bounded read)
MAX_FILES = 256


def cached_keys(tuner: TunedFunction, group_size: int, extra: str,
                layout: Layout | None = None) -> list[tuple[Hashable, str, int]]:
    """(key, key text, config index) of every decision in ``tuner``'s cache folder whose file name is the entry a
    tuning of that key on a group of ``group_size`` (and ``layout``) with ``extra`` (the call's
    :meth:`~.tuned.TunedFunction.entry_extra`) writes; provisional ones, and files that are not this space's, left
    out. Never raises for what the folder holds."""
    try:
        files = sorted(tuner.cache.folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    except OSError:
        return []
    found = []
    for path in files[:MAX_FILES]:
        try:
            item = _decided_key(tuner, path.stem, group_size, extra, layout)
        except Exception:  # a file removed or replaced while read, a key text that is no literal
            item = None
        if item is not None:
            found.append(item)
    return found


def _decided_key(tuner: TunedFunction, entry: str, group_size: int, extra: str,
                 layout: Layout | None) -> tuple[Hashable, str, int] | None:
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
    n = len(tuner.space)
    pruned = {row.get("index") for row in data.get("measurements") or [] if row.get("state") == "pruned"}
    named = entry_id(tuner.source, text, tuner.space_text, group_size,
                     extra + kept_text([i for i in range(n) if i not in pruned], n))
    return (key, text, index) if (named if layout is None else layout.entry(named)) == entry else None
