"""Trace workloads: the ASTRA-sim text format read into the per-rank graph, and the graph's
checks, each failing with one line that names the file, the rank or line, the node and the field.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from contracts.trace import COLLECTIVE, COMPUTE, RECV, SEND, Node, TraceError, TraceGraph, validate
from testbed.scenario.astra_text import read_astra_text

TRACES = Path(__file__).resolve().parent.parent / "scenarios" / "traces"
ROW = "L{i} -1 1000 {f} {fs} 2000 {g} {gs} 3000 {w} {ws} 50"


def _write(tmp_path: Path, header: str, rows: list[str], count: int | None = None) -> Path:
    p = tmp_path / "w.txt"
    p.write_text("\n".join([header, str(len(rows) if count is None else count), *rows]) + "\n")
    return p


def _row(i=0, f="NONE", fs=0, g="NONE", gs=0, w="ALLREDUCE", ws=4096) -> str:
    return ROW.format(i=i, f=f, fs=fs, g=g, gs=gs, w=w, ws=ws)


@pytest.mark.parametrize("name", ["dp-transformer", "hybrid-tp-dp", "moe"])
def test_the_shipped_examples_parse_on_sixteen_ranks(name):
    g = read_astra_text(TRACES / f"{name}.txt", 16, "ns")
    assert g.ranks == 16 and all(len(nodes) == len(g.nodes[0]) for nodes in g.nodes)
    for comm, posts in g.collectives().items():
        assert sorted(r for r, _ in posts) == sorted(g.groups[posts[0][1].group]), comm


def test_a_data_parallel_iteration_overlaps_gradient_allreduces_with_the_backward_pass(tmp_path):
    p = _write(tmp_path, "DATA", [_row(0), _row(1)])
    g = read_astra_text(p, 4, "us")
    nodes = {n.name: n for n in g.nodes[2]}
    by_id = {n.id: n for n in g.nodes[2]}
    # Forward: L0 then L1; backward from L1: ig, wg, then L0's ig waits for L1's wg compute
    # only, not for L1's all-reduce, which runs beside it; each update waits for its collective.
    assert [by_id[d].name for d in nodes["L1.fwd"].deps] == ["L0.fwd"]
    assert [by_id[d].name for d in nodes["L1.ig"].deps] == ["L1.fwd"]
    assert [by_id[d].name for d in nodes["L0.ig"].deps] == ["L1.wg"]
    assert [by_id[d].name for d in nodes["L1.wg.allreduce"].deps] == ["L1.wg"]
    assert [by_id[d].name for d in nodes["L1.update"].deps] == ["L1.wg.allreduce"]
    assert nodes["L1.fwd"].duration_s == pytest.approx(1000e-6)
    assert nodes["L1.update"].duration_s == pytest.approx(50e-6)
    ar = nodes["L1.wg.allreduce"]
    assert ar.kind == COLLECTIVE and ar.nbytes == 4096 and g.groups[ar.group] == (0, 1, 2, 3)


def test_hybrid_groups_are_megatron_s_layout(tmp_path):
    p = _write(
        tmp_path,
        "HYBRID_TRANSFORMER model_parallel_NPU_group: 4 all_gpus: 8",
        [_row(0, f="ALLREDUCE", fs=64, g="ALLGATHER", gs=128)],
    )
    g = read_astra_text(p, 8, "cycles", cycle_ghz=2.0, algorithms={"allreduce": "tree"})
    r5 = {n.name: n for n in g.nodes[5]}
    assert g.groups[r5["L0.fwd.allreduce"].group] == (4, 5, 6, 7)  # tensor parallel: consecutive
    assert g.groups[r5["L0.wg.allreduce"].group] == (1, 5)  # data parallel: same TP position
    assert r5["L0.fwd.allreduce"].algorithm == "tree" and r5["L0.ig.allgather"].algorithm == ""
    assert r5["L0.fwd"].duration_s == pytest.approx(1000 / 2e9)  # cycles at 2 GHz


def test_expert_groups(tmp_path):
    p = _write(
        tmp_path,
        "HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 2",
        [_row(0, f="ALLTOALL_EP", fs=64, w="ALLREDUCE_DP_EP", ws=32)],
    )
    g = read_astra_text(p, 8, "ns")
    r3 = {n.name: n for n in g.nodes[3]}  # tp position 1, data-parallel index 1
    assert g.groups[r3["L0.fwd.alltoall"].group] == (1, 3)
    assert g.groups[r3["L0.wg.allreduce"].group] == (3, 7)


@pytest.mark.parametrize(
    ("header", "rows", "count", "ranks", "message"),
    [
        ("PIPELINE", [_row()], None, 4, "line 1: policy: one of DATA, MODEL, HYBRID_TRANSFORMER"),
        ("DATA", [_row(), _row(1)], 3, 4, "line 2: 3 layers declared, 2 found"),
        ("DATA", ["L0 -1 1000 NONE 0 2000"], None, 4, "line 3 (L0): expected 12 fields, got 6"),
        ("DATA", [_row(w="BROADCAST")], None, 4, "line 3 (L0): wg type: one of NONE, ALLREDUCE"),
        ("DATA", [_row(f="ALLREDUCE", fs=8)], None, 4, "line 3 (L0): fwd type: DATA runs only"),
        ("DATA", [_row().replace("1000", "1e3")], None, 4, "line 3 (L0): fwd compute: expected"),
        ("DATA all_gpus: 16", [_row()], None, 8, "line 1: all_gpus: 16 in the file, the workload"),
        ("HYBRID_TRANSFORMER model_parallel_NPU_group: 3", [_row()], None, 8, "line 1: model_par"),
        ("HYBRID_TRANSFORMER pp: 2", [_row()], None, 8, "line 1: pp: pipeline parallelism"),
        ("DATA ep", [_row()], None, 8, "line 1: expected 'key: value' pairs, got 'ep'"),
    ],
)
def test_malformed_files_fail_with_one_line_naming_line_and_field(
    tmp_path, header, rows, count, ranks, message
):
    p = _write(tmp_path, header, rows, count)
    with pytest.raises(TraceError) as err:
        read_astra_text(p, ranks, "ns")
    text = str(err.value)
    assert text.startswith(f"{p}: {message}"), text
    assert "\n" not in text


def test_units_and_missing_files(tmp_path):
    with pytest.raises(TraceError, match=r"^time_unit: one of ns, us, ms, cycles, got 's'$"):
        read_astra_text(TRACES / "moe.txt", 16, "s")
    with pytest.raises(TraceError, match=r"^cycle_ghz: a clock in GHz > 0 to read cycles"):
        read_astra_text(TRACES / "moe.txt", 16, "cycles")
    with pytest.raises(TraceError, match=r"nope.txt: cannot read: No such file"):
        read_astra_text(tmp_path / "nope.txt", 16, "ns")


# ----- the graph's own checks (any format) ------------------------------------------------------


def _graph(*ranks: list[Node], groups=None) -> TraceGraph:
    return TraceGraph(
        "t.et", len(ranks), groups or {"g": tuple(range(len(ranks)))}, tuple(map(tuple, ranks))
    )


def _coll(i, comm="c1", deps=(), nbytes=64) -> Node:
    return Node(
        i, f"n{i}", COLLECTIVE, deps, collective="allreduce", group="g", comm=comm, nbytes=nbytes
    )


def test_a_valid_graph_passes():
    a = [
        Node(0, "c", COMPUTE, duration_s=1e-6),
        _coll(1, deps=(0,)),
        Node(2, "s", SEND, (1,), peer=1, nbytes=8, tag=7),
    ]
    b = [_coll(0), Node(1, "r", RECV, (0,), peer=0, nbytes=8, tag=7)]
    assert validate(_graph(a, b)).ranks == 2


@pytest.mark.parametrize(
    ("ranks", "message"),
    [
        (
            ([Node(0, "a", COMPUTE, (1,)), Node(1, "b", COMPUTE, (0,))], [Node(0, "x", COMPUTE)]),
            "t.et: rank 0 node 0 (a): deps: a dependency cycle",
        ),
        (
            ([Node(0, "a", COMPUTE, (5,))], [Node(0, "x", COMPUTE)]),
            "t.et: rank 0 node 0 (a): deps: no node 5",
        ),
        (
            ([_coll(0)], [Node(0, "x", COMPUTE)]),
            "t.et: collective c1 (n0) on g: rank 1 never posts it",
        ),
        (
            ([_coll(0)], [_coll(0, nbytes=32)]),
            "t.et: rank 1 node 0 (n0): bytes: 32 where rank 0 has 64",
        ),
        (
            ([Node(0, "s", SEND, peer=1, nbytes=8, tag=1)], [Node(0, "x", COMPUTE)]),
            "t.et: rank 0 node 0 (s): peer: rank 1 never posts the receive of this send (tag 1)",
        ),
        (
            ([Node(0, "x", COMPUTE)], [Node(0, "r", RECV, peer=0, nbytes=8, tag=2)]),
            "t.et: rank 1 node 0 (r): peer: rank 0 never posts the send this receive waits for",
        ),
        (
            ([Node(0, "s", SEND, peer=1, nbytes=8)], [Node(0, "r", RECV, peer=0, nbytes=9)]),
            "t.et: rank 1 node 0 (r): bytes: 9 where the send from rank 0 has 8",
        ),
        (
            ([replace(_coll(0), collective="bcast")], [_coll(0)]),
            "t.et: rank 0 node 0 (n0): collective: one of",
        ),
        (
            ([replace(_coll(0), group="h")], [_coll(0)]),
            "t.et: rank 0 node 0 (n0): group: no group named 'h'",
        ),
        (
            ([Node(0, "a", COMPUTE), Node(0, "b", COMPUTE)], [Node(0, "x", COMPUTE)]),
            "t.et: rank 0 node 0 (b): id: used twice",
        ),
    ],
)
def test_graphs_that_would_deadlock_or_never_finish_are_refused(ranks, message):
    with pytest.raises(TraceError) as err:
        validate(_graph(*ranks))
    assert str(err.value).startswith(message), str(err.value)


# ----- as a scenario's workload -----------------------------------------------------------------


def _scenario(tmp_path: Path, workload: dict, transport="mrc") -> Path:
    import yaml

    p = tmp_path / "sc.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "topology": {"spines": 2, "leaves": 4, "hosts_per_leaf": 4, "link_mbps": 100000},
                "transport": transport,
                "workload": {"kind": "trace", "time_unit": "ns", **workload},
                "duration_s": 0.05,
            }
        )
    )
    return p


def test_a_scenario_finds_its_trace_beside_it_and_its_traffic_comes_from_the_schedules(tmp_path):
    from testbed.scenario import flows, load_scenario, quick, total_bytes

    (tmp_path / "w.txt").write_text((TRACES / "hybrid-tp-dp.txt").read_text())
    sc = load_scenario(_scenario(tmp_path, {"file": "w.txt", "iterations": 4}))
    assert sc.workload.file == str(tmp_path / "w.txt")
    fl = {(f.src, f.dst): f.bytes for f in flows(sc)}
    # Tensor parallel: 8 all-reduces of 64 KiB per iteration in rings of 4 (the hosts of a
    # leaf): 2 x 3/4 x 64 KiB each per hop. Data parallel: 1.5 MiB of gradients in rings of 4.
    assert fl[("h1", "h2")] == 8 * 2 * 3 * 65536 // 4
    assert fl[("h1", "h5")] == 2 * 3 * (2 * 262144 + 2 * 524288) // 4
    assert total_bytes(sc) == 4 * sum(fl.values())
    assert quick(sc).workload.iterations == 1


@pytest.mark.parametrize(
    ("workload", "transport", "path", "reason"),
    [
        ({"file": "nope.txt"}, "mrc", "workload.file", "cannot read"),
        ({"file": "moe.txt"}, "tcp", "workload.kind", "tcp is a kernel transport"),
        (
            {"file": "moe.txt", "time_unit": "cycles"},
            "mrc",
            "workload.cycle_ghz",
            "needs the clock",
        ),
        (
            {"file": "moe.txt", "stragglers": {"h99": 2}},
            "mrc",
            "workload.stragglers.h99",
            "no host named h99",
        ),
        (
            {"file": "moe.txt", "hosts": ["h1", "h2"]},
            "mrc",
            "workload.file",
            "all_gpus: 16 in the file",
        ),
    ],
)
def test_a_bad_trace_scenario_fails_before_anything_is_built(
    tmp_path, workload, transport, path, reason
):
    from testbed.scenario import ScenarioError, load_scenario

    (tmp_path / "moe.txt").write_text((TRACES / "moe.txt").read_text())
    with pytest.raises(ScenarioError) as err:
        load_scenario(_scenario(tmp_path, workload, transport))
    assert any(i.path == path and reason in i.reason for i in err.value.issues), str(err.value)


# ----- Chakra execution traces ------------------------------------------------------------------


def _semantics(g: TraceGraph) -> list:
    """What a run depends on, per rank: each node's kind, dependencies, duration, collective,
    bytes, peer and tag, and its collective's members (ids of instances may differ)."""
    out = []
    for nodes in g.nodes:
        out.append(
            [
                (
                    n.id,
                    n.kind,
                    n.deps,
                    round(n.duration_s * 1e6),
                    n.collective,
                    n.nbytes,
                    g.groups.get(n.group),
                    n.peer,
                    n.tag,
                )  # fmt: skip
                for n in nodes
            ]
        )
    return out


