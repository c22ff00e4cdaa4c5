"""PNG pictures of decisions for the command line's ``plot`` (needs matplotlib: ``pip install '.[plot]'``).

A decision: every config's time with its spread (the chosen one marked, failed and pruned configs shown; in a large
space the fastest :data:`MAX_BARS`, the others counted), and, where the entry recorded it, the measurement timeline
(each round's time against the order it was measured in), where drift during a long tuning shows as a slope.
Every decision of a function: each config's time across the keys (in numeric order), and, where recorded, every
key's timeline relative to its chosen config.

A bar is a config's time as the tuner compares it: the median over its samples, or their least where the race's
samples were noisy (the decision records which: :attr:`~triton_dist_tune.disk.entries.Entry.statistic`; the time
axis says it, :func:`time_axis`), where a sample's time is the slowest rank's (the max over ranks; a decision timed
by one rank alone, its rank's, and the axis says so). Config labels
are whole, wrapped, never cut. The figures are sized to be read at about 1000 pixels wide (the README shows one at
that size).
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from ..disk.decisions import Entry  # noqa: E402
from ..records import LEAST, Outcome  # noqa: E402
from .common import _clip, key_order  # noqa: E402

CHOSEN, MEASURED, STOPPED, FAILED, PRUNED = "#d95f02", "#1b9e77", "#7fa7c9", "#c0392b", "#9e9e9e"


_FIELD = re.compile(r"[A-Za-z_][\w.]*: [^,{}()\[\]]+")
#: characters per line of a config label (labels are wrapped onto more lines, never cut)
LABEL_WIDTH = 46
#: slowest over fastest time above which the bar chart's time axis is logarithmic
LOG_RATIO = 20.0
#: the most timed configs drawn as bars (the fastest); the others are counted in the title
MAX_BARS = 16
#: what a bar is, on every time axis: of decisions whose times are medians, least samples (a noisy race), or some
#: of each (a function's keys; those of least samples are marked at their key)
TIME_AXIS = "ms per call: median over samples of the slowest rank's time"
LEAST_AXIS = "ms per call: least of the samples (a noisy race) of the slowest rank's time"
MIXED_AXIS = "ms per call: median (least at keys marked 'noisy') over samples of the slowest rank's time"
#: whose time a sample is where more than one rank timed it (:func:`whose_time`)
SLOWEST = "the slowest rank's time"
#: the figures' width in inches and their resolution: 1000 pixels, the size the README shows
WIDTH, DPI = 10.0, 100


def time_axis(entries: list[Entry]) -> str:
    """What the bars or points of ``entries`` are (:data:`TIME_AXIS`, :data:`LEAST_AXIS` or :data:`MIXED_AXIS`):
    each decision records whether its times are medians or least samples (files from before say medians). Where
    every decision was timed by one rank (a one-rank group, or a rank-local campaign's), the times are that rank's,
    and the axis says so (:func:`whose_time`)."""
    least = [e.statistic == LEAST for e in entries]
    axis = LEAST_AXIS if all(least) else MIXED_AXIS if any(least) else TIME_AXIS
    return axis.replace(SLOWEST, whose_time(entries))


def whose_time(entries: list[Entry]) -> str:
    """``the slowest rank's time``, or ``its one rank's time`` where every decision of ``entries`` was timed by a
    single rank (its group of one, or a rank-local campaign's rank: ``rank_local``)."""
    alone = bool(entries) and all(e.rank_local is not None or e.group_size == 1 for e in entries)
    return "its one rank's time" if alone else SLOWEST


def wrap(text: str, width: int = LABEL_WIDTH) -> str:
    """``text`` whole, on lines of at most ``width`` characters (broken after ``, `` where it can)."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def config_labels(configs: list[str]) -> list[str]:
    """One label per config description: the whole text, wrapped onto lines of :data:`LABEL_WIDTH` characters
    (never cut, so two configs never look identical)."""
    return [wrap(text, LABEL_WIDTH) for text in configs]


def distinguishing(configs: list[str]) -> tuple[list[str], list[str]]:
    """(per config, the fields (``name: value``) that tell it from the others, whole; the fields every config
    shares). A config with no such fields keeps its whole text."""
    fields = [_FIELD.findall(text) for text in configs]
    shared = set.intersection(*(set(f) for f in fields)) if fields else set()
    own = [", ".join(f for f in mine if f not in shared) or text for text, mine in zip(configs, fields, strict=True)]
    return own, [f for f in (fields[0] if fields else []) if f in shared]


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


#: a note must end this many pixels inside the axes' right edge
EDGE_PX = 4


def _keep_notes_inside(fig: Figure, ax: Axes, notes: list[tuple[plt.Text, float]]) -> None:
    """Lay ``fig`` out, keeping each bar's note (``(text, the bar's end)``) beside its bar and inside the axes:
    where one would cross the right edge, the time axis is widened just enough for it (at most 2.5 times the span
    each time), else the note goes inside its bar, right-aligned at the bar's end."""
    log = ax.get_xscale() == "log"
    for attempt in range(4):  # widening changes the ticks, and so the layout: lay out and measure again
        fig.tight_layout()
        if not notes:
            return
        renderer = fig.canvas.get_renderer()  # extents need a renderer, not a drawn picture (tight_layout laid out)
        box = ax.get_window_extent(renderer)
        over = [(text, end) for text, end in notes if text.get_window_extent(renderer).x1 > box.x1 - EDGE_PX]
        if not over or attempt == 3:
            break
        low, high = ax.get_xlim()
        need = 1.0
        for text, _ in over:
            extent = text.get_window_extent(renderer)
            room = (box.x1 - EDGE_PX - box.x0 - extent.width) / box.width  # where its start may be, at most
            if room > 0:
                need = max(need, (extent.x0 - box.x0) / box.width / room)
        if need <= 1.0:
            break
        need = min(need, 2.5)
        ax.set_xlim(low, low * (high / low) ** need if log else low + (high - low) * need)
    for text, end in over:  # still over the edge: inside the bar, at its end
        text.set_x(end)
        text.set_horizontalalignment("right")
        text.set_color("white")
        text.set_text(text.get_text() + " ")


