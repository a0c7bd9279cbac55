"""Byte identity of the Chakra codec with the golden .et files (golden/chakra_codec_golden.json).

The golden files were written by the hand-written wire codec that the protoc-generated
``et_def_pb2`` classes replaced: synthetic graphs covering every attribute kind and node field
(``chakra_golden.py``), and the graphs ``agentservesim export-chakra`` writes for a 70B TP2 cell
and an 8B TP1 validation config. The current codec must write exactly those bytes and read them
back to the same nodes.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from astrasim.chakra import decode_et, encode_et, read_et, write_workload
from chakra_golden import golden_cases

GOLDEN = Path(__file__).parent / "golden"
DOC = json.loads((GOLDEN / "chakra_codec_golden.json").read_text())
FILES = DOC["files"]


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_golden_files_are_intact():
    for name, info in FILES.items():
        b = (GOLDEN / "et" / name).read_bytes()
        assert (len(b), _sha(b)) == (info["bytes"], info["sha256"]), name
    for export in DOC["export_chakra"].values():
        for f in export["files"].values():
            assert FILES[f["stored_as"]]["sha256"] == f["sha256"]


@pytest.mark.parametrize("case", sorted(golden_cases()))
def test_synthetic_graphs_write_golden_bytes(case, tmp_path):
    per_rank, meta = golden_cases()[case]
    paths = write_workload(tmp_path / case, per_rank, meta)
    for rank, (path, nodes) in enumerate(zip(paths, per_rank)):
        name = f"{case}.{rank}.et"
        written = Path(path).read_bytes()
        assert _sha(written) == FILES[name]["sha256"], name
        assert written == (GOLDEN / "et" / name).read_bytes()
        back_meta, back = read_et(GOLDEN / "et" / name)
        assert back == nodes
        assert back_meta.version == "0.0.4"
        assert encode_et(back, back_meta.attrs) == written


@pytest.mark.parametrize("name", sorted(n for n in FILES if n.startswith("export_")))
def test_exported_graphs_round_trip_byte_identical(name):
    data = (GOLDEN / "et" / name).read_bytes()
    meta, nodes = decode_et(data, name)
    assert len(nodes) == FILES[name]["nodes"] > 0
    assert encode_et(nodes, meta.attrs, meta.version) == data
