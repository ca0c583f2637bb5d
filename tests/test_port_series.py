"""testbed.analysis.port_series: the switches' queue maxima merged and made a series; drops by
cause. Pure: counters as `testbed counters` returns them."""

from __future__ import annotations

import pytest

from testbed.analysis.port_series import (
    CONGESTION,
    FAILURE,
    OTHER,
    drops_by_cause,
    merge_queue_maxima,
    queue_series,
    sparse_json,
)


def read(**ports):
    return {"leaf1": {"ports": {p: {"queue_max": v} for p, v in ports.items()}}}


def test_drops_split_by_cause_from_the_switch_reason_names():
    drops = {"blackhole": 4, "link_down": 2, "loss": 3, "rx_loss": 1, "rx_blackhole": 1,
             "switch_down": 5, "queue_full": 7, "prio_queue_full": 2, "tx_error": 1,
             "something_new": 1}  # fmt: skip
    assert drops_by_cause(drops) == {FAILURE: 16, CONGESTION: 9, OTHER: 2}
    assert drops_by_cause(6) == {FAILURE: 0, CONGESTION: 0, OTHER: 6}


def test_the_reason_names_are_the_switch_s_own():
    """A renamed reason in the switch must not silently fall into "other"."""
    from switch import dataplane, port, queueing
    from testbed.analysis.port_series import DROP_CAUSES

    names = {port.DROP_LINK_DOWN, port.DROP_BLACKHOLE, port.DROP_LOSS, dataplane.RX_LOSS,
             dataplane.RX_BLACKHOLE, dataplane.SWITCH_DOWN, queueing.DROP_QUEUE_FULL,
             queueing.DROP_PRIO_FULL}  # fmt: skip
    assert set(DROP_CAUSES) == names


def test_merge_keeps_the_larger_value_of_a_repeated_open_interval():
    into: dict = {}
    merge_queue_maxima(into, read(a=[[10.0, 500], [10.01, 800]], b=[]))
    merge_queue_maxima(into, read(a=[[10.01, 3000], [10.02, 100]]))  # 10.01 was open, grew
    merge_queue_maxima(into, read(a=[[10.02, 50]]))  # a smaller repeat changes nothing
    assert into == {"a": {10.0: 500, 10.01: 3000, 10.02: 100}, "b": {}}


def test_series_is_dense_relative_to_t0_with_zero_where_nothing_queued():
    maxima = {"a": {10.0: 500, 10.01: 3000, 10.04: 100}, "idle": {}}
    series = queue_series(maxima, t0=9.5, interval_s=0.01)
    assert set(series) == {"a"}
    times, depth = series["a"]
    assert times == pytest.approx([0.5, 0.51, 0.52, 0.53, 0.54])
    assert depth == [500.0, 3000.0, 0.0, 0.0, 100.0]
    assert sparse_json(maxima, 9.5) == {"a": [[0.5, 500], [0.51, 3000], [0.54, 100]]}
