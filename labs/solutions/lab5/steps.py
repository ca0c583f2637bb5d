"""Lab 5 (solution): the slowest packet decides -- step times of a ring all-reduce.

Every rank of an all-reduce step needs every other rank's data, so a step ends when the *last*
rank has the result: one late packet on one ring hop delays the whole job. The endpoints log,
for each rank and each step, when the rank started and finished it (`rank_steps` in
`raw/<transport>/job_status.json` of a results folder). Then:

    testbed lab check 5 --unit-only
    .venv/bin/python labs/lab5-slowest-packet/report.py     # table and plot from results/

Only the standard library.
"""

from __future__ import annotations

import math


def step_times(rank_steps: list[dict]) -> list[tuple[float, float]]:
    """(start, end) of every step, in step order.

    `rank_steps` holds one record per rank and step, in any order:
    {"step": k, "rank": r, "start": seconds, "end": seconds}. Step k starts when its first rank
    starts it and ends when its last rank finishes it. Steps are numbered 0, 1, 2, ...
    """
    by_step: dict[int, list[dict]] = {}
    for r in rank_steps:
        by_step.setdefault(r["step"], []).append(r)
    return [
        (min(r["start"] for r in by_step[k]), max(r["end"] for r in by_step[k]))
        for k in sorted(by_step)
    ]


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile, 0 < p <= 100: the ceil(p / 100 * n)-th smallest value.

    Every result is a real measured value: P100 is the maximum, P50 of [4, 1, 3, 2] is 2.
    """
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def during(steps: list[tuple[float, float]], t0: float, t1: float) -> list[int]:
    """Indices of the steps that overlap the interval [t0, t1) (e.g. a failure): a step
    overlaps it if it started before t1 and ended after t0."""
    return [i for i, (start, end) in enumerate(steps) if start < t1 and end > t0]


def p_step_hit(loss_pct: float, packets: int) -> float:
    """Probability that at least one of `packets` packets is lost when each is lost
    independently with probability loss_pct / 100."""
    return 1.0 - (1.0 - loss_pct / 100.0) ** packets
