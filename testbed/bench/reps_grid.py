"""`testbed bench reps-grid`: the REPS paper's failure grid on the emulated fabric.

Every cell (fabric x traffic x failure mode x load balancer, `reps_grid_scenarios`) is one run
through the public runner, judged valid or INVALID by its own verdict; its figures are read
back from its folder (`reps_grid_figures`). A cell whose folder already holds a summary is
read, not run again, so a grid of hours can be built over several sittings (`--out` the same
folder).

The paper's claims are then checked on the cells that ran, each a pass, a fail or "not
measured", with its numbers:
- REPS moves traffic off a failed link in under 100 µs;
- REPS beats oblivious spraying in P99 FCT under every failure mode;
- neither loses a byte.
A claim is judged on valid runs only: an INVALID run's figures measure the emulator, not the
network.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.bench.endpoint_bench import BenchError, bench_meta
from testbed.bench.fidelity_figures import run_record
from testbed.bench.reps_grid_figures import (
    avoid_figures,
    endpoint_figures,
    ev_failures,
    fct_figures,
    switch_drops,
)
from testbed.bench.reps_grid_scenarios import (
    DEFAULT_ROWS,
    FABRICS,
    HTSIM_MODE,
    MODES,
    QUICK,
    ROWS,
    TRAFFIC,
    failed_links,
    failure_window,
    row_key,
    scenario,
)
from testbed.experiment.api import load
from testbed.experiment.runner import Progress, run_scenario

HTSIM_RESULTS = Path(__file__).resolve().parents[2] / "tools" / "reps_htsim" / "results"
"""The authors' simulator's figures for the same grid (tools/reps_htsim, checked in)."""
HTSIM_NAMES = {
    "fabric": {"1to1": "ls_1to1", "8to1": "ls_8to1"},
    "traffic": {"permutation": "perm", "incast": "incast8"},
    "row": {
        "reps": "reps",
        "oblivious": "spraying",
        "single-path": "ecmp",
        # The simulator resends without copies: its rows are these rows' references too.
        "reps-1copy": "reps",
        "oblivious-1copy": "spraying",
        "ecmp": "ecmp",
        "reps-fixed-rto": "reps",
        "oblivious-fixed-rto": "spraying",
        "reps-1copy-fixed-rto": "reps",
        "reps-sim-resend": "reps",
    },
}
"""Grid names -> the file names of tools/reps_htsim/results: `oblivious` is the paper's
`spraying`, and a one-path row is compared with its ECMP (one hashed path per flow)."""
DIFF_PCT = 15.0  # where the docs must say why testbed and simulator differ (issue 35)
AVOID_CLAIM_US = 100.0
AVOID_CLAIM_MODES = ("link-failed", "link-failed-100us")


def default_results_dir() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"bench-reps-grid-{stamp}"


def _pick(given: list[str] | None, allowed: tuple[str, ...], default, what: str) -> tuple:
    if given is None:
        return tuple(default)
    bad = [g for g in given if g not in allowed]
    if bad:
        raise BenchError(f"--{what}: unknown {bad[0]!r} (one of {', '.join(allowed)})")
    return tuple(given)


def cell_name(fabric: str, traffic: str, mode: str, row: str) -> str:
    return f"{fabric}-{traffic}-{mode}-{row}"


def read_cell(
    run_dir: Path, fabric: str, traffic: str, mode: str, row: str, wall_s: float | None = None
) -> dict:
    """One cell's figures from its run folder (refused if it ran under another definition)."""
    key = row_key(row)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    entry = summary["transports"][key]
    raw = run_dir / "raw" / key
    rec = run_record(entry, wall_s if wall_s is not None else 0.0, run_dir)
    if wall_s is None:
        rec["wall_s"] = None  # read back: this sitting did not time it
    sc = load(scenario(fabric, traffic, mode, row))
    ran = (summary.get("provenance") or {}).get("scenario") or {}
    now = sc.model_dump(mode="json", exclude_none=True)
    keys = ("topology", "transport", "workload", "events", "seed")
    if ran and any(ran.get(k) != now.get(k) for k in keys):
        changed = next(k for k in keys if ran.get(k) != now.get(k))
        raise BenchError(
            f"{run_dir}: this cell ran with a different `{changed}` than the grid defines now: "
            "remove its folder (or use another --out) to run it again"
        )
    return {
        "fabric": fabric,
        "traffic": traffic,
        "mode": mode,
        "row": row,
        "htsim_mode": HTSIM_MODE.get(mode),
        **fct_figures(entry.get("flows", [])),
        "lost_bytes": entry.get("lost_bytes"),
        "delivered_bytes": entry.get("delivered_bytes"),
        "trims": entry.get("trims"),
        "retransmits": entry.get("retransmits"),
        **endpoint_figures(raw),
        "drops": switch_drops(raw),
        **avoid_figures(
            ev_failures(raw),
            sc,
            key,
            failed_links(mode, fabric, traffic),
            failure_window(mode, fabric, traffic),
        ),
        "run": rec,
    }


