"""A bundle derived or synthesized on the fly is built in memory (profiles.table_columns +
profiles.bundle_from_columns), never written: its tables must be bit for bit the ones
``load_bundle`` reads back from the folder ``derive`` / ``synthesize`` writes, and its
provenance that folder's plus " on the fly"."""
from __future__ import annotations

import csv
import shutil
import struct

import pytest
from hypothesis import given, settings, strategies as st

from llmservingsim.derive_bundle import derive, load_or_derive
from llmservingsim.errors import ProfileError
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.paths import profiles_dir
from llmservingsim.profiles import (TABLE_COLUMNS, _read_csv, bundle_from_columns, load_bundle,
                                    table_columns)
from llmservingsim.synthesize_bundle import load_synthesized, synthesize


def canon(x):
    """A bundle's contents as plain values, floats by their bits (so -0.0 != 0.0)."""
    if isinstance(x, float):
        return ("f", struct.pack("<d", x))
    if isinstance(x, (str, int, type(None))):
        return x
    if isinstance(x, dict):
        return ("d", [(canon(k), canon(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple)):
        return ("l", [canon(v) for v in x])
    if isinstance(x, frozenset):
        return ("s", sorted(map(repr, x)))
    if hasattr(x, "__slots__"):
        return (type(x).__name__, [canon(getattr(x, s)) for s in x.__slots__ if s != "_cache"])
    return (type(x).__name__, canon(vars(x)))


def tables(b):
    return canon((b.tp, b.meta, b.dense, b.per_sequence, b.attention, b.skew, b.moe))


@pytest.mark.parametrize("hw, model, tp", [("RTXPRO6000", "meta-llama/Llama-3.1-8B", 2),
                                           ("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507", 2)])
def test_derived_on_the_fly_is_the_written_and_reloaded_bundle(tmp_path, hw, model, tp):
    src = profiles_dir() / hw / model / "bf16"
    dst = tmp_path / hw / model / "bf16"
    shutil.copytree(src / "tp1", dst / "tp1")
    shutil.copy(src / "meta.yaml", dst / "meta.yaml")
    fly = load_or_derive(hw, model, tp, root=tmp_path)            # no tp<tp> folder: in memory
    assert not (dst / f"tp{tp}").exists()                         # nothing written
    derive(hw, model, tp, root=tmp_path)
    disk = load_bundle(hw, model, tp, root=tmp_path, cache=False)
    assert fly.provenance == "derived from tp1 on the fly" and disk.provenance == "derived from tp1"
    assert fly.path == disk.path == dst / f"tp{tp}"
    assert (fly.moe is None) == (not load_model(model).is_moe)
    assert tables(fly) == tables(disk)


@pytest.mark.parametrize("hw, model, tp", [("H100", "meta-llama/Llama-3.1-8B", 1),
                                           ("MI300X", "microsoft/Phi-mini-MoE-instruct", 2)])
def test_synthesized_on_the_fly_is_the_written_and_reloaded_bundle(tmp_path, hw, model, tp):
    dev, spec = load_device(hw), load_model(model)
    where = tmp_path / "fly" / f"tp{tp}"
    fly = load_synthesized(dev, spec, tp, where)
    assert not where.exists()
    synthesize(dev, spec, tp, tmp_path / hw / model / "bf16" / f"tp{tp}")
    disk = load_bundle(hw, model, tp, root=tmp_path, cache=False)
    assert fly.provenance == "synthesized from datasheet on the fly"
    assert disk.provenance == "synthesized from datasheet"
    assert fly.path == where and fly.skew is None and (fly.moe is not None) == spec.is_moe
    assert tables(fly) == tables(disk)


cells = st.one_of(st.integers(0, 2**53), st.floats(0, 1e300, allow_nan=False),
                  st.floats(0, 1e6).map(lambda t: f"{t:.4f}"))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["qkv_proj", "o_proj", "layer-x"]), cells, cells),
                     min_size=1, max_size=30))
def test_table_columns_are_what_the_loader_reads_back(tmp_path_factory, rows):
    """For any cells csv.writer can write (ints, floats, preformatted strings), the columns
    built in memory equal, bit for bit, the loader's columns of the written file."""
    path = tmp_path_factory.mktemp("t") / "dense.csv"
    header = ["layer", "tokens", "time_us"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    assert canon(table_columns("dense.csv", header, [list(r) for r in rows], path)) == \
        canon(_read_csv(path, TABLE_COLUMNS["dense.csv"]))


def test_table_columns_reject_what_the_loader_rejects(tmp_path):
    where = tmp_path / "dense.csv"
    for rows in ([["qkv_proj", 1, "-1.0"]], [["qkv_proj", 1, "nan"]], []):
        with pytest.raises(ProfileError):
            table_columns("dense.csv", ["layer", "tokens", "time_us"], rows, where)
    with pytest.raises(ProfileError, match="missing column"):
        table_columns("dense.csv", ["layer", "time_us"], [["qkv_proj", "1.0"]], where)
    with pytest.raises(ProfileError, match="missing profile file"):
        bundle_from_columns(tmp_path, 1, {}, {}, tmp_path / "skew_fit.csv", tmp_path / "meta.yaml", "measured")
