"""The endpoint process's config (the ``--config`` JSON) and the TransportConfig of each job.

Everything here is validated before a socket is opened, and every error names its key path, so
a bad config or start request is refused with a message instead of a half-started process.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, fields

from contracts.clock import check_dilation
from contracts.framing import DEFAULT_MTU, check_mtu, mrc_payload
from contracts.ports import ROCEV2_UDP_PORT
from endpoint import udp_io
from endpoint.config import Mode, TransportConfig
from endpoint.metrics import BIN_S

_TRANSPORT_FIELDS = {f.name for f in fields(TransportConfig)}

# TransportConfig's defaults are tuned on endpoint.simnet, where nothing but the modelled
# network delays a packet. On the emulated fabric every switch and endpoint is a Python process
# sharing two cores, and a process can wait for the CPU for tens of milliseconds; measured there
# (docs/transport.md, "Endpoint process"), these replace four defaults in every job unless the
# config or the start request sets them (and min_cwnd, see job_transport_config):
EMULATION_TRANSPORT = {
    # Sprayed packets overtake each other by a few ms when a spine process is descheduled; a
    # 200 us RACK allowance retired ~1 healthy EV per 50 packets and resent their packets.
    "reorder_min": 2e-3,
    # RTTs reach 40-80 ms during an 8-to-1 incast (the processes wait for the CPU), so a 15 ms
    # RTO fired spuriously and retired every EV of the expired packets.
    "rto_min": 50e-3,
    "rto_initial": 60e-3,
    # A tail-loss probe 2 ms after the tail at least: what a descheduled switch may add.
    "tlp_pto_min": 2e-3,
}
# Which of those are real-time hazards (seconds a process may wait for a CPU): at time dilation
# N they shrink to 1/N in virtual time (contracts.clock.hazard); min_cwnd is bytes.
HAZARD_KEYS = ("reorder_min", "rto_min", "rto_initial", "tlp_pto_min")
# ... and min_cwnd is one full packet (max_payload): below one packet the sender paces at
# srtt x size / cwnd; with an incast-inflated srtt a flow whose window was cut to 128 B by
# trims sent one packet per ~250 ms and finished last (measured with 1400 B packets).


class ConfigError(ValueError):
    """A bad endpoint config; the message names the key path."""


@dataclass
class EndpointConfig:
    """What every endpoint of a fabric shares (the ``--config`` JSON)."""

    hosts: dict[str, list[str]]  # host -> its NIC addresses, plane 1 first (config order = index)
    # IP MTU of the NICs (the fabric's topology.mtu): a job's packets fill it (max_payload
    # defaults to contracts.framing.mrc_payload(mtu)) and never exceed it (the kernel would
    # fragment them); the pacer's bucket holds full frames of it.
    mtu: int = DEFAULT_MTU
    port: int = ROCEV2_UDP_PORT
    io: str = "udp"
    pace_mbps: float = 0.0  # 0 = no pacing
    pace_queue: int = 2  # packets queued in the pacer before the transport is no longer polled
    pace_burst: int = 4  # frames of token-bucket depth, at least
    # ... and at least this much time of rate: a process that wakes this late (it waited for a
    # CPU) still sends at the full rate. 500 us (2 x coalescing) lost ~30 % of a paced bulk's
    # rate on the fabric (60-68 vs 82-91 Mbps at 100 Mbps; docs/transport.md, "Pacing"); the
    # burst lands in the host NIC's tbf queue, which sends it at line rate.
    pace_catch_up_us: float = 2000.0
    rx_batch: int = 64
    rx_coalesce_us: float = 250.0  # interrupt moderation while busy (0 = wake per datagram)
    bin_s: float = BIN_S
    stats_interval: float = 0.1
    flush_interval: float = 0.2
    # Real seconds per virtual second (contracts.clock). Every time above that is a budget of
    # the machine -- coalescing, catch-up, stats and flush intervals -- is in real seconds and
    # is divided by it; bin_s and everything of the transport are virtual.
    time_dilation: float = 1.0
    transport: dict = field(default_factory=dict)  # TransportConfig defaults for every job

    @classmethod
    def from_obj(cls, obj: object) -> EndpointConfig:
        if not isinstance(obj, dict):
            raise ConfigError("config: expected a JSON object")
        known = {f.name for f in fields(cls)}
        for key in obj:
            if key not in known:
                raise ConfigError(f"config.{key}: unknown key")
        hosts = obj.get("hosts")
        if not isinstance(hosts, dict) or not hosts:
            raise ConfigError("config.hosts: expected {host: [address per plane], ...}")
        planes = None
        for h, addrs in hosts.items():
            if isinstance(addrs, str):
                addrs = [addrs]
            if not isinstance(addrs, list) or not addrs:
                raise ConfigError(f"config.hosts.{h}: expected a list of addresses")
            for i, a in enumerate(addrs):
                try:
                    socket.inet_aton(a)
                except (OSError, TypeError):
                    raise ConfigError(
                        f"config.hosts.{h}[{i}]: not an IPv4 address: {a!r}"
                    ) from None
            if planes is not None and len(addrs) != planes:
                raise ConfigError(f"config.hosts.{h}: every host needs one address per plane")
            planes = len(addrs)
            hosts[h] = list(addrs)
        cfg = cls(**{k: v for k, v in obj.items()})
        problem = check_mtu(cfg.mtu)
        if problem:
            raise ConfigError(f"config.{problem}")
        if not isinstance(cfg.port, int) or not 0 < cfg.port < 65536:
            raise ConfigError("config.port: expected a UDP port")
        if cfg.io not in udp_io.IO_KINDS:
            raise ConfigError(f"config.io: one of {', '.join(udp_io.IO_KINDS)}")
        for key in (
            "pace_mbps",
            "bin_s",
            "stats_interval",
            "flush_interval",
            "rx_coalesce_us",
            "pace_catch_up_us",
        ):
            v = getattr(cfg, key)
            if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"config.{key}: expected a number >= 0")
        if cfg.bin_s <= 0:
            raise ConfigError("config.bin_s: must be > 0")
        for key in ("pace_queue", "pace_burst", "rx_batch"):
            v = getattr(cfg, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"config.{key}: expected an integer >= 1")
        try:
            cfg.time_dilation = check_dilation(cfg.time_dilation, "config.time_dilation")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check_transport(cfg.transport, "config.transport")
        return cfg

    @property
    def planes(self) -> int:
        return len(next(iter(self.hosts.values())))


def _check_transport(overrides: object, path: str) -> None:
    if not isinstance(overrides, dict):
        raise ConfigError(f"{path}: expected an object of TransportConfig fields")
    for key in overrides:
        if key not in _TRANSPORT_FIELDS:
            raise ConfigError(f"{path}.{key}: not a TransportConfig field")


def job_transport_config(cfg: EndpointConfig, req: dict) -> TransportConfig:
    """The TransportConfig of a job: process defaults, then the request's mode/evs/overrides."""
    n = cfg.time_dilation
    emulation = {k: v / n if k in HAZARD_KEYS else v for k, v in EMULATION_TRANSPORT.items()}
    params: dict = {
        "planes": cfg.planes,
        "max_payload": mrc_payload(cfg.mtu),
        **emulation,
        **cfg.transport,
    }
    over = req.get("transport", {})
    _check_transport(over, "transport")
    params.update(over)
    payload = params["max_payload"]
    if isinstance(payload, int) and payload > mrc_payload(cfg.mtu):
        where = "transport" if "max_payload" in over else "config.transport"
        raise ConfigError(
            f"{where}.max_payload: {payload} B does not fit the MTU {cfg.mtu} "
            f"(at most {mrc_payload(cfg.mtu)})"
        )
    params.setdefault("min_cwnd", payload)  # one full packet (EMULATION_TRANSPORT)
    if cfg.pace_mbps and cfg.pace_mbps > 0:
        # NSCC sizes its window from the NIC's rate: the rate the process paces at.
        params.setdefault("line_rate_bps", cfg.pace_mbps * 1e6)
    if "mode" in req:
        params["mode"] = req["mode"]
    if "evs" in req:
        params["num_evs"] = req["evs"]
    if "ev_base" in req:
        if params.get("ev_seed") is not None:
            raise ConfigError(
                "ev_base: pins every connection's EVs, but transport.ev_seed draws them per "
                "connection; give one of the two"
            )
        params["ev_base"] = req["ev_base"]
    try:
        mode = Mode(params.get("mode", Mode.MRC))
    except ValueError:
        raise ConfigError(
            f"mode: one of {', '.join(m.value for m in Mode)}, got {params.get('mode')!r}"
        ) from None
    params["mode"] = mode
    if params.get("planes", 1) > params.get("num_evs", 64):
        params["planes"] = params.get("num_evs", 64)  # fewer EVs than planes: use the first
    try:
        return TransportConfig(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"transport: {exc}") from None