def run_reps_grid(
    quick: bool = False,
    time_dilation: float | str = "auto",
    out: Path | None = None,
    fabrics: list[str] | None = None,
    traffic: list[str] | None = None,
    modes: list[str] | None = None,
    rows: list[str] | None = None,
) -> dict:
    """Run (or read back) the chosen cells; returns the bench's result object."""
    chosen = _chosen(fabrics, traffic, modes, rows, QUICK if quick else {})
    if os.geteuid() != 0:
        raise BenchError("bench reps-grid needs root (it creates network namespaces): use sudo")
    started = time.time()
    out = out or default_results_dir()
    cells = [_with_htsim(_cell(*c, out, time_dilation)) for c in chosen]
    return {
        "bench": "reps-grid",
        "cells": cells,
        "claims": check_claims(cells),
        "results_dir": str(out),
        "meta": bench_meta(
            1,
            started,
            "REPS paper's failure grid (arXiv 2407.21625) scaled to 32 hosts; each cell one "
            "run through the runner, judged by its own verdict; cells already in --out are "
            "read back, not run",
            quick=quick,
            time_dilation=time_dilation,
        ),
    }


def _chosen(
    fabrics: list[str] | None,
    traffic: list[str] | None,
    modes: list[str] | None,
    rows: list[str] | None,
    default: dict,
) -> list[tuple[str, str, str, str]]:
    """The cells the filters choose, (fabric, traffic, mode, row) in the grid's order; a
    filter left out takes `default`'s (the quick grid's) or all. Bad names refused here."""
    fabs = _pick(fabrics, tuple(FABRICS), default.get("fabrics", FABRICS), "fabrics")
    trs = _pick(traffic, TRAFFIC, default.get("traffic", TRAFFIC), "traffic")
    mds = _pick(modes, MODES, default.get("modes", MODES), "modes")
    rws = _pick(rows, tuple(ROWS), default.get("rows", DEFAULT_ROWS), "rows")
    return [(f, t, m, r) for f in fabs for t in trs for m in mds for r in rws]


def read_back_reps_grid(
    out: Path,
    fabrics: list[str] | None = None,
    traffic: list[str] | None = None,
    modes: list[str] | None = None,
    rows: list[str] | None = None,
) -> dict:
    """The grid and its claims from the cells already in `out`, running none: a grid built
    over several sittings (each with its own filters) is judged whole. The chosen cells not
    in `out` are listed as `missing`, never guessed."""
    chosen = _chosen(fabrics, traffic, modes, rows, {})
    if not out.is_dir():
        raise BenchError(f"--out {out}: no such results folder")
    started = time.time()
    cells, missing = [], []
    for c in chosen:
        run_dir = out / cell_name(*c)
        if (run_dir / "summary.json").is_file():
            cells.append(_with_htsim(read_cell(run_dir, *c)))
        else:
            missing.append(run_dir.name)
    return {
        "bench": "reps-grid",
        "cells": cells,
        "missing": missing,
        "claims": check_claims(cells),
        "results_dir": str(out),
        "meta": bench_meta(
            1,
            started,
            "REPS paper's failure grid, read back from a results folder: no cell run now",
            quick=False,
            time_dilation="read back",
        ),
    }


