"""``agentservesim profile measure`` (issue 11 item 4): the grids, the error without torch,
and a CPU measurement on a tiny model that ``agentservesim run`` accepts.

The CPU tests need torch (an optional extra, ``agentservesim[torch]``): they are skipped
where it is not installed; the grid and error-path tests run everywhere."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmservingsim.measure.grids import FULL, TINY
from llmservingsim.paths import profiles_dir

REPO = Path(__file__).resolve().parents[2]
SHIPPED = profiles_dir() / "RTXPRO6000" / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1"
# A 2-layer Llama-shaped model: hidden 256, 4 query heads and 2 KV heads of 64, MLP 512.
TINY_MODEL = {"_name_or_path": "test/Tiny-2L", "model_type": "llama", "hidden_size": 256,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 131072,
              "torch_dtype": "bfloat16"}
LLAMA_DENSE_OPS = ["embedding", "layernorm", "qkv_proj", "rotary_emb", "o_proj", "gate_up_proj",
                   "act_fn", "down_proj", "final_layernorm"]


def _axis(path: Path, column: str) -> list[int]:
    with open(path, newline="") as f:
        return sorted({int(float(r[column])) for r in csv.DictReader(f)})


def test_full_grid_is_the_shipped_bundles_grid():
    """Same token and sequence axes as the shipped RTXPRO6000 8B tp1 bundle, and the power-of-two
    attention axes its loader reads (the shipped file also has non-power-of-two skew points)."""
    assert list(FULL.tokens) == _axis(SHIPPED / "dense.csv", "tokens")
    assert list(FULL.sequences) == _axis(SHIPPED / "per_sequence.csv", "sequences")
    pow2 = lambda xs: [x for x in xs if x > 0 and x & (x - 1) == 0]   # noqa: E731
    assert list(FULL.chunks) == pow2(_axis(SHIPPED / "attention.csv", "prefill_chunk"))
    assert list(FULL.n_decode) == pow2(_axis(SHIPPED / "attention.csv", "n_decode"))
    assert list(FULL.kv) == [0] + pow2(_axis(SHIPPED / "attention.csv", "kv_prefill"))
    # 8 chunks x 12 contexts (0 and 16..16384); 9 batch sizes x 11 decode lengths
    assert len(FULL.prefill_points()) == 96 and len(FULL.decode_points()) == 99


def test_without_torch_the_command_is_one_error_line_exit_2(tmp_path):
    """torch made unimportable (sys.modules['torch'] = None): one line naming the extra."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from program_layer.cli import main\n"
            f"sys.exit(main(['profile', 'measure', '--model', 'meta-llama/Llama-3.1-8B', '--out', {str(tmp_path)!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: profile measure needs PyTorch"), r.stderr
    assert "pip install 'agentservesim[torch]'" in lines[0]
    assert not list(tmp_path.iterdir())


