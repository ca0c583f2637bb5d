"""Markdown table of the grid's results: median / P99 FCT (us) per balancer, per fabric x traffic x
failure mode, with completed flows when not all finished and the element the generator failed.

    python3 tools/reps_htsim/summarize.py [tools/reps_htsim/results]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("reps", "reps_circular", "spraying", "ecmp")


def cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    if not r["fct_us"]:
        return f"0/{r['flows_total']} done"
    text = f"{r['median_us']:.0f} / {r['p99_us']:.0f}"
    if r["flows_completed"] != r["flows_total"]:
        text += f" ({r['flows_completed']}/{r['flows_total']} done)"
    return text


def elements(results: list[dict]) -> str:
    seen = []
    for r in results:
        for e in r["failure_events"]:
            label = f"{e['kind']} {e['element']}"
            if label not in seen:
                seen.append(label)
    if len(seen) > 4:
        return "; ".join(seen[:4]) + f"; +{len(seen) - 4} more"
    return "; ".join(seen) or "-"


def table(results_dir: Path) -> str:
    rows: dict[tuple, dict] = {}
    modes: list[str] = []
    for f in sorted(results_dir.glob("*.json")):
        r = json.loads(f.read_text())
        key = (r["fabric"], r["traffic"], r["failure_mode"])
        rows.setdefault(key, {})[r["balancer"]] = r
        if r["failure_mode"] not in modes:
            modes.append(r["failure_mode"])
    out = [
        "| fabric | traffic | failure mode | "
        + " | ".join(f"{b} med/P99" for b in ORDER)
        + " | failed elements (per run, as the generator chose) |",
        "|" + "---|" * (4 + len(ORDER)),
    ]
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[2] != "none", k[2])):
        by_b = rows[key]
        out.append(
            f"| {key[0]} | {key[1]} | {key[2]} | "
            + " | ".join(cell(by_b.get(b)) for b in ORDER)
            + f" | {elements(list(by_b.values()))} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results"), end="")
