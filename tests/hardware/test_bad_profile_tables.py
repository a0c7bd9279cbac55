"""Profile-bundle CSVs are checked where they are parsed (llmservingsim/profiles.py): a value
that is not a finite number, or a negative time or grid coordinate, is a ProfileError naming
the file, line and column (it used to reach the interpolation tables as NaN, or fail deep in
the step timer); zero stays legal, and every shipped bundle still loads."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmservingsim.errors import ProfileError
from llmservingsim.paths import profiles_dir
from llmservingsim.profiles import load_bundle

HW, MODEL = "DEV", "org/model"
# A minimal valid bundle: one point per axis (attention: one prefill-only and one decode-only
# point; the mixed grid is filled from them), and a skew fit with one bucket.
GOOD = {
    "dense.csv": "layer,tokens,time_us\nqkv_proj,1,2.0\nqkv_proj,16,0\n",
    "per_sequence.csv": "layer,sequences,time_us\nlm_head,1,3.0\n",
    "attention.csv": ("prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n"
                      "1,0,0,0,4.0\n0,0,1,1,5.0\n"),
    "skew_fit.csv": "pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha\n0,n1,s1,k1,p1,-0.5\n",
}
META = "skew_fit:\n  per_tp:\n    1: {alpha_default: 0.1}\n"


def bundle(tmp_path: Path, **replace: str) -> Path:
    """A bundle root holding GOOD with ``replace``d files (name without .csv -> text)."""
    tp1 = tmp_path / HW / MODEL / "bf16" / "tp1"
    tp1.mkdir(parents=True)
    (tp1.parent / "meta.yaml").write_text(replace.pop("meta", META))
    for name, text in GOOD.items():
        (tp1 / name).write_text(replace.get(name[:-4], text))
    return tmp_path


def load_error(root: Path) -> ProfileError:
    with pytest.raises(ProfileError) as exc:
        load_bundle(HW, MODEL, 1, root=root)
    return exc.value


def test_the_minimal_bundle_loads_with_zero_times_and_a_negative_alpha(tmp_path):
    b = load_bundle(HW, MODEL, 1, root=bundle(tmp_path))
    assert b.dense["qkv_proj"].ys == [2.0, 0.0] and b.skew.table[(0.0, "n1", "s1", "k1", "p1")] == -0.5


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400", "-1", "-0.5", "abc", ""])
def test_bad_dense_time_names_file_line_and_column(tmp_path, value):
    root = bundle(tmp_path, dense=f"layer,tokens,time_us\nqkv_proj,1,2.0\nqkv_proj,16,{value}\n")
    err = load_error(root)
    assert str(err) == f"{err.file}:3: column 'time_us' must be a finite number >= 0, got {value!r}"
    assert err.file.endswith("tp1/dense.csv")


def test_a_row_longer_than_the_header_is_an_error(tmp_path):
    err = load_error(bundle(tmp_path, dense="layer,tokens,time_us\nqkv_proj,1,2.0\nqkv_proj,16,1,2\n"))
    assert err.line == 3 and "row has 4 fields, the header 3" in str(err)


@pytest.mark.parametrize("file,text,line,column", [
    ("per_sequence", "layer,sequences,time_us\nlm_head,-1,3.0\n", 2, "sequences"),
    ("attention", "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n1,-1,0,0,4.0\n0,0,1,1,5.0\n", 2,
     "kv_prefill"),
    ("attention", "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n1,0,0,0,4.0\n0,0,1,1,nan\n", 3,
     "time_us"),
    ("skew_fit", "pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha\n0,n1,s1,k1,p1,NaN\n", 2, "alpha"),
    ("skew_fit", "pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha\n-2,n1,s1,k1,p1,1\n", 2, "pc"),
    ("dense", "layer,tokens,time_us\nqkv_proj,1\n", 2, "time_us"),          # a short row
])
def test_bad_cells_name_file_line_and_column(tmp_path, file, text, line, column):
    err = load_error(bundle(tmp_path, **{file: text}))
    assert err.file.endswith(f"tp1/{file}.csv") and err.line == line
    assert f"column '{column}'" in str(err), str(err)


def test_non_utf8_profile_table_names_the_line(tmp_path):
    root = bundle(tmp_path)
    path = root / HW / MODEL / "bf16" / "tp1" / "attention.csv"
    path.write_bytes(path.read_bytes().replace(b"0,0,1,1", b"0,0,1,\xe91"))
    err = load_error(root)
    assert str(err) == f"{path}:3: cannot read profile table: not UTF-8 text (byte 0xe9 at column 7)"


@pytest.mark.parametrize("meta,key", [
    ("skew_fit:\n  per_tp:\n    1: {alpha_default: .nan}\n", "skew_fit.per_tp.1"),
    ("skew_fit:\n  per_tp:\n    1: 0.5\n", "skew_fit.per_tp.1"),
    ("skew_fit:\n  per_tp: {1: {alpha_default: 0}}\n  bucket_axes: [1]\n", "skew_fit.bucket_axes"),
])
def test_bad_skew_fit_meta_names_the_key(tmp_path, meta, key):
    err = load_error(bundle(tmp_path, meta=meta))
    assert err.file.endswith("meta.yaml") and f"key '{key}'" in str(err)


def shipped_bundles() -> list:
    root = profiles_dir()
    return sorted((str(tp.parent.parent.parent.relative_to(root)).split("/", 1)[0],
                   "/".join(tp.parts[-4:-2]), int(tp.name[2:]))
                  for tp in root.glob("*/*/*/bf16/tp*"))


@pytest.mark.parametrize("hardware,model,tp", shipped_bundles())
def test_every_shipped_bundle_loads(hardware, model, tp):
    assert load_bundle(hardware, model, tp).dense


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1" * 400])
def test_device_yaml_numbers_must_be_finite(tmp_path, value):
    from llmservingsim.hardware import load_device
    shipped = Path(__file__).resolve().parents[2] / "hardware" / "RTXPRO6000.yaml"
    text = "".join(f"memory_gib: {value}\n" if ln.startswith("memory_gib:") else ln
                   for ln in shipped.read_text(encoding="utf-8").splitlines(keepends=True))
    (tmp_path / "dev.yaml").write_text(text)
    with pytest.raises(ProfileError, match=r"dev.yaml, key 'memory_gib': expected a number"):
        load_device(str(tmp_path / "dev.yaml"))


def test_a_field_over_the_csv_field_limit_is_a_profile_error(tmp_path):
    err = load_error(bundle(tmp_path, dense="layer,tokens,time_us\n" + "x" * 200_000 + ",1,2\n"))
    assert err.line == 2 and "not valid CSV (field larger than field limit" in str(err)