def test_the_shipped_chakra_example_reads_as_the_text_trace_it_was_written_from():
    from testbed.scenario.chakra import read_chakra

    text = read_astra_text(TRACES / "moe.txt", 16, "ns")
    chakra = read_chakra(TRACES / "chakra" / "moe", 16)
    assert _semantics(chakra) == _semantics(text)
    assert chakra.meta == {"format": "chakra", "version": "0.0.4"}


def test_chakra_round_trip_with_point_to_point_and_every_collective(tmp_path):
    from testbed.scenario.chakra import read_chakra, write_chakra

    nodes = [
        Node(0, "c", COMPUTE, duration_s=12e-6),
        Node(1, "ar", COLLECTIVE, (0,), collective="allreduce", group="all", comm="x", nbytes=64),
        Node(2, "ag", COLLECTIVE, (1,), collective="allgather", group="all", comm="y", nbytes=8),
        Node(
            3, "rs", COLLECTIVE, (1,), collective="reducescatter", group="all", comm="z", nbytes=8
        ),
        Node(4, "a2a", COLLECTIVE, (2, 3), collective="alltoall", group="all", comm="w", nbytes=8),
    ]
    p2p = [
        (Node(5, "s", SEND, (4,), peer=1, nbytes=100, tag=9),),
        (Node(5, "r", RECV, (4,), peer=0, nbytes=100, tag=9),),
    ]
    g = TraceGraph("t", 2, {"all": (0, 1)}, (tuple(nodes) + p2p[0], tuple(nodes) + p2p[1]))
    write_chakra(validate(g), tmp_path / "job")
    back = read_chakra(tmp_path / "job", 2)
    assert _semantics(back) == _semantics(g)


