"""Reading and writing per-rank Chakra ``.et`` files through protobuf's generated classes.

File layout (as Chakra's ``protolib`` writes it): a stream of records, each a varint32 length
followed by that many bytes of serialized message; the first record is ``GlobalMetadata``, the
rest are ``Node`` records until end of file. A zero-length record also ends the stream.
A workload is ``<prefix>.<rank>.et`` for ranks 0..N-1. Gzipped files are read transparently.

Messages are the protoc-generated classes of :mod:`astrasim.chakra.et_def_pb2` (from
``et_def.proto``); this module converts between them and the :mod:`~astrasim.chakra.schema`
dataclasses the simulator consumes and does the length-delimited framing. protobuf serializes
proto3 fields in field-number order with defaults omitted, so the bytes are the ones Chakra's
own tools write for the same messages. Decoding a file lets nodes share equal frozen scalar
:class:`~astrasim.chakra.schema.Attr` objects (``is_cpu_op=False`` is one object per file).

Failure mode: a missing or corrupt file raises :class:`~astrasim.errors.WorkloadError` naming
the file and, for a corrupt record, its index (record 0 is the ``GlobalMetadata``); protobuf's
``DecodeError`` never escapes. Encoding a value its attribute kind cannot hold (``uint64`` < 0,
``int32`` out of range, a ``str`` for a number) raises ``ValueError`` naming node and attribute.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import WorkloadError

try:
    from google.protobuf.message import DecodeError

    from . import et_def_pb2 as pb
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(f"astrasim.chakra needs the protobuf runtime, protobuf>=4.25 "
                      f"(pip install 'protobuf>=4.25'): {e}") from e
except TypeError as e:  # pragma: no cover - a different et_def.proto is already registered
    raise ImportError(f"cannot load astrasim/chakra/et_def_pb2.py ({e}): another module registered "
                      "a different 'et_def.proto' in protobuf's default descriptor pool first; "
                      "astrasim's schema must be identical to the one of the mlc-chakra in use") from e
from .schema import ATTR_KINDS, Attr, GlobalMetadata, IOInfo, Node, NodeType, attr_from_python

ET_VERSION = "0.0.4"

#: the ``oneof`` members that are list messages (``int64_list`` is an ``Int64List``).
_LIST_KINDS = frozenset(k for k in ATTR_KINDS if k.endswith("_list"))
_NODE_TYPE = {int(t): t for t in NodeType}


class _CorruptRecord(Exception):
    """A record that is not a valid encoding of its message (internal; becomes WorkloadError)."""


# ------------------------------------------------------------------ schema <-> generated messages
def _add_attrs(container, attrs: dict, owner: str) -> None:
    """Append one ``AttributeProto`` per attribute to a repeated ``attr`` field; the ``oneof``
    member is always set (a ``*_list`` kind as its list message, empty or not)."""
    add = container.add
    for name, a in attrs.items():
        kind = a.kind
        value = {"values": a.value} if kind in _LIST_KINDS else a.value
        try:
            add(name=name, doc_string=a.doc_string, **{kind: value})
        except (ValueError, TypeError) as e:
            raise ValueError(f"{owner}: attribute {name!r} ({kind}={a.value!r}): {e}") from None


#: kinds whose decoded ``Attr`` may be shared between nodes of one file: immutable values whose
#: equality is identity of encoding (not floats: 0.0 == -0.0; not lists: mutable).
_SHAREABLE = frozenset(k for k, t in ATTR_KINDS.items()
                       if not k.endswith("_list") and t not in ("double", "float"))


def _attrs_from_pb(ms, cache: Optional[dict] = None) -> dict:
    """``{name: Attr}`` of repeated ``AttributeProto`` messages, in file order."""
    attrs: dict = {}
    for m in ms:
        name = m.name
        if name in attrs:  # first occurrence wins, as a by-name lookup would
            continue
        kind = m.WhichOneof("value")
        if kind is None:  # an attribute without a value: keep it as an empty string
            attrs[name] = Attr("string_val", "", m.doc_string)
        elif kind in _LIST_KINDS:
            attrs[name] = Attr(kind, list(getattr(m, kind).values), m.doc_string)
        elif cache is not None and kind in _SHAREABLE:
            key = (kind, getattr(m, kind), m.doc_string)
            a = cache.get(key)
            if a is None:
                a = cache[key] = Attr(*key)
            attrs[name] = a
        else:
            attrs[name] = Attr(kind, getattr(m, kind), m.doc_string)
    return attrs


def node_to_pb(n: Node) -> pb.Node:
    """The ``Node`` message of ``n`` (``inputs``/``outputs`` set only when not ``None``)."""
    try:
        m = pb.Node(id=n.id, name=n.name, type=int(n.type), ctrl_deps=n.ctrl_deps,
                    data_deps=n.data_deps, start_time_micros=n.start_time_micros,
                    duration_micros=n.duration_micros)
        if n.inputs is not None:
            io = n.inputs
            m.inputs.SetInParent()
            m.inputs.values, m.inputs.shapes, m.inputs.types = io.values, io.shapes, io.types
        if n.outputs is not None:
            io = n.outputs
            m.outputs.SetInParent()
            m.outputs.values, m.outputs.shapes, m.outputs.types = io.values, io.shapes, io.types
    except (ValueError, TypeError) as e:
        raise ValueError(f"node {n.id!r}: {e}") from None
    if n.attrs:
        _add_attrs(m.attr, n.attrs, f"node {n.id}")
    return m


def node_from_pb(m: pb.Node, cache: Optional[dict] = None) -> Node:
    """The :class:`Node` of a message; ``cache`` (one dict per file) lets equal scalar
    attributes share one frozen :class:`Attr`."""
    try:
        ntype = _NODE_TYPE[m.type]
    except KeyError:
        raise _CorruptRecord(f"node {m.id} has unknown node type {m.type}") from None
    n = Node(id=m.id, name=m.name, type=ntype, ctrl_deps=list(m.ctrl_deps),
             data_deps=list(m.data_deps), start_time_micros=m.start_time_micros,
             duration_micros=m.duration_micros, attrs=_attrs_from_pb(m.attr, cache))
    if m.HasField("inputs"):
        io = m.inputs
        n.inputs = IOInfo(io.values, io.shapes, io.types)
    if m.HasField("outputs"):
        io = m.outputs
        n.outputs = IOInfo(io.values, io.shapes, io.types)
    return n


def metadata_to_pb(meta: GlobalMetadata) -> pb.GlobalMetadata:
    m = pb.GlobalMetadata(version=meta.version)
    _add_attrs(m.attr, meta.attrs, "GlobalMetadata")
    return m


def metadata_from_pb(m: pb.GlobalMetadata) -> GlobalMetadata:
    return GlobalMetadata(version=m.version, attrs=_attrs_from_pb(m.attr))


def encode_node(n: Node) -> bytes:
    """The serialized ``Node`` message (no length prefix)."""
    return node_to_pb(n).SerializeToString()


def decode_node(data: bytes) -> Node:
    """Parse one serialized ``Node`` message; raises ``google.protobuf.message.DecodeError``
    or ``ValueError`` (unknown node type; bad UTF-8 on the pure-Python backend) on bad bytes."""
    try:
        return node_from_pb(pb.Node.FromString(data))
    except _CorruptRecord as e:
        raise ValueError(str(e)) from None


# ------------------------------------------------------------------ length-delimited framing
def _varint(n: int) -> bytes:
    """Base-128 varint of a non-negative ``n`` (what protolib's ``_EncodeVarint32`` writes)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _CorruptRecord(f"truncated length prefix at byte {pos}")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise _CorruptRecord(f"length prefix too long at byte {pos}")


def _frame(payload: bytes) -> bytes:
    return _varint(len(payload)) + payload


def encode_et(nodes: Iterable[Node], metadata_attrs: Optional[dict] = None,
              version: str = ET_VERSION) -> bytes:
    """The bytes of one ``.et`` file (metadata record then one record per node)."""
    attrs = {k: attr_from_python(v) for k, v in (metadata_attrs or {}).items()}
    parts = [_frame(metadata_to_pb(GlobalMetadata(version=version, attrs=attrs)).SerializeToString())]
    parts.extend(_frame(node_to_pb(n).SerializeToString()) for n in nodes)
    return b"".join(parts)


def write_et(path, nodes: Iterable[Node], metadata_attrs: Optional[dict] = None) -> None:
    """Write one rank's trace. ``metadata_attrs`` values may be :class:`Attr` or plain values."""
    Path(path).write_bytes(encode_et(nodes, metadata_attrs))


def decode_et(data: bytes, where: str = "<bytes>") -> tuple[GlobalMetadata, list[Node]]:
    """Parse the bytes of one ``.et`` file."""
    meta: Optional[GlobalMetadata] = None
    nodes: list[Node] = []
    cache: dict = {}
    parse_node = pb.Node.FromString
    index = pos = 0
    end = len(data)
    try:
        while pos < end:
            size, pos = _read_varint(data, pos)
            if size == 0:
                break
            if pos + size > end:
                raise _CorruptRecord(f"record {index} is truncated ({size} bytes announced, "
                                     f"{end - pos} left)")
            record = data[pos:pos + size]
            pos += size
            try:
                if index == 0:
                    meta = metadata_from_pb(pb.GlobalMetadata.FromString(record))
                else:
                    nodes.append(node_from_pb(parse_node(record), cache))
            except (DecodeError, ValueError) as e:  # ValueError: bad UTF-8 on the pure-Python backend
                what = "GlobalMetadata" if index == 0 else "Node"
                raise _CorruptRecord(f"record {index} is not a valid {what}: {e}") from None
            except _CorruptRecord as e:
                raise _CorruptRecord(f"record {index}: {e}") from None
            index += 1
        if meta is None:
            raise _CorruptRecord("no GlobalMetadata record")
    except _CorruptRecord as e:
        raise WorkloadError(f"not a valid Chakra execution trace: {e}", file=where) from None
    return meta, nodes


def _read_bytes(path) -> bytes:
    """The (gunzipped) bytes of one ``.et`` file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise WorkloadError(f"cannot read workload file: {e.strerror}", file=str(p)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise WorkloadError(f"not a valid gzipped Chakra execution trace: {e}", file=str(p)) from None
    return data


def read_et(path) -> tuple[GlobalMetadata, list[Node]]:
    """Read one rank's trace: ``(metadata, nodes)`` in file order."""
    return decode_et(_read_bytes(path), str(path))


def rank_file(prefix, rank: int) -> str:
    return f"{os.fspath(prefix)}.{rank}.et"


def write_workload(prefix, per_rank_nodes: Sequence[Sequence[Node]],
                   metadata_attrs: Optional[dict] = None) -> list[str]:
    """Write ``<prefix>.<rank>.et`` for every rank; returns the paths written."""
    paths = []
    for rank, nodes in enumerate(per_rank_nodes):
        path = rank_file(prefix, rank)
        write_et(path, nodes, metadata_attrs)
        paths.append(path)
    return paths


def read_workload(prefix, npus_count: Optional[int] = None, *,
                  share_identical: bool = False) -> list[list[Node]]:
    """Read ``<prefix>.0.et``, ``<prefix>.1.et``... (all of them, or exactly ``npus_count``).

    ``share_identical``: a rank whose file has the same bytes as an earlier rank's gets that
    rank's very list (decoded once; tensor-parallel ranks usually are identical), which also
    lets :meth:`SystemSimulator.run` simulate identical ranks once. The nodes are then shared:
    do not mutate them."""
    out: list[list[Node]] = []
    decoded: dict[bytes, list[Node]] = {}
    rank = 0
    while npus_count is None or rank < npus_count:
        path = rank_file(prefix, rank)
        if npus_count is None and not os.path.exists(path):
            break
        data = _read_bytes(path)
        nodes = decoded.get(data) if share_identical else None
        if nodes is None:
            nodes = decode_et(data, path)[1]
            if share_identical:
                decoded[data] = nodes
        out.append(nodes)
        rank += 1
    if not out:
        raise WorkloadError("no workload files found (expected <prefix>.0.et)", file=rank_file(prefix, 0))
    return out
