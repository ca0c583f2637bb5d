"""tools/reps_grid_tails.py: a flow's idle stretches, its first detection, and the share of data
sent through a spine, from records written as the endpoints write them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from testbed.bench.reps_grid_scenarios import scenario
from testbed.experiment.api import load
from testbed.harness.ev_controller import path_links

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location(
        "reps_grid_tails", ROOT / "tools" / "reps_grid_tails.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reps_grid_tails"] = mod
    spec.loader.exec_module(mod)
    return mod


tails = _load()
GO = 1.0  # the workload's go, seconds (virtual) in the records' clock
DT = 130e-6


def test_idle_stretches_lie_between_the_first_and_last_placed_byte() -> None:
    recs = [
        # bins start at t; ten 13 µs sub-bins each
        {"type": "bin", "t": GO, "dt": DT, "ms": [0, 5, 5, 0, 0, 5, 5, 5, 5, 5]},
        {"type": "bin", "t": GO + DT, "dt": DT, "ms": [5, 0, 0, 0, 5, 0, 0, 0, 0, 0]},
        {"type": "counters", "t": GO},
    ]
    # The leading zero is before the first byte, the trailing ones after the last: not idle.
    assert tails.stalls_us(recs, GO) == [(39, 65), (143, 182)]
    assert tails.stalls_us([{"type": "bin", "t": GO, "dt": DT, "ms": [0] * 10}], GO) == []


def test_first_failure_of_each_reason() -> None:
    recs = [
        {"type": "ev", "new": "congested", "reason": "trim", "t": GO + 10e-6},
        {"type": "ev", "new": "failed", "reason": "rto", "t": GO + 199e-6},
        {"type": "ev", "new": "failed", "reason": "loss", "t": GO + 250e-6},
        {"type": "ev", "new": "failed", "reason": "rto", "t": GO + 400e-6},
    ]
    assert tails.first_failures(recs, GO) == {"rto": 199, "loss": 250}


def _run(tmp: Path) -> tuple[Path, int, int]:
    """A run folder with one flow h1 -> h5 that sent 3 units on an EV over spine4 and 1 unit
    on one that is not, in the first bin, and ACKs (to another address) on the first EV."""
    sc = load(scenario("8to1", "permutation", "switch-failed", "reps-1copy"))
    fab = sc.fabric()

    def over_spine4(ev: int) -> bool:
        return any("spine4" in link for link in path_links(fab, "h1", "h5", ev, sc.seed))

    dead = next(ev for ev in range(49152, 50000) if over_spine4(ev))
    live = next(ev for ev in range(49152, 50000) if not over_spine4(ev))
    raw = tmp / "raw" / "reps-1copy"
    (raw / "endpoints").mkdir(parents=True)
    h1 = [
        {"type": "job", "job": 1, "event": "go", "t": GO},
        {"type": "evtx", "t": GO, "dt": DT, "bytes": {f"10.1.2.1:{dead}": 3000, f"10.1.2.1:{live}": 1000, f"10.1.9.1:{dead}": 64}},
        {"type": "ev", "new": "failed", "reason": "loss", "t": GO + 120e-6, "ev": dead},
    ]  # fmt: skip
    h5 = [{"type": "bin", "t": GO, "dt": DT, "ms": [4000] + [0] * 8 + [96]}]
    for host, recs in (("h1", h1), ("h5", h5)):
        (raw / "endpoints" / f"{host}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs)
        )
    flow = {"src": "h1", "dst": "h5", "fct_ms": 0.13, "retransmits": {"loss": 1}}
    summary = {"transports": {"reps-1copy": {"flows": [flow]}}}
    (tmp / "summary.json").write_text(json.dumps(summary))
    return tmp, dead, live


def test_flow_rows_and_the_share_sent_through_a_spine(tmp_path: Path) -> None:
    run, _, _ = _run(tmp_path)
    (row,) = tails.flow_rows(run)
    assert row["flow"] == "h1->h5" and row["fct_us"] == 130.0
    assert row["first_found_by"] == "loss" and row["first_failures_us"] == {"loss": 120}
    assert row["receiver_stalled_us"] == [(13, 117)]
    sc = load(scenario("8to1", "permutation", "switch-failed", "reps-1copy"))
    # The 64 B of ACKs to another address are not the flow's data.
    assert tails.spine_share(run, sc, "spine4") == {0: (0.75, 4000)}
    assert tails.spine_share(run, sc, "spine9") == {0: (0.0, 4000)}


def _counters(t: float, peer: str, gbn: dict, counters: dict, **kw) -> dict:
    return {"type": "counters", "t": t, "peer": peer, "gbn": gbn, "counters": counters, **kw}


def test_an_unfinished_go_back_n_flow_held_by_a_naked_gap(tmp_path: Path) -> None:
    raw = tmp_path / "raw" / "single-path"
    (raw / "endpoints").mkdir(parents=True)
    sender_gbn = {"snd_una": 300, "next_psn": 600, "rewound_at": GO + 50e-6}
    h1 = [
        {"type": "job", "job": 1, "event": "go", "t": GO},
        _counters(GO + 40e-6, "h5", {**sender_gbn, "rewound_at": None}, {}),
        _counters(
            GO + 2e-3, "h5", sender_gbn, {"gbn_rewinds": 2, "stale_nack": 5}, inflight_bytes=9
        ),
    ]
    # h5 NAKed PSN 300 at 45 µs and holds it: the last record counts; h2 -> h6 finished.
    held = {"rcv_nxt": 300, "nak_psn": 300, "nak_at": GO + 45e-6}
    h5 = [
        _counters(GO + 40e-6, "h1", {**held, "nak_psn": None}, {"nack_tx": 1}),
        _counters(GO + 2e-3, "h1", held, {"nack_tx": 3, "gbn_held": 250}, drops={"trimmed": 7}),
    ]
    for host, recs in (("h1", h1), ("h5", h5)):
        (raw / "endpoints" / f"{host}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs)
        )
    flows = [{"src": "h1", "dst": "h5", "fct_ms": None}, {"src": "h2", "dst": "h6", "fct_ms": 0.1}]
    (tmp_path / "summary.json").write_text(
        json.dumps({"transports": {"single-path": {"flows": flows}}})
    )
    (hold,) = tails.go_back_n_holds(tmp_path)
    assert hold["flow"] == "h1->h5" and hold["held"] is True
    assert (hold["rcv_nxt"], hold["snd_una"], hold["nak_at_us"], hold["rewound_at_us"]) == (
        300, 300, 45, 50,
    )  # fmt: skip
    assert hold["rx_held"] == 250 and hold["rx_dropped"] == {"trimmed": 7}
    assert (hold["gbn_rewinds"], hold["stale_nack"], hold["inflight_bytes"]) == (2, 5, 9)
    # The receiver got the PSN after all: not held.
    h5[-1]["gbn"] = {"rcv_nxt": 301, "nak_psn": None, "nak_at": GO + 45e-6}
    (raw / "endpoints" / "h5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in h5))
    assert tails.go_back_n_holds(tmp_path)[0]["held"] is False


def test_an_idle_stretch_the_first_rto_ended() -> None:
    row = {"first_failures_us": {"loss": 130, "rto": 250}, "receiver_stalled_us": [(182, 247)]}
    assert tails.idle_until_rto(row) == (182, 247)  # placement resumed just before the RTO
    row["receiver_stalled_us"] = [(182, 270)]
    assert tails.idle_until_rto(row) == (182, 270)  # the RTO inside the stretch
    row["receiver_stalled_us"] = [(182, 195), (300, 400)]  # too short; after the RTO
    assert tails.idle_until_rto(row) is None
    assert (
        tails.idle_until_rto({"first_failures_us": {"loss": 1}, "receiver_stalled_us": []}) is None
    )
