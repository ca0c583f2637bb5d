"""The endpoint transports (``mrc``, ``single-path``, ``spray-no-failover``, ``roce``) as a harness
driver.

One endpoint process per host of the workload (`FabricEndpoints`), one job carrying the
scenario's traffic matrix, and at the end the hosts' metrics records turned into the
`TransportRun` that the analysis measures. The kernel baselines (`kernel_baseline`) follow the
same five moves, so the runner has one code path for every transport (`driver.Driver`).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from contracts.clock import Clock
from contracts.ports import ROCEV2_UDP_PORT
from endpoint.config import TransportConfig
from endpoint.control import ControlError
from endpoint.metrics import placed_samples
from testbed.fabric.paths import predict_path
from testbed.harness.endpoints import FabricEndpoints
from testbed.harness.records import (
    Failure,
    FlowRecord,
    Message,
    TransportRun,
    failure_of,
    path_name,
)
from testbed.scenario import AllreduceWorkload, Scenario, TraceWorkload, flows, workload_hosts
from testbed.scenario.trace_workload import trace_job

ENDPOINT_TRANSPORTS = ("mrc", "single-path", "spray-no-failover", "roce")
JOB = 1


def endpoint_workload(sc: Scenario) -> dict:
    """The endpoint job's workload: the scenario's traffic matrix, one definition for both."""
    w = sc.workload
    if isinstance(w, AllreduceWorkload):
        return {
            "kind": "allreduce",
            "hosts": workload_hosts(sc),
            "bytes": w.bytes,
            "steps": w.steps,
        }
    if isinstance(w, TraceWorkload):
        return trace_job(sc)
    return {"kind": "flows", "flows": [[f.src, f.dst, f.bytes] for f in flows(sc)]}


class LiveBytes:
    """Bytes placed so far at the receivers, read incrementally from their metrics files, and
    the goodput of the latest bin they have all closed.

    Why per bin: each receiver writes one `bin` record per bin (endpoint.metrics.BIN_S), which
    at a high time dilation is tens of real seconds apart, while the monitor samples four
    times a second. Bytes over the time between two samples counted a whole bin's bytes in
    the quarter second its records arrived: a 32-host run once showed 169,078,049 Mbps."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.offsets = dict.fromkeys(paths, 0)
        self.total = 0
        self.placed_by_bin: dict[int, int] = {}
        self.bin_s: float | None = None
        self._shown: int | None = None  # the last bin `mbps` has reported
        self._mbps: float | None = None

    def __call__(self) -> int:
        for p, off in self.offsets.items():
            try:
                with open(p, "rb") as f:
                    f.seek(off)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            self.offsets[p] = off + end
            for line in data[:end].splitlines():
                if b'"type": "bin"' not in line and b'"type":"bin"' not in line:
                    continue
                with contextlib.suppress(ValueError, TypeError, KeyError, ZeroDivisionError):
                    rec = json.loads(line)
                    placed = int(rec.get("placed", 0))
                    self.total += placed
                    dt = float(rec["dt"])
                    k = round(float(rec["t"]) / dt)
                    self.placed_by_bin[k] = self.placed_by_bin.get(k, 0) + placed
                    self.bin_s = dt
        return self.total

    def mbps(self) -> float | None:
        """Goodput over the bins closed since the last call, up to the one before the latest
        seen (the latest may still lack some receivers' records); the last figure again when
        no bin closed since (a high N writes a bin every few real seconds), None until a bin
        has closed. A bin with no record counts as empty: idle receivers write none."""
        self()
        if self.bin_s is None or not self.placed_by_bin:
            return self._mbps
        closed = max(self.placed_by_bin) - 1
        first = min(self.placed_by_bin) if self._shown is None else self._shown + 1
        if first <= closed:
            placed = sum(self.placed_by_bin.pop(k, 0) for k in range(first, closed + 1))
            self._mbps = placed * 8 / ((closed - first + 1) * self.bin_s) / 1e6
            self._shown = closed
            for k in [k for k in self.placed_by_bin if k <= closed]:  # a record come late
                del self.placed_by_bin[k]
        return self._mbps


