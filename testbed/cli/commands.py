"""The `testbed` command (docs/design.md "Command line"): up, inspect, exec, ctl, counters, cli,
down, clean, run, compare, soak, list, bench, lab. Errors are one line naming the bad argument, and
exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from testbed.analysis.report import print_comparison
from testbed.analysis.validity import EXIT_INVALID
from testbed.bench import (
    capacity_bench,
    ecmp_bench,
    endpoint_bench,
    fabric_bench,
    failover_bench,
    fidelity_bench,
    fidelity_table,
    hop_bench,
    reps_grid,
    switch_bench,
)
from testbed.bench.calibrate import run_calibration
from testbed.capture import CaptureError, capture
from testbed.cli.errors import CliError
from testbed.cli.interactive import Dispatch, FabricCli
from testbed.experiment.api import load
from testbed.experiment.calibration import load_budget
from testbed.experiment.dilation import parse_dilation
from testbed.experiment.errors import RunError
from testbed.experiment.executor import Cluster, run_with_executor
from testbed.experiment.repetitions import (
    RepeatedOutcome,
    format_plain_table,
    repeated_rows,
    seeds_for,
)
from testbed.experiment.runner import (
    Progress,
    check_runnable,
    compare_transports,
    default_out_dir,
    transports_arg,
)
from testbed.experiment.slurm import SlurmOptions
from testbed.experiment.soak import QUICK_MINUTES, SoakOptions, run_soak
from testbed.fabric import client
from testbed.fabric.cleanup import clean_all
from testbed.fabric.lifecycle import FabricError, need_root
from testbed.fabric.session import Fabric
from testbed.fabric.state import DEFAULT_NAME, RUN_ROOT, run_dir
from testbed.labs.definition import LabError, find_lab, list_labs
from testbed.labs.grading import check_lab
from testbed.labs.report import format_list, format_report
from testbed.scenario import Scenario, ScenarioError, lint, quick, scenario_json_schema
from testbed.scenario.capture import capture_ports, parse_pcap_arg
from testbed.scenario.catalog import format_catalog, list_scenarios
from testbed.scenario.soak_schedule import FailureRates, ScheduleError
from testbed.scenario.sweep import SweepError, parse_sweep_arg, sweep_points
from topologies import TopologyParams


def params_from_args(args: argparse.Namespace) -> TopologyParams:
    p = TopologyParams(
        spines=args.spines,
        leaves=args.leaves,
        hosts_per_leaf=args.hosts_per_leaf,
        planes=args.planes,
        link_mbps=args.link_mbps,
        delay_us=args.delay_us,
        queue_kb=args.queue_kb,
        trim_bytes=args.trim_bytes,
        trimming=not args.no_trim,
        ecn_kb=args.ecn_kb,
        oversubscription=args.oversubscription,
        ecmp_hash=args.ecmp_hash,
        forwarding=args.forwarding,
        mtu=args.mtu,
    )
    p.validate()
    return p


def cmd_up(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # validate before anything is created
    t0 = time.monotonic()
    f = Fabric(
        params,
        name=args.name,
        seed=args.seed,
        switch_processes=args.switch_processes,
        time_dilation=args.time_dilation,
    )
    st = f.up().state()
    fab = f.description
    print(
        f"fabric {args.name!r} up in {time.monotonic() - t0:.1f}s: {len(fab.hosts())} hosts, "
        f"{len(fab.switches())} switches, {len(fab.links)} links; {st.message}"
    )
    print(
        f"  try: testbed exec {'--name ' + args.name + ' ' if args.name != DEFAULT_NAME else ''}h1 -- ping -c1 {fab.host_ip(fab.hosts()[-1])}"
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    st = client.inspect(args.name)
    if args.json:
        print(json.dumps(st, indent=1))
        return 0
    print(f"fabric {st['name']}: {st['status']} - {st['message']}")
    procs = {(p["role"], p["node"]): p for p in st["processes"]}
    print(f"{'node':10} {'kind':6} {'pid':>7} {'switch pid':>10}  interfaces")
    for name, n in st["nodes"].items():
        sw = procs.get(("switch", name))
        swpid = "" if sw is None else f"{sw['pid']}{'' if sw.get('alive', True) else ' DEAD'}"
        intfs = ", ".join(
            f"{i['name']}{'=' + i['ip'] if i['ip'] else ''}->{i['peer']}"
            for i in n.get("interfaces", [])
        )
        print(f"{name:10} {n['kind']:6} {n['pid']:>7} {swpid:>10}  {intfs}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    need_root("testbed exec")
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise CliError("exec: no command given (testbed exec NODE -- CMD ...)")
    try:
        return Fabric.attach(args.name).exec(args.node, *argv).returncode
    except FabricError as exc:
        raise CliError(f"exec: {exc}") from None


def cmd_capture(args: argparse.Namespace) -> int:
    need_root("testbed capture")
    if args.count is not None and args.count < 1:
        raise CliError(f"--count: a positive number of packets, got {args.count}")
    if args.duration is not None and not args.duration > 0:
        raise CliError(f"--duration: a positive number of seconds, got {args.duration:g}")
    try:
        return capture(
            args.name, args.node, args.port, args.write, args.duration, args.count, args.filter
        )
    except (CaptureError, FabricError) as exc:
        raise CliError(f"capture: {exc}") from None


def cmd_ctl(args: argparse.Namespace) -> int:
    reply = Fabric.attach(args.name).ctl(args.action, *args.args, direction=args.direction)
    print(
        f"{args.action} applied ({reply['steps']} switch changes)"
        if reply.get("steps") is not None
        else "ok"
    )
    return 0


def cmd_counters(args: argparse.Namespace) -> int:
    if args.hosts:
        hosts = Fabric.attach(args.name).host_counters()
        if args.json:
            print(json.dumps(hosts, indent=1))
        else:
            for h, nics in hosts.items():
                for nic, c in nics.items():
                    print(
                        f"{h:6} {nic:10} tx {c.get('tx_packets', '?'):>9}  NIC qdisc drops {c.get('qdisc_drops', '?')}"
                    )
        return 0
    counters = Fabric.attach(args.name).counters(args.node)
    if args.json:
        print(json.dumps(counters, indent=1))
        return 0
    print(
        f"{'switch/port':18} {'rx pkts':>9} {'tx pkts':>9} {'trims':>7} {'ecn':>6} {'maxq kB':>8}  drops"
    )
    for sw, c in counters.items():
        if "error" in c:
            print(f"{sw:18} ERROR {c['error']}")
            continue
        extra = f"  switch drops {c['drops']}" if c["drops"] else ""
        print(f"{sw}: kernel drops {c['kernel_drops']}, timer late p99 {_late(c)}{extra}")
        for port, pc in c["ports"].items():
            drops = ",".join(f"{k}={v}" for k, v in pc["drops"].items()) or "-"
            print(
                f"  {port:16} {pc['rx_packets']:>9} {pc['tx_packets']:>9} {pc['trims']:>7} {pc['ecn_marks']:>6}"
                f" {pc['max_queue_bytes'] / 1000:>8.1f}  {drops}"
            )
    return 0


def _late(c: dict) -> str:
    """A switch's P99 lateness for the table: none before its first due departure."""
    p99 = c.get("timer_late_us_p99")
    return "- (no sample yet)" if p99 is None else f"{p99:.0f} us"


