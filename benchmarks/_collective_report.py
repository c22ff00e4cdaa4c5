"""The judgement and tables of ``bench_collective_choices.py``: each choice's ratio to the group oracle's best
(``corpus_collective.py``'s ``ratios``), and ``choices.md``."""

from __future__ import annotations

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
