"""Sans-IO MRC-style transport: an endpoint holding many QPs, driven by bytes and a clock.

No sockets, no threads, no wall clock inside. The driver (the endpoint process over UDP
sockets, or ``endpoint.simnet`` in tests) does four things in a loop::

    ep.on_datagram(udp_payload, tos, now)     # every datagram received on port 4791
    for tx in ep.poll_transmit(now): send tx  # UDP sport = tx.ev, IP tos = tx.tos, NIC = tx.plane
    wait until ep.next_timer() (or a datagram) and then ep.on_timer(now)
    ep.take_deliveries() / ep.take_completions()

Nothing a remote peer sends can raise out of ``on_datagram``: malformed or forged packets are
dropped and counted in ``Endpoint.drops`` (unknown QP, malformed) or the QP's stats.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

from endpoint import codec
from endpoint.codec import AckPacket, DataPacket, NackPacket, ProbeAckPacket, ProbePacket
from endpoint.config import TransportConfig
from endpoint.ev_probe import MAX_EVS, EvProber, ProbeRun, is_ctl_seq
from endpoint.receiver import Delivery, Receiver
from endpoint.sender import Sender
from endpoint.stats import ConnectionStats, MessageCompletion


@dataclass(slots=True)
class Transmit:
    """One datagram to send: to ``peer`` via NIC ``plane``, UDP source port ``ev``."""

    peer: Hashable
    plane: int
    ev: int
    payload: bytes
    tos: int
    qp: int  # local QP that produced it (for accounting)


class Connection:
    """One reliable connection (an RC-like QP pair seen from this side): both halves."""

    def __init__(
        self,
        cfg: TransportConfig,
        local_qp: int,
        remote_qp: int,
        peer: Hashable,
        send_psn: int = 0,
        recv_psn: int = 0,
        peer_ev_base: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.local_qp = local_qp
        self.remote_qp = remote_qp
        self.peer = peer
        self.stats = ConnectionStats()
        self.stats.rtt_samples = type(self.stats.rtt_samples)(maxlen=cfg.rtt_samples_kept)
        self.sender = Sender(cfg, local_qp, remote_qp, send_psn, self.stats)
        self.receiver = Receiver(
            cfg, local_qp, remote_qp, recv_psn, self.stats, peer_ev_base=peer_ev_base
        )
        self._ctrl: list[tuple[int, bytes, int]] = []  # (ev, payload, tos) replies to send
        self.prober = EvProber(remote_qp, cfg.tos_control)  # a controller's probes (`probe`)

    def send(self, data: bytes, now: float) -> int:
        """Queue one message; returns its message id."""
        return self.sender.send_message(data, now)

    def on_packet(self, raw: bytes, pkt: codec.Packet, tos: int, now: float) -> None:
        if isinstance(pkt, DataPacket):
            self.receiver.on_data(raw, pkt, tos, now, self._ctrl)
        elif isinstance(pkt, AckPacket):
            self.sender.on_ack(pkt, now)
        elif isinstance(pkt, NackPacket):
            self.sender.on_nack(pkt, now)
        elif isinstance(pkt, ProbePacket):
            self.receiver.on_probe(pkt, self._ctrl)
        elif isinstance(pkt, ProbeAckPacket):
            if is_ctl_seq(pkt.probe_seq):
                self.prober.on_ack(pkt, now)  # a controller's: not the connection's business
            else:
                self.sender.on_probe_ack(pkt, now)

    def probe(self, evs: list[int], now: float, timeout: float) -> ProbeRun:
        """A controller's probes on `evs` of this connection, whatever their state (a DENIED
        EV may be probed to see whether its path healed); ValueError names an EV that is not
        the connection's. The run is done when all are answered or `timeout` passed."""
        if not evs or len(evs) > MAX_EVS:
            raise ValueError(f"evs: expected 1..{MAX_EVS} EVs, got {len(evs)}")
        by_ev = self.sender.evs.by_ev
        for ev in evs:
            if ev not in by_ev:
                raise ValueError(f"evs: {ev!r} is not an EV of the connection to {self.peer}")
        if timeout <= 0:
            raise ValueError(f"timeout: expected > 0, got {timeout!r}")
        return self.prober.start(evs, now, timeout)

    def poll_transmit(self, now: float, out: list[Transmit], limit: int | None = None) -> int:
        """Append this QP's packets to `out`; returns how many were data (at most `limit`)."""
        planes = self.receiver.reply_planes
        for ev, payload, tos in self._ctrl:
            # Replies leave on the EV they answer; its plane follows from the EV index.
            out.append(Transmit(self.peer, planes.get(ev, 0), ev, payload, tos, self.local_qp))
        self._ctrl.clear()
        if self.prober.has_queued:
            paths = self.sender.evs.by_ev
            for ev, payload, tos in self.prober.take(now):
                out.append(Transmit(self.peer, paths[ev].plane, ev, payload, tos, self.local_qp))
        tuples: list = []
        sent = self.sender.poll_transmit(now, tuples, limit)
        for ev, plane, payload, tos in tuples:
            out.append(Transmit(self.peer, plane, ev, payload, tos, self.local_qp))
        return sent

    def next_timer(self) -> float | None:
        t = self.sender.next_timer()
        ta = self.receiver.ack_deadline
        if ta is not None and (t is None or ta < t):
            t = ta
        if self.prober.runs:
            tp = self.prober.next_deadline()
            if tp is not None and (t is None or tp < t):
                t = tp
        return t

    def on_timer(self, now: float) -> None:
        r = self.receiver
        ack_due = r.ack_deadline is not None and r.ack_deadline <= now
        if ack_due:
            r.flush_ack(self._ctrl, now)
        if self.prober.runs and (tp := self.prober.next_deadline()) is not None and tp <= now:
            self.prober.expire(now)
            ts = self.sender.next_timer()
            if not ack_due and (ts is None or ts > now):
                return  # woken for the controller's probes only: the sender's timers are not due
        self.sender.on_timer(now)

    def snapshot(self) -> dict:
        s = self.sender
        snap = self.stats.snapshot()
        snap.update(
            qp=self.local_qp,
            cwnd=int(s.cc.cwnd),
            srtt=s.rtt.srtt,
            min_rtt=s.rtt.min_rtt,
            inflight_bytes=s.inflight_bytes,
            ev_states=Counter(s.evs.states().values()),
        )
        return snap


