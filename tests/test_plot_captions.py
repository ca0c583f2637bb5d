"""Plots say what they show at any time scale (issue 37): a run of milliseconds (a dilated
fabric's 17 ms all-reduce, 0.1 ms bins) and one of seconds (10 ms bins). Titles and axes give
the bins' and windows' real lengths in units that fit; averages are trailing, so no curve
moves before an event; event labels never overlap, however close the events are."""

from pathlib import Path

import pytest

from testbed.analysis import durations, plots

# (bin width s, bins, time of the step, unit on the axis, bin caption, 5-bin window caption)
SCALES = {
    "milliseconds": (1e-4, 170, 0.0075, "ms", "100 µs", "500 µs"),
    "seconds": (0.01, 500, 2.0, "s", "10 ms", "50 ms"),
}


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, kept open for the test to inspect."""
    kept: dict[str, object] = {}

    def keep(fig, path):
        kept[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(plots, "_finish", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept.values():
        plt.close(fig)


def step_series(bin_s, n, t_step):
    times = [k * bin_s for k in range(n)]
    return times, [100.0 if t < t_step - 1e-12 else 10.0 for t in times]


def event_boxes(fig, labels):
    """Window extents of the annotations whose text is one of `labels` (or a number)."""
    renderer = fig.canvas.get_renderer()
    return [
        (t.get_text(), t.get_window_extent(renderer))
        for ax in fig.axes
        for t in ax.texts
        if t.get_text() in labels or t.get_text().isdigit()
    ]


def assert_apart(boxes):
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1 :]:
            assert not ba.overlaps(bb), f"labels {a!r} and {b!r} overlap"


@pytest.mark.parametrize("scale", SCALES)
def test_goodput_caption_axis_and_trailing_average(figures, scale):
    bin_s, n, t_step, unit, bin_text, window_text = SCALES[scale]
    times, mbps = step_series(bin_s, n, t_step)
    plots.plot_goodput({"mrc": (times, mbps)}, "g.png", events=[(t_step, "blackhole s1-l2")])
    ax = figures["g.png"].axes[0]
    title = ax.get_title()
    assert f"trailing {window_text} average" in title and f"{bin_text} bins" in title
    assert "moving average" not in title  # the old caption: centred, and always "10 ms"
    assert ax.get_xlabel() == f"time since workload start ({unit})"
    size = dict(durations.UNITS)[unit]
    # The smoothed line: full rate at every point drawn at or before the step.
    line = next(line for line in ax.get_lines() if line.get_label() == "mrc")
    xs, ys = line.get_xdata(), line.get_ydata()
    before = [y for x, y in zip(xs, ys, strict=True) if x * size <= t_step + 1e-12]
    assert before and all(y == 100.0 for y in before)
    assert min(ys) == 10.0  # and it does fall once the step has happened
    # The event line sits at the step, in the axis' unit.
    marks = [line.get_xdata()[0] for line in ax.get_lines() if line.get_label().startswith("_")]
    assert any(abs(x * size - t_step) < 1e-12 for x in marks)


@pytest.mark.parametrize("scale", SCALES)
def test_ev_share_caption_states_the_window(figures, scale):
    bin_s, n, _, unit, _, window_text = SCALES[scale]
    times = [k * bin_s for k in range(n)]
    plots.plot_ev_share(times, {"EV 1": [1.0] * n, "EV 2": [3.0] * n}, "e.png")
    ax = figures["e.png"].axes[0]
    assert f"trailing {window_text} window" in ax.get_title()
    assert ax.get_xlabel().endswith(f"({unit})")


@pytest.mark.parametrize("scale", SCALES)
def test_ports_caption_states_the_interval(figures, scale):
    bin_s, n, _, unit, bin_text, _ = SCALES[scale]
    times = [k * bin_s for k in range(n)]
    plots.plot_ports(
        {"leaf1:leaf1-eth2": (times, [1000.0] * n)},
        {},
        "p.png",
        interval_ms=bin_s * 1e3,
    )
    ax = figures["p.png"].axes[0]
    assert f"per {bin_text} of the 1 deepest ports" in ax.get_title()
    assert ax.get_xlabel().endswith(f"({unit})")


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("count", [2, 5, 40])
def test_event_labels_never_overlap(figures, scale, count):
    """Close events (the demo's failure and repair 0.5 % of the run apart), a crowd, and more
    than the rows hold (numbered, with a key under the axes)."""
    bin_s, n, t_step, *_ = SCALES[scale]
    times, mbps = step_series(bin_s, n, t_step)
    span = n * bin_s
    events = [
        (t_step + k * span * 0.005, f"{'blackhole' if k % 2 == 0 else 'heal'} spine{k}-leaf{k}")
        for k in range(count)
    ]
    plots.plot_goodput({"mrc": (times, mbps)}, "g.png", events=events)
    fig = figures["g.png"]
    labels = {label for _, label in events}
    boxes = event_boxes(fig, labels)
    assert len(boxes) == count
    assert_apart(boxes)
    ax = fig.axes[0]
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 for _, b in boxes)
    numbered = all(text.isdigit() for text, _ in boxes)
    if count >= 40:
        assert numbered
        key = next(t.get_text() for t in ax.texts if t.get_text().startswith("events:"))
        assert "1 blackhole spine0-leaf0" in key.replace("\n", " ")
    else:
        assert not numbered, "a few events keep their words"


def test_smoothing_caption_without_averaging():
    assert plots.smoothing_caption(1, 1e-4) == "100 µs bins"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.00075, "750 µs"),
        (0.017, "17 ms"),
        (0.5, "500 ms"),
        (2.5, "2.5 s"),
        (125, "2 min 5 s"),
        (7384, "2 h 3 min"),
        (0.0009997, "1 ms"),
        (3e-8, "30 ns"),
    ],
)
def test_durations_in_units_that_fit(seconds, text):
    assert durations.fmt_duration(seconds) == text


@pytest.mark.parametrize("scale", SCALES)
def test_goodput_band_caption_and_trailing_median(monkeypatch, scale):
    from testbed.analysis import spread_plots

    kept = {}
    monkeypatch.setattr(spread_plots, "_finish", lambda fig, path: kept.setdefault("fig", fig))
    bin_s, n, t_step, unit, bin_text, window_text = SCALES[scale]
    runs = [step_series(bin_s, n, t_step) for _ in range(3)]
    spread_plots.plot_goodput_band({"mrc": runs}, "band.png")
    ax = kept["fig"].axes[0]
    assert f"trailing {window_text} average of {bin_text} bins" in ax.get_title()
    assert ax.get_xlabel().endswith(f"({unit})")
    size = dict(durations.UNITS)[unit]
    xs, ys = ax.get_lines()[0].get_xdata(), ax.get_lines()[0].get_ydata()
    assert all(y == 100.0 for x, y in zip(xs, ys, strict=True) if x * size <= t_step + 1e-12)
    import matplotlib.pyplot as plt

    plt.close(kept["fig"])


@pytest.mark.parametrize(
    ("steps_ms", "unit", "p50"),
    [
        ([0.041, 0.042, 0.043, 0.05], "µs", "P50 42 µs"),
        ([157.0, 160.0, 161.0, 205.0], "ms", "P50 160 ms"),
    ],
)
def test_step_cdf_counts_in_the_steps_unit(figures, steps_ms, unit, p50):
    plots.plot_step_cdf({"mrc": steps_ms}, "c.png")
    ax = figures["c.png"].axes[0]
    assert ax.get_xlabel() == f"step time ({unit})"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(p50 in t for t in legend), legend
