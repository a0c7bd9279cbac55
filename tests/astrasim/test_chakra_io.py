"""Chakra .et files: our codec (generated et_def_pb2 + framing) round-trips and interoperates
with the real Chakra tooling."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from astrasim.chakra import (Attr, CollectiveCommType, IOInfo, Node, NodeType, decode_et, encode_et,
                             read_et, read_workload, write_et, write_workload)
from astrasim.chakra import et_def_pb2
from astrasim.chakra.et_io import decode_node, encode_node
from astrasim.chakra.schema import ATTR_KINDS
from astrasim.errors import WorkloadError


def sample_nodes() -> list[Node]:
    coll = Node.make(7, NodeType.COMM_COLL_NODE, "allreduce", data_deps=[1, 300], ctrl_deps=[2],
                     is_cpu_op=False, comm_type=int(CollectiveCommType.ALL_REDUCE), comm_size=16 << 20,
                     involved_dim=[True, False], pg_name="1")
    comp = Node.make(1, NodeType.COMP_NODE, "gemm", duration_micros=12, is_cpu_op=False, num_ops=10**12)
    comp.inputs = IOInfo(values="[1]", shapes="[[2,3]]", types="[float]")
    comp.outputs = IOInfo()
    odd = Node(id=300, name="odd", type=NodeType.MEM_LOAD_NODE, start_time_micros=5)
    odd.attrs.update({
        "f": Attr("float_val", 0.5), "d": Attr("double_list", [1.5, -2.0]), "i32": Attr("int32_val", -3),
        "u32": Attr("uint32_list", [1, 2**32 - 1]), "s64": Attr("sint64_list", [-(2**40), 7]),
        "fx32": Attr("fixed32_val", 9), "sfx64": Attr("sfixed64_list", [-1, 2]), "b": Attr("bool_val", False),
        "sl": Attr("string_list", ["a", ""]), "by": Attr("bytes_val", b"\x00\xff"),
        "i64": Attr("int64_val", 0, doc_string="zero but present"), "e": Attr("uint64_list", []),
    })
    return [comp, Node(id=2, type=NodeType.METADATA_NODE), odd, coll]


def test_round_trip_file(tmp_path):
    nodes = sample_nodes()
    path = tmp_path / "t.0.et"
    write_et(path, nodes, metadata_attrs={"note": "x"})
    meta, back = read_et(path)
    assert meta.version == "0.0.4" and meta.attrs["note"] == Attr.string("x")
    assert back == nodes
    assert encode_et(back, {"note": "x"}) == path.read_bytes()


def test_workload_prefix(tmp_path):
    per_rank = [sample_nodes(), sample_nodes()[:2]]
    write_workload(tmp_path / "w", per_rank)
    assert read_workload(tmp_path / "w") == per_rank
    with pytest.raises(WorkloadError, match=r"w\.2\.et"):
        read_workload(tmp_path / "w", npus_count=3)


def test_zero_length_record_ends_stream():
    data = encode_et(sample_nodes()) + b"\x00" + b"garbage"
    assert decode_et(data)[1] == sample_nodes()


def test_corrupt_file_names_file(tmp_path):
    p = tmp_path / "bad.0.et"
    p.write_bytes(b"\x05\x0a\x03ab")
    with pytest.raises(WorkloadError, match="bad.0.et"):
        read_et(p)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**64 - 1), st.lists(st.integers(0, 2**64 - 1), max_size=5),
       st.integers(-(2**63), 2**63 - 1), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4),
       st.text(max_size=8), st.booleans())
def test_node_round_trip_property(nid, deps, i64, s32, name, flag):
    n = Node(id=nid, name=name, type=NodeType.COMP_NODE, data_deps=deps, ctrl_deps=deps[::-1])
    n.attrs.update({"a": Attr("int64_val", i64), "b": Attr("sint32_list", s32), "c": Attr("bool_val", flag)})
    assert decode_node(encode_node(n)) == n


_SCALARS = {
    "double": st.floats(allow_nan=False), "float": st.floats(width=32, allow_nan=False),
    "int32": st.integers(-(2**31), 2**31 - 1), "int64": st.integers(-(2**63), 2**63 - 1),
    "uint32": st.integers(0, 2**32 - 1), "uint64": st.integers(0, 2**64 - 1),
    "sint32": st.integers(-(2**31), 2**31 - 1), "sint64": st.integers(-(2**63), 2**63 - 1),
    "fixed32": st.integers(0, 2**32 - 1), "fixed64": st.integers(0, 2**64 - 1),
    "sfixed32": st.integers(-(2**31), 2**31 - 1), "sfixed64": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(), "string": st.text(max_size=6), "bytes": st.binary(max_size=6),
}


@st.composite
def _attrs(draw):
    kind = draw(st.sampled_from(sorted(ATTR_KINDS)))
    elem = _SCALARS[ATTR_KINDS[kind]]
    value = draw(st.lists(elem, max_size=4)) if kind.endswith("_list") else draw(elem)
    return Attr(kind, value, draw(st.sampled_from(["", "doc"])))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _attrs(), max_size=4),
       st.sampled_from(list(NodeType)), st.none() | st.builds(IOInfo, st.text(max_size=3)))
def test_every_attr_kind_round_trip_property(attrs, ntype, io):
    n = Node(id=1, type=ntype, attrs=attrs, inputs=io)
    back = decode_node(encode_node(n))
    assert back == n and list(back.attrs) == list(attrs)


def test_encoding_goes_through_generated_classes():
    n = sample_nodes()[3]
    m = et_def_pb2.Node.FromString(encode_node(n))
    assert m.type == et_def_pb2.COMM_COLL_NODE and list(m.data_deps) == [1, 300]
    assert [a.name for a in m.attr] == list(n.attrs)
    assert encode_node(n) == m.SerializeToString()


def test_bad_values_name_node_and_attribute():
    with pytest.raises(ValueError, match=r"node 5: attribute 'x' \(uint64_val=-1\)"):
        encode_node(Node(id=5, attrs={"x": Attr("uint64_val", -1)}))
    with pytest.raises(ValueError, match="node -1"):
        encode_node(Node(id=-1))


def _record(payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([len(payload)]) + payload


@pytest.mark.parametrize("data, match", [
    (b"", "no GlobalMetadata record"),
    (b"\x00", "no GlobalMetadata record"),
    (b"\x85", "truncated length prefix"),
    (b"\xff" * 11, "length prefix too long"),
    (encode_et([]) + b"\x05\x08", r"record 1 is truncated"),
    (b"\x03\x0a\x05a", "record 0 is not a valid GlobalMetadata"),
    (encode_et([]) + _record(b"\x12\x02\xff\xfe"), "record 1 is not a valid Node"),  # bad UTF-8 name
    (encode_et(sample_nodes()[:2]) + _record(b"\x08\x09\x18\x63"), r"record 3: node 9 has unknown node type 99"),
    (encode_et([]) + _record(b"\x0f"), "record 1 is not a valid Node"),  # wire type 7
])
def test_corrupt_records_raise_workload_error(tmp_path, data, match):
    p = tmp_path / "c.3.et"
    p.write_bytes(data)
    with pytest.raises(WorkloadError, match=match) as e:
        read_et(p)
    assert "c.3.et" in str(e.value)
    with pytest.raises(WorkloadError, match=match):
        decode_et(data)


def test_gzip_files(tmp_path):
    import gzip
    p = tmp_path / "z.0.et"
    p.write_bytes(gzip.compress(encode_et(sample_nodes())))
    assert read_et(p)[1] == sample_nodes()
    p.write_bytes(gzip.compress(encode_et(sample_nodes()))[:-9])
    with pytest.raises(WorkloadError, match="z.0.et"):
        read_et(p)


def test_generated_module_is_current():
    """et_def_pb2.py is protoc's output for et_def.proto (needs the pinned grpcio-tools)."""
    import subprocess
    import sys
    from pathlib import Path
    gen = Path(__file__).resolve().parents[2] / "astra-sim" / "tools" / "gen_et_def_pb2.py"
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "--version"], capture_output=True, text=True)
    if r.returncode or r.stdout.strip() != "libprotoc 25.0":
        pytest.skip("grpcio-tools 1.60.2 (protoc 25.0) not installed")
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------ real Chakra tooling
try:
    from chakra.schema.protobuf import et_def_pb2 as pb
    from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage
