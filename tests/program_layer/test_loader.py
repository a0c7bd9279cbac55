"""load_policy: names, params, file and module references, errors; the paper's Listings."""
import math
from pathlib import Path

import pytest

from llmservingsim.errors import ConfigError
from pl_fakes import S, build, make_program
from pl_views import view
from program_layer.policies import (TTL, MinWaste, RetentionPolicy, SchedulingPolicy, Signals,
                                    load_policy)

REPO = Path(__file__).resolve().parents[2]


def test_builtin_names_and_params():
    assert type(load_policy("retention", "ttl", base_dir=REPO)) is TTL
    pol = load_policy("retention", {"name": "ttl", "tau_s": 0.5}, base_dir=REPO)
    assert pol.tau_s == 0.5 and pol.spec_label == "ttl"
    for axis, name in (("scheduling", "plas"), ("routing", "session-affinity"),
                       ("retention", "pressure-ttl"), ("retention", "continuum")):
        assert load_policy(axis, name, base_dir=REPO).name == name
    mw = load_policy("retention", {"name": "min-waste", "profile":
                                   "profiles/infercept/infercept_profile_b200_8B_tp1.json"},
                     base_dir=REPO)
    assert isinstance(mw, MinWaste) and mw.profile.S == 2304
    mw2 = load_policy("retention", {"name": "min-waste", "hardware": "B200",
                                    "model": "meta-llama/Llama-3.1-8B", "tp": 1}, base_dir=REPO)
    assert mw2.profile.a == mw.profile.a


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        load_policy("retention", "lru", base_dir=REPO)
    msg = str(err.value)
    assert msg.startswith("key 'policies.retention': unknown retention policy 'lru'")
    assert "valid names: cache-lru, continuum, evict-always, min-waste, offload-ttl, pressure-ttl, ttl" in msg
    with pytest.raises(ConfigError, match="key 'policies.routing'.*least-loaded, round-robin"):
        load_policy("routing", "random", base_dir=REPO)


def test_unknown_or_bad_params():
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) tau for 'ttl'; "
                                          r"valid parameters: tau_s"):
        load_policy("retention", {"name": "ttl", "tau": 1}, base_dir=REPO)
    with pytest.raises(ConfigError, match="key 'policies.retention'.*tau_s"):
        load_policy("retention", {"name": "ttl", "tau_s": "soon"}, base_dir=REPO)
    with pytest.raises(ConfigError, match="valid parameters: none"):
        load_policy("scheduling", {"name": "plas", "x": 1}, base_dir=REPO)
    with pytest.raises(ConfigError, match="needs a 'name'"):
        load_policy("scheduling", {"tau_s": 1}, base_dir=REPO)
    with pytest.raises(ConfigError, match="expected a policy name"):
        load_policy("scheduling", 3, base_dir=REPO)
    with pytest.raises(ConfigError, match="key 'policies.retention'.*needs 'profile'"):
        load_policy("retention", "min-waste", base_dir=REPO)


def test_class_references(tmp_path):
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "mine.py").write_text(
        "from program_layer.policies import SchedulingPolicy\n"
        "class Mine(SchedulingPolicy):\n"
        "    def __init__(self, k=1):\n        self.k = k\n"
        "    def priority(self, pcb, now):\n        return self.k\n"
        "class NotAPolicy:\n    pass\n")
    pol = load_policy("scheduling", {"name": "pol/mine.py:Mine", "k": 5}, base_dir=tmp_path)
    assert pol.priority(view(), 0.0) == 5 and pol.spec_label == "pol/mine.py:Mine"
    mod = load_policy("retention", "program_layer.policies.builtin_retention:TTL",
                      base_dir=tmp_path)
    assert isinstance(mod, TTL)
    with pytest.raises(ConfigError, match="'NotAPolicy' from 'pol/mine.py' is not a "
                                          "SchedulingPolicy"):
        load_policy("scheduling", "pol/mine.py:NotAPolicy", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="is not a RetentionPolicy"):
        load_policy("retention", "pol/mine.py:Mine", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="has no class 'Nope'"):
        load_policy("scheduling", "pol/mine.py:Nope", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="policy file not found"):
        load_policy("scheduling", "pol/absent.py:X", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="cannot import module 'no_such_mod_xyz'"):
        load_policy("scheduling", "no_such_mod_xyz:X", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="cannot construct"):
        load_policy("scheduling", {"name": "pol/mine.py:Mine", "z": 1}, base_dir=tmp_path)
    (tmp_path / "bad.py").write_text("def f(:\n")
    with pytest.raises(ConfigError) as err:
        load_policy("scheduling", "bad.py:X", base_dir=tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'bad.py'}:1, key 'policies.scheduling'")


