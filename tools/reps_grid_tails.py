"""What a REPS-grid cell's slow flows waited for, read from its run folder (issue 35's gaps).

Run from the checkout: `.venv/bin/python tools/reps_grid_tails.py RUN_DIR [--spine spine4]`.
For each flow, slowest last: its FCT, how its sender first found the failure (the first EV
it retired, by reason, in µs after the workload's go: `loss` when later packets' ACKs exposed
it, `rto` when only the retransmission timeout did) and when its receiver placed nothing
(sub-bins between its first and last placed byte). With `--spine`, per bin of the records, the
share of data bytes the senders put on EVs whose data path crosses that spine: how soon the
balancer left a dead switch. For a go-back-N row (`single-path`, `roce`), where each unfinished
flow stood: a receiver holding a NAKed gap waits for the sender's timeout.
Read by docs/measurements/2026-12-07-reps-grid-8to1-gaps.md and
2026-12-07-go-back-n-and-8to1-modes.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from testbed.harness.ev_controller import path_links
from testbed.harness.records import endpoint_records
from testbed.scenario.schema import Scenario


def _entry(run: Path) -> tuple[str, dict]:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    ((key, entry),) = summary["transports"].items()
    return key, entry


def stalls_us(recs: list[dict], go: float) -> list[tuple[float, float]]:
    """The receiver's stretches with nothing placed, (from, to) in µs after go, between its
    first and last placed byte (a `bin` record's `t` is its start, `ms` its sub-bins)."""
    subs: list[tuple[float, int]] = []
    for r in recs:
        if r.get("type") != "bin":
            continue
        width = r["dt"] / len(r["ms"])
        subs += [((r["t"] + i * width - go) * 1e6, b) for i, b in enumerate(r["ms"])]
    subs.sort()
    placed = [i for i, (_, b) in enumerate(subs) if b > 0]
    if not placed:
        return []
    width_us = subs[1][0] - subs[0][0] if len(subs) > 1 else 0.0
    out: list[tuple[float, float]] = []
    for t, b in subs[placed[0] : placed[-1] + 1]:
        if b:
            continue
        if out and abs(out[-1][1] - t) < width_us / 2:
            out[-1] = (out[-1][0], t + width_us)
        else:
            out.append((t, t + width_us))
    return [(round(a), round(b)) for a, b in out]


def first_failures(recs: list[dict], go: float) -> dict[str, float]:
    """The first EV retirement of each reason, in µs after go."""
    first: dict[str, float] = {}
    for r in recs:
        if r.get("type") == "ev" and r.get("new") == "failed":
            first.setdefault(r.get("reason", "?"), round((r["t"] - go) * 1e6))
    return first


def flow_rows(run: Path) -> list[dict]:
    """One row per flow, slowest last."""
    key, entry = _entry(run)
    records, go = endpoint_records(run / "raw" / key)
    if go is None:
        raise SystemExit(f"{run}: no workload start (go) in the records")
    rows = []
    for f in entry["flows"]:
        first = first_failures(records.get(f["src"], []), go)
        rows.append(
            {
                "flow": f"{f['src']}->{f['dst']}",
                "fct_us": None if f["fct_ms"] is None else round(f["fct_ms"] * 1000, 1),
                "first_found_by": min(first, key=first.get) if first else None,
                "first_failures_us": first,
                "receiver_stalled_us": stalls_us(records.get(f["dst"], []), go),
            }
        )
    return sorted(rows, key=lambda r: float("inf") if r["fct_us"] is None else r["fct_us"])


def idle_until_rto(row: dict, min_us: float = 26.0) -> tuple[float, float] | None:
    """The receiver's idle stretch (at least `min_us`, two 13 µs sub-bins) that the sender's
    first RTO ended: it covers the RTO, or ends less than a sub-bin before it (a stretch is
    whole sub-bins; the resend lands a one-way delay after the RTO, inside the sub-bin that
    ends the stretch). None if none did."""
    rto = row["first_failures_us"].get("rto")
    if rto is None:
        return None
    for a, b in row["receiver_stalled_us"]:
        if b - a >= min_us and a <= rto <= b + min_us / 2:
            return a, b
    return None


def _last_counters(recs: list[dict], peer: str) -> dict:
    last: dict = {}
    for r in recs:
        if r.get("type") == "counters" and r.get("peer") == peer:
            last = r
    return last


def go_back_n_holds(run: Path) -> list[dict]:
    """For each unfinished flow of a go-back-N row (`single-path`, `roce`), where its last
    counters records left it: the receiver's next PSN and the PSN it last NAKed (equal: it
    NAKed the gap once and drops what follows in silence), when, what it dropped, and the
    sender's NAK rewinds, stale NAKs, timeouts and bytes in flight. Empty for other rows and
    for records written before the `gbn` field."""
    key, entry = _entry(run)
    records, go = endpoint_records(run / "raw" / key)
    out = []
    for f in entry["flows"]:
        if f["fct_ms"] is not None:
            continue
        src, dst = f["src"], f["dst"]
        rx = _last_counters(records.get(dst, []), src)
        tx = _last_counters(records.get(src, []), dst)
        if "gbn" not in rx or "gbn" not in tx:
            continue
        g, c, tc = rx["gbn"], rx.get("counters", {}), tx.get("counters", {})
        nak_at = g["nak_at"]
        rewound = tx["gbn"]["rewound_at"]
        out.append(
            {
                "flow": f"{src}->{dst}",
                "held": g["nak_psn"] is not None and g["nak_psn"] == g["rcv_nxt"],
                "rcv_nxt": g["rcv_nxt"],
                "snd_una": tx["gbn"]["snd_una"],
                "nak_at_us": None if nak_at is None else round((nak_at - go) * 1e6),
                "rewound_at_us": None if rewound is None else round((rewound - go) * 1e6),
                "rx_dropped": dict(rx.get("drops", {})),
                "rx_held": c.get("gbn_held", 0),
                "nak_tx": c.get("nack_tx", 0),
                "gbn_rewinds": tc.get("gbn_rewinds", 0),
                "stale_nack": tc.get("stale_nack", 0),
                "rto_fired": tc.get("rto_fired", 0),
                "inflight_bytes": tx.get("inflight_bytes"),
            }
        )
    return out


def spine_share(run: Path, sc: Scenario, spine: str) -> dict[int, tuple[float, int]]:
    """Per bin of the records (its start in µs after go, rounded to a bin): (share of the data bytes
    sent on EVs whose data path crosses `spine`, bytes sent). Only bytes to the sender's own
    flow's destination count: the address it sent most bytes to (its ACKs to the host that
    sends to it are a few bytes each)."""
    key, entry = _entry(run)
    records, go = endpoint_records(run / "raw" / key)
    fab = sc.fabric()
    dst_of = {f["src"]: f["dst"] for f in entry["flows"]}
    crosses: dict[tuple[str, int], bool] = {}
    dead: dict[int, int] = defaultdict(int)
    sent: dict[int, int] = defaultdict(int)
    bin_us = 0.0
    for src, dst in dst_of.items():
        evtx = [r for r in records[src] if r.get("type") == "evtx"]
        by_ip: dict[str, int] = defaultdict(int)
        for r in evtx:
            for k, n in r["bytes"].items():
                by_ip[k.split(":")[0]] += n
        data_ip = max(by_ip, key=by_ip.get) if by_ip else None  # ACKs are a few bytes each
        for r in evtx:
            bin_us = r["dt"] * 1e6
            b = round((r["t"] - go) / r["dt"])
            for k, n in r["bytes"].items():
                ip, ev = k.split(":")[0], int(k.split(":")[1])
                if ip != data_ip:
                    continue
                if (src, ev) not in crosses:
                    links = path_links(fab, src, dst, ev, sc.seed)
                    crosses[(src, ev)] = any(spine in link for link in links)
                sent[b] += n
                dead[b] += n if crosses[(src, ev)] else 0
    return {round(b * bin_us): (dead[b] / sent[b], sent[b]) for b in sorted(sent) if sent[b]}


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a cell's run folder (summary.json, raw/)")
    ap.add_argument("--spine", help="also: per bin, the share of data sent through this spine")
    args = ap.parse_args(argv)
    rows = flow_rows(args.run)
    for r in rows:
        print(
            f"{r['flow']:>9}  FCT {r['fct_us']} µs  first found by {r['first_found_by']} "
            f"{r['first_failures_us']}  receiver idle {r['receiver_stalled_us']}"
        )
    by_rto = [r for r in rows if r["first_found_by"] == "rto"]
    rest = [r for r in rows if r["first_found_by"] != "rto" and r["fct_us"] is not None]
    if by_rto:
        done = [r["fct_us"] for r in by_rto if r["fct_us"] is not None]
        print(
            f"{len(by_rto)} of {len(rows)} flows first found the failure by an RTO, at "
            f"{statistics.median(r['first_failures_us']['rto'] for r in by_rto):.0f} µs "
            f"(median); their median FCT {_median(done)} µs, the others' "
            f"{_median([r['fct_us'] for r in rest])} µs; "
            f"{sum(r in by_rto for r in rows[-8:])} of the 8 slowest"
        )
    waited = [(r, idle_until_rto(r)) for r in rows]
    waited = [(r, w) for r, w in waited if w is not None]
    if waited:
        print(
            f"{len(waited)} of {len(rows)} receivers idle until their sender's first RTO "
            f"(idle from {min(w[0] for _, w in waited):.0f}-{max(w[0] for _, w in waited):.0f} "
            f"µs, RTO at {min(r['first_failures_us']['rto'] for r, _ in waited)}-"
            f"{max(r['first_failures_us']['rto'] for r, _ in waited)} µs); "
            f"{sum(any(r is x for x, _ in waited) for r in rows[-8:])} of the 8 slowest"
        )
    holds = go_back_n_holds(args.run)
    for h in holds:
        print(
            f"{h['flow']:>9}  unfinished: receiver {'held' if h['held'] else 'not held'} at PSN "
            f"{h['rcv_nxt']} (NAKed at {h['nak_at_us']} µs; {h['nak_tx']} NAKs, "
            f"{h['rx_held']} held in silence, dropped {h['rx_dropped']}); sender at "
            f"{h['snd_una']}, last rewind {h['rewound_at_us']} µs, {h['gbn_rewinds']} NAK "
            f"rewinds, {h['stale_nack']} stale NAKs, {h['rto_fired']} timeouts, "
            f"{h['inflight_bytes']} B in flight"
        )
    if holds:
        print(
            f"{sum(h['held'] for h in holds)} of {len(holds)} unfinished flows held by a NAKed gap"
        )
    if args.spine:
        from testbed.experiment.api import load

        summary = json.loads((args.run / "summary.json").read_text(encoding="utf-8"))
        sc = load(summary["provenance"]["scenario"])
        share = spine_share(args.run, sc, args.spine)
        print(
            f"share of data sent on EVs through {args.spine}, per bin (its start, µs after go): "
            + ", ".join(f"{t}: {100 * s:.1f} % of {n / 1e6:.1f} MB" for t, (s, n) in share.items())
        )


if __name__ == "__main__":
    main()