except Exception:  # pragma: no cover - depends on the optional test dependency
    pb = None
needs_chakra = pytest.mark.skipif(pb is None, reason="mlc-chakra/protobuf not importable "
                                  "(pip install protobuf && pip install --no-deps mlc-chakra)")


@needs_chakra
def test_our_files_decode_with_chakra(tmp_path):
    nodes = sample_nodes()
    path = tmp_path / "ours.0.et"
    write_et(path, nodes)
    with open(path, "rb") as fh:
        meta = pb.GlobalMetadata()
        assert decodeMessage(fh, meta)
        decoded = []
        while True:
            n = pb.Node()
            if not decodeMessage(fh, n):
                break
            decoded.append(n)
    assert meta.version == "0.0.4"
    assert [n.id for n in decoded] == [n.id for n in nodes]
    coll = decoded[3]
    assert coll.type == pb.COMM_COLL_NODE and list(coll.data_deps) == [1, 300] and list(coll.ctrl_deps) == [2]
    attrs = {a.name: a for a in coll.attr}
    assert attrs["comm_size"].int64_val == 16 << 20 and attrs["pg_name"].string_val == "1"
    assert list(attrs["involved_dim"].bool_list.values) == [True, False]
    assert attrs["is_cpu_op"].WhichOneof("value") == "bool_val" and attrs["is_cpu_op"].bool_val is False
    odd = {a.name: a for a in decoded[2].attr}
    assert odd["i64"].WhichOneof("value") == "int64_val" and odd["i64"].doc_string == "zero but present"
    assert list(odd["s64"].sint64_list.values) == [-(2**40), 7]
    assert odd["by"].bytes_val == b"\x00\xff"
    assert decoded[0].inputs.shapes == "[[2,3]]" and decoded[0].HasField("outputs")
    # byte-identical with what protobuf itself serializes
    for ours, theirs in zip(nodes, decoded):
        assert encode_node(ours) == theirs.SerializeToString()


