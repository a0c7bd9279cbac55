"""Reading and writing per-rank Chakra ``.et`` files.

File layout (as Chakra's ``protolib`` writes it): a stream of records, each a varint32 length
followed by that many bytes of serialized message; the first record is ``GlobalMetadata``, the
rest are ``Node`` records until end of file. A zero-length record also ends the stream.
A workload is ``<prefix>.<rank>.et`` for ranks 0..N-1. Gzipped files are read transparently.

Failure mode: a missing or corrupt file raises :class:`~astrasim.errors.WorkloadError` naming
the file (and the record index for corrupt records).
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import WorkloadError
from .schema import Attr, GlobalMetadata, Node, attr_from_python
from .wire import WireError, decode_metadata, decode_node, dec_varint, enc_varint, encode_metadata, encode_node

ET_VERSION = "0.0.4"


def _record(payload: bytes) -> bytes:
    out = bytearray()
    enc_varint(out, len(payload))
    out += payload
    return bytes(out)


def encode_et(nodes: Iterable[Node], metadata_attrs: Optional[dict] = None,
              version: str = ET_VERSION) -> bytes:
    """The bytes of one ``.et`` file (metadata record then one record per node)."""
    attrs = {k: attr_from_python(v) for k, v in (metadata_attrs or {}).items()}
    parts = [_record(encode_metadata(GlobalMetadata(version=version, attrs=attrs)))]
    parts.extend(_record(encode_node(n)) for n in nodes)
    return b"".join(parts)


def write_et(path, nodes: Iterable[Node], metadata_attrs: Optional[dict] = None) -> None:
    """Write one rank's trace. ``metadata_attrs`` values may be :class:`Attr` or plain values."""
    Path(path).write_bytes(encode_et(nodes, metadata_attrs))


def decode_et(data: bytes, where: str = "<bytes>") -> tuple[GlobalMetadata, list[Node]]:
    """Parse the bytes of one ``.et`` file."""
    records: list[bytes] = []
    pos = 0
    try:
        while pos < len(data):
            size, pos = dec_varint(data, pos)
            if size == 0:
                break
            if pos + size > len(data):
                raise WireError(f"record {len(records)} is truncated")
            records.append(data[pos:pos + size])
            pos += size
        if not records:
            raise WireError("no GlobalMetadata record")
        meta = decode_metadata(records[0])
        nodes = [decode_node(r) for r in records[1:]]
    except WireError as e:
        raise WorkloadError(f"not a valid Chakra execution trace: {e}", file=where) from None
    return meta, nodes


def read_et(path) -> tuple[GlobalMetadata, list[Node]]:
    """Read one rank's trace: ``(metadata, nodes)`` in file order."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise WorkloadError(f"cannot read workload file: {e.strerror}", file=str(p)) from None
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return decode_et(data, str(p))


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


def read_workload(prefix, npus_count: Optional[int] = None) -> list[list[Node]]:
    """Read ``<prefix>.0.et``, ``<prefix>.1.et``... (all of them, or exactly ``npus_count``)."""
    out: list[list[Node]] = []
    rank = 0
    while npus_count is None or rank < npus_count:
        path = rank_file(prefix, rank)
        if npus_count is None and not os.path.exists(path):
            break
        out.append(read_et(path)[1])
        rank += 1
    if not out:
        raise WorkloadError("no workload files found (expected <prefix>.0.et)", file=rank_file(prefix, 0))
    return out
