"""The two-state power model: exact joules and watts for hand-computed cases."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from llmservingsim.hardware import load_device
from llmservingsim.power import PowerModel


def test_energy_exact_b200_tp2():
    # 2 GPUs x (1000 W x 1.5 s + 192.5 W x 0.5 s) = 2 x 1596.25 J
    pm = PowerModel(load_device("B200"), 2)
    assert pm.energy_j(1_500_000_000, 500_000_000) == 3192.5


def test_energy_exact_rtxpro6000_tp2_one_step():
    # one 407,492,700 ns step (the artifact's 1024+4 TP2 step) then 92,507,300 ns idle:
    # 2 x (600 x 0.4074927 + 81 x 0.0925073) = 2 x (244.49562 + 7.4930913) = 503.9774226 J
    pm = PowerModel(load_device("RTXPRO6000"), 2)
    assert pm.energy_j(407_492_700, 92_507_300) == pytest.approx(503.9774226, abs=1e-9)


def test_zero_time_is_zero_energy():
    assert PowerModel(load_device("H100"), 8).energy_j(0, 0) == 0.0


def test_power_w_exact():
    pm = PowerModel(load_device("RTXPRO6000"), 2)
    assert pm.power_w(0.0) == 162.0        # 2 x standby 81 W
    assert pm.power_w(1.0) == 1200.0       # 2 x active 600 W
    assert pm.power_w(0.25) == 421.5       # 2 x (81 + 0.25 x 519)


def test_unassigned_gpus_draw_idle_power():
    # 8 H100s holding no model for one hour: 8 x 69 W x 3600 s
    assert PowerModel(load_device("H100"), 8).unassigned_energy_j(3_600_000_000_000) == 1_987_200.0


@pytest.mark.parametrize("args", [(-1, 0), (0, -1), (1.5, 0), (True, 0)])
def test_energy_rejects_non_ns_arguments(args):
    with pytest.raises(ValueError):
        PowerModel(load_device("B200"), 1).energy_j(*args)


def test_bad_num_gpus_and_fraction():
    with pytest.raises(ValueError):
        PowerModel(load_device("B200"), 0)
    with pytest.raises(ValueError):
        PowerModel(load_device("B200"), 1).power_w(1.5)


@given(busy=st.integers(0, 10 ** 13), idle=st.integers(0, 10 ** 13), n=st.integers(1, 8))
def test_energy_equals_mean_power_times_time(busy, idle, n):
    pm = PowerModel(load_device("H200"), n)
    total = busy + idle
    if total == 0:
        return
    assert pm.energy_j(busy, idle) == pytest.approx(
        pm.power_w(busy / total) * total / 1e9, rel=1e-12)
    # additivity: splitting an interval changes nothing but float rounding
    assert pm.energy_j(busy, idle) == pytest.approx(
        pm.energy_j(busy, 0) + pm.energy_j(0, idle), rel=1e-12)
