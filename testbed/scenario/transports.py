"""The scenario file's transports: the names it may run, and one configuration of an endpoint
transport (`TransportSpec`, with NSCC's parameters `CcSpec`) run under its own label.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from contracts.schema import StrictModel

TRANSPORTS: tuple[str, ...] = ("mrc", "single-path", "spray-no-failover", "roce", "tcp", "mptcp")
KERNEL_TRANSPORTS = frozenset({"tcp", "mptcp"})
"""Transports on the kernel's clocks: they run in real time only (time dilation 1)."""
ENDPOINT_TRANSPORT_NAMES: tuple[str, ...] = ("mrc", "single-path", "spray-no-failover", "roce")


class CcSpec(StrictModel):
    """NSCC's parameters (endpoint.nscc; UET 1.0 Table 3-82 defaults), named as MRC's controller
    API names them; times in virtual µs. Omitted ones keep the defaults (docs/transport.md)."""

    base_rtt_us: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False)
    target_delay_us: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False)
    target_rtts: float | None = Field(default=None, gt=0, le=100, allow_inf_nan=False)
    max_window: float | None = Field(default=None, gt=0, le=1000, allow_inf_nan=False)
    gamma: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    max_md_jump: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    fi: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    fi_scale: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    eta: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    alpha: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    qa_gate: int | None = Field(default=None, ge=0, le=31)
    qa_threshold: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    disable_qa: bool | None = None
    adjust_bytes_threshold: int | None = Field(default=None, ge=1, le=1_000_000)
    adjust_period_threshold: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)

    def transport_config(self) -> dict[str, Any]:
        """These as endpoint.config.TransportConfig fields (seconds where it counts seconds)."""
        out: dict[str, Any] = {}
        for key, value in self.model_dump(exclude_none=True).items():
            if key == "base_rtt_us":
                out["base_rtt"] = value * 1e-6
            elif key == "target_delay_us":
                out["target_qdelay"] = value * 1e-6
            else:
                out[key] = value
        return out


MRC_QP_KEYS = ("ack_timeout", "retry_linear_cnt", "retry_exp_cnt")
"""TransportSpec's keys for MRC's QP attributes (endpoint.config.TransportConfig)."""


class TransportSpec(StrictModel):
    """One configuration of an endpoint transport, run and reported under its own label:
    `{name: mrc, label: mrc-16ev, evs: 16}`. A bare name means its defaults."""

    name: Literal[ENDPOINT_TRANSPORT_NAMES]  # type: ignore[valid-type]
    label: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=32)
    evs: int | None = Field(default=None, ge=1, le=256)
    ev_profile: Literal["auto", "explicit", "generated"] | None = None
    # ev_profile explicit: the EVs (UDP source ports) themselves, as MRC's EXPLICIT profile.
    explicit_evs: list[Annotated[int, Field(ge=1, le=65535)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    # How packets spread over the EVs (endpoint.config.LB_POLICIES): wrr, oblivious, reps.
    lb: Literal["wrr", "oblivious", "reps"] | None = None
    # Does an ECN echo lower its EV's weight, not only a trim? Unset: yes, unless the EVs are
    # generated (endpoint.config.TransportConfig.ev_weight_on_ecn says why).
    ev_weight_on_ecn: bool | None = None
    # roce: the RC local ACK timeout exponent (4.096 µs x 2^t) and retry count.
    rc_timeout: int | None = Field(default=None, ge=0, le=31)
    rc_retry_cnt: int | None = Field(default=None, ge=0, le=7)
    # mrc, spray-no-failover: MRC's QP attributes (mrc_qp_attr): the local ACK timeout
    # exponent (1.024 µs x 2^t of virtual time) and the linear / exponential retry limits
    # (exp 25: for ever). Unset: the RTO from measured round trips, retries for ever.
    ack_timeout: int | None = Field(default=None, ge=0, le=24)
    retry_linear_cnt: int | None = Field(default=None, ge=0, le=7)
    retry_exp_cnt: int | None = Field(default=None, ge=0, le=25)
    # QPs per peer (endpoint.workloads.Job): each message striped over this many QPs, each with
    # its own source port, as RDMA collectives spread a connection (NCCL_IB_QPS_PER_CONNECTION).
    qps: int | None = Field(default=None, ge=1, le=16)
    # mrc: copies (on distinct EVs) of a last-resort resend, an RTO's or a tail-loss probe's
    # (endpoint.sender._send_copies; 3 by default). 1 sends none, as a simulator's plain RTO:
    # the REPS grid's 8:1 incast measured what the copies cost where the receiver's side is
    # the bottleneck (docs/fidelity.md, Published results).
    tail_copies: int | None = Field(default=None, ge=1, le=16)
    cc: CcSpec | None = None

    @model_validator(mode="after")
    def _explicit_needs_its_list(self) -> TransportSpec:
        if (self.ev_profile == "explicit") != (self.explicit_evs is not None):
            raise ValueError("explicit_evs: given exactly when ev_profile is explicit")
        if self.explicit_evs is not None and len(set(self.explicit_evs)) != len(self.explicit_evs):
            raise ValueError("explicit_evs: each EV once")
        for key in ("rc_timeout", "rc_retry_cnt"):
            if getattr(self, key) is not None and self.name != "roce":
                raise ValueError(f"{key}: only for name roce (the RC timeout of RoCE NICs)")
        for key in MRC_QP_KEYS:
            if getattr(self, key) is not None and self.name not in ("mrc", "spray-no-failover"):
                raise ValueError(
                    f"{key}: only for name mrc or spray-no-failover (MRC's QP attributes; "
                    "roce has rc_timeout and rc_retry_cnt)"
                )
        if self.tail_copies is not None and self.name != "mrc":
            raise ValueError("tail_copies: only for name mrc (the others send no copies)")
        return self

    @property
    def key(self) -> str:
        """What runs, results and reports call it: the label, else the name."""
        return self.label or self.name

    def transport_config(self) -> dict[str, Any]:
        """TransportConfig overrides of the endpoints' jobs."""
        out: dict[str, Any] = {}
        if self.ev_profile is not None:
            out["ev_profile"] = self.ev_profile
        if self.explicit_evs is not None:
            out["explicit_evs"] = list(self.explicit_evs)
        if self.lb is not None:
            out["lb"] = self.lb
        if self.ev_weight_on_ecn is not None:
            out["ev_weight_on_ecn"] = self.ev_weight_on_ecn
        for key in ("rc_timeout", "rc_retry_cnt", "qps", "tail_copies", *MRC_QP_KEYS):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.cc is not None:
            out.update(self.cc.transport_config())
        return out


TransportEntry = Annotated[
    Annotated[Literal[TRANSPORTS], Tag("bare")]  # type: ignore[valid-type]
    | Annotated[TransportSpec, Tag("spec")],
    Discriminator(lambda v: "bare" if isinstance(v, str) else "spec"),
]
"""A transport by name, or one configuration of it (a mapping): never tried as both, so a
mistake is reported once, against what was written."""
