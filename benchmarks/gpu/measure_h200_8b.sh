#!/usr/bin/env bash
# Measure the Llama-3.1-8B tp1 bundle on this machine's GPU and compare it with the shipped ones.
#
#   OUT=/some/dir bash benchmarks/gpu/measure_h200_8b.sh                 # the H200 measurement
#   OUT=/tmp/x bash benchmarks/gpu/measure_h200_8b.sh --device cpu --grid tiny   # dry run on a CPU
#
# Needs python >= 3.11 with torch >= 2.5 (CUDA build), numpy and PyYAML; nothing is installed
# from the network unless torch is missing. Writes $OUT/h200-8b-tp1/H200/meta-llama/Llama-3.1-8B/
# bf16/{meta.yaml,tp1/} and $OUT/compare-*.md. Full grid: 1368 dense + 80 per-sequence + 195
# attention points, each 1 warm-up call, a CUDA-graph capture and 3 timed replays; the
# largest decode point (256 decodes x 16k KV) reads ~17 GB. Budget: well under 8 minutes on an H200.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:?set OUT to the output folder}"
export PYTHONPATH="$PWD:$PWD/astra-sim${PYTHONPATH:+:$PYTHONPATH}"
DEV_ARGS=("$@")
[ ${#DEV_ARGS[@]} -eq 0 ] && DEV_ARGS=(--device cuda --grid full)

python -c 'import torch' 2>/dev/null || pip install 'torch>=2.5'
python - <<'PY'
import platform, torch, numpy, yaml
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv || true

BUNDLE_ROOT="$OUT/h200-8b-tp1"
START=$(date +%s)
timeout 480 python -m program_layer.cli profile measure --model meta-llama/Llama-3.1-8B --tp 1 \
    --hardware H200 --out "$BUNDLE_ROOT" --warmup 1 --repeats 3 "${DEV_ARGS[@]}"
echo "measured in $(( $(date +%s) - START )) s"

TP1="$BUNDLE_ROOT/H200/meta-llama/Llama-3.1-8B/bf16/tp1"
for REF in profiles/H200/meta-llama/Llama-3.1-8B/bf16/tp1 profiles/B200/meta-llama/Llama-3.1-8B/bf16/tp1 \
           profiles/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1; do
    [ -d "$REF" ] || continue
    NAME="compare-$(echo "$REF" | cut -d/ -f2).md"
    python benchmarks/compare_bundles.py "$TP1" "$REF" | tee "$OUT/$NAME"
done
