"""MLCommons Chakra execution traces, read into a trace graph (and written from one).

A Chakra execution trace is one file per rank, ``<prefix>.<rank>.et``: a stream of protobuf
messages, each preceded by its length as a varint -- a ``GlobalMetadata`` record, then the
rank's ``Node`` records. The message types are built here from the published schema's field
numbers (`et_def.proto` of mlcommons/chakra: names, numbers and enum values only) and decoded
with the `protobuf` package; fields this reader does not use (tensor I/O, storage) are skipped
as unknown fields, as protobuf does.

What becomes what:

| Chakra node | trace node |
|---|---|
| `COMP_NODE` | compute, `duration_micros` long |
| `COMM_COLL_NODE` (`comm_type` ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL; `comm_size` bytes; `pg_name` its process group, every rank if absent) | a collective |
| `COMM_SEND_NODE` / `COMM_RECV_NODE` (`comm_dst` / `comm_src`, `comm_size`, `comm_tag`) | a send / a receive |
| `METADATA_NODE`, `MEM_LOAD_NODE`, `MEM_STORE_NODE` | a step of no duration (its dependencies still order the graph) |

A node's dependencies are its `ctrl_deps` and `data_deps` together. A process group's members
are the ranks whose traces post a collective in it, in rank order (the ring's order); the k-th
collective of a group on one rank (in node id order) is the same instance as the k-th on every
other member.
"""

from __future__ import annotations

from pathlib import Path

from contracts.trace import COLLECTIVE, COMPUTE, RECV, SEND, Node, TraceError, TraceGraph, validate

METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE = 1, 2, 3
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
COMM_TYPES = {0: "allreduce", 2: "allgather", 6: "alltoall", 7: "reducescatter"}
"""CollectiveCommType values this reader runs (REDUCE, GATHER, SCATTER, BROADCAST, BARRIER and
REDUCE_SCATTER_BLOCK are refused by name)."""
COMM_TYPE_NAMES = {
    0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER", 5: "BROADCAST",
    6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER",
}  # fmt: skip

_messages: tuple | None = None


def _types():
    """(GlobalMetadata, Node, AttributeProto) message classes, built once from field numbers."""
    global _messages
    if _messages is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        f = descriptor_pb2.FieldDescriptorProto
        fd = descriptor_pb2.FileDescriptorProto(
            name="testbed_chakra_et_def.proto", package="ChakraProtoMsg", syntax="proto3"
        )

        def field(msg, name, number, kind, repeated=False, type_name=None, oneof=None):
            x = msg.field.add(name=name, number=number, type=kind)
            x.label = f.LABEL_REPEATED if repeated else f.LABEL_OPTIONAL
            if type_name:
                x.type_name = type_name
            if oneof is not None:
                x.oneof_index = oneof

        attr = fd.message_type.add(name="AttributeProto")
        attr.oneof_decl.add(name="value")
        field(attr, "name", 1, f.TYPE_STRING)
        field(attr, "doc_string", 2, f.TYPE_STRING)
        for name, number, kind in (
            ("double_val", 3, f.TYPE_DOUBLE), ("float_val", 5, f.TYPE_FLOAT),
            ("int32_val", 7, f.TYPE_INT32), ("int64_val", 9, f.TYPE_INT64),
            ("uint32_val", 11, f.TYPE_UINT32), ("uint64_val", 13, f.TYPE_UINT64),
            ("sint32_val", 15, f.TYPE_SINT32), ("sint64_val", 17, f.TYPE_SINT64),
            ("fixed32_val", 19, f.TYPE_FIXED32), ("fixed64_val", 21, f.TYPE_FIXED64),
            ("sfixed32_val", 23, f.TYPE_SFIXED32), ("sfixed64_val", 25, f.TYPE_SFIXED64),
            ("bool_val", 27, f.TYPE_BOOL), ("string_val", 29, f.TYPE_STRING),
            ("bytes_val", 31, f.TYPE_BYTES),
        ):  # fmt: skip
            field(attr, name, number, kind, oneof=0)
        meta = fd.message_type.add(name="GlobalMetadata")
        field(meta, "version", 1, f.TYPE_STRING)
        field(meta, "attr", 2, f.TYPE_MESSAGE, True, ".ChakraProtoMsg.AttributeProto")
        node = fd.message_type.add(name="Node")
        field(node, "id", 1, f.TYPE_UINT64)
        field(node, "name", 2, f.TYPE_STRING)
        field(node, "type", 3, f.TYPE_INT32)  # the NodeType enum, read as its number
        field(node, "ctrl_deps", 4, f.TYPE_UINT64, True)
        field(node, "data_deps", 5, f.TYPE_UINT64, True)
        field(node, "start_time_micros", 6, f.TYPE_UINT64)
        field(node, "duration_micros", 7, f.TYPE_UINT64)
        field(node, "attr", 10, f.TYPE_MESSAGE, True, ".ChakraProtoMsg.AttributeProto")
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        _messages = tuple(
            message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))
            for n in ("GlobalMetadata", "Node", "AttributeProto")
        )
    return _messages


