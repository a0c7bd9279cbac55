"""Hand-rolled protobuf wire codec for the Chakra schema (no protobuf runtime needed).

Encoding follows what the protobuf runtime emits for proto3: fields in field-number order,
scalar defaults (0, "", empty repeated) omitted, repeated numeric fields packed, the set
``oneof`` member always emitted, absent sub-messages omitted. Decoding accepts packed and
unpacked repeated numerics and skips unknown fields, as any conforming parser must.

Failure mode: malformed bytes raise :class:`WireError` (a ``ValueError``) with the offset.
"""
from __future__ import annotations

import struct
from typing import Callable

from .schema import ATTR_FIELD, ATTR_KINDS, Attr, GlobalMetadata, IOInfo, Node, NodeType

_MASK64 = (1 << 64) - 1
_KIND_BY_FIELD = {f: k for k, f in ATTR_FIELD.items()}


class WireError(ValueError):
    """Bytes that are not a valid encoding of the expected message."""


# ---------------------------------------------------------------- primitive encoders
def enc_varint(out: bytearray, v: int) -> None:
    v &= _MASK64  # negative int32/int64 are sent as 10-byte two's complement
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _key(out: bytearray, field_no: int, wire: int) -> None:
    enc_varint(out, (field_no << 3) | wire)


def _len_field(out: bytearray, field_no: int, payload: bytes) -> None:
    _key(out, field_no, 2)
    enc_varint(out, len(payload))
    out += payload


def _zigzag(v: int, bits: int) -> int:
    return ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)


def _unzigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


# scalar type -> (wire type, element encoder into bytearray)
def _enc_fixed(fmt: str) -> Callable[[bytearray, object], None]:
    s = struct.Struct(fmt)
    return lambda out, v: out.extend(s.pack(v))


_ENC: dict[str, tuple[int, Callable[[bytearray, object], None]]] = {
    "double": (1, _enc_fixed("<d")), "float": (5, _enc_fixed("<f")),
    "int32": (0, lambda o, v: enc_varint(o, int(v))), "int64": (0, lambda o, v: enc_varint(o, int(v))),
    "uint32": (0, lambda o, v: enc_varint(o, int(v))), "uint64": (0, lambda o, v: enc_varint(o, int(v))),
    "sint32": (0, lambda o, v: enc_varint(o, _zigzag(int(v), 32))),
    "sint64": (0, lambda o, v: enc_varint(o, _zigzag(int(v), 64))),
    "fixed32": (5, _enc_fixed("<I")), "fixed64": (1, _enc_fixed("<Q")),
    "sfixed32": (5, _enc_fixed("<i")), "sfixed64": (1, _enc_fixed("<q")),
    "bool": (0, lambda o, v: o.append(1 if v else 0)),
}


def _enc_text(v) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def encode_attr(name: str, a: Attr) -> bytes:
    out = bytearray()
    if name:
        _len_field(out, 1, name.encode("utf-8"))
    if a.doc_string:
        _len_field(out, 2, a.doc_string.encode("utf-8"))
    fno = ATTR_FIELD[a.kind]
    t = ATTR_KINDS[a.kind]
    if a.is_list:
        sub = bytearray()
        if t in ("string", "bytes"):
            for v in a.value:
                _len_field(sub, 1, _enc_text(v))
        elif a.value:
            packed = bytearray()
            enc = _ENC[t][1]
            for v in a.value:
                enc(packed, v)
            _len_field(sub, 1, bytes(packed))
        _len_field(out, fno, bytes(sub))
    elif t in ("string", "bytes"):
        _len_field(out, fno, _enc_text(a.value))
    else:
        wire, enc = _ENC[t]
        _key(out, fno, wire)
        enc(out, a.value)
    return bytes(out)


def _enc_io(io: IOInfo) -> bytes:
    out = bytearray()
    for fno, s in ((1, io.values), (2, io.shapes), (3, io.types)):
        if s:
            _len_field(out, fno, s.encode("utf-8"))
    return bytes(out)


def encode_node(n: Node) -> bytes:
    out = bytearray()
    if n.id:
        _key(out, 1, 0)
        enc_varint(out, n.id)
    if n.name:
        _len_field(out, 2, n.name.encode("utf-8"))
    if int(n.type):
        _key(out, 3, 0)
        enc_varint(out, int(n.type))
    for fno, deps in ((4, n.ctrl_deps), (5, n.data_deps)):
        if deps:
            packed = bytearray()
            for d in deps:
                enc_varint(packed, d)
            _len_field(out, fno, bytes(packed))
    for fno, v in ((6, n.start_time_micros), (7, n.duration_micros)):
        if v:
            _key(out, fno, 0)
            enc_varint(out, v)
    for fno, io in ((8, n.inputs), (9, n.outputs)):
        if io is not None:
            _len_field(out, fno, _enc_io(io))
    for name, a in n.attrs.items():
        _len_field(out, 10, encode_attr(name, a))
    return bytes(out)


def encode_metadata(m: GlobalMetadata) -> bytes:
    out = bytearray()
    if m.version:
        _len_field(out, 1, m.version.encode("utf-8"))
    for name, a in m.attrs.items():
        _len_field(out, 2, encode_attr(name, a))
    return bytes(out)


