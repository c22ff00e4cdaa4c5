"""The command line: ``triton-dist-tune`` / ``python -m triton_dist_tune``, over the cache, its journals and the logs.

Subcommands: ``list``, ``show``, ``plot``, ``clear``, ``export`` and ``import`` (:mod:`.bundles`; ``--format
vllm-moe`` and ``sglang-moe``: :mod:`.moe_export`), ``logs`` (:mod:`.runs`), ``campaign`` (see :mod:`.campaign`).
Data goes to stdout (as text, or as JSON with ``--json``); a problem is one line on stderr and exit status 2 (1 for
``import`` refused over mismatching versions or different decisions already in the cache, and for ``list``,
``plot`` and ``export`` that skipped unreadable cache files; ``campaign``'s own ends: :mod:`.campaign`).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..disk import decisions as dec
from ..disk import logs
from ..disk.logs import LEAST_NOTE, ms_text, text_table, time_heading
from ..faults.unfinished import find_unfinished, journals_of, unfinished
from ..records import LEAST
from . import bundles, campaign, clear, journals, moe_export, runs
from .common import (
    SUPERSEDED_NOTE,
    UsageError,
    _check_age,
    _clip,
    _emit_json,
    _now_versions,
    _pct,
    _root,
    _selected,
    _versions_text,
    _warn_problems,
    check_function,
    gpu_text,
    key_order,
    say_cut_writes,
    superseded_text,
)
from .options import LeadingOption, add_leading, leading_options, merge_leading

# -- list / show -----------------------------------------------------------------------------------------------


#: the widest line ``list`` prints
LIST_WIDTH = 120
#: what the mark after a time in ``list`` means (its decision's times are least samples: :data:`~..disk.logs.
#: LEAST_NOTE`, which ``show`` says, heading its time column "least ms")
LEAST_MARK = "*"
#: what ``local`` under ranks means (a rank-local campaign's decision), said under any table that shows it
RANK_LOCAL_NOTE = ("ranks 'local': tuned by one rank alone (a rank-local campaign) for every rank of its group; 'show "
                   "NAME' says which")
#: what the mark before a margin means, said under any table that shows it
NEAR_TIE_NOTE = ("~ before a margin: the runner-up is within the measured noise (a near tie: either config is about "
                 "as fast)")


def _heading(entry: dec.Entry) -> str:
    """What ``list`` groups an entry under: its function, and for ``contextual_autotune`` its kernel."""
    return entry.heading


def _fit(rows: list[list[str]], header: list[str], shrink: tuple[int, int], width: int) -> list[int]:
    """Column widths for ``rows`` such that a line (two spaces between columns, two before the first) fits
    ``width``: the two columns ``shrink`` names (key, config) give up characters, the key first."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    over = 2 + sum(widths) + 2 * (len(widths) - 1) - width
    key, config = shrink
    for column, floor in ((key, 20), (config, 24), (key, 12), (config, 12)):
        if over > 0:
            cut = min(over, max(0, widths[column] - floor))
            widths[column] -= cut
            over -= cut
    return widths