def _records(path: Path) -> list[bytes]:
    """The length-delimited messages of one file."""
    data = path.read_bytes()
    out, i = [], 0
    while i < len(data):
        size = shift = 0
        while True:
            if i >= len(data) or shift > 63:
                raise TraceError(f"{path}: byte {i}: a record's length is cut short")
            b = data[i]
            i += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if i + size > len(data):
            raise TraceError(f"{path}: byte {i}: a record of {size} bytes runs past the end")
        out.append(data[i : i + size])
        i += size
    return out


def _attrs(node) -> dict:
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        out[a.name] = getattr(a, which) if which else None
    return out


def read_chakra(
    prefix: str | Path, ranks: int, algorithms: dict[str, str] | None = None
) -> TraceGraph:
    """Ranks 0..`ranks`-1 of the trace `<prefix>.<rank>.et` as one iteration; TraceError (one
    line naming the file, the node and the field) if it cannot run."""
    from google.protobuf.message import DecodeError

    meta_t, node_t, _ = _types()
    algorithms = algorithms or {}
    raw: list[list[tuple[object, dict]]] = []
    version = None
    for r in range(ranks):
        path = Path(f"{prefix}.{r}.et")
        if not path.is_file():
            raise TraceError(f"{path}: rank {r}: no such file (one file per rank)")
        records = _records(path)
        if not records:
            raise TraceError(f"{path}: empty (expected a GlobalMetadata record, then nodes)")
        try:
            meta = meta_t.FromString(records[0])
            nodes = [node_t.FromString(b) for b in records[1:]]
        except DecodeError as exc:
            raise TraceError(f"{path}: not a Chakra execution trace ({exc})") from None
        version = version or meta.version
        raw.append([(n, _attrs(n)) for n in nodes])
    groups: dict[str, list[int]] = {}
    for r, nodes in enumerate(raw):
        for n, attrs in nodes:
            if n.type == COMM_COLL_NODE:
                pg = str(attrs.get("pg_name") or "all")
                if pg != "all" and r not in groups.setdefault(pg, []):
                    groups[pg].append(r)
    members = {pg: tuple(sorted(rs)) for pg, rs in groups.items()}
    members["all"] = tuple(range(ranks))
    out = []
    for r, nodes in enumerate(raw):
        path = f"{prefix}.{r}.et"
        seen: dict[str, int] = {}
        mine = []
        for n, attrs in sorted(nodes, key=lambda x: x[0].id):
            mine.append(_node(path, r, n, attrs, seen, algorithms))
        out.append(tuple(mine))
    used = {n.group for nodes in out for n in nodes if n.group}
    g = TraceGraph(
        f"{prefix}.*.et",
        ranks,
        {k: v for k, v in members.items() if k in used},
        tuple(out),
        {"format": "chakra", "version": version},
    )
    return validate(g)


