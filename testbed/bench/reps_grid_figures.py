"""The figures of `testbed bench reps-grid`, as the REPS paper reports them: the FCT
distribution, NACKs, drops by reason, the out-of-order ratio and distance, and per failure the
time until traffic avoided it.

They are read from a run's folder (summary.json and raw/<transport>/), after the run, so that
a grid cell can be re-read without running it again.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.harness.endpoint_driver import reply_pairs
from testbed.harness.ev_controller import round_trip_links
from testbed.harness.records import Failure, endpoint_records, failure_of
from testbed.scenario.schema import Scenario


def nearest_rank(values: list[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) by nearest rank: always one of the values, so a P99
    over 32 flows is the slowest flow, as a P99 of so few should be."""
    if not values:
        raise ValueError("nearest_rank: no values")
    k = max(1, math.ceil(q / 100.0 * len(values)))
    return sorted(values)[k - 1]


def fct_figures(flows: list[dict]) -> dict[str, Any]:
    """Median, P99 and max flow completion time in µs. An unfinished flow counts as slower
    than every finished one: a percentile that falls on one is None (unfinished), never a
    number that looks better than the truth."""
    done = sorted(f["fct_ms"] * 1000.0 for f in flows if f.get("fct_ms") is not None)
    unfinished = len(flows) - len(done)
    ranked = done + [math.inf] * unfinished

    def pick(q: float) -> float | None:
        if not ranked:
            return None
        v = nearest_rank(ranked, q)
        return None if math.isinf(v) else round(v, 1)

    return {
        "flows": len(flows),
        "unfinished": unfinished,
        "fct_us": [round(x, 1) for x in done],
        "median_us": pick(50),
        "p99_us": pick(99),
        "max_us": pick(100),
        "tail": tail_figures(flows),
    }


def tail_figures(flows: list[dict]) -> dict[str, Any] | None:
    """What the slowest flow waited for: with one seed and 32 flows a P99 is that one flow, so
    a gap to the simulator or between balancers is explained (or not) by it. Its sender's
    resends by reason (`tlp`: its last packets met a failure with nothing behind them to
    reveal the loss; `rto`; `loss`: found by later packets' ACKs; `nack`, `trim`...), and how
    long after the second slowest it finished. An unfinished flow is the slowest."""
    if not flows:
        return None

    def key(f: dict) -> float:
        return math.inf if f.get("fct_ms") is None else f["fct_ms"]

    ranked = sorted(flows, key=key)
    last = ranked[-1]
    fct = None if last.get("fct_ms") is None else round(last["fct_ms"] * 1000.0, 1)
    second = ranked[-2].get("fct_ms") if len(ranked) > 1 else None
    return {
        "flow": f"{last.get('src')}->{last.get('dst')}",
        "fct_us": fct,
        "after_second_us": (
            None if fct is None or second is None else round(fct - second * 1000.0, 1)
        ),
        "retransmits": dict(sorted((last.get("retransmits") or {}).items())),
    }


def endpoint_figures(raw: Path) -> dict[str, Any]:
    """NACKs sent, trimmed packets received and the out-of-order figures, summed over every
    connection's last counters record (the receivers' side)."""
    records, _ = endpoint_records(raw)
    totals = {"nack_tx": 0, "trimmed_rx": 0, "data_rx": 0, "ooo_rx": 0}
    ooo_max = 0
    for recs in records.values():
        last: dict[tuple, dict] = {}
        for r in recs:
            if r.get("type") == "counters":
                last[(r.get("job"), r.get("peer"), r.get("qp"))] = r["counters"]
        for c in last.values():
            for k in totals:
                totals[k] += int(c.get(k, 0))
            ooo_max = max(ooo_max, int(c.get("ooo_max_psns", 0)))
    data = totals["data_rx"]
    return {
        "nacks": totals["nack_tx"],
        "trimmed_rx": totals["trimmed_rx"],
        "data_rx": data,
        "ooo_ratio": round(totals["ooo_rx"] / data, 4) if data else None,
        "ooo_max_psns": ooo_max,
    }


