"""``agentservesim profile measure``: measure a profile bundle with PyTorch (docs/profiler.md).

    agentservesim profile measure --model meta-llama/Llama-3.1-8B --tp 1 --out DIR \\
        [--device cuda|cpu] [--grid full|tiny] [--hardware NAME] [--warmup N] [--repeats N]

Writes ``DIR/<HARDWARE>/<model>/bf16/tp<N>/`` (use DIR as a config's ``profiles:`` root).
PyTorch is an optional dependency (``pip install agentservesim[torch]``); it is imported only
when the command runs, so ``agentservesim --help`` does not load it.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from llmservingsim.errors import ConfigError, SimError

MIN_TORCH = (2, 5)      # scaled_dot_product_attention(enable_gqa=...)
INSTALL_HINT = "pip install 'agentservesim[torch]'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="registry name (profiles/models/) or a config.json path")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree: one rank's shard shapes (default 1)")
    p.add_argument("--out", required=True, type=Path, help="bundle root to write into")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda if available, else cpu")
    p.add_argument("--grid", choices=("full", "tiny"), default="full",
                   help="full: the shipped bundles' grid (default); tiny: a few points (tests, CPU)")
    p.add_argument("--hardware", default=None,
                   help="device folder name (hardware/<NAME>.yaml); default: from the device's name")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per point (default: 2 full, 1 tiny)")
    p.add_argument("--repeats", type=int, default=None, help="timed regions per point (default: 5 full, 3 tiny)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="time CUDA kernels eagerly (no graph capture)")


def import_torch():
    """torch, or one SimError saying how to install it (exit 2, no traceback)."""
    try:
        import torch
    except ImportError:
        raise SimError(f"profile measure needs PyTorch, which is not installed: {INSTALL_HINT} "
                       f"(or pip install torch)") from None
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if version < MIN_TORCH:
        raise SimError(f"profile measure needs torch >= {'.'.join(map(str, MIN_TORCH))}, found "
                       f"{torch.__version__}: {INSTALL_HINT}")
    return torch


def main(args: argparse.Namespace) -> int:
    torch = import_torch()
    from llmservingsim.measure.bundle import Progress, measure_bundle
    from llmservingsim.measure.grids import GRIDS
    from llmservingsim.measure.timing import Timer
    from llmservingsim.model_config import load_model

    device_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"no CUDA device is visible to torch {torch.__version__}; use --device cpu",
                          key="--device")
    device = torch.device(device_type)
    model = load_model(args.model)
    hardware = args.hardware or _default_hardware(torch, device)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", hardware):
        raise ConfigError(f"must be a plain folder name, got {hardware!r}", key="--hardware")
    full = args.grid == "full"
    for name in ("warmup", "repeats"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise ConfigError(f"must be >= 1, got {v}", key=f"--{name}")
    timer = Timer(device, warmup=args.warmup or (2 if full else 1), repeats=args.repeats or (5 if full else 3),
                  target_us=100.0 if full else 20.0, cuda_graphs=not args.no_cuda_graphs)
    torch.manual_seed(0)
    command = _command(args, device_type, hardware, timer)
    print(f"measuring {model.name} tp{args.tp} on {device_type} ({hardware}), grid {args.grid}", file=sys.stderr)
    dst = measure_bundle(model, args.tp, args.out, hardware, device, GRIDS[args.grid], timer, command, Progress())
    print(dst)
    return 0


def _command(args, device_type: str, hardware: str, timer) -> str:
    """The command line that repeats this measurement, every choice spelled out."""
    argv = ["agentservesim", "profile", "measure", "--model", args.model, "--tp", str(args.tp),
            "--out", str(args.out), "--device", device_type, "--grid", args.grid, "--hardware", hardware,
            "--warmup", str(timer.warmup), "--repeats", str(timer.repeats)]
    return shlex.join(argv + (["--no-cuda-graphs"] if args.no_cuda_graphs else []))


def _default_hardware(torch, device) -> str:
    """A folder name from the device's name: "NVIDIA H200" -> "NVIDIA-H200"; CPU -> "CPU"."""
    if device.type != "cuda":
        return "CPU"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", torch.cuda.get_device_name(device)).strip("-") or "GPU"
