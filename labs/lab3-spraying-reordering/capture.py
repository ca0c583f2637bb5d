"""Lab 3's capture: the permutation of permutation.yaml with 1 EV and with 64 EVs per connection.

    sudo .venv/bin/python labs/lab3-spraying-reordering/capture.py [--evs 1,64] [--full]

Both runs use the MRC transport (selective repair, a receiver that accepts packets in any
order), so spraying is the only difference between them. For each number of EVs it builds a
fresh fabric from the scenario's topology and seed, records with tshark the order in which
one receiver gets the data packets of one connection, runs the permutation (a quarter of its
bytes unless --full), and tears everything down again. It writes into results/:

- ``arrivals-<N>ev.csv``: ``time_s,src,ev,psn,seq,trimmed`` of every data packet of the
  watched connection, in arrival order; ``seq`` is the PSN counted from the connection's
  first, ``trimmed`` 1 for a header a switch trimmed (the capture: ``capture-<N>ev.pcap``);
- ``evbytes-<N>ev.json``: ``{"<src>,<dst>,<ev>": bytes}`` that each sender put on each EV;
- ``counters-<N>ev.json``: every switch port's counters at the end (``tx_bytes`` per port);
- ``run-<N>ev.json``: how long the permutation took, and what was watched.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LAB = Path(__file__).resolve().parent
REPO = LAB.parent.parent
sys.path.insert(0, str(REPO))

from contracts.dscp import TRIMMED_DSCP  # noqa: E402 - a switch cut the packet to its headers
from contracts.ports import ROCEV2_UDP_PORT  # noqa: E402
from testbed.fabric.session import Fabric  # noqa: E402
from testbed.harness.endpoint_driver import job_request  # noqa: E402
from testbed.harness.endpoints import FabricEndpoints  # noqa: E402
from testbed.scenario import flows, load_scenario, quick  # noqa: E402

FABRIC = "lab3cap"
JOB = 1
DATA_OPCODE = "0x0a"  # RC RDMA WRITE ONLY: every MRC data packet (docs/wire-format.md)
PSN_MOD = 1 << 24


def start_capture(node_pid: int, intf: str, src_ip: str, pcap: Path) -> subprocess.Popen:
    cap = subprocess.Popen(
        ["mnexec", "-a", str(node_pid), "tshark", "-q", "-i", intf,
         "-f", f"udp dst port {ROCEV2_UDP_PORT} and src host {src_ip}", "-w", str(pcap)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    line = ""
    while "Capturing on" not in line:
        if time.monotonic() > deadline or cap.poll() is not None:
            cap.kill()
            raise RuntimeError(f"tshark did not start on {intf}: {line.strip()}")
        line = cap.stderr.readline()
    return cap


def arrivals(pcap: Path) -> list[list]:
    """(time_s, src, ev, psn, seq, trimmed) of every captured data packet, in arrival order;
    seq counts from the connection's first PSN (PSNs are 24-bit and start at random)."""
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-d", f"udp.port=={ROCEV2_UDP_PORT},infiniband", "-T", "fields",
         "-E", "separator=,", "-e", "frame.time_relative", "-e", "ip.src", "-e", "udp.srcport",
         "-e", "infiniband.bth.psn", "-e", "infiniband.bth.opcode", "-e", "ip.dsfield.dscp"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    rows = []
    first = None
    for line in out.splitlines():
        t, src, ev, psn, opcode, dscp = line.split(",")
        if opcode.lower() not in (DATA_OPCODE, "10"):
            continue
        first = int(psn) if first is None else first
        # Signed distance from the first packet captured, which need not be the first sent.
        d = (int(psn) - first) % PSN_MOD
        d = d - PSN_MOD if d >= PSN_MOD // 2 else d
        rows.append([float(t), src, int(ev), int(psn), d, int(dscp == str(TRIMMED_DSCP))])
    low = min((r[4] for r in rows), default=0)
    for r in rows:
        r[4] -= low  # 0 = the connection's first PSN
    return rows


def ev_bytes(records: dict[str, list[dict]], addr_host: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for host, recs in records.items():
        for r in recs:
            if r.get("type") != "evtx":
                continue
            for key, n in r["bytes"].items():
                addr, _, ev = key.rpartition(":")
                k = f"{host},{addr_host.get(addr, addr)},{ev}"
                out[k] = out.get(k, 0) + n
    return out


def run_once(sc, evs: int, watch_src: str, out: Path) -> dict:
    fab = sc.fabric()
    hosts = fab.hosts()
    watch_dst = next(f.dst for f in flows(sc) if f.src == watch_src)
    addr_host = {fab.host_ip(h): h for h in hosts}
    pcap = out / f"capture-{evs}ev.pcap"
    eps = cap = None
    with Fabric(sc.topology.params(), name=FABRIC, seed=sc.seed) as fabric:
        try:
            intf = fab.interfaces[watch_dst][0].name
            cap = start_capture(fabric.node_pid(watch_dst), intf, fab.host_ip(watch_src), pcap)
            eps = FabricEndpoints(FABRIC, fab, hosts, pace_mbps=sc.topology.link_mbps)
            co = eps.coordinator
            # The runner's own request (the scenario's ECMP model decides the EV bases), N EVs.
            co.start(JOB, job_request(sc, "mrc") | {"evs": evs})
            t0 = min(co.go(JOB).values())
            statuses = co.wait(JOB, timeout=sc.duration_s)
            took = time.monotonic() - t0
            done = all(s.get("done") for s in statuses.values())
            counters = fabric.counters()
            eps.stop()
            records = {h: eps.records(h) for h in hosts}
        finally:
            if cap is not None:
                cap.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    cap.wait(10)
                if cap.poll() is None:
                    cap.kill()
                    cap.wait()
            if eps is not None:
                with contextlib.suppress(Exception):
                    eps.stop()
                eps.cleanup()
    rows = arrivals(pcap)
    with open(out / f"arrivals-{evs}ev.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "src", "ev", "psn", "seq", "trimmed"])
        w.writerows(rows)
    (out / f"evbytes-{evs}ev.json").write_text(json.dumps(ev_bytes(records, addr_host), indent=1))
    (out / f"counters-{evs}ev.json").write_text(json.dumps(counters, indent=1))
    run = {"evs": evs, "done": done, "seconds": took, "packets": len(rows),
           "watched": f"{watch_src} -> {watch_dst}", "bytes_per_flow": flows(sc)[0].bytes,
           "link_mbps": sc.topology.link_mbps, "seed": sc.seed}  # fmt: skip
    (out / f"run-{evs}ev.json").write_text(json.dumps(run, indent=1))
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evs", default="1,64", help="EV counts to run, comma-separated")
    ap.add_argument("--watch", default="h1", help="the sender whose connection is captured")
    ap.add_argument("--full", action="store_true", help="the scenario's full bytes (4x longer)")
    ap.add_argument("--scenario", type=Path, default=LAB / "permutation.yaml")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("capture.py needs root (network namespaces): run it with sudo", file=sys.stderr)
        return 2
    sc = load_scenario(args.scenario)
    if not args.full:
        sc = quick(sc)
    out = LAB / "results"
    out.mkdir(exist_ok=True)
    for evs in (int(x) for x in args.evs.split(",")):
        r = run_once(sc, evs, args.watch, out)
        rate = f"{r['seconds']:.2f} s" if r["done"] else f"not done in {sc.duration_s:g} s"
        print(f"{evs:3} EV(s): permutation {rate}; captured {r['packets']} data packets of "
              f"{r['watched']} -> results/arrivals-{evs}ev.csv")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
