"""The endpoint process's control requests (endpoint.control documents them): a mixin of
:class:`endpoint.process.EndpointProcess`, which owns the state these handlers read and change.

Split from ``endpoint/process.py`` (issue 32) along its seams: the event loop and the socket I/O
stay there, the job, path and counter records are in ``endpoint.process_record``.
"""

from __future__ import annotations

import os

from endpoint.control_server import ControlConnection
from endpoint.ev import Replacement
from endpoint.ev_path import EVState
from endpoint.process_config import job_transport_config
from endpoint.process_record import EVENTS_MAX
from endpoint.workloads import Job

_JOB_KEYS = {"op", "job", "workload", "mode", "evs", "ev_base", "transport", "go", "msg_records"}


def _deny_rule(req: dict) -> tuple[int, int]:
    """(mask, value) of a deny/allow request, both 16-bit EV bit patterns, value within mask."""
    for key in ("mask", "value"):
        v = req.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 0xFFFF:
            raise ValueError(f"{key}: expected an EV bit pattern 0..65535, got {v!r}")
    if req["value"] & ~req["mask"]:
        raise ValueError(f"value: {req['value']:#x} has bits outside mask {req['mask']:#x}")
    return req["mask"], req["value"]


REPLACE_STATES = {"good": EVState.GOOD, "denied": EVState.DENIED}
"""The states a REPLACE_EV entry may give its new EV: MRC's GOOD and DENIED (an EV assumed
bad is the transport's own finding, proven by a loss and cleared by a probe)."""
REPLACE_KEYS = {"ev", "ev_new", "state", "all_copies"}
REPLACE_MAX = 256  # entries per request: an array's worth


def _replace_entries(req: dict) -> list[Replacement]:
    """A `replace` request's entries as (ev, ev_new, state, all_copies); ValueError names the
    first bad one (nothing is applied then)."""
    entries = req.get("entries")
    if not isinstance(entries, list) or not 1 <= len(entries) <= REPLACE_MAX:
        raise ValueError(f"entries: expected a list of 1..{REPLACE_MAX} entries, got {entries!r}")
    out: list[Replacement] = []
    for k, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError(f"entries[{k}]: expected an object, got {e!r}")
        unknown = sorted(set(e) - REPLACE_KEYS)
        if unknown:
            raise ValueError(f"entries[{k}].{unknown[0]}: unknown key")
        for key in ("ev", "ev_new"):
            v = e.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 0xFFFF:
                raise ValueError(f"entries[{k}].{key}: expected an EV 1..65535, got {v!r}")
        state = REPLACE_STATES.get(e.get("state"))  # type: ignore[arg-type]
        if state is None:
            raise ValueError(
                f"entries[{k}].state: expected one of {', '.join(REPLACE_STATES)}, "
                f"got {e.get('state')!r}"
            )
        copies = e.get("all_copies", False)
        if not isinstance(copies, bool):
            raise ValueError(f"entries[{k}].all_copies: expected true or false, got {copies!r}")
        out.append((e["ev"], e["ev_new"], state, copies))
    return out


def _deny_peers(req: dict) -> frozenset[str] | None:
    """A deny/allow request's `peers`: the connections it is for (MRC denies per QP); None:
    every connection."""
    peers = req.get("peers")
    if peers is None:
        return None
    if not isinstance(peers, list) or not peers or not all(isinstance(p, str) for p in peers):
        raise ValueError(f"peers: expected a non-empty list of host names, got {peers!r}")
    return frozenset(peers)


