"""The judgement and tables of ``bench_collective_choices.py``: each choice's ratio to the group oracle's best
(``corpus_collective.py``'s ``ratios``), and ``choices.md``. Run as a script, it judges a ``choices.json`` again
against other oracle files and writes both files anew::

    python benchmarks/_collective_report.py CHOICES.json --oracle ORACLE.json [MORE.json ...] --out DIR
    python benchmarks/_collective_report.py --oracle R1.json R2.json R3.json --pooled-out POOLED.json

Several recordings (separate processes) make one oracle, :func:`pooled`: each config's ratio is the median of its
ratios over the recordings, relative to the smallest such median. On 2 H200s some group landscapes were not
repeatable from one process to the next (chunked AG-GEMM configs ran 0.26 ms in one process and 0.4-1.0 ms in
another): a config is the best only if it is fast in most processes, which is what a decision reused by later
processes needs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: the issue's bar: every choice within this ratio of the group oracle's best
WITHIN = 1.02


def judge(choice: str | None, entry: dict[str, Any] | None, restrict: str = "") -> dict[str, Any]:
    """A choice against the oracle ``entry``: ``ratio`` = its time / the best time among the configs whose corpus
    name starts with ``restrict`` (all: ""), ``ratio_overall`` = its time / the best of all; ``note`` says why a
    ratio is missing (no oracle, not decided, a choice the oracle does not hold)."""
    if entry is None:
        return {"ratio": None, "ratio_overall": None, "note": "owed: no oracle"}
    ratios: dict[str, float] = entry["ratios"]
    if choice is None:
        return {"ratio": None, "ratio_overall": None, "note": "not decided"}
    if choice not in ratios:
        return {"ratio": None, "ratio_overall": None, "note": "not in oracle"}
    pool = [v for k, v in ratios.items() if k.startswith(restrict)]
    return {"ratio": ratios[choice] / min(pool), "ratio_overall": ratios[choice] / min(ratios.values()),
            "note": ""}


def case_key(gpu: str, op: str, world: int, shape: str, kept: int) -> str:
    """The corpus key of one case: ``{gpu}|{op}_gemm_w{world}|{shape}|{kept configs}``."""
    return f"{gpu}|{op}_gemm_w{world}|{shape}|{kept}"


def find_entry(oracle: dict[str, Any], gpu: str, op: str, world: int, shape: str,
               kept: int) -> tuple[str | None, dict[str, Any] | None]:
    """The oracle's entry of one case: its exact corpus key, else the same op, ranks and shape on another GPU or
    with another count of kept configs (the key names which)."""
    exact = case_key(gpu, op, world, shape, kept)
    if exact in oracle:
        return exact, oracle[exact]
    middle = f"|{op}_gemm_w{world}|{shape}|"
    near = sorted(k for k in oracle if middle in k)
    return (near[0], oracle[near[0]]) if near else (None, None)


def pooled(oracles: list[dict[str, Any]]) -> dict[str, Any]:
    """One oracle from several recordings of the same cases (see the module's docstring); a case missing from a
    recording, or recorded incomplete there, is pooled over the others."""
    out: dict[str, Any] = {}
    for key in sorted({k for o in oracles for k in o}):
        entries = [o[key] for o in oracles if key in o and o[key].get("complete") is not False]
        if not entries:
            continue
        names = sorted(set.intersection(*(set(e["ratios"]) for e in entries)))
        middle = {n: statistics.median(e["ratios"][n] for e in entries) for n in names}
        floor = min(middle.values())
        out[key] = {**entries[0], "ratios": {n: v / floor for n, v in middle.items()},
                    "best": min(middle, key=middle.get), "recordings": len(entries)}
    return out


def judge_rows(rows: list[dict[str, Any]], oracle: dict[str, Any], gpu: str, world: int) -> None:
    """Every tuning of ``rows`` judged against ``oracle``, in place (``judged``, ``oracle_*``)."""
    for row in rows:
        key, entry = find_entry(oracle, gpu, row["op"], world, row["shape"], row["configs"])
        restrict = f"{row['algo']}-x{row['splits']}-" if row["mode"] == "contextual" else ""
        row["oracle_key"], row["oracle_complete"] = key, None if entry is None else entry.get("complete")
        row["oracle_exact"] = key == case_key(gpu, row["op"], world, row["shape"], row["configs"])
        row["judged"] = [judge(t["choice"], entry, restrict) for t in row["tunings"]]


def write_report(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], oracle: dict[str, Any]) -> str:
    """Judge ``rows`` against ``oracle`` and write ``out/choices.json`` and ``out/choices.md``; the markdown."""
    judge_rows(rows, oracle, meta["gpu"], meta["world"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "choices.json").write_text(json.dumps({**meta, "rows": rows}, indent=1, default=str))
    text = markdown(meta, rows)
    (out / "choices.md").write_text(text)
    return text


def corpus_file(oracle: dict[str, Any], sources: list[Path]) -> dict[str, Any]:
    """A pooled oracle (:func:`pooled`) in the corpus format the replays read (family ``collective``)."""
    kept = ("space", "family", "op", "m", "kept", "complete", "world", "window_ms", "passes", "rounds", "env")
    return {k: {**{f: e[f] for f in kept if f in e}, "ratios": e["ratios"], "best": e["best"],
                "recordings": e["recordings"], "sources": [str(f) for f in sources],
                "method": "median over recordings (separate processes) of each config's ratio to its recording's "
                          "best, relative to the smallest median; " + e.get("method", "")}
            for k, e in oracle.items()}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary(rows: list[dict[str, Any]], mode: str) -> str:
    """One line per mode: how many choices within :data:`WITHIN`, the worst, and the choices without a ratio."""
    judged = [j for r in rows if r["mode"] == mode for j in r["judged"]]
    ratios = [j["ratio"] for j in judged if j["ratio"] is not None]
    missing = [j["note"] for j in judged if j["ratio"] is None]
    line = f"- {mode}: {len(judged)} tunings"
    if ratios:
        line += (f"; **{sum(x <= WITHIN for x in ratios)} of {len(ratios)} within {WITHIN}** of the oracle's best, "
                 f"worst {max(ratios):.3f}")
    if missing:
        line += "; without a ratio: " + ", ".join(f"{missing.count(n)} {n}" for n in sorted(set(missing)))
    return line


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """``choices.md``: the setting, one line per mode, one table row per case."""
    lines = ["## GPU choices on many ranks (issue 39, item 4)", "",
             f"{meta['world']} ranks of {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}; oracle "
             f"{meta['oracle'] or 'none'}", ""]
    if not meta["oracle"]:
        lines += ["**The ratios are owed**: no oracle was given (`--oracle`, from `corpus_collective.py`). The "
                  "table lists the choices and the tuner's own group time of each.", ""]
    lines += [summary(rows, mode) for mode in ("function", "contextual") if any(r["mode"] == mode for r in rows)]
    lines += ["", "Contextual rows are judged against the oracle restricted to the algo they run (the column "
              "'judged against'; `contextual_autotune` tunes the GEMM's tile, not the algo); 'overall' is the ratio "
              "to the best of every algo. Their tuned ms is the GEMM kernel's median launch, not the function's.",
              "", "| op | shape | mode | configs | judged against | choice / best (each tuning) | overall | "
              "tuning s | near ties | tuned ms | choices | oracle |", "|" + " --- |" * 12]
    for r in rows:
        tunings, judged = r["tunings"], r["judged"]
        against = f"{r['algo']}-x{r['splits']}" if r["mode"] == "contextual" else "all"
        choices = ", ".join(f"`{t['choice']}`" for t in tunings)
        shown = [_fmt(j["ratio"]) if j["ratio"] is not None else j["note"] for j in judged]
        shown = shown[:1] if len(set(shown)) == 1 and judged[0]["ratio"] is None else shown  # "owed" once
        oracle = "-" if r["oracle_key"] is None else ("complete" if r["oracle_complete"] else "INCOMPLETE")
        if r["oracle_key"] is not None and not r["oracle_exact"]:
            oracle += f" (`{r['oracle_key']}`: another GPU or count)"
        lines.append(f"| {r['op']} | {r['shape']} | {r['mode']} | {r['configs']} | {against} | {', '.join(shown)} | "
                     f"{', '.join(_fmt(j['ratio_overall']) for j in judged)} | "
                     f"{', '.join(_fmt(t['seconds'], 1) for t in tunings)} | "
                     f"{sum(bool(t['near_tie']) for t in tunings)} of {len(tunings)} | "
                     f"{', '.join(_fmt(t['tuned_ms'], 4) for t in tunings)} | "
                     f"{choices} | {oracle} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description="judge a choices.json again against another group oracle")
    p.add_argument("choices", type=Path, nargs="?", help="bench_collective_choices.py's choices.json")
    p.add_argument("--oracle", type=Path, nargs="+", required=True,
                   help="corpus_collective.py's file; several: pooled (the median over recordings)")
    p.add_argument("--out", type=Path, help="folder for the new choices.json and choices.md")
    p.add_argument("--pooled-out", type=Path, default=None,
                   help="also write the pooled oracle here, in the corpus format (the replays' collective family)")
    args = p.parse_args()
    if (args.choices is None) != (args.out is None):
        p.error("CHOICES and --out go together")
    if args.choices is None and args.pooled_out is None:
        p.error("nothing to do: give CHOICES and --out, or --pooled-out")
    oracle = pooled([json.loads(f.read_text()) for f in args.oracle])
    if args.pooled_out:
        args.pooled_out.write_text(json.dumps(corpus_file(oracle, args.oracle), indent=1))
    if args.choices is None:
        return 0
    report = json.loads(args.choices.read_text())
    meta = {k: v for k, v in report.items() if k != "rows"}
    meta["oracle"] = ", ".join(map(str, args.oracle)) + (" (pooled: median over recordings)"
                                                         if len(args.oracle) > 1 else "")
    print(write_report(args.out, meta, report["rows"], oracle), end="")
    return 0

if __name__ == "__main__":
    sys.exit(main())