def job_request(sc: Scenario, transport: str) -> dict:
    """The endpoints' start request for the scenario's job, run as `transport` (a name, or the
    label of a configuration in the file: its EVs, EV profile and NSCC parameters).

    With the `mixed` ECMP model every connection draws its own EV base (UDP source ports) from
    the run's seed, as RoCE NICs pick a port per QP (`endpoint.config.connection_ev_base`);
    with `crc` they all start at the fixed base, the structured model labs rely on.

    On a source-routed fabric (`topology.forwarding`) the spraying transports use generated
    EVs, each a route, as MRC pairs them with static source routing; single-path keeps its
    drawn source port, which the fabric then reads as a random route. A configuration's own
    `ev_profile` wins.
    """
    name = sc.transport_name(transport)
    spec = sc.transport_spec(transport)
    req: dict = {"workload": endpoint_workload(sc), "mode": name}
    over: dict = {}
    if sc.topology.ecmp_hash == "mixed":
        over["ev_seed"] = sc.seed
    if sc.topology.forwarding == "source-routed" and name not in ("single-path", "roce"):
        over["ev_profile"] = "generated"
    if spec is not None:
        over.update(spec.transport_config())
        if spec.evs is not None:
            req["evs"] = spec.evs
    if over:
        req["transport"] = over
    return req


def reply_pairs(sc: Scenario, transport: str) -> dict[int, int]:
    """The EV -> reply EV pairing of the run's connections (as their endpoints compute it from
    the job's transport configuration), for the controller's view of round trips."""
    req = job_request(sc, transport)
    over = {k: v for k, v in req.get("transport", {}).items() if k != "ev_seed"}
    cfg = TransportConfig(
        num_evs=req.get("evs", TransportConfig.num_evs), planes=sc.topology.planes, **over
    )
    return cfg.reply_pairs()


def expected_flows(sc: Scenario) -> list[tuple[str, str, int]] | None:
    """(src, dst, bytes) of every flow the workload asks for; None for an all-reduce or a
    trace, whose messages carry what their steps and collectives make them carry."""
    if isinstance(sc.workload, AllreduceWorkload | TraceWorkload):
        return None
    return [(f.src, f.dst, f.bytes) for f in flows(sc)]


def flow_records(
    records: dict[str, list[dict]],
    statuses: dict[str, dict],
    t0: float,
    expected: Sequence[tuple[str, str, int]] | None,
) -> list[FlowRecord]:
    """One `FlowRecord` per flow, from the senders' message and counter records.

    A flow with `expected` bytes is done once that many bytes were acknowledged, at the last
    acknowledgement; without (all-reduce hops), once its sender's job finished. A flow that
    never had a message acknowledged starts at its sender's first still-unacknowledged post
    (the status lists those per host, not per peer: exact for one flow per sender)."""
    acked: dict[tuple[str, str], int] = {}
    placed: dict[tuple[str, str], int] = {}  # (src, dst): bytes dst placed, from its bins
    first: dict[tuple[str, str], float] = {}
    last: dict[tuple[str, str], float] = {}
    retrans: dict[tuple[str, str], dict[str, int]] = {}
    for host, recs in records.items():
        counters: dict[tuple, dict] = {}
        for r in recs:
            if r.get("job") != JOB:
                continue
            kind = r.get("type")
            if kind == "msg" and r.get("side") == "tx":
                key = (host, r["peer"])
                acked[key] = acked.get(key, 0) + r["bytes"]
                first[key] = min(first.get(key, math.inf), r["posted"] - t0)
                last[key] = max(last.get(key, -math.inf), r["acked"] - t0)
            elif kind == "counters":
                counters[(r["peer"], r["qp"])] = r  # cumulative: the last one counts
            elif kind == "bin":
                for src, n in (r.get("by_peer") or {}).items():
                    placed[(src, host)] = placed.get((src, host), 0) + n
        for (peer, _qp), r in counters.items():
            if not r["counters"].get("messages_queued"):
                continue  # the reverse direction of a connection: it only acknowledges
            into = retrans.setdefault((host, peer), {})
            for reason, n in r["retransmits"].items():
                into[reason] = into.get(reason, 0) + n
    if expected is None:
        wanted = {key: None for key in sorted({*acked, *retrans})}
    else:
        wanted = {}
        for src, dst, nbytes in expected:
            wanted[(src, dst)] = (wanted.get((src, dst)) or 0) + nbytes
    out = []
    for (src, dst), nbytes in wanted.items():
        got = acked.get((src, dst), 0)
        done = got >= nbytes if nbytes is not None else bool(statuses.get(src, {}).get("done"))
        start = first.get((src, dst))
        if start is None:
            posts = [posted for posted, _ in statuses.get(src, {}).get("unacked", [])]
            start = min(posts) - t0 if posts else None
        out.append(
            FlowRecord(
                src=src,
                dst=dst,
                bytes=got if nbytes is None else nbytes,
                acked_bytes=got,
                start_s=start,
                done_s=last.get((src, dst)) if done else None,
                retransmits=retrans.get((src, dst), {}),
                placed_bytes=placed.get((src, dst)),
            )
        )
    return out


