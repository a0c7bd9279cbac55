"""Public op tables (hardware/efficiency/ops/, llmservingsim.device_efficiency.op_tables /
table_samples, hardware/tools/import_vidur_ops.py): the work of a row by hand, a table's rows
recover the roofline they were made from, a device's weight does not grow with its rows, the
importer's output from a tiny Vidur tree byte for byte, and every malformed table or manifest
is one ProfileError naming the file, line or key."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from llmservingsim.device_efficiency import (TABLE_COLUMNS, Efficiency, OpTable, fit_efficiency, op_tables,
                                             table_samples)
from llmservingsim.errors import ProfileError
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.op_cost import Roofline, dense_work

REPO = Path(__file__).resolve().parents[2]
HEADER = ",".join(TABLE_COLUMNS) + "\n"


def _table(path: Path, rows) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(TABLE_COLUMNS)
        w.writerows(rows)
    return path


def test_a_row_is_the_dense_work_of_its_shapes_by_hand(tmp_path):
    p = _table(tmp_path / "t.csv", [["org/m", 4096, 32, 8, 14336, 2, "qkv_proj", 1, 20.5]])
    [(key, c, op, w, t)] = list(table_samples(p))
    assert (key, c, op, t) == (("org/m", 2, "qkv_proj"), "gemm", "qkv_proj", 20.5)
    # TP2: 16 q heads, 4 KV heads of 128 -> width 3072; bytes 2 * (4096 + 4096 * 3072 + 3072)
    assert (w.bytes, w.flops) == (25_180_160, 2 * 4096 * 3072)
    # the same shapes as Llama-3.1-8B: the same work as its dense.csv row
    assert w == dense_work(load_model("meta-llama/Llama-3.1-8B"), "qkv_proj", 1, 2)


def _exact_rows(roof: Roofline, tmp_path: Path) -> list:
    rows = [["m", 4096, 32, 8, 14336, tp, op, n, 1.0] for tp in (1, 2)
            for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj") for n in (2 ** k for k in range(13))]
    times = [round(roof.time_us(w), 4) for _k, _c, _o, w, _t in table_samples(_table(tmp_path / "x.csv", rows))]
    return [r[:-1] + [t] for r, t in zip(rows, times)]


def test_a_table_made_from_a_roofline_fits_back_to_it(tmp_path):
    """Rows priced by launch 2 us + max(bytes / (0.5 BW), FLOPs / (0.25 F)) on H100's datasheet
    fit back to those terms, to the fit grid's resolution."""
    h100 = load_device("H100")
    roof = Roofline(0.5 * h100.memory_bandwidth_gbs, 0.25 * h100.peak_bf16_tflops, 2.0)
    p = _table(tmp_path / "t.csv", _exact_rows(roof, tmp_path))
    fit = fit_efficiency([], tables=[OpTable("H100", p, True)])
    assert fit.classes == {"gemm": Efficiency(0.5001, 0.2499, 2.002)}
    assert fit.fitted_on == ("H100 op table t.csv",)


def test_a_device_weighs_the_same_however_many_rows_its_tables_have(tmp_path):
    """Each device weighs the same total in a class: a second table of the same rows under
    another model name (new weighting buckets) gives the fit of the first alone, beside a
    measured bundle of another device (so the weight between devices matters)."""
    h100 = load_device("H100")
    roof = Roofline(0.6 * h100.memory_bandwidth_gbs, 0.5 * h100.peak_bf16_tflops, 6.0)
    rows = _exact_rows(roof, tmp_path)
    p = _table(tmp_path / "t.csv", rows)
    q = _table(tmp_path / "u.csv", [["m2"] + r[1:] for r in rows])
    one = [("RTX4090", "meta-llama/Llama-3.1-8B", 1)]
    once = fit_efficiency(one, tables=[OpTable("H100", p, True)])
    twice = fit_efficiency(one, tables=[OpTable("H100", p, True), OpTable("H100", q, True)])
    assert once.classes["gemm"] == twice.classes["gemm"]
    # and the table moves the fit away from the bundle's own (Efficiency(0.936, 0.9126, 7.319))
    assert once.classes["gemm"] != fit_efficiency(one).classes["gemm"]


def test_the_shipped_manifest_lists_the_vidur_tables():
    tables = {t.path.name: t for t in op_tables()}
    assert set(tables) == {"H100_vidur.csv", "H100_vllm_layerwise.csv", "A100_vidur.csv"}
    assert tables["H100_vidur.csv"].fit and tables["H100_vidur.csv"].device == "H100"
    assert not tables["A100_vidur.csv"].fit and "PCIe" in tables["A100_vidur.csv"].why
    # Llama-2-7B at TP1, one token: qkv_proj (4096 -> 12288 columns, 100.7 MB of weights) on
    # H100 took 0.038 ms in Vidur's mlp.csv (its median statistic): 2.65 TB/s
    rows = {k: (w, t) for k, _c, _o, w, t in table_samples(tables["H100_vidur.csv"].path)
            if k == ("meta-llama/Llama-2-7b-hf", 1, "qkv_proj") and w.flops == 2 * 4096 * 12288}
    [(w, t)] = rows.values()
    assert (w.bytes, t) == (2 * (4096 + 4096 * 12288 + 12288), 38.0)