def cmd_list(args: argparse.Namespace) -> int:
    """``list``: one line per decision, grouped by function (and kernel), keys in numeric order, within
    :data:`LIST_WIDTH` columns (``show`` has every field whole)."""
    entries, problems, replaced = _selected(args, display=True)
    now, wall = _now_versions(args, display=True), time.time()
    filtered = args.stale or args.superseded
    cut_short = [t for t in unfinished(_root(args)) if not filtered and args.function in (None, t.function)]
    if args.json:
        _emit_json({"cache": str(_root(args)), "entries": [e.to_json(now, replaced.get(e.path)) for e in entries],
                    "unfinished": [journals.to_json(t) for t in cut_short], "problems": [str(p) for p in problems]})
        return 1 if problems else 0
    status = _warn_problems(problems)
    say_cut_writes(_root(args), args.function)
    if not entries:
        print(f"no decisions in {_root(args)}" + (" matching the filters" if args.function or filtered else ""))
        for text in journals.list_lines(cut_short, LIST_WIDTH):
            print(text)
        return status
    entries = sorted(entries, key=lambda e: (_heading(e), key_order(e.key), e.path.stem))
    header = ["name", "key", "chosen config", "ms", "margin", "ranks", "gpu", "versions", "age"]
    rows, stale, old = [], [], []
    for e in entries:
        gpu = gpu_text(e)
        versions = _versions_text(e, now)
        about = f"{e.path.stem[:8]} ({_heading(e)}, key {_clip(e.key, 40)})"
        if versions != "current":
            stale.append(f"{about}: {versions}")
        if e.path in replaced:
            old.append(f"{about}: SUPERSEDED {superseded_text(e, replaced[e.path])}")
        state = "SUPERSEDED" if e.path in replaced else "current" if versions == "current" else "STALE"
        rows.append([e.path.stem[:8], e.key, e.config, ms_text(e.time_ms) + _least_mark(e),
                     ("~" if e.near_tie else "") + _pct(e.margin), e.ranks_text, _clip(gpu, 12), state,
                     dec.age_text(wall - e.created)])
    widths = _fit(rows, header, (1, 2), LIST_WIDTH)

    def line(cells: list[str]) -> str:
        return ("  " + "  ".join(_clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True))).rstrip()

    print(line(header))
    heading = None
    for e, row in zip(entries, rows, strict=True):
        if _heading(e) != heading:
            heading = _heading(e)
            print(_clip(heading, LIST_WIDTH))
        print(line(row))
    for text in stale + old:
        print(_clip(text, LIST_WIDTH))
    print(f"{len(entries)} decision(s) in {_root(args)}; 'show NAME' for the whole table")
    if old:
        print(f"{len(old)} superseded decision(s) (an older config space or source: never served again); "
              "'clear --superseded' removes them")
    if any(e.near_tie for e in entries):
        print(NEAR_TIE_NOTE)
    if any(_least_mark(e) for e in entries):
        print(f"{LEAST_MARK} after ms: {LEAST_NOTE}")
    if any(e.rank_local is not None for e in entries):
        print(RANK_LOCAL_NOTE)
    for text in journals.list_lines(cut_short, LIST_WIDTH):
        print(text)
    return status


def _least_mark(entry: dec.Entry) -> str:
    """:data:`LEAST_MARK` after ``list``'s time of a decision whose times are least samples, else nothing."""
    return LEAST_MARK if entry.statistic == LEAST else ""


def _outcome_rows(entry: dec.Entry) -> list[list[str]]:
    rows = []
    everyone = list(range(entry.group_size or 0))
    for o in entry.measurements:
        # each time labelled with its rank only where some ranks alone met the key (a contextual decision's file
        # names the ranks whatever they were)
        some = o.per_rank_of and o.per_rank_of != everyone
        labels = [f"r{r}:" for r in o.per_rank_of] if some else [""] * len(o.per_rank or [])
        per_rank = " ".join(f"{label}{t:.4f}" for label, t in zip(labels, o.per_rank, strict=False)) \
            if o.per_rank else "-"
        mark = "->" if o.index == entry.index else ""
        rows.append([mark, str(o.index), ms_text(o.time), _pct(o.spread, "±"), per_rank, str(o.samples or "-"),
                     "untimed" if o.untimed and o.state == "measured" else o.state, o.config])
    return rows


def _named(args: argparse.Namespace, entries: list[dec.Entry] | None = None) -> dec.Entry:
    """The decision ``args.name`` names: a cache file's path, else a name from ``list``. A ``.json`` path that
    names neither is said to be no such file (not "no decision called")."""
    path = Path(args.name)
    if path.suffix == ".json" and path.is_file():
        return dec.read_entry(path)
    try:
        return dec.find(entries if entries is not None else dec.scan(_root(args))[0], args.name)
    except dec.AmbiguousName:
        raise
    except dec.CacheError:
        damaged = _damaged_named(args, args.name)
        if damaged is not None:  # a file of that name that is no decision: why, not "no decision called"
            raise damaged from None
        if path.suffix == ".json" and not path.exists():
            raise dec.CacheError(f"{args.name}: no such file (and no decision of that name in {_root(args)}; see "
                                 "the 'list' command for names)") from None
        raise