def _cell(fabric: str, traffic: str, mode: str, row: str, out: Path, dilation) -> dict:
    run_dir = out / cell_name(fabric, traffic, mode, row)
    if (run_dir / "summary.json").is_file():
        return read_cell(run_dir, fabric, traffic, mode, row)
    t0 = time.monotonic()
    run_scenario(
        load(scenario(fabric, traffic, mode, row)),
        [row_key(row)],
        run_dir,
        progress=Progress(stream=sys.stderr, live=False),
        time_dilation=dilation,
    )
    cell = read_cell(run_dir, fabric, traffic, mode, row, time.monotonic() - t0)
    r = cell["run"]
    print(
        f"  {run_dir.name}: {'valid' if r['valid'] else 'INVALID'} at N={r['time_dilation']:g}, "
        f"wall {r['wall_s']:.1f} s, median FCT {cell['median_us']} µs, P99 {cell['p99_us']} µs",
        file=sys.stderr,
        flush=True,
    )
    return cell


def htsim_cell(fabric: str, traffic: str, mode: str, row: str, root: Path = HTSIM_RESULTS):
    """The authors' simulator's figures for one cell, with the testbed's differences in %;
    None where it has no such run."""
    try:
        name = "__".join(
            (
                HTSIM_NAMES["fabric"][fabric],
                HTSIM_NAMES["traffic"][traffic],
                "none" if mode == "none" else HTSIM_MODE[mode],
                HTSIM_NAMES["row"][row],
            )
        )
        d = json.loads((root / f"{name}.json").read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError):
        return None
    return {
        "file": f"{name}.json",
        "median_us": d.get("median_us"),
        "p99_us": d.get("p99_us"),
        "max_us": d.get("max_us"),
        "flows_completed": d.get("flows_completed"),
        "flows_total": d.get("flows_total"),
        "nacks": d.get("nacks"),
        "ooo_ratio": (d.get("out_of_order") or {}).get("ooo_ratio_mean"),
    }


def diff_pct(ours: float | None, theirs: float | None) -> float | None:
    """(ours - theirs) / theirs in %, None where either is missing (an unfinished flow)."""
    if ours is None or not theirs:
        return None
    return round(100.0 * (ours - theirs) / theirs, 1)


def _with_htsim(cell: dict) -> dict:
    ref = htsim_cell(cell["fabric"], cell["traffic"], cell["mode"], cell["row"])
    cell["htsim"] = ref
    if ref is not None:
        cell["htsim_diff_pct"] = {k: diff_pct(cell[k], ref[k]) for k in ("median_us", "p99_us")}
    return cell


def _valid(cells: list[dict], **match) -> list[dict]:
    return [c for c in cells if c["run"]["valid"] and all(c[k] == v for k, v in match.items())]


