"""Lab 5: the slowest packet decides -- step times of a ring all-reduce.

Every rank of an all-reduce step needs every other rank's data, so a step ends when the *last*
rank has the result: one late packet on one ring hop delays the whole job. The endpoints log,
for each rank and each step, when the rank started and finished it (`rank_steps` in
`raw/<transport>/job_status.json` of a results folder). Fill in the four TODOs, then:

    testbed lab check 5 --unit-only
    .venv/bin/python labs/lab5-slowest-packet/report.py     # table and plot from results/

Only the standard library.
"""

from __future__ import annotations

import math  # noqa: F401 - TODO 2 needs it


def step_times(rank_steps: list[dict]) -> list[tuple[float, float]]:
    """(start, end) of every step, in step order.

    `rank_steps` holds one record per rank and step, in any order:
    {"step": k, "rank": r, "start": seconds, "end": seconds}. Step k starts when its first rank
    starts it and ends when its last rank finishes it. Steps are numbered 0, 1, 2, ...
    """
    # TODO 1: group the records by "step"; for each step in order, (min start, max end).
    raise NotImplementedError("TODO 1: step_times")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile, 0 < p <= 100: the ceil(p / 100 * n)-th smallest value.

    Every result is a real measured value: P100 is the maximum, P50 of [4, 1, 3, 2] is 2.
    """
    # TODO 2: sort, then index ceil(p / 100 * n) - 1 (math.ceil).
    raise NotImplementedError("TODO 2: percentile")


def during(steps: list[tuple[float, float]], t0: float, t1: float) -> list[int]:
    """Indices of the steps that overlap the interval [t0, t1) (e.g. a failure): a step
    overlaps it if it started before t1 and ended after t0."""
    # TODO 3
    raise NotImplementedError("TODO 3: during")


def p_step_hit(loss_pct: float, packets: int) -> float:
    """Probability that at least one of `packets` packets is lost when each is lost
    independently with probability loss_pct / 100."""
    # TODO 4: one minus the probability that all of them arrive.
    raise NotImplementedError("TODO 4: p_step_hit")
