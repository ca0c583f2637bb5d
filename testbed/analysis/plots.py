"""The pictures of a run, drawn from plain data into PNG, SVG or PDF files.

Each `plot_*` function takes lists and dicts (no run objects, no fabric), so a plot can be
redrawn from the CSV files of an old run and tested without one; `plot_run` draws all of them
from the runner's `TransportMetrics`. Matplotlib's Agg backend is forced: runs
happen over SSH, in CI and under sudo, where there is no display.

Readability rules these plots follow: one colour per transport in every plot of a run (the
`TRANSPORT_COLOURS` table) and one colour per path name in every plot of a run (`path_colours`:
from the names, never from their rank in bytes, so "via spine1" has one colour for every
transport and in path_share too); failures are red dashed lines and recoveries green dotted ones,
labelled with what happened, labels that never overlap (measured, else numbered); axes say
their unit, the one that fits the run (µs, ms or s), and titles say how long the bins and the
averaging windows are in those units (a dilated fabric's bins are 10 ms x its time scale);
averages are trailing, drawn where their window ends, so no curve moves before an event;
nothing is drawn that the data did not show (stalls stay visible as gaps in the raw bins under
the smoothed line).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from testbed.analysis.durations import fmt_duration, unit_for
from testbed.analysis.metrics import BIN_S, AppliedEvent, TransportMetrics, percentiles
from testbed.analysis.plot_formats import PLOT_FORMATS
from testbed.analysis.port_series import CONGESTION, FAILURE, OTHER, drops_by_cause
from testbed.harness.records import path_name
from testbed.scenario import FAILURE_ACTIONS

if TYPE_CHECKING:
    import matplotlib.pyplot as plt
    from matplotlib.text import Annotation


def _pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend, imported on first use. Lazy on purpose: it costs
    ~0.4 s, and every `testbed` command imports this module through the runner, while only a
    finished run draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


# No red or green here: those are the event markers' colours.
TRANSPORT_COLOURS = {
    "mrc": "#1f77b4",
    "single-path": "#ff7f0e",
    "spray-no-failover": "#9467bd",
    "tcp": "#7f7f7f",
    "mptcp": "#8c564b",
}
_OTHER_COLOURS = ["#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939"]
FAILURE_STYLE = {"color": "#c0392b", "linestyle": "--", "linewidth": 1.2}
RECOVERY_STYLE = {"color": "#27ae60", "linestyle": ":", "linewidth": 1.4}
PATH_PALETTE = (
    "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#393b79", "#637939", "#8c6d31", "#7b4173", "#3182bd",
)  # fmt: skip
"""Path colours: tab10 without its red and green (the event markers'), then darker ones."""
OTHER_COLOUR = "#bfbfbf"  # the EVs grouped as "other"
DPI = 110
_PCT_MARKERS = (("p50", "o"), ("p99", "s"), ("p100", "^"))

EventMark = tuple[float, str]
"""(time in s, label such as "link-down spine1-leaf2"); the label's first word is the action."""


def colour(transport: str, index: int = 0) -> str:
    return TRANSPORT_COLOURS.get(transport, _OTHER_COLOURS[index % len(_OTHER_COLOURS)])


def path_colours(names: Iterable[str]) -> dict[str, str]:
    """Path (or EV) name -> colour, decided by the set of names alone: spines first, then the
    rest, each in natural order (spine10 after spine9). Given the same map, every plot of a run
    draws a name in the same colour, whatever its rank in bytes in that plot. Past
    len(PATH_PALETTE) names, the colours are spread over a continuous map instead."""
    ordered = sorted(set(names), key=lambda n: ("spine" not in n, _natural(n)))
    if len(ordered) <= len(PATH_PALETTE):
        return dict(zip(ordered, PATH_PALETTE, strict=False))
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    cmap = colormaps["viridis"]
    return {n: to_hex(cmap(i / (len(ordered) - 1))) for i, n in enumerate(ordered)}


def _trailing_mean(values: Sequence[float], width: int) -> list[float]:
    """Trailing moving average: entry i is the mean of bins i-width+1..i (at the start, of the
    bins that exist). Trailing, not centred: a centred window lets every curve fall half a
    window *before* a failure, as if the transports had seen it coming. Draw entry i at the
    end of bin i (`_window_ends`), when its window has closed."""
    if width <= 1:
        return list(values)
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    return [
        (prefix[i + 1] - prefix[max(0, i + 1 - width)]) / (i + 1 - max(0, i + 1 - width))
        for i in range(len(values))
    ]


def _bin_width(times: Sequence[float]) -> float:
    """The bins' width from their start times; BIN_S for fewer than two bins."""
    return float(times[1] - times[0]) if len(times) >= 2 and times[1] > times[0] else BIN_S


def _window_ends(times: Sequence[float], bin_s: float, scale: float) -> list[float]:
    """Where a trailing mean's entries go on an axis in units of `scale` seconds."""
    return [(t + bin_s) / scale for t in times]


def _time_axis(ax: plt.Axes, span_s: float, what: str = "time since workload start") -> float:
    """Label the x axis in the unit that fits a run of `span_s` seconds (µs, ms or s); returns
    that unit's length in seconds, by which the caller divides its times."""
    name, size = unit_for(span_s)
    ax.set_xlabel(f"{what} ({name})")
    return size


EVENT_ROWS = 4
"""Rows of event labels in the head-room above the data; past that, the events are numbered."""
_EVENT_FONT = 7.5


def _mark_events(ax: plt.Axes, events: Sequence[EventMark]) -> None:
    """A vertical line per event (times in the axis' data units), labelled at the top of the
    axes where no label can overlap another.

    Call after `fig.tight_layout()`: the renderer measures each label in the final layout, and
    a label goes in the first of EVENT_ROWS rows where its box, right or left of its line and
    inside the axes, meets no box already placed. If some label fits nowhere, every event is
    numbered instead: the numbers go in rows as many as they need, and the key ("1 blackhole
    spine1-leaf2; 2 ...") under the x-axis label."""
    if not events:
        return
    ordered = sorted(events)
    styles = []
    for t, label in ordered:
        style = FAILURE_STYLE if label.split(" ", 1)[0] in FAILURE_ACTIONS else RECOVERY_STYLE
        ax.axvline(t, **style, zorder=1)
        styles.append(style["color"])
    items = [(t, label, c) for (t, label), c in zip(ordered, styles, strict=True)]
    if _place_labels(ax, items, EVENT_ROWS):
        return
    key = "; ".join(f"{k} {label}" for k, (_, label) in enumerate(ordered, 1))
    ax.annotate(
        textwrap.fill("events: " + key, 130),
        xy=(0.0, 0.0),
        xycoords=("axes fraction", ax.xaxis.label),
        xytext=(0, -3),
        textcoords="offset points",
        fontsize=_EVENT_FONT,
        va="top",
        ha="left",
    )
    ax.figure.tight_layout()
    _place_labels(ax, [(t, str(k), c) for k, (t, _, c) in enumerate(items, 1)], None)


def _place_labels(ax: plt.Axes, items: Sequence[tuple[float, str, str]], rows: int | None) -> bool:
    """Annotate each (time, text, colour) in the first row (of `rows`; None: unbounded) where
    it fits without overlapping; False, with nothing left drawn, if one fits in none."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed: list = []
    boxes: list = []
    pad = 0.15 * _EVENT_FONT * ax.figure.dpi / 72  # the white box around the text (px)
    lo, hi = sorted(ax.get_xlim())
    for t, text, c in items:
        if not lo <= t <= hi:  # off the axis: no line to label
            continue
        done = False
        # Unbounded: a row below every placed label is free, so len(items) rows always do.
        for row in range(rows if rows is not None else len(items)):
            for ha, dx in (("left", 3), ("right", -3)):
                a = _event_label(ax, t, text, c, ha, dx, row)
                box = a.get_window_extent(renderer).padded(pad)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1
                inside = inside and (rows is None or box.y0 >= frame.y0)
                if inside and not any(box.overlaps(b) for b in boxes):
                    placed.append(a)
                    boxes.append(box)
                    done = True
                    break
                a.remove()
            if done:
                break
        if not done:
            for a in placed:
                a.remove()
            return False
    return True


def _event_label(
    ax: plt.Axes, t: float, text: str, colour_: str, ha: str, dx: float, row: int
) -> Annotation:
    """One event label in row `row` (rows one label's height and a gap apart)."""
    step = _EVENT_FONT * 1.2 + 2 * 0.15 * _EVENT_FONT + 1.5  # text, its box's pad, a gap (pt)
    return ax.annotate(
        text,
        xy=(t, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(dx, -4 - step * row),
        textcoords="offset points",
        fontsize=_EVENT_FONT,
        va="top",
        ha=ha,
        color=colour_,
        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
    )


def _finish(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    return path


def _span(times: Sequence[float], bin_s: float) -> float:
    return (times[-1] + bin_s) if len(times) else bin_s


def smoothing_caption(smooth_bins: int, bin_s: float) -> str:
    """What a plot's smoothed line and faint steps are, in the units that fit the run."""
    if smooth_bins <= 1:
        return f"{fmt_duration(bin_s)} bins"
    return f"line: trailing {fmt_duration(smooth_bins * bin_s)} average; faint: {fmt_duration(bin_s)} bins"


def plot_goodput(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path: str | Path,
    *,
    events: Sequence[EventMark] = (),
    bottleneck_mbps: float | None = None,
    title: str = "Goodput",
    smooth_bins: int = 5,
    bin_s: float | None = None,
) -> Path:
    """Goodput over time per transport: the raw bins faintly, a trailing moving average over
    `smooth_bins` bins on top, drawn where each window ends. `bin_s`: the bins' width (by
    default from the times: a dilated fabric's bins are BIN_S x its time scale); the title
    states both lengths and the time axis takes the unit that fits the run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.2))
    first = next((t for t, _ in series.values() if len(t) >= 2), [])
    bin_s = bin_s or _bin_width(first)
    span = max((_span(t, bin_s) for t, _ in series.values()), default=bin_s)
    scale = _time_axis(ax, span)
    top = 0.0
    for i, (name, (times, mbps)) in enumerate(series.items()):
        c = colour(name, i)
        xs = [t / scale for t in times]
        ax.step(xs, mbps, where="post", color=c, alpha=0.22, linewidth=0.7)
        mean = _trailing_mean(mbps, smooth_bins)
        ax.plot(_window_ends(times, bin_s, scale), mean, color=c, linewidth=1.8, label=name)
        top = max(top, max(mean, default=0.0))
    if bottleneck_mbps:
        ax.axhline(bottleneck_mbps, color="black", linewidth=0.8, alpha=0.5)
        ax.annotate(
            f"bottleneck {bottleneck_mbps:g} Mbps",
            xy=(0.0, bottleneck_mbps),
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=8,
            alpha=0.7,
        )
        top = max(top, bottleneck_mbps)
    ax.set_ylim(0, (top or 1.0) * 1.45)  # head-room for the event labels
    ax.set_xlim(0, span / scale)
    ax.set_ylabel("goodput (Mbps)")
    ax.set_title(f"{title}  ({smoothing_caption(smooth_bins, bin_s)})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    _mark_events(ax, [(t / scale, label) for t, label in events])
    return _finish(fig, path)


def plot_ev_share(
    bin_times: Sequence[float],
    ev_bytes: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    events: Sequence[EventMark] = (),
    title: str = "Traffic share per EV",
    max_series: int = 10,
    smooth_bins: int = 5,
    colours: Mapping[str, str] | None = None,
    bin_s: float | None = None,
) -> Path:
    """Stacked share of sent bytes per EV (or path) over time; the smallest grouped as "other".

    A connection has up to hundreds of EVs; more than ~10 colours cannot be told apart, so the
    largest `max_series - 1` are drawn and the rest summed. Bands are stacked in name order and
    coloured from `colours` (`path_colours`; default: from these names), so two transports'
    plots of one run draw each path alike. Bins with no traffic are left empty rather than drawn
    as an invented share. Shares are of a trailing window of `smooth_bins` bins of `bin_s`
    (default: from the times), drawn where each window ends; the title says how long it is.
    """
    bin_s = bin_s or _bin_width(bin_times)
    totals = sorted(ev_bytes, key=lambda k: -sum(ev_bytes[k]))
    keep = totals if len(totals) <= max_series else totals[: max_series - 1]
    keep = sorted(keep, key=_natural)
    colours = colours if colours is not None else path_colours(ev_bytes)
    rows = {k: _trailing_mean(ev_bytes[k], smooth_bins) for k in keep}
    rest = [k for k in totals if k not in keep]
    if rest:
        other = [sum(ev_bytes[k][i] for k in rest) for i in range(len(bin_times))]
        rows[f"other ({len(rest)} EVs)"] = _trailing_mean(other, smooth_bins)
    n = len(bin_times)
    sums = [sum(r[i] for r in rows.values()) for i in range(n)]
    shares = {
        k: [r[i] / sums[i] if sums[i] > 0 else math.nan for i in range(n)] for k, r in rows.items()
    }
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.2))
    scale = _time_axis(ax, _span(bin_times, bin_s))
    xs = _window_ends(bin_times, bin_s, scale)
    fallback = path_colours(keep)
    band_colours = [colours.get(k, fallback[k]) for k in keep]
    if rest:
        band_colours.append(OTHER_COLOUR)
    ax.stackplot(xs, *shares.values(), labels=list(shares), colors=band_colours, alpha=0.9)
    ax.set_xlim(bin_times[0] / scale if n else 0, xs[-1] if n else 1)
    ax.set_ylim(0, 1.28)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_yticklabels(["0%", "25%", "50%", "75%", "100%"])
    ax.set_ylabel("share of bytes sent")
    window = fmt_duration(max(smooth_bins, 1) * bin_s)
    ax.set_title(f"{title}  (share of each trailing {window} window)", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    # Legend top-to-bottom in the order the bands are stacked on screen.
    ax.legend(
        handles[::-1],
        labels[::-1],
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    _mark_events(ax, [(t / scale, label) for t, label in events])
    return _finish(fig, path)


def plot_path_share(
    shares: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
    path: str | Path,
    *,
    band_pct: float = 5.0,
    title: str = "Traffic share per path",
    colours: Mapping[str, str] | None = None,
) -> Path:
    """Each leaf's uplinks (top) and downlinks (bottom): the share of its bytes each spine
    carried, per transport (testbed.analysis.path_share), against the equal share and a
    +-`band_pct` % band around it.

    shares: transport -> {"uplinks"|"downlinks": {leaf: {spine: share}}}. Why bars per link:
    an unequal spread is a few links far off, which a mean hides. Bars take the transport's
    colour; each link's label and the square under it take its spine's path colour
    (`colours`, the run's `path_colours`), as in the EV-share plots.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.4), sharey=True)
    names = list(shares)
    width = 0.8 / max(len(names), 1)
    for ax, direction in zip(axes, ("uplinks", "downlinks"), strict=True):
        links = sorted(
            {(leaf, spine) for s in shares.values() for leaf, per in s.get(direction, {}).items()
             for spine in per},
            key=lambda k: (_natural(k[0]), _natural(k[1])),
        )  # fmt: skip
        spines_per_leaf = {
            leaf: len(per) for s in shares.values() for leaf, per in s.get(direction, {}).items()
        }
        equal = {leaf: 100.0 / n for leaf, n in spines_per_leaf.items()}
        for i, name in enumerate(names):
            per_leaf = shares[name].get(direction, {})
            ys = [100.0 * per_leaf.get(leaf, {}).get(spine, math.nan) for leaf, spine in links]
            xs = [x + (i - (len(names) - 1) / 2) * width for x in range(len(links))]
            ax.bar(xs, ys, width, color=colour(name, i), label=name)
        for x, (leaf, _spine) in enumerate(links):
            e = equal[leaf]
            ax.fill_between([x - 0.45, x + 0.45], e * (1 - band_pct / 100), e * (1 + band_pct / 100),
                            color="black", alpha=0.12, linewidth=0)  # fmt: skip
            ax.plot([x - 0.45, x + 0.45], [e, e], color="black", linewidth=0.8)
        ax.set_xticks(range(len(links)))
        sep = "->" if direction == "uplinks" else "<-"
        ax.set_xticklabels([f"{leaf}{sep}{spine}" for leaf, spine in links], rotation=60,
                           ha="right", fontsize=7)  # fmt: skip
        spine_colours = (
            colours if colours is not None else path_colours(path_name(spine) for _, spine in links)
        )
        for x, (label, (_leaf, spine)) in enumerate(zip(ax.get_xticklabels(), links, strict=True)):
            c = spine_colours.get(path_name(spine), "black")
            label.set_color(c)
            ax.plot([x], [0], marker="s", markersize=7, color=c, clip_on=False, zorder=3)
        ax.set_ylabel("share of the leaf's bytes (%)")
        what = "sent up each uplink" if direction == "uplinks" else "received from each spine"
        ax.set_title(f"{title}: {what} (band: equal share +-{band_pct:g} %)", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    top = max(
        (100.0 * v for s in shares.values() for d in ("uplinks", "downlinks")
         for per in s.get(d, {}).values() for v in per.values()),
        default=50.0,
    )  # fmt: skip
    axes[0].set_ylim(0, top * 1.25)
    axes[0].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _finish(fig, path)


def _natural(name: str) -> tuple:
    """leaf10 after leaf9."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def plot_step_cdf(
    step_ms: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    unfinished: Mapping[str, int] | None = None,
    title: str = "All-reduce step time",
) -> Path:
    """Empirical CDF of step times per transport, with P50, P99 and P100 marked and written.

    Unfinished steps keep their place in the denominator, so such a curve stops below 1 and
    says how many steps never finished: the honest picture of a P100 that is "never".
    """
    unfinished = unfinished or {}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.6))
    finite = [v for vals in step_ms.values() for v in vals if v > 0]
    log = bool(finite) and max(finite) / min(finite) > 20
    # The axis' unit fits the steps (a dilated fabric's steps are tens of µs): x = ms * per_ms.
    unit, size = unit_for(max(finite, default=1.0) / 1e3)
    per_ms = 1e-3 / size
    for i, (name, vals) in enumerate(step_ms.items()):
        c = colour(name, i)
        missing = unfinished.get(name, 0)
        data = sorted(v * per_ms for v in vals)
        total = len(data) + missing
        if total == 0:
            continue
        ys = [(k + 1) / total for k in range(len(data))]
        pct = percentiles([*data, *([math.inf] * missing)])  # in `unit`
        parts = []
        for key, marker in _PCT_MARKERS:
            v = pct[key]
            if v is None:
                parts.append(f"{key.upper()} never")
                continue
            rank = sum(1 for x in data if x <= v) / total
            ax.plot([v], [rank], marker=marker, color=c, markersize=7, markeredgecolor="black")
            parts.append(f"{key.upper()} {fmt_duration(v * size)}")
        p50, p100 = pct["p50"], pct["p100"]
        tail = f"  (P100/P50 {p100 / p50:.2f})" if p50 and p100 else ""
        if missing:
            tail += f"  ({missing} of {total} never finished)"
        ax.step(
            data,
            ys,
            where="post",
            color=c,
            linewidth=1.8,
            label=f"{name}: {' · '.join(parts)}{tail}",
        )
    if log:
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter  # with pyplot (see _pyplot)

        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else "")
        )
        ax.tick_params(axis="x", which="minor", labelsize=7)
    for key, marker in _PCT_MARKERS:
        ax.plot([], [], marker, color="white", markeredgecolor="black", label=key.upper())
    if not finite:
        ax.set_xlim(0, 1)  # nothing finished: an empty axis, not a negative one
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"step time ({unit})" + (", log scale" if log else ""))
    ax.set_ylabel("fraction of steps")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9, ncols=1)
    fig.tight_layout()
    return _finish(fig, path)


DROP_BARS = (
    ("trims", "trims", "#f39c12"),
    (CONGESTION, "drops: congestion (queue full)", "#8e44ad"),
    (FAILURE, "drops: failure (link down, black hole, loss)", "#c0392b"),
    (OTHER, "drops: other (emulator)", "#7f7f7f"),
)


def plot_ports(
    queues: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    counters: Mapping[str, Mapping[str, int | Mapping[str, int]]],
    path: str | Path,
    *,
    events: Sequence[EventMark] = (),
    queue_limit_kb: float | None = None,
    interval_ms: float | None = None,
    max_ports: int = 8,
    title: str = "Switch ports",
) -> Path:
    """Queue depth over time of the busiest ports, and trims and drops per port by cause.

    queues: port -> (times s, data-queue bytes): with `interval_ms`, the deepest queue per
    interval (testbed.analysis.port_series), else instantaneous samples. counters: port ->
    {"trims": n, "drops": n or {reason: n}}; drops are split into congestion (a full queue),
    failure (what a failure action dropped) and other (testbed.analysis.port_series.DROP_CAUSES),
    since a black hole's drops and a full queue's say opposite things about a transport. Only
    the `max_ports` ports with the deepest queues (top) and the most trims + drops (bottom) are
    shown: a fabric has dozens of ports, most of them idle.
    """
    plt = _pyplot()
    fig, (ax_q, ax_c) = plt.subplots(2, 1, figsize=(10, 6.8), gridspec_kw={"height_ratios": [3, 2]})
    busiest = sorted(queues, key=lambda p: -max(queues[p][1], default=0))[:max_ports]
    cmap = plt.get_cmap("tab10")
    ends = [queues[p][0][-1] for p in queues if len(queues[p][0])] + [t for t, _ in events]
    scale = _time_axis(ax_q, max(ends, default=1.0))
    for i, port in enumerate(busiest):
        times, depth = queues[port]
        xs = [t / scale for t in times]
        ax_q.step(xs, [d / 1000 for d in depth], where="post", color=cmap(i % 10), label=port)
    if queue_limit_kb:
        ax_q.axhline(queue_limit_kb, color="black", linewidth=0.8, alpha=0.6)
        ax_q.annotate(
            f"queue limit {queue_limit_kb:g} kB",
            xy=(0.0, queue_limit_kb),
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=8,
        )
    peak = max((max(queues[p][1], default=0) / 1000 for p in busiest), default=0.0)
    ax_q.set_ylim(0, max(peak, queue_limit_kb or 0, 1.0) * 1.4)
    ax_q.set_xlim(left=0)
    if interval_ms:
        every = fmt_duration(interval_ms / 1e3)
        ax_q.set_ylabel(f"deepest data queue\nper {every} (kB)")
        what = f"deepest queue per {every} of the {len(busiest)} deepest ports"
    else:
        ax_q.set_ylabel("data queue (kB)")
        what = f"queue depth of the {len(busiest)} deepest ports"
    ax_q.set_title(f"{title}: {what}", fontsize=10)
    ax_q.grid(alpha=0.3)
    if busiest:
        ax_q.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)

    def total(value: int | Mapping[str, int]) -> int:
        return sum(value.values()) if isinstance(value, Mapping) else int(value)

    rows = {
        p: {"trims": total(c.get("trims", 0)), **drops_by_cause(c.get("drops", 0))}
        for p, c in counters.items()
    }
    worst = [p for p in sorted(rows, key=lambda p: -sum(rows[p].values()))
             if sum(rows[p].values()) > 0][:max_ports]  # fmt: skip
    # trims, congestion and failure always (a zero says something); "other" only if it happened
    bars = [b for b in DROP_BARS if b[0] != OTHER or any(rows[p][OTHER] for p in worst)]
    if worst:
        width = 0.8 / len(bars)
        for j, (key, label, c) in enumerate(bars):
            xs = [x + (j - (len(bars) - 1) / 2) * width for x in range(len(worst))]
            drawn = ax_c.bar(xs, [rows[p][key] for p in worst], width, label=label, color=c)
            ax_c.bar_label(drawn, fontsize=7, padding=1)
        ax_c.set_xticks(list(range(len(worst))))
        ax_c.set_xticklabels(worst, rotation=20, ha="right", fontsize=8)
        ax_c.set_ylim(0, max(max(r.values()) for r in rows.values()) * 1.3)
        ax_c.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    else:
        ax_c.text(0.5, 0.5, "no trims and no drops on any port", ha="center", va="center")
        ax_c.set_xticks([])
    ax_c.set_ylabel("packets")
    ax_c.set_title(f"{title}: trims and drops per port by cause (whole run)", fontsize=10)
    ax_c.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    _mark_events(ax_q, [(t / scale, label) for t, label in events])
    return _finish(fig, path)


PortData = tuple[
    Mapping[str, tuple[Sequence[float], Sequence[float]]],
    Mapping[str, Mapping[str, int | Mapping[str, int]]],
]
"""(queues, counters) of one transport's run, as `plot_ports` takes them."""


def plot_run(
    out_dir: str | Path,
    metrics: Mapping[str, TransportMetrics],
    *,
    events: Sequence[EventMark] = (),
    ports: Mapping[str, PortData] | None = None,
    path_shares: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]] | None = None,
    queue_limit_kb: float | None = None,
    queue_interval_ms: float | None = None,
    title: str = "",
    fmt: str = "png",
) -> dict[str, Path]:
    """Every plot a run has data for, into out_dir as `fmt` files (PLOT_FORMATS); returns
    {caption: path} for the report.

    A convenience over the functions above for the runner. The EV-share plot is drawn per
    transport that reported per-EV bytes, the ports plot per transport whose switch counters
    are in `ports` (transport -> PortData), the path-share plot if `path_shares` (transport
    -> testbed.analysis.path_share.path_shares) has any, the step CDF only for all-reduce runs.
    One `path_colours` map serves every EV-share plot and the path-share plot.
    """
    if fmt not in PLOT_FORMATS:
        raise ValueError(f"plot format: {fmt!r} is not one of {', '.join(PLOT_FORMATS)}")
    out_dir = Path(out_dir)
    made: dict[str, Path] = {}
    if not metrics:
        return made
    heading = f"{title}: " if title else ""
    first = next(iter(metrics.values()))
    made["Goodput over time"] = plot_goodput(
        {n: (m.bin_times, m.goodput_bins) for n, m in metrics.items()},
        out_dir / f"goodput.{fmt}",
        events=events,
        bottleneck_mbps=first.bottleneck_mbps if first.bottleneck_mbps < math.inf else None,
        title=f"{heading}goodput" if title else "Goodput",
    )
    spines = {
        path_name(spine)
        for s in (path_shares or {}).values()
        for per_leaf in s.values()
        if isinstance(per_leaf, Mapping)
        for per in per_leaf.values()
        for spine in per
    }
    colours = path_colours({k for m in metrics.values() for k in m.ev_bytes} | spines)
    for n, m in metrics.items():
        ev = m.ev_bytes
        if ev:
            length = min(len(v) for v in ev.values())
            made[f"Traffic share per EV ({n})"] = plot_ev_share(
                m.bin_times[:length],
                {k: list(v)[:length] for k, v in ev.items()},
                out_dir / f"ev_share_{n}.{fmt}",
                events=events,
                title=f"{heading}traffic share per EV, {n}" if title else f"Traffic share per EV, {n}",
                colours=colours,
            )  # fmt: skip
    if any(m.step_ms or m.steps_unfinished for m in metrics.values()):
        made["Step-time CDF"] = plot_step_cdf(
            {n: m.step_ms for n, m in metrics.items()},
            out_dir / f"step_cdf.{fmt}",
            unfinished={n: m.steps_unfinished for n, m in metrics.items()},
            title=f"{heading}all-reduce step time" if title else "All-reduce step time",
        )
    for n, (queues, counters) in (ports or {}).items():
        if queues or counters:
            made[f"Switch ports ({n}): queues, trims and drops"] = plot_ports(
                queues,
                counters,
                out_dir / f"ports_{n}.{fmt}",
                events=events,
                queue_limit_kb=queue_limit_kb,
                interval_ms=queue_interval_ms,
                title=f"{heading}switch ports, {n}",
            )
    if path_shares:
        made["Traffic share per path (leaf uplinks and downlinks)"] = plot_path_share(
            path_shares, out_dir / f"path_share.{fmt}", title=title or "Traffic share per path",
            colours=colours,
        )  # fmt: skip
    return made


def event_marks(events: Sequence[AppliedEvent]) -> list[EventMark]:
    """(time, label) for plots from `testbed.analysis.metrics.AppliedEvent`s (applied time when known)."""
    return [(a.time, a.event.describe()) for a in events]
