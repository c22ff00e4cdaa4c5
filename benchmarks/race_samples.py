"""The races' samples of a tuning's decisions, kept and read: does a settled block's first sample tell a tile whose
time flips between two levels? At MoE M = 32 on one H200 it read 1.052-1.093 of the block's median for the two
bistable tiles in 11 of 13 races and 0.990-1.002 for the stable leaders in 18 of 18 (``results/session_h200_22``,
call 4; docs/search.md, "Output placements"). Whether it fires at other shapes needs their blocks' samples: every
decision in the cache keeps each raced config's group time per round (``round_times``), and ``validate_search.py``
keeps them in its rows (``raced``).

- ``collect DIR OUT``: from every decision file under DIR (a cache folder, e.g. ``$HOME/.triton_dist/autotune``),
  the configs with at least :data:`MIN_ROUNDS` rounds (the finalists of a search, the leaders of a race): key,
  clock, config and round times, into OUT (JSON; ``benchmarks/gpu/_campaign.sh`` keeps one per campaign run).
- ``judges RACES FIDELITY``: for each tuning of ``bench_fidelity.py`` (its ``--out`` JSON, the races of its
  ``FID_DECISIONS`` folder collected into RACES), the chosen config, its ratio by the sustained oracle and among
  heavy layers, and its race's settled rounds: the median, round by round, of its time over each judge's best
  config's (where that config ran every round). Where the race read the two tied and a judge reads them apart, the
  judge's regime is not the race's (sixty-second session, ``results/session_h200_62``).
- ``report FILE [...] [--settled-from K]``: from such files, or from ``validate_search.py``'s output (each row's
  ``raced``), per key, for each config that ran every round of its race, its first settled round (round K; a
  search's finalists race 2 screening rounds, then settle: the rank log's ``settled from 3``) over the median of
  its settled rounds, those over :data:`FLAG` marked, and how many of all.

Launch: ``python benchmarks/race_samples.py collect DIR OUT`` / ``... report FILE ...`` / ``... judges RACES FID.json``
(CPU only: it reads files).
"""

from __future__ import annotations

import argparse
import json
import re
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


def label(config: str) -> str:
    """A decision's config text as ``bench_fidelity.py`` names it: ``BMxBNxBK-gG-wW-sS``."""
    v = dict(re.findall(r"(\w+): (\d+)", config))
    return f"{v['BLOCK_M']}x{v['BLOCK_N']}x{v['BLOCK_K']}-g{v['GROUP_M']}-w{v['num_warps']}-s{v['num_stages']}"


def judges(races: Path, fidelity: Path, settled_from: int) -> None:
    """Print each tuning's choice beside both judges and its own race (see the module docstring)."""
    tune = json.loads(fidelity.read_text())["tune"]
    for decision in json.loads(races.read_text()):
        m, tuning = re.fullmatch(r"fid_ours_(\d+)_(\d+)", decision["function"]).groups()
        shape = next(s for s in tune if s.startswith(f"({m},"))
        oracle = tune[shape]["oracle"]
        full = {label(c["config"]): c["round_times"] for c in decision["raced"]
                if len(c["round_times"]) == decision["rounds"]}
        chosen = tune[shape]["ours"][int(tuning)][0]
        parts = [f"M={m} tuning {tuning}: chose {chosen} (sustained {oracle['ratios'][chosen]:.4f}, heavy "
                 f"{oracle['among_heavy_ratios'][chosen]:.4f})"]
        for judge, best in (("sustained", oracle["best"]), ("heavy", oracle["among_heavy_best"])):
            if best != chosen and chosen in full and best in full:
                rounds = list(zip(full[chosen], full[best], strict=True))[settled_from - 1:]
                parts.append(f"race: over the {judge} best {best} {statistics.median(a / b for a, b in rounds):.4f}")
        print("; ".join(parts))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("folder", type=Path)
    c.add_argument("out", type=Path)
    r = sub.add_parser("report")
    r.add_argument("files", type=Path, nargs="+")
    r.add_argument("--settled-from", type=int, default=3, help="the race's first settled round (from 1)")
    j = sub.add_parser("judges")
    j.add_argument("races", type=Path)
    j.add_argument("fidelity", type=Path)
    j.add_argument("--settled-from", type=int, default=3, help="the race's first settled round (from 1)")
    args = p.parse_args()
    if args.command == "judges":
        judges(args.races, args.fidelity, args.settled_from)
    elif args.command == "collect":
        args.out.write_text(json.dumps(collect(args.folder)))
    else:
        report(args.files, args.settled_from)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
