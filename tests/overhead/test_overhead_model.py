"""The overhead model: its terms by hand, its file format, and its fits recovering known
parameters from synthetic residual tables."""
from __future__ import annotations

import pytest

from llmservingsim.errors import ProfileError
from llmservingsim.model_config import load_model
from llmservingsim.overhead_fit import (CUSTOM_ALLREDUCE_MAX_BYTES, Row, fit_collectives, fit_framework,
                                        implausible, leave_one_out, per_allreduce, predict)
from llmservingsim.overhead_model import Framework, Regime, load_overhead, parse_overhead, regime_for
from llmservingsim.perf_model import PerformanceModel, batch_shape
from llmservingsim.profiles import load_bundle
from llmservingsim.step_timer import StepTimer
from llmservingsim.hardware import list_devices


def test_framework_terms_by_hand():
    fw = Framework(step_us=-400.0, prefill_us=3000.0, prefill_compute=0.2)
    assert fw.us(0, 0, 64, 10_000.0) == -400.0                              # decode step
    # two prefill chunks of 1,000 tokens among 1,064 tokens, 50 ms of compute
    assert fw.us(2, 1000, 1064, 50_000.0) == pytest.approx(-400 + 6000 + 0.2 * 50_000 * 1000 / 1064)


def test_step_timer_adds_the_framework_overhead_exactly():
    m = load_model("meta-llama/Llama-3.1-8B")
    perf = PerformanceModel(m, load_bundle("RTXPRO6000", m.name, 1))
    fw = Framework(100.0, 2000.0, 0.1)
    t = StepTimer(perf, None, fw)
    shape = batch_shape([(500, 0)], [800] * 20)
    timing = t.time_shape(shape)
    compute = perf.compute_us(shape)
    assert timing.compute_ns == round(compute * 1000)
    assert timing.overhead_ns == round(fw.us(1, 500, 520, compute) * 1000)
    assert timing.total_ns == timing.compute_ns + timing.overhead_ns


def test_regimes_pick_the_first_bound_the_message_fits_under():
    rs = (Regime(0.0, 28.0, 8 << 20), Regime(300.0, 35.0))
    assert regime_for(rs, (8 << 20) - 1) is rs[0] and regime_for(rs, 8 << 20) is rs[1]
    assert regime_for(rs, 28_000_000).us(28_000_000) == pytest.approx(300 + 28_000_000 / 35e3)


@pytest.mark.parametrize("raw,key", [
    ({"framework": {"step_us": 1, "bogus": 2}}, "framework.bogus"),
    ({"framework": {"prefill_us": "fast"}}, "framework.prefill_us"),
    ({"collectives": {"tp2": [{"latency_us": -1, "bandwidth_gbs": 3}]}}, "collectives.tp2[0].latency_us"),
    ({"collectives": {"tp2": [{"latency_us": 1, "bandwidth_gbs": 3}, {"max_bytes": 5, "latency_us": 1,
                                                                     "bandwidth_gbs": 3}]}}, "collectives.tp2"),
    ({"collectives": {"two": []}}, "collectives.two"),
    ({"models": {"m": {"step_us": float("nan")}}}, "models.m.step_us"),
    ({"colectives": {}}, "colectives"),
])
def test_bad_overhead_files_name_the_key(raw, key):
    with pytest.raises(ProfileError) as e:
        parse_overhead(raw, "x.yaml")
    assert e.value.key == key and e.value.file == "x.yaml"


def test_shipped_files_parse_and_a_device_without_one_gets_none():
    for dev in list_devices():
        load_overhead(dev)
    none = load_overhead("NoSuchGPU")
    assert none.framework == Framework() and none.source.startswith("none")
    b200 = load_overhead("B200")
    assert b200.for_model("meta-llama/Llama-3.1-70B").framework != b200.framework      # its own table's fit
    assert b200.for_model("Qwen/Qwen3-32B").framework == b200.framework
    assert load_overhead("RTXPRO6000").regimes_for(2)[0].max_bytes == CUSTOM_ALLREDUCE_MAX_BYTES


def _rows_from(fw: Framework, shapes) -> list:
    return [Row(pc, nd, k + fw.us(1 if pc else 0, pc, pc + nd, k), k) for pc, nd, k in shapes]


SHAPES = [(0, 4, 5000.0), (0, 64, 7000.0), (64, 8, 5200.0), (256, 32, 9000.0), (1024, 8, 14000.0),
          (4096, 16, 55000.0), (8192, 4, 100000.0), (16384, 8, 190000.0)]


def test_framework_fit_recovers_known_terms_and_loo_is_exact_on_noise_free_rows():
    truth = Framework(-450.0, 3100.0, 0.25)
    rows = _rows_from(truth, SHAPES)
    fw = fit_framework(rows)
    assert fw.step_us == pytest.approx(truth.step_us, abs=1e-3)
    assert fw.prefill_us == pytest.approx(truth.prefill_us, abs=1e-3)
    assert fw.prefill_compute == pytest.approx(truth.prefill_compute, abs=1e-9)
    assert all(p == pytest.approx(r.extra_us, abs=1e-3) for r, p in leave_one_out(rows))
    fixed = fit_framework(rows, {"prefill_us": 3100.0})
    assert fixed.prefill_us == 3100.0 and fixed.step_us == pytest.approx(-450.0, abs=1e-3)


def test_framework_fit_is_robust_to_a_bimodal_row():
    truth = Framework(0.0, 3000.0, 0.1)
    rows = _rows_from(truth, SHAPES) + [Row(64, 48, 5200.0 + 9000.0, 5200.0)]      # a CPU-bound outlier
    fw = fit_framework(rows)
    assert fw.prefill_us == pytest.approx(3000.0, rel=0.05) and fw.prefill_compute == pytest.approx(0.1, abs=0.01)


def test_collective_fit_recovers_both_regimes_and_drops_impossible_points():
    small, large = Regime(5.0, 28.0, CUSTOM_ALLREDUCE_MAX_BYTES), Regime(300.0, 35.0)
    fw = Framework(0.0, 3000.0, 0.0)
    layers, hidden = 80, 8192
    rows = []
    for pc, nd in [(0, 4), (0, 8), (0, 12), (256, 4), (480, 8), (1024, 4), (2048, 8), (8192, 4)]:
        size = (pc + nd) * hidden * 2
        kernel = 50_000.0 + 40.0 * pc
        rows.append(Row(pc, nd, kernel + predict(fw, Row(pc, nd, 0, kernel)) + 2 * layers * regime_for((small, large), size).us(size),
                        kernel))
    good = fit_collectives(rows, layers, hidden, fw)
    assert good[0].latency_us == pytest.approx(5.0, abs=1e-6) and good[0].bandwidth_gbs == pytest.approx(28.0)
    assert good[1].latency_us == pytest.approx(300.0, abs=1e-6) and good[1].bandwidth_gbs == pytest.approx(35.0)
    # a row whose all-reduces would beat a 35.2 GB/s bus is the kernel sum's error: left out
    fast = rows + [Row(4096, 4, 50_000.0 + 40 * 4096 + 3000 + 2 * layers * 1000.0, 50_000.0 + 40 * 4096)]
    pts = per_allreduce(fast, layers, hidden, fw)
    assert [p[2].pc for p in implausible(pts, 35.2)] == [4096]
    assert fit_collectives(fast, layers, hidden, fw, busbw_gbs=35.2)[1].latency_us == pytest.approx(300.0, abs=1e-6)
