"""What a search stage's graces cost a campaign, and what another grace would have cost and deferred.

On one rank, a stage whose other configs are warmed up waits up to ``STRAGGLER_GRACE_S`` (0.25 s) for the next
compile among those still running, then defers them to a later stage (``triton_dist_tune/measure/warm_order.py``).
The rank log has a line per grace (``grace: S s for N config(s) compiling (I ...): one ended|deferred``, from
the thirty-fifth session's library on) and a line per compile (``compile of config I: S s (...)``, logged when it
ends). For each log this script prints the graces (ended, deferred, their seconds), then for each grace ``G`` of
``--graces`` (each 0.05 s or more: a grace that ended sooner is not logged, ``GRACE_LOGGED_FROM_S``): the seconds
the graces would have waited (a grace that ended after ``w`` s waits ``min(w, G)``; one that deferred waits ``G``)
and how many stages would have deferred. A deferred stage's grace is counted as deferred under a longer ``G`` too,
unless a compile of one of its configs ended within ``G`` of the grace's start (read from the compile lines). Then
the keys whose graces waited longest. First order only: a grace of another length shifts everything after it.

What it does not say: what a deferral costs the search (its config is screened a stage later; the search's
choices under deferral are replayed by ``benchmarks/replay_deferral.py``).

Launch: ``python benchmarks/grace_events.py LOG [LOG ...] [--graces 0.05,0.1,0.15,0.25,0.5]``, each LOG a
``campaign_rank.log.gz`` or a plain rank log. CPU only.
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
KEY = re.compile(r"key=\(+(\d+),")
GRACE = re.compile(r"\] grace: ([0-9.]+) s for \d+ config\(s\) compiling \(([\d .]+)\): (one ended|deferred)")
COMPILE = re.compile(r"\] compile of config (\d+): ([0-9.]+) s \(")


@dataclass
class Grace:
    """One grace: when it began (s), its key, the configs it waited for, its seconds, and whether one ended."""

    began: float
    key: str
    pending: list[int]
    seconds: float
    ended: bool
    #: for a deferral: seconds from the grace's start to the first end of a pending config's compile (None: none
    #: logged after it)
    next_end: float | None = None


@dataclass
class Log:
    """A log's graces, and each config's compile end times (s)."""

    graces: list[Grace] = field(default_factory=list)
    ends: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read(path: Path) -> Log:
    """The graces and compile ends of one rank log."""
    opener = gzip.open if path.suffix == ".gz" else open
    log = Log()
    with opener(path, "rt", errors="replace") as lines:
        for line in lines:
            stamp = STAMP.match(line)
            if stamp is None:
                continue
            at = _seconds(stamp[1])
            if m := GRACE.search(line):
                key = KEY.search(line)
                pending = [int(i) for i in m[2].replace("...", "").split()]
                log.graces.append(Grace(at - float(m[1]), key[1] if key else "?", pending, float(m[1]),
                                        m[3] == "one ended"))
            elif m := COMPILE.search(line):
                log.ends[int(m[1])].append(at)
    for grace in log.graces:
        if not grace.ended:
            after = [t - grace.began for i in grace.pending for t in log.ends.get(i, []) if t > grace.began]
            grace.next_end = min(after) if after else None
    return log


def under(log: Log, g: float) -> tuple[float, int]:
    """Seconds the graces would have waited with a grace of ``g``, and the stages that would have deferred."""
    seconds, deferred = 0.0, 0
    for grace in log.graces:
        wait = grace.seconds if grace.ended else grace.next_end
        if wait is not None and wait <= g:
            seconds += wait
        else:
            seconds += g
            deferred += 1
    return seconds, deferred


def report(path: Path, graces: list[float]) -> str:
    log = read(path)
    if not log.graces:
        return f"{path}: no grace lines (a library before the thirty-fifth session's?)"
    ended = [g for g in log.graces if g.ended]
    deferred = [g for g in log.graces if not g.ended]
    waits = sorted(g.seconds for g in ended)
    lines = [f"{path}: {len(log.graces)} graces, {sum(g.seconds for g in log.graces):.2f} s; "
             f"{len(ended)} ended ({sum(waits):.2f} s, median {waits[len(waits) // 2] if waits else 0:.3f} s), "
             f"{len(deferred)} deferred ({sum(g.seconds for g in deferred):.2f} s)"]
    later = sorted(g.next_end for g in deferred if g.next_end is not None)
    if later:
        lines.append(f"  deferred: the first pending compile ended {later[0]:.2f} / {later[len(later) // 2]:.2f} / "
                     f"{later[-1]:.2f} s (min / median / max) after the grace began; "
                     f"{len(deferred) - len(later)} with no compile line after it")
    for g in graces:
        seconds, stages = under(log, g)
        lines.append(f"  grace {g:.2f} s: {seconds:.2f} s waited, {stages} stage(s) deferring")
    by_key: dict[str, float] = defaultdict(float)
    for grace in log.graces:
        by_key[grace.key] += grace.seconds
    top = sorted(by_key.items(), key=lambda kv: -kv[1])[:4]
    lines.append("  keys waiting longest in graces: " + ", ".join(f"{k} {s:.2f} s" for k, s in top))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--graces", default="0.05,0.1,0.15,0.25,0.5",
                        help="the graces to weigh, in seconds (each 0.05 or more), comma-separated")
    args = parser.parse_args()
    graces = [float(g) for g in args.graces.split(",")]
    for path in args.logs:
        print(report(path, graces))


if __name__ == "__main__":
    main()
