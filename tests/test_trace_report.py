"""summary.json's `trace` object from hand-made rank records: what held each iteration back."""

from __future__ import annotations

from testbed.analysis.report import _held_by_cell
from testbed.analysis.trace_report import trace_summary


def _iter(rank, start, end, path, compute, it=0):
    return {"rank": rank, "iteration": it, "start": start, "end": end, "critical_path": path,
            "critical_compute_s": compute, "critical_comm_s": end - start - compute}  # fmt: skip


def _node(rank, name, start, end, it=0):
    return {"rank": rank, "iteration": it, "name": name, "kind": "collective", "start": start,
            "end": end, "bytes": 1}  # fmt: skip


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


def test_the_table_cell_counts_causes_and_names_the_slowest():
    trace = {"iterations": [
        {"ms": 1.0, "held_by": "compute", "waited_for": None, "straggler_rank": None},
        {"ms": 2.0, "held_by": "network", "waited_for": "mlp1.wg.allreduce", "straggler_rank": None},
    ]}  # fmt: skip
    assert _held_by_cell(trace) == "compute 1, network 1; slowest: mlp1.wg.allreduce"
    assert _held_by_cell(None) == "—"


def test_the_timeline_draws_every_rank_and_marks_the_failure(tmp_path):
    import matplotlib.image

    from testbed.analysis.trace_plots import plot_iteration_timeline

    iters = [_iter(r, k * 1e-3, (k + 1) * 1e-3, [], 0, it=k) for r in range(4) for k in range(3)]
    nodes = [_node(r, f"L0.{p}.allreduce", k * 1e-3 + 0.1e-3 * (j + 1), k * 1e-3 + 0.1e-3 * (j + 1.5), it=k)
             for r in range(4) for k in range(3) for j, p in enumerate(("fwd", "ig", "wg"))]  # fmt: skip
    path = plot_iteration_timeline(
        iters, nodes, tmp_path / "t.png", events=[(1.5e-3, "blackhole spine1-leaf2")]
    )
    img = matplotlib.image.imread(path)
    assert img.shape[0] > 100 and img.shape[1] > 500
    # The three phase colours are drawn (forward blue, input gradient orange, weight green).
    rgb = {
        tuple((img[y, x, :3] * 255).round().astype(int))
        for y in range(img.shape[0])
        for x in range(0, img.shape[1], 3)
    }
    for colour in ((0x4C, 0x72, 0xB0), (0xDD, 0x84, 0x52), (0x55, 0xA8, 0x68)):
        assert any(sum(abs(a - b) for a, b in zip(c, colour, strict=True)) < 12 for c in rgb), (
            colour
        )
