"""The iteration timeline of a trace workload: ranks by time, what each was doing.

One row per rank; each iteration a pale band, each collective a bar coloured by its phase
(forward, input gradient, weight gradient, or its kind when the trace's names do not say;
weight-gradient ones, which overlap the backward pass, in the row's lower half), the
failures and repairs as the goodput plot marks them. The gaps between bars are compute. Each
iteration during which EVs failed on a link the report could name (summary.json's
`trace.iterations`) has the collective those failures hit outlined in red on every rank, named
under the plot with the link and whether the iteration waited for it; with none, the slowest
iteration's collective, if the network held it back. What a failure delayed, and whether the iteration waited for it, is there to see.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.analysis.plots import EventMark, _finish, _mark_events, _pyplot

PHASE_COLOURS = {"fwd": "#4c72b0", "ig": "#dd8452", "wg": "#55a868"}
KIND_COLOURS = {"allreduce": "#55a868", "allgather": "#8172b3", "reducescatter": "#937860",
                "alltoall": "#c44e52", "send": "#64b5cd", "recv": "#64b5cd"}  # fmt: skip


CULPRIT_COLOUR = "#d62728"
"""The outline of the collective that held the slowest iteration back."""


def _culprit(h: Mapping) -> str | None:
    """The collective to outline in iteration entry `h`: the one a failure hit on a named link;
    else, if the network held the iteration back, the one it waited for."""
    if h.get("link") and h.get("link_collective"):
        return h["link_collective"]
    return h.get("waited_for") if h.get("held_by") == "network" else None


def _colour(name: str, kind: str) -> str:
    for part in name.split("."):
        if part in PHASE_COLOURS:
            return PHASE_COLOURS[part]
    tail = name.rsplit(".", 1)[-1]
    return KIND_COLOURS.get(tail, KIND_COLOURS.get(kind, "#7f7f7f"))


def plot_iteration_timeline(
    iters: Sequence[Mapping],
    nodes: Sequence[Mapping],
    path: str | Path,
    *,
    events: Sequence[EventMark] = (),
    title: str = "Iteration timeline",
    held: Sequence[Mapping] = (),
) -> Path:
    """`iters`/`nodes`: the ranks' trace_iter and trace_node records, times in seconds from the
    workload's start; `events` in seconds too; `held`: the iterations to explain (entries of
    summary.json's `trace.iterations`), outlined when the network held them back."""
    plt = _pyplot()
    ranks = sorted({r["rank"] for r in iters} | {n["rank"] for n in nodes})
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.32 * max(len(ranks), 1)))
    for r in iters:
        shade = "#eeeeee" if r["iteration"] % 2 == 0 else "#f8f8f8"
        ax.broken_barh(
            [(r["start"] * 1e3, (r["end"] - r["start"]) * 1e3)],
            (r["rank"] - 0.45, 0.9),
            facecolors=shade,
            edgecolors="none",
            zorder=0,
        )
    explained = [h for h in held if _culprit(h)]
    culprits = {(_culprit(h), h["iteration"]) for h in explained}
    for n in nodes:
        # Weight-gradient collectives run beside the rest of the backward pass: the lower half
        # of the row, so that they do not hide the collectives the compute waits for.
        lower = ".wg" in n["name"]
        blamed = (n["name"], n["iteration"]) in culprits
        ax.broken_barh(
            [(n["start"] * 1e3, max((n["end"] - n["start"]) * 1e3, 1e-6))],
            (n["rank"] + (0.02 if lower else -0.4), 0.38),
            facecolors=_colour(n["name"], n["kind"]),
            edgecolors=CULPRIT_COLOUR if blamed else "none",
            linewidth=1.2 if blamed else 0,
            zorder=3 if blamed else 2,
        )
    ax.set_yticks(ranks)
    ax.set_yticklabels([f"rank {r}" for r in ranks], fontsize=7)
    ax.set_ylim(max(ranks, default=0) + 0.6, -0.6)
    ax.set_xlabel("time (ms, virtual)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*PHASE_COLOURS.values(), "#eeeeee")]
    ax.legend(
        handles,
        ["forward", "input gradient", "weight gradient", "iteration (gaps: compute)"],
        fontsize=7,
        loc="lower right",
        ncol=4,
    )
    ax.set_xlim(left=0)
    if explained:
        said = [
            f"iteration {h['iteration']} ({h['ms']:.3f} ms): {_culprit(h)} lost packets on "
            f"link {h['link']}"
            + ("" if h["held_by"] == "network" else f" (hidden: {h['held_by']} held the iteration)")
            if h.get("link")
            else f"iteration {h['iteration']} ({h['ms']:.3f} ms) waited for {_culprit(h)}"
            for h in explained[:3]
        ]
        more = f"; {len(explained) - 3} more" if len(explained) > 3 else ""
        text = "time (ms, virtual). Outlined: " + "; ".join(said) + more
        ax.set_xlabel(textwrap.fill(text, 140), fontsize=8)
    fig.tight_layout()
    _mark_events(ax, [(t * 1e3, label) for t, label in events])  # measured in the final layout
    return _finish(fig, path)


def plot_timelines(
    out_dir: str | Path,
    metrics: Mapping,
    *,
    events: Sequence[EventMark] = (),
    title: str = "",
    fmt: str = "png",
) -> dict[str, Path]:
    """{caption: path} of a timeline per transport that ran a trace (beside `plot_run`'s)."""
    made = {}
    for n, m in metrics.items():
        iters, nodes = m.trace_records
        if iters:
            its = (m.trace or {}).get("iterations") or []
            named = [it for it in its if it.get("link")]
            made[f"Iteration timeline ({n})"] = plot_iteration_timeline(
                iters,
                nodes,
                Path(out_dir) / f"timeline_{n}.{fmt}",
                events=events,
                title=f"{title}: iteration timeline, {n}" if title else f"Iteration timeline, {n}",
                held=named or ([max(its, key=lambda it: it["ms"])] if its else []),
            )
    return made