#: the note of a config that ran once, untimed (the only config of its key's space after pruning): no time to draw
UNTIMED_NOTE = "not timed: the only config of the key's space after pruning, run once"


def _bars(ax: Axes, entry: Entry) -> list[tuple[plt.Text, float]]:
    """Draw the bars; returns each timed bar's note with where its bar ends (for :func:`_keep_notes_inside`)."""
    notes = []
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
            note += " (chosen)" if o.index == entry.index else " (left early)" if o.state == "stopped" else ""
            notes.append((ax.text((o.time + (error or 0)) * 1.05 if log else o.time + top * 0.01 + (error or 0),
                                  row, note, va="center", fontsize=9), o.time))
        else:
            low = min(times) * 0.6 if log and times else 0
            ax.barh(row, top * 0.02, left=low, color=color, hatch="//" if o.state == "failed" else "..", alpha=0.6)
            note = wrap(UNTIMED_NOTE + (" (chosen)" if o.index == entry.index else "") if o.untimed
                        else o.state + (f": {o.error}" if o.error else ""), 60)
            ax.text(low + top * 0.03 if not log else min(times), row, note, va="center", fontsize=8, color=color)
    labels = config_labels([o.config for o in outcomes])
    ax.set_yticks(range(len(outcomes)), [f"#{o.index} {text}" for o, text in zip(outcomes, labels, strict=True)],
                  fontsize=9)
    ax.set_ylim(len(outcomes) - 0.5, -0.5)
    what = time_axis([entry]) + "; error bar: spread"
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(times) * 0.5, top * 6)
        ax.set_xlabel(what + f"\n(log scale: the slowest is {top / min(times):.0f}x the fastest)", fontsize=9)
    else:
        ax.set_xlim(0, top * 1.55)
        ax.set_xlabel(what, fontsize=9)
    return notes


