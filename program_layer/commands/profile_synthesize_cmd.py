"""``agentservesim profile synthesize``: write the bundle a run on a device without a measured
bundle synthesizes on the fly (llmservingsim/synthesize_bundle.py), for inspection or reuse.

The bundle lands at ``DIR/<HARDWARE>/<org>/<model>/bf16/tp<N>/`` (a profile root: a run with
``--profiles DIR`` reads it, provenance "synthesized from datasheet"); its PROVENANCE.md lists
the datasheet numbers and fitted efficiencies it used. Heavy imports happen inside ``main``.
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hardware", required=True, help="a device in hardware/ or a path to a device YAML")
    parser.add_argument("--model", required=True, help="registry name (profiles/models/) or a path to config.json")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    parser.add_argument("--out", required=True, help="profile root to write the bundle under")
    parser.add_argument("--fit", default=None, help="efficiency fit YAML (default: hardware/efficiency/datasheet_fit.yaml)")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llmservingsim.derive_bundle import check_tp
    from llmservingsim.device_efficiency import load_fit
    from llmservingsim.hardware import load_device
    from llmservingsim.model_config import load_model
    from llmservingsim.synthesize_bundle import synthesize

    device, model = load_device(args.hardware), load_model(args.model)
    check_tp(model, args.tp, key="--tp")
    fit = load_fit(Path(args.fit)) if args.fit else None
    folder = Path(args.out) / device.name / model.name / "bf16" / f"tp{args.tp}"
    print(synthesize(device, model, args.tp, folder, fit=fit))
    return 0
