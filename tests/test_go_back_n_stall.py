"""Why a one-path flow that crosses no failure can wait for its whole timeout.

`single-path` and `roce` run RC's recovery: an in-order receiver that NAKs a sequence gap
once (as RC responders do: Linux rxe's `sent_psn_nak`), a trimmed packet dropped as a bad
ICRC, and go-back-N from the NAKed PSN. When the resent head of a rewind is itself cut, the
receiver has already NAKed that PSN: everything behind it is dropped in silence, and only the
RC-style timeout (`single_path_rto`, `rc_timeout`) recovers. On a congested path that is the
common case: go-back-N resends a whole window into the queue that cut the first copy.

The REPS grid's 1:1 permutation under `link-failed` left five `single-path` flows that cross
no failed element unfinished at 2 ms (docs/measurements/2026-12-07-go-back-n-and-8to1-modes.md);
these tests pin the mechanism on the in-process network, one cut at a time, and the counters
that name it in a fabric run (`gbn_held`, `gbn_rewinds`, `stale_nack`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from contracts import defaults
from endpoint.codec import DataPacket, decode
from endpoint.config import Mode, TransportConfig
from endpoint.process_record import gbn_state
from endpoint.simnet import PairHarness, SimNet, trim_payload

MSG = 64 * 4016  # 64 packets of one message


def _harness(mode: Mode, **kw) -> tuple[SimNet, PairHarness]:
    cfg = TransportConfig(mode=mode, line_rate_bps=10e9, base_rtt=40e-6, single_path_rto=0.05, **kw)
    net = SimNet(seed=1, n_paths=1)
    return net, PairHarness(net, cfg)


def _cut(net: SimNet, psn: int, times: int) -> Counter:
    """Trim the first `times` data packets that carry `psn` from a to b, as a full queue
    would: the rest of the path is healthy."""
    inject, cut = net.inject, Counter()

    def cutting(src, tx):
        if src == "a" and cut[psn] < times:
            pkt = decode(tx.payload)
            if isinstance(pkt, DataPacket) and pkt.psn == psn:
                cut[psn] += 1
                payload, tos = trim_payload(tx.payload, tx.tos, defaults.TRIM_BYTES)
                tx = dataclasses.replace(tx, payload=payload, tos=tos)
        inject(src, tx)

    net.inject = cutting
    return cut


def _delivered_at(h: PairHarness) -> float:
    assert h.run(1.0), "the message never arrived"
    return max(t for t, _ in h.delivery_times)


@pytest.mark.parametrize("mode", [Mode.SINGLE_PATH, Mode.MRC])
def test_one_cut_costs_a_round_trip(mode: Mode) -> None:
    net, h = _harness(mode)
    cut = _cut(net, psn=10, times=1)
    h.send_ab(b"x" * MSG)
    assert _delivered_at(h) < 0.001  # a NAK (or MRC's trim NACK) and one resend
    assert cut[10] == 1
    if mode is Mode.SINGLE_PATH:
        assert h.cb.stats.counters["nack_tx"] == 1
        assert h.ca.stats.counters["gbn_rewinds"] == 1


def test_a_cut_resend_waits_for_the_single_path_timeout() -> None:
    net, h = _harness(Mode.SINGLE_PATH)
    cut = _cut(net, psn=10, times=2)  # the first copy and the rewind's head
    h.send_ab(b"x" * MSG)
    net.run(0.01)  # well past the round trips a NAK needs, before the 50 ms timeout
    assert cut[10] == 2 and not h.all_done()
    # What a counters record shows of a stalled connection: the receiver NAKed the PSN it
    # waits for, the sender's oldest unacknowledged packet is that PSN.
    rx, tx = gbn_state(h.cb)["gbn"], gbn_state(h.ca)["gbn"]
    assert rx["rcv_nxt"] == rx["nak_psn"] == 10 and rx["nak_at"] < 0.001
    assert tx["snd_una"] == 10 and tx["rewound_at"] < 0.001
    at = _delivered_at(h)
    # The receiver NAKed PSN 10 once; the resent copy was cut, so it held every later packet
    # without a word until the sender's timeout rewound again.
    rx, tx = h.cb.stats.counters, h.ca.stats.counters
    assert rx["nack_tx"] == 1
    assert rx["gbn_held"] > 0
    assert tx["gbn_rewinds"] == 1 and h.ca.stats.retransmits["rto"] > 0
    assert at >= 0.05  # single_path_rto


def test_mrc_rides_out_the_same_two_cuts() -> None:
    net, h = _harness(Mode.MRC)
    cut = _cut(net, psn=10, times=2)
    h.send_ab(b"x" * MSG)
    assert _delivered_at(h) < 0.001  # each cut's NACK resends that one packet
    assert cut[10] == 2 and h.ca.stats.counters["gbn_rewinds"] == 0
