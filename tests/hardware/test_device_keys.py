"""The device-file block checks (llmservingsim/device_keys.py) name the file and the dotted key
for every block they guard, the inter-node block included."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmservingsim.errors import ProfileError
from llmservingsim.inter_node import InterNode, parse_inter_node

FILE = Path("hardware/X.yaml")
GOOD = {"fabric": "IB", "topology": "Switch", "nic_gbps": 400, "latency_ns": 1000}


@pytest.mark.parametrize("raw, key, text", [
    (["IB"], "inter_node", "expected a mapping of keys (fabric, topology, nic_gbps, latency_ns)"),
    ({**GOOD, "mtu": 4096}, "inter_node.mtu", "unknown key (expected: fabric, topology, nic_gbps, latency_ns)"),
    ({k: v for k, v in GOOD.items() if k != "nic_gbps"}, "inter_node.nic_gbps", "missing key"),
    ({**GOOD, "topology": "Torus"}, "inter_node.topology", "is not one of Ring, FullyConnected, Switch"),
    ({**GOOD, "nic_gbps": 0}, "inter_node.nic_gbps", "must be a number > 0"),
])
def test_bad_inter_node_block_names_file_and_key(raw, key, text):
    with pytest.raises(ProfileError) as e:
        parse_inter_node(raw, FILE)
    msg = str(e.value)
    assert str(FILE) in msg and key in msg and text in msg, msg


def test_inter_node_bandwidth_in_astrasim_units():
    # 400 Gb/s = 50e9 B/s; ASTRA-Sim reads "GB/s" as 2^30 / 1e9 bytes per ns: 50 / 1.073741824
    assert parse_inter_node(GOOD, FILE) == InterNode("IB", "Switch", 400.0, 1000.0)
    assert parse_inter_node(GOOD, FILE).bandwidth_gbs == 46.566
