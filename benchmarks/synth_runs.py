"""Acceptance 2 of issue 11 (docs/datasheet-synthesis.md): ``run`` out of the box on devices
with no bundle at all, on the bundle synthesized from the datasheet on the fly.

    python benchmarks/synth_runs.py

For H100, H200, A100 and MI300X, Llama-3.1-8B at TP1 and Llama-3.1-70B at TP4 and TP8, one run
of ``workload: {generator: bfcl, programs: 3, rate_jps: 1.0}`` (default seed); prints the mean
TPOT and the bundle provenance each run reports. Same inputs, same output.
"""
from __future__ import annotations

import tempfile

from program_layer.run import run_config

CASES = (("meta-llama/Llama-3.1-8B", 1), ("meta-llama/Llama-3.1-70B", 4), ("meta-llama/Llama-3.1-70B", 8))


def main() -> int:
    print("| device | Llama-3.1-8B TP1 TPOT mean (ms) | Llama-3.1-70B TP4 | Llama-3.1-70B TP8 | bundle |")
    print("|---|---:|---:|---:|---|")
    for hw in ("H100", "H200", "A100", "MI300X"):
        cells, prov = [], set()
        for model, tp in CASES:
            with tempfile.TemporaryDirectory() as out:
                s = run_config({"model": model, "hardware": hw, "parallelism": {"tp": tp},
                                "workload": {"generator": "bfcl", "programs": 3, "rate_jps": 1.0}}, out)
            cells.append(f"{1000 * s['tpot_s']['mean']:.2f}")
            prov.add(s["bundle"]["provenance"])
        print(f"| {hw} | " + " | ".join(cells) + f" | {', '.join(sorted(prov))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
