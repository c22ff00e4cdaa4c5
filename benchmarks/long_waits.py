"""Which configs a campaign's search stages waited long for, and how each then read against its key's choice.

A stage's warm-up line (``warm-up: N config(s) in S s``) of few configs and many seconds is a wait for compiles;
the config measured right after it is the one waited for. For each such wait: the key, the seconds, the config and
its time over the time of the config the key chose (its ``decision`` line).

Launch: ``python benchmarks/long_waits.py LOG [LOG ...] [--seconds 1.0] [--configs 2]``, each LOG a rank log
(``campaign_rank.log.gz`` or plain) as ``benchmarks/gpu/_campaign.sh`` leaves it. One line per wait, then a count.
"""

from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

KEY = re.compile(r"key=\((\d+),")
WARM = re.compile(r"warm-up: (\d+) config\(s\) in ([0-9.]+) s")
#: a config's time on this rank, in the rank log's words before and after they said what each time is
MEASURED = re.compile(r"config (\d+) measured: (?:own |group time .*?; this rank's own time )([0-9.]+) ms")
DECISION = re.compile(r"decision: config (\d+) .*?group time ([0-9.]+) ms")


def waits(log: Path, seconds: float, configs: int) -> list[tuple[int, float, int, float]]:
    """(key, seconds waited, the config measured next, its time in ms) for each long wait of ``log``."""
    opener = gzip.open if log.suffix == ".gz" else open
    with opener(log, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    found = []
    for i, line in enumerate(lines):
        key, warm = KEY.search(line), WARM.search(line)
        if key is None or warm is None or int(warm.group(1)) > configs or float(warm.group(2)) < seconds:
            continue
        for after in lines[i + 1:i + 8]:
            if (measured := MEASURED.search(after)) is not None:
                found.append((int(key.group(1)), float(warm.group(2)), int(measured.group(1)),
                              float(measured.group(2))))
                break
    return found


def chosen(log: Path) -> dict[int, float]:
    """Each key's chosen config's time (ms)."""
    opener = gzip.open if log.suffix == ".gz" else open
    times = {}
    with opener(log, "rt", errors="replace") as f:
        for line in f:
            if (key := KEY.search(line)) is not None and (decision := DECISION.search(line)) is not None:
                times[int(key.group(1))] = float(decision.group(2))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--seconds", type=float, default=1.0, help="the least wait counted (default 1.0)")
    parser.add_argument("--configs", type=int, default=2, help="the most configs in the waiting warm-up (default 2)")
    args = parser.parse_args()
    ratios = []
    for log in args.logs:
        best = chosen(log)
        for key, waited, index, ms in waits(log, args.seconds, args.configs):
            ratio = ms / best[key] if key in best else float("nan")
            ratios.append(ratio)
            print(f"{log}: key {key}: waited {waited:.2f} s for config {index}, then {ratio:.2f} x the choice")
    if ratios:
        print(f"{len(ratios)} wait(s); the config read {min(ratios):.2f}-{max(ratios):.2f} x its key's choice")


if __name__ == "__main__":
    main()
