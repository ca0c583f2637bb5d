"""Each plot is written, is a real picture (not blank), and survives thin or odd data."""

import math
import random
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from testbed.analysis import plots
from testbed.analysis.metrics import AppliedEvent, Message, TransportRun, measure
from testbed.scenario import validate

EVENTS = [(1.5, "link-down spine1-leaf2"), (3.0, "link-up spine1-leaf2")]
TIMES = [i * 0.01 for i in range(500)]


def assert_real_png(path: Path, min_kb: float = 15):
    assert path.is_file()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > min_kb * 1024
    img = mpimg.imread(path)[:, :, :3]
    assert img.shape[0] >= 400 and img.shape[1] >= 800
    ink = (img.mean(axis=2) < 0.9).mean()
    assert 0.01 < ink < 0.8, f"{path.name}: {ink:.1%} of the pixels are not background"
    assert np.unique(img.reshape(-1, 3), axis=0).shape[0] > 50, "more than a few flat colours"


def rates(stall):
    rng = random.Random(1)
    return [0.0 if stall[0] <= t < stall[1] else 37 * rng.uniform(0.9, 1.1) for t in TIMES]


def test_goodput_plot(tmp_path):
    path = plots.plot_goodput(
        {"mrc": (TIMES, rates((1.5, 1.53))), "single-path": (TIMES, rates((1.5, 3.1)))},
        tmp_path / "goodput.png",
        events=EVENTS,
        bottleneck_mbps=40,
        title="link-failure",
    )
    assert_real_png(path)


def test_ev_share_plot_groups_many_evs(tmp_path):
    rng = random.Random(2)
    ev = {
        f"EV {k}": [0.0 if (k % 2 and 150 <= i < 300) else rng.random() for i in range(len(TIMES))]
        for k in range(64)
    }
    path = plots.plot_ev_share(TIMES, ev, tmp_path / "ev.png", events=EVENTS, max_series=8)
    assert_real_png(path)


def test_step_cdf_plot_with_unfinished_steps(tmp_path):
    rng = random.Random(3)
    steps = {
        "mrc": [rng.gauss(157, 4) for _ in range(29)] + [205],
        "single-path": [rng.gauss(160, 5) for _ in range(26)] + [3700],
    }
    path = plots.plot_step_cdf(steps, tmp_path / "cdf.png", unfinished={"single-path": 3})
    assert_real_png(path, min_kb=10)


def test_ports_plot(tmp_path):
    rng = random.Random(4)
    queues = {
        f"leaf{i}:leaf{i}-eth{j}": (
            TIMES,
            [
                max(0.0, 30000 + 30000 * math.sin(t * (i + j)) + rng.uniform(-4e3, 4e3))
                for t in TIMES
            ],
        )
        for i in (1, 2)
        for j in (2, 3)
    }
    counters = {
        p: {"trims": rng.randint(0, 400), "drops": {"queue": rng.randint(0, 50)}} for p in queues
    }
    path = plots.plot_ports(
        queues, counters, tmp_path / "ports.png", events=EVENTS, queue_limit_kb=64
    )
    assert_real_png(path)


def test_thin_data_still_draws(tmp_path):
    plots.plot_goodput({"mrc": ([0.0], [0.0])}, tmp_path / "a.png")
    plots.plot_ev_share([0.0, 0.01], {"EV 1": [0.0, 0.0]}, tmp_path / "b.png")
    plots.plot_step_cdf({"mrc": []}, tmp_path / "c.png", unfinished={"mrc": 2})
    plots.plot_ports({}, {"p": {"trims": 0, "drops": 0}}, tmp_path / "d.png")
    for name in "abcd":
        assert (tmp_path / f"{name}.png").stat().st_size > 5000


def test_smoothing_keeps_length_and_mean():
    values = [0.0] * 10 + [10.0] * 10
    out = plots._smooth(values, 5)
    assert len(out) == 20 and out[0] == 0 and out[-1] == 10
    assert plots._smooth(values, 1) == values


def test_plot_run_draws_what_the_data_has(tmp_path):
    sc = validate(
        {
            "name": "x",
            "description": "d",
            "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 40},
            "workload": {"kind": "allreduce", "bytes": "100KB", "steps": 3},
            "duration_s": 5,
            "events": [{"at": 1.0, "action": "blackhole", "link": ["spine1", "leaf2"]}],
        }
    )
    run = TransportRun(
        "mrc",
        [(t, 4000) for t in TIMES],
        [Message(0.0, 1, 4.99)],
        end_s=5.0,
        steps=[(0, 0.1), (0.1, 0.2), (0.2, 0.31)],
        ev_bytes={"spine1": [1.0] * 500, "spine2": [1.0] * 500},
    )
    applied = [AppliedEvent(e, e.at) for e in sc.events]
    m = {"mrc": measure(run, sc, applied)}
    made = plots.plot_run(
        tmp_path,
        m,
        events=plots.event_marks(applied),
        port_counters={"leaf1:leaf1-eth2": {"trims": 3, "drops": 1}},
        title="x",
    )
    assert set(made) == {
        "Goodput over time",
        "Traffic share per EV (mrc)",
        "Step-time CDF",
        "Switch ports: queues, trims and drops",
    }
    assert all(p.is_file() for p in made.values())
    assert plots.event_marks(applied) == [(1.0, "blackhole spine1-leaf2")]


@pytest.mark.parametrize("name", ["mrc", "single-path", "tcp", "mptcp", "spray-no-failover"])
def test_transport_colours_avoid_event_colours(name):
    assert plots.colour(name) not in (plots.FAILURE_STYLE["color"], plots.RECOVERY_STYLE["color"])
