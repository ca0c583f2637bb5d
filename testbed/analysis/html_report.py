"""report.html: one self-contained page per run, repeated run or sweep, readable offline.

report.md is for a repository and a terminal; report.html is for a browser, a mail attachment or
a CI artifact: the plots are inside it (base64 data URIs), its style and its one small script
(sortable tables) are inline, and its Content-Security-Policy forbids every fetch, so the file
reads the same with no network and with the results folder gone. It shows the verdict first
(valid or not, with the reasons, and which expectations failed), then the headline table, the
plots with their captions, the detail tables and, last, the scenario as it ran.

The rows are report.md's (`testbed.analysis.report`'s table functions; a repeated run's or a
sweep's headline table is handed in by the experiment layer, which builds it for sweep.md and
report.md too), so the two reports never disagree. Every string from a summary or a scenario is
escaped.

The page records its own errors: a script at the top of <head> counts every uncaught error,
failed load, blocked fetch and `console.error` into the `data-console-errors` attribute of
<html>, which a headless browser's `--dump-dom` shows (tests/test_html_report.py).
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.analysis.metrics import TransportMetrics
from testbed.analysis.report import (
    EXPECTATION_HEADER,
    HEALTH_HEADER,
    LOAD_HEADER,
    TIMELINE_HEADER,
    comparison_rows,
    expectation_rows,
    health_rows,
    load_row,
    timeline_rows,
    validity_notes,
)
from testbed.scenario import Scenario

HTML_REPORT = "report.html"

# No fetch of any kind: an image is a data URI or nothing. A link to a sibling report is a
# navigation, which this policy leaves alone.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
_IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}

# Before anything else on the page, so that nothing fails unrecorded.
_ERROR_TRAP = """(function () {
  var root = document.documentElement, seen = [];
  root.setAttribute("data-console-errors", "0");
  function note(text) {
    seen.push(String(text));
    root.setAttribute("data-console-errors", String(seen.length));
    root.setAttribute("data-console-error-text", seen.join(" | "));
  }
  window.addEventListener("error", function (e) {
    var t = e.target;
    note(e.message || "failed to load " + ((t && (t.src || t.href)) || "a resource"));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { note("rejected: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    note("blocked by the page's policy: " + e.blockedURI);
  });
  var error = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, " "));
    return error.apply(console, arguments);
  };
})();"""

# Click (or Enter on) a header to sort by that column; again to reverse. Cells that start with a
# number sort as numbers, before cells that do not ("—", "never"), which sort as text.
_SORT = """(function () {
  function key(cell) {
    var s = cell.textContent.trim(), m = s.match(/^-?\\d+(\\.\\d+)?(e[-+]?\\d+)?/i);
    return m ? [0, parseFloat(m[0]), s] : [1, 0, s];
  }
  function sort(table, col, th) {
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x[0] !== y[0]) return x[0] - y[0];
      if (x[0] === 0 && x[1] !== y[1]) return dir * (x[1] - y[1]);
      return dir * x[2].localeCompare(y[2]);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "sort by this column";
      th.addEventListener("click", function () { sort(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter") sort(table, col, th);
      });
    });
  });
  document.documentElement.setAttribute("data-sortable-tables", String(tables.length));
})();"""

_STYLE = """
:root { --bad: #b00020; --good: #1b5e20; --warn: #8a5300; --line: #d0d4d9; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2327;
  margin: 0 auto; padding: 1rem 1.5rem 3rem; max-width: 1200px; }
