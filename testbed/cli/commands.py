"""The `testbed` command (DESIGN.md "Command line"): up, inspect, exec, ctl, counters, cli, down,
clean, run, compare, list, bench, lab. Errors are one line naming the bad argument, and exit
status 2."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from testbed.experiment.errors import RunError
from testbed.fabric import client
from testbed.fabric.state import (
    DEFAULT_NAME,
    RUN_ROOT,
    FabricState,
    StateError,
    check_name,
    run_dir,
)
from testbed.fabric.switch_layout import ENV as SWITCH_LAYOUT_ENV
from testbed.fabric.switch_layout import LAYOUTS, switch_layout
from topologies import TopologyError, TopologyParams, leaf_spine

UP_TIMEOUT_S = 120.0


class CliError(RuntimeError):
    pass


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise CliError(f"{what} needs root (network namespaces): run it with sudo")


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
    )
    p.validate()
    return p


def bring_up(
    name: str, params: TopologyParams, seed: int = 1, switch_processes: str | None = None
) -> FabricState:
    """Start a detached supervisor for fabric `name` and return once it forwards.

    `switch_processes`: testbed.fabric.switch_layout's per-node or shared (default: the environment's
    choice, else per-node). On failure or Ctrl-C everything of `name` is removed before the
    error propagates.
    """
    check_name(name)
    try:
        layout = switch_layout(switch_processes)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    _need_root("testbed up")
    directory = run_dir(name)
    if directory.exists():
        try:
            st = FabricState.load(directory)
            if any(p.role == "supervisor" and p.alive() for p in st.processes):
                raise CliError(
                    f"--name: fabric {name!r} is already up (testbed down --name {name})"
                )
        except StateError:
            pass
        from testbed.fabric.cleanup import clean_fabric

        clean_fabric(name)  # stale leftovers of a crashed run of the same name
    directory.mkdir(parents=True, mode=0o700)
    log = open(directory / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
    env = os.environ | {"TESTBED_FABRIC": name, "PYTHONPATH": _root(), SWITCH_LAYOUT_ENV: layout}
    from dataclasses import asdict

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.fabric.supervisor",
            "--name",
            name,
            "--params",
            json.dumps(asdict(params)),
            "--seed",
            str(seed),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        cwd="/",
    )
    log.close()
    t0 = time.monotonic()
    try:
        while True:
            time.sleep(0.2)
            try:
                st = FabricState.load(directory)
            except StateError:
                st = None
            if st is not None and st.status in ("up", "degraded"):
                break
            if proc.poll() is not None or (st is not None and st.status == "failed"):
                msg = st.message if st else ""
                tail = _tail(directory / "supervisor.log")
                proc.wait(10)
                from testbed.fabric.cleanup import clean_fabric

                clean_fabric(name)
                raise CliError(f"fabric {name!r} failed to start: {msg or tail}")
            if time.monotonic() - t0 > UP_TIMEOUT_S:
                raise CliError(
                    f"fabric {name!r} not up after {UP_TIMEOUT_S:g}s (see {directory}/supervisor.log)"
                )
    except (KeyboardInterrupt, CliError):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        from testbed.fabric.cleanup import clean_fabric

        clean_fabric(name)
        raise
    return st


def cmd_up(args: argparse.Namespace) -> int:
    params = params_from_args(args)  # validate before anything is created
    t0 = time.monotonic()
    st = bring_up(args.name, params, args.seed, args.switch_processes)
    fab = leaf_spine(params)
    print(
        f"fabric {args.name!r} up in {time.monotonic() - t0:.1f}s: {len(fab.hosts())} hosts, "
        f"{len(fab.switches())} switches, {len(fab.links)} links; {st.message}"
    )
    print(
        f"  try: testbed exec {'--name ' + args.name + ' ' if args.name != DEFAULT_NAME else ''}h1 -- ping -c1 {fab.host_ip(fab.hosts()[-1])}"
    )
    return 0


def _tail(path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip().splitlines()[-1]
    except (OSError, IndexError):
        return ""


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])


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
    _need_root("testbed exec")
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise CliError("exec: no command given (testbed exec NODE -- CMD ...)")
    st = client.state(args.name)
    node = st.nodes.get(args.node)
    if node is None:
        raise CliError(
            f"exec: no node {args.node!r} in fabric {args.name!r} (nodes: {', '.join(st.nodes)})"
        )
    return subprocess.call(["mnexec", "-a", str(node["pid"]), *argv])


CTL_USAGE = """actions:
  link-down A B | link-up A B | blackhole A B | heal A B
  loss A B PERCENT | degrade A B MBPS | flap A B PERIOD_MS [COUNT]
  switch-down NODE | switch-up NODE | plane-down K | plane-up K
  link actions take --direction FROM,TO to act on one direction only (e.g. the ACK path)"""


def ctl_request(action: str, rest: list[str], direction: str | None) -> dict:
    """Parse `testbed ctl ACTION ARGS...` into a supervisor request (pure, tested)."""
    from testbed.fabric.failures import ACTIONS, LINK_ACTIONS, NODE_ACTIONS

    if action not in ACTIONS:
        raise CliError(f"ctl: unknown action {action!r}\n{CTL_USAGE}")
    req: dict = {"op": "ctl", "action": action}
    want = {"loss": ["percent"], "degrade": ["mbps"], "flap": ["period_ms", "count?"]}.get(
        action, []
    )
    if action in LINK_ACTIONS:
        if len(rest) < 2:
            raise CliError(f"ctl {action}: needs two adjacent nodes, e.g. {action} spine1 leaf2")
        req["link"] = rest[:2]
        rest = rest[2:]
        if direction:
            parts = direction.split(",")
            if len(parts) != 2:
                raise CliError(f"--direction: expected FROM,TO, got {direction!r}")
            req["direction"] = parts
    elif action in NODE_ACTIONS:
        if len(rest) != 1:
            raise CliError(f"ctl {action}: needs one switch name")
        req["node"] = rest[0]
        rest = []
    else:
        if len(rest) != 1 or not rest[0].isdigit():
            raise CliError(f"ctl {action}: needs a plane number")
        req["plane"] = int(rest[0])
        rest = []
    required = [w for w in want if not w.endswith("?")]
    if len(rest) < len(required) or len(rest) > len(want):
        raise CliError(
            f"ctl {action}: expected {' '.join(w.upper() for w in want)} after the link, got {rest}"
        )
    for key, value in zip(want, rest, strict=False):
        key = key.rstrip("?")
        try:
            req[key] = int(value) if key == "count" else float(value)
        except ValueError:
            raise CliError(f"ctl {action}: {key.upper()} must be a number, got {value!r}") from None
    return req


def cmd_ctl(args: argparse.Namespace) -> int:
    req = ctl_request(args.action, args.args, args.direction)
    reply = client.call(args.name, req)
    print(
        f"{args.action} applied ({reply['steps']} switch changes)"
        if reply.get("steps") is not None
        else "ok"
    )
    return 0


def cmd_counters(args: argparse.Namespace) -> int:
    if args.hosts:
        hosts = client.call(args.name, {"op": "host-counters"})["hosts"]
        if args.json:
            print(json.dumps(hosts, indent=1))
        else:
            for h, nics in hosts.items():
                for nic, c in nics.items():
                    print(
                        f"{h:6} {nic:10} tx {c.get('tx_packets', '?'):>9}  NIC qdisc drops {c.get('qdisc_drops', '?')}"
                    )
        return 0
    counters = client.call(args.name, {"op": "counters", "node": args.node})["counters"]
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
        print(
            f"{sw}: kernel drops {c['kernel_drops']}, timer late p99 {c['timer_late_us_p99']:.0f} us{extra}"
        )
        for port, pc in c["ports"].items():
            drops = ",".join(f"{k}={v}" for k, v in pc["drops"].items()) or "-"
            print(
                f"  {port:16} {pc['rx_packets']:>9} {pc['tx_packets']:>9} {pc['trims']:>7} {pc['ecn_marks']:>6}"
                f" {pc['max_queue_bytes'] / 1000:>8.1f}  {drops}"
            )
    return 0


def tear_down(name: str) -> None:
    """Stop fabric `name` through its supervisor, then remove whatever is left of it.

    Raises CliError naming what could not be removed."""
    directory = run_dir(name)
    try:
        supervisor = [
            p.pid for p in FabricState.load(directory).processes if p.role == "supervisor"
        ]
    except StateError:
        supervisor = []
    try:
        client.call(name, {"op": "down"}, timeout=5)
        deadline = time.monotonic() + 20
        from testbed.fabric.cleanup import _exists

        while (
            directory.exists() or any(_exists(p) for p in supervisor)
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
    except client.ClientError:
        pass  # supervisor gone: clean up from the state file below
    from testbed.fabric.cleanup import clean_fabric, leftovers

    clean_fabric(name)  # anything the supervisor could not remove
    left = leftovers(name)
    if left:
        raise CliError(f"down: left behind {left}")


def cmd_down(args: argparse.Namespace) -> int:
    _need_root("testbed down")
    if not run_dir(args.name).exists():
        raise CliError(f"--name: no fabric named {args.name!r} is up")
    tear_down(args.name)
    print(f"fabric {args.name!r} down; nothing left behind")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    _need_root("testbed clean")
    from testbed.fabric.cleanup import clean_all

    done = clean_all(include_live=args.all)
    if not done:
        print(f"nothing to clean under {RUN_ROOT}")
    for name, actions in done.items():
        print(f"{name}: {'; '.join(actions) or 'nothing left'}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from testbed.scenario.catalog import format_catalog, list_scenarios

    print(format_catalog(list_scenarios()))
    return 0


def _load_for_run(args: argparse.Namespace):
    """Find and validate the scenario (and `--quick` it) before anything is created."""
    from testbed.scenario.catalog import find_scenario
    from testbed.scenario.model import ScenarioError, lint, load_scenario, quick

    try:
        path = find_scenario(args.scenario)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(f"scenario: {exc}") from None
    try:
        sc = load_scenario(path)
        if args.quick:
            sc = quick(sc)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    for warning in lint(sc):
        print(f"testbed: warning: {warning}", file=sys.stderr)
    return sc


def _finish_run(outcome, args: argparse.Namespace) -> int:
    from testbed.analysis.report import print_comparison

    print()
    print_comparison(outcome.summary, outcome.metrics)
    print(f"\nresults: {outcome.out_dir}")
    print(f"  report:  {outcome.out_dir / 'report.md'}")
    print(f"  summary: {outcome.out_dir / 'summary.json'}")
    for caption, path in outcome.plots.items():
        print(f"  plot:    {path}  ({caption})")
    judged = ", ".join(outcome.judged)
    if outcome.passed:
        print(f"expectations met ({judged})")
        return 0
    failed = [
        f"{t}: {c['name']} = {c['value']} (limit {c['limit']})"
        for t in outcome.judged
        for c in outcome.summary["transports"][t]["expectations"]["checks"]
        if not c["passed"]
    ]
    print("expectations NOT met: " + "; ".join(failed))
    return 1


def cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from testbed.experiment.runner import (
        check_runnable,
        default_out_dir,
        run_scenario,
        transports_arg,
    )

    sc = _load_for_run(args)
    try:
        transports = transports_arg(args.transport) if args.transport else sc.transports
    except ValueError as exc:
        raise CliError(str(exc)) from None
    check_runnable(transports)
    _need_root("testbed run")
    out = Path(args.out) if args.out else default_out_dir(sc)
    return _finish_run(run_scenario(sc, transports, out), args)


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from testbed.experiment.runner import (
        check_runnable,
        default_out_dir,
        run_scenario,
        transports_arg,
    )

    sc = _load_for_run(args)
    try:
        transports = transports_arg(args.transports)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    check_runnable(transports)
    _need_root("testbed compare")
    out = Path(args.out) if args.out else default_out_dir(sc)
    judged = [t for t in transports if t in sc.transports]
    return _finish_run(run_scenario(sc, transports, out, judged=judged), args)


def cmd_cli(args: argparse.Namespace) -> int:
    from testbed.cli.interactive import FabricCli

    FabricCli(args.name).cmdloop()
    return 0


# The benches that build a fabric of their own: module, run function, table function.
FABRIC_BENCHES = {
    "endpoint": ("testbed.bench.endpoint_bench", "run_endpoint_bench", "format_endpoint_table"),
    "failover": ("testbed.bench.failover_bench", "run_failover_bench", "format_failover_table"),
    "fabric": ("testbed.bench.fabric_bench", "run_fabric_bench", "format_fabric_table"),
}


def cmd_bench(args: argparse.Namespace) -> int:
    _need_root("testbed bench")
    if args.what in FABRIC_BENCHES:
        import importlib

        from testbed.bench.endpoint_bench import BenchError

        module, run, fmt = FABRIC_BENCHES[args.what]
        bench = importlib.import_module(module)
        try:
            result = getattr(bench, run)(quick=args.quick)
        except BenchError as exc:
            raise CliError(str(exc)) from None
        print(json.dumps(result, indent=1) if args.json else getattr(bench, fmt)(result))
        return 0
    from testbed.bench.switch_bench import BenchError, run_switch_bench

    try:
        result = run_switch_bench(duration_s=args.duration, quick=args.quick)
    except BenchError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        from testbed.bench.switch_bench import format_table

        print(format_table(result))
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    from pathlib import Path

    from testbed.labs.grading import (
        LabError,
        check_lab,
        find_lab,
        format_list,
        format_report,
        list_labs,
    )

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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="testbed", description="Emulated leaf-spine fabric for MRC-style multipath transport."
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def named(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--name", default=DEFAULT_NAME, help=f"fabric name (default {DEFAULT_NAME})")
        return p

    up = named(sub.add_parser("up", help="build a fabric and leave it running"))
    d = TopologyParams()
    up.add_argument("--spines", type=int, required=True)
    up.add_argument("--leaves", type=int, required=True)
    up.add_argument("--hosts-per-leaf", type=int, required=True)
    up.add_argument("--planes", type=int, default=d.planes)
    up.add_argument("--link-mbps", type=float, default=d.link_mbps, help="link rate; 0 = unshaped")
    up.add_argument(
        "--delay-us", type=float, default=d.delay_us, help="one-way propagation delay per link"
    )
    up.add_argument(
        "--queue-kb", type=float, default=d.queue_kb, help="data queue per switch port (kB)"
    )
    up.add_argument(
        "--ecn-kb", type=float, default=None, help="ECN marking threshold (default half the queue)"
    )
    up.add_argument(
        "--trim-bytes", type=int, default=d.trim_bytes, help="frame length after trimming"
    )
    up.add_argument("--no-trim", action="store_true", help="tail-drop instead of trimming")
    up.add_argument(
        "--oversubscription",
        type=float,
        default=d.oversubscription,
        help="host/uplink capacity ratio per leaf",
    )
    up.add_argument("--seed", type=int, default=1, help="ECMP hash seeds derive from it")
    up.add_argument(
        "--switch-processes",
        choices=LAYOUTS,
        help="one switch process per switch node (the default) or one for all of them "
        f"(${SWITCH_LAYOUT_ENV} sets the default; docs/fabric.md)",
    )
    up.set_defaults(func=cmd_up)

    ins = named(sub.add_parser("inspect", help="nodes, NICs, addresses, ports, PIDs"))
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=cmd_inspect)

    ex = named(
        sub.add_parser("exec", help="run a command in a node's namespace (exit status kept)")
    )
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    ex.set_defaults(func=cmd_exec)

    ctl = named(
        sub.add_parser(
            "ctl",
            help="apply a failure action",
            epilog=CTL_USAGE,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    ctl.add_argument("action")
    ctl.add_argument("args", nargs="*")
    ctl.add_argument("--direction", help="FROM,TO: impair one direction of the link only")
    ctl.set_defaults(func=cmd_ctl)

    co = named(sub.add_parser("counters", help="per-port switch counters"))
    co.add_argument("--json", action="store_true")
    co.add_argument("--hosts", action="store_true", help="host NIC counters (qdisc drops) instead")
    co.add_argument("node", nargs="?")
    co.set_defaults(func=cmd_counters)

    from testbed.fabric import fib_view

    fib_view.add_parsers(sub, named)

    named(
        sub.add_parser("cli", help="interactive shell: node commands plus testbed commands")
    ).set_defaults(func=cmd_cli)
    named(sub.add_parser("down", help="tear down exactly what `up` built")).set_defaults(
        func=cmd_down
    )
    cl = sub.add_parser("clean", help="remove leftovers of this tool only (stale fabrics)")
    cl.add_argument("--all", action="store_true", help="also tear down fabrics that are still up")
    cl.set_defaults(func=cmd_clean)
    sub.add_parser("list", help="shipped scenarios with one-line descriptions").set_defaults(
        func=cmd_list
    )

    for cmd in ("run", "compare"):
        helps = {
            "run": "run a scenario; exit 0 iff its expectations hold",
            "compare": "run a scenario once per transport, side by side",
        }
        rp = sub.add_parser(cmd, help=helps[cmd])
        rp.add_argument("scenario", help="a YAML file, or the name of a shipped scenario")
        rp.add_argument("--out", help="results folder (default results/NAME-TIMESTAMP)")
        rp.add_argument("--quick", action="store_true", help="a quarter of the timeline (tests)")
        if cmd == "run":
            rp.add_argument("--transport", help="run this transport (or a,b,...) instead")
            rp.set_defaults(func=cmd_run)
        else:
            rp.add_argument(
                "--transports",
                default="mrc,single-path,spray-no-failover,tcp,mptcp",
                help="comma-separated (default: all five)",
            )
            rp.set_defaults(func=cmd_compare)

    be = sub.add_parser("bench", help="benchmarks with same-run baselines")
    be.add_argument("what", choices=["switch", "endpoint", "fabric", "failover"])
    be.add_argument("--json", action="store_true")
    be.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    be.add_argument("--quick", action="store_true", help="shorter runs (CI)")
    be.set_defaults(func=cmd_bench)

    lab = sub.add_parser("lab", help="teaching labs: list them, grade your code")
    lab_sub = lab.add_subparsers(dest="lab_cmd", required=True, metavar="list|check")
    lab_sub.add_parser("list", help="the labs and what each asks you to write")
    lc = lab_sub.add_parser(
        "check",
        help="run a lab's checks against your code (unit tests, then a short scenario as root)",
        description="Exit 0 if every check passed, 1 if one failed, 3 if the unit checks "
        "passed but the scenario part was skipped because it needs root.",
    )
    lc.add_argument("number", type=int, help="the lab's number")
    who = lc.add_mutually_exclusive_group()
    who.add_argument("--solution", action="store_true", help="check labs/solutions/labN instead")
    who.add_argument("--code", help="check the student files in this folder instead (grading)")
    lc.add_argument("--unit-only", action="store_true", help="the unit checks only (no root)")
    lc.add_argument("--out", help="results folder (default labs/<lab>/results)")
    lc.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    lab.set_defaults(func=cmd_lab)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, TopologyError, StateError, client.ClientError, RunError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `testbed counters | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
