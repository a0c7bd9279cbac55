"""Synthetic Chakra graphs behind the codec golden files (``golden/chakra_codec_golden.json``).

The ``.et`` files under ``golden/et/`` were written by the hand-written codec that preceded the
generated ``et_def_pb2`` classes; ``test_chakra_golden.py`` checks that today's codec writes exactly
the same bytes for these graphs and reads them back to equal nodes. Changing anything here
invalidates the golden files: regenerate them only for a deliberate format change.

Every attribute kind of ``schema.ATTR_KINDS`` appears, each with its extreme values (negative
numbers for the signed kinds, 10-byte varints, empty strings/bytes/lists), together with nodes that
exercise every ``Node`` field (deps, IOInfo present/empty/absent, zero ids, every NodeType).
Float values are exactly representable in float32 so ``float_val``/``float_list`` round-trip.
"""
from __future__ import annotations

from astrasim.chakra.schema import ATTR_KINDS, Attr, CollectiveCommType, IOInfo, Node, NodeType

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

#: per scalar type: a list of values covering its range (the scalar kinds use each in turn).
VALUES: dict[str, list] = {
    "double": [0.0, -0.0, 0.1, -2.5e300, 1e-310, float("inf"), float("-inf")],
    "float": [0.0, 0.5, -1.25, 2.0**127, 2.0**-140, float("inf")],
    "int32": [0, 1, -1, 127, 128, *I32],
    "int64": [0, -1, 300, 2**31, -(2**31) - 1, *I64],
    "uint32": [0, 1, 127, 128, 2**32 - 1],
    "uint64": [0, 1, 2**32, 2**63, 2**64 - 1],
    "sint32": [0, -1, 1, -64, 64, *I32],
    "sint64": [0, -1, 1, -(2**40), *I64],
    "fixed32": [0, 1, 2**32 - 1],
    "fixed64": [0, 1, 2**64 - 1],
    "sfixed32": [0, -1, *I32],
    "sfixed64": [0, -1, *I64],
    "bool": [False, True],
    "string": ["", "a", "pg_name", "µs ✓ 漢字", "x" * 200],
    "bytes": [b"", b"\x00", b"\x00\xff\x80", bytes(range(256))],
}


def attr_kitchen_sink() -> list[Node]:
    """One node per attribute kind: each scalar value as its own attribute, the list kinds full,
    single and empty; plus doc strings and an attribute with an empty name."""
    nodes = []
    for i, (kind, t) in enumerate(ATTR_KINDS.items()):
        n = Node(id=100 + i, name=kind, type=NodeType.COMP_NODE)
        vals = VALUES[t]
        if kind.endswith("_list"):
            n.attrs["all"] = Attr(kind, list(vals))
            n.attrs["one"] = Attr(kind, [vals[-1]])
            n.attrs["empty"] = Attr(kind, [])
            n.attrs["doc"] = Attr(kind, list(vals[:2]), doc_string="a list with a doc string")
        else:
            for j, v in enumerate(vals):
                n.attrs[f"v{j}"] = Attr(kind, v)
            n.attrs["doc"] = Attr(kind, vals[0], doc_string="default value but present")
        nodes.append(n)
    nodes.append(Node(id=200, name="unnamed attr", attrs={"": Attr("int64_val", 5)}))
    return nodes


def node_fields() -> list[Node]:
    """Every ``Node`` field: zero/default ids and types, deps, IOInfo presence, times."""
    comp = Node.make(1, NodeType.COMP_NODE, "gemm", duration_micros=12, is_cpu_op=False,
                     num_ops=10**12, tensor_size=0)
    comp.inputs = IOInfo(values="[1]", shapes="[[2,3]]", types="[float]")
    comp.outputs = IOInfo()  # present but empty
    only_shapes = Node(id=2, name="io", type=NodeType.MEM_STORE_NODE, inputs=IOInfo(shapes="[4]"),
                       outputs=IOInfo(types="[bf16]"))
    coll = Node.make(7, NodeType.COMM_COLL_NODE, "allreduce", data_deps=[1, 300, 2**64 - 1],
                     ctrl_deps=[2, 0, 128], is_cpu_op=False,
                     comm_type=int(CollectiveCommType.REDUCE_SCATTER), comm_size=16 << 20,
                     involved_dim=[True, False, True], pg_name="1")
    times = Node(id=2**64 - 1, name="", type=NodeType.MEM_LOAD_NODE, start_time_micros=2**40,
                 duration_micros=2**64 - 1)
    send = Node.make(8, NodeType.COMM_SEND_NODE, "send", comm_src=0, comm_dst=1, comm_tag=9,
                     comm_size=4096, is_cpu_op=False)
    recv = Node.make(9, NodeType.COMM_RECV_NODE, "recv", data_deps=[8], comm_src=0, comm_dst=1,
                     comm_tag=9, comm_size=4096, is_cpu_op=False)
    nodes = [comp, only_shapes, coll, times, send, recv,
             Node(id=0),  # everything default: an empty record
             Node(id=3, type=NodeType.INVALID_NODE, name="invalid type"),
             Node(id=4, type=NodeType.METADATA_NODE),
             Node.make(5, NodeType.COMP_NODE, "plain", mixed=[1.5, 2], names=["a", "", "c"],
                       blob=b"\x01\x02", big=2**63, flag=True, ratio=0.25)]
    return nodes


def golden_cases() -> dict[str, tuple[list[list[Node]], dict | None]]:
    """name -> (per-rank node lists, metadata_attrs) for ``write_workload``."""
    meta = {"note": "golden", "ranks": 2, "scale": 0.5, "empty": "", "raw": b"\x00\x01",
            "flags": [True, False], "ids": [1, 2, 3], "typed": Attr("sint32_val", -7, "doc")}
    return {
        "attrs": ([attr_kitchen_sink()], None),
        "fields": ([node_fields(), node_fields()[::-1]], meta),
        "empty": ([[]], {}),
    }
