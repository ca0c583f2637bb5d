"""report.md of a soak: the verdict first, then each check with its numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _mb(kb: float | None) -> str:
    return "—" if kb is None else f"{kb / 1024:.1f}"


def soak_markdown(summary: dict[str, Any], log: list[dict]) -> str:
    s = summary
    tot = s["accounting"]["total"]
    lines = [
        f"# Soak: {s['scenario']} ({s['transport']}, {s['minutes']:g} min, seed {s['seed']})",
        "",
        f"**{'PASSED' if s['passed'] else 'FAILED'}**"
        + ("" if s["passed"] else ": " + "; ".join(s["failed_checks"])),
        "",
        f"{s['run_s']:.0f} s of traffic at time dilation {s['time_dilation']:g}, "
        f"{s['switch_processes']} switch processes; all-reduce steps finished: "
        f"{s['traffic']['allreduce']['steps_finished']}.",
        "",
        "## Exactly once",
        "",
        "| job | sent msgs | sent bytes | delivered msgs | delivered bytes | lost bytes "
        "| duplicates | crc failures | bad messages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, j in [*s["accounting"]["jobs"].items(), ("**total**", tot)]:
        lines.append(
            f"| {name} | {j['sent_messages']} | {j['sent_bytes']} | {j['delivered_messages']} | "
            f"{j['delivered_bytes']} | {j['lost_bytes']} | {j['duplicates']} | "
            f"{j['crc_failures']} | {j['bad_messages']} |"
        )
    if s["accounting"].get("note"):
        lines += ["", s["accounting"]["note"]]
    d = s["drain"]
    lines += [
        "",
        f"Drain: {'complete' if d['complete'] else 'INCOMPLETE'} in {d['real_s']} s "
        f"({d['unacked_messages']} messages unacknowledged at its end).",
        "",
        "## Failures",
        "",
    ]
    f = s["failures"]
    lines.append(
        f"{f['planned']} scheduled events (failures and repairs), {f['applied']} applied, "
        f"{f['not_applied']} not applied (each with its reason below); switch processes that "
        f"died: {', '.join(f['switch_deaths']) or 'none'}. Log complete: "
        f"{'yes' if f['passed'] else 'NO'}."
    )
    lines += ["", "| planned s | applied s | event | note |", "|---:|---:|---|---|"]
    for e in log:
        what = e.get("what") or f"{e['action']} {e.get('node', '')}"
        note = e.get("error") or e.get("how", "")
        if e.get("seen_by_neighbours"):
            note += f"; neighbours see a {e['seen_by_neighbours']}"
        applied = "—" if e.get("applied_at") is None else f"{e['applied_at']:.3f}"
        lines.append(f"| {e['at']:.3f} | {applied} | {what} | {note} |")
    r = s["rss"]
    lines += ["", "## Memory (RSS)", ""]
    if r["applies"]:
        lines.append(
            f"Every process within ±{r['tolerance_pct']:g} % of its mean at minute "
            f"{r['from_s'] / 60:g}: **{'yes' if r['passed'] else 'NO'}**."
        )
    else:
        lines.append(f"The ±{r['tolerance_pct']:g} % check does not apply: {r['why_not']}.")
    win = r["window_s"]
    per = r["per_window_kb"]
    n = max((len(v) for v in per.values()), default=0)
    lines += [
        "",
        f"Mean RSS (MB) per {win:g} s window:",
        "",
        "| process | " + " | ".join(str(k) for k in range(n)) + " | check |",
        "|---|" + "---:|" * n + "---|",
    ]
    for p, means in per.items():
        pr = r["processes"].get(p, {})
        check = pr.get("skipped") or (
            f"{pr['worst_deviation_pct']:+.1f} %" if "worst_deviation_pct" in pr else ""
        )
        lines.append(f"| {p} | " + " | ".join(_mb(m) for m in means) + f" | {check} |")
    e = s["emulation"]
    lines += [
        "",
        "## Validity, stretch by stretch",
        "",
        f"{e['windows']} windows judged; invalid for {e['invalid_s']} s in all.",
        "",
        "| from s | to s | verdict | why |",
        "|---:|---:|---|---|",
    ]
    for st in e["stretches"]:
        lines.append(
            f"| {st['start_s']} | {st['end_s']} | {'valid' if st['valid'] else 'INVALID'} | "
            f"{'; '.join(st['reasons'])} |"
        )
    mb = s.get("metrics_bytes", {})
    if mb:
        lines += [
            "",
            "Metrics files: " + ", ".join(f"{h} {n / 1e6:.2f} MB" for h, n in mb.items()) + ".",
        ]
    return "\n".join(lines) + "\n"


def write_soak_report(path: Path, summary: dict[str, Any], log: list[dict]) -> None:
    path.write_text(soak_markdown(summary, log))
