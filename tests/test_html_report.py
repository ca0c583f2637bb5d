"""report.html: one self-contained page per run, repeated run and sweep, checked as text and in a
headless Chromium (Debian's `chromium`, installed by scripts/setup.sh).

The browser test keeps its screenshot (and the page) under $TESTBED_ARTIFACTS when that is set
(CI uploads it), else in the test's tmp_path, and prints where."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.analysis.html_report import HTML_REPORT, render_html_report, write_html_report
from testbed.analysis.metrics import AppliedEvent, measure
from testbed.analysis.plots import TRANSPORT_COLOURS, event_marks, plot_run
from testbed.experiment import repetitions
from testbed.experiment.runner import Progress
from testbed.scenario import validate
from tests.test_repetitions import BASE, fake_outcome
from tests.test_report import SCENARIO, runs, summary_of
from tests.test_sweep import GRAY

HOSTILE = 'Ring all-reduce <script>alert("x")</script> & friends'


def _results(tmp_path: Path, *, description: str = SCENARIO["description"], plots: bool = True):
    """A run's results folder without a fabric: summary, real plots (plot_run), report.html."""
    sc = validate({**SCENARIO, "description": description})
    applied = [AppliedEvent(sc.events[0], 1.0012), AppliedEvent(sc.events[1], None)]
    metrics = {n: measure(r, sc, applied) for n, r in runs(sc).items()}
    summary = summary_of(sc, metrics, applied)
    summary["emulation"].update(valid=True, time_dilation=2, real_s=12, virtual_s=6)
    made = plot_run(tmp_path, metrics, events=event_marks(applied), title=sc.name) if plots else {}
    path = write_html_report(
        tmp_path, summary, scenario=sc, metrics=metrics, plots=made, judged=["mrc"]
    )
    return path, summary, sc, metrics


@pytest.fixture(scope="module")
def plotted(tmp_path_factory) -> Path:
    """One run's report.html with real plots (drawing them takes seconds: shared, read only)."""
    where = tmp_path_factory.mktemp("results")
    path, *_ = _results(where)
    assert path == where / HTML_REPORT
    return path


def test_verdict_then_table_then_plots_then_scenario(plotted):
    path = plotted
    page = path.read_text(encoding="utf-8")
    order = [page.index(f'id="{i}"') for i in ("verdict", "compare", "plots", "scenario")]
    assert order == sorted(order)
    verdict = page[order[0] : order[1]]
    assert "VALID" in verdict and "EXPECTATIONS MET" in verdict  # only mrc is judged
    assert "single-path" in verdict and "(not judged)" in verdict and "delivered_all" in verdict
    # report.md's side-by-side rows, in a sortable table.
    assert '<table class="sortable" id="compare">' in page
    compare = page[order[1] : order[2]]
    for label in ("goodput (Mbps)", "max stall (ms)", "failover (ms)", "expectations"):
        assert f"<td>{label}</td>" in compare
    assert "<figcaption>Goodput over time</figcaption>" in page
    assert "Timeline as applied" in page and "blackhole spine1–leaf2" in page


