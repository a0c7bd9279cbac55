"""Synthesized bundles against published vLLM benchmark runs (issue 11): docs/datasheet-synthesis.md.

    PYTHONPATH=.:astra-sim python benchmarks/published_check.py

Each case replays a published run's exact requests (prompt and output token counts, all
arriving at t = 0) with ``agentservesim``'s engine on a device that has no measured bundle, so
its bundle is synthesized from the datasheet (provenance printed), and compares the published
aggregate metrics with the simulated ones. Nothing here is fitted: the efficiency fit never
reads these numbers (they judge the model).

Source: LambdaLabsML/vllm-benchmark, ``results/prompt_10/1x{H100,A100}-80GB-SXM/
Meta-Llama-3-8B-Instruct_tp1_len2048.json`` (vLLM benchmark_serving.py, 10 ShareGPT prompts at
request rate inf, vLLM 0.5/0.6 docker image with multi-step scheduling: 10 tokens per streamed
chunk, September 2024). Llama-3-8B and Llama-3.1-8B have the same shapes (the simulation uses
Llama-3.1-8B's config).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

# (device, published commit, input lengths, output lengths, published metrics)
CASES = [
    ("H100", "a4f9f4371a1ccac781293837fce2bce0cc6d25cc",
     [13, 25, 27, 10, 329, 29, 399, 328, 4, 205], [120, 429, 233, 194, 101, 741, 9, 3, 6, 31],
     {"duration_s": 5.3666, "output_tok_s": 347.89, "mean_ttft_ms": 62.43, "median_tpot_ms": 7.558,
      "mean_tpot_ms": 11.105}),
    ("A100", "f093afe94aacfb282ac40fef31c94a0010b37e5e",
     [13, 25, 27, 10, 329, 29, 399, 328, 4, 205], [120, 507, 233, 194, 101, 741, 9, 3, 6, 31],
     {"duration_s": 8.5854, "output_tok_s": 226.55, "mean_ttft_ms": 126.87, "median_tpot_ms": 12.014,
      "mean_tpot_ms": 18.030}),
]


def simulate(device: str, inputs: list, outputs: list, out: Path) -> dict:
    from program_layer.run import run_config
    wl = out / "w.jsonl"
    wl.write_text("".join(json.dumps({"input_toks": i, "output_toks": o, "arrival_time_ns": 0}) + "\n"
                          for i, o in zip(inputs, outputs)))
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": device, "parallelism": {"tp": 1},
           "workload": {"path": str(wl)}}
    s = run_config(cfg, out / "run")
    calls = (out / "run" / "calls.csv").read_text().splitlines()
    head = calls[0].split(",")
    rows = [dict(zip(head, line.split(","))) for line in calls[1:]]
    # vLLM's benchmark: TPOT = (latency - TTFT) / (output - 1) over requests with output > 1
    tpots = sorted(float(r["tpot_s"]) * 1e3 for r in rows if int(r["output_tokens"]) > 1)
    mid = len(tpots) // 2
    median = tpots[mid] if len(tpots) % 2 else (tpots[mid - 1] + tpots[mid]) / 2
    return {"duration_s": s["makespan_s"], "output_tok_s": sum(outputs) / s["makespan_s"],
            "mean_ttft_ms": s["ttft_s"]["mean"] * 1e3, "median_tpot_ms": median,
            "mean_tpot_ms": sum(tpots) / len(tpots), "provenance": s["bundle"]["provenance"]}


def main() -> int:
    print("| device | metric | published | simulated | error % |\n|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for dev, commit, ins, outs, pub in CASES:
            d = Path(tmp) / dev
            d.mkdir()
            sim = simulate(dev, ins, outs, d)
            for k, v in pub.items():
                print(f"| {dev} ({sim['provenance']}) | {k} | {v:g} | {sim[k]:.4g} | {100 * (sim[k] / v - 1):+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
