"""Regenerate astra-sim/astrasim/chakra/et_def_pb2.py from et_def.proto with protoc.

    pip install --no-deps grpcio-tools==1.60.2     # bundles protoc 25.0; --no-deps keeps your protobuf
    python astra-sim/tools/gen_et_def_pb2.py         # rewrite et_def_pb2.py
    python astra-sim/tools/gen_et_def_pb2.py --check # exit 1 when et_def_pb2.py is stale

Runs ``python -m grpc_tools.protoc -I. --python_out=<tmp> et_def.proto`` in the chakra package
folder (so the descriptor's file name is ``et_def.proto``, as in mlc-chakra) and writes protoc's
output verbatim below a header that records the generator and the minimum protobuf runtime.
protoc 25.0 is used on purpose: it is the oldest protoc whose gencode targets protobuf 4.25 (the
project's floor, ``protobuf>=4.25``) and its output carries no runtime version check, so the same
file loads on protobuf 4.25 through 7.x. ``--any-protoc`` accepts another protoc version.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHAKRA = Path(__file__).resolve().parents[1] / "astrasim" / "chakra"
TARGET = CHAKRA / "et_def_pb2.py"
PROTOC = "libprotoc 25.0"
GRPCIO_TOOLS = "1.60.2"
COMMAND = "python -m grpc_tools.protoc -I. --python_out=. et_def.proto"

HEADER = f"""\
# et_def_pb2.py: protobuf classes for the Chakra execution-trace schema (et_def.proto beside it).
# GENERATED CODE, DO NOT EDIT: everything below this header is protoc's output, byte for byte.
# Regenerate with `python astra-sim/tools/gen_et_def_pb2.py` (it runs the command below and
# prepends this header; `--check` tells whether this file is stale).
#
# Generator: protoc 25.0 ({PROTOC}), the one bundled with grpcio-tools {GRPCIO_TOOLS}
#   (pip install --no-deps grpcio-tools=={GRPCIO_TOOLS})
# Command, run in astra-sim/astrasim/chakra/:
#   {COMMAND}
# Protobuf runtime: protobuf >= 4.25.0 (gencode version 4.25.0; a runtime older than the gencode
#   is never supported). protoc 25 emits no runtime version check, so newer runtimes load it as
#   well: tested with protobuf 4.25.0, 5.26.1, 6.31.1 and 7.36.2 (upb backend).
"""


def generate(any_protoc: bool = False) -> str:
    try:
        version = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "--version"], check=True,
                                 capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise SystemExit(f"grpc_tools.protoc not available ({e}); "
                         f"pip install --no-deps grpcio-tools=={GRPCIO_TOOLS}") from None
    if version != PROTOC and not any_protoc:
        raise SystemExit(f"found {version!r}, expected {PROTOC!r} "
                         f"(pip install --no-deps grpcio-tools=={GRPCIO_TOOLS}, or pass --any-protoc)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp}",
                        "et_def.proto"], cwd=CHAKRA, check=True)
        body = (Path(tmp) / "et_def_pb2.py").read_text()
    return HEADER + body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if et_def_pb2.py differs")
    ap.add_argument("--any-protoc", action="store_true", help="accept any protoc version")
    a = ap.parse_args(argv)
    text = generate(a.any_protoc)
    if a.check:
        same = TARGET.exists() and TARGET.read_text() == text
        print(f"{TARGET}: {'up to date' if same else 'STALE'}")
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
