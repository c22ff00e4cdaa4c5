"""PNG pictures of decisions for the command line's ``plot`` (needs matplotlib: ``pip install '.[plot]'``).

A decision: every config's time with its spread (the chosen one marked, failed and pruned configs shown), and the
measurement timeline (each round's time against the order it was measured in), where drift during a long tuning
shows as a slope. Every decision of a function: each config's time across the keys, and every key's timeline
relative to its chosen config.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..disk.decisions import Entry  # noqa: E402
from ..records import Outcome  # noqa: E402

CHOSEN, MEASURED, STOPPED, FAILED, PRUNED = "#d95f02", "#1b9e77", "#7fa7c9", "#c0392b", "#9e9e9e"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


_FIELD = re.compile(r"[A-Za-z_][\w.]*: [^,{}()\[\]]+")
#: the widest config label on the bar chart
LABEL_WIDTH = 60
#: slowest over fastest time above which the bar chart's time axis is logarithmic
LOG_RATIO = 20.0


def config_labels(configs: list[str], width: int = LABEL_WIDTH) -> list[str]:
    """One label per config description: the whole text where it fits, else the fields (``name: value``) that
    tell the configs apart (those every config shares left out), so that two configs never look identical."""
    fields = [_FIELD.findall(text) for text in configs]
    shared = set.intersection(*(set(f) for f in fields)) if fields else set()
    labels = []
    for text, own in zip(configs, fields, strict=True):
        if len(text) <= width or not own:
            labels.append(_clip(text, width))
        else:
            labels.append(_clip(", ".join(f for f in own if f not in shared) or text, width))
    return labels


def log_scale(times: list[float]) -> bool:
    """Whether the times span so much (slowest over fastest > :data:`LOG_RATIO`) that a linear axis would hide the
    fast ones."""
    positive = [t for t in times if t > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_RATIO


def _color(outcome: Outcome, chosen: int) -> str:
    if outcome.index == chosen:
        return CHOSEN
    return {"measured": MEASURED, "stopped": STOPPED, "failed": FAILED}.get(outcome.state, PRUNED)


def timeline(outcome: Outcome, position: int) -> tuple[list[float], list[float]]:
    """(order measured, time) of each round of ``outcome``; one point at ``position`` where none was recorded
    (format-1 entries, which kept only the final time)."""
    if outcome.order and len(outcome.order) == len(outcome.round_times):
        return [float(x) for x in outcome.order], list(outcome.round_times)
    return ([float(position)], [outcome.time]) if outcome.time is not None else ([], [])


def _bars(ax: Axes, entry: Entry) -> None:
    outcomes = entry.measurements
    times = [o.time for o in outcomes if o.time is not None]
    top = max(times) if times else 1.0
    log = log_scale(times)
    for row, o in enumerate(outcomes):
        color = _color(o, entry.index)
        if o.time is not None:
            error = o.time * o.spread if o.spread else None
            ax.barh(row, o.time, xerr=error, color=color, alpha=0.9 if o.state != "stopped" else 0.5,
                    edgecolor="black" if o.index == entry.index else color, capsize=3)
            note = f"{o.time:.4g} ms" + (f" ±{100 * o.spread:.1f}%" if o.spread else "")
            note += " (chosen)" if o.index == entry.index else " (stopped)" if o.state == "stopped" else ""
            ax.text((o.time + (error or 0)) * 1.05 if log else o.time + top * 0.01 + (error or 0), row, note,
                    va="center", fontsize=8)
        else:
            low = min(times) * 0.6 if log else 0
            ax.barh(row, top * 0.02, left=low, color=color, hatch="//" if o.state == "failed" else "..", alpha=0.6)
            note = o.state + (f": {_clip(o.error, 60)}" if o.error else "")
            ax.text(low + top * 0.03 if not log else min(times), row, note, va="center", fontsize=8, color=color)
    labels = config_labels([o.config for o in outcomes])
    ax.set_yticks(range(len(outcomes)), [f"#{o.index} {text}" for o, text in zip(outcomes, labels, strict=True)],
                  fontsize=7)
    ax.invert_yaxis()
    what = "group time (ms): max over ranks of each rank's median; bars: spread"
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(times) * 0.5, top * 6)
        ax.set_xlabel(what + f" (log scale: the slowest is {top / min(times):.0f}x the fastest)")
    else:
        ax.set_xlim(0, top * 1.45)
        ax.set_xlabel(what)


def _timeline(ax: Axes, entry: Entry) -> None:
    recorded = any(o.order for o in entry.measurements)
    for position, o in enumerate(entry.measurements):
        xs, ys = timeline(o, position)
        if not xs:
            continue
        big = o.index == entry.index
        ax.plot(xs, ys, "o-" if len(xs) > 1 else "o", color=_color(o, entry.index), markersize=7 if big else 4,
                linewidth=1, label=f"#{o.index}" + (" (chosen)" if big else ""), zorder=3 if big else 2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("order measured" if recorded else "config (measurement order not recorded in this entry)")
    ax.set_ylabel("ms")
    ax.set_title("measurement timeline: a slope is drift", fontsize=9)
    if len(entry.measurements) <= 12:
        ax.legend(fontsize=7, ncol=min(6, len(entry.measurements)), loc="best")
    ax.grid(alpha=0.3)


def _gpu(entry: Entry) -> str:
    return f"{entry.gpu} x{entry.gpu_count}" if entry.gpu_count else entry.gpu


def _title(entry: Entry) -> str:
    margin = f"+{100 * entry.margin:.1f}% over #{entry.runner_up}" if entry.margin is not None else "no runner-up"
    return (f"{entry.function}{' / ' + entry.kernel if entry.kernel else ''}  key={_clip(entry.key, 70)}\n"
            f"chosen #{entry.index} ({margin}{', near tie' if entry.near_tie else ''}); "
            f"{entry.group_size or '?'} rank(s), {_gpu(entry)}, "
            f"triton {entry.versions.get('triton', '?')}, torch {entry.versions.get('torch', '?')}")


#: above this many configs, pruned ones are counted in the title instead of drawn one bar each
MAX_DRAWN_PRUNED = 40


def plot_decision(entry: Entry, out: Path) -> Path:
    """Write a PNG of one decision to ``out``; returns ``out``. In a large space, pruned configs are counted in
    the title rather than drawn."""
    title = _title(entry)
    pruned = [o for o in entry.measurements if o.state == "pruned"]
    if len(entry.measurements) > MAX_DRAWN_PRUNED and pruned:
        entry = dataclasses.replace(entry, measurements=[o for o in entry.measurements if o.state != "pruned"])
        title += f"; {len(pruned)} pruned configs not drawn"
    n = max(1, len(entry.measurements))
    fig, (bars, line) = plt.subplots(2, 1, figsize=(11, 3.2 + 0.32 * n + 3), height_ratios=[0.4 + 0.32 * n, 3])
    _bars(bars, entry)
    _timeline(line, entry)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_function(entries: list[Entry], out: Path) -> Path:
    """Write a PNG of every decision of one function, across its keys, to ``out``; returns ``out``."""
    entries = sorted(entries, key=lambda e: e.key)
    fig, (across, drift) = plt.subplots(2, 1, figsize=(11, 8), height_ratios=[3, 2])
    indices = sorted({o.index for e in entries for o in e.measurements})
    cmap = plt.get_cmap("tab10" if len(indices) <= 10 else "tab20")
    floor = min((o.time for e in entries for o in e.measurements if o.time), default=1.0) * 0.8
    for k, index in enumerate(indices):
        xs, ys, errors = [], [], []
        for x, e in enumerate(entries):
            o = next((m for m in e.measurements if m.index == index), None)
            if o is None or o.time is None:  # failed, or pruned (absent: not kept for this key): at the bottom
                failed = o is not None and o.state == "failed"
                across.plot(x + 0.05 * k, floor, "x" if failed else "s", color=FAILED if failed else PRUNED,
                            markersize=8, markerfacecolor="none" if not failed else FAILED)
                continue
            xs.append(x + 0.05 * k)
            ys.append(o.time)
            errors.append(o.time * o.spread if o.spread else 0.0)
            if o.index == e.index:
                across.plot(x + 0.05 * k, o.time, "*", color=CHOSEN, markersize=16, markeredgecolor="black",
                            zorder=5)
        if xs:
            across.errorbar(xs, ys, yerr=errors, fmt="o-", color=cmap(k % cmap.N), label=f"config #{index}",
                            markersize=4, linewidth=1, capsize=2, alpha=0.8)
    across.plot([], [], "*", color=CHOSEN, markersize=12, markeredgecolor="black", label="chosen")
    across.plot([], [], "x", color=FAILED, label="failed")
    across.plot([], [], "s", color=PRUNED, markerfacecolor="none", label="pruned / not run")
    across.set_yscale("log")
    across.set_xticks(range(len(entries)), [_clip(e.key, 28) for e in entries], rotation=20, ha="right", fontsize=7)
    across.set_ylabel("group time (ms)")
    across.legend(fontsize=7, ncol=4)
    across.grid(alpha=0.3)
    key_colors = plt.get_cmap("tab10")
    for x, e in enumerate(entries):  # each round relative to its own config's median: drift is a common trend
        points = sorted((order, t / o.time) for pos, o in enumerate(e.measurements) if o.time
                        for order, t in zip(*timeline(o, pos), strict=True))
        if points:
            drift.plot([p[0] for p in points], [p[1] for p in points], "o-", markersize=3, linewidth=0.8,
                       color=key_colors(x % 10), label=_clip(e.key, 28))
    drift.xaxis.set_major_locator(MaxNLocator(integer=True))
    drift.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    drift.set_xlabel("order measured (config order where not recorded)")
    drift.set_ylabel("round time / its config's median")
    drift.set_title("measurement timelines: every round against its config's median (a trend is drift)",
                    fontsize=9)
    if len(entries) <= 10:
        drift.legend(fontsize=7, ncol=2)
    drift.grid(alpha=0.3)
    first = entries[0]
    fig.suptitle(f"{first.function}: {len(entries)} decision(s) across keys; {first.group_size or '?'} rank(s), "
                 f"{_gpu(first)}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