def switch_drops(raw: Path) -> dict[str, int]:
    """Every switch's and port's drops by reason, summed over the fabric."""
    try:
        switches = json.loads((raw / "switch_counters.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, int] = {}

    def add(drops: dict | None) -> None:
        for reason, n in (drops or {}).items():
            if isinstance(n, int):
                out[reason] = out.get(reason, 0) + n

    for sw in switches.values():
        if not isinstance(sw, dict):
            continue
        add(sw.get("drops"))
        for port in (sw.get("ports") or {}).values():
            add(port.get("drops"))
    return dict(sorted(out.items()))


def ev_failures(raw: Path) -> list[Failure]:
    """Every EV that went FAILED, timed from the workload's start."""
    records, t0 = endpoint_records(raw)
    out = []
    for host, recs in records.items():
        for r in recs:
            if r.get("type") == "ev" and r.get("new") == "failed" and t0 is not None:
                out.append(failure_of(host, r, t0))
    return sorted(out, key=lambda f: f.t)


def avoid_figures(
    failures: list[Failure],
    sc: Scenario,
    transport: str,
    links: list[tuple[str, str]],
    window: tuple[float, float | None] | None,
) -> dict[str, Any]:
    """When traffic had left the damaged links, counted from the failure's start.

    Over the EVs retired since the failure began whose round trip crosses a damaged link and
    that last carried data before it ended: `avoided_us` is the last time a connection sent
    data on one of them (after it nothing more went in; 0 when none was used after the
    failure began), `avoided_p90_us` the time by which 90 % of them had, and
    `retired_us` the last retirement, an upper bound on it -- a tail-loss probe or an RTO can
    reveal, all at once, losses on EVs left long before. `avoided_from` says which of the two
    `avoided_us` is: records written before endpoints kept each EV's last send carry only the
    retirement. None when no such EV was retired (a slowed link retires none; a one-path
    transport has no EV to retire)."""
    none = {
        "avoided_us": None,
        "avoided_p90_us": None,
        "avoided_from": None,
        "retired_us": None,
        "evs_retired": 0,
    }
    if window is None or not links:
        return none
    start, end = window
    end = end if end is not None else math.inf
    fab, reply_of = sc.fabric(), reply_pairs(sc, transport)
    hit = set(links)
    crossing = [
        f for f in failures if start <= f.t and hit & round_trip_links(fab, f, sc.seed, reply_of)
    ]
    if any(f.last_tx is None for f in crossing):
        damaged = [f for f in crossing if f.t < end]
        if not damaged:
            return none
        retired_us = round((max(f.t for f in damaged) - start) * 1e6, 1)
        return {
            "avoided_us": retired_us,
            "avoided_p90_us": None,
            "avoided_from": "retirement",
            "retired_us": retired_us,
            "evs_retired": len(damaged),
        }
    # A retirement after the window closed still counts when the EV's last send fell inside
    # it: a tail-loss probe can reveal a loss from during the failure only after its end.
    damaged = [f for f in crossing if f.last_tx < end]  # type: ignore[operator]
    if not damaged:
        return none
    retired_us = round((max(f.t for f in damaged) - start) * 1e6, 1)
    # Counted from the failure's start (0: last used before it, or never). The bulk beside
    # the last straggler: 90 % of the damaged EVs had carried their last data by then (one
    # explored late costs a packet into the failure, and sets the last).
    last_sends = sorted(max(f.last_tx - start, 0.0) for f in damaged)  # type: ignore[operator]
    return {
        "avoided_us": round(last_sends[-1] * 1e6, 1),
        "avoided_p90_us": round(nearest_rank(last_sends, 90) * 1e6, 1),
        "avoided_from": "last_send",
        "retired_us": retired_us,
        "evs_retired": len(damaged),
    }