def check_claims(cells: list[dict]) -> list[dict[str, Any]]:
    """The paper's qualitative claims, each judged on the valid cells that bear on it."""
    claims = []
    avoid = [c for m in AVOID_CLAIM_MODES for c in _valid(cells, mode=m, row="reps")]
    got = [c for c in avoid if c["avoided_us"] is not None]
    # A cell read from records without each EV's last send has only the last retirement: an
    # upper bound, which can pass the claim (under it, so was the last send) but not fail it.
    bounds = {c.get("avoided_from") for c in got}
    over = [c for c in got if c["avoided_us"] >= AVOID_CLAIM_US]
    verdict = "not measured"
    if got:
        verdict = "pass"
        if any(c.get("avoided_from") == "last_send" for c in over):
            verdict = "fail"
        elif over:
            verdict = "undecided (upper bound only)"
    claims.append(
        {
            "claim": f"REPS moves traffic off a failed link in under {AVOID_CLAIM_US:g} µs",
            "verdict": verdict,
            "measured_by": sorted(b or "retirement" for b in bounds),
            # Per cell the last send (what the verdict reads) and when 90 % of the damaged EVs
            # had carried their last data: one EV explored late sets the first alone.
            "numbers": {
                f"{c['fabric']}/{c['traffic']}/{c['mode']}": {
                    "last_us": c["avoided_us"],
                    "p90_us": c.get("avoided_p90_us"),
                }
                for c in avoid
            },
        }
    )
    pairs = {}
    for c in cells:
        if c["mode"] == "none" or c["row"] not in ("reps", "oblivious"):
            continue
        pairs.setdefault((c["fabric"], c["traffic"], c["mode"]), {})[c["row"]] = c
    beats, numbers = [], {}
    for key, pair in sorted(pairs.items()):
        if len(pair) < 2 or not all(p["run"]["valid"] for p in pair.values()):
            continue
        r, o = pair["reps"], pair["oblivious"]
        rp = r["p99_us"] if r["p99_us"] is not None else float("inf")
        op = o["p99_us"] if o["p99_us"] is not None else float("inf")
        beats.append(rp < op or (rp == op == float("inf") and r["unfinished"] < o["unfinished"]))
        numbers["/".join(key)] = {"reps_p99_us": r["p99_us"], "oblivious_p99_us": o["p99_us"]}
    claims.append(
        {
            "claim": "REPS beats oblivious spraying in P99 FCT under every failure mode",
            "verdict": "not measured" if not beats else ("pass" if all(beats) else "fail"),
            "numbers": numbers,
        }
    )
    lossless = [c for c in cells if c["row"] in ("reps", "oblivious") and c["run"]["valid"]]
    lost = {
        f"{c['fabric']}/{c['traffic']}/{c['mode']}/{c['row']}": c["lost_bytes"]
        for c in lossless
        if c["lost_bytes"] or c["unfinished"]
    }
    claims.append(
        {
            "claim": "neither REPS nor oblivious spraying loses a byte",
            "verdict": "not measured" if not lossless else ("fail" if lost else "pass"),
            "numbers": {"cells": len(lossless), "cells_with_loss_or_unfinished": lost},
        }
    )
    return claims


def _us(v: float | None, unfinished: int) -> str:
    if v is None:
        return f"unfin. ({unfinished})" if unfinished else "-"
    return f"{v:,.0f}"


def format_reps_grid_table(d: dict) -> str:
    """One table per failure mode: each load balancer's FCTs and counts, with its verdict."""
    lines = [
        "bench reps-grid: REPS failure grid (arXiv 2407.21625), 32 hosts, 800 Gbps, 4 MiB flows",
        f"results: {d['results_dir']}",
    ]
    by_mode: dict[tuple, list[dict]] = {}
    for c in d["cells"]:
        by_mode.setdefault((c["mode"], c["fabric"], c["traffic"]), []).append(c)
    for (mode, fabric, traffic), cells in by_mode.items():
        lines += ["", f"{mode} ({fabric}, {traffic})"]
        lines.append(
            f"  {'row':<16} {'median us':>10} {'P99 us':>12} {'max us':>12} {'NACKs':>7} "
            f"{'ooo %':>6} {'ooo max':>7} {'avoid us':>14}  drops; verdict"
        )
        refs = [c for c in cells if c.get("htsim")]
        for c in cells:
            ooo = "-" if c["ooo_ratio"] is None else f"{100 * c['ooo_ratio']:.1f}"
            avoid = _avoid(c)
            drops = ", ".join(f"{k} {v}" for k, v in c["drops"].items()) or "none"
            r = c["run"]
            verdict = (
                f"valid N={r['time_dilation']:g}"
                if r["valid"]
                else f"INVALID ({'; '.join(r['invalid_reasons'])[:60]})"
            )
            lines.append(
                f"  {c['row']:<16} {_us(c['median_us'], c['unfinished']):>10} "
                f"{_us(c['p99_us'], c['unfinished']):>12} {_us(c['max_us'], c['unfinished']):>12} "
                f"{c['nacks']:>7} {ooo:>6} {c['ooo_max_psns']:>7} {avoid:>14}  {drops}; {verdict}"
            )
            if c.get("tail"):
                lines.append(f"  {'':<16} slowest flow: {_tail(c['tail'])}")
        for c in refs:
            h, dd = c["htsim"], c["htsim_diff_pct"]
            gap = [
                f"{k[:-3]} {v:+.0f} %" for k, v in dd.items() if v is not None and abs(v) > DIFF_PCT
            ]
            lines.append(
                f"  {'htsim ' + c['row']:<16} {_us(h['median_us'], 0):>10} "
                f"{_us(h['p99_us'], 0):>12} {_us(h['max_us'], 0):>12} {h['nacks'] or 0:>7}"
                f"  {h['flows_completed']}/{h['flows_total']} flows"
                + (f"; differs by more than {DIFF_PCT:g} %: {', '.join(gap)}" if gap else "")
            )
    if d.get("missing"):
        lines += ["", f"not in the folder (not run): {len(d['missing'])} cells"]
    lines += ["", "claims (valid runs only):"]
    for cl in d["claims"]:
        lines.append(f"  {cl['verdict'].upper():<13} {cl['claim']}")
    return "\n".join(lines)