class ControlHandlers:
    """Every control request's handler, ``(req, client, now) -> reply`` (None: answered
    later)."""

    def _handlers(self) -> dict:
        """The control server's table: request op -> handler."""
        return {
            "ping": self._ping,
            "start": self._start,
            "go": self._go,
            "wait": self._wait,
            "stats": self._stats,
            "stop": self._stop,
            "deny": self._deny,
            "allow": self._allow,
            "events": self._events,
            "drain": self._drain,
            "probe": self._probe,
            "replace": self._replace,
            "evs": self._evs,
        }

    # ----- control requests (endpoint.control documents them) ------------------------------

    def _ping(self, req: dict, c: ControlConnection, now: float) -> dict:
        return {"ok": True, "host": self.host, "pid": os.getpid(), "jobs": list(self.jobs)}

    def _go(self, req: dict, c: ControlConnection, now: float) -> dict:
        return self._job_event(req, now, "go")

    def _job_event(self, req: dict, now: float, event: str) -> dict:
        """`go` or `drain` the request's job, record it, and finish the job if that ended it."""
        job = self._job(req)
        was = job.done
        if event == "go":
            job.go(now)
        else:
            job.drain(now)
        self.metrics.write({"type": "job", "t": now, "job": job.job_id, "event": event})
        if job.done and not was:
            self._job_done(job, now)
        return {"ok": True, "t": now}

    def _wait(self, req: dict, c: ControlConnection, now: float) -> dict | None:
        job = self._job(req)
        timeout = req.get("timeout", 60.0)  # real seconds: how long the caller will wait
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
            raise ValueError("timeout: expected seconds >= 0")
        if job.done:
            return {"ok": True, "done": True, "status": job.status()}
        self.control.wait(c, job.job_id, now + timeout / self.dilation)
        return None

    def _drain(self, req: dict, c: ControlConnection, now: float) -> dict:
        """The job posts nothing new; what is in flight completes (see Job.drain)."""
        return self._job_event(req, now, "drain")

    def _stop(self, req: dict, c: ControlConnection, now: float) -> dict:
        self.stopping = True
        self.stop_reason = "stop request"
        return {"ok": True}

    # ----- deny masks (MRC's EV deny; docs/transport.md, "Deny masks") ----------------------

    def _deny(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Deny every EV with ev & mask == value on every connection (or those to `peers`), now
        and later ones: all or none (a connection that would keep fewer than min_active_evs
        refuses it)."""
        rule = _deny_rule(req)
        peers = _deny_peers(req)
        conns = self._conns_to(peers, self.ep.connections.values())
        denied = self._deny_on(conns, rule, now)
        if (*rule, peers) not in self.deny_rules:
            self.deny_rules.append((*rule, peers))
        return {"ok": True, "denied": denied, "qps": len(conns)}

    def _allow(self, req: dict, c: ControlConnection, now: float) -> dict:
        rule = _deny_rule(req)
        peers = _deny_peers(req)
        if (*rule, peers) in self.deny_rules:
            self.deny_rules.remove((*rule, peers))
        conns = self._conns_to(peers, self.ep.connections.values())
        back = sum(len(conn.sender.evs.allow(*rule, now)) for conn in conns)
        return {"ok": True, "allowed": back}

    # ----- REPLACE_EV and QUERY_EV_ARRAY (docs/transport.md, "Replacing EVs") ----------------

    def _replace(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Replace EVs on every connection (or those to `peers`) that has them: all or none.
        Every connection is checked before any changes; an entry whose `ev` no connection has
        is an error, as is a connection with one fixed EV (single-path, roce)."""
        entries = _replace_entries(req)
        conns = self._conns_to(_deny_peers(req), self.ep.connections.values())
        found = [False] * len(entries)
        for conn in conns:
            hits = [False] * len(entries)
            try:
                conn.sender.evs.replace(entries, now, dry_run=True, hits=hits)
            except ValueError as exc:
                raise ValueError(f"{self.host}, connection to {conn.peer}: {exc}") from None
            if any(hits) and conn.sender.policy.single_path:
                raise ValueError(
                    f"{self.host}: the connection to {conn.peer} is {conn.sender.cfg.mode.value}: "
                    "one fixed EV, nothing to replace"
                )
            found = [a or b for a, b in zip(found, hits, strict=True)]
        if not all(found):
            k = found.index(False)
            raise ValueError(f"entries[{k}].ev: {entries[k][0]} is not an EV of any connection")
        replaced = sum(conn.sender.evs.replace(entries, now) for conn in conns)
        return {"ok": True, "replaced": replaced, "qps": len(conns)}

    def _evs(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Every connection's EV array (or those to `peers`), slot by slot: MRC's
        QUERY_EV_ARRAY."""
        conns = self._conns_to(_deny_peers(req), self.ep.connections.values())
        return {
            "ok": True,
            "host": self.host,
            "t": now,
            "qps": [
                {"qp": conn.local_qp, "peer": conn.peer, "evs": conn.sender.evs.array()}
                for conn in conns
            ],
        }

    @staticmethod
    def _conns_to(peers: frozenset[str] | None, conns) -> list:
        return [c for c in conns if peers is None or c.peer in peers]

    def _events(self, req: dict, c: ControlConnection, now: float) -> dict:
        """EV state changes of every connection since the last `events` request (MRC's EV event
        queue, read by a controller): virtual time, QP, peer, EV, old -> new, reason. At most
        EVENTS_MAX per read; the oldest beyond that are dropped and counted."""
        out = []
        for qp, conn in self.ep.connections.items():
            trs = conn.stats.ev_transitions
            seen = self._events_seen.get(qp, 0)
            for tr in trs[seen:]:
                out.append(
                    {"t": tr.at, "qp": qp, "peer": conn.peer, "ev": tr.ev, "old": tr.old,
                     "new": tr.new, "reason": tr.reason}
                )  # fmt: skip
            self._events_seen[qp] = len(trs)
        out.sort(key=lambda e: e["t"])
        dropped = max(0, len(out) - EVENTS_MAX)
        return {
            "ok": True,
            "host": self.host,
            "now": now,
            "events": out[dropped:],
            "dropped": dropped,
        }

    # ----- controller EV probes (MRC's EV probe; endpoint.ev_probe) -------------------------

    def _probe(self, req: dict, c: ControlConnection, now: float) -> dict | None:
        """Probe `evs` (default: all) of the connection to `peer`; answered when every probe
        is or `timeout_us` (virtual) passed, with each EV's RTT in virtual µs or None."""
        peer = req.get("peer")
        conns = [x for x in self.ep.connections.values() if x.peer == peer]
        if "job" in req:
            job = self._job(req)
            conns = [x for x in conns if self.job_of_qp.get(x.local_qp) is job]
        if not conns:
            raise ValueError(f"peer: {self.host} has no connection to {peer!r} (start a job first)")
        conn = conns[-1]  # the newest: the one a running job is most likely using
        evs = req.get("evs")
        if evs is None:
            evs = [p.ev for p in conn.sender.evs.unique_paths()]
        if not isinstance(evs, list) or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in evs
        ):
            raise ValueError(f"evs: expected a list of EV numbers, got {evs!r}")
        timeout = req.get("timeout_us", 1000.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout:
            raise ValueError(f"timeout_us: expected virtual microseconds > 0, got {timeout!r}")
        if timeout > 10e6:
            raise ValueError(f"timeout_us: at most 10 s of virtual time, got {timeout!r}")
        run = conn.probe(evs, now, timeout * 1e-6)
        paths = conn.sender.evs.by_ev
        base = {
            "ok": True,
            "host": self.host,
            "peer": peer,
            "qp": conn.local_qp,
            "t": now,
            "timeout_us": timeout,
            # each EV's state when asked: a DENIED or FAILED EV may answer (the path healed)
            "states": {str(ev): paths[ev].state.value for ev in dict.fromkeys(evs)},
        }
        self._probes.append((run, c, base))
        return None

    def _answer_probes(self) -> None:
        """Answer the `probe` requests whose probes are all answered or timed out (the
        transport's timer expires them: Connection.next_timer includes their deadlines)."""
        keep = []
        for run, client, base in self._probes:
            if run.done:
                self.control.reply(client, {**base, "probes": run.result()})
            else:
                keep.append((run, client, base))
        self._probes = keep

    def _deny_on(self, conns: list, rule: tuple[int, int], now: float) -> int:
        """`rule` on every connection of `conns` that has not got it, all or none; returns how
        many EVs it denied. A refusal undoes it where it was just applied, and only there."""
        applied = []
        try:
            for conn in conns:
                evs = conn.sender.evs
                if rule in evs.deny_rules:
                    continue
                applied.append((conn, evs.deny(*rule, now)))
        except ValueError as exc:
            for conn, _ in applied:
                conn.sender.evs.allow(*rule, now)
            raise ValueError(f"{self.host}: {exc}") from None
        for conn, hit in applied:  # all applied: what was in flight on them goes again
            conn.sender.recovery.on_denied(hit, now)
        return sum(len(hit) for _, hit in applied)

    def _job(self, req: dict) -> Job:
        job = self.jobs.get(req.get("job"))  # type: ignore[arg-type]
        if job is None:
            raise ValueError(f"job: no job {req.get('job')!r} on {self.host} (start it first)")
        return job

    def _start(self, req: dict, c: ControlConnection, now: float) -> dict:
        for key in req:
            if key not in _JOB_KEYS:
                raise ValueError(f"{key}: unknown key in a start request")
        job_id = req.get("job")
        if job_id in self.jobs:
            raise ValueError(f"job: {job_id} exists on {self.host}")
        if "workload" not in req:
            raise ValueError("workload: required")
        tcfg = job_transport_config(self.cfg, req)
        msg_records = req.get("msg_records", True)
        if not isinstance(msg_records, bool):
            raise ValueError(f"msg_records: expected true or false, got {msg_records!r}")
        job = Job(
            job_id, req["workload"], self.host, self.hosts, self.ep, tcfg, self._emit, now,
            msg_records=msg_records,
        )  # fmt: skip
        try:  # the deny rules in force hold for the job's connections too, or it does not start
            for mask, value, peers in self.deny_rules:
                conns = [conn for _, conn in job.connections()]
                self._deny_on(self._conns_to(peers, conns), (mask, value), now)
        except ValueError:
            for _, conn in job.connections():
                self.ep.connections.pop(conn.local_qp, None)
            raise
        self.jobs[job_id] = job
        for qp in job.peer_of_qp:
            self.job_of_qp[qp] = job
        self.metrics.write(
            {
                "type": "job",
                "t": now,
                "job": job_id,
                "event": "prepared",
                "workload": req["workload"],
                "mode": tcfg.mode.value,
                "evs": tcfg.num_evs,
                "ev_base": tcfg.ev_base,
                "ev_seed": tcfg.ev_seed,
                # Each connection's first EV (its UDP source port in single-path mode); a
                # peer's further QPs (transport.qps) as peer#lane.
                "ev_bases": {name: conn.cfg.ev_base for name, conn in job.connections()},
                "planes": tcfg.planes,
                "qps": tcfg.qps,
                "peers": list(job.peer_qps),
            }
        )
        if req.get("go"):
            job.go(now)
            self.metrics.write({"type": "job", "t": now, "job": job_id, "event": "go"})
            if job.done:
                self._job_done(job, now)
        self.metrics.flush()
        return {"ok": True, "job": job_id, "peers": list(job.peer_qps), "t": now}

    def _emit(self, record: dict) -> None:
        self.metrics.write(record)

    def _stats(self, req: dict, c: ControlConnection, now: float) -> dict:
        jobs = [self._job(req)] if "job" in req else list(self.jobs.values())
        out = {}
        for job in jobs:
            conns = {}
            for name, conn in job.connections():
                snap = conn.snapshot()
                snap["ev_states"] = dict(snap["ev_states"])
                conns[name] = snap
            out[str(job.job_id)] = {"status": job.status(), "connections": conns}
        return {"ok": True, "host": self.host, "process": self.process_stats(now), "jobs": out}
