"""Draw the shipped topology generators (networkx + matplotlib, the optional ``plot`` extra).

    python astra-sim/tools/draw_topologies.py docs/topologies

writes one PNG per generator (default parameters, as docs/topologies.md lists them): GPUs as
blue circles labelled with their NPU number, switches as grey squares, link width by bandwidth.
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

from astrasim.network.generators import GENERATORS  # noqa: E402

SHOWN = {"ring": {}, "fully_connected": {"gpus": 6}, "nvswitch": {}, "pcie_tree": {},
         "rail_optimized": {"nodes": 2, "gpus_per_node": 4}, "fat_tree": {"oversubscription": 2.0},
         "torus": {"dims": [4, 4]}, "dragonfly": {}}


def layout(name: str, g: nx.Graph) -> dict:
    if name in ("ring", "fully_connected"):
        return nx.circular_layout(g)
    if name == "torus":
        return {v: ((d["npu"] % 4) + 0.15 * (d["npu"] // 4), d["npu"] // 4) for v, d in g.nodes(data=True)}
    if name in ("pcie_tree", "fat_tree", "nvswitch", "rail_optimized"):
        tiers = {"root": 3, "spine": 3, "pcie": 2, "leaf": 2, "nvswitch": 2, "rail": 0}
        levels = {v: (tiers.get(d.get("tier"), 1) if d["kind"] == "switch" else 1) for v, d in g.nodes(data=True)}
        if name == "nvswitch":
            levels = {v: (2 if d["kind"] == "switch" else 1) for v, d in g.nodes(data=True)}
        return nx.multipartite_layout(g, subset_key={lv: [v for v in g if levels[v] == lv] for lv in set(levels.values())},
                                      align="horizontal")
    return nx.kamada_kawai_layout(g)


def draw(name: str, out: Path) -> None:
    g = GENERATORS[name](**SHOWN[name])
    pos = layout(name, g)
    fig, ax = plt.subplots(figsize=(6, 4))
    widths = [0.5 + 2.5 * d["bandwidth"] / max(dd["bandwidth"] for *_, dd in g.edges(data=True))
              for *_, d in g.edges(data=True)]
    nx.draw_networkx_edges(g, pos, ax=ax, width=widths, edge_color="#888888")
    gpus = [v for v, d in g.nodes(data=True) if d["kind"] == "gpu"]
    sws = [v for v, d in g.nodes(data=True) if d["kind"] == "switch"]
    nx.draw_networkx_nodes(g, pos, nodelist=gpus, node_color="#4c78a8", node_size=220, ax=ax)
    nx.draw_networkx_nodes(g, pos, nodelist=sws, node_color="#bbbbbb", node_shape="s", node_size=260, ax=ax)
    nx.draw_networkx_labels(g, pos, labels={v: str(g.nodes[v]["npu"]) for v in gpus}, font_size=7,
                            font_color="white", ax=ax)
    params = ", ".join(f"{k}={v}" for k, v in SHOWN[name].items())
    ax.set_title(f"{name}({params})", fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=80, metadata={"Software": None})
    plt.close(fig)


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/topologies")
    folder.mkdir(parents=True, exist_ok=True)
    for n in SHOWN:
        draw(n, folder)
    print(f"wrote {len(SHOWN)} pictures to {folder}/")