def test_self_contained_images_inline_and_no_url_to_fetch(plotted):
    path = plotted
    page = path.read_text(encoding="utf-8")
    srcs = re.findall(r'\bsrc="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r"https?://", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_everything_from_the_scenario_is_escaped(tmp_path):
    path, _, sc, _ = _results(tmp_path, description=HOSTILE, plots=False)
    page = path.read_text(encoding="utf-8")
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; friends" in page
    shown = page[page.index('<pre id="scenario-text">') :]
    assert "name: allreduce-under-failure" in shown and "&lt;script&gt;" in shown
    assert "max_failover_ms: 100" in shown  # the scenario as it ran, expectations included


def test_an_invalid_run_says_so_first_and_plots_not_shown_inline_are_linked(tmp_path):
    _, summary, sc, metrics = _results(tmp_path, plots=False)
    summary["emulation"].update(valid=False, invalid_reasons=["switch timer late P99 900 µs"])
    (tmp_path / "ports_mrc.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "step_cdf.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    page = render_html_report(
        summary, scenario=sc, metrics=metrics, out_dir=tmp_path,
        plots={"Switch ports": tmp_path / "ports_mrc.pdf", "Gone": tmp_path / "gone.png",
               "Step-time CDF": tmp_path / "step_cdf.svg"},
    )  # fmt: skip
    verdict = page[page.index('id="verdict"') : page.index('id="compare"')]
    assert "INVALID" in verdict and "switch timer late P99 900 µs" in verdict
    assert "EXPECTATIONS NOT MET" in verdict  # nothing named as judged: every transport is
    assert '<a href="ports_mrc.pdf">ports_mrc.pdf</a>' in page and "PDF, not shown inline" in page
    assert 'gone.png</a> <span class="muted">(not found)' in page
    assert '<img src="data:image/svg+xml;base64,' in page  # an SVG plot is inlined like a PNG


def _quiet() -> Progress:
    return Progress(stream=io.StringIO())


def test_a_repeated_run_has_its_own_page(tmp_path, monkeypatch):
    sc = validate(dict(BASE, seeds=[1, 2, 3], expect={"min_goodput_fraction": 0.6}))
    made = iter(
        [
            fake_outcome(tmp_path / "rep-01", {"mrc": 90, "tcp": 60}),
            fake_outcome(tmp_path / "rep-02", {"mrc": 10, "tcp": 10}, valid=False),
            fake_outcome(tmp_path / "rep-03", {"mrc": 80, "tcp": 40}),
        ]
    )
    monkeypatch.setattr(repetitions, "run_scenario", lambda *a, **kw: next(made))
    repetitions.run_repeated(sc, [1, 2, 3], ["mrc", "tcp"], tmp_path, progress=_quiet())
    page = (tmp_path / HTML_REPORT).read_text(encoding="utf-8")
    assert page.index('id="verdict"') < page.index('id="compare"') < page.index('id="plots"')
    assert "EXPECTATIONS NOT MET" in page and "2 of 3 runs valid" in page
    assert "85 [80, 90, 50%] (n=2)" in page  # repeated_rows, as in report.md
    assert '<a href="rep-02/report.html">rep-02</a>' in page
    srcs = re.findall(r'\bsrc="([^"]*)"', page)
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)


def test_a_sweep_has_its_own_page(tmp_path, monkeypatch):
    sc = validate({**GRAY, "sweep": {"events[0].percent": [0, 2, 5]}})

    def run_scenario(point, transports, out, **kw):
        g = 90 - 10 * point.events[0].percent
        return fake_outcome(out, {"mrc": g, "tcp": g / 2}, valid=point.events[0].percent != 5)

    monkeypatch.setattr(repetitions, "run_scenario", run_scenario)
    repetitions.run_experiment(sc, ["mrc", "tcp"], tmp_path, progress=_quiet())
    page = (tmp_path / HTML_REPORT).read_text(encoding="utf-8")
    assert "sweep over events[0].percent" in page
    verdict = page[page.index('id="verdict"') : page.index('id="compare"')]
    assert "INVALID" in verdict and "point 3 (points/03-percent=5)" in verdict
    assert "<td>35 (n=1)</td>" in page  # sweep_rows, as in sweep.md
    assert '<a href="points/02-percent=2/report.html">' in page
    assert 'src="data:image/png;base64,' in page
    assert "events[0].percent" in page[page.index('id="scenario-text"') :]


# --------------------------------------------------------------------------- in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (scripts/setup.sh installs Debian's)"
)
WINDOW = (1280, 1600)  # tall enough for the verdict, the table and the goodput plot


def _open(page: Path, profile: Path, shot: Path) -> tuple[str, list[str]]:
    """Load `page` once in headless Chromium: screenshot it, return the DOM after its scripts ran
    and every console line Chromium logged (our pages log nothing, so any line is an error)."""
    proc = subprocess.run(
        [
            CHROMIUM, "--headless=new",
            "--no-sandbox",  # root cannot use the sandbox; the page is our own, under a CSP
            "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}", "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]


def _artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("TESTBED_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


@needs_chromium
def test_the_report_renders_in_chromium_without_console_errors(plotted, tmp_path):
    from PIL import Image

    page = plotted
    keep = _artifacts(tmp_path)
    shot = keep / "html_report.png"
    dom, console = _open(page, tmp_path / "profile", shot)
    shutil.copyfile(page, keep / "html_report.html")
    print(f"\nscreenshot: {shot}\npage: {keep / 'html_report.html'}")

    assert console == [], console
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-console-errors="0"' in root and "data-console-error-text" not in root, root
    assert re.search(r'data-sortable-tables="[1-9]', root)  # the table script ran
    assert re.search(r'<section id="verdict"[^>]*>\s*<h2>Verdict:', dom)
    assert '<table class="sortable" id="compare">' in dom
    assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="Goodput over time">', dom)

    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot is blank"
    # The goodput plot is inside the first screen: mrc's line colour is nowhere else on the page.
    mrc = tuple(int(TRANSPORT_COLOURS["mrc"][i : i + 2], 16) for i in (1, 3, 5))
    near = sum(n for n, c in colours if max(abs(a - b) for a, b in zip(c, mrc, strict=True)) < 13)
    assert near > 200, f"no goodput plot in {shot}"


@needs_chromium
def test_the_error_trap_sees_a_script_error_and_a_blocked_fetch(tmp_path):
    """The check above is not vacuous: a broken page is caught both ways."""
    page, *_ = _results(tmp_path, plots=False)
    broken = page.read_text(encoding="utf-8").replace(
        "</body>",
        '<img src="https://example.invalid/x.png"><script>no_such_function();</script></body>',
    )
    page.write_text(broken, encoding="utf-8")
    dom, console = _open(page, tmp_path / "profile", tmp_path / "broken.png")
    errors = re.search(r'data-console-errors="(\d+)"', dom)
    assert errors and int(errors.group(1)) >= 2, dom[:400]
    text = re.search(r'data-console-error-text="([^"]*)"', dom).group(1)
    assert "no_such_function" in text and "example.invalid" in text
    assert any("no_such_function" in ln for ln in console), console
