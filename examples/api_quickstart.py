"""The testbed from Python: build a fabric, break a link, read the counters, run a scenario.

    sudo .venv/bin/python examples/api_quickstart.py [--quick]

Picture (2 spines x 2 leaves x 2 hosts; h1 h2 on leaf1, h3 h4 on leaf2)::

        spine1      spine2
          |  \\    /  |
          |    \\/    |
          |    /\\    |
        leaf1       leaf2
        /   \\       /   \\
      h1    h2    h3    h4

Part 1 drives a fabric by hand: a ping across the fabric, then a silent black hole on
spine1-leaf2 (the link stays up, everything on it is dropped), and the counters that show where
the packets went. Part 2 runs a shipped scenario (the same failure, with an MRC bulk transfer
across it) and prints what the summary says. Nothing is left behind either way: the `with`
block removes the fabric even if something inside it raises.
"""

from __future__ import annotations

import argparse
import sys

from testbed import Fabric, LeafSpine, run

SPORTS = ",".join(str(p) for p in range(40000, 40016))


def drive_a_fabric() -> None:
    with Fabric(LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=100)) as f:
        print(f"{f}: hosts {', '.join(f.hosts())}")
        h3 = f.host_ip("h3")
        ping = f.exec("h1", "ping", "-c3", "-i0.2", "-W1", h3, capture=True)
        print(f"h1 -> h3 ({h3}): exit {ping.returncode}; {ping.stdout.strip().splitlines()[-1]}")

        reply = f.ctl("blackhole", "spine1", "leaf2")
        print(f"blackhole spine1-leaf2: {reply['steps']} switch changes")
        # UDP from 16 source ports (16 EVs): those the leaf hashes onto spine1 vanish there.
        probe = f.exec(
            "h1", sys.executable, "-m", "testbed.harness.udp_probe", "send", "--dst", h3,
            "--dport", "9000", "--sports", SPORTS, "--count", "20", capture=True,
        )  # fmt: skip
        if probe.returncode != 0:
            print(f"udp probe failed: {probe.stderr.strip()}")
        dropped = {
            port: pc["drops"]
            for port, pc in f.counters("spine1")["spine1"]["ports"].items()
            if pc["drops"]
        }
        print(f"spine1 drops by port and reason: {dropped or 'none'}")
        f.ctl("heal", "spine1", "leaf2")


def run_a_scenario(quick: bool) -> int:
    summary = run("silent-blackhole", quick_run=quick)
    mrc = summary["transports"]["mrc"]
    valid = summary["emulation"]["valid"] if "valid" in summary["emulation"] else None
    print(
        f"silent-blackhole: goodput {mrc['goodput_mbps']:.1f} Mbps, failover "
        f"{mrc['failover_ms']} ms, max stall {mrc['max_stall_ms']} ms; expectations "
        f"{'met' if summary['passed'] else 'NOT met'}; results in {summary['out_dir']}"
        + ("" if valid is None else f"; emulation valid: {valid}")
    )
    return 0 if summary["passed"] else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the scenario's timeline")
    ap.add_argument("--fabric-only", action="store_true", help="part 1 only")
    args = ap.parse_args()
    drive_a_fabric()
    return 0 if args.fabric_only else run_a_scenario(args.quick)


if __name__ == "__main__":
    sys.exit(main())
