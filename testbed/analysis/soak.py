"""What a soak run shows, judged (pure): exactly-once accounting, flat memory, every failure in
the log, and the emulation's validity stretch by stretch.

`testbed.experiment.soak` runs the soak and hands in what it measured; these functions turn it
into the numbers of `summary.json` and the pass/fail of each check, so tests can feed them
made-up measurements and see each check fail.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.analysis.validity import Thresholds, Timing, judge

RSS_TOLERANCE = 0.05  # +-5 % of the reference minute
RSS_FROM_S = 300.0  # memory is judged from minute 5: before it, caches and buffers fill up
RSS_MIN_SPAN_S = 120.0  # at least two whole minutes after RSS_FROM_S, or the check does not apply

# ----- exactly once ------------------------------------------------------------------------------


def accounting(statuses: Mapping[str, Mapping[str, dict]], jobs: Mapping[str, str]) -> dict:
    """Exactly-once accounting of every job, from each host's final job statuses.

    `statuses`: host -> job id (str) -> the endpoint's job status (`Job.status()`: its
    `ledger` per peer, `crc_failures`, `bad_messages`). `jobs`: job id -> name. For each
    direction (src -> dst) of each job: what src's application posted, what dst's application
    was handed; lost = posted and never delivered, duplicates = handed up a second time.
    """
    out: dict[str, Any] = {}
    totals = dict.fromkeys(
        ("sent_messages", "sent_bytes", "delivered_messages", "delivered_bytes", "lost_messages",
         "lost_bytes", "duplicates", "duplicate_bytes", "crc_failures", "bad_messages"), 0,
    )  # fmt: skip
    for job_id, name in jobs.items():
        pairs = []
        job_tot = dict.fromkeys(totals, 0)
        for src, by_job in sorted(statuses.items()):
            st = by_job.get(job_id, {})
            job_tot["crc_failures"] += int(st.get("crc_failures", 0))
            job_tot["bad_messages"] += int(st.get("bad_messages", 0))
            for dst, sent in sorted(st.get("ledger", {}).items()):
                if not sent.get("posted_messages"):
                    continue
                got = statuses.get(dst, {}).get(job_id, {}).get("ledger", {}).get(src, {})
                row = {
                    "src": src,
                    "dst": dst,
                    "sent_messages": sent["posted_messages"],
                    "sent_bytes": sent["posted_bytes"],
                    "delivered_messages": got.get("delivered_messages", 0),
                    "delivered_bytes": got.get("delivered_bytes", 0),
                    "duplicates": got.get("duplicates", 0),
                    "duplicate_bytes": got.get("duplicate_bytes", 0),
                }
                row["lost_messages"] = max(0, row["sent_messages"] - row["delivered_messages"])
                row["lost_bytes"] = max(0, row["sent_bytes"] - row["delivered_bytes"])
                pairs.append(row)
                for k in totals:
                    if k in row:
                        job_tot[k] += row[k]
        out[name] = {"job": int(job_id), **job_tot, "pairs": pairs}
        for k in totals:
            totals[k] += job_tot[k]
    return {"total": totals, "jobs": out}


# ----- memory --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RssSample:
    t_s: float  # seconds since the workload started (real)
    process: str  # "switch spine1", "endpoint h3"
    rss_kb: int


def read_rss_kb(pid: int) -> int | None:
    """VmRSS of a live process, kB (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_per_window(samples: Iterable[RssSample], window_s: float = 60.0) -> dict[str, list]:
    """process -> [mean RSS kB of window 0, 1, ...] (None where it had no sample)."""
    acc: dict[str, dict[int, list[int]]] = {}
    last = 0
    for s in samples:
        k = int(s.t_s // window_s)
        last = max(last, k)
        acc.setdefault(s.process, {}).setdefault(k, []).append(s.rss_kb)
    return {
        p: [round(statistics.fmean(w[k])) if k in w else None for k in range(last + 1)]
        for p, w in sorted(acc.items())
    }


def rss_check(
    samples: Sequence[RssSample],
    run_s: float,
    dead: Iterable[str] = (),
    from_s: float = RSS_FROM_S,
    tolerance: float = RSS_TOLERANCE,
    window_s: float = 60.0,
) -> dict[str, Any]:
    """Is every process's memory flat from `from_s` on? Each window's mean RSS must stay
    within +-`tolerance` of the first window at `from_s` (the reference). Applies only when
    the run went on at least RSS_MIN_SPAN_S past `from_s`; processes that died during the
    run (`dead`: a killed switch) are left out, and named."""
    dead = set(dead)
    applies = run_s >= from_s + RSS_MIN_SPAN_S
    first = int(from_s // window_s)
    per = rss_per_window(samples, window_s)
    procs: dict[str, Any] = {}
    passed = True
    for p, means in per.items():
        if p in dead:
            procs[p] = {"skipped": "died during the run"}
            continue
        tail = [m for m in means[first:] if m is not None]
        # A window at the end may be partial: judged as well (it is a mean of real samples).
        if not applies or not tail:
            procs[p] = {"first_kb": means[0], "last_kb": next(
                (m for m in reversed(means) if m is not None), None)}  # fmt: skip
            continue
        ref = tail[0]
        worst = max(tail, key=lambda m: abs(m - ref))
        dev = (worst - ref) / ref if ref else math.inf
        ok = abs(dev) <= tolerance
        passed &= ok
        procs[p] = {"reference_kb": ref, "worst_kb": worst,
                    "worst_deviation_pct": round(100 * dev, 2), "passed": ok}  # fmt: skip
    return {
        "applies": applies,
        "passed": passed if applies else None,
        "from_s": from_s,
        "tolerance_pct": 100 * tolerance,
        "window_s": window_s,
        "why_not": None
        if applies
        else f"run of {run_s:.0f}s is shorter than {from_s + RSS_MIN_SPAN_S:.0f}s",
        "processes": procs,
        "per_window_kb": per,
    }


# ----- failures in the log --------------------------------------------------------------------------


def failures_logged(log: Sequence[dict], planned: int, deaths: Iterable[str]) -> dict[str, Any]:
    """Every planned failure/repair has a log entry saying it was applied (with a time) or why
    not; every switch process that died has a `switch-process-died` entry."""
    logged = [e for e in log if e.get("source") == "schedule"]
    unexplained = [e for e in logged if e.get("applied_at") is None and not e.get("error")]
    died = {e["node"] for e in log if e.get("action") == "switch-process-died"}
    missing_deaths = sorted(set(deaths) - died)
    ok = len(logged) == planned and not unexplained and not missing_deaths
    return {
        "passed": ok,
        "planned": planned,
        "logged": len(logged),
        "applied": sum(1 for e in logged if e.get("applied_at") is not None),
        "not_applied": sum(1 for e in logged if e.get("applied_at") is None),
        "unexplained": len(unexplained),
        "switch_deaths": sorted(died),
        "missing_deaths": missing_deaths,
    }


# ----- validity, stretch by stretch -----------------------------------------------------------------


def _kind(reason: str) -> str:
    """What a validity reason is about (its words before the first number): a stretch names
    each kind of breach once, as its first window measured it."""
    return re.split(r"\d", reason, maxsplit=1)[0]


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    timing: Timing


def stretches(windows: Sequence[Window], limits: Thresholds) -> dict[str, Any]:
    """Each window judged as a run is (`testbed.analysis.validity.judge`), consecutive windows
    of the same verdict merged: a long run is rarely valid or invalid as a whole, and "the
    machine was busy from minute 12 to 14" is worth more than one INVALID."""
    out: list[dict[str, Any]] = []
    for w in windows:
        v = judge(w.timing, limits)
        if out and out[-1]["valid"] == v.valid:
            out[-1]["end_s"] = w.end_s
            kinds = {_kind(r) for r in out[-1]["reasons"]}
            out[-1]["reasons"] += [r for r in v.reasons if _kind(r) not in kinds]
            continue
        out.append({"start_s": w.start_s, "end_s": w.end_s, "valid": v.valid,
                    "reasons": list(v.reasons)})  # fmt: skip
    invalid = [s for s in out if not s["valid"]]
    return {
        "valid": bool(windows) and not invalid,  # no window judged: no verdict, invalid
        "windows": len(windows),
        "invalid_s": round(sum(s["end_s"] - s["start_s"] for s in invalid), 1),
        "stretches": [
            {**s, "start_s": round(s["start_s"], 1), "end_s": round(s["end_s"], 1)} for s in out
        ],  # fmt: skip
    }


# ----- the verdict -----------------------------------------------------------------------------------


def verdict(summary: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """(passed, what failed): 0 lost, 0 duplicates, 0 bad checksums (transport crc or the
    application's own check), RSS flat where the check applies, every failure logged."""
    why = []
    tot = summary["accounting"]["total"]
    if tot["lost_bytes"] or tot["lost_messages"]:
        why.append(f"{tot['lost_bytes']} bytes ({tot['lost_messages']} messages) lost")
    if tot["duplicates"]:
        why.append(f"{tot['duplicates']} messages delivered twice")
    if tot["crc_failures"] or tot["bad_messages"]:
        why.append(
            f"{tot['crc_failures']} messages failed their crc32, "
            f"{tot['bad_messages']} failed the application's check"
        )
    if tot["sent_messages"] == 0:
        why.append("no message was sent: nothing was tested")
    rss = summary["rss"]
    if rss["applies"] and not rss["passed"]:
        bad = [p for p, r in rss["processes"].items() if r.get("passed") is False]
        why.append(f"RSS not within +-{rss['tolerance_pct']:g} %: {', '.join(bad)}")
    fl = summary["failures"]
    if not fl["passed"]:
        why.append(
            f"failure log incomplete: {fl['logged']} of {fl['planned']} planned events, "
            f"{fl['unexplained']} without time or reason, deaths missing {fl['missing_deaths']}"
        )
    return not why, why
