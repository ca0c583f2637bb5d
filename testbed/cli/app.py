"""The `testbed` command line: the parser and `main` (docs/design.md "Command line").

Errors are one line naming the bad argument, with exit status 2; the commands themselves are in
`commands` (one function each) and `fib`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

from contracts import datapath
from contracts.defaults import ECMP_HASHES, FORWARDINGS
from contracts.framing import MAX_MTU, MIN_MTU
from contracts.project import __version__
from testbed.analysis.plot_formats import PLOT_FORMATS
from testbed.analysis.validity import EXIT_INVALID
from testbed.cli import completion, fib
from testbed.cli.errors import CliError
from testbed.experiment.choices import COMPARE_BASELINES, DATA_FORMATS, EXECUTORS
from testbed.experiment.errors import RunError
from testbed.fabric import client, interrupts
from testbed.fabric.failures import CTL_USAGE, FailureError
from testbed.fabric.lifecycle import FabricError, own_fabrics
from testbed.fabric.state import DEFAULT_NAME, StateError
from testbed.fabric.switch_layout import ENV as SWITCH_LAYOUT_ENV
from testbed.fabric.switch_layout import LAYOUTS
from testbed.scenario import TRANSPORTS
from testbed.scenario.catalog import list_scenarios
from topologies import TopologyError, TopologyParams


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """Sub-command `name` of testbed.cli.commands, imported when it runs: building the parser
    (every start, `--help`, completion, the generated reference) then imports none of what
    the commands use (matplotlib, scapy, the benches: ~1 s of every start before)."""

    def run(args: argparse.Namespace) -> int:
        from testbed.cli import commands

        return getattr(commands, name)(args)

    run.__name__ = name
    return run


def _cmd_cli(args: argparse.Namespace) -> int:
    """`testbed cli`: the interactive prompt, handed `main` to dispatch its testbed commands."""
    from testbed.cli.commands import cmd_cli

    return cmd_cli(args, dispatch=main)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="testbed", description="Emulated leaf-spine fabric for MRC-style multipath transport."
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    named = _named
    _fabric_commands(sub, named)
    fib.add_parsers(sub, named)
    _scenario_commands(sub)
    _soak_command(sub)
    _bench_and_lab_commands(sub)
    co = sub.add_parser(
        "completion",
        help="print a shell completion script (install: see README, 'Shell completion')",
    )
    co.add_argument("shell", choices=completion.SHELLS)
    co.set_defaults(func=cmd_completion)
    return ap


def cmd_completion(args: argparse.Namespace) -> int:
    """The script for args.shell, read off this very parser (testbed.cli.completion)."""
    names = [e.name for e in list_scenarios() if e.error is None]
    transports = {"--transport": list(TRANSPORTS), "--transports": list(TRANSPORTS)}
    print(completion.script(args.shell, build_parser(), names, transports), end="")
    return 0


def _named(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--name", default=DEFAULT_NAME, help=f"fabric name (default {DEFAULT_NAME})")
    return p


def _comma_list(value: str) -> list[str]:
    """``a,b`` -> ["a", "b"]: a bench's cell filter."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, e.g. reps,oblivious")
    return items


