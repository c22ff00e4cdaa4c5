"""The markdown report of ``bench_ag_gemm.py``: one table per operation and regime, then the verdicts of issue 33's
done criterion (every cell repeats within 3% over the repeats; ours / chosen-direct at most 1.02)."""

from __future__ import annotations

import argparse
from typing import Any

MAIN = ("ours", "direct", "fused", "torch", "comm", "gemm")
REPEAT_GOAL, RATIO_GOAL = 0.03, 1.02
TITLE = {"latency": "latency (barrier + synchronize before each call)",
         "steady": "back-to-back (windows of queued calls after settling; ms per call)"}


def cell(summary: dict[str, Any] | None, digits: int = 3) -> str:
    """``median (spread%)`` over the repeats."""
    if not summary:
        return "-"
    spread = summary.get("spread")
    return f"{summary['median']:.{digits}f} ({spread * 100:.1f}%)" if spread is not None else f"{summary['median']:.3f}"


def config_text(cfg: dict[str, Any] | None) -> str:
    return "-" if not cfg else f"{cfg['algo']}/{cfg['splits']}/{cfg['gemm_config']}"


def mhz(row: dict[str, Any], regime: str) -> str:
    parts = []
    for name in ("ours", "direct", "fused"):
        s = row["contenders"].get(name, {}).get(f"{regime}_mhz")
        parts.append(f"{s['median']:.0f}" if s else "-")
    return " / ".join(parts)


def host(row: dict[str, Any]) -> str:
    parts = []
    for name in ("ours", "direct", "fused"):
        s = row["contenders"].get(name, {}).get("host_us")
        parts.append(f"{s['median']:.0f}" if s else "-")
    return " / ".join(parts)


def table(rows: list[dict[str, Any]], regime: str) -> list[str]:
    key = f"{regime}_ms"
    head = ["shape", "chosen config", *MAIN, "limit max(comm, gemm)", "ours/direct", "ours/fused", "direct/fused",
            "SM MHz ours / direct / fused"]
    if regime == "latency":
        head.append("host us per call ours / direct / fused")
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        times = [cell(r["contenders"][n][key]) if n in r["contenders"] else "-" for n in MAIN]
        ratios = [cell(r[f"{regime}_ratios"][k]) for k in ("ours/direct", "ours/fused", "direct/fused")]
        cells = [r["shape"], config_text(r.get("config")), *times, cell(r[f"{regime}_limit_ms"]), *ratios,
                 mhz(r, regime)]
        if regime == "latency":
            cells.append(host(r))
        lines.append("| " + " | ".join(cells) + " |")
    extra = sorted({n for r in rows for n in r["contenders"] if n not in MAIN})
    if extra:
        lines += ["", "| shape | " + " | ".join(extra) + " |", "|---" * (len(extra) + 1) + "|"]
        for r in rows:
            lines.append("| " + " | ".join([r["shape"], *(cell(r["contenders"].get(n, {}).get(key)) for n in extra)])
                         + " |")
    return lines


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 33's bar per cell and regime: every contender repeats within 3%; ours / direct at most 1.02."""
    out = []
    for r in rows:
        for regime in ("latency", "steady"):
            key = f"{regime}_ms"
            spreads = {n: c[key]["spread"] for n, c in r["contenders"].items() if c.get(key)}
            worst = max(spreads, key=lambda n: spreads[n])
            ok = spreads[worst] <= REPEAT_GOAL
            line = (f"- {r['op']} {r['shape']}, {regime}: worst spread {spreads[worst] * 100:.1f}% ({worst}): "
                    f"{'MET' if ok else 'MISSED'}")
            ratio = r[f"{regime}_ratios"]["ours/direct"]
            if ratio:
                line += (f"; ours/direct {ratio['median']:.3f} (per repeat "
                         f"{', '.join(f'{v:.3f}' for v in ratio['values'])}): "
                         f"{'MET' if ratio['median'] <= RATIO_GOAL else 'MISSED'}")
            out.append(line)
    return out


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], args: argparse.Namespace,
             phases: dict[str, float]) -> str:
    """The whole report (times in ms: the median over --repeats of each repeat's max over ranks of the rank's
    median over its interleaved rounds; in parentheses the spread max/min - 1 over the repeats)."""
    lines = [
        f"{env['gpus']}x {env['gpu']}, torch {env['torch']}, triton {env['triton']}, NCCL {env['nccl']}; "
        f"env {env['env']}; SM clock read: {env['sm_clock_read']}",
        f"repeats {args.repeats}, rounds {args.rounds}, latency samples per round {args.lat_calls}, settle "
        f"{args.settle_ms} ms, window {args.window_ms} ms (>= {args.min_calls} calls), warm-up {args.warmup}; "
        f"phases: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()),
        "",
        "Cells: median over the repeats (spread max/min - 1). ours = the tuned function's hot path; direct = the "
        "same example function called with the chosen config; fused = torch.ops.symm_mem.fused_* called directly.",
        "",
    ]
    for op, name in (("ag", "AG-GEMM"), ("rs", "GEMM-RS")):
        mine = [r for r in rows if r["op"] == op]
        if not mine:
            continue
        for regime in ("latency", "steady"):
            lines += [f"### {name} (M x K x N, {env['gpus']} ranks), {TITLE[regime]}, ms", ""]
            lines += table(mine, regime) + [""]
        tuning = ", ".join(f"{r['shape']} {r['tuning_s']:.1f} s" for r in mine if "tuning_s" in r)
        if tuning:
            lines += [f"Tuning (compiles included): {tuning}.", ""]
    lines += ["### Verdicts (issue 33: spread <= 3% over the repeats; ours/direct <= 1.02)", "", *verdicts(rows)]
    return "\n".join(lines) + "\n"
