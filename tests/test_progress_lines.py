"""Progress on long and dilated runs (issue 37): the status line counts in the unit that fits
the run and says real time, time left, N and the verdict so far; without a terminal a plain
line comes every PLAIN_EVERY_S of real time (a fake clock here), not of virtual time; event
lines show an on-time event as on time. Pure: a fake stream, a fake clock, no fabric."""

import io

import pytest

from contracts.clock import Clock
from testbed.experiment.monitor import Monitor
from testbed.experiment.progress import PLAIN_EVERY_S, Progress, status_text
from testbed.experiment.timeline import Timeline, event_line
from testbed.scenario import validate


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def plain(clock):
    stream = io.StringIO()
    return Progress(stream=stream, live=False, clock=clock), stream


def test_a_dilated_millisecond_run_counts_in_milliseconds():
    text = status_text(0.0042, 0.017, "blackhole spine1-leaf2 at 7.5 ms", 812.34, 1000)
    assert "t=4.2/17.0 ms" in text
    assert "real 4.2 s" in text and "~13 s left" in text and "(N=1000)" in text
    assert "goodput 812.3 Mbps" in text and text.endswith("next: blackhole spine1-leaf2 at 7.5 ms")
    # The old line: one decimal of a second, the same from start to end.
    assert status_text(0.0, 0.017, "—", None) != status_text(0.0169, 0.017, "—", None)


@pytest.mark.parametrize(
    ("elapsed", "duration", "dilation", "done", "real", "left"),
    [
        (0.0042, 0.017, 1000, "t=4.2/17.0 ms", "real 4.2 s", "~13 s left"),
        (0.000125, 0.0005, 20000, "t=125/500 µs", "real 2.5 s", "~7.5 s left"),
        (1.25, 5.0, 1, "t=1.25/5.00 s", "real 1.25 s", "~3.8 s left"),
        (0.5, 60.0, 100, "t=0.5/60.0 s", "real 50 s", "~1 h 39 min left"),
    ],
)
def test_status_units_fit_the_run(elapsed, duration, dilation, done, real, left):
    text = status_text(elapsed, duration, "—", None, dilation)
    assert done in text and real in text and left in text and f"(N={dilation:g})" in text


def test_the_verdict_so_far_is_on_the_line():
    text = status_text(
        0.001, 0.017, "—", 1.0, 1000, "FALLING BEHIND (timers late P99 40 µs > 12 µs)"
    )
    assert "FALLING BEHIND" in text


def test_plain_lines_come_every_few_real_seconds_whatever_virtual_time_does():
    clock = FakeClock()
    progress, stream = plain(clock)
    progress.begin("[mrc] fabric r1")
    for k in range(400):  # 100 real s of 0.25 s refreshes; 17 ms of virtual time at N = 5882
        progress.status(k * 0.017 / 400, 0.017, "—", 10.0, dilation=5882)
        clock.t += 0.25
    lines = stream.getvalue().splitlines()
    status = [line for line in lines if "t=" in line]
    assert lines[0] == "[mrc] fabric r1"
    assert len(status) == 100 / PLAIN_EVERY_S  # the first at once, then one per 10 real s
    assert status[0].startswith("  t=0.0/17.0 ms") and status[-1].startswith("  t=15.3/17.0 ms")


def test_a_new_run_prints_its_first_status_at_once():
    clock = FakeClock()
    progress, stream = plain(clock)
    progress.begin("a")
    progress.status(0.0, 1.0, "—", None)
    progress.end()
    clock.t += 1.0
    progress.begin("b")
    progress.status(0.0, 1.0, "—", None)
    assert sum("t=" in line for line in stream.getvalue().splitlines()) == 2


def test_status_keeps_its_old_positional_form():
    clock = FakeClock()
    progress, stream = plain(clock)
    progress.status(2.0, 10.0, "link-down spine1-leaf2 at 3 s", 5.0)
    assert "t=2.0/10.0 s" in stream.getvalue() and "(N=1)" in stream.getvalue()