def _datapath_flag(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--datapath c|python` (contracts.datapath): what every switch and endpoint runs."""
    p.add_argument(
        "--datapath",
        choices=datapath.DATAPATHS,
        help="c: the compiled data path (the default where it is built; up: python, whose "
        "switches take every control); python: the readable reference path "
        f"(${datapath.ENV} sets the default; docs/performance.md)",
    )
    return p


def _fabric_commands(sub, named) -> None:
    """up, inspect, exec, ctl, counters, cli, down, clean: one fabric's life."""
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
        "--mtu",
        type=int,
        default=d.mtu,
        help=f"IP MTU of every interface ({MIN_MTU}..{MAX_MTU}); data packets fill it",
    )
    up.add_argument(
        "--oversubscription",
        type=float,
        default=d.oversubscription,
        help="host/uplink capacity ratio per leaf",
    )
    up.add_argument(
        "--ecmp-hash",
        choices=ECMP_HASHES,
        default=d.ecmp_hash,
        help="mixed: as real switches (CRC then a finaliser); crc: the linear CRC alone, "
        "structured spreads (docs/fabric.md)",
    )
    up.add_argument(
        "--forwarding",
        choices=FORWARDINGS,
        default=d.forwarding,
        help="ecmp: MRC packets hashed like any flow; source-routed: an MRC packet's EV names "
        "its uplink (generated EVs; docs/fabric.md)",
    )
    up.add_argument("--seed", type=int, default=1, help="ECMP hash seeds derive from it")
    up.add_argument(
        "--time-dilation",
        type=float,
        default=1.0,
        metavar="N",
        help="real seconds per virtual second: rates and delays are the datacenter's, served "
        "N times slower (default 1; docs/fidelity.md)",
    )
    up.add_argument(
        "--switch-processes",
        choices=LAYOUTS,
        help="one switch process per switch node (the default) or one for all of them "
        f"(${SWITCH_LAYOUT_ENV} sets the default; docs/fabric.md)",
    )
    _datapath_flag(up)
    up.set_defaults(func=_command("cmd_up"))

    ins = named(sub.add_parser("inspect", help="nodes, NICs, addresses, ports, PIDs"))
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=_command("cmd_inspect"))

    ex = named(
        sub.add_parser("exec", help="run a command in a node's namespace (exit status kept)")
    )
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    ex.set_defaults(func=_command("cmd_exec"))

    cap = named(
        sub.add_parser(
            "capture",
            help="capture a node's packets: a pcap (-w), or each packet decoded as MRC",
        )
    )
    cap.add_argument("node")
    cap.add_argument("port", nargs="?", help="one of the node's ports (default: all of them)")
    cap.add_argument("-w", "--write", metavar="FILE", help="write a pcap instead of printing")
    cap.add_argument("--duration", type=float, metavar="S", help="stop after S real seconds")
    cap.add_argument("-c", "--count", type=int, metavar="N", help="stop after N packets")
    cap.add_argument("-f", "--filter", metavar="BPF", help="capture filter, e.g. 'udp port 4791'")
    cap.set_defaults(func=_command("cmd_capture"))

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
    ctl.set_defaults(func=_command("cmd_ctl"))

    co = named(sub.add_parser("counters", help="per-port switch counters"))
    co.add_argument("--json", action="store_true")
    co.add_argument("--hosts", action="store_true", help="host NIC counters (qdisc drops) instead")
    co.add_argument("node", nargs="?")
    co.set_defaults(func=_command("cmd_counters"))

    named(
        sub.add_parser("cli", help="interactive shell: node commands plus testbed commands")
    ).set_defaults(func=_cmd_cli)
    named(sub.add_parser("down", help="tear down exactly what `up` built")).set_defaults(
        func=_command("cmd_down")
    )
    cl = sub.add_parser("clean", help="remove leftovers of this tool only (stale fabrics)")
    cl.add_argument("--all", action="store_true", help="also tear down fabrics that are still up")
    cl.set_defaults(func=_command("cmd_clean"))


def _scenario_commands(sub) -> None:
    """list, run, compare: the shipped scenarios and running them."""
    ls = sub.add_parser("list", help="shipped scenarios with one-line descriptions")
    ls.add_argument("--json", action="store_true", help="name, path, description, error each")
    ls.set_defaults(func=_command("cmd_list"))
    sub.add_parser(
        "schema", help="the JSON Schema of the scenario format (for editors and linters)"
    ).set_defaults(func=_command("cmd_schema"))
    for cmd in ("run", "compare"):
        helps = {
            "run": "run a scenario; exit 0 iff its expectations hold",
            "compare": "run a scenario once per transport, side by side",
        }
        rp = sub.add_parser(cmd, help=helps[cmd])
        rp.add_argument("scenario", help="a YAML file, or the name of a shipped scenario")
        rp.add_argument("--out", help="results folder (default results/NAME-TIMESTAMP)")
        rp.add_argument("--quick", action="store_true", help="a quarter of the timeline (tests)")
        rp.add_argument(
            "--json",
            action="store_true",
            help="print the summary (plus out_dir, passed) as JSON on stdout; progress on stderr",
        )
        rp.add_argument(
            "--time-dilation",
            metavar="auto|N",
            help="override the scenario's emulation.time_dilation (docs/fidelity.md)",
        )
        rp.add_argument(
            "--format",
            dest="data_format",
            choices=DATA_FORMATS,
            default="csv",
            help="csv (default): the CSVs; parquet: also the tidy frames of testbed.results as "
            "<frame>.parquet in the results folder (docs/results.md)",
        )
        rp.add_argument(
            "--allow-invalid",
            action="store_true",
            help=f"exit by the expectations alone even if a run was invalid (else {EXIT_INVALID})",
        )
        rp.add_argument(
            "--repeat",
            type=int,
            metavar="N",
            help="run N times (seeds seed..seed+N-1, or the file's `seeds`): medians with "
            "distribution-free intervals of the median (95 %% from 6 valid runs; below that "
            "the runs' range, e.g. 93.75 %% at 5), expectations judged on expect.statistic",
        )
        rp.add_argument(
            "--sweep",
            action="append",
            metavar="KEY=V1,V2,...",
            help="run at each value of a scenario key (e.g. events[0].percent=0,1,2,5); "
            "repeat for a grid; adds to the file's `sweep`",
        )
        rp.add_argument(
            "--pcap",
            metavar="SPEC",
            help="the switches write a pcap per port, stamped with virtual time, into "
            "raw/<transport>/pcap/: SWITCH:PORT, SWITCH (all its ports) or hosts (leaf ports "
            "facing hosts), comma-separated; sets the scenario's capture.ports (docs/wire-format.md)",
        )
        rp.add_argument(
            "--plot-format",
            choices=PLOT_FORMATS,
            default="png",
            help="file format of every plot (default png; svg and pdf for papers)",
        )
        _datapath_flag(rp)
        _executor_flags(rp)
        if cmd == "run":
            rp.add_argument("--transport", help="run this transport (or a,b,...) instead")
            rp.set_defaults(func=_command("cmd_run"))
        else:
            rp.add_argument(
                "--transports",
                default=None,
                help="comma-separated (default: the scenario's own list when it names two or "
                f"more; else its transport and the baselines: {', '.join(COMPARE_BASELINES)})",
            )
            rp.set_defaults(func=_command("cmd_compare"))


def _executor_flags(p: argparse.ArgumentParser) -> None:
    """`--executor local|slurm` and Slurm's options (testbed.experiment.executor)."""
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local (default): every run here, one after another; slurm: one job array, "
        "one run per node, results on the shared filesystem (docs/cluster.md)",
    )
    p.add_argument("--partition", metavar="P", help="slurm: the partition (default Slurm's)")
    p.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="OPT",
        help="slurm: an sbatch option passed as it is, e.g. --slurm-option=--time=30 (repeat)",
    )
    p.add_argument(
        "--slurm-config",
        metavar="FILE",
        help="slurm: YAML with partition, options, shared, python "
        "(default $TESTBED_SLURM_CONFIG or ~/.config/mrc-testbed/slurm.yaml)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="slurm: submit again only the runs of --out with no finished result",
    )
    p.add_argument(
        "--allow-mixed-calibration",
        action="store_true",
        help="slurm: pool runs whose emulator calibrations differ (refused by default)",
    )


def _soak_command(sub) -> None:
    sk = sub.add_parser(
        "soak",
        help="continuous all-reduce and permutation under random failures; exit 0 iff nothing "
        "was lost or duplicated, every checksum was good, memory stayed flat (docs/soak.md)",
    )
    sk.add_argument(
        "scenario", nargs="?", default="soak",
        help="its fabric, transport and emulation (default: the shipped 'soak' scenario)",
    )  # fmt: skip
    sk.add_argument("--minutes", type=float, default=30.0, help="length of the traffic (30)")
    sk.add_argument("--quick", action="store_true", help="a short soak for CI (45 s)")
    sk.add_argument("--out", help="results folder (default results/soak-TIMESTAMP)")
    sk.add_argument("--seed", type=int, help="failure schedule seed (default the scenario's)")
    sk.add_argument("--mtbf", type=float, default=None, metavar="S",
                    help="mean seconds between failures (default 15; --quick 6)")  # fmt: skip
    sk.add_argument("--mttr", type=float, default=None, metavar="S",
                    help="mean seconds a failure lasts (default 3; --quick 2)")  # fmt: skip
    sk.add_argument("--json", action="store_true", help="print summary.json on stdout")
    _datapath_flag(sk)
    sk.set_defaults(func=_command("cmd_soak"))


def _bench_and_lab_commands(sub) -> None:
    """bench (benchmarks with same-run baselines), calibrate and lab (list, check)."""
    ca = sub.add_parser(
        "calibrate",
        help="measure the packet-hops per second this machine carries validly (for auto)",
    )
    ca.add_argument("--quick", action="store_true", help="smaller transfers (CI)")
    ca.set_defaults(func=_command("cmd_calibrate"))
    be = sub.add_parser("bench", help="benchmarks with same-run baselines")
    be.add_argument(
        "what",
        choices=[
            "switch",
            "endpoint",
            "fabric",
            "failover",
            "capacity",
            "fidelity",
            "ecmp",
            "hop",
            "reps-grid",
        ],
    )
    be.add_argument("--json", action="store_true")
    be.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    be.add_argument("--quick", action="store_true", help="shorter runs (CI)")
    be.add_argument(
        "--time-dilation",
        metavar="auto|N",
        help="capacity, fidelity, reps-grid: the runs' time dilation (capacity: where its "
        "search starts); default auto (docs/fidelity.md)",
    )
    be.add_argument(
        "--out",
        help="capacity, fidelity, reps-grid: results folder (default "
        "results/bench-WHAT-TIMESTAMP; reps-grid reads back the cells already in it)",
    )
    for key, what in (
        ("fabrics", "1to1, 8to1"),
        ("traffic", "permutation, incast"),
        ("modes", "failure modes, e.g. none,link-failed (docs/fidelity.md, Published results)"),
        (
            "rows",
            "reps, oblivious, wrr, single-path, roce (default), reps-1copy, oblivious-1copy, "
            "ecmp (MRC's recovery on one EV), reps-fixed-rto, oblivious-fixed-rto (MRC's "
            "fixed 65.5 us ACK timeout, not RFC 6298's RTO), reps-1copy-fixed-rto, "
            "reps-sim-resend (one copy, a timeout that does not back off)",
        ),
    ):
        be.add_argument(
            f"--{key}", metavar="A,B", type=_comma_list, help=f"reps-grid: only these {what}"
        )
    be.add_argument(
        "--read-back",
        action="store_true",
        help="reps-grid: run no cell, only read back those already in --out (needs no root); "
        "the grid and its claims from what a run folder holds",
    )
    be.add_argument(
        "--only",
        choices=["permutation", "slow-link", "incast", "2x2x2", "4x4x4", "4x8x4"],
        help="fidelity: run one section of the bench (permutation, slow-link, incast); "
        "capacity: one fabric (2x2x2, 4x4x4, 4x8x4)",
    )
    _datapath_flag(be)
    be.set_defaults(func=_command("cmd_bench"))

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
    lc.add_argument(
        "--out", help="results folder (default labs/<lab>/results; ./results/labN when installed)"
    )
    lc.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    lab.set_defaults(func=_command("cmd_lab"))


def main(argv: list[str] | None = None) -> int:
    """Run one command. SIGINT, SIGTERM and SIGHUP unwind it (testbed.fabric.interrupts), so
    whatever it built is torn down, and it exits with 128 + the signal's number (130 for
    Ctrl-C). Every fabric a command builds dies with this process, however it ends (its
    supervisor watches this PID), except the one `testbed up` leaves running."""
    args = build_parser().parse_args(argv)
    old = interrupts.install()
    own_fabrics(args.cmd != "up")
    try:
        return _run(args)
    finally:
        own_fabrics(False)
        interrupts.uninstall(old)


def _apply_datapath(args: argparse.Namespace) -> None:
    """Check the data path asked for before anything is built, then hand it to every process
    this command starts (they inherit $TESTBED_DATAPATH); say so once if the Python path runs
    only because the compiled one is missing."""
    value = getattr(args, "datapath", None)
    if value is None and not hasattr(args, "datapath"):
        return
    if value is None and args.cmd == "up" and not os.environ.get(datapath.ENV):
        # A fabric driven by hand may be given any control later (`testbed ctl loss`,
        # `impair`, `capture`), and only the Python path has them all: up runs it unless asked.
        value = datapath.PYTHON
    datapath.check(value, "--datapath" if value is not None else datapath.ENV)
    if value is not None:
        os.environ[datapath.ENV] = value
    else:
        note = datapath.notice()
        if note is not None:
            _say(f"testbed: {note}")


def _run(args: argparse.Namespace) -> int:
    try:
        _apply_datapath(args)
        return args.func(args)
    except (
        datapath.DatapathError,
        CliError,
        FabricError,
        FailureError,
        TopologyError,
        StateError,
        client.ClientError,
        RunError,
    ) as exc:
        if interrupts.received() is not None:
            _say(f"testbed: interrupted by {_signame(interrupts.received())}; torn down")
            return 128 + interrupts.received()
        for line in str(exc).splitlines() or [""]:  # a scenario may hold several mistakes
            _say(f"testbed: {line}")
        return 2
    except KeyboardInterrupt as exc:
        sig = exc.signum if isinstance(exc, interrupts.Interrupted) else signal.SIGINT
        _say(f"testbed: interrupted by {_signame(sig)}; torn down")
        return 128 + sig
    except BrokenPipeError:  # `testbed counters | head`
        sys.stderr.close()
        return 0 if interrupts.received() is None else 128 + interrupts.received()
    except Exception:
        # A failure the interrupt caused (an endpoint that got the terminal's signal too):
        # the run was interrupted, and its status says so. Any other is a bug: its traceback.
        if interrupts.received() is None:
            raise
        _say(f"testbed: interrupted by {_signame(interrupts.received())}; torn down")
        return 128 + interrupts.received()


def _signame(sig: int) -> str:
    return signal.Signals(sig).name


def _say(line: str) -> None:
    """stderr, which a hangup may have taken away: a teardown's exit status matters more."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
