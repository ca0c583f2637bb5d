"""Run the REPS failure grid, scaled to 32 hosts, on an already built htsim_uec_entry_modern.

    python3 tools/reps_htsim/run_grid.py --src /work/reps-htsim-src [--fabric ls_1to1 ...]
        [--traffic perm ...] [--mode none ...] [--balancer reps ...]

--src is the reconstructed fork tree (see README.md; this script does not build it). Each run is
`nice -n 19`, one at a time; its stdout goes to results/raw/ (not in git; gzip it afterwards,
--reparse reads either) and its JSON to
results/<fabric>__<traffic>__<mode>__<balancer>.json. The fork's output paths need a directory
named HTSIM above the working directory, so the runs happen in <src>/runs/HTSIM/sim/datacenter.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("reps_glue", HERE / "reps_glue.py")
glue = importlib.util.module_from_spec(_spec)
sys.modules["reps_glue"] = glue
_spec.loader.exec_module(glue)

COMMIT = "3541a2fa8b8387394ca4aa351d126d668aa4595d"
SEED = 919  # the authors' -seed; also seeds our permutation / incast choice and the failure draws

# all_plot_4MB.py's command line (elias_dev 0c5d4b8), minus -topo/-tm/-nodes/-strat/-failures_input
AUTHORS_ARGS = (
    "-o uec_entry -algorithm smartt -use_timeouts -use_freezing_reps -end_time 0.005 "
    "-bonus_drop 1.5 -number_entropies 256 -q 294 -cwnd 353 -ecn 58 235 "
    "-target_rtt_percentage_over_base 50 -use_fast_increase 1 -use_super_fast_increase 1 "
    "-fast_drop 1 -linkspeed 800000 -mtu 4096 -seed 919 -queue_type composite -hop_latency 1000 "
    "-reuse_entropy 1 -x_gain 1.6 -y_gain 8 -topology normal -w_gain 2 -z_gain 0.8 -collect_data 1"
)


def command(
    binary: Path, src: Path, fabric: str, traffic: str, mode: str, balancer: str
) -> list[str]:
    args = [str(binary), *AUTHORS_ARGS.split()]
    args += ["-strat", balancer, "-nodes", str(glue.HOSTS)]
    args += ["-topo", f"inputs/{fabric}.topo", "-tm", f"inputs/{traffic}_s{SEED}.cm"]
    if mode != "none":
        args += ["-failures_input", str(src / "sim" / "failures_input" / f"{mode}.txt")]
    return args


def write_inputs(workdir: Path) -> None:
    inputs = workdir / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    for fabric, gbps in glue.FABRICS.items():
        (inputs / f"{fabric}.topo").write_text(glue.topo_text(gbps))
    for traffic in ("perm", "incast8"):
        (inputs / f"{traffic}_s{SEED}.cm").write_text(glue.cm_text(glue.traffic(traffic, SEED)))


def read_packet_seq(outdir: Path) -> dict:
    per_flow = {}
    for f in sorted((outdir / "packet_seq").glob("*.txt")):
        seq = [int(x) for x in f.read_text().split()]
        per_flow[f.stem] = glue.out_of_order(seq)
    if not per_flow:
        return {}
    return {
        "flows": len(per_flow),
        "ooo_total": sum(v["ooo"] for v in per_flow.values()),
        "ooo_ratio_mean": sum(v["ratio"] for v in per_flow.values()) / len(per_flow),
        "ooo_ratio_max": max(v["ratio"] for v in per_flow.values()),
        "ooo_max_distance": max(v["max_distance"] for v in per_flow.values()),
    }


def run_one(binary, src, workdir, out, fabric, traffic, mode, balancer, timeout):
    name = f"{fabric}__{traffic}__{mode}__{balancer}"
    cmd = command(binary, src, fabric, traffic, mode, balancer)
    env = dict(os.environ, HTSIM_FAILURE_SEED=str(SEED))
    outdir = workdir.parent / "output"
    shutil.rmtree(outdir, ignore_errors=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            ["nice", "-n", "19", *cmd],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        stdout, rc = proc.stdout, proc.returncode
        stderr = proc.stderr
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr, rc = "timeout", None
    wall = time.monotonic() - t0
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"{name}.out").write_text(stdout)
    if stderr:
        (raw / f"{name}.err").write_text(stderr)
    parsed = glue.parse_stdout(stdout)
    flows_expected = len(glue.traffic(traffic, SEED))
    fcts = [f["fct_us"] for f in parsed["flows"]]
    result = {
        "fabric": fabric,
        "leaf_spine_gbps": glue.FABRICS[fabric],
        "traffic": traffic,
        "failure_mode": mode,
        "failure_mode_meaning": glue.FAILURE_MODES[mode],
        "balancer": balancer,
        "simulator": f"spcl/HTSIM@{COMMIT} (elias_dev) + tools/reps_htsim local changes",
        "command": " ".join(shlex.quote(c) for c in cmd),
        "env": {"HTSIM_FAILURE_SEED": str(SEED)},
        "returncode": rc,
        "wall_s": round(wall, 2),
        "flows_completed": len(fcts),
        "flows_total": flows_expected,
        "fct_us": fcts,
        **glue.fct_summary(fcts),
        "flows": parsed["flows"],
        "nacks": parsed["nacks"],
        "dropped_packets": parsed["dropped_packets"],
        "failure_events": parsed["failure_events"],
        "recoveries": parsed["recoveries"],
        "out_of_order": read_packet_seq(outdir),
    }
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--binary", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--fabric", action="append", choices=sorted(glue.FABRICS))
    ap.add_argument("--traffic", action="append", choices=["perm", "incast8"])
    ap.add_argument("--mode", action="append", choices=list(glue.FAILURE_MODES))
    ap.add_argument("--balancer", action="append", choices=list(glue.BALANCERS))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--skip-existing", action="store_true")
    ap.add_argument(
        "--reparse",
        action="store_true",
        help="only refresh each JSON's failure events and mode text from its raw stdout",
    )
    a = ap.parse_args(argv)
    if a.reparse:
        for f in sorted(a.out.glob("*.json")):
            raw = a.out / "raw" / f"{f.stem}.out"
            gz = raw.with_suffix(".out.gz")
            if raw.exists() or gz.exists():
                text = (
                    raw.read_text() if raw.exists() else gzip.decompress(gz.read_bytes()).decode()
                )
                r = json.loads(f.read_text())
                r["failure_events"] = glue.parse_stdout(text)["failure_events"]
                r["failure_mode_meaning"] = glue.FAILURE_MODES[r["failure_mode"]]
                f.write_text(json.dumps(r, indent=1) + "\n")
        return 0
    src = a.src.resolve()
    binary = (a.binary or src / "sim" / "datacenter" / "htsim_uec_entry_modern").resolve()
    workdir = src / "runs" / "HTSIM" / "sim" / "datacenter"
    write_inputs(workdir)
    a.out.mkdir(parents=True, exist_ok=True)
    for fabric in a.fabric or list(glue.FABRICS):
        for traffic in a.traffic or ["perm", "incast8"]:
            for mode in a.mode or list(glue.FAILURE_MODES):
                for balancer in a.balancer or list(glue.BALANCERS):
                    name = f"{fabric}__{traffic}__{mode}__{balancer}"
                    if a.skip_existing and (a.out / f"{name}.json").exists():
                        continue
                    r = run_one(
                        binary, src, workdir, a.out, fabric, traffic, mode, balancer, a.timeout
                    )
                    print(
                        f"{name}: {r['flows_completed']}/{r['flows_total']} median {r['median_us']} "
                        f"p99 {r['p99_us']} nacks {r['nacks']} drops {r['dropped_packets']} "
                        f"{r['wall_s']} s",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
