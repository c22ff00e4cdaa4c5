"""``clear``: remove decisions and their journals from the cache folder, only files named as the tuner names them."""

from __future__ import annotations

import argparse
import errno
import sys
import time
from pathlib import Path

from ..disk import decisions as dec
from ..disk.files import not_regular
from ..disk.versions import cut_records
from ..faults.unfinished import decisions_tuned_again, journals_to_clear
from .common import UsageError, _emit_json, _root, _selected, _warn_problems


def cmd_clear(args: argparse.Namespace) -> int:
    """``clear``: remove the selected decisions and their journals: only files named as the tuner names them, and
    no journal a tuning in flight holds (kept, and said)."""
    root = _root(args)
    if not (args.all or args.function or args.older_than or args.stale or args.superseded or args.unfinished):
        raise UsageError("clear what? give --all, --function NAME, --older-than AGE, --stale, --superseded and/or "
                         "--unfinished")
    if args.unfinished and (args.stale or args.superseded):
        raise UsageError("--unfinished removes journals of tunings never finished, not decisions: --stale and "
                         "--superseded select decisions")
    entries, problems, _ = _selected(args)  # an unknown --function: a UsageError naming those list shows
    cut: list[Path] = []  # temporary files of decision writes cut short (--all, --function F)
    records: list[Path] = []  # those of the folder's versions record (--all)
    # a decision's journals: those holding its records only (one that holds another's too is kept: below)
    journals, mixed = journals_to_clear([e.path for e in entries])
    doomed = [e.path for e in entries] + journals
    unfiltered = not (args.older_than or args.stale or args.superseded)
    if args.unfinished:  # the journals alone (a cut tuning of a group that will not come again), decisions kept
        limit = time.time() - dec.parse_age(args.older_than) if args.older_than else None
        doomed = [p for p in dec.journal_files(root) if (not args.function or p.parent.name == args.function)
                  and (limit is None or p.stat().st_mtime < limit)]
        mixed = decisions_tuned_again(doomed)  # a decision's tuning again: kept, and said (clear of it removes them)
        doomed = [p for p in doomed if p not in mixed]
    elif unfiltered:  # everything of the folders: corrupt files and journals of tunings never finished too
        folders = {p.parent for p in dec.entry_files(root) + dec.journal_files(root)}
        folders |= {p.parent for p in root.glob(f"*/{dec.WRITE_TMP_GLOB}") if dec.inside(root, p)}  # (cut writes)
        if args.function:  # its own folder, and a folder of its decisions only (not contextual/, which is shared)
            chosen = {e.path for e in entries}
            shared = {e.path.parent for e in dec.scan(root)[0] if e.path not in chosen}
            folders = {f for f in folders if f.name == args.function} | ({e.path.parent for e in entries} - shared)
        doomed += [p for f in folders for p in (*f.glob("*.json"), *f.glob("*.journal"))
                   if not p.name.startswith(".") and dec.inside(root, p)]  # never through a link out of the folder
        cut = [p for f in sorted(folders) for p in dec.cut_writes(f) if dec.inside(root, p)]
        if not args.function:  # (and the folder's versions record's: no function's)
            records = [p for p in cut_records(root) if dec.inside(root, p)]
            cut += records
        doomed += cut
    elif args.older_than:  # journals and corrupt files older than the age, by their modification time
        limit = time.time() - dec.parse_age(args.older_than)
        strays = [p.path for p in problems if p.path is not None] if not (args.stale or args.superseded) else []
        doomed += [p for p in dec.journal_files(root) + strays
                   if (not args.function or p.parent.name == args.function) and p.stat().st_mtime < limit]
    doomed = sorted(p for p in set(doomed) if dec.tuner_named(p) or p in cut)  # never a file the tuner does not name
    mixed = {p: others for p, others in mixed.items() if p not in doomed}  # (--all, --unfinished: it goes)
    left = _not_files(doomed)
    doomed = [p for p in doomed if p not in left]
    for path, what in left.items():
        print(f"triton-dist-tune: left {path}: {what}, not a file (clear removes files only)", file=sys.stderr)
    _warn_problems([p for p in problems if p.path is None or p.path not in (*doomed, *left)])  # named, not removed
    removal = dec.remove(doomed, dry_run=args.dry_run, keep=root)  # (the cache folder itself stays)
    gone = removal.gone
    if removal.failed:
        path, exc = removal.failed[0]
        raise UsageError(f"could not remove {len(removal.failed)} of {len(doomed)} file(s) from {root} ({path.name}: "
                         f"{_reason(exc)}); removed {len(gone)}")
    if args.json:
        _emit_json({"removed" if not args.dry_run else "would_remove": [str(p) for p in gone],
                    "kept": [str(p) for p in removal.kept], "left": [str(p) for p in left],
                    "shared": {str(p): others for p, others in mixed.items()}})
    else:
        verb = "would remove" if args.dry_run else "removed"
        for path in gone:
            print(f"{verb} {path}")
        for path in removal.kept:
            print(f"kept {path}: a tuning in flight holds it")
        for path, others in mixed.items():
            print(f"kept {path}: it holds records of {_others_text(path, others)}")
        counts = (sum(p.suffix == ".json" for p in gone), sum(p.suffix == ".journal" for p in gone))
        print(f"{verb} {counts[0]} cache file(s) and {counts[1]} journal(s) from {root}")
        if any(p in cut and p not in records for p in gone):
            print(f"{verb} {sum(p in cut and p not in records for p in gone)} temporary file(s) of decision writes cut "
                  f"short (a process killed while it wrote a decision, a tuning's or an import's, over "
                  f"{dec.CUT_WRITE_S:.0f} s ago; never read)")
        if any(p in records for p in gone):
            print(f"{verb} {sum(p in records for p in gone)} temporary file(s) of versions-record writes cut short (a "
                  f"process killed while it wrote the folder's record of the installed versions, over "
                  f"{dec.CUT_WRITE_S:.0f} s ago; never read)")
    return 0


def _others_text(journal: Path, others: list[str]) -> str:
    """The entries a journal also holds records of, for ``clear``'s line: each decision or tuning never finished."""
    kinds = {True: "a decision: a tuning of it again, cut short or in flight; clear of the decision removes it",
             False: "a tuning never finished"}
    return ", ".join(f"{entry[:8]} ({kinds[(journal.parent / f'{entry}.json').exists()]})" for entry in others)


def _not_files(paths: list[Path]) -> dict[Path, str]:
    """Those of ``paths`` that are neither a file nor a link (a folder named ``<entry>.json``, a FIFO), each with
    what it is: ``clear`` leaves them (deleting a folder would fail, and it was never the tuner's file)."""
    return {p: what for p in paths if not p.is_symlink() and (what := not_regular(p)) is not None}


def _reason(exc: OSError) -> str:
    """Why a file could not be removed, from its error: a read-only folder only where the error says so."""
    text = exc.strerror or str(exc)
    return text + (": is the folder read-only?" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "")