def _tail(t: dict) -> str:
    """The slowest flow in one line: who, when, by how much it trailed, what it resent."""
    when = "unfinished" if t["fct_us"] is None else f"{t['fct_us']:,.0f} µs"
    gap = "" if t["after_second_us"] is None else f", +{t['after_second_us']:.0f} after the next"
    resent = ", ".join(f"{k} {v}" for k, v in t["retransmits"].items()) or "nothing"
    return f"{t['flow']} {when}{gap}; resent {resent}"


def _avoid(c: dict) -> str:
    """The time to avoid, as "last send (90 % of the EVs' last sends) / last retirement" in
    µs; a lone figure with "<=" when only the retirement was recorded (an upper bound)."""
    if c["avoided_us"] is None:
        return "-"
    if c.get("avoided_from") == "last_send":
        p90 = c.get("avoided_p90_us")
        bulk = "" if p90 is None else f" ({p90:.0f})"
        return f"{c['avoided_us']:.0f}{bulk}/{c['retired_us']:.0f}"
    return f"<={c['avoided_us']:.0f}"


def format_reps_grid_markdown(d: dict) -> str:
    """The grid as one Markdown table (docs): per mode and load balancer, the testbed's FCTs
    beside the authors' simulator's, the reordering, the time to avoid, and the verdict."""
    lines = [
        "| mode | fabric, traffic | row | median / P99 / max FCT (µs) | htsim median / P99 / max "
        "| out of order | avoided: last send (90 %) / retired (µs) | NACKs | drops | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in d["cells"]:
        h = c.get("htsim")
        ref = (
            "-"
            if h is None
            else " / ".join(_us(h[k], 0) for k in ("median_us", "p99_us", "max_us"))
            + (
                f" ({h['flows_completed']}/{h['flows_total']} flows)"
                if h["flows_completed"] != h["flows_total"]
                else ""
            )
        )
        ours = " / ".join(_us(c[k], c["unfinished"]) for k in ("median_us", "p99_us", "max_us"))
        gap = [
            f"{k[:-3]} {v:+.0f} %"
            for k, v in (c.get("htsim_diff_pct") or {}).items()
            if v is not None and abs(v) > DIFF_PCT
        ]
        if gap:
            ref += f" (**{', '.join(gap)}**)"
        ooo = (
            "-"
            if c["ooo_ratio"] is None
            else f"{100 * c['ooo_ratio']:.0f} %, max {c['ooo_max_psns']}"
        )
        r = c["run"]
        run = f"valid, N={r['time_dilation']:g}" if r["valid"] else "**INVALID**"
        drops = ", ".join(f"{k} {v}" for k, v in c["drops"].items()) or "0"
        avoid = _avoid(c)
        lines.append(
            f"| {c['mode']} | {c['fabric']}, {c['traffic']} | {c['row']} | {ours} | {ref} | {ooo} "
            f"| {avoid} | {c['nacks']} | {drops} | {run} |"
        )
    lines += ["", "Claims, on valid runs only:", ""]
    lines += [f"- **{cl['verdict']}**: {cl['claim']}" for cl in d["claims"]]
    return "\n".join(lines)