def _damaged_named(args: argparse.Namespace, name: str) -> dec.CacheError | None:
    """Why the one file of the cache folder that ``name`` names as :func:`~..disk.decisions.find` names a decision
    (``<function>/<file>``, its file name, or a unique prefix of it) is no decision (corrupt, malformed, another
    program's); None where no such file, or several, is named."""
    try:
        problems = dec.scan(_root(args))[1]
    except dec.CacheError:
        return None
    named = [p for p in problems if p.path is not None and (
        name in (p.path.name, p.path.stem, f"{p.path.parent.name}/{p.path.name}", f"{p.path.parent.name}/"
                 f"{p.path.stem}") or p.path.stem.startswith(name) or f"{p.path.parent.name}/{p.path.name}"
        .startswith(name))]
    return named[0] if len(named) == 1 else None


def _superseding(args: argparse.Namespace, entry: dec.Entry) -> dec.Entry | None:
    """The newer decision of the cache folder that supersedes ``entry``, if any (none when the folder is unreadable:
    ``show`` of a cache file's path works without one)."""
    try:
        entries = dec.scan(_root(args))[0]
    except dec.CacheError:
        entries = []
    same = next((e for e in entries if e.path.resolve() == entry.path.resolve()), None)
    if same is None:
        entries.append(same := entry)
    return dec.superseded(entries).get(same.path)