def cmd_down(args: argparse.Namespace) -> int:
    need_root("testbed down")
    if not run_dir(args.name).exists():
        raise CliError(f"--name: no fabric named {args.name!r} is up")
    Fabric.attach(args.name).down()
    print(f"fabric {args.name!r} down; nothing left behind")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    need_root("testbed clean")

    done = clean_all(include_live=args.all)
    if not done:
        print(f"nothing to clean under {RUN_ROOT}")
    for name, actions in done.items():
        print(f"{name}: {'; '.join(actions) or 'nothing left'}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_json_schema(), indent=1))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    entries = list_scenarios()
    if args.json:
        rows = [{"name": e.name, "path": str(e.path), "description": e.description,
                 "error": e.error} for e in entries]  # fmt: skip
        print(json.dumps(rows, indent=1))
        return 0
    print(format_catalog(entries))
    return 0


def _load_for_run(args: argparse.Namespace) -> Scenario:
    """Find and validate the scenario, its sweep points and its seeds before anything is
    created. Returned as written: `--quick` shortens each run after a sweep sets its values."""
    try:
        sc = load(args.scenario)
        if getattr(args, "pcap", None):
            sc = with_pcap(sc, args.pcap)
        sweep: dict = {}
        for text in args.sweep or []:
            sweep.update(parse_sweep_arg(text))
        if sweep:
            sweep_points(sc, sweep)  # every point validated now, not halfway through
        seeds_for(sc, args.repeat)
    except (ScenarioError, SweepError, RunError) as exc:
        raise CliError(str(exc)) from None
    args.sweep_map = sweep or None
    for warning in lint(quick(sc) if args.quick else sc):
        print(f"testbed: warning: {warning}", file=sys.stderr)
    return sc


def with_pcap(sc: Scenario, spec: str) -> Scenario:
    """The scenario with `--pcap SPEC` as its `capture.ports` (its other capture keys kept);
    a name that is not in the fabric is a one-line error, before anything is built."""
    try:
        entries = parse_pcap_arg(spec)
        capture_ports(sc.fabric(), entries, "--pcap")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return sc.model_copy(update={"capture": sc.capture.model_copy(update={"ports": entries})})


def _progress(args: argparse.Namespace) -> Progress:
    """With --json, stdout carries the summary alone: progress goes to stderr."""
    return Progress(stream=sys.stderr) if args.json else Progress()


def _exit_status(outcome, args: argparse.Namespace) -> int:
    """0 met, 1 expectations not met, EXIT_INVALID a run the emulator did not keep up with
    (unless --allow-invalid): an invalid run's "met" is not a result."""
    if not outcome.valid and not args.allow_invalid:
        return EXIT_INVALID
    return 0 if outcome.passed else 1


def _dilation_arg(args: argparse.Namespace) -> float | str | None:
    if args.time_dilation is None:
        return None
    try:
        return parse_dilation(args.time_dilation)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _finish_run(outcome, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(
            {**outcome.summary, "out_dir": str(outcome.out_dir), "passed": outcome.passed,
             "valid": outcome.valid},
            indent=1,
        ))  # fmt: skip
        return _exit_status(outcome, args)
    print()
    if isinstance(outcome, RepeatedOutcome):
        return _finish_repeated(outcome, args)
    print_comparison(outcome.summary, outcome.metrics)
    print(f"\nresults: {outcome.out_dir}")
    print(f"  report:  {outcome.out_dir / 'report.md'}")
    print(f"  html:    {outcome.out_dir / 'report.html'}")
    print(f"  summary: {outcome.out_dir / 'summary.json'}")
    for path in outcome.data:
        print(f"  data:    {path}")
    for caption, path in outcome.plots.items():
        print(f"  plot:    {path}  ({caption})")
    for t, entry in outcome.summary["transports"].items():
        for f in entry.get("capture", {}).get("files", []):
            lost = f", {f['not_written']} not written (max_mb)" if f["not_written"] else ""
            print(f"  pcap:    {outcome.out_dir / f['file']}  ({t}, {f['written']} frames{lost})")
    judged = ", ".join(outcome.judged)
    emu = outcome.summary.get("emulation", {})
    if not outcome.valid:
        print(
            f"INVALID RUN (time dilation {emu.get('time_dilation', 1):g}): "
            + "; ".join(emu.get("invalid_reasons", []))
            + ". Its numbers are the machine's, not the network's."
        )
    if outcome.passed:
        print(
            f"expectations met ({judged})" + ("" if outcome.valid else ", but the run is INVALID")
        )
        return _exit_status(outcome, args)
    failed = [
        f"{t}: {c['name']} = {c['value']} (limit {c['limit']})"
        for t in outcome.judged
        for c in outcome.summary["transports"][t]["expectations"]["checks"]
        if not c["passed"]
    ]
    print("expectations NOT met: " + "; ".join(failed))
    return _exit_status(outcome, args)


def _finish_repeated(outcome: RepeatedOutcome, args: argparse.Namespace) -> int:
    """The table of medians and intervals (or a sweep's), where things are, and the verdict."""
    s = outcome.summary
    sweep = "points" in s
    if sweep:
        print((outcome.out_dir / "sweep.md").read_text(encoding="utf-8"))
    else:
        header, rows = repeated_rows(s["transports"])
        print(format_plain_table(header, rows))
    print(f"\nresults: {outcome.out_dir}")
    name = "sweep" if sweep else "report"
    print(f"  {name}:  {outcome.out_dir / (name + '.md')}")
    print(f"  html:    {outcome.out_dir / 'report.html'}")
    print(f"  summary: {outcome.out_dir / ('sweep.json' if sweep else 'summary.json')}")
    for caption, path in outcome.plots.items():
        print(f"  plot:    {path}  ({caption})")
    emu = s.get("emulation", {})
    if not outcome.valid:
        print("INVALID: " + "; ".join(emu.get("invalid_reasons", []))
              + ". These numbers are the machine's, not the network's.")  # fmt: skip
    if outcome.passed:
        print("expectations met" + ("" if outcome.valid else ", but the runs are INVALID"))
    else:
        print("expectations NOT met (see the report)")
    return _exit_status(outcome, args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    need_root("testbed calibrate")
    path = run_calibration(quick=args.quick)
    budget = load_budget(path)
    print(f"calibrated: {budget[0]:,.0f} packet-hops per real second carried validly; "
          f"cached in {path}")  # fmt: skip
    return 0


def _calibrate_if_needed(sc: Scenario, dilation: float | str | None) -> None:
    """`auto` with no fresh calibration of this machine: measure it first (once; cached)."""
    wanted = dilation if dilation is not None else sc.emulation.time_dilation
    if wanted == "auto" and load_budget() is None:
        print("time_dilation auto: this machine has no calibration yet; measuring it once "
              "(testbed calibrate)", file=sys.stderr)  # fmt: skip
        run_calibration(quick=True, progress=Progress(stream=sys.stderr))


def cmd_run(args: argparse.Namespace) -> int:
    sc = _load_for_run(args)
    dilation = _dilation_arg(args)
    try:
        transports = (
            transports_arg(args.transport, sc.transports) if args.transport else sc.transports
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    check_runnable(transports)
    cluster = _cluster(args)
    if cluster is None:  # on Slurm, each task needs root on its node, and calibrates there
        need_root("testbed run")
        _calibrate_if_needed(sc, dilation)
    out = Path(args.out) if args.out else default_out_dir(sc)
    outcome = run_with_executor(
        sc, transports, out, cluster=cluster, progress=_progress(args), time_dilation=dilation,
        repeat=args.repeat, sweep=args.sweep_map, quick_run=args.quick,
        data_format=args.data_format, plot_format=args.plot_format,
    )  # fmt: skip
    return _finish_run(outcome, args)


def cmd_compare(args: argparse.Namespace) -> int:
    sc = _load_for_run(args)
    dilation = _dilation_arg(args)
    try:
        if args.transports is None:
            transports = compare_transports(sc.transports)
        else:
            transports = transports_arg(args.transports, sc.transports)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    check_runnable(transports)
    cluster = _cluster(args)
    if cluster is None:  # on Slurm, each task needs root on its node, and calibrates there
        need_root("testbed compare")
        _calibrate_if_needed(sc, dilation)
    out = Path(args.out) if args.out else default_out_dir(sc)
    judged = [t for t in transports if t in sc.transports]
    outcome = run_with_executor(
        sc, transports, out, cluster=cluster, judged=judged, progress=_progress(args),
        time_dilation=dilation,
        repeat=args.repeat, sweep=args.sweep_map, quick_run=args.quick,
        data_format=args.data_format, plot_format=args.plot_format,
    )  # fmt: skip
    return _finish_run(outcome, args)


def _cluster(args: argparse.Namespace) -> Cluster | None:
    """`--executor slurm` and its options; None for local (where Slurm's options are errors)."""
    if args.executor == "local":
        for flag, given in (("--partition", args.partition), ("--resume", args.resume),
                            ("--slurm-option", args.slurm_option),
                            ("--slurm-config", args.slurm_config),
                            ("--allow-mixed-calibration", args.allow_mixed_calibration)):  # fmt: skip
            if given:
                raise CliError(f"{flag}: only with --executor slurm")
        return None
    if args.resume and not args.out:
        raise CliError("--resume: name the results folder to finish with --out")
    options = SlurmOptions.from_config(args.slurm_config, args.partition, args.slurm_option)
    return Cluster(options, resume=args.resume,
                   allow_mixed_calibration=args.allow_mixed_calibration)  # fmt: skip


def cmd_soak(args: argparse.Namespace) -> int:
    """`testbed soak`: exit 0 iff the soak lost nothing, duplicated nothing, saw no bad
    checksum, kept its memory flat (where the check applies) and logged every failure; 1 if
    a check failed; 2 for bad input or a run that could not go on (an endpoint died)."""
    try:
        sc = load(args.scenario)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    minutes = QUICK_MINUTES if args.quick else args.minutes
    if not 0 < minutes <= 24 * 60:
        raise CliError(f"--minutes: must be more than 0 and at most 1440, got {minutes:g}")
    rates = FailureRates(
        mtbf_s=args.mtbf if args.mtbf is not None else (6.0 if args.quick else 15.0),
        mttr_s=args.mttr if args.mttr is not None else (2.0 if args.quick else 3.0),
    )
    try:
        rates.check()
    except ScheduleError as exc:
        flag = "--mtbf" if "mtbf" in str(exc) else "--mttr"
        raise CliError(f"{flag}: {str(exc).split(': ', 1)[1]}") from None
    need_root("testbed soak")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out) if args.out else Path("results") / f"soak-{stamp}"
    opts = SoakOptions(minutes=minutes, seed=sc.seed if args.seed is None else args.seed,
                       out_dir=out, rates=rates)  # fmt: skip
    outcome = run_soak(sc, opts, progress=_progress(args))
    s = outcome.summary
    if args.json:
        print(json.dumps({**s, "out_dir": str(out)}, indent=1, default=str))
    else:
        tot = s["accounting"]["total"]
        print(f"\nsoak {'PASSED' if outcome.passed else 'FAILED'}: {tot['sent_messages']} "
              f"messages ({tot['sent_bytes']} bytes) sent, {tot['delivered_messages']} delivered, "
              f"{tot['lost_bytes']} bytes lost, {tot['duplicates']} duplicates, "
              f"{tot['crc_failures'] + tot['bad_messages']} bad checksums")  # fmt: skip
        for why in outcome.reasons:
            print(f"  failed: {why}")
        emu = s["emulation"]
        if not emu["valid"]:
            bad = [f"{x['start_s']}-{x['end_s']}s" for x in emu["stretches"] if not x["valid"]]
            print(f"  emulation INVALID in {', '.join(bad)} ({emu['invalid_s']} s; report.md)")
        print(f"results: {out}\n  report:  {out / 'report.md'}")
    return 0 if outcome.passed else 1


def cmd_cli(args: argparse.Namespace, dispatch: Dispatch) -> int:

    FabricCli(args.name, dispatch=dispatch).cmdloop()
    return 0


# The benches that build a fabric of their own: run function, table function.
FABRIC_BENCHES = {
    "endpoint": (endpoint_bench.run_endpoint_bench, endpoint_bench.format_endpoint_table),
    "failover": (failover_bench.run_failover_bench, failover_bench.format_failover_table),
    "fabric": (fabric_bench.run_fabric_bench, fabric_bench.format_fabric_table),
}
# The benches that run scenarios through the runner: they take --time-dilation and --out.
SCENARIO_BENCHES = {
    "capacity": (capacity_bench.run_capacity_bench, capacity_bench.format_capacity_table),
    "fidelity": (fidelity_bench.run_fidelity_bench, fidelity_table.format_fidelity_table),
    "reps-grid": (reps_grid.run_reps_grid, reps_grid.format_reps_grid_table),
}
GRID_FILTERS = ("fabrics", "traffic", "modes", "rows")


def cmd_bench(args: argparse.Namespace) -> int:
    dilation = _dilation_arg(args)
    if dilation is not None and args.what == "hop":
        raise CliError(
            f"--time-dilation: bench hop runs on a fake clock, its switches at N = "
            f"{hop_bench.DILATION}"
        )
    if dilation is not None and args.what not in SCENARIO_BENCHES:
        raise CliError(f"--time-dilation: bench {args.what} runs in real time only")
    only = getattr(args, "only", None)
    sections = {"fidelity": fidelity_bench.SECTIONS, "capacity": tuple(capacity_bench.FABRICS)}
    if only is not None and only not in sections.get(args.what, ()):
        if args.what not in sections:
            raise CliError(f"--only: bench {args.what} has no sections (fidelity, capacity have)")
        raise CliError(
            f"--only: bench {args.what} has no section {only!r} "
            f"(it has {', '.join(sections[args.what])})"
        )
    filters = {k: getattr(args, k) for k in GRID_FILTERS if getattr(args, k, None) is not None}
    if filters and args.what != "reps-grid":
        raise CliError(f"--{next(iter(filters))}: only bench reps-grid has cells to choose")
    if getattr(args, "read_back", False):
        if args.what != "reps-grid":
            raise CliError("--read-back: only bench reps-grid reads its cells back")
        if not args.out:
            raise CliError("--read-back: name the results folder to read (--out DIR)")
        try:
            result = reps_grid.read_back_reps_grid(Path(args.out), **filters)
        except endpoint_bench.BenchError as exc:
            raise CliError(str(exc)) from None
        out = (
            json.dumps(result, indent=1) if args.json else reps_grid.format_reps_grid_table(result)
        )
        print(out)
        return 0
    if args.what == "ecmp":  # pure computation: no fabric, no root
        result = ecmp_bench.run_ecmp_bench(quick=args.quick)
        print(json.dumps(result, indent=1) if args.json else ecmp_bench.format_ecmp_table(result))
        return 0
    if args.what == "hop":  # the switches on a fake clock: no fabric, no root
        result = hop_bench.run_hop_bench(quick=args.quick)
        print(json.dumps(result, indent=1) if args.json else hop_bench.format_hop_table(result))
        return 0
    need_root("testbed bench")
    if args.what in SCENARIO_BENCHES:
        run, table = SCENARIO_BENCHES[args.what]
        extra = {"only": only} if only is not None else {}
        extra.update(filters)
        try:
            result = run(
                quick=args.quick,
                time_dilation=dilation or "auto",
                out=Path(args.out) if args.out else None,
                **extra,
            )
        except endpoint_bench.BenchError as exc:
            raise CliError(str(exc)) from None
        print(json.dumps(result, indent=1) if args.json else table(result))
        return 0
    if args.what in FABRIC_BENCHES:
        run, table = FABRIC_BENCHES[args.what]
        try:
            result = run(quick=args.quick)
        except endpoint_bench.BenchError as exc:
            raise CliError(str(exc)) from None
        print(json.dumps(result, indent=1) if args.json else table(result))
        return 0
    try:
        result = switch_bench.run_switch_bench(duration_s=args.duration, quick=args.quick)
    except switch_bench.BenchError as exc:
        raise CliError(str(exc)) from None
    print(json.dumps(result, indent=1) if args.json else switch_bench.format_table(result))
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    try:
        if args.lab_cmd == "list":
            print(format_list(list_labs()))
            return 0
        report = check_lab(
            find_lab(args.number),
            solution=args.solution,
            code=Path(args.code) if args.code else None,
            unit_only=args.unit_only,
            verbose=args.verbose,
            results_dir=Path(args.out) if args.out else None,
        )
    except LabError as exc:
        raise CliError(str(exc)) from None
    print(format_report(report))
    return report.exit_code
