"""summary.json's `trace` object from hand-made rank records: what held each iteration back."""

from __future__ import annotations

from testbed.analysis.report import _held_by_cell
from testbed.analysis.trace_report import trace_summary
from testbed.harness.records import Failure


def _iter(rank, start, end, path, compute, it=0, total=None, waited=None):
    return {"rank": rank, "iteration": it, "start": start, "end": end, "critical_path": path,
            "critical_compute_s": compute, "critical_comm_s": end - start - compute,
            "compute_s": compute if total is None else total, "waited_for": waited}  # fmt: skip


def _node(rank, name, start, end, it=0):
    return {"rank": rank, "iteration": it, "name": name, "kind": "collective", "start": start,
            "end": end, "bytes": 1, "host": f"h{rank + 1}"}  # fmt: skip


def test_a_member_that_came_late_is_the_straggler_and_not_the_network():
    # Ranks 0 and 1 reach the all-reduce at 1 ms; rank 1 computed until 3 ms. Rank 0 ends last.
    iters = [_iter(0, 0, 3.2e-3, ["c", "ar"], 1e-3), _iter(1, 0, 3.1e-3, ["c", "ar"], 3e-3)]
    nodes = [_node(0, "ar", 1e-3, 3.2e-3), _node(1, "ar", 3e-3, 3.1e-3)]
    (it,) = trace_summary(iters, nodes)["iterations"]
    assert it["held_by"] == "straggler" and it["straggler_rank"] == 1 and it["slowest_rank"] == 0
    assert it["critical_ms"] == {"compute": 1.0, "waiting": 2.0, "network": 0.2}
    assert it["ms"] == 3.2


def test_a_slow_collective_is_the_network():
    iters = [_iter(0, 0, 5e-3, ["c", "ar"], 1e-3), _iter(1, 0, 4.9e-3, ["c", "ar"], 1e-3)]
    nodes = [_node(0, "ar", 1e-3, 5e-3), _node(1, "ar", 1e-3, 4.9e-3)]
    s = trace_summary(iters, nodes)
    (it,) = s["iterations"]
    assert it["held_by"] == "network" and it["waited_for"] == "ar" and it["straggler_rank"] is None
    assert s["collectives"] == {"ar": {"count": 1, "p50": 4.0, "p100": 4.0}}


def test_the_slowest_rank_computing_longer_than_its_peers_is_a_straggler_itself():
    iters = [_iter(0, 0, 1.05e-3, ["c", "ar"], 0.5e-3), _iter(1, 0, 1.3e-3, ["c", "ar"], 1.2e-3)]
    nodes = [_node(0, "ar", 0.5e-3, 1.05e-3), _node(1, "ar", 1.2e-3, 1.3e-3)]
    (it,) = trace_summary(iters, nodes)["iterations"]
    assert it["held_by"] == "straggler" and it["straggler_rank"] == 1


def test_a_member_the_network_made_late_is_not_a_straggler():
    # Rank 1 computed as much as rank 0 (1 ms in all) but reached the all-reduce "ar2" late:
    # its earlier collective "ar1" took 2 ms. Rank 0 waited in ar2 for it: the network's doing.
    iters = [
        _iter(0, 0, 4.2e-3, ["c", "ar2"], 1e-3, total=1e-3, waited="ar2"),
        _iter(1, 0, 4.1e-3, ["c", "ar1", "ar2"], 1e-3, total=1e-3, waited="ar1"),
    ]
    nodes = [_node(0, "ar2", 1e-3, 4.2e-3), _node(1, "ar1", 1e-3, 3e-3),
             _node(1, "ar2", 3e-3, 4.1e-3), _node(0, "ar1", 0.5e-3, 1e-3)]  # fmt: skip
    (it,) = trace_summary(iters, nodes)["iterations"]
    assert it["held_by"] == "network" and it["straggler_rank"] is None, it
    assert it["waited_for"] == "ar1" and it["slow_ranks"] == []


def _ring(n, t0, t1):
    """n ranks in one all-reduce "ar" from t0 to t1 (the network held it)."""
    iters = [_iter(r, 0, t1, ["c", "ar"], t0, waited="ar") for r in range(n)]
    return iters, [_node(r, "ar", t0, t1 - r * 1e-6) for r in range(n)]