def endpoint_run(
    transport: str,
    records: dict[str, list[dict]],
    statuses: dict[str, dict],
    t0: float,
    end_s: float,
    path_of: Callable[[str, str, int], str] | None = None,
    expected: Sequence[tuple[str, str, int]] | None = None,
) -> TransportRun:
    """What `measure` needs, from every host's metrics records and final job status."""

    deliveries: list[tuple[float, int]] = []
    by_flow: dict[tuple[str, str], list[tuple[float, float]]] = {}
    messages: list[Message] = []
    retransmits: dict[str, int] = {}
    steps: list[tuple[float, float | None]] = []
    # A trace's iterations, per iteration: (earliest start, latest end) over the ranks, and
    # how many ranks finished it.
    iters: dict[int, list] = {}
    trace_iters: list[dict] = []
    trace_nodes: list[dict] = []
    ev_bins: dict[str, dict[int, float]] = {}
    ev_dt = 0.010
    retirements = 0
    ev_failures: list[Failure] = []
    qp_errors = 0
    for host, recs in records.items():
        deliveries += [(t - t0, n) for t, n in placed_samples(recs, JOB)]
        for src, samples in flow_samples(recs, JOB).items():
            by_flow.setdefault((src, host), []).extend((t - t0, n) for t, n in samples)
        last: dict[tuple, dict] = {}
        for r in recs:
            kind = r.get("type")
            if kind == "evtx" and path_of is not None:
                ev_dt = r["dt"]  # the endpoints' bin (the fabric's time scale)
                k = int(round((r["t"] - t0) / r["dt"]))
                if k < 0:
                    continue
                for key, n in r["bytes"].items():
                    addr, _, ev = key.rpartition(":")
                    path = path_of(host, addr, int(ev))
                    ev_bins.setdefault(path, {})
                    ev_bins[path][k] = ev_bins[path].get(k, 0.0) + n
                continue
            if r.get("job") != JOB:
                continue
            if kind == "ev" and r.get("new") == "failed":
                retirements += 1
                ev_failures.append(failure_of(host, r, t0))
            elif kind == "msg" and r["side"] == "tx":
                messages.append(Message(r["posted"] - t0, r["bytes"], r["acked"] - t0))
            elif kind == "counters":
                last[(r["peer"], r["qp"])] = r
            elif kind == "step":
                steps.append((r["start"] - t0, r["end"] - t0))
            elif kind == "trace_iter":
                it = iters.setdefault(r["iteration"], [r["start"], r["end"], 0])
                it[0], it[1], it[2] = min(it[0], r["start"]), max(it[1], r["end"]), it[2] + 1
                trace_iters.append(
                    {**r, "host": host, "start": r["start"] - t0, "end": r["end"] - t0}
                )
            elif kind == "trace_node":
                trace_nodes.append(
                    {**r, "host": host, "start": r["start"] - t0, "end": r["end"] - t0}
                )
        for r in last.values():
            for k, v in r["retransmits"].items():
                retransmits[k] = retransmits.get(k, 0) + v
            qp_errors += 1 if r["counters"].get("qp_error") else 0
        st = statuses.get(host, {})
        if not st.get("done"):
            # A finished workload may still have its last barrier token in flight (all-reduce
            # ranks are done once the DONE token came round); only an unfinished one has data
            # outstanding.
            for posted, nbytes in st.get("unacked", []):
                messages.append(Message(posted - t0, nbytes, None))
    for st in statuses.values():
        if "global_steps" in st and st.get("rank") == 0:
            finished = st.get("steps_finished", len(steps))
            if finished < st.get("steps", finished):
                begin = max((e for _, e in steps if e is not None), default=0.0)
                steps.append((begin, None))  # the step in progress at the deadline
    ranks = len([st for st in statuses.values() if "iterations_finished" in st])
    for k in sorted(iters):
        start, end, finished = iters[k]
        # An iteration is a step of the job: from its first rank's start to its last rank's end;
        # one that some rank did not finish by the deadline is the step in progress.
        steps.append((start - t0, end - t0 if finished >= ranks else None))
    if (
        iters
        and ranks
        and any(
            st.get("iterations_finished", 0) < st.get("iterations", 0) for st in statuses.values()
        )
    ):
        last = max(iters)
        if iters[last][2] >= ranks:  # every rank finished the last one seen: the next one runs
            steps.append((max(e for _, e in steps if e is not None), None))
    deliveries.sort()
    steps.sort()
    nbins = int(math.ceil(end_s / ev_dt)) + 1
    ev_bytes = {p: [b.get(k, 0.0) for k in range(nbins)] for p, b in sorted(ev_bins.items())}
    return TransportRun(
        transport=transport,
        deliveries=deliveries,
        messages=messages,
        end_s=end_s,
        retransmits=retransmits,
        steps=steps,
        ev_bytes=ev_bytes,
        flows=flow_records(records, statuses, t0, expected),
        flow_deliveries={k: sorted(v) for k, v in sorted(by_flow.items())},
        ev_retirements=retirements,
        ev_failures=sorted(ev_failures, key=lambda f: f.t),
        qp_errors=qp_errors,
        trace_iters=trace_iters,
        trace_nodes=trace_nodes,
    )


