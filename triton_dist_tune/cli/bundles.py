"""``export`` and ``import``: decisions into one bundle file (or vLLM's or SGLang's fused-MoE config file:
:mod:`.moe_export`), and a bundle's decisions into the cache. Superseded decisions are never exported."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..disk import bundles
from ..disk import decisions as dec
from ..disk.files import read_regular
from . import moe_export
from .common import (
    SUPERSEDED_NOTE,
    Unexportable,
    UsageError,
    _emit_json,
    _root,
    _selected,
    _warn_problems,
    check_target,
)


def cmd_export(args: argparse.Namespace) -> int:
    """``export``: the selected decisions, superseded ones left out (the tuner never serves them again), into a
    bundle or a fused-MoE config file."""
    if args.format == "bundle":  # (the options of the MoE files select nothing here)
        moe_export.refuse_with_bundle(args, UsageError)
    selected, problems, replaced = _selected(args)
    if args.format == "bundle":  # a decision a bundle cannot hold is skipped and named, as an unreadable file is
        selected, unexportable = _standard(selected)
        problems = [*problems, *unexportable]
    status = _warn_problems(problems)
    entries = [e for e in selected if e.path not in replaced]
    skipped = [e.name for e in selected if e.path in replaced]
    if skipped and not args.json:
        print(f"skipped {len(skipped)} superseded decision(s) ({SUPERSEDED_NOTE}; 'list' names them, 'clear "
              "--superseded' removes them)")
    if not entries:
        raise UsageError(f"nothing to export from {_root(args)}" + (f" ({len(skipped)} superseded decision(s) "
                                                                     "skipped)" if skipped else ""))
    if args.format in moe_export.ENGINES:
        done = moe_export.export(args, entries, UsageError)
        _emit_json({**done, "superseded_skipped": skipped}) if args.json else print(moe_export.report(done))
        return status
    if Path(args.bundle).is_dir():
        raise UsageError(f"{args.bundle} is a folder: name the bundle file to write (e.g. "
                         f"{Path(args.bundle) / 'decisions.json'}); a folder is for --format vllm-moe or sglang-moe")
    if not Path(args.bundle).absolute().parent.is_dir():
        raise UsageError(f"no folder {Path(args.bundle).absolute().parent} to write the bundle into (create it first)")
    check_target(Path(args.bundle), _root(args), "bundle file")
    path = bundles.export_bundle(entries, Path(args.bundle))
    if args.json:
        _emit_json({"bundle": str(path), "entries": [e.name for e in entries], "superseded_skipped": skipped})
    else:
        print(f"exported {len(entries)} decision(s) to {path}")
    return status


def _standard(entries: list[dec.Entry]) -> tuple[list[dec.Entry], list[Unexportable]]:
    """The decisions a bundle (standard JSON) can hold, and one :class:`Unexportable` naming each other one's file."""
    fine, refused = [], []
    for entry in entries:
        try:
            json.dumps(entry.raw, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:
            refused.append(Unexportable(f"{entry.path}: holds a value standard JSON has no (NaN or Infinity: {exc}); "
                                        "not exported", entry.path))
        else:
            fine.append(entry)
    return fine, refused


def cmd_import(args: argparse.Namespace) -> int:
    """``import``: add a bundle's decisions to the cache."""
    incoming = bundles.read_bundle(Path(args.bundle))
    doubtful = [item for item in incoming if item.mismatches]
    for item in doubtful:
        print(f"triton-dist-tune: {item.path} was tuned under other conditions: {'; '.join(item.mismatches)}",
              file=sys.stderr)
    if doubtful and not args.force:
        print(f"triton-dist-tune: refused: {len(doubtful)} of {len(incoming)} decision(s) were tuned under other "
              "versions or hardware (--force imports them anyway)", file=sys.stderr)
        return 1
    standing = [_standing(_root(args) / item.path, item) for item in incoming]
    differing = [item.path for item, stands in zip(incoming, standing, strict=True) if stands == DIFFERENT]
    if differing and not args.force:
        print(f"triton-dist-tune: refused: {len(differing)} of {len(incoming)} decision(s) would replace a different "
              f"decision already in {_root(args)} ({', '.join(differing[:3])}{', ...' if len(differing) > 3 else ''};"
              " --force replaces them)", file=sys.stderr)
        return 1
    # the same choice where the cache's record is newer, or finished where the bundle's is provisional: kept
    better = [] if args.force else [item for item, stands in zip(incoming, standing, strict=True)
                                    if stands in (NEWER, FINISHED)]
    try:
        done = bundles.write_incoming(_root(args), [item for item in incoming if item not in better])  # all or none
    except OSError as exc:
        raise dec.CacheError(f"could not import into {_root(args)} ({type(exc).__name__}: {exc}); nothing was "
                             "imported") from None
    if done.tidied:
        print(f"triton-dist-tune: removed {len(done.tidied)} temporary file(s) of decision writes cut short (a process "
              f"killed while it wrote them, such as {done.tidied[0]}; never read)", file=sys.stderr)
    if args.json:  # "imported": every decision of the bundle, now in the cache (written or there already)
        _emit_json({"imported": [str(p) for p in done.held], "mismatched": [i.path for i in doubtful],
                    "kept": [item.path for item in better],
                    **{part: [str(p) for p in getattr(done, part)] for part in ("new", "replaced", "unchanged")}})
    else:
        kept = (f"; {len(better)} of the same choice left as they were, the cache's newer or finished (--force "
                "replaces them)" if better else "")
        print(import_text(done, _root(args)) + kept + (f" ({len(doubtful)} despite mismatches)" if doubtful else ""))
    return 0


def import_text(done: bundles.Imported, root: Path) -> str:
    """What an import did, in one line: how many decisions it wrote, new or over the one there, and how many it
    found there already, identical, and left as they were (importing one bundle twice writes nothing the second
    time)."""
    if not done.held:
        return f"nothing imported into {root}: the bundle holds no decision"
    if not done.written:
        return (f"nothing imported into {root}: the bundle's {len(done.unchanged)} decision(s) are there already, "
                "identical (left as they were)")
    parts = [f"{len(done.new)} new", f"{len(done.replaced)} replacing the decision that was there"]
    if done.unchanged:
        parts.append(f"{len(done.unchanged)} there already, identical (left as they were)")
    return f"imported {len(done.written)} decision(s) into {root} ({'; '.join(parts)})"


#: how the decision the cache holds stands against the bundle's (:func:`_standing`): another choice (refused without
#: ``--force``), or the same choice that the cache keeps without ``--force``: tuned later, or finished where the
#: bundle's is provisional
DIFFERENT, NEWER, FINISHED = "different", "newer", "finished"


def _standing(path: Path, item: bundles.Incoming) -> str | None:
    """How the decision the cache holds at ``path`` stands against the bundle's: :data:`DIFFERENT` (another choice,
    or an unreadable file), :data:`FINISHED` (the bundle's is provisional, the one there not), :data:`NEWER` (the
    one there was tuned later, both finished or both provisional: its ``created`` time), else None (no file there,
    or the bundle's may replace it: a finished one replaces a provisional one whatever their times)."""
    if not path.exists():
        return None
    try:
        mine = json.loads(read_regular(path, dec.MAX_ENTRY_BYTES))  # a FIFO there: refused, never waited on
    except (OSError, ValueError, RecursionError):
        return DIFFERENT
    theirs = item.entry.raw
    if not isinstance(mine, dict) or (mine.get("index"), mine.get("config")) != (theirs.get("index"),
                                                                                 theirs.get("config")):
        return DIFFERENT
    if (theirs.get("provisional") is True) != (mine.get("provisional") is True):  # finished wins, whatever its age
        return FINISHED if theirs.get("provisional") is True else None
    times = (_time(mine.get("created")), _time(theirs.get("created")))
    return NEWER if None not in times and times[0] > times[1] else None


def _time(value: object) -> float | None:
    """A recorded time (a number, not a bool), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