LISTINGS = {
    1: ("retention", "examples/policies/listing1_seed_retention.py:EvolvedRetention"),
    2: ("retention", "examples/policies/listing2_evolved_retention.py:EvolvedRetention"),
    3: ("scheduling", "examples/policies/listing3_seed_scheduling.py:EvolvedScheduling"),
    4: ("scheduling", "examples/policies/listing4_evolved_scheduling.py:EvolvedScheduling"),
}


@pytest.mark.parametrize("n", sorted(LISTINGS))
def test_listing_files_have_markers_and_load(n):
    axis, spec = LISTINGS[n]
    text = (REPO / spec.split(":")[0]).read_text()
    start, end = text.index("# EVOLVE-BLOCK-START"), text.index("# EVOLVE-BLOCK-END")
    assert start < text.index("class Evolved") < end
    pol = load_policy(axis, spec, base_dir=REPO)
    assert isinstance(pol, RetentionPolicy if axis == "retention" else SchedulingPolicy)


def test_listings_compute_the_paper_equations():
    l2 = load_policy("retention", LISTINGS[2][1], base_dir=REPO)
    l2.signals = Signals(kv_utilization=0.25)
    # unseen tool: est = TAU_S = 2; scale = max(0.5, 30000/20000) = 1.5; * max(0.3, 0.75)
    assert l2.on_turn_complete(view(tool_name="t", context_tokens=30000), 0, 1.0) == \
        ("protect", 1.0 + 2.0 * 1.5 * 0.75)
    arrived = view(tool_name="t", gap_start_s=1.0, gap_end_s=1.4)
    assert l2.on_turn_arrival(arrived, 1.4) == "release"
    assert l2.gap_ema == {"t": pytest.approx(0.4)}
    l2.on_turn_arrival(view(tool_name="t", gap_start_s=2.0, gap_end_s=3.0), 3.0)
    assert l2.gap_ema["t"] == pytest.approx(0.8 * 0.4 + 0.2 * 1.0)
    l4 = load_policy("scheduling", LISTINGS[4][1], base_dir=REPO)
    v = view(attained_service_s=4.0, context_tokens=1000, kv_protected=True)
    assert l4.priority(v, 0.0) == int(round(math.sqrt(4.0) * 1000 + 30.0 - 100.0))
    assert load_policy("scheduling", LISTINGS[3][1], base_dir=REPO).priority(v, 0.0) == 4000


def test_listings_run_unchanged_in_the_orchestrator():
    progs = [make_program(i, i * S // 10, [(20000, 50, S // 2, "search"),
                                           (21000, 50, S // 4, "calc"), (22000, 50, 0, None)])
             for i in range(4)]
    for ret, sch in ((1, 3), (2, 4)):
        cluster, orch = build(progs, retention=LISTINGS[ret][1], scheduling=LISTINGS[sch][1],
                              routing="session-affinity", num_instances=2, base_dir=REPO,
                              kv_utilization=[0.5, 0.5])
        orch.start()
        cluster.run()
        assert orch.programs_done()
        assert all(d.kind == "protect" for _, _, d in cluster.completion_decisions)


def test_a_substituted_axis_fails_closed(tmp_path):
    """While the search's proxy stands in for a candidate, nothing else loads on that axis."""
    from program_layer.policies.loader import substituted
    stand_in = object.__new__(type("Proxy", (), {}))
    with substituted("retention", "cand.py:Cand", lambda: stand_in):
        assert load_policy("retention", " cand.py:Cand ", base_dir=tmp_path) is stand_in
        assert stand_in.spec_label == "cand.py:Cand"
        for other in ("./cand.py:Cand", {"name": "cand.py:Cand", "x": 1}, "ttl"):
            with pytest.raises(ConfigError, match="refusing to load it in this process"):
                load_policy("retention", other, base_dir=tmp_path)
        assert load_policy("scheduling", "fcfs", base_dir=tmp_path).spec_label == "fcfs"
    assert load_policy("retention", "ttl", base_dir=tmp_path).spec_label == "ttl"
