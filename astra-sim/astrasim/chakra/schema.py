"""Plain-Python view of the Chakra execution-trace schema (``et_def.proto``).

These dataclasses are what the system simulator consumes and what :mod:`astrasim.chakra.et_io`
writes. They carry exactly the information of the protobuf messages, so a file read and written
again is byte-identical (fields are emitted in field-number order, proto3 defaults omitted, the
``oneof`` member of an attribute always emitted).

Invariants:
- ``Attr.kind`` is one of :data:`ATTR_KINDS` (the ``oneof value`` member names); the value has
  the Python type of that kind (``int`` for integer kinds, ``float``, ``bool``, ``str``,
  ``bytes``; ``*_list`` kinds hold a ``list``).
- ``Node.attrs`` maps attribute name to :class:`Attr`; insertion order is the file order.
- ``Node.inputs``/``outputs`` are ``None`` when the message field is absent (presence is kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Optional


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


#: scalar element type of every oneof member, in field-number order (field = 3 + index).
ATTR_KINDS: dict[str, str] = {}
for _i, _t in enumerate(("double", "float", "int32", "int64", "uint32", "uint64", "sint32",
                         "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64", "bool",
                         "string", "bytes")):
    ATTR_KINDS[f"{_t}_val"] = _t
    ATTR_KINDS[f"{_t}_list"] = _t
#: field number of every oneof member.
ATTR_FIELD: dict[str, int] = {k: 3 + i for i, k in enumerate(ATTR_KINDS)}


@dataclass(frozen=True, slots=True)
class Attr:
    """One ``AttributeProto`` value: which oneof member (``kind``) and its value."""

    kind: str
    value: Any
    doc_string: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown Chakra attribute kind {self.kind!r}")

    @property
    def is_list(self) -> bool:
        return self.kind.endswith("_list")

    # Convenience constructors for the kinds ASTRA-Sim traces use.
    @staticmethod
    def int64(v: int) -> "Attr":
        return Attr("int64_val", int(v))

    @staticmethod
    def uint64(v: int) -> "Attr":
        return Attr("uint64_val", int(v))

    @staticmethod
    def int32(v: int) -> "Attr":
        return Attr("int32_val", int(v))

    @staticmethod
    def uint32(v: int) -> "Attr":
        return Attr("uint32_val", int(v))

    @staticmethod
    def boolean(v: bool) -> "Attr":
        return Attr("bool_val", bool(v))

    @staticmethod
    def string(v: str) -> "Attr":
        return Attr("string_val", str(v))

    @staticmethod
    def double(v: float) -> "Attr":
        return Attr("double_val", float(v))

    @staticmethod
    def bool_list(v) -> "Attr":
        return Attr("bool_list", [bool(x) for x in v])

    @staticmethod
    def int64_list(v) -> "Attr":
        return Attr("int64_list", [int(x) for x in v])


def attr_from_python(value: Any) -> Attr:
    """Pick a sensible attribute kind for a plain Python value (used by ``Node.make``)."""
    if isinstance(value, Attr):
        return value
    if isinstance(value, bool):
        return Attr.boolean(value)
    if isinstance(value, int):
        return Attr.int64(value) if value < 2 ** 63 else Attr.uint64(value)
    if isinstance(value, float):
        return Attr.double(value)
    if isinstance(value, str):
        return Attr.string(value)
    if isinstance(value, bytes):
        return Attr("bytes_val", value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(x, bool) for x in value):
            return Attr.bool_list(value)
        if all(isinstance(x, int) for x in value):
            return Attr.int64_list(value)
        if all(isinstance(x, str) for x in value):
            return Attr("string_list", list(value))
        return Attr("double_list", [float(x) for x in value])
    raise TypeError(f"cannot store {type(value).__name__} as a Chakra attribute")


@dataclass(slots=True)
class IOInfo:
    """``IOInfo``: free-form strings describing operator inputs/outputs."""

    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass(slots=True)
class GlobalMetadata:
    """The first record of every ``.et`` file."""

    version: str = "0.0.4"
    attrs: dict[str, Attr] = field(default_factory=dict)


@dataclass(slots=True)
class Node:
    """One Chakra ``Node``. ``duration_micros`` is replayed as ``x1000`` ns by the simulator."""

    id: int
    name: str = ""
    type: NodeType = NodeType.COMP_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: Optional[IOInfo] = None
    outputs: Optional[IOInfo] = None
    attrs: dict[str, Attr] = field(default_factory=dict)

    @staticmethod
    def make(id: int, type: NodeType, name: str = "", *, data_deps=(), ctrl_deps=(),
             duration_micros: int = 0, **attrs: Any) -> "Node":
        """Build a node from plain values: ``Node.make(3, COMP_NODE, duration_micros=5)``;
        keyword attributes are converted with :func:`attr_from_python` (``is_cpu_op=False``,
        ``comm_type=0``, ``comm_size=1024``, ``pg_name="1"``...)."""
        return Node(id=int(id), name=name, type=NodeType(type), ctrl_deps=list(ctrl_deps),
                    data_deps=list(data_deps), duration_micros=int(duration_micros),
                    attrs={k: attr_from_python(v) for k, v in attrs.items()})

    def get(self, name: str, default: Any = None) -> Any:
        """The value of attribute ``name`` (any kind), or ``default`` when absent."""
        a = self.attrs.get(name)
        return default if a is None else a.value
