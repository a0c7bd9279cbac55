"""Every shipped device loads, is sourced, and bad device files fail with file + key named."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from llmservingsim.errors import ConfigError, ProfileError
from llmservingsim.hardware import Device, PowerSpec, list_devices, load_device
from llmservingsim.paths import hardware_dir, profiles_dir

DEVICES = ["A100", "B200", "H100", "H200", "L40S", "MI300X", "RTX4090", "RTXPRO6000"]
KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*):(.*)$")


def test_list_devices_is_the_shipped_eight():
    assert list_devices() == DEVICES


@pytest.mark.parametrize("name", DEVICES)
def test_every_device_loads_with_typed_fields(name):
    d = load_device(name)
    assert isinstance(d, Device) and d.name == name
    assert d.path == hardware_dir() / f"{name}.yaml"
    assert isinstance(d.power, PowerSpec)
    for f in ("memory_gib", "memory_bandwidth_gbs", "peak_bf16_tflops",
              "nccl_allreduce_busbw_gbs"):
        assert isinstance(getattr(d, f), float) and getattr(d, f) > 0
    assert 0 <= d.power.idle_w <= d.power.standby_w <= d.power.active_w
    assert isinstance(d.gpus_per_node, int) and d.gpus_per_node >= 1
    assert d.network_path.is_file() and d.system_path.is_file()
    # the same device loads by path too
    assert load_device(str(d.path)) == d


def test_exact_values_of_the_validated_devices():
    b200, rtx = load_device("B200"), load_device("RTXPRO6000")
    assert (b200.memory_gib, b200.gpus_per_node, b200.interconnect) == (183359 / 1024, 8, "NVLink5")
    assert b200.nccl_allreduce_busbw_gbs == 538.8
    assert (rtx.memory_gib, rtx.interconnect, rtx.nccl_allreduce_busbw_gbs) == (
        97887 / 1024, "PCIe Gen5", 35.2)
    assert rtx.gpu == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def _profile_hardware_folders() -> list[str]:
    return sorted(p.name for p in profiles_dir().iterdir()
                  if p.is_dir() and p.name not in ("models", "infercept"))


def test_every_profile_bundle_hardware_has_a_device_with_the_same_gpu_name():
    folders = _profile_hardware_folders()
    assert set(folders) >= {"B200", "RTXPRO6000", "RTX4090"}
    for hw in folders:
        device = load_device(hw)
        for meta in (profiles_dir() / hw).rglob("meta.yaml"):
            assert yaml.safe_load(meta.read_text())["gpu"] == device.gpu, meta


@pytest.mark.parametrize("name", DEVICES)
def test_every_value_line_carries_a_source_comment(name):
    """Each `key: value` line of a device file ends in a `# source` comment; the numeric
    leaves found by YAML parsing are exactly the commented numeric lines (nothing hides in
    flow style)."""
    text = (hardware_dir() / f"{name}.yaml").read_text()
    commented_numeric = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        m = KEY_LINE.match(line)
        if not m:
            continue
        value, _, comment = m.group(3).partition("#")
        if not value.strip():
            continue  # a mapping header such as `power:`
        assert len(comment.strip()) >= 10, f"{name}.yaml:{lineno} has no source comment"
        if isinstance(yaml.safe_load(value), (int, float)):
            commented_numeric.add(m.group(2))
    data = yaml.safe_load(text)
    numeric_leaves = {k for k, v in data.items() if isinstance(v, (int, float))}
    numeric_leaves |= {k for k, v in data["power"].items() if isinstance(v, (int, float))}
    # the optional network between nodes (docs/clusters.md): NIC rate and hop latency, and the
    # optional KV-offload host link (docs/kv-tiers.md)
    numeric_leaves |= {k for k, v in (data.get("inter_node") or {}).items() if isinstance(v, (int, float))}
    numeric_leaves |= {k for k, v in (data.get("host_link") or {}).items() if isinstance(v, (int, float))}
    assert numeric_leaves == commented_numeric
    # 4 rates/sizes + gpus_per_node + 3 power figures + the memory model's CUDA total, SM
    # count and TP non-torch memory (+ the optional collective_latency_ns, inter_node and
    # host_link figures)
    optional = {"collective_latency_ns", "nic_gbps", "latency_ns", "h2d_gbs", "d2h_gbs", "latency_us",
                "boost_clock_mhz", "sustained_clock_mhz"}
    assert len(numeric_leaves - optional) == 11


# ------------------------------------------------------------------ errors

@pytest.fixture
def b200_copy(tmp_path: Path) -> Path:
    """A private copy of B200.yaml with its network and system files, to break on purpose."""
    src = hardware_dir()
    shutil.copy(src / "B200.yaml", tmp_path / "B200.yaml")
    for sub in ("networks", "systems"):
        (tmp_path / sub).mkdir()
    shutil.copy(src / "networks" / "B200_nvlink5_switch.yml", tmp_path / "networks")
    shutil.copy(src / "systems" / "B200.json", tmp_path / "systems")
    return tmp_path / "B200.yaml"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_copy_loads_before_breaking(b200_copy):
    assert load_device(str(b200_copy)).allreduce_ns(2 ** 30, 8) == 3_487_456


def test_unknown_device_lists_known_ones():
    with pytest.raises(ProfileError) as exc:
        load_device("V100")
    assert str(exc.value).endswith(
        "unknown device 'V100'; known devices: A100, B200, H100, H200, L40S, MI300X, RTX4090, RTXPRO6000")


def test_missing_file_path():
    with pytest.raises(ProfileError, match="device file not found"):
        load_device("/nonexistent/X.yaml")


@pytest.mark.parametrize("old,new,key,msg", [
    ("memory_gib: 179.0615234375", "memory_gib: lots", "memory_gib", "expected a number"),
    ("gpus_per_node: 8", "gpus_per_node: 8.0", "gpus_per_node", "expected a integer"),
    ("gpus_per_node: 8", "gpus_per_node: true", "gpus_per_node", "expected a integer"),
    ("memory_gib: 179.0615234375", "memory_gb: 179.0", "memory_gb", "unknown key"),
    ("  standby_w: 192.5", "  standbye_w: 192.5", "power.standbye_w", "unknown key"),
    ("  idle_w: 141.0", "  idle_w: 500.0", "power", "idle_w <= standby_w <= active_w"),
    ("peak_bf16_tflops: 2250.0", "peak_bf16_tflops: -1.0", "peak_bf16_tflops", "must be > 0"),
    ("name: B200", "name: B300", "name", "must equal the file name"),
    ("memory_technology: HBM3e", "memory_technology: LPDDR5X", "memory_technology", "HBM or GDDR"),
    ("memory_technology: HBM3e", "memory_technology: 3", "memory_technology", "expected a string"),
    ("peak_bf16_tflops: 2250.0", "peak_bf16_tflops: 2250.0\nboost_clock_mhz: 1965.0", "boost_clock_mhz",
     "needs sustained_clock_mhz too"),
    ("peak_bf16_tflops: 2250.0", "peak_bf16_tflops: 2250.0\nsustained_clock_mhz: 1580.0", "sustained_clock_mhz",
     "needs boost_clock_mhz too"),
    ("peak_bf16_tflops: 2250.0", "peak_bf16_tflops: 2250.0\nboost_clock_mhz: 0.0\nsustained_clock_mhz: 1.0",
     "boost_clock_mhz", "must be > 0"),
    ("peak_bf16_tflops: 2250.0", "peak_bf16_tflops: 2250.0\nboost_clock_mhz: 1.0\nsustained_clock_mhz: x",
     "sustained_clock_mhz", "expected a number"),
    ("network: networks/B200_nvlink5_switch.yml", "network: networks/none.yml", "network",
     "not found"),
])
def test_bad_device_file_names_file_and_key(b200_copy, old, new, key, msg):
    _edit(b200_copy, old, new)
    with pytest.raises(ProfileError) as exc:
        load_device(str(b200_copy))
    text = str(exc.value)
    assert text.startswith(f"{b200_copy}, key '{key}': "), text
    assert msg in text


def test_missing_key_is_named(b200_copy):
    text = b200_copy.read_text()
    b200_copy.write_text("\n".join(l for l in text.splitlines()
                                   if not l.startswith("interconnect:")))
    with pytest.raises(ProfileError, match=r"B200.yaml, key 'interconnect': missing key"):
        load_device(str(b200_copy))


def test_yaml_syntax_error_names_the_line(b200_copy):
    _edit(b200_copy, "gpus_per_node: 8", "gpus_per_node: [8")
    with pytest.raises(ProfileError, match=r"B200.yaml:\d+: not valid YAML"):
        load_device(str(b200_copy))


def test_network_errors_name_the_network_file(b200_copy):
    net = b200_copy.parent / "networks" / "B200_nvlink5_switch.yml"
    _edit(net, "npus_count: [ 8 ]", "npus_count: [ 4 ]")
    with pytest.raises(ProfileError, match=r"B200_nvlink5_switch.yml, key 'npus_count': "
                                           r"npus_count 4 must equal"):
        load_device(str(b200_copy))
    _edit(net, "npus_count: [ 4 ]", "npus_count: [ 8 ]")
    _edit(net, "topology: [ Switch ]", "topology: [ Torus ]")
    with pytest.raises(ProfileError, match=r"key 'topology': topology 'Torus'"):
        load_device(str(b200_copy))


def test_system_must_repeat_the_device_numbers(b200_copy):
    sysf = b200_copy.parent / "systems" / "B200.json"
    _edit(sysf, '"local-mem-bw": 7672.0', '"local-mem-bw": 8000.0')
    with pytest.raises(ProfileError, match=r"B200.json, key 'local-mem-bw': 8000.0 differs "
                                           r"from the device's memory_bandwidth_gbs 7672.0"):
        load_device(str(b200_copy))


def test_system_missing_key(b200_copy):
    sysf = b200_copy.parent / "systems" / "B200.json"
    _edit(sysf, '  "roofline-enabled": 0\n', '  "trace-enabled": 0\n')
    with pytest.raises(ProfileError, match=r"key 'trace-enabled': unknown key"):
        load_device(str(b200_copy))


def test_tp_group_larger_than_node_is_a_config_error():
    with pytest.raises(ConfigError, match="2 GPUs per node; a tensor-parallel group of 4"):
        load_device("RTX4090").network_for_tp(4)
    with pytest.raises(ConfigError):
        load_device("B200").network_for_tp(0)


def test_memory_family_is_the_technology_prefix(b200_copy):
    """Every shipped device names its DRAM technology; the family is its HBM / GDDR prefix, and a
    file without the optional key has no family (a synthesis then uses the pooled fraction)."""
    fams = {d: load_device(d).memory_family for d in ("A100", "B200", "H100", "H200", "MI300X",
                                                       "L40S", "RTX4090", "RTXPRO6000")}
    assert fams == {"A100": "HBM", "B200": "HBM", "H100": "HBM", "H200": "HBM", "MI300X": "HBM",
                    "L40S": "GDDR", "RTX4090": "GDDR", "RTXPRO6000": "GDDR"}
    assert load_device("B200").memory_technology == "HBM3e"
    text = b200_copy.read_text()
    b200_copy.write_text("\n".join(l for l in text.split("\n") if not l.startswith("memory_technology:")))
    dev = load_device(str(b200_copy))
    assert dev.memory_technology == "" and dev.memory_family == ""


def test_compute_peak_is_the_datasheet_peak_at_the_sustained_clock(b200_copy):
    """Where a device file gives both clocks, ``compute_tflops`` is the BF16 peak scaled by
    sustained / boost clock (RTX 4090: 165.2 x 2655 / 2520); without them it is the datasheet
    peak itself, and the system JSON keeps repeating the datasheet peak either way."""
    rtx = load_device("RTX4090")
    assert (rtx.boost_clock_mhz, rtx.sustained_clock_mhz) == (2520.0, 2655.0)
    assert rtx.compute_tflops == pytest.approx(174.05, abs=0.005)
    assert rtx.peak_bf16_tflops == 165.2
    for name in ("A100", "B200", "H100", "H200", "L40S", "MI300X", "RTXPRO6000"):
        dev = load_device(name)
        assert dev.compute_tflops == dev.peak_bf16_tflops and dev.sustained_clock_mhz == 0.0
    _edit(b200_copy, "peak_bf16_tflops: 2250.0", "peak_bf16_tflops: 2250.0\nboost_clock_mhz: 2000.0\n"
          "sustained_clock_mhz: 1500.0")
    assert load_device(str(b200_copy)).compute_tflops == 1687.5