class Endpoint:
    """All QPs of one host. Demultiplexes by BTH destination QP."""

    def __init__(self, cfg: TransportConfig | None = None) -> None:
        self.cfg = cfg or TransportConfig()
        self.connections: dict[int, Connection] = {}
        self.drops: Counter = Counter()  # packets no QP could own: malformed, unknown QP
        self.received = 0
        self._turn = 0  # which QP goes first in a data-limited poll_transmit

    def connect(
        self,
        local_qp: int,
        remote_qp: int,
        peer: Hashable,
        send_psn: int = 0,
        recv_psn: int = 0,
        cfg: TransportConfig | None = None,
        peer_ev_base: int | None = None,
    ) -> Connection:
        """Create a QP. Both ends must agree: my send_psn is the peer's recv_psn, and
        `peer_ev_base` (None: the same as mine) is the peer's `cfg.ev_base` for this QP pair."""
        if not 0 <= local_qp < 1 << 24 or not 0 <= remote_qp < 1 << 24:
            raise ValueError("QP numbers are 24-bit")
        if local_qp in self.connections:
            raise ValueError(f"QP {local_qp} exists")
        conn = Connection(
            cfg or self.cfg, local_qp, remote_qp, peer, send_psn, recv_psn, peer_ev_base
        )
        self.connections[local_qp] = conn
        return conn

    def send(self, qp: int, data: bytes, now: float) -> int:
        return self.connections[qp].send(data, now)

    def on_datagram(self, data: bytes, tos: int, now: float) -> None:
        self.received += 1
        try:
            pkt = codec.decode(data)
        except codec.MalformedPacket:
            self.drops["malformed"] += 1
            return
        conn = self.connections.get(pkt.dqpn)
        if conn is None:
            self.drops["unknown_qp"] += 1
            return
        conn.on_packet(data, pkt, tos, now)

    def poll_transmit(self, now: float, data_limit: int | None = None) -> list[Transmit]:
        """Everything that may leave now; with `data_limit`, at most that many data packets
        (control packets are not counted), the QPs taking turns at going first."""
        out: list[Transmit] = []
        if data_limit is None:
            for conn in self.connections.values():
                conn.poll_transmit(now, out)
            return out
        conns = list(self.connections.values())
        if conns:
            k = self._turn % len(conns)
            self._turn += 1
            left = data_limit
            for conn in conns[k:] + conns[:k]:
                left -= conn.poll_transmit(now, out, left)
        return out

    def next_timer(self) -> float | None:
        times = [t for c in self.connections.values() if (t := c.next_timer()) is not None]
        return min(times) if times else None

    def on_timer(self, now: float) -> None:
        for conn in self.connections.values():
            t = conn.next_timer()
            if t is not None and t <= now:
                conn.on_timer(now)

    def take_deliveries(self) -> list[Delivery]:
        out: list[Delivery] = []
        for conn in self.connections.values():
            if conn.receiver.deliveries:
                out.extend(conn.receiver.deliveries)
                conn.receiver.deliveries.clear()
        return out

    def take_completions(self) -> list[MessageCompletion]:
        out: list[MessageCompletion] = []
        for conn in self.connections.values():
            if conn.sender.completions:
                out.extend(conn.sender.completions)
                conn.sender.completions.clear()
        return out

    @property
    def idle(self) -> bool:
        return all(c.sender.idle for c in self.connections.values())
