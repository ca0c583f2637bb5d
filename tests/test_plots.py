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
    out = plots._trailing_mean(values, 5)
    assert len(out) == 20 and out[0] == 0 and out[-1] == 10
    assert out[9] == 0 and out[10] == 2  # trailing: nothing moves before the step
    assert plots._trailing_mean(values, 1) == values


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
        ports={"mrc": ({}, {"leaf1:leaf1-eth2": {"trims": 3, "drops": 1}})},
        title="x",
    )
    assert set(made) == {
        "Goodput over time",
        "Traffic share per EV (mrc)",
        "Step-time CDF",
        "Switch ports (mrc): queues, trims and drops",
    }
    assert all(p.is_file() for p in made.values())
    assert plots.event_marks(applied) == [(1.0, "blackhole spine1-leaf2")]


@pytest.mark.parametrize("name", ["mrc", "single-path", "tcp", "mptcp", "spray-no-failover"])
def test_transport_colours_avoid_event_colours(name):
    assert plots.colour(name) not in (plots.FAILURE_STYLE["color"], plots.RECOVERY_STYLE["color"])


# ----- one colour per path name; a ports plot per transport; drops by cause; file formats -------


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, kept open (by name of the file) for the test to inspect."""
    kept: dict[str, object] = {}

    def keep(fig, path):
        kept[Path(path).name] = fig
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        return path

    monkeypatch.setattr(plots, "_finish", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept.values():
        plt.close(fig)


def band_colours(fig) -> dict[str, str]:
    """label -> face colour (hex) of each stacked band of an EV-share figure."""
    from matplotlib.colors import to_hex

    ax = fig.axes[0]
    return {
        c.get_label(): to_hex(c.get_facecolor()[0])
        for c in ax.collections
        if not c.get_label().startswith("_")
    }


def two_transports(sc, applied):
    n = len(TIMES)
    # mrc sends most via spine1, single-path most via spine2: byte ranks are opposite.
    runs = {
        "mrc": {"via spine1": [3.0] * n, "via spine2": [1.0] * n},
        "single-path": {"via spine1": [1.0] * n, "via spine2": [3.0] * n, "via spine3": [0.5] * n},
    }
    return {
        t: measure(
            TransportRun(t, [(x, 4000) for x in TIMES], [Message(0.0, 1, 4.99)], end_s=5.0,
                         ev_bytes=ev),
            sc, applied,
        )
        for t, ev in runs.items()
    }  # fmt: skip


def small_scenario():
    return validate(
        {
            "name": "x",
            "topology": {"spines": 3, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 40},
            "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "1MB"},
            "duration_s": 5,
            "events": [{"at": 1.0, "action": "blackhole", "link": ["spine1", "leaf2"]}],
        }
    )


def test_path_colours_follow_names_not_bytes():
    a = plots.path_colours(["via spine2", "via spine1", "via leaf1"])
    b = plots.path_colours(["via leaf1", "via spine1", "via spine2"])
    assert a == b and len(set(a.values())) == 3
    assert a["via spine1"] == plots.PATH_PALETTE[0]  # spines first, in natural order
    events = (plots.FAILURE_STYLE["color"], plots.RECOVERY_STYLE["color"])
    assert not set(a.values()) & set(events)
    many = plots.path_colours(f"via spine{k}" for k in range(1, 31))
    assert len(set(many.values())) == 30  # past the palette: still one colour each


def test_a_path_has_one_colour_in_every_plot_of_a_run(tmp_path, figures):
    """Two transports whose byte ranks of the paths are opposite: each path's band has the same
    colour in both EV-share plots, and its spine's label the same colour in path_share."""
    sc = small_scenario()
    applied = [AppliedEvent(e, e.at) for e in sc.events]
    shares = {
        t: {"max_deviation_pct": 10.0,
            "uplinks": {"leaf1": {"spine1": 0.5, "spine2": 0.3, "spine3": 0.2}},
            "downlinks": {"leaf2": {"spine1": 0.4, "spine2": 0.4, "spine3": 0.2}}}
        for t in ("mrc", "single-path")
    }  # fmt: skip
    plots.plot_run(tmp_path, two_transports(sc, applied), path_shares=shares, title="x")
    mrc = band_colours(figures["ev_share_mrc.png"])
    sp = band_colours(figures["ev_share_single-path.png"])
    assert set(mrc) == {"via spine1", "via spine2"}
    assert mrc["via spine1"] == sp["via spine1"] and mrc["via spine2"] == sp["via spine2"]
    assert len({mrc["via spine1"], mrc["via spine2"], sp["via spine3"]}) == 3
    from matplotlib.colors import to_hex

    ax = figures["path_share.png"].axes[0]
    label_colour = {t.get_text(): to_hex(t.get_color()) for t in ax.get_xticklabels()}
    assert label_colour["leaf1->spine1"] == mrc["via spine1"]
    assert label_colour["leaf1->spine2"] == mrc["via spine2"]
    assert label_colour["leaf1->spine3"] == sp["via spine3"]


def test_ports_plot_per_transport_with_drops_split_by_cause(tmp_path, figures):
    sc = small_scenario()
    applied = [AppliedEvent(e, e.at) for e in sc.events]
    queues = {"leaf1-eth2": ([0.0, 0.01, 0.02], [1000.0, 64000.0, 0.0])}
    ports = {
        "mrc": (queues, {"spine1-eth1": {"trims": 5, "drops": {"blackhole": 40}}}),
        "single-path": ({}, {"leaf2-eth0": {"trims": 0,
                                            "drops": {"queue_full": 7, "tx_error": 1}}}),
    }  # fmt: skip
    made = plots.plot_run(
        tmp_path, two_transports(sc, applied), ports=ports, queue_interval_ms=10, title="x"
    )
    assert made["Switch ports (mrc): queues, trims and drops"].name == "ports_mrc.png"
    assert made["Switch ports (single-path): queues, trims and drops"].name == (
        "ports_single-path.png"
    )
    for t in ("mrc", "single-path"):
        q_ax, c_ax = figures[f"ports_{t}.png"].axes[:2]
        assert t in q_ax.get_title() and t in c_ax.get_title()
        assert "deepest queue per 10 ms" in q_ax.get_title()
    bars = {
        c.get_label(): [p.get_height() for p in c.patches]
        for c in figures["ports_mrc.png"].axes[1].containers
    }
    assert bars == {
        "trims": [5],
        "drops: congestion (queue full)": [0],
        "drops: failure (link down, black hole, loss)": [40],
    }
    bars = {
        c.get_label(): [p.get_height() for p in c.patches]
        for c in figures["ports_single-path.png"].axes[1].containers
    }
    assert bars["drops: congestion (queue full)"] == [7]
    assert bars["drops: other (emulator)"] == [1]


@pytest.mark.parametrize("fmt,magic", [("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_plot_format_writes_every_plot_in_it(tmp_path, fmt, magic):
    sc = small_scenario()
    applied = [AppliedEvent(e, e.at) for e in sc.events]
    made = plots.plot_run(
        tmp_path,
        two_transports(sc, applied),
        ports={"mrc": ({}, {"p": {"trims": 1, "drops": {}}})},
        fmt=fmt,
    )
    assert len(made) == 4
    for path in made.values():
        assert path.suffix == f".{fmt}" and path.read_bytes().startswith(magic)
    assert not list(tmp_path.glob("*.png"))


def test_plot_format_unknown_is_refused(tmp_path):
    with pytest.raises(ValueError, match="plot format: 'jpg'"):
        plots.plot_run(tmp_path, {"mrc": object()}, fmt="jpg")