# ---------------------------------------------------------------- decoding
def dec_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise WireError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError(f"varint too long at byte {pos}")


def iter_fields(buf: bytes):
    """Yield ``(field_no, wire_type, value)``; value is int (varint), bytes (LEN/fixed)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = dec_varint(buf, pos)
        fno, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = dec_varint(buf, pos)
        elif wire == 2:
            ln, pos = dec_varint(buf, pos)
            if pos + ln > end:
                raise WireError(f"length-delimited field {fno} overruns message at byte {pos}")
            v, pos = buf[pos:pos + ln], pos + ln
        elif wire == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise WireError(f"unsupported wire type {wire} (field {fno}) at byte {pos}")
        if pos > end:
            raise WireError(f"field {fno} overruns message")
        yield fno, wire, v


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


_FIXED_FMT = {"double": "<d", "float": "<f", "fixed32": "<I", "fixed64": "<Q",
              "sfixed32": "<i", "sfixed64": "<q"}


def _from_varint(t: str, v: int):
    if t == "int32":
        return _signed(v, 32)
    if t == "int64":
        return _signed(v, 64)
    if t == "uint32":
        return v & 0xFFFFFFFF
    if t == "sint32" or t == "sint64":
        return _unzigzag(v)
    if t == "bool":
        return v != 0
    return v  # uint64


def _scalar(t: str, wire: int, raw):
    if wire == 0:
        return _from_varint(t, raw)
    return struct.unpack(_FIXED_FMT[t], raw)[0]


def _unpack_packed(t: str, raw: bytes) -> list:
    if t in _FIXED_FMT:
        fmt = _FIXED_FMT[t]
        size = struct.calcsize(fmt)
        if len(raw) % size:
            raise WireError("packed fixed-width list has a partial element")
        return [x[0] for x in struct.iter_unpack(fmt, raw)]
    vals, pos = [], 0
    while pos < len(raw):
        v, pos = dec_varint(raw, pos)
        vals.append(_from_varint(t, v))
    return vals


def _decode_list(t: str, raw: bytes) -> list:
    vals: list = []
    for fno, wire, v in iter_fields(raw):
        if fno != 1:
            continue
        if t in ("string", "bytes"):
            vals.append(bytes(v).decode("utf-8") if t == "string" else bytes(v))
        elif wire == 2:
            vals.extend(_unpack_packed(t, v))
        else:
            vals.append(_scalar(t, wire, v))
    return vals


def decode_attr(buf: bytes) -> tuple[str, Attr]:
    name, doc, kind, value = "", "", None, None
    for fno, wire, v in iter_fields(buf):
        if fno == 1:
            name = bytes(v).decode("utf-8")
        elif fno == 2:
            doc = bytes(v).decode("utf-8")
        elif fno in _KIND_BY_FIELD:
            kind = _KIND_BY_FIELD[fno]
            t = ATTR_KINDS[kind]
            if kind.endswith("_list"):
                value = _decode_list(t, v)
            elif t == "string":
                value = bytes(v).decode("utf-8")
            elif t == "bytes":
                value = bytes(v)
            else:
                value = _scalar(t, wire, v)
    if kind is None:  # an attribute without a value: keep it as an empty string
        kind, value = "string_val", ""
    return name, Attr(kind, value, doc)


def _decode_io(buf: bytes) -> IOInfo:
    io = IOInfo()
    for fno, _w, v in iter_fields(buf):
        if fno == 1:
            io.values = bytes(v).decode("utf-8")
        elif fno == 2:
            io.shapes = bytes(v).decode("utf-8")
        elif fno == 3:
            io.types = bytes(v).decode("utf-8")
    return io


def _deps(wire: int, v, into: list) -> None:
    if wire == 2:
        into.extend(_unpack_packed("uint64", v))
    else:
        into.append(v)


def decode_node(buf: bytes) -> Node:
    n = Node(id=0)
    for fno, wire, v in iter_fields(buf):
        if fno == 1:
            n.id = v
        elif fno == 2:
            n.name = bytes(v).decode("utf-8")
        elif fno == 3:
            try:
                n.type = NodeType(v)
            except ValueError:
                raise WireError(f"unknown node type {v}") from None
        elif fno == 4:
            _deps(wire, v, n.ctrl_deps)
        elif fno == 5:
            _deps(wire, v, n.data_deps)
        elif fno == 6:
            n.start_time_micros = v
        elif fno == 7:
            n.duration_micros = v
        elif fno == 8:
            n.inputs = _decode_io(v)
        elif fno == 9:
            n.outputs = _decode_io(v)
        elif fno == 10:
            name, a = decode_attr(v)
            n.attrs.setdefault(name, a)  # first occurrence wins, as a by-name lookup would
    return n


def decode_metadata(buf: bytes) -> GlobalMetadata:
    m = GlobalMetadata(version="")
    for fno, _w, v in iter_fields(buf):
        if fno == 1:
            m.version = bytes(v).decode("utf-8")
        elif fno == 2:
            name, a = decode_attr(v)
            m.attrs.setdefault(name, a)
    return m
