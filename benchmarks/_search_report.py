"""The report of ``bench_search.py``: its progress lines' summaries and ``search.md``, written from the results."""

from __future__ import annotations

from typing import Any


def summary_line(row: dict[str, Any]) -> str:
    """One tune row's progress line: each tuner's ratios by both oracles and its seconds."""
    parts = []
    for who in ("ours", "exhaustive", "stock"):
        runs = row.get(who)
        if not runs:
            continue
        dev = [fmt_ratio(row, "device_oracle", r["choice"]) for r in runs]
        eag = [fmt_ratio(row, "eager_oracle", r["choice"]) for r in runs]
        secs = [f"{r['seconds']:.1f}" for r in runs]
        parts.append(f"{who} dev {dev} eager {eag} in {secs} s")
    return "; ".join(parts)


def timing_text(decision: dict[str, Any]) -> str:
    """How a tuning timed its key, from its Decision: ``timing`` and every other text field it records (a search
    stage may add how it timed: device / graph replay or eager), the config's text left out."""
    parts = [str(decision.get("timing", "?"))]
    parts += [f"{k}={v}" for k, v in decision.items() if isinstance(v, str) and v and k not in ("timing", "config")]
    return " ".join(parts)


def fmt_ratio(row: dict[str, Any], oracle: str, choice: str) -> str:
    """``choice``'s ratio by ``oracle`` in ``row``, to 3 decimals, or ``"-"``."""
    value = row.get(oracle, {}).get("ratios", {}).get(choice)
    return "-" if value is None else f"{value:.3f}"


def markdown(report: dict) -> str:
    """``search.md``: the tune, compile and campaign tables of ``report``."""
    env = report.get("environment", {})
    lines = [f"# Large spaces: ours vs stock, {env.get('gpu')} (torch {env.get('torch')}, triton "
             f"{env.get('triton')}, {env.get('cpus')} CPUs, "
             f"TRITON_DIST_AUTOTUNE_SEARCH={env.get('search_env')})", "",
             "Ratios: choice time / best time; `dev` = exhaustive device-time oracle (CUDA graphs, sustained), "
             "`eager` = sustained eager oracle over the candidates. Tuning seconds exclude compiles.", ""]
    tune = report.get("tune", {})
    if tune:
        lines += ["| space | M | kept | best us (dev) | ours dev | ours eager | ours s | ours timing | exhaustive "
                  "dev / eager / s | stock dev / eager / s | eager host-bound |", "|---" * 11 + "|"]
        for key in sorted(tune, key=lambda k: (k.split("|")[0], int(k.split("|")[1]))):
            row = tune[key]
            space, m = key.split("|")
            best = row.get("device_oracle", {}).get("best_ms")
            ours = row.get("ours", [])

            def cell(who: str) -> str:
                runs = row.get(who, [])
                if not runs:
                    return "-"
                dev = ", ".join(fmt_ratio(row, "device_oracle", r["choice"]) for r in runs)
                eager = ", ".join(fmt_ratio(row, "eager_oracle", r["choice"]) for r in runs)
                secs = ", ".join(f"{r['seconds']:.1f}" for r in runs)
                return f"{dev} / {eager} / {secs}"

            timing = ", ".join(sorted({timing_text(r["decision"]) for r in ours})) or "-"
            lines.append(" | ".join([
                f"| {space}", m, str(row["kept"]), "-" if best is None else f"{1e3 * best:.1f}",
                ", ".join(fmt_ratio(row, "device_oracle", r["choice"]) for r in ours) or "-",
                ", ".join(fmt_ratio(row, "eager_oracle", r["choice"]) for r in ours) or "-",
                ", ".join(f"{r['seconds']:.1f}" for r in ours) or "-", timing, cell("exhaustive"), cell("stock"),
                str(row.get("eager_oracle", {}).get("host_bound", "-"))]) + " |")
        lines.append("")
    comp = report.get("compile", {})
    if comp:
        lines += ["| space | first key M | kept | CPUs | ours s (with compiles) | stock s (with compiles) |",
                  "|---|---|---|---|---|---|"]
        for name, row in comp.items():
            stock = f"{row['stock_s']:.1f}" if "stock_s" in row else "not run"
            lines.append(f"| {name} | {row['m']} | {row['kept']} | {row['cpus']} | {row['ours_s']:.1f} | {stock} |")
        lines.append("")
    for name, camp in report.get("campaign", {}).items():
        lines += [f"Campaign {name}: {len(camp['rows'])} keys in {camp['total_s']:.1f} s (compiles included), "
                  f"{camp['failed']} failed", "", "| M | state | s | choice | dev ratio |", "|---|---|---|---|---|"]
        for r in camp["rows"]:
            ratio = "-" if r["device_ratio"] is None else f"{r['device_ratio']:.3f}"
            lines.append(f"| {r['m']} | {r['state']} | {r['seconds']:.1f} | {r['choice']} | {ratio} |")
        lines.append("")
    return "\n".join(lines) + "\n"