@pytest.mark.parametrize("body, line, key", [
    ("model,hidden\nm,1\n", 1, None),                                              # header
    (HEADER + "m,4096,32,8,14336,1,qkv_proj,1,20\nm,4096,x,8,14336,1,qkv_proj,2,21\n", 3, "heads"),
    (HEADER + "m,4096,32,8,14336,1,qkv_proj,1,\n", 2, "time_us"),
    (HEADER + "m,4096,32,8,14336,1.5,qkv_proj,1,2.0\n", 2, "tp"),                # not an integer
    (HEADER + "m,4096,32,8,14336,1,embedding,1,2.0\n", 2, "layer"),               # neither GEMM nor vLLM kernel
    (HEADER + "m,4096,32,8,14336,0,qkv_proj,1,2.0\n", 2, None),                   # tp 0
    (HEADER + "m,4096,32,8,14336,1,qkv_proj,1,-1\n", 2, None),                    # negative time
    (HEADER + "m,4096,30,8,14336,1,qkv_proj,1,2\n", 2, None),                     # 4096 % 30
])
def test_a_bad_table_row_names_the_file_line_and_column(tmp_path, body, line, key):
    p = tmp_path / "t.csv"
    p.write_text(body)
    with pytest.raises(ProfileError) as exc:
        list(table_samples(p))
    assert exc.value.file == str(p) and exc.value.line == line and exc.value.key == key


@pytest.mark.parametrize("manifest, key", [
    ("tables: {t.csv: {device: H100}}\n", "tables.t.csv"),                        # fit missing
    ("tables: {t.csv: {device: H100, fit: false}}\n", "tables.t.csv"),            # why missing
    ("tables: {t.csv: {device: H100, fit: true, weight: 2}}\n", "tables.t.csv"),  # unknown key
    ("tables: {u.csv: {device: H100, fit: true}}\n", "tables.u.csv"),             # no such file
    ("- t.csv\n", "tables"),
])
def test_a_bad_manifest_names_it_and_the_key(tmp_path, manifest, key):
    (tmp_path / "t.csv").write_text(HEADER)
    (tmp_path / "tables.yaml").write_text(manifest)
    with pytest.raises(ProfileError) as exc:
        op_tables(tmp_path)
    assert exc.value.key == key


VIDUR_HEADER = ("time_stats.attn_pre_proj.median,time_stats.attn_post_proj.median,time_stats.mlp_up_proj.median,"
                "time_stats.mlp_down_proj.median,time_stats.mlp_act.median,n_head,n_kv_head,n_embd,n_expanded_embd,"
                "vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n")


def test_the_importer_keeps_gemms_medians_and_sparse_sizes_byte_for_byte(tmp_path):
    base = tmp_path / "data" / "profiling" / "compute" / "h100"
    (base / "org" / "m").mkdir(parents=True)
    (base / "org" / "m" / "mlp.csv").write_text(
        VIDUR_HEADER
        + "0.010,0.005,0.020,0.011,0.003,32,8,4096,14336,128256,True,3,1\n"
        + "0.012,0.006,0.022,0.013,0.003,32,8,4096,14336,128256,True,3,1\n"      # 3 tokens twice: median
        + "0.030,0.015,0.060,0.031,0.004,32,8,4096,14336,128256,True,5,1\n"      # 5: not a sparse size
        + "0.009,0.0045,0.018,0.010,0.002,32,8,4096,14336,128256,True,1,2\n")
    (base / "other" / "gelu").mkdir(parents=True)                                # a non-gated MLP: skipped
    (base / "other" / "gelu" / "mlp.csv").write_text(
        VIDUR_HEADER + "0.010,0.005,0.020,0.011,0.003,32,32,2560,10240,51200,False,1,1\n")
    out = tmp_path / "H100_x.csv"
    r = subprocess.run([sys.executable, str(REPO / "hardware" / "tools" / "import_vidur_ops.py"), str(tmp_path),
                        "h100", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (
        HEADER
        + "org/m,4096,32,8,14336,1,down_proj,3,12.0\n"
        + "org/m,4096,32,8,14336,1,gate_up_proj,3,21.0\n"
        + "org/m,4096,32,8,14336,1,o_proj,3,5.5\n"
        + "org/m,4096,32,8,14336,1,qkv_proj,3,11.0\n"
        + "org/m,4096,32,8,14336,2,down_proj,1,10.0\n"
        + "org/m,4096,32,8,14336,2,gate_up_proj,1,18.0\n"
        + "org/m,4096,32,8,14336,2,o_proj,1,4.5\n"
        + "org/m,4096,32,8,14336,2,qkv_proj,1,9.0\n")
    # and the output is a table the fit reads
    assert len(list(table_samples(out))) == 8


def test_an_elementwise_row_is_the_elementwise_class_and_the_shipped_h100_kernels():
    """A row of one of vLLM's elementwise kernels is a sample of the ``elementwise`` class with
    its dense.csv work; the shipped H100 table holds the two kernel times of nm-vllm PR 332's
    H100 decode profile: rms_norm 4 us, rotary_embedding 3 us (96 us over 32 calls)."""
    tables = {t.path.name: t for t in op_tables()}
    t = tables["H100_vllm_layerwise.csv"]
    assert t.fit and t.device == "H100"
    rows = list(table_samples(t.path))
    model = load_model("meta-llama/Llama-3.1-8B")
    assert [(c, op, w, tm) for _k, c, op, w, tm in rows] == [
        ("elementwise", "layernorm", dense_work(model, "layernorm", 4, 1), 4.0),
        ("elementwise", "rotary_emb", dense_work(model, "rotary_emb", 4, 1), 3.0)]