@pytest.mark.parametrize(
    ("applied", "planned", "expect"),
    [
        (0.00075, 0.00075, "750 µs applied blackhole spine1-leaf2 (planned 750 µs; on time)"),
        (
            0.00075042,
            0.00075,
            "750.4 µs applied blackhole spine1-leaf2 (planned 750 µs; 420 ns late)",
        ),
        (2.0031, 2.0, "2.003 s  applied blackhole spine1-leaf2 (planned 2 s; 3.1 ms late)"),
        (0.01612, 0.016, "16.12 ms applied blackhole spine1-leaf2 (planned 16 ms; 120 µs late)"),
    ],
)
def test_event_lines_read_on_time_when_on_time(applied, planned, expect):
    line = event_line(applied, planned, "blackhole spine1-leaf2")
    assert line.strip() == expect


def test_the_next_event_is_named_in_the_runs_units():
    sc = validate(
        {
            "name": "x",
            "description": "d",
            "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1},
            "workload": {"kind": "allreduce", "bytes": "100KB", "steps": 3},
            "duration_s": 0.017,
            "events": [{"at": 0.00075, "action": "blackhole", "link": ["spine1", "leaf2"]}],
        }
    )
    timeline = Timeline("f", sc.timeline(), 0.0, Progress(stream=io.StringIO()), Clock())
    assert timeline.next_event() == "blackhole spine1-leaf2 at 750 µs"


def monitor(limit_us):
    return Monitor("f", 0.0, 1.0, Progress(stream=io.StringIO()), None, lambda: "—", Clock(),
                   late_limit_us=limit_us)  # fmt: skip


def test_the_monitor_judges_its_lateness_so_far():
    m = monitor(12.0)
    assert m.verdict_so_far() is None  # no sample yet
    for _ in range(200):
        m.late_hist.add(3.0)
    assert m.verdict_so_far().startswith("keeping up so far (timers late P99 3 µs <= 12 µs")
    for _ in range(10):
        m.late_hist.add(40.0)
    assert m.verdict_so_far().startswith("FALLING BEHIND (timers late P99 40 µs > 12 µs")
    assert monitor(None).verdict_so_far() is None  # no limit: no verdict on the line


def test_the_live_line_draws_on_the_progress_stream():
    """With --json progress goes to stderr: rich must not print the event lines to stdout."""
    stream = io.StringIO()
    progress = Progress(stream=stream, live=True)
    progress.begin("[mrc] fabric r1")
    progress.line("  750 µs applied blackhole spine1-leaf2 (planned 750 µs; on time)")
    progress.status(0.001, 0.017, "—", None, dilation=1000)
    progress.end()
    assert "applied blackhole" in stream.getvalue()


def test_live_goodput_is_a_closed_bins_rate_not_the_quarter_second_its_records_arrived(
    tmp_path,
) -> None:
    """Bins arrive once per bin (tens of real seconds apart at a high N) while the monitor
    samples four times a second: the rate is the bytes of a bin every receiver closed over the
    bin's width, whenever it is read."""
    import json

    from testbed.harness.endpoint_driver import LiveBytes

    dt = 130e-6
    files = [tmp_path / "h1.jsonl", tmp_path / "h2.jsonl"]
    live = LiveBytes(files)
    assert live.mbps() is None  # nothing written yet

    def write(f, t, placed):
        with open(f, "a") as out:
            out.write(json.dumps({"type": "bin", "t": t, "dt": dt, "placed": placed}) + "\n")

    write(files[0], 1.0, 6_500_000)
    write(files[1], 1.0, 6_500_000)
    assert live.mbps() is None  # one bin: it may still lack a receiver
    write(files[0], 1.0 + dt, 1_000)
    # 13 MB in 130 µs, however long after the records it is read
    assert live.mbps() == pytest.approx(13_000_000 * 8 / dt / 1e6)
    assert live.mbps() == pytest.approx(800_000.0)
    assert live.total == 13_001_000
    with open(files[1], "a") as out:
        out.write('{"type": "bin", "t": 1.0, "placed": 5}\n')  # no dt: skipped, no crash
    assert live.mbps() == pytest.approx(800_000.0)
    # Three more bins closed between two reads (N = 1: bins are short): their average, the
    # bin with no record at all counted as empty.
    write(files[0], 1.0 + dt, 3_249_000)  # the second bin, now 3.25 MB
    write(files[0], 1.0 + 3 * dt, 3_250_000)
    write(files[1], 1.0 + 4 * dt, 1)
    assert live.mbps() == pytest.approx(6_500_000 * 8 / (3 * dt) / 1e6)