def _chakra_files(tmp_path: Path, node_attrs: dict, ranks: int = 2) -> Path:
    from testbed.scenario.chakra import COMM_COLL_NODE, _types, _varint

    meta_t, node_t, attr_t = _types()
    for r in range(ranks):
        n = node_t(id=1, name="x", type=COMM_COLL_NODE)
        for k, v in node_attrs.items():
            n.attr.append(attr_t(name=k, int64_val=v))
        recs = [meta_t(version="0.0.4").SerializeToString(), n.SerializeToString()]
        (tmp_path / f"t.{r}.et").write_bytes(b"".join(_varint(len(b)) + b for b in recs))
    return tmp_path / "t"


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"comm_type": 5, "comm_size": 8}, "node 1 (x): comm_type: BROADCAST is not run here"),
        ({"comm_type": 0}, "node 1 (x): comm_size: missing (the bytes it moves)"),
    ],
)
def test_a_chakra_node_this_reader_cannot_run_is_named(tmp_path, attrs, message):
    from testbed.scenario.chakra import read_chakra

    prefix = _chakra_files(tmp_path, attrs)
    with pytest.raises(TraceError) as err:
        read_chakra(prefix, 2)
    assert str(err.value) == f"{prefix}.0.et: {message}" + (
        " (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL are)"
        if "BROADCAST" in message
        else ""
    )


def test_missing_and_truncated_chakra_files(tmp_path):
    from testbed.scenario.chakra import read_chakra

    prefix = _chakra_files(tmp_path, {"comm_type": 0, "comm_size": 8})
    with pytest.raises(TraceError, match=r"t\.2\.et: rank 2: no such file \(one file per rank\)$"):
        read_chakra(prefix, 3)
    data = (tmp_path / "t.1.et").read_bytes()
    (tmp_path / "t.1.et").write_bytes(data[:-3])
    with pytest.raises(
        TraceError, match=r"t\.1\.et: byte \d+: a record of \d+ bytes runs past the end$"
    ):
        read_chakra(prefix, 2)


def test_a_chakra_scenario_loads(tmp_path):
    import shutil

    from testbed.scenario import flows, load_scenario

    shutil.copytree(TRACES / "chakra", tmp_path / "chakra")
    p = _scenario(tmp_path, {"file": "chakra/moe", "format": "chakra", "time_unit": None})
    text = p.read_text().replace("  time_unit: null\n", "")
    p.write_text(text)
    sc = load_scenario(p)
    assert sc.workload.format == "chakra" and len(flows(sc)) > 0