def test_profile_help_does_not_import_torch():
    code = ("import sys, contextlib, io\nfrom program_layer.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    for argv in (['profile', '--help'], ['profile', 'measure', '--help']):\n"
            "        try:\n            main(argv)\n        except SystemExit:\n            pass\n"
            "print([m for m in ('torch', 'numpy') if m in sys.modules])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A tiny-grid CPU bundle of TINY_MODEL at tp1, under the RTX4090 device's name (torch is
    in the ``test`` extra: without it these tests fail rather than skip)."""
    from program_layer.cli import main
    tmp = tmp_path_factory.mktemp("measure")
    cfg = tmp / "tiny-2l.json"
    cfg.write_text(json.dumps(TINY_MODEL))
    root = tmp / "profiles"
    argv = ["profile", "measure", "--model", str(cfg), "--tp", "1", "--device", "cpu", "--grid", "tiny",
            "--hardware", "RTX4090", "--out", str(root)]
    assert main(argv) == 0
    return tmp, cfg, root, argv


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cpu_bundle_has_the_tiny_grid_and_loads(measured):
    from llmservingsim.profiles import load_bundle
    tmp, cfg, root, _ = measured
    tp1 = root / "RTX4090" / "test" / "Tiny-2L" / "bf16" / "tp1"
    dense = _rows(tp1 / "dense.csv")
    # 9 Llama ops x 6 token counts (1, 2, 4, 8, 16, 32)
    assert [r["layer"] for r in dense[::6]] == LLAMA_DENSE_OPS and len(dense) == 9 * 6
    assert [int(r["tokens"]) for r in dense[:6]] == list(TINY.tokens)
    assert [(r["layer"], r["sequences"]) for r in _rows(tp1 / "per_sequence.csv")] == [
        (op, str(n)) for op in ("lm_head", "sampler") for n in (1, 2, 4)]
    att = _rows(tp1 / "attention.csv")
    key = lambda r: tuple(int(r[k]) for k in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))  # noqa: E731
    t = {key(r): float(r["time_us"]) for r in att}
    # prefill-only 2 chunks x 3 contexts = 6, decode-only 2 x 2 = 4, mixed 6 x 4 = 24
    assert len(att) == len(t) == 34
    assert all(v > 0 for v in t.values())
    for c, k in TINY.prefill_points():       # a mixed point is its two measured parts' sum
        for n, kd in TINY.decode_points():
            assert t[(c, k, n, kd)] == pytest.approx(t[(c, k, 0, 0)] + t[(0, 0, n, kd)], abs=2e-4)
    bundle = load_bundle("RTX4090", "test/Tiny-2L", 1, root=root, cache=False)
    assert bundle.provenance == "measured" and bundle.skew is None
    assert set(bundle.dense) == set(LLAMA_DENSE_OPS)
    meta = yaml.safe_load((tp1.parent / "meta.yaml").read_text())
    rec = meta["measurements"][1]
    assert meta["tp_degrees"] == [1] and meta["model"] == "test/Tiny-2L" and meta["torch_version"]
    assert rec["rank_shapes"]["q_heads"] == 4 and rec["attention_backend"] == "sdpa"
    assert rec["timing"]["statistic"] == "median" and "perf_counter_ns" in rec["timing"]["method"]
    assert "--grid tiny" in rec["command"]
    assert not list(tp1.parent.glob(".tp*.partial"))


def test_agentservesim_run_accepts_the_measured_bundle(measured, run_on_bundle):
    tmp, cfg, root, _ = measured
    summary = run_on_bundle(cfg, root, 1)
    assert summary["bundle"] == {"path": "RTX4090/test/Tiny-2L/bf16/tp1", "provenance": "measured"}


def test_tp2_measures_one_ranks_shards_and_never_overwrites(measured, capsys):
    from program_layer.cli import main
    tmp, cfg, root, argv = measured
    assert main(argv) == 2                       # tp1 exists: refused, nothing replaced
    assert "is never overwritten" in capsys.readouterr().err
    assert main([a if a != "1" else "2" for a in argv]) == 0
    base = root / "RTX4090" / "test" / "Tiny-2L" / "bf16"
    meta = yaml.safe_load((base / "meta.yaml").read_text())
    assert meta["tp_degrees"] == [1, 2]
    # 4 query heads, 2 KV heads, MLP 512, vocabulary 1024 split over 2 ranks; sampler on all 1024
    assert meta["measurements"][2]["rank_shapes"] == {"hidden": 256, "q_heads": 2, "kv_heads": 1, "head_dim": 64,
                                                      "intermediate": 256, "vocab_shard": 512, "sampler_vocab": 1024}
    assert len(_rows(base / "tp2" / "dense.csv")) == 54


def test_compare_bundles_of_a_bundle_with_itself_is_zero_everywhere():
    """benchmarks/compare_bundles.py on the shipped 8B tp1 against itself: every op and the
    70 steps (9 x 7 decodes + 7 prefills) at 0.0 / 0.0 %."""
    r = subprocess.run([sys.executable, "benchmarks/compare_bundles.py", str(SHIPPED), str(SHIPPED)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    table = [line for line in r.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    ops = {line.split(" | ")[0][2:] for line in table}
    assert {"qkv_proj", "attention prefill", "attention decode", "attention mixed", "lm_head"} <= ops
    assert all(line.endswith("| 0.0 / 0.0 |") for line in table), r.stdout
    assert "| 70 | 0.0 / 0.0 |" in table[-1]
