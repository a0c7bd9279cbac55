"""CPU time of encoding and decoding Chakra ``.et`` files.

    python astra-sim/tools/bench_chakra_codec.py [--graphs 100] [--repeat 5] [--et FILE.et]
                                                 [--old PATH/TO/old_wire.py]

Encodes and decodes ``--graphs`` copies of one per-rank graph (by default a 70B TP2 engine step,
322 nodes, as ``agentservesim export-chakra`` writes it: tests/astrasim/golden/et/) with the
codec in use (protoc-generated ``et_def_pb2`` classes, :mod:`astrasim.chakra.et_io`) and reports
the best of ``--repeat`` runs of ``time.process_time``. ``--old`` names a copy of the hand-written
``wire.py`` codec this project used before (not shipped) to compare against; both must write the
same bytes.
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

from astrasim.chakra import et_io
from astrasim.chakra.schema import GlobalMetadata

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ET = REPO / "tests" / "astrasim" / "golden" / "et" / "export_tp2_step00000_rank0.et"


def _load_old(path: str):
    """Import a copy of the old ``astrasim/chakra/wire.py`` as a submodule of astrasim.chakra."""
    spec = importlib.util.spec_from_file_location("astrasim.chakra._old_wire", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def encode(nodes):
        def rec(payload):
            out = bytearray()
            mod.enc_varint(out, len(payload))
            return bytes(out) + payload
        parts = [rec(mod.encode_metadata(GlobalMetadata(version=et_io.ET_VERSION)))]
        parts.extend(rec(mod.encode_node(n)) for n in nodes)
        return b"".join(parts)

    def decode(data):
        records, pos = [], 0
        while pos < len(data):
            size, pos = mod.dec_varint(data, pos)
            if size == 0:
                break
            records.append(data[pos:pos + size])
            pos += size
        return mod.decode_metadata(records[0]), [mod.decode_node(r) for r in records[1:]]
    return encode, decode


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def bench(encode, decode, graphs, repeat: int) -> tuple[float, float, list[bytes]]:
    blobs = [encode(g) for g in graphs]
    t_enc = _best(lambda: [encode(g) for g in graphs], repeat)
    t_dec = _best(lambda: [decode(b) for b in blobs], repeat)
    return t_enc, t_dec, blobs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--et", default=str(DEFAULT_ET), help="the per-rank graph to replicate")
    ap.add_argument("--old", help="path to a copy of the old hand-written wire.py, to compare")
    a = ap.parse_args(argv)
    _, nodes = et_io.read_et(a.et)
    graphs = [list(nodes) for _ in range(a.graphs)]
    total = a.graphs * len(nodes)
    print(f"{a.graphs} graphs x {len(nodes)} nodes ({Path(a.et).name}), best of {a.repeat}, CPU time")
    new_enc, new_dec, new_blobs = bench(et_io.encode_et, et_io.decode_et, graphs, a.repeat)
    assert et_io.decode_et(new_blobs[0])[1] == nodes

    def line(tag, enc, dec):
        print(f"  {tag:<22} encode {enc * 1e3:8.1f} ms ({enc / total * 1e6:5.2f} us/node)   "
              f"decode {dec * 1e3:8.1f} ms ({dec / total * 1e6:5.2f} us/node)")
    line("generated et_def_pb2", new_enc, new_dec)
    if a.old:
        old_encode, old_decode = _load_old(a.old)
        old_enc, old_dec, old_blobs = bench(old_encode, old_decode, graphs, a.repeat)
        assert old_blobs == new_blobs, "old and new codecs wrote different bytes"
        assert old_decode(new_blobs[0])[1] == nodes
        line("old hand-written wire", old_enc, old_dec)
        print(f"  old/new: encode x{old_enc / new_enc:.2f}, decode x{old_dec / new_dec:.2f}, "
              f"both x{(old_enc + old_dec) / (new_enc + new_dec):.2f} (bytes identical)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
