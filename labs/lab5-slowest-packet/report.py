"""Lab 5's table and plot, computed with *your* steps.py from the runs in results/.

    .venv/bin/python labs/lab5-slowest-packet/report.py [--code DIR] [RESULTS_FOLDER ...]

Reads every results folder given (default: every folder in this lab's results/ -- written by
`testbed lab check 5` and by the README's `testbed compare ... --out` commands), and writes
results/steps.md and results/step_times.png. `--code DIR` takes steps.py from DIR (e.g.
labs/solutions/lab5) instead of this folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent
sys.path.insert(0, str(LAB.parent.parent))

from contracts.framing import DEFAULT_MTU, mrc_payload  # noqa: E402
from contracts.plugins import load_plugin  # noqa: E402
from testbed.scenario import FAILURE_ACTIONS as FAILURES  # noqa: E402
from testbed.scenario import RECOVERY_ACTIONS as RECOVERIES  # noqa: E402


def load_steps(code: Path):
    return load_plugin(code / "steps.py", "lab5_steps")


def failure_window(summary: dict) -> tuple[float, float] | None:
    """(first failure, next recovery) in seconds from the workload's start, as applied."""
    start = end = None
    for e in summary.get("events", []):
        at = e.get("applied_at", e["at"])
        if e["action"] in FAILURES and start is None:
            start = at
        elif e["action"] in RECOVERIES and start is not None and end is None:
            end = at
    if start is None:
        return None
    return start, end if end is not None else math.inf


def runs(folder: Path):
    """(transport, rank_steps, bytes per ring hop per step) of each transport in a folder."""
    for status in sorted(folder.glob("raw/*/job_status.json")):
        st = json.loads(status.read_text())
        rank_steps = [r for host in st.values() for r in host.get("rank_steps", [])]
        per_hop = max((host.get("per_hop_bytes", 0) for host in st.values()), default=0)
        if rank_steps:
            yield status.parent.name, rank_steps, per_hop


def analyse(steps_mod, folder: Path) -> list[dict]:
    summary = json.loads((folder / "summary.json").read_text())
    window = failure_window(summary)
    loss = next((e.get("percent") for e in summary.get("events", []) if e["action"] == "loss"), 0)
    # Bytes of data per full packet: the run's MTU less the headers (docs/wire-format.md).
    payload = mrc_payload(summary.get("topology", {}).get("mtu", DEFAULT_MTU))
    rows = []
    for transport, rank_steps, per_hop in runs(folder):
        steps = steps_mod.step_times(rank_steps)
        t0 = steps[0][0]
        ms = [(end - start) * 1000 for start, end in steps]
        hit = steps_mod.during(steps, t0 + window[0], t0 + window[1]) if window else []
        slowest = max(range(len(ms)), key=ms.__getitem__)
        rows.append(
            {
                "scenario": summary["scenario"],
                "transport": transport,
                "steps": len(ms),
                "ms": ms,
                "starts": [start - t0 for start, _ in steps],
                "p50": steps_mod.percentile(ms, 50),
                "p99": steps_mod.percentile(ms, 99),
                "p100": steps_mod.percentile(ms, 100),
                "window": window,
                "in_window": hit,
                "slowest": slowest,
                "packets": math.ceil(per_hop / payload),
                "loss_pct": loss,
                "p_hit": steps_mod.p_step_hit(loss, math.ceil(per_hop / payload)) if loss else 0.0,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| scenario | transport | steps | P50 (ms) | P99 | P100 | P100/P50 | steps in failure "
        "| their median (ms) | slowest step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        inside = [r["ms"][i] for i in r["in_window"]]
        med = f"{sorted(inside)[(len(inside) - 1) // 2]:.0f}" if inside else "-"
        where = "in the failure" if r["slowest"] in r["in_window"] else "outside it"
        if r["window"] is None:
            where = "no failure"
        lines.append(
            f"| {r['scenario']} | {r['transport']} | {r['steps']} | {r['p50']:.0f} "
            f"| {r['p99']:.0f} | {r['p100']:.0f} | {r['p100'] / r['p50']:.2f} "
            f"| {len(r['in_window'])} | {med} "
            f"| #{r['slowest']} ({r['ms'][r['slowest']]:.0f} ms, {where}) |"
        )
    lossy = [r for r in rows if r["loss_pct"]]
    if lossy:
        r = lossy[0]
        lines += [
            "",
            f"A ring hop carries {r['packets']} packets per step; at {r['loss_pct']:g}% loss the "
            f"chance that a step loses at least one of them on one hop that crosses the link: "
            f"{r['p_hit']:.0%}.",
        ]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    for r in rows:
        style = "--" if r["window"] is None else "-"
        ax.plot(
            r["starts"], r["ms"], style, marker=".", label=f"{r['transport']} ({r['scenario']})"
        )
    windows = {r["window"] for r in rows if r["window"] is not None}
    for w0, w1 in windows:
        ax.axvspan(w0, min(w1, max(max(r["starts"]) for r in rows)), color="red", alpha=0.1)
    ax.set_xlabel("step start (s from the workload's start); shaded: the gray failure")
    ax.set_ylabel("step time (ms)")
    ax.set_title("All-reduce step times: the slowest rank decides")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--code", type=Path, default=None, help="folder holding steps.py")
    args = ap.parse_args(argv)
    code = args.code or Path(os.environ.get("TESTBED_LAB_CODE", LAB))
    folders = args.folders or sorted(p.parent for p in LAB.glob("results/*/summary.json"))
    if not folders:
        print("no results yet: run `sudo testbed lab check 5` or the README's compare commands")
        return 2
    steps_mod = load_steps(code)
    rows = [row for folder in folders for row in analyse(steps_mod, folder)]
    rows.sort(key=lambda r: (r["window"] is not None, r["scenario"], r["transport"]))
    text = table(rows)
    out = LAB / "results"
    out.mkdir(exist_ok=True)
    (out / "steps.md").write_text("# Lab 5: step times\n\n" + text + "\n")
    print(text)
    png = plot(rows, out / "step_times.png")
    print(f"\nwritten: {out / 'steps.md'}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
