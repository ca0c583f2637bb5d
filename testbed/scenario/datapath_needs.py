"""What in a scenario only the Python data path can do (pure).

The compiled switch core (switch/core.py) forwards, queues, trims, marks, shapes and fails
links exactly as the Python path does, but it has no egress loss, no stochastic impairments
and no capture: those draw from the Python switch's own random generators or write from
Python (the differential test could not hold the two paths to the same bytes otherwise). A
run that needs one of them runs its switches in Python: chosen before anything is built, so
that a failure event never meets a switch that cannot apply it.
"""

from __future__ import annotations

PYTHON_ONLY_ACTIONS = {"loss": "egress loss", "impair": "impairments"}


def python_only_features(sc) -> list[str]:
    """One line per feature of `sc` (a validated Scenario) the compiled switch lacks, naming
    where it is in the file, e.g. ``events[2] (loss): egress loss``; empty if none."""
    out = []
    for i, ev in enumerate(sc.events):
        feature = PYTHON_ONLY_ACTIONS.get(ev.action)
        if feature is not None:
            out.append(f"events[{i}] ({ev.action}): {feature}")
    drawn = {e.action for e in sc.random_events()} - {e.action for e in sc.events}
    for action in sorted(drawn & set(PYTHON_ONLY_ACTIONS)):
        out.append(f"random_failures ({action}): {PYTHON_ONLY_ACTIONS[action]}")
    if sc.capture.enabled:
        out.append("capture: pcap capture")
    return out