def flow_samples(records: Sequence[dict], job: int) -> dict[str, list[tuple[float, float]]]:
    """(time, bytes placed) per sending peer, from a receiver's ``bin`` records.

    A bin record counts the bytes placed per peer (``by_peer``) over the whole bin and all peers
    together per millisecond (``ms``); each peer's share is spread over the milliseconds in
    proportion, so a per-flow series keeps the 1 ms resolution of the total."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if r.get("type") != "bin" or r.get("job") != job:
            continue
        peers = r.get("by_peer") or {}
        total = sum(r["ms"])
        if not peers or total <= 0:
            continue
        sub = r["dt"] / len(r["ms"])
        for peer, nbytes in peers.items():
            samples = out.setdefault(peer, [])
            for i, n in enumerate(r["ms"]):
                if n:
                    samples.append((r["t"] + i * sub, nbytes * n / total))
    return out


def path_namer(sc: Scenario, seed: int) -> Callable[[str, str, int], str]:
    """(sending host, destination address, EV) -> "via spine1" (or the leaf, within one leaf),
    with the switches' own hash: the path each EV's packets took on the healthy fabric."""

    fab = sc.fabric()
    by_addr = {
        i.ip.split("/")[0]: (h, i.plane) for h in fab.hosts() for i in fab.interfaces[h] if i.ip
    }
    cache: dict[tuple, str] = {}

    def name(src: str, addr: str, ev: int) -> str:
        key = (src, addr, ev)
        if key not in cache:
            dst, plane = by_addr.get(addr, (None, 1))
            if dst is None:
                cache[key] = addr
            else:
                nodes = predict_path(fab, src, dst, ev, ROCEV2_UDP_PORT, plane=plane, seed=seed)
                spines = [n for n in nodes if fab.nodes[n].kind == "spine"]
                cache[key] = path_name(spines[0] if spines else nodes[1])
        return cache[key]

    return name


def keep_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".jsonl", ".log"):
            shutil.copy2(f, dst / f.name)


class EndpointDriver:
    """prepare / go / wait / collect / stop for an endpoint transport on fabric `name`.

    Sockets and metrics files live in a short temporary folder (AF_UNIX paths are limited to
    108 bytes); `collect` copies the metrics files and logs into `workdir/endpoints`."""

    def __init__(self, name: str, sc: Scenario, transport: str, workdir: Path) -> None:
        self.name = name
        self.sc = sc
        self.transport = transport
        self.workdir = workdir
        self.hosts = workload_hosts(sc)
        self.eps: FabricEndpoints | None = None
        self.statuses: dict[str, dict] = {}
        self.live_bytes: LiveBytes | None = None

    def prepare(self) -> None:
        self.eps = FabricEndpoints(
            self.name, self.sc.fabric(), self.hosts, pace_mbps=self.sc.topology.link_mbps
        )
        self.eps.coordinator.start(JOB, job_request(self.sc, self.transport))

    def sockets(self) -> dict[str, str]:
        """Each host's endpoint control socket (a controller opens its own connections)."""
        return {h: str(self.eps.sock(h)) for h in self.hosts}

    def go(self) -> float:
        t0 = min(self.eps.coordinator.go(JOB).values())
        self.live_bytes = LiveBytes([self.eps.metrics_path(h) for h in self.hosts])
        return t0

    def wait(self, deadline: float) -> bool:
        """Block until every endpoint finished the job or `deadline` (virtual seconds, the
        fabric's clock) passed."""
        clock = Clock(self.eps.time_dilation)
        self.statuses = self.eps.coordinator.wait(
            JOB, timeout=max(0.0, clock.real(deadline - clock.now()))
        )
        return all(s.get("done") for s in self.statuses.values())

    def process_stats(self) -> dict[str, dict | None]:
        """Each host's endpoint-process figures (the `process` block of its stats reply:
        timer lateness, NIC time lost); None for a host that did not answer or answered
        without them, which the verdict counts as not measured, never as zero."""
        out: dict[str, dict | None] = {}
        for host, c in self.eps.coordinator.clients.items():
            try:
                reply = c.call({"op": "stats"})
            except (ControlError, OSError):
                out[host] = None
                continue
            proc = reply.get("process") if isinstance(reply, dict) else None
            out[host] = proc if isinstance(proc, dict) else None
        return out

    def collect(self, t0: float, end_s: float) -> TransportRun:
        self.eps.stop()
        records = {h: self.eps.records(h) for h in self.hosts}
        keep_files(self.eps.dir, self.workdir / "endpoints")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "job_status.json").write_text(
            json.dumps(self.statuses, indent=1, default=str)
        )
        return endpoint_run(
            self.transport,
            records,
            self.statuses,
            t0,
            end_s,
            path_namer(self.sc, self.sc.seed),
            expected_flows(self.sc),
        )

    def dead(self) -> str:
        """The endpoint processes that exited early, for an abort message ("" if none)."""
        if self.eps is None:
            return ""
        return ", ".join(
            f"{h} (exit {p.returncode})" for h, p in self.eps.procs.items() if p.poll() is not None
        )

    def stop(self) -> None:
        """Stop the processes and remove their temporary folder, first keeping its logs and
        records in `workdir/endpoints` if `collect` did not: an aborted run's endpoint logs are
        what says why (a process that stopped answering its control socket, say)."""
        if self.eps is not None:
            with contextlib.suppress(Exception):
                self.eps.stop()
            if not (self.workdir / "endpoints").is_dir():
                with contextlib.suppress(OSError):
                    keep_files(self.eps.dir, self.workdir / "endpoints")
            self.eps.cleanup()