def recorded(entry: Entry) -> bool:
    """Whether the entry recorded when each sample was measured (``contextual_autotune``'s entries and format-1
    ones did not: no timeline to draw)."""
    return any(o.order and len(o.order) == len(o.round_times) for o in entry.measurements)


def _timeline(ax: Axes, entry: Entry, drawn: set[int]) -> None:
    """Every recorded sample against the order measured: the drawn (fastest) configs in colour, the others grey."""
    for position, o in enumerate(entry.measurements):
        xs, ys = timeline(o, position)
        if not xs or not o.order:
            continue
        big = o.index == entry.index
        if o.index not in drawn:
            ax.plot(xs, ys, "o", color=PRUNED, markersize=2, alpha=0.5, zorder=1)
            continue
        ax.plot(xs, ys, "o-" if len(xs) > 1 else "o", color=_color(o, entry.index), markersize=7 if big else 4,
                linewidth=1, label=f"#{o.index}" + (" (chosen)" if big else ""), zorder=3 if big else 2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("order measured (each sample; grey: configs not drawn above)", fontsize=9)
    ax.set_ylabel("ms (its one rank)" if whose_time([entry]) != SLOWEST else "ms (slowest rank)", fontsize=9)
    ax.set_title("measurement timeline: a slope is drift", fontsize=10)
    if len(drawn) <= 12:
        ax.legend(fontsize=8, ncol=min(6, len(drawn)), loc="best")
    ax.grid(alpha=0.3)


def _gpu(entry: Entry) -> str:
    return f"{entry.gpu} x{entry.gpu_count}" if entry.gpu_count else entry.gpu


def _title(entry: Entry) -> str:
    margin = f"+{100 * entry.margin:.1f}% over #{entry.runner_up}" if entry.margin is not None else \
        "not timed: the only config" if entry.untimed else "no runner-up"
    return (f"{wrap(entry.function + (' / ' + entry.kernel if entry.kernel else ''), TITLE_WIDTH)}\n"
            f"key={wrap(entry.key, 100)}\n"
            + wrap(f"chosen #{entry.index} ({margin}{', within the measured noise' if entry.near_tie else ''}); "
                   f"{_ranks_of(entry)}, {_gpu(entry)}, "
                   f"triton {entry.versions.get('triton', '?')}, torch {entry.versions.get('torch', '?')}",
                   TITLE_WIDTH))


#: characters per line of a figure's title (at its font size, the figure's width holds about 150)
TITLE_WIDTH = 120


def _ranks_of(entry: Entry) -> str:
    """How many ranks tuned one decision, from its own record (as ``list`` shows it): ``2 rank(s)``, for replicas
    tuned as one (``list``'s ``2x2``) ``2 rank(s) x 2 replicas (tuned as one)``, or for a rank-local campaign's
    ``rank-local (1 rank alone)``."""
    if entry.rank_local is not None:
        return "rank-local (1 rank alone)"
    if entry.replicas is not None:  # before: "2 rank(s)", as the same key tuned by a TP group alone
        return f"{entry.group_size or '?'} rank(s) x {entry.replicas} replicas (tuned as one)"
    return f"{entry.group_size or '?'} rank(s)"


def _ranks_text(entries: list[Entry]) -> str:
    """How many ranks tuned the keys, from each decision's own record (as ``list`` shows it): ``2 rank(s)``, or
    where keys differ ``1-2 rank(s) (per key, under its name)``; rank-local decisions say so (:func:`_ranks_of`)."""
    labels = {_ranks_of(e) for e in entries}
    if len(labels) == 1:
        return labels.pop()
    sizes = sorted({e.group_size for e in entries if e.group_size})
    if any(e.rank_local is not None or e.replicas is not None for e in entries) or len(sizes) < 2:
        return "ranks per key, under its name"
    return f"{sizes[0]}-{sizes[-1]} rank(s) (per key, under its name)"


def _line_count(labels: list[str]) -> int:
    return sum(max(1, label.count("\n") + 1) for label in labels)


def _save(fig: Figure, out: Path) -> Path:
    """Write ``fig`` to ``out`` and return the path written: a name without a suffix gets ``.png`` (what matplotlib
    writes for it), so that the path returned, and printed, is the file's."""
    if not out.suffix:
        out = out.with_name(out.name + ".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def plot_decision(entry: Entry, out: Path) -> Path:
    """Write a PNG of one decision (:func:`decision_figure`) to ``out``; returns ``out``."""
    return _save(decision_figure(entry), out)


def plot_function(entries: list[Entry], out: Path) -> Path:
    """Write a PNG of every decision of one function (:func:`function_figure`) to ``out``; returns ``out``."""
    return _save(function_figure(entries), out)


def decision_figure(entry: Entry) -> Figure:
    """The picture of one decision. In a large space (over :data:`MAX_BARS` configs) only the fastest
    :data:`MAX_BARS` timed configs and the failed ones are drawn, fastest first, and the title counts the others;
    a small space is drawn whole, in its own order."""
    title = _title(entry)
    shown = list(entry.measurements)
    if len(shown) > MAX_BARS:
        timed = sorted((o for o in shown if o.time is not None), key=lambda o: (o.time, o.index))
        failed = [o for o in shown if o.time is None and o.state == "failed"]
        rest = len(shown) - len(timed) - len(failed)
        shown = timed[:MAX_BARS] + failed[:4]
        counts = [(len(timed) - len(timed[:MAX_BARS]), "slower"), (len(failed) - len(failed[:4]), "failed"),
                  (rest, "pruned or not run")]
        title += "\nnot drawn: " + ", ".join(f"{n} {what}" for n, what in counts if n) + " ('show' lists every config)"
    drawn = {o.index for o in shown}
    whole, entry = entry, dataclasses.replace(entry, measurements=shown)
    bars_height = 0.5 + 0.19 * _line_count(config_labels([o.config for o in shown])) + 0.1 * len(shown)
    if recorded(whole):
        fig, (bars, line) = plt.subplots(2, 1, figsize=(WIDTH, bars_height + 4.8), height_ratios=[bars_height, 3])
        _timeline(line, whole, drawn)
    else:  # nothing recorded over time (contextual_autotune's entries): no empty timeline panel
        fig, bars = plt.subplots(1, 1, figsize=(WIDTH, bars_height + 1.8))
    notes = _bars(bars, entry)
    fig.suptitle(title, fontsize=10)
    _keep_notes_inside(fig, bars, notes)
    return fig


#: the most configs drawn as named lines across keys (those chosen somewhere first, then the runners-up)
MAX_LINES = 8


def _named_configs(entries: list[Entry]) -> list[int]:
    """The configs worth a named line across keys: every chosen one, then runners-up, at most :data:`MAX_LINES`
    (all of them in a small space)."""
    indices = sorted({o.index for e in entries for o in e.measurements if o.time is not None})
    if len(indices) <= MAX_LINES:
        return indices
    chosen = sorted({e.index for e in entries})
    runners = sorted({e.runner_up for e in entries if e.runner_up is not None} - set(chosen))
    return (chosen + runners)[:MAX_LINES]


def function_figure(entries: list[Entry]) -> Figure:
    """The picture of every decision of one function, across its keys (numeric order). The legend names each
    config by the fields that tell it apart (those every config shares in its title)."""
    entries = sorted(entries, key=lambda e: key_order(e.key))
    drifting = any(recorded(e) for e in entries)
    if drifting:
        fig, (across, drift) = plt.subplots(2, 1, figsize=(WIDTH, 9.5), height_ratios=[3, 2])
    else:  # no timelines recorded (contextual_autotune's entries): no empty panel
        fig, across = plt.subplots(1, 1, figsize=(WIDTH, 6.5))
    named = _named_configs(entries)
    texts = {o.index: o.config for e in entries for o in e.measurements}
    own, shared = distinguishing([texts[i] for i in named])
    names = dict(zip(named, own, strict=True))
    cmap = plt.get_cmap("tab10")
    floor = min((o.time for e in entries for o in e.measurements if o.time), default=1.0) * 0.8
    for index in sorted({o.index for e in entries for o in e.measurements}):
        xs, ys, errors = [], [], []
        k = named.index(index) if index in named else None
        for x, e in enumerate(entries):
            o = next((m for m in e.measurements if m.index == index), None)
            if o is None or o.time is None:
                if o is not None and o.state == "failed" and k is not None:
                    across.plot(x, floor, "x", color=FAILED, markersize=8)
                continue
            xs.append(x + (0.04 * k if k is not None else 0))
            ys.append(o.time)
            errors.append(o.time * o.spread if o.spread else 0.0)
            if o.index == e.index:
                across.plot(xs[-1], o.time, "*", color=CHOSEN, markersize=16, markeredgecolor="black", zorder=5)
        if not xs:
            continue
        if k is None:  # not named: a thin grey line, for the shape of the space
            across.plot(xs, ys, "-", color=PRUNED, linewidth=0.6, alpha=0.5, zorder=1)
        else:
            across.errorbar(xs, ys, yerr=errors, fmt="o-", color=cmap(k % 10), label=wrap(f"#{index}: {names[index]}",
                            40), markersize=4, linewidth=1.2, capsize=2, alpha=0.9, zorder=3)
    across.plot([], [], "*", color=CHOSEN, markersize=12, markeredgecolor="black", label="chosen at that key")
    if any(o.state == "failed" for e in entries for o in e.measurements):
        across.plot([], [], "x", color=FAILED, label="failed")
    across.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    across.yaxis.set_major_formatter(plain)
    across.yaxis.set_minor_formatter(plain)
    per_key = len({_ranks_of(e) for e in entries}) > 1  # keys tuned on different rank counts: each says its own
    least = [e.statistic == LEAST for e in entries]
    mixed = any(least) and not all(least)  # mark the keys whose times are least samples
    across.set_xticks(range(len(entries)), [wrap(e.key, 24) + (f"\n{_ranks_of(e)}" if per_key else "")
                                            + ("\nnoisy" if mixed and e.statistic == LEAST else "") for e in entries],
                      rotation=20 if len(entries) > 6 else 0, ha="right" if len(entries) > 6 else "center",
                      fontsize=8)
    across.set_xlabel("key", fontsize=9)
    across.set_ylabel(wrap(time_axis(entries), 32), fontsize=9)
    legend_title = wrap("every config also has " + ", ".join(shared), 40) if shared else None
    others = len({o.index for e in entries for o in e.measurements if o.time is not None} - set(named))
    if others:
        across.plot([], [], "-", color=PRUNED, label=f"{others} other configs")
    across.legend(fontsize=8, title=legend_title, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    across.grid(alpha=0.3)
    if drifting:
        key_colors = plt.get_cmap("tab10")
        for x, e in enumerate(entries):  # each round relative to its own config's median: drift is a common trend
            points = sorted((order, t / o.time) for pos, o in enumerate(e.measurements) if o.time and o.order
                            for order, t in zip(*timeline(o, pos), strict=True))
            if points:
                drift.plot([p[0] for p in points], [p[1] for p in points], "o-", markersize=3, linewidth=0.8,
                           color=key_colors(x % 10), label=_clip(e.key, 28))
        drift.xaxis.set_major_locator(MaxNLocator(integer=True))
        drift.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        drift.set_xlabel("order measured", fontsize=9)
        base = "median" if not mixed and entries[0].statistic != LEAST else "time"  # least samples: not medians
        drift.set_ylabel(f"sample / its config's {base}", fontsize=9)
        drift.set_title(f"measurement timelines: every sample against its config's {base} (a trend is drift)",
                        fontsize=10)
        if len(entries) <= 10:
            drift.legend(fontsize=8, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="key",
                         title_fontsize=8)
        drift.grid(alpha=0.3)
    first = entries[0]
    fig.suptitle(wrap(f"{first.function}{' / ' + first.kernel if first.kernel else ''}: {len(entries)} "
                      f"decision(s) across keys; {_ranks_text(entries)}, {_gpu(first)}", TITLE_WIDTH), fontsize=10)
    fig.tight_layout()
    return fig
