"""The races' samples of a tuning's decisions, kept and read: does a settled block's first sample tell a tile whose
time flips between two levels? At MoE M = 32 on one H200 it read 1.052-1.093 of the block's median for the two
bistable tiles in 11 of 13 races and 0.990-1.002 for the stable leaders in 18 of 18 (``results/session_h200_22``,
call 4; docs/search.md, "Output placements"). Whether it fires at other shapes needs their blocks' samples: every
decision in the cache keeps each raced config's group time per round (``round_times``), and ``validate_search.py``
keeps them in its rows (``raced``).

- ``collect DIR OUT``: from every decision file under DIR (a cache folder, e.g. ``$HOME/.triton_dist/autotune``),
  the configs with at least :data:`MIN_ROUNDS` rounds (the finalists of a search, the leaders of a race): key,
  clock, config and round times, into OUT (JSON; ``benchmarks/gpu/_campaign.sh`` keeps one per campaign run).
- ``report FILE [...] [--settled-from K]``: from such files, or from ``validate_search.py``'s output (each row's
  ``raced``), per key, for each config that ran every round of its race, its first settled round (round K; a
  search's finalists race 2 screening rounds, then settle: the rank log's ``settled from 3``) over the median of
  its settled rounds, those over :data:`FLAG` marked, and how many of all.

Launch: ``python benchmarks/race_samples.py collect DIR OUT`` / ``python benchmarks/race_samples.py report FILE ...``
(CPU only: it reads files).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

#: a config raced this many rounds or more is kept (a finalist's settled block; one screening sample is not)
MIN_ROUNDS = 4
#: a first round this far over the median is marked
FLAG = 1.03


def collect(folder: Path) -> list[dict[str, Any]]:
    """Every decision under ``folder`` with the configs it raced :data:`MIN_ROUNDS` rounds or more."""
    kept = []
    for path in sorted(folder.rglob("*.json")):
        try:
            decision = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(decision, dict) or not isinstance(decision.get("measurements"), list):
            continue
        raced = [{"index": m.get("index"), "config": m.get("config"), "state": m.get("state"),
                  "round_times": m["round_times"]}
                 for m in decision["measurements"]
                 if isinstance(m, dict) and len(m.get("round_times") or []) >= MIN_ROUNDS]
        if raced:
            kept.append({"function": decision.get("function"), "key": str(decision.get("key")),
                         "clock": decision.get("clock"), "rounds": decision.get("rounds"),
                         "chosen": decision.get("index"), "raced": raced})
    return kept


def decisions_in(data: Any) -> list[dict[str, Any]]:
    """The decisions of a ``collect`` file, or those of ``validate_search.py``'s output (its rows', in that form)."""
    if isinstance(data, list):
        return data
    return [{"function": data.get("family"), "key": f"M={row['m']} tuning {row['tuning']}", "clock": row.get("clock"),
             "rounds": row.get("rounds"), "chosen": row.get("choice"),
             "raced": [{"index": text, "round_times": times} for text, times in row.get("raced", {}).items()]}
            for row in data.get("rows", [])]


def report(files: list[Path], settled_from: int) -> None:
    """Print each raced config's first settled round over its settled median, per key (see the module docstring)."""
    flagged = total = 0
    for path in files:
        for decision in decisions_in(json.loads(path.read_text())):
            marks = []
            for config in decision["raced"]:
                times = config["round_times"][settled_from - 1:]
                if len(config["round_times"]) != decision["rounds"] or len(times) < MIN_ROUNDS:
                    continue  # it left the race, or too few settled rounds
                ratio = times[0] / statistics.median(times)
                total += 1
                flagged += ratio > FLAG
                chosen = "*" if config["index"] == decision["chosen"] else ""
                marks.append(f"{config['index']}{chosen} {ratio:.3f}{' !' if ratio > FLAG else ''}")
            print(f"{path.name} {decision['function']} {decision['key']} ({decision['clock']}): {', '.join(marks)}")
    print(f"first settled round over {FLAG} of the settled median: {flagged} of {total} configs that ran every round")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("folder", type=Path)
    c.add_argument("out", type=Path)
    r = sub.add_parser("report")
    r.add_argument("files", type=Path, nargs="+")
    r.add_argument("--settled-from", type=int, default=3, help="the race's first settled round (from 1)")
    args = p.parse_args()
    if args.command == "collect":
        args.out.write_text(json.dumps(collect(args.folder)))
    else:
        report(args.files, args.settled_from)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
