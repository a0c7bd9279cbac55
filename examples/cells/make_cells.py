"""Regenerate the paper's experiment cells (AgentServeSim paper §4-§5, Appendix B).

    python examples/cells/make_cells.py

Validation grid: {B200 Llama-3.1-8B TP1, B200 Llama-3.1-70B TP2, RTX PRO 6000 Llama-3.1-70B TP2}
x {swebench 50 programs, bfcl 100 programs} x {0.02, 0.04, 0.06, 0.08, 0.1} JPS, TTL (tau = 2 s)
retention and PLAS scheduling, one instance. The Table 1 grid is examples/sweeps/table1.yaml and
the policy-search target cell examples/search/target_cell.yaml.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLATFORMS = [("b200-8b-tp1", "B200", "meta-llama/Llama-3.1-8B", 1),
             ("b200-70b-tp2", "B200", "meta-llama/Llama-3.1-70B", 2),
             ("rtx-70b-tp2", "RTXPRO6000", "meta-llama/Llama-3.1-70B", 2)]
WORKLOADS = [("swebench", 50), ("bfcl", 100)]
RATES = [0.02, 0.04, 0.06, 0.08, 0.1]

for tag, hw, model, tp in PLATFORMS:
    for gen, n in WORKLOADS:
        for rate in RATES:
            name = f"{tag}-{gen}-{rate:.2f}jps.yaml"
            (HERE / name).write_text(
                f"# Paper validation cell: {model} TP{tp} on {hw}, {n} {gen} programs at {rate} JPS,\n"
                f"# TTL (tau = 2 s) retention + PLAS scheduling (paper §5.1, Appendix B).\n"
                f"name: {name[:-5]}\n"
                f"model: {model}\nhardware: {hw}\nparallelism: {{tp: {tp}}}\n"
                f"workload: {{generator: {gen}, programs: {n}, rate_jps: {rate}, seed: 0}}\n"
                f"policies: {{retention: {{name: ttl, tau_s: 2.0}}, scheduling: plas}}\n")