def _node(path: str, rank: int, n, attrs: dict, seen: dict, algorithms: dict) -> Node:
    where = f"{path}: node {n.id} ({n.name})"
    deps = tuple(sorted(set(n.ctrl_deps) | set(n.data_deps)))
    kind = n.type
    if kind == COMP_NODE:
        return Node(n.id, n.name, COMPUTE, deps, duration_s=n.duration_micros * 1e-6)
    if kind in (METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE):
        return Node(n.id, n.name, COMPUTE, deps)
    if kind == COMM_COLL_NODE:
        ctype = attrs.get("comm_type")
        if ctype not in COMM_TYPES:
            name = COMM_TYPE_NAMES.get(ctype, repr(ctype))
            raise TraceError(
                f"{where}: comm_type: {name} is not run here (ALL_REDUCE, ALL_GATHER, "
                "REDUCE_SCATTER, ALL_TO_ALL are)"
            )
        size = _size(where, attrs)
        group = str(attrs.get("pg_name") or "all")
        k = seen.get(group, 0)
        seen[group] = k + 1
        coll = COMM_TYPES[ctype]
        return Node(
            n.id, n.name, COLLECTIVE, deps, collective=coll,
            algorithm=algorithms.get(coll, ""), group=group, comm=f"{group}#{k}", nbytes=size,
        )  # fmt: skip
    if kind in (COMM_SEND_NODE, COMM_RECV_NODE):
        key = "comm_dst" if kind == COMM_SEND_NODE else "comm_src"
        peer = attrs.get(key)
        if not isinstance(peer, int):
            raise TraceError(f"{where}: {key}: missing (the peer rank)")
        tag = attrs.get("comm_tag", 0)
        return Node(
            n.id, n.name, SEND if kind == COMM_SEND_NODE else RECV, deps,
            nbytes=_size(where, attrs), peer=peer, tag=int(tag or 0),
        )  # fmt: skip
    raise TraceError(f"{where}: type: {kind} is not a node type this reader runs")


def _size(where: str, attrs: dict) -> int:
    size = attrs.get("comm_size")
    if not isinstance(size, int) or size < 0:
        raise TraceError(f"{where}: comm_size: missing (the bytes it moves)")
    return size


def write_chakra(g: TraceGraph, prefix: str | Path) -> list[Path]:
    """`g` as Chakra execution trace files `<prefix>.<rank>.et` (what `read_chakra` reads back
    to the same graph); returns the files. Collectives name their group in `pg_name`."""
    meta_t, node_t, attr_t = _types()
    by_name = {v: k for k, v in COMM_TYPES.items()}
    paths = []
    for r, nodes in enumerate(g.nodes):
        path = Path(f"{prefix}.{r}.et")
        out = [meta_t(version="0.0.4").SerializeToString()]
        for n in nodes:
            msg = node_t(id=n.id, name=n.name, data_deps=list(n.deps))
            attrs: list = []
            if n.kind == COMPUTE:
                msg.type = COMP_NODE
                msg.duration_micros = round(n.duration_s * 1e6)
            elif n.kind == COLLECTIVE:
                msg.type = COMM_COLL_NODE
                attrs = [
                    attr_t(name="comm_type", int64_val=by_name[n.collective]),
                    attr_t(name="comm_size", int64_val=n.nbytes),
                    attr_t(name="pg_name", string_val=n.group),
                ]
            else:
                msg.type = COMM_SEND_NODE if n.kind == SEND else COMM_RECV_NODE
                attrs = [
                    attr_t(name="comm_dst" if n.kind == SEND else "comm_src", int32_val=n.peer),
                    attr_t(name="comm_size", int64_val=n.nbytes),
                    attr_t(name="comm_tag", int32_val=n.tag),
                ]
            msg.attr.extend(attrs)
            out.append(msg.SerializeToString())
        path.write_bytes(b"".join(_varint(len(b)) + b for b in out))
        paths.append(path)
    return paths


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
