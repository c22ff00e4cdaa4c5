"""What the subcommands share: the usage error, tables and numbers as text, the entries selected, key order."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import settings
from ..disk import decisions as dec
from ..disk.files import not_regular
from ..disk.versions import cut_records, recorded_versions, versions
from ..errors import BadInputError

#: what a superseded decision is, said wherever one is named
SUPERSEDED_NOTE = ("a newer decision of the same function and key was tuned for another config space or source: the "
                   "tuner never serves it again")


class UsageError(Exception):
    """A problem to report in one line with exit status 2."""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _pct(value: float | None, sign: str = "+") -> str:
    return f"{sign}{100 * value:.1f}%" if value is not None else "-"


def _versions_text(entry: dec.Entry, now: dict[str, str]) -> str:
    """``current``, or what differs: ``triton 3.6.0 (now 3.5.1)``."""
    differ = [f"{k} {entry.versions.get(k, '-')} (now {now.get(k, '-')})"
              for k in sorted(set(now) | set(entry.versions)) if entry.versions.get(k) != now.get(k)]
    return "current" if not differ else "STALE: " + ", ".join(differ)


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=1, allow_nan=False, default=str))


class Unexportable(dec.CacheError):
    """A decision that cannot go into a bundle: it holds a value standard JSON has no (NaN, Infinity)."""


def _warn_problems(problems: Sequence[dec.CacheError]) -> int:
    """Say each unreadable file on stderr, and in one line the files that are not this library's (another program's
    JSON, such as Triton-distributed's autotuner writes into the same default folder); the exit status: 1 when some
    file of this library's was skipped, else 0 (another program's files are no fault of the cache: a folder shared
    with Triton-distributed lists with status 0)."""
    foreign = [problem for problem in problems if isinstance(problem, dec.ForeignFile)]
    _say_foreign(foreign)
    problems = [problem for problem in problems if problem not in foreign]
    status = 1 if problems else 0
    for problem in problems:
        print(f"triton-dist-tune: skipped {problem}", file=sys.stderr)
    links = sum(isinstance(problem, dec.LinkOut) for problem in problems)
    unexportable = sum(isinstance(problem, Unexportable) for problem in problems)
    # an unreadable file is clear's to remove only where it is named as the tuner names its files
    theirs = sum(not isinstance(problem, (dec.LinkOut, Unexportable)) and problem.path is not None
                 and not dec.tuner_named(Path(problem.path)) for problem in problems)
    unreadable = len(problems) - links - unexportable - theirs
    folders = sorted({Path(p.path).parent.name for p in problems if not isinstance(p, (dec.LinkOut, Unexportable))
                      and p.path is not None and dec.tuner_named(Path(p.path))})
    parts = [f"{unreadable} unreadable ({_removed_by(folders)})"] if unreadable else []
    if theirs:
        parts.append(f"{theirs} unreadable and not named as this library's files (clear never removes such a file: "
                     "delete it yourself if it is no other program's)")
    if links:
        parts.append(f"{links} link(s) out of the cache folder (never followed nor deleted by the command line: "
                     "remove a link yourself)")
    if unexportable:
        parts.append(f"{unexportable} holding NaN or Infinity, which a bundle (standard JSON) cannot hold")
    if problems:
        print(f"triton-dist-tune: {len(problems)} file(s) skipped: {'; '.join(parts)}", file=sys.stderr)
    return status


def _removed_by(folders: list[str]) -> str:
    """What removes the unreadable cache files of ``folders`` (their folders' names): ``clear --all``, ``clear
    --function`` of their folder (it removes every file of that folder named as the tuner names its files),
    ``clear --older-than`` by their age, or deleting them (never ``--stale`` nor ``--superseded``, which select
    decisions by what they hold)."""
    named = ", ".join(folders[:3]) + (", ..." if len(folders) > 3 else "")
    function = f"'clear --function {folders[0]}' (their folder)" if len(folders) == 1 else \
        f"'clear --function F' of their folder ({named})"
    return f"'clear --all', {function}, 'clear --older-than AGE' past their age, or deleting them removes them"


def _say_foreign(foreign: Sequence[dec.ForeignFile]) -> None:
    """One line for every file of ``foreign`` (JSON without this library's ``format`` field, not named as its
    decisions): whose they are, and that ``clear`` leaves them."""
    if not foreign:
        return
    whose = ("written by Triton-distributed's autotuner (triton_dist.tune), which shares the default cache folder"
             if all(f.triton_dist for f in foreign) else "written by another program (Triton-distributed's autotuner "
             "writes such files into the default cache folder, which it shares with this library)")
    print(f"triton-dist-tune: skipped {len(foreign)} file(s) that are not this library's (JSON without its "
          f"'format' field: {whose}), such as {foreign[0].path}; clear leaves them", file=sys.stderr)


def say_cut_writes(root: Path, function: str | None) -> None:
    """One line on stderr for the temporary files of decision writes cut short (:func:`~..disk.entries.cut_writes`)
    of the folder (of ``function``'s folder only, where given), and, without ``function``, one for those of the
    folder's versions record (:func:`~..disk.versions.cut_records`): never read, and removed by ``clear``."""
    folders = sorted({p.parent for p in root.glob(f"*/{dec.WRITE_TMP_GLOB}") if function in (None, p.parent.name)})
    cut = [p for folder in folders for p in dec.cut_writes(folder) if dec.inside(root, p)]
    if cut:
        print(f"triton-dist-tune: {len(cut)} temporary file(s) of decision writes cut short (a process killed while "
              f"it wrote a decision, a tuning's or an import's, such as {cut[0]}): never read; 'clear --all' or "
              "'clear --function F' removes them", file=sys.stderr)
    records = [p for p in cut_records(root) if dec.inside(root, p)] if function is None else []
    if records:
        print(f"triton-dist-tune: {len(records)} temporary file(s) of versions-record writes cut short (a process "
              f"killed while it wrote the folder's record of the installed versions, such as {records[0]}): never "
              "read; 'clear --all' or the next decision written removes them", file=sys.stderr)


def _check_age(text: str | None) -> None:
    """``--older-than``'s check: an age ``parse_age`` reads, else a :class:`UsageError` that says what is."""
    try:
        if text is not None:
            dec.parse_age(text)
    except ValueError:
        raise UsageError(f"--older-than wants an age: a number with s, m, h, d or w (30m, 12h, 7d, 2w), not "
                         f"{text!r}") from None


def _root(args: argparse.Namespace) -> Path:
    """``--cache-dir``, else the folder ``TRITON_DIST_AUTOTUNE_CACHE_DIR`` or the home folder names (no other
    variable read: a malformed timeout does not stop ``list``); no home folder is one line, naming what to set."""
    if args.cache_dir:
        return Path(args.cache_dir)
    try:
        return settings.cache_folder()
    except BadInputError as exc:
        raise dec.CacheError(f"{exc}, or pass --cache-dir") from None


def _now_versions(args: argparse.Namespace, display: bool = False) -> dict[str, str]:
    """The versions this process runs: for a read-only display (``display``), the cache folder's record of them
    (:func:`~triton_dist_tune.disk.versions.recorded_versions`: no torch import); else read exactly."""
    return recorded_versions(_root(args)) if display else versions()


def _selected(args: argparse.Namespace, display: bool = False
              ) -> tuple[list[dec.Entry], list[dec.CacheError], dict[Path, dec.Entry]]:
    """The decisions the arguments select (``--stale``: against :func:`_now_versions`; ``--superseded``), the cache
    files that could not be read, and every superseded decision of the folder with the one that supersedes it
    (:func:`~triton_dist_tune.disk.decisions.superseded`)."""
    entries, problems = dec.scan(_root(args))
    older = dec.parse_age(args.older_than) if getattr(args, "older_than", None) else None
    stale = getattr(args, "stale", False)
    current = _now_versions(args, display) if stale else None
    check_function(_root(args), getattr(args, "function", None), entries)
    chosen = dec.select(entries, getattr(args, "function", None), stale, older, current=current)
    replaced = dec.superseded(entries)
    if getattr(args, "superseded", False):
        chosen = [e for e in chosen if e.path in replaced]
    return chosen, problems, replaced


def check_function(root: Path, function: str | None, entries: list[dec.Entry]) -> None:
    """Raise :class:`UsageError` when ``--function`` names no function of the cache folder ``root``: none of
    ``entries`` (every readable decision there) is of it (by name, folder or the heading ``list`` shows) and no
    folder of ``root`` is called so (a function with only unreadable files or journals left is one). The error
    names the functions ``list`` shows: the shared folder ``contextual`` is none (its ``clear`` would remove every
    contextual function's decisions)."""
    if function is None or dec.select(entries, function) or _function_folder(root, function):
        return
    known = sorted({e.heading for e in entries})
    raise UsageError(f"no function {function!r} in {root}" + (f" (functions: {', '.join(known[:10])}"
                                                               f"{', ...' if len(known) > 10 else ''})"
                                                               if known else ""))


def check_target(path: Path, root: Path, what: str = "file") -> None:
    """Raise :class:`UsageError` when ``export`` may not write ``path`` (a ``what``: the bundle file, vLLM's file or
    the folder for it): a place inside the cache folder ``root`` (a bundle would replace a decision), or something
    there that is no regular file (a FIFO, a device, a link: the write would replace it by a regular file)."""
    if dec.inside(root, path):
        raise UsageError(f"{path} is inside the cache folder {root}: export writes the {what} outside it")
    other = not_regular(path) if what != "folder" else None
    if other is not None:
        raise UsageError(f"{path} is {other}, not a regular file: export would replace it (name a new or regular "
                         f"file{', not a link to it' if other.startswith('a symbolic link') else ''})")


def _function_folder(root: Path, name: str) -> bool:
    """Whether ``name`` is the plain name of a folder directly in the cache folder ``root`` (not ``''``, ``.``,
    ``..``, nor a path: ``moe/`` or ``moe/..`` name ``root`` or a folder of a function spelled otherwise)."""
    plain = name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
    return plain and (root / name).is_dir() and dec.inside(root, root / name)


def gpu_text(entry: dec.Entry) -> str:
    """The GPU a decision was tuned on as ``list`` shows it: ``H200 x8`` for 8 NVIDIA H200."""
    return entry.gpu.removeprefix("NVIDIA ") + (f" x{entry.gpu_count}" if entry.gpu_count else "")


def superseded_text(entry: dec.Entry, newer: dec.Entry) -> str:
    """``by <name> (tuned <age> later)``: the decision that supersedes ``entry``."""
    return f"by {newer.name} (tuned {dec.age_text(max(0.0, newer.created - entry.created))} later)"


def key_order(text: str) -> tuple[Any, ...]:
    """A sort key that orders the numbers inside a key's text by value: ``(64, ...)`` before ``(128, ...)``."""
    return tuple((0, float(part), "") if re.fullmatch(r"-?\d+(?:\.\d+)?", part) else (1, 0.0, part)
                 for part in re.findall(r"-?\d+(?:\.\d+)?|[^\d-]+|-", text))


def at_least_one(whole: str, least: str) -> Callable[[str], int]:
    """An argparse type: a whole number (``whole`` names it in the error), at least 1 (``least`` says why), checked
    before any rank starts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {whole}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value}: {least}")
        return value

    return parse
