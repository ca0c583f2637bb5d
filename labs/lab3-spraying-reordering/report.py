"""Lab 3's table and plots, computed with *your* spray.py from what capture.py recorded.

    .venv/bin/python labs/lab3-spraying-reordering/report.py [--code DIR]

For each EV count in results/ (run-<N>ev.json and its evbytes, counters and arrivals files):
the load on every leaf uplink from the endpoints' per-EV bytes and the switches' own hash
(your link_loads), the spread over the uplinks (your imbalance) next to the switches' own
counters, the time the busiest link needs (your bottleneck_time) next to the measured one, and
how out of order the watched connection arrived (your reorder). Writes results/spray.md and
results/spray.png. `--code DIR` takes spray.py from DIR (e.g. labs/solutions/lab3).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent
sys.path.insert(0, str(LAB.parent.parent))

from contracts.plugins import load_plugin  # noqa: E402
from contracts.ports import ROCEV2_UDP_PORT  # noqa: E402
from testbed.fabric.paths import predict_path  # noqa: E402
from testbed.scenario import load_scenario  # noqa: E402


def load_spray(code: Path):
    return load_plugin(code / "spray.py", "lab3_spray")


def ev_bytes(path: Path) -> dict[tuple[str, str, int], int]:
    raw = json.loads(path.read_text())
    return {(k.split(",")[0], k.split(",")[1], int(k.split(",")[2])): v for k, v in raw.items()}


def uplinks(fab, leaf: str) -> list[tuple[str, str, str]]:
    """(leaf, spine, leaf's port) of every uplink of `leaf`."""
    return [
        (leaf, i.peer_node, i.name) for i in fab.interfaces[leaf] if i.peer_node.startswith("spine")
    ]


def arrivals(path: Path) -> list[int]:
    with open(path) as f:
        return [int(r["seq"]) for r in csv.DictReader(f) if r["trimmed"] == "0"]


def analyse(spray, fab, seed: int, evs: int, results: Path) -> dict:
    run = json.loads((results / f"run-{evs}ev.json").read_text())
    counters = json.loads((results / f"counters-{evs}ev.json").read_text())
    cache: dict = {}

    def path_of(src: str, dst: str, ev: int) -> list[str]:
        if (src, dst, ev) not in cache:
            cache[(src, dst, ev)] = predict_path(fab, src, dst, ev, ROCEV2_UDP_PORT, seed=seed)
        return cache[(src, dst, ev)]

    loads = spray.link_loads(ev_bytes(results / f"evbytes-{evs}ev.json"), path_of)
    leaves = [n for n, v in fab.nodes.items() if v.kind == "leaf"]
    per_leaf = {}
    for leaf in leaves:
        ups = uplinks(fab, leaf)
        predicted = [loads.get((a, b), 0) for a, b, _ in ups]
        measured = [counters[leaf]["ports"][port]["tx_bytes"] for _, _, port in ups]
        per_leaf[leaf] = {"spines": [b for _, b, _ in ups], "predicted": predicted,
                          "measured": measured}  # fmt: skip
    switch_links = {k: v for k, v in loads.items() if all(fab.nodes[n].kind != "host" for n in k)}
    seqs = arrivals(results / f"arrivals-{evs}ev.csv")
    return {
        "evs": evs,
        "run": run,
        "per_leaf": per_leaf,
        "imbalance": max(spray.imbalance(v["predicted"]) for v in per_leaf.values()),
        "imbalance_measured": max(spray.imbalance(v["measured"]) for v in per_leaf.values()),
        "bottleneck_s": spray.bottleneck_time(switch_links, run["link_mbps"]),
        "reorder": spray.reorder(seqs),
        "packets": len(set(seqs)),
        "seqs": seqs,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| EVs | leaf1 uplinks (MB, by spine) | imbalance (yours / counters) | busiest link needs (s) "
        "| permutation took (s) | late packets | max distance | window |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        leaf1 = r["per_leaf"]["leaf1"]
        mb = " / ".join(f"{b / 1e6:.2f}" for b in leaf1["predicted"])
        took = f"{r['run']['seconds']:.2f}" if r["run"]["done"] else "not finished"
        ro = r["reorder"]
        lines.append(
            f"| {r['evs']} | {mb} | {r['imbalance']:.2f} / {r['imbalance_measured']:.2f} "
            f"| {r['bottleneck_s']:.2f} | {took} "
            f"| {ro['late']} of {r['packets']} ({ro['late'] / max(r['packets'], 1):.0%}) "
            f"| {ro['max_distance']} | {ro['window']} |"
        )
    watched = rows[0]["run"]["watched"] if rows else "-"
    lines += ["", f"Arrival order: the connection {watched}, full data packets only."]
    return "\n".join(lines)


def lateness(seqs: list[int]) -> list[int]:
    """Per first arrival: how far below the highest number seen before it (0 if in order)."""
    out, highest, seen = [], -1, set()
    for s in seqs:
        if s not in seen:
            seen.add(s)
            out.append(max(0, highest - s))
            highest = max(highest, s)
    return out


def plot(rows: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (bars, order) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(len(rows), 1)
    for k, r in enumerate(rows):
        leaf1 = r["per_leaf"]["leaf1"]
        xs = [i + k * width for i in range(len(leaf1["spines"]))]
        bars.bar(xs, [b / 1e6 for b in leaf1["predicted"]], width, label=f"{r['evs']} EV(s)")
        bars.set_xticks([i + width * (len(rows) - 1) / 2 for i in range(len(leaf1["spines"]))])
        bars.set_xticklabels([f"leaf1 -> {s}" for s in leaf1["spines"]])
        late = lateness(r["seqs"])
        order.plot(range(len(late)), late, marker=".", linewidth=0.6,
                   label=f"{r['evs']} EV(s)")  # fmt: skip
    bars.set_ylabel("MB sent (per-EV bytes x predicted path)")
    bars.set_title("Load on leaf1's uplinks")
    bars.legend()
    order.set_xlabel("arrival index (first arrival of each full data packet)")
    order.set_ylabel("packets it arrived behind (0 = in order)")
    order.set_title("Arrival order at the receiver")
    order.legend()
    order.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", type=Path, default=None, help="folder holding spray.py")
    ap.add_argument("--scenario", type=Path, default=LAB / "permutation.yaml")
    args = ap.parse_args(argv)
    code = args.code or Path(os.environ.get("TESTBED_LAB_CODE", LAB))
    results = LAB / "results"
    runs = sorted(results.glob("run-*ev.json"), key=lambda p: int(p.stem[4:-2]))
    if not runs:
        print(
            "no captures yet: run `sudo .venv/bin/python labs/lab3-spraying-reordering/capture.py`"
        )
        return 2
    spray = load_spray(code)
    sc = load_scenario(args.scenario)
    fab = sc.fabric()
    rows = [analyse(spray, fab, sc.seed, int(p.stem[4:-2]), results) for p in runs]
    text = table(rows)
    (results / "spray.md").write_text("# Lab 3: one EV vs 64 EVs\n\n" + text + "\n")
    print(text)
    png = plot(rows, results / "spray.png")
    print(f"\nwritten: {results / 'spray.md'}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
