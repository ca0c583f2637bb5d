"""Plots of repeated runs and sweeps: medians with their spread, never a lone line.

A curve drawn from one run invites a reader to trust its wiggles; the repeated forms show the
median and how far the runs went (a band over time, confidence intervals on summary metrics),
and a sweep shows each metric against the swept value, one line per transport, with the same
intervals. Only valid runs are drawn (testbed.analysis.aggregate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.analysis.durations import fmt_duration
from testbed.analysis.plots import (
    _bin_width,
    _finish,
    _pyplot,
    _time_axis,
    _trailing_mean,
    _window_ends,
    colour,
)

_LINESTYLES = ("-", "--", ":", "-.")
HEADLINE = ("goodput_mbps", "max_stall_ms", "failover_ms", "step_p100_ms")
"""The metrics the summary plots show when the runs measured them."""


def plot_goodput_band(
    series: Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]],
    path: str | Path,
    *,
    title: str = "Goodput",
    smooth_bins: int = 5,
) -> Path:
    """Per transport: the median over runs of goodput per time bin, and the band from the
    lowest to the highest run (each run first averaged over a trailing window of `smooth_bins`
    bins, drawn where the window ends, as in plots.plot_goodput; the title says how long)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.2))
    first = next((r[0] for runs in series.values() for r in runs if len(r[0]) >= 2), [])
    bin_s = _bin_width(first)
    span = max((r[0][-1] + bin_s for runs in series.values() for r in runs if len(r[0])),
               default=bin_s)  # fmt: skip
    scale = _time_axis(ax, span)
    for i, (name, runs) in enumerate(series.items()):
        runs = [r for r in runs if len(r[0])]
        if not runs:
            continue
        n = min(len(t) for t, _ in runs)
        times = _window_ends(runs[0][0][:n], bin_s, scale)
        stack = np.vstack([_trailing_mean(list(v[:n]), smooth_bins) for _, v in runs])
        c = colour(name, i)
        ax.fill_between(times, stack.min(axis=0), stack.max(axis=0), color=c, alpha=0.2, lw=0)
        ax.plot(times, np.median(stack, axis=0), color=c, lw=1.8, label=f"{name} (n={len(runs)})")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("goodput (Mbps)")
    window = f"trailing {fmt_duration(max(smooth_bins, 1) * bin_s)} average"
    ax.set_title(
        f"{title}: median over runs, band = min..max ({window} of {fmt_duration(bin_s)} bins)"
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return _finish(fig, path)


def _headline(block: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [m for m in HEADLINE if any(m in s.get("metrics", {}) for s in block.values())]


def plot_metric_intervals(
    block: Mapping[str, Mapping[str, Any]], path: str | Path, *, title: str = ""
) -> Path:
    """One panel per headline metric: per transport its median with the confidence interval
    as an error bar, and every valid run as a dot beside it."""
    plt = _pyplot()
    names = _headline(block) or ["goodput_mbps"]
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names) + 0.8, 3.6), squeeze=False)
    transports = list(block)
    for ax, metric in zip(axes[0], names, strict=True):
        for i, t in enumerate(transports):
            s = block[t].get("metrics", {}).get(metric)
            if not s or s["median"] is None:
                continue
            c = colour(t, i)
            err = [[s["median"] - s["ci_low"]], [s["ci_high"] - s["median"]]]
            ax.errorbar([i], [s["median"]], yerr=err, fmt="o", color=c, capsize=5, ms=7)
            dots = [v for v in s["values"] if v is not None]
            ax.scatter([i + 0.18] * len(dots), dots, s=10, color=c, alpha=0.5)
        ax.set_xticks(range(len(transports)), transports, rotation=20, fontsize=8)
        ax.set_xlim(-0.6, len(transports) - 0.4)
        unit = next(
            (b["metrics"][metric]["unit"] for b in block.values() if metric in b["metrics"]), ""
        )
        ax.set_title(f"{metric} ({unit})" if unit else metric, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{title}: median and 95 % CI (dots: runs)" if title else "median and 95 % CI")
    fig.tight_layout()
    return _finish(fig, path)


def plot_sweep(
    points: Sequence[Mapping[str, Any]], key: str, path: str | Path, *, title: str = ""
) -> Path:
    """Each headline metric against the swept `key`, one line per transport (and per value
    of any other swept key), with confidence intervals when points were repeated.

    `points`: sweep.json's points ({values, transports: {t: {metrics: {m: stats}}}})."""
    plt = _pyplot()
    blocks = [p.get("transports", {}) for p in points]
    metrics = sorted(
        {m for b in blocks for m in _headline(b)}, key=lambda m: HEADLINE.index(m)
    ) or ["goodput_mbps"]
    xs_raw = [p["values"][key] for p in points]
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_raw)
    labels = list(dict.fromkeys(str(x) for x in xs_raw))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics) + 0.8, 3.8), squeeze=False)
    others = [k for k in (points[0]["values"] if points else {}) if k != key]
    lines: dict[tuple[str, str], list[tuple[float, dict]]] = {}
    for p in points:
        x = float(p["values"][key]) if numeric else labels.index(str(p["values"][key]))
        rest = ", ".join(f"{k}={p['values'][k]}" for k in others)
        for t, s in p.get("transports", {}).items():
            lines.setdefault((t, rest), []).append((x, s.get("metrics", {})))
    rests = list(dict.fromkeys(rest for _, rest in lines))
    for ax, metric in zip(axes[0], metrics, strict=True):
        for i, ((t, rest), pts) in enumerate(lines.items()):
            pts = sorted(
                (x, m[metric]) for x, m in pts if m.get(metric, {}).get("median") is not None
            )
            if not pts:
                continue
            x = [a for a, _ in pts]
            med = [s["median"] for _, s in pts]
            err = [
                [s["median"] - s["ci_low"] for _, s in pts],
                [s["ci_high"] - s["median"] for _, s in pts],
            ]
            label = t + (f" ({rest})" if rest else "")
            style = _LINESTYLES[rests.index(rest) % len(_LINESTYLES)]
            ax.errorbar(
                x, med, yerr=err, marker="o", capsize=4, color=colour(t, i), ls=style, label=label
            )
        ax.set_xlabel(key)
        if not numeric:
            ax.set_xticks(range(len(labels)), labels)
        ax.set_title(metric, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{title}: sweep over {key}" if title else f"sweep over {key}")
    fig.tight_layout()
    return _finish(fig, path)