@needs_chakra
def test_chakra_files_decode_with_ours(tmp_path):
    path = tmp_path / "theirs.0.et"
    with open(path, "wb") as fh:
        encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
        n = pb.Node(id=4, name="ar", type=pb.COMM_COLL_NODE, duration_micros=3)
        n.data_deps.extend([1, 2])
        n.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
        n.attr.append(pb.AttributeProto(name="comm_type", int64_val=pb.ALL_GATHER))
        n.attr.append(pb.AttributeProto(name="comm_size", int64_val=1 << 20))
        n.attr.append(pb.AttributeProto(name="neg", sint32_val=-9))
        n.attr.append(pb.AttributeProto(name="dl", double_list=pb.DoubleList(values=[0.25, 3.0])))
        encodeMessage(fh, n)
        encodeMessage(fh, pb.Node(id=5, type=pb.COMP_NODE, duration_micros=10, ctrl_deps=[4]))
    meta, nodes = read_et(path)
    assert meta.version == "0.0.4" and [x.id for x in nodes] == [4, 5]
    a = nodes[0]
    assert a.type == NodeType.COMM_COLL_NODE and a.data_deps == [1, 2] and a.duration_micros == 3
    assert a.attrs["is_cpu_op"] == Attr("bool_val", False)
    assert a.attrs["comm_type"] == Attr("int64_val", int(CollectiveCommType.ALL_GATHER))
    assert a.attrs["neg"] == Attr("sint32_val", -9)
    assert a.attrs["dl"] == Attr("double_list", [0.25, 3.0])
    assert nodes[1].ctrl_deps == [4]
    assert encode_et(nodes) == path.read_bytes()


@needs_chakra
def test_schema_is_descriptor_identical_to_chakra():
    """Both modules register "et_def.proto" in protobuf's default pool: that only works while
    the two schemas are identical (a different one fails with 'duplicate file name')."""
    from google.protobuf import descriptor_pb2
    ours, theirs = descriptor_pb2.FileDescriptorProto(), descriptor_pb2.FileDescriptorProto()
    et_def_pb2.DESCRIPTOR.CopyToProto(ours)
    pb.DESCRIPTOR.CopyToProto(theirs)
    assert ours == theirs


@needs_chakra
@pytest.mark.parametrize("first, second", [("astrasim.chakra", "chakra.schema.protobuf.et_def_pb2"),
                                           ("chakra.schema.protobuf.et_def_pb2", "astrasim.chakra")])
def test_both_generated_modules_load_in_one_process(first, second):
    import subprocess
    import sys
    code = (f"import importlib; importlib.import_module({first!r}); importlib.import_module({second!r});"
            "from astrasim.chakra import et_def_pb2 as a; from chakra.schema.protobuf import et_def_pb2 as b;"
            "assert a.Node.DESCRIPTOR is b.Node.DESCRIPTOR")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