def cmd_show(args: argparse.Namespace) -> int:
    """``show``: one decision's whole table of measurements."""
    try:
        entry = _named(args)
    except dec.AmbiguousName:  # several decisions: said, naming them (no unfinished tuning stands in for one)
        raise
    except dec.CacheError:  # no decision of that name: a tuning never finished, whose journals are all there is?
        cut_short = find_unfinished(_root(args), args.name)
        if not cut_short:
            raise
        if len(cut_short) > 1:
            raise dec.CacheError(f"{args.name!r} names {len(cut_short)} unfinished tunings: "
                                 f"{', '.join(t.name for t in cut_short[:5])}") from None
        return journals.show(cut_short[0], args.json)
    now = _now_versions(args, display=True)
    newer = _superseding(args, entry)
    if args.json:
        _emit_json(entry.to_json(now, newer))
        return 0
    held = journals_of(entry.path)  # those holding its records, whatever their names
    facts = [
        ("file", str(entry.path)), ("function", entry.function + (f" (kernel {entry.kernel})" if entry.kernel else "")),
        ("key", entry.key), ("chosen", f"config {entry.index}: {entry.config}"),
        ("time", "not timed: the only config of the key's space after pruning, run once" if entry.untimed else
         f"{ms_text(entry.time_ms)} ms" + (f" ({entry.timing} timing)" if entry.timing else "")
         + (f"; {LEAST_NOTE}" if entry.statistic == LEAST else "")),
        ("margin", (f"{_pct(entry.margin)} over config {entry.runner_up}: chosen config "
                    + logs.faster_text(entry.margin, entry.runner_up).replace(f" than config {entry.runner_up}", "")
                    if entry.margin is not None else "-")
         + (" (a near tie: within the measurement's spread)" if entry.near_tie else "")),
        ("group", entry.rank_local.text() if entry.rank_local is not None else
         f"{entry.group_size or '?'} rank(s)" + (f" of group '{entry.group}'" if entry.group else "")
         + (f", replica 0 of {entry.replicas} tuned as one (autotune_replicas): serves each replica's group"
            if entry.replicas is not None else "")),
        ("gpu", f"{entry.gpu} x{entry.gpu_count}" if entry.gpu_count else entry.gpu),
        ("versions", _versions_text(entry, now)),
        ("tuned", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.created))
         + f" ({dec.age_text(time.time() - entry.created)} ago)"
         + (f" in {entry.tuning_seconds:.1f} s" if entry.tuning_seconds is not None else "")
         + (f", {entry.rounds} round(s)" if entry.rounds else "")),
        ("format", str(entry.format)),
    ]
    if entry.breakdown is not None:
        facts.insert(-1, ("time spent", entry.breakdown.text()))
    if entry.provisional:
        facts.insert(-1, ("provisional", "cut short by the time budget: the next job tunes this key again"))
    if newer is not None:
        facts.insert(-1, ("superseded", f"{superseded_text(entry, newer)}: {SUPERSEDED_NOTE} ('clear --superseded' "
                                        "removes it)"))
    if held:
        facts.append(("journals", ", ".join(p.name for p in held) + " (a tuning in flight or interrupted)"))
    width = max(len(k) for k, _ in facts)
    print("\n".join(f"{k.rjust(width)}: {v}" for k, v in facts))
    print()
    per_rank = "per rank median ms" if entry.statistic == LEAST else "per rank ms"  # each rank's own: its median
    print(text_table(["", "#", time_heading(entry.statistic), "spread", per_rank, "samples", "state", "config"],
                     _outcome_rows(entry)))
    failures = [o for o in entry.measurements if o.error]
    if failures:
        print("\nfailures:")
        for o in failures:
            print(f"  config {o.index} ({o.state}): {o.error}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """``plot``: a PNG of a decision, or of every decision of a function but the superseded ones."""
    try:
        from . import plots
    except ImportError as exc:
        raise UsageError(f"plot needs matplotlib ({exc}): pip install 'triton-dist-tune[plot]'") from None
    given = Path(args.name) if args.name else None
    skipped = 0
    if given is not None and given.suffix == ".json" and given.is_file():  # a cache file's path, as for 'show'
        chosen, problems = [dec.read_entry(given)], []
    elif args.name:
        entries, problems = dec.scan(_root(args))
        chosen = [_named(args, entries)]
    else:
        entries, problems = dec.scan(_root(args))
        every, replaced = dec.select(entries, args.function), dec.superseded(entries)
        chosen = [e for e in every if e.path not in replaced]  # as export: superseded ones are never served again
        skipped = len(every) - len(chosen)
        if not chosen:  # a function unknown there is named as list and export name it, with the functions there
            check_function(_root(args), args.function, entries)
            raise UsageError(f"no decisions of function {args.function!r} in {_root(args)}")
    status = _warn_problems(problems)
    if skipped:
        print(f"triton-dist-tune: skipped {skipped} superseded decision(s) ({SUPERSEDED_NOTE})", file=sys.stderr)
    out = Path(args.output) if args.output else Path(
        f"{chosen[0].path.parent.name}{'-' + chosen[0].path.stem[:12] if len(chosen) == 1 else ''}.png")
    blocked = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:  # mkdir would say only 'File exists'
        raise UsageError(f"cannot write {out}: {blocked} is a file, not a folder")
    if out.is_dir():  # it wrote FOLDER.png beside it
        raise UsageError(f"cannot write {out}: it is a folder (name a file in it, as -o {out / 'NAME.png'})")
    path = plots.plot_decision(chosen[0], out) if len(chosen) == 1 else plots.plot_function(chosen, out)
    print(path)
    return status


# -- parsing ---------------------------------------------------------------------------------------------------


def parser(leading: tuple[LeadingOption, ...] | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``triton-dist-tune``; ``leading``: the options it takes before the command as well
    (:func:`~.options.leading_options`, each told here which commands take it)."""
    leading = leading_options() if leading is None else leading
    cache = argparse.ArgumentParser(add_help=False)
    cache.add_argument("--cache-dir", help="the cache folder (default: TRITON_DIST_AUTOTUNE_CACHE_DIR or "
                       "~/.triton_dist/autotune)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON for scripts")
    main = argparse.ArgumentParser(prog="triton-dist-tune", description="See and manage what triton_dist_tune "
                                   "decided: the disk cache of decisions, its journals, and the per-rank logs.")
    add_leading(main, leading)
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[cache, as_json], help="list the decisions")
    p.add_argument("--function", help="only this function's decisions")
    p.add_argument("--stale", action="store_true", help="only decisions tuned under other software versions")
    p.add_argument("--superseded", action="store_true", help="only decisions superseded by a newer one of the same "
                   "key, tuned for another config space or source")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser("show", parents=[cache, as_json], help="one decision's whole table of measurements")
    p.add_argument("name", help="a name from 'list' (a unique prefix will do) or a cache file's path")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("plot", parents=[cache], help="a PNG of a decision, or of every decision of a function")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("name", nargs="?", help="a decision's name (see 'list')")
    what.add_argument("--function", help="every decision of this function, across keys")
    p.add_argument("-o", "--output", help="the PNG file to write (default: in the current folder)")
    p.set_defaults(run=cmd_plot)

    p = sub.add_parser("clear", parents=[cache, as_json], help="remove decisions and their journals")
    p.add_argument("--all", action="store_true", help="every decision and journal")
    p.add_argument("--function", help="only this function's")
    p.add_argument("--older-than", metavar="AGE", help="only those older than AGE (30m, 12h, 7d, 2w)")
    p.add_argument("--stale", action="store_true", help="only those tuned under other software versions")
    p.add_argument("--superseded", action="store_true", help="only those superseded by a newer decision of the same "
                   "key, tuned for another config space or source")
    p.add_argument("--unfinished", action="store_true", help="only the journals of tunings never finished (a cut "
                   "tuning of a group that will not run again, e.g. after the world size changed), no decision; a "
                   "journal of a decision's tuning again is kept (clear of the decision removes it)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(run=clear.cmd_clear)

    p = sub.add_parser("export", parents=[cache, as_json], help="write decisions into one bundle file (or vLLM's "
                       "or SGLang's fused-MoE config file: --format vllm-moe, sglang-moe)")
    p.add_argument("bundle", help="the bundle file to write (--format vllm-moe: the folder to write into; "
                   "sglang-moe: the folder SGLANG_MOE_CONFIG_DIR names, the file goes into its configs/triton_X_Y_Z/)")
    p.add_argument("--function", help="only this function's decisions")
    p.add_argument("--stale", action="store_true", help="only decisions tuned under other software versions")
    moe_export.add_arguments(p)
    p.set_defaults(run=bundles.cmd_export)

    p = sub.add_parser("import", parents=[cache, as_json], help="add a bundle's decisions to the cache")
    p.add_argument("bundle", help="a file written by 'export'")
    p.add_argument("--force", action="store_true", help="import decisions tuned under other versions or hardware, "
                   "and replace different, newer or finished decisions already in the cache")
    p.set_defaults(run=bundles.cmd_import)

    p = sub.add_parser("logs", parents=[as_json], help="one job's per-rank logs merged into one timeline")
    p.add_argument("job", nargs="?", help="a job's name (or prefix), or a log folder; default: the latest job")
    p.add_argument("--log-dir", help="the log folder (default: TRITON_DIST_AUTOTUNE_LOG_DIR or ./.autotune_logs)")
    p.add_argument("--list", action="store_true", help="list the jobs instead")
    p.add_argument("--rank", type=int, help="only this rank's records")
    p.set_defaults(run=runs.cmd_logs)
    campaign.add_parser(sub)
    for option in leading:  # the commands that take each option, as their parsers have it
        option.commands.update(name for name, command in sub.choices.items() if _takes(command, option))
        option.otherwise.update(name for name, command in sub.choices.items() if name not in option.commands
                                and option.flag in command._option_string_actions)
    return main


def _takes(command: argparse.ArgumentParser, option: LeadingOption) -> bool:
    """Whether ``command`` takes ``option`` as it means before the command: a switch as a switch (``list --json``,
    not ``campaign --json FILE``), an option with a value as one."""
    return any(option.flag in a.option_strings and (a.nargs == 0) == option.flag_only for a in command._actions)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    leading = leading_options()
    commands = parser(leading)
    args = merge_leading(commands, commands.parse_args(argv), leading)
    try:
        _check_age(getattr(args, "older_than", None))
        return args.run(args)
    except (dec.CacheError, UsageError, campaign.LoadError) as exc:
        return _refuse(args, f"triton-dist-tune: {exc}")
    except ValueError as exc:  # a bad --older-than
        return _refuse(args, f"triton-dist-tune: bad value: {exc}")
    except BrokenPipeError:  # `... | head`
        return 0
    except OSError as exc:  # a read-only or full folder, a file that vanished: one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"triton-dist-tune: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _refuse(args: argparse.Namespace, text: str) -> int:
    """Say ``text`` in one line on stderr; exit status 2. A campaign's rank started by torchrun also leaves it in
    torchrun's error file, which torchrun's report of the failed ranks shows instead of its hint on tracebacks."""
    print(text, file=sys.stderr)
    if args.command == "campaign":
        campaign.tell_torchrun(text)
    return 2


def run() -> None:
    """The console script's entry point (and ``python -m triton_dist_tune``'s)."""
    for stream in (sys.stdout, sys.stderr):  # text read from files (JSON's "\ud800": a lone surrogate) is shown
        if isinstance(stream, io.TextIOWrapper):  # escaped: it made 'list', 'show' and 'logs' fail whole
            try:  # (only here: main() called from a user's process, a campaign's rank, leaves its streams alone;
                stream.reconfigure(errors="backslashreplace")  # reconfiguring one mid-write raised "Illegal seek")
            except (OSError, ValueError):
                pass
    sys.exit(main())

