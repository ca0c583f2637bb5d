"""Lab 1's table and plot, computed with *your* ecmp.py.

    .venv/bin/python labs/lab1-static-leaf-spine/report.py [--code DIR]

For h1 -> h6 (10.1.1.1 -> 10.1.3.2, UDP port 4791) on the README's fabric (3 spines, seed 1):
which spine each of 64 source ports takes -- 50000-50063, and the 64 EVs 49152-49215 an MRC
endpoint sprays over -- by your flow_hash + pick and by the switches' own FIBs and hash
(`testbed path` computes the same), and by the traceroutes you saved in step 5
(results/traceroutes.txt, if it is there). Writes results/ecmp.md and results/ecmp.png.
`--code DIR` takes ecmp.py from DIR (e.g. labs/solutions/lab1). Needs no root and no fabric.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent
sys.path.insert(0, str(LAB.parent.parent))

from contracts.plugins import load_plugin  # noqa: E402
from contracts.ports import ROCEV2_UDP_PORT  # noqa: E402
from switch.config import switch_config  # noqa: E402
from testbed.fabric.paths import predict_path  # noqa: E402
from topologies import leaf_spine  # noqa: E402

FAB = leaf_spine(spines=3, leaves=3, hosts_per_leaf=2)  # the README's fabric
SEED = switch_config(FAB, "leaf1", seed=1).seed  # what `testbed fib leaf1` prints
GROUP = ["spine1", "spine2", "spine3"]
SRC, DST, DPORT = "10.1.1.1", "10.1.3.2", ROCEV2_UDP_PORT
PORT_SETS = {
    "source ports 50000-50063": range(50000, 50064),
    "EVs 49152-49215": range(49152, 49216),
}
SPINE_OF_IP = {f"10.1.0.{i}": f"spine{i}" for i in range(1, 4)}  # the spines' router addresses


def load_ecmp(code: Path):
    return load_plugin(code / "ecmp.py", "lab1_ecmp")


def traced(path: Path) -> dict[int, str]:
    """sport -> spine from the `sport N: 10.1.0.X` lines of step 5 (lines without hop 2 skipped)."""
    if not path.is_file():
        return {}
    out = {}
    for m in re.finditer(r"^sport (\d+): (\S+)\s*$", path.read_text(), re.M):
        if m.group(2) in SPINE_OF_IP:
            out[int(m.group(1))] = SPINE_OF_IP[m.group(2)]
    return out


def analyse(ecmp, traceroutes: dict[int, str]) -> dict:
    """Per port set: the spine of every port by your code and by the fabric, and the counts."""
    sets = {}
    for label, ports in PORT_SETS.items():
        yours = {p: ecmp.pick(GROUP, ecmp.flow_hash(SRC, DST, p, DPORT, 17, SEED)) for p in ports}
        fabric = {p: predict_path(FAB, "h1", "h6", p, DPORT, seed=1)[2] for p in ports}
        sets[label] = {
            "yours": yours,
            "fabric": fabric,
            "agree": sum(yours[p] == fabric[p] for p in ports),
            "n": len(ports),
        }
    seen = dict(traceroutes)
    mine = {p: ecmp.pick(GROUP, ecmp.flow_hash(SRC, DST, p, DPORT, 17, SEED)) for p in seen}
    return {
        "sets": sets,
        "traced": seen,
        "traced_agree": sum(mine[p] == seen[p] for p in seen),
        "steer": {s: ecmp.source_port_via(s, GROUP, SRC, DST, DPORT, SEED) for s in GROUP},
    }


def table(result: dict) -> str:
    lines = [
        "# Lab 1: which spine each flow takes (h1 -> h6, leaf1's ECMP group)",
        "",
        f"leaf1's seed {SEED}; group {', '.join(GROUP)}.",
        "",
        "| ports | by | " + " | ".join(GROUP) + " | agree with the fabric |",
        "|---|---|" + "---|" * len(GROUP) + "---|",
    ]
    for label, s in result["sets"].items():
        for who in ("yours", "fabric"):
            counts = [sum(v == g for v in s[who].values()) for g in GROUP]
            agree = f"{s['agree']} of {s['n']}" if who == "yours" else ""
            lines.append(f"| {label} | {who} | " + " | ".join(map(str, counts)) + f" | {agree} |")
    seen = result["traced"]
    if seen:
        counts = [sum(v == g for v in seen.values()) for g in GROUP]
        lines.append(
            f"| your {len(seen)} traceroutes (step 5) | traceroute | "
            + " | ".join(map(str, counts))
            + f" | your code predicts {result['traced_agree']} of {len(seen)} |"
        )
    else:
        lines.append("")
        lines.append("(no results/traceroutes.txt: step 5 writes it)")
    lines += ["", "First source port that your source_port_via finds for each spine:", ""]
    lines += [f"- {s}: {p}" for s, p in result["steer"].items()]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(result["sets"])
    fig, axes = plt.subplots(1, len(labels), figsize=(9, 3.4), sharey=True)
    width = 0.38
    for ax, label in zip(axes, labels, strict=True):
        s = result["sets"][label]
        xs = range(len(GROUP))
        for k, who in enumerate(("yours", "fabric")):
            counts = [sum(v == g for v in s[who].values()) for g in GROUP]
            ax.bar([x + (k - 0.5) * width for x in xs], counts, width, label=who)
        ax.axhline(s["n"] / len(GROUP), color="grey", lw=0.8, ls="--", label="even share")
        ax.set_xticks(list(xs), GROUP)
        ax.set_title(f"{label}\n(agree {s['agree']} of {s['n']})", fontsize=9)
    axes[0].set_ylabel("flows hashed onto the spine")
    axes[0].legend(fontsize=8)
    fig.suptitle("h1 -> h6: leaf1's ECMP choice, your code vs the fabric", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default=str(LAB), help="folder holding the ecmp.py to use")
    ap.add_argument("--results", default=str(LAB / "results"), help="where to write")
    args = ap.parse_args(argv)
    results = Path(args.results)
    try:
        ecmp = load_ecmp(Path(args.code))
        result = analyse(ecmp, traced(results / "traceroutes.txt"))
    except NotImplementedError as exc:
        print(f"report.py: {exc}: fill it in first (`testbed lab check 1` says what is left)")
        return 1
    results.mkdir(parents=True, exist_ok=True)
    (results / "ecmp.md").write_text(table(result))
    plot(result, results / "ecmp.png")
    print(table(result), end="")
    print(f"wrote {results / 'ecmp.md'} and {results / 'ecmp.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
