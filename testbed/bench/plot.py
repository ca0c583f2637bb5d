"""Plot a `testbed bench switch --json` result: forwarding rate per design, shaper accuracy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROWS = ("switch", "switch_unshaped", "repeater", "scapy_naive", "kernel_bridge")
LABELS = {
    "switch": "switch\n(shaped, trimming)",
    "switch_unshaped": "switch\n(unshaped)",
    "repeater": "bare AF_PACKET\nrepeater",
    "scapy_naive": "naive scapy\nforwarder",
    "kernel_bridge": "Linux\nbridge",
}


def plot_switch_bench(result: dict, out: Path) -> Path:
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.38
    for k, r in enumerate(result["results"]):
        pps = [r["pps"].get(name, 0) / 1000 for name in ROWS]
        xs = [i + (k - 0.5) * width for i in range(len(ROWS))]
        bars = ax.bar(xs, pps, width, label=f"{r['frame_bytes']} B frames")
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
    ax.set_xticks(range(len(ROWS)), [LABELS[n] for n in ROWS], fontsize=8)
    ax.set_ylabel("forwarded kpps (one core)")
    ax.set_title("One switch between two namespaces, same-run baselines", fontsize=10)
    ax.legend(fontsize=8)
    rates = [s["mbps"] for s in result["shaper"]]
    measured = [s["measured_mbps"] for s in result["shaper"]]
    bx.plot(rates, rates, "--", color="grey", label="configured")
    bx.plot(rates, measured, "o-", label="measured")
    for r, m in zip(rates, measured):  # noqa: B905
        bx.annotate(
            f"{(m - r) / r * 100:+.1f}%",
            (r, m),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
        )
    bx.set_xlabel("port rate (Mbps)")
    bx.set_ylabel("delivered (Mbps)")
    bx.set_title("Shaper accuracy (1.5x overload)", fontsize=10)
    bx.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(plot_switch_bench(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])))
