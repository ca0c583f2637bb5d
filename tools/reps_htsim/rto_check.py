"""Does the simulator's retransmission timeout explain its long tails under failure?

    python3 tools/reps_htsim/rto_check.py --rto-tree /work/reps-htsim-rto [--mult 5 --mult 2 ...]
        [--nack] [--out DIR] [--fabric ls_1to1|ls_8to1] [--traffic perm|incast8]
        [--modes m1,m2,...|all]

By default it reruns the 1:1 fabric permutation cells of the REPS grid (modes none,
fail_one_cable, fail_one_cable_after_10us_for_100us, fail_one_switch, fail_one_switch_one_cable;
balancers reps and spraying). --fabric, --traffic and --modes pick other cells, so that the same
question can be asked of the 8:1 fabric and of the incast, where queue overflow also trims packets
and so NACKs already take part in loss recovery: --modes takes the fork's failure-mode file names
as in run_grid.py and the results' file names, comma-separated, or `all` for every mode that has a
checked-in results/<fabric>__<traffic>__<mode>__<balancer>.json (a cell is only rerun against a
checked-in baseline).

Each cell is run with exactly run_grid.py's command line, but with the binary of a separate copy
of the fork (--rto-tree) whose UecSrc reads the environment variable HTSIM_RTO_BASE_RTT_MULT: the
RTO becomes that many base RTTs instead of the hard-coded 5 (uec.cpp, `_rto = _base_rtt * 5;`;
the fork's `-rto` option is overwritten by that line). The copy is made by hand (see
docs/measurements/2026-12-06-reps-htsim-rto.md); this script does not build it.

--nack adds a run per cell with the original binary and the same command minus `-use_timeouts`:
then a failed cable or switch trims the packet and marks it failed instead of dropping it, the
receiver NACKs it, and the sender resends at once -- loss notification without any timeout.

Every run is `nice -n 19`, one at a time, in <rto-tree>/runs/HTSIM/sim/datacenter; the failure
files are read from --src (the original tree), so the command line differs from the checked-in
results' only in the binary path. Per-run JSON (FCTs, NACKs, drops, the RTO the binary printed)
and raw stdout go to --out (default <rto-tree>/results, not in git); the table is printed as
markdown against the checked-in results/*.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("run_grid", HERE / "run_grid.py")
grid = importlib.util.module_from_spec(_spec)
sys.modules["run_grid"] = grid
_spec.loader.exec_module(grid)
glue = grid.glue

FABRIC, TRAFFIC = "ls_1to1", "perm"  # the defaults: the cells first rerun (2026-12-06)
MODES = (
    "none",
    "fail_one_cable",
    "fail_one_cable_after_10us_for_100us",
    "fail_one_switch",
    "fail_one_switch_one_cable",
)
TESTBED_NAME = {
    "none": "none",
    "fail_one_cable": "link-failed",
    "fail_one_cable_after_10us_for_100us": "link-failed-100us",
    "fail_one_switch": "switch-failed",
    "fail_one_switch_one_cable": "switch-and-link-failed",
}
BALANCERS = ("reps", "spraying")


def parse_modes(text: str | None, fabric: str, traffic: str) -> list[str]:
    """--modes: comma-separated failure-mode names, `all`, or (unset) the default five. Every mode
    must be one of the fork's (glue.FAILURE_MODES) and have a checked-in baseline for both
    balancers, since each row is compared with it."""
    if text is None:
        return list(MODES)
    if text.strip() == "all":
        modes = [
            m
            for m in glue.FAILURE_MODES
            if all(
                (HERE / "results" / f"{fabric}__{traffic}__{m}__{bal}.json").exists()
                for bal in BALANCERS
            )
        ]
    else:
        modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in glue.FAILURE_MODES]
    if unknown:
        raise SystemExit(f"unknown failure mode(s): {', '.join(unknown)}")
    missing = [
        f"{fabric}__{traffic}__{m}__{bal}.json"
        for m in modes
        for bal in BALANCERS
        if not (HERE / "results" / f"{fabric}__{traffic}__{m}__{bal}.json").exists()
    ]
    if missing:
        raise SystemExit(f"no checked-in baseline: {', '.join(missing)}")
    return modes


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[str, int, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        ["nice", "-n", "19", *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.stdout, proc.returncode, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rto-tree", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=Path("/work/reps-htsim-src"))
    ap.add_argument("--mult", type=float, action="append", help="RTO in base RTTs (repeatable)")
    ap.add_argument("--nack", action="store_true", help="also run without -use_timeouts")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--fabric", choices=sorted(glue.FABRICS), default=FABRIC)
    ap.add_argument("--traffic", choices=["perm", "incast8"], default=TRAFFIC)
    ap.add_argument(
        "--modes",
        help="comma-separated failure modes, or `all` (default: the five of the first rerun)",
    )
    a = ap.parse_args(argv)
    fabric, traffic = a.fabric, a.traffic
    modes = parse_modes(a.modes, fabric, traffic)
    tree, src = a.rto_tree.resolve(), a.src.resolve()
    out = (a.out or tree / "results").resolve()
    (out / "raw").mkdir(parents=True, exist_ok=True)
    workdir = tree / "runs" / "HTSIM" / "sim" / "datacenter"
    grid.write_inputs(workdir)
    variants = [(f"rto{m:g}x", m) for m in (a.mult or [5, 2, 1])]
    if a.nack:
        variants.append(("nack", None))
    rows = []
    for mode in modes:
        for bal in BALANCERS:
            base = json.loads(
                (HERE / "results" / f"{fabric}__{traffic}__{mode}__{bal}.json").read_text()
            )
            row = {"mode": mode, "balancer": bal, "baseline": base}
            for label, mult in variants:
                env = dict(os.environ, HTSIM_FAILURE_SEED=str(grid.SEED))
                if mult is None:
                    binary = src / "sim" / "datacenter" / "htsim_uec_entry_modern"
                    cmd = grid.command(binary, src, fabric, traffic, mode, bal)
                    cmd.remove("-use_timeouts")
                else:
                    binary = tree / "sim" / "datacenter" / "htsim_uec_entry_modern"
                    cmd = grid.command(binary, src, fabric, traffic, mode, bal)
                    env["HTSIM_RTO_BASE_RTT_MULT"] = repr(mult)
                stdout, rc, wall = run(cmd, workdir, env, a.timeout)
                name = f"{fabric}__{traffic}__{mode}__{bal}__{label}"
                (out / "raw" / f"{name}.out").write_text(stdout)
                parsed = glue.parse_stdout(stdout)
                fcts = [f["fct_us"] for f in parsed["flows"]]
                rto = sorted(
                    {int(x) for x in re.findall(r"RTO_CHECK base_rtt_ps \d+ rto_ps (\d+)", stdout)}
                )
                r = {
                    "variant": label,
                    "rto_base_rtt_mult": mult,
                    "rto_ps_printed": rto,
                    "command": " ".join(cmd),
                    "fabric": fabric,
                    "traffic": traffic,
                    "failure_mode": mode,
                    "balancer": bal,
                    # what the checked-in run printed, compared as run_grid.py records it
                    "same_as_checked_in": all(
                        x == base[k]
                        for k, x in (
                            ("fct_us", fcts),
                            ("nacks", parsed["nacks"]),
                            ("dropped_packets", parsed["dropped_packets"]),
                            ("failure_events", parsed["failure_events"]),
                        )
                    ),
                    "env": {
                        k: env[k]
                        for k in ("HTSIM_FAILURE_SEED", "HTSIM_RTO_BASE_RTT_MULT")
                        if k in env
                    },
                    "returncode": rc,
                    "wall_s": round(wall, 2),
                    "flows_completed": len(fcts),
                    "flows_total": base["flows_total"],
                    **glue.fct_summary(fcts),
                    "fct_us": fcts,
                    "nacks": parsed["nacks"],
                    "dropped_packets": parsed["dropped_packets"],
                    "failure_events": parsed["failure_events"],
                }
                (out / f"{name}.json").write_text(json.dumps(r, indent=1) + "\n")
                row[label] = r
                print(
                    f"{name}: {len(fcts)}/{r['flows_total']} p50 {r['median_us']} p99 {r['p99_us']} "
                    f"max {r['max_us']} nacks {r['nacks']} drops {r['dropped_packets']} rto {rto} "
                    f"{r['wall_s']} s",
                    flush=True,
                )
            rows.append(row)

    def cell(r: dict) -> str:
        if r["flows_completed"] == 0:
            return "0 done"
        s = f"{r['median_us']:.0f} / {r['p99_us']:.0f} / {r['max_us']:.0f}"
        if r["flows_completed"] < r["flows_total"]:
            s += f" ({r['flows_completed']}/{r['flows_total']})"
        return s + f" [{r['dropped_packets']}]"

    labels = [label for label, _ in variants]
    print("\n| mode (testbed name) | balancer | checked-in (5x) | " + " | ".join(labels) + " |")
    print("|---|---|---|" + "---|" * len(labels))
    for row in rows:
        cells = [cell(row["baseline"])] + [cell(row[label]) for label in labels]
        print(
            f"| {row['mode']} ({TESTBED_NAME.get(row['mode'], '-')}) | {row['balancer']} | "
            + " | ".join(cells)
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