def test_the_link_most_failed_round_trips_share_is_named():
    iters, nodes = _ring(4, 1e-3, 3e-3)
    paths = {  # (host, peer, ev): the links of its round trip
        ("h1", "h3", 7): {("leaf1", "spine1"), ("leaf2", "spine1")},
        ("h2", "h4", 9): {("leaf1", "spine2"), ("leaf2", "spine1")},
        ("h4", "h1", 5): {("leaf2", "spine1"), ("leaf1", "spine1")},
        ("h9", "h1", 5): {("leaf9", "spine9")},  # not a member of the collective: not counted
    }
    failures = [Failure(h, p, ev, 2e-3) for h, p, ev in paths]
    failures.append(Failure("h1", "h2", 3, 5e-3))  # after the collective ended: not counted
    s = trace_summary(iters, nodes, failures, lambda f: paths[(f.host, f.peer, f.ev)])
    (it,) = s["iterations"]
    assert it["held_by"] == "network" and it["link"] == "leaf2-spine1", it
    assert it["link_evidence"] == {"connections": 3, "evs": 3} and it["link_collective"] == "ar"
    # Two links equally suspect: no link is named rather than a guess.
    tie = {k: {("leaf1", "spine1"), ("leaf2", "spine1")} for k in paths}
    (it,) = trace_summary(iters, nodes, failures, lambda f: tie[(f.host, f.peer, f.ev)])[
        "iterations"
    ]
    assert it["link"] is None and it["waited_for"] == "ar"


def test_the_table_cell_counts_causes_and_names_the_slowest():
    trace = {"iterations": [
        {"ms": 1.0, "held_by": "compute", "waited_for": None, "straggler_rank": None},
        {"ms": 2.0, "held_by": "network", "waited_for": "mlp1.wg.allreduce", "straggler_rank": None},
    ]}  # fmt: skip
    assert _held_by_cell(trace) == "compute 1, network 1; slowest: mlp1.wg.allreduce"
    trace["iterations"][1]["link"] = "leaf2-spine1"
    assert _held_by_cell(trace).endswith("slowest: mlp1.wg.allreduce (link leaf2-spine1)")
    assert _held_by_cell(None) == "—"


def test_the_timeline_draws_every_rank_and_marks_the_failure(tmp_path):
    import matplotlib.image
    import numpy as np

    from testbed.analysis.trace_plots import plot_iteration_timeline

    iters = [_iter(r, k * 1e-3, (k + 1) * 1e-3, [], 0, it=k) for r in range(4) for k in range(3)]
    nodes = [_node(r, f"L0.{p}.allreduce", k * 1e-3 + 0.1e-3 * (j + 1), k * 1e-3 + 0.1e-3 * (j + 1.5), it=k)
             for r in range(4) for k in range(3) for j, p in enumerate(("fwd", "ig", "wg"))]  # fmt: skip
    held = {"iteration": 1, "ms": 1.0, "held_by": "compute", "waited_for": "L0.ig.allreduce",
            "link": "leaf2-spine1", "link_collective": "L0.wg.allreduce"}  # fmt: skip

    def colours(held):
        img = matplotlib.image.imread(plot_iteration_timeline(
            iters, nodes, tmp_path / "t.png", events=[(1.5e-3, "blackhole spine1-leaf2")],
            held=held,
        ))  # fmt: skip
        return img, pixel_colours(img)

    def pixel_colours(img) -> set[tuple[int, ...]]:
        """Every pixel's (R, G, B) in 0-255 (numpy's unique rows, not a loop per pixel)."""
        rgb = (img[:, :, :3] * 255).round().astype(int).reshape(-1, 3)
        return {tuple(c) for c in np.unique(rgb, axis=0).tolist()}

    def near(colour, seen):
        return any(sum(abs(a - b) for a, b in zip(c, colour, strict=True)) < 12 for c in seen)

    # The collective that held the slowest iteration is outlined in red; without it, no red.
    red = (0xD6, 0x27, 0x28)
    img, seen = colours([held])
    assert near(red, seen) and not near(red, colours([])[1])
    assert img.shape[0] > 100 and img.shape[1] > 500
    # The three phase colours are drawn (forward blue, input gradient orange, weight green).
    rgb = pixel_colours(img[:, ::3])
    for colour in ((0x4C, 0x72, 0xB0), (0xDD, 0x84, 0x52), (0x55, 0xA8, 0x68)):
        assert any(sum(abs(a - b) for a, b in zip(c, colour, strict=True)) < 12 for c in rgb), (
            colour
        )