h1 { font-size: 1.6rem; margin: .4rem 0 .6rem; }
h2 { font-size: 1.2rem; margin: 1.6rem 0 .5rem; border-bottom: 1px solid var(--line); }
.verdict { border: 2px solid var(--line); border-radius: 6px; padding: .4rem 1rem .6rem; }
.verdict.pass { border-color: var(--good); background: #f1f8f1; }
.verdict.fail { border-color: var(--bad); background: #fdf2f3; }
.verdict h2 { border: 0; margin: .3rem 0; }
.badge { display: inline-block; padding: .05rem .55rem; border-radius: 4px; color: #fff;
  font-weight: 600; margin-right: .4rem; }
.badge.good { background: var(--good); } .badge.bad { background: var(--bad); }
.badge.warn { background: var(--warn); }
.note.invalid, .note.none, .note.drops { color: var(--bad); }
table { border-collapse: collapse; margin: .4rem 0 .8rem; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: .25rem .6rem; text-align: left;
  vertical-align: top; }
thead th { background: #eef1f4; }
table.sortable thead th { cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.bad { color: var(--bad); font-weight: 600; }
figure { margin: .6rem 0 1.4rem; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { font-style: italic; margin-top: .2rem; }
pre { background: #f6f8fa; border: 1px solid var(--line); padding: .6rem; overflow-x: auto;
  font-size: 13px; }
.muted { color: #5f6b76; }
"""

_BAD_WORDS = re.compile(r"\bFAIL|\bINVALID\b|^never$|^no$")


def _inline(text: str) -> str:
    """A Markdown-flavoured string of report.md's as HTML: escaped, `**x**` bold, `x` code."""
    out = html.escape(str(text))
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    table_id: str | None = None,
    links: Mapping[int, Sequence[str | None]] | None = None,
) -> str:
    """A sortable table. `links` maps a column to one relative link per row (None: no link)."""
    ident = f' id="{html.escape(table_id)}"' if table_id else ""
    head = "".join(f"<th>{_inline(h)}</th>" for h in header)
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            plain = str(cell).replace("**", "")
            cls = ' class="bad"' if _BAD_WORDS.search(plain) else ""
            inner = _inline(cell)
            column = (links or {}).get(c)
            href = column[r] if column else None
            if href:
                inner = f'<a href="{html.escape(href)}">{inner}</a>'
            cells.append(f"<td{cls}>{inner}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _table_section(
    section_id: str,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    **table: Any,
) -> list[str]:
    """A titled section holding one table (`table`: `_table`'s table_id and links)."""
    return [f'<section id="{section_id}"><h2>{title}</h2>', _table(header, rows, **table),
            "</section>"]  # fmt: skip


def _figure(caption: str, path: str | Path, out_dir: Path | None) -> str:
    """A plot inlined as a data URI; a PDF (no browser shows one in <img>) as a relative link."""
    path = Path(path)
    kind = _IMAGE_TYPES.get(path.suffix.lower())
    cap = f"<figcaption>{html.escape(caption)}</figcaption>"
    if kind is None or not path.is_file():
        rel = os.path.relpath(path, out_dir) if out_dir is not None else str(path)
        why = "not found" if not path.is_file() else f"{path.suffix[1:].upper()}, not shown inline"
        return (
            f'<figure><p><a href="{html.escape(Path(rel).as_posix())}">'
            f'{html.escape(path.name)}</a> <span class="muted">({why})</span></p>{cap}</figure>'
        )
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img src="data:{kind};base64,{data}" alt="{html.escape(caption)}">{cap}</figure>'
    )


def _plots(plots: Mapping[str, str | Path] | None, out_dir: Path | None) -> list[str]:
    if not plots:
        return []
    return [
        '<section id="plots"><h2>Plots</h2>',
        *(_figure(c, p, out_dir) for c, p in plots.items()),
        "</section>",
    ]


def _scenario_text(summary: Mapping[str, Any], scenario: Scenario | None) -> str | None:
    """The scenario as it ran (after --quick and a sweep point's values), as YAML."""
    if scenario is not None:
        data: Any = scenario.model_dump(mode="json", exclude_none=True)
    else:
        data = summary.get("provenance", {}).get("scenario")
    if not data:
        return None
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _badge(text: str, kind: str) -> str:
    return f'<span class="badge {kind}">{html.escape(text)}</span>'


def _verdict(
    valid: bool | None, passed: bool, notes: Sequence[tuple[str, str]], lines: Sequence[str]
) -> str:
    """The box that opens the page: validity and expectations as badges, then why."""
    badges = (
        _badge("VALID", "good")
        if valid
        else _badge("INVALID" if valid is False else "NO VERDICT", "bad")
    ) + (_badge("EXPECTATIONS MET", "good") if passed else _badge("EXPECTATIONS NOT MET", "bad"))
    out = [
        f'<section id="verdict" class="verdict {"pass" if valid and passed else "fail"}">',
        f"<h2>Verdict: {badges}</h2>",
    ]
    out += [f'<p class="note {html.escape(kind)}">{_inline(text)}</p>' for kind, text in notes]
    if lines:
        out += ["<ul>", *(f"<li>{line}</li>" for line in lines), "</ul>"]
    return "\n".join(out + ["</section>"])


def _run_body(
    summary: Mapping[str, Any],
    scenario: Scenario | None,
    metrics: Mapping[str, TransportMetrics] | None,
    plots: Mapping[str, str | Path] | None,
    judged: Sequence[str] | None,
    out_dir: Path | None,
) -> list[str]:
    names, rows = comparison_rows(summary, metrics)
    judged = list(judged) if judged is not None else names
    verdicts = dict(rows).get("expectations", [])
    lines = [
        f"<strong>{html.escape(n)}</strong>"
        + ("" if n in judged else ' <span class="muted">(not judged)</span>')
        + f": expectations {_inline(v)}"
        for n, v in zip(names, verdicts, strict=False)
    ]
    lines += [
        f"<strong>{html.escape(t)}</strong> not run: {html.escape(str(why))}"
        for t, why in summary.get("skipped", {}).items()
    ]
    passed = all(
        summary["transports"][t]["expectations"]["passed"]
        for t in judged
        if t in summary["transports"]
    )
    out = [
        _verdict(summary.get("emulation", {}).get("valid"), passed, validity_notes(summary), lines)
    ]
    out += [
        '<section id="side-by-side"><h2>Side by side</h2>',
        _table(["metric", *names], [[label, *cells] for label, cells in rows], table_id="compare"),
        '<p class="muted">goodput: delivered bytes over the active period, in parentheses as a '
        "share of the ideal-multipath bottleneck; max stall: longest time with data outstanding "
        "and nothing delivered; failover: from the failure until goodput is back at 90% of its "
        "pre-failure level (report.md and docs/scenario-format.md say more).</p></section>",
    ]
    out += _plots(plots, out_dir)
    checks = expectation_rows(summary)
    out += ['<section id="expectations"><h2>Expectations</h2>']
    out.append(
        _table(EXPECTATION_HEADER, checks)
        if checks
        else "<p>The scenario sets no expectations.</p>"
    )
    out.append("</section>")
    events = timeline_rows(summary)
    out += ['<section id="timeline"><h2>Timeline as applied</h2>']
    out.append(
        _table(TIMELINE_HEADER, events)
        if events
        else "<p>No events: the fabric stayed healthy.</p>"
    )
    out.append("</section>")
    health = health_rows(summary)
    out += ['<section id="health"><h2>Emulation health</h2>']
    if health:
        out.append(_table(HEALTH_HEADER, health))
    out += [_table(LOAD_HEADER, [load_row(summary)]), "</section>"]
    return out


def _repeated_body(
    summary: Mapping[str, Any],
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None,
    plots: Mapping[str, str | Path] | None,
    judged: Sequence[str] | None,
    out_dir: Path | None,
) -> list[str]:
    rep = summary["repetitions"]
    block = summary["transports"]
    judged = list(judged) if judged is not None else list(block)
    emu = summary.get("emulation", {})
    lines = []
    for t, s in block.items():
        e = s["expectations"]
        failed = [c["name"] for c in e["checks"] if not c["passed"]]
        lines.append(
            f"<strong>{html.escape(t)}</strong>"
            + ("" if t in judged else ' <span class="muted">(not judged)</span>')
            + f": {s['valid_runs']} of {s['runs']} runs valid; expectations on the "
            f"{html.escape(str(e['statistic']))}: "
            + ("pass" if e["passed"] else _inline("**FAIL** " + ", ".join(failed)))
        )
    notes = (
        [("invalid", "**INVALID**: " + "; ".join(emu.get("invalid_reasons", [])) + ".")]
        if not emu.get("valid")
        else []
    )
    passed = all(block[t]["expectations"]["passed"] for t in judged if t in block)
    out = [_verdict(emu.get("valid"), passed, notes, lines)]
    out.append(
        f"<p>Seeds {html.escape(', '.join(map(str, rep['seeds'])))}. Each cell: the median of "
        f"the valid runs [{rep['confidence']:.0%} confidence interval of that median, "
        f"{html.escape(rep['interval'])}] (n = valid runs that measured it). Invalid runs are "
        "left out of every statistic.</p>"
    )
    if table is not None:
        out += _table_section(
            "medians", "Side by side: medians and intervals", *table, table_id="compare"
        )
    out += _plots(plots, out_dir)
    runs = rep["runs"]
    out += _table_section(
        "runs",
        "Runs",
        ["run", "seed", "time dilation", "valid", "expectations"],
        [[r["dir"], str(r["seed"]), str(r["time_dilation"]), *_judged(r)] for r in runs],
        links={0: [f"{r['dir']}/{HTML_REPORT}" for r in runs]},
    )
    return out


def _judged(entry: Mapping[str, Any]) -> list[str]:
    """The valid and expectations cells of a run's or a point's row."""
    return ["yes" if entry["valid"] else "**no**", "pass" if entry["passed"] else "FAIL"]


def _sweep_body(
    summary: Mapping[str, Any],
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None,
    plots: Mapping[str, str | Path] | None,
    out_dir: Path | None,
) -> list[str]:
    points = summary["points"]
    emu = summary.get("emulation", {})
    passed = sum(1 for p in points if p["passed"])
    lines = [f"{passed} of {len(points)} points met their expectations"]
    lines += [
        f"point {p['index']} ({html.escape(p['dir'])}): "
        + ", ".join(
            ([] if p["valid"] else ["<strong>INVALID</strong>"])
            + ([] if p["passed"] else ["<strong>expectations not met</strong>"])
        )
        for p in points
        if not (p["valid"] and p["passed"])
    ]
    notes = (
        [
            (
                "invalid",
                "**INVALID points** (their figures are the machine's, not the network's): "
                + "; ".join(emu.get("invalid_reasons", [])),
            )
        ]
        if not emu.get("valid")
        else []
    )
    out = [_verdict(emu.get("valid"), passed == len(points), notes, lines)]
    out.append(
        "<p>Each cell: the median of the point's valid runs [95 % interval of the median] (n). "
        "A point's own report holds its full results.</p>"
    )
    if table is not None:
        out += _table_section(
            "points-table", "Side by side: every point", *table, table_id="compare"
        )
    out += _plots(plots, out_dir)
    keys = list(summary["sweep"])
    out += _table_section(
        "points",
        "Points",
        ["point", *keys, "valid", "expectations"],
        [[p["dir"], *(str(p["values"].get(k)) for k in keys), *_judged(p)] for p in points],
        links={0: [f"{p['dir']}/{HTML_REPORT}" for p in points]},
    )
    return out


def render_html_report(
    summary: Mapping[str, Any],
    *,
    scenario: Scenario | None = None,
    metrics: Mapping[str, TransportMetrics] | None = None,
    plots: Mapping[str, str | Path] | None = None,
    judged: Sequence[str] | None = None,
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None,
    out_dir: str | Path | None = None,
) -> str:
    """The page for a run's summary.json, a repeated run's (it has `repetitions`) or a sweep's
    sweep.json (it has `points`). `table` is a repeated run's or a sweep's headline table as
    (header, rows); `judged` the transports whose expectations decide the verdict (all if
    None); `plots` maps a caption to a PNG or SVG (inlined) or a PDF (linked)."""
    where = Path(out_dir) if out_dir is not None else None
    name = str(summary.get("scenario", "results"))
    if "points" in summary:
        title = f"{name}: sweep over {', '.join(summary['sweep'])}"
        body = _sweep_body(summary, table, plots, where)
    elif "repetitions" in summary:
        title = f"{name}: {summary['repetitions']['n']} repetitions"
        body = _repeated_body(summary, table, plots, judged, where)
    else:
        title = name
        body = _run_body(summary, scenario, metrics, plots, judged, where)
    intro = []
    if scenario is not None and scenario.description.strip():
        intro.append(f"<p>{html.escape(scenario.description.strip())}</p>")
    facts = [f"started {summary.get('started', '?')}"]
    if summary.get("seed") is not None:
        facts.append(f"seed {summary['seed']}")
    commit = summary.get("provenance", {}).get("commit")
    if commit:
        facts.append(f"commit {commit}")
    intro.append(f'<p class="muted">{html.escape("; ".join(facts))}</p>')
    text = _scenario_text(summary, scenario)
    tail = (
        [
            '<section id="scenario"><h2>Scenario as run</h2>',
            f'<pre id="scenario-text">{html.escape(text)}</pre>',
            "</section>",
        ]
        if text
        else []
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            f"<script>{_ERROR_TRAP}</script>",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            f"<h1>{html.escape(title)}</h1>",
            *intro,
            *body,
            *tail,
            f"<script>{_SORT}</script>",
            "</body>",
            "</html>",
        ]
    )


def write_html_report(
    out_dir: str | Path,
    summary: Mapping[str, Any],
    *,
    scenario: Scenario | None = None,
    metrics: Mapping[str, TransportMetrics] | None = None,
    plots: Mapping[str, str | Path] | None = None,
    judged: Sequence[str] | None = None,
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None,
) -> Path:
    """Write out_dir/report.html (render_html_report) and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / HTML_REPORT
    path.write_text(
        render_html_report(
            summary,
            scenario=scenario,
            metrics=metrics,
            plots=plots,
            judged=judged,
            table=table,
            out_dir=out_dir,
        ),  # fmt: skip
        encoding="utf-8",
    )
    return path
