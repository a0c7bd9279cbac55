"""KV tiers in a run (docs/kv-tiers.md): attaching them to a cluster's instances, and their
metrics in summary.json (``kv_tiers``) and calls.csv (``<tier>_hit_tokens``, ``kv_load_s``).
A run without ``kv_tiers`` gets neither, so its outputs stay byte-identical."""
from __future__ import annotations

__all__ = ["attach_cluster_tiers", "tier_summary", "add_tier_columns"]


def attach_cluster_tiers(cluster, cfg: dict, device, mem, gpus_per_instance: int, hooks) -> None:
    from llmservingsim.kv_tiers import attach_tiers      # a run without kv_tiers never loads it

    from .tier_config import build_tier_stores
    rank_bytes = mem.kv_bytes_per_token * mem.block_size
    stores = build_tier_stores(cfg, device, rank_bytes * gpus_per_instance, len(cluster.instances),
                               gpus_per_instance)
    for inst, chain in zip(cluster.instances, stores):
        attach_tiers(inst, chain, rank_bytes, gpus_per_instance, hooks)


def _tiers(cluster) -> list:
    return [inst.tiers for inst in cluster.instances if inst.tiers is not None]


def tier_summary(cluster) -> dict:
    tiers = _tiers(cluster)
    if not tiers:
        return {}
    bs = cluster.instances[0].kv.block_size
    block_bytes = tiers[0].block_bytes
    stores = {}
    for t in tiers:
        for s in t.stores:
            stores.setdefault(s.name, {})[id(s)] = s
    out = {"shared_stores": sum(len(v) for v in stores.values()) < len(tiers) * len(stores),
           "block_bytes": block_bytes, "tiers": {}, "instances": []}
    for name, group in stores.items():
        group = list(group.values())
        spec = group[0].spec
        st = [s.stats for s in group]
        out["tiers"][name] = {
            "capacity_blocks": spec.capacity_blocks,
            "capacity_gib": round(spec.capacity_blocks * block_bytes / (1 << 30), 6),
            "h2d_gbs": spec.h2d_gbs, "d2h_gbs": spec.d2h_gbs, "latency_us": spec.latency_ns / 1000,
            "hit_blocks": sum(x.hit_blocks for x in st), "hit_tokens": sum(x.hit_blocks for x in st) * bs,
            "stored_blocks": sum(x.stored_blocks for x in st),
            "evicted_blocks": sum(x.evicted_blocks for x in st),
            "failed_stores": sum(x.failed_stores for x in st),
            "reclaimed_pins": sum(x.reclaimed_pins for x in st),
            "resident_blocks_at_end": sum(len(s) for s in group),
        }
    for t in tiers:
        links = {}
        for name in t.h2d:
            h, d = t.h2d[name], t.d2h[name]
            links[name] = {"h2d_bytes": h.bytes, "d2h_bytes": d.bytes, "h2d_transfers": h.transfers,
                           "d2h_transfers": d.transfers, "h2d_busy_s": round(h.busy_ns / 1e9, 9),
                           "d2h_busy_s": round(d.busy_ns / 1e9, 9)}
        out["instances"].append({"instance": t.inst.index, "links": links})
    out["h2d_bytes"] = sum(l["h2d_bytes"] for i in out["instances"] for l in i["links"].values())
    out["d2h_bytes"] = sum(l["d2h_bytes"] for i in out["instances"] for l in i["links"].values())
    return {"kv_tiers": out}


def add_tier_columns(cluster, calls: list) -> list:
    """Add each call's tier hits and load time to its row; the column names ([] without tiers)."""
    tiers = _tiers(cluster)
    if not tiers:
        return []
    names = [s.name for s in tiers[0].stores]
    stats = {}
    for t in tiers:
        stats.update(t.calls)
    for row in calls:
        st = stats.get(row["request_id"])
        for name in names:
            row[f"{name}_hit_tokens"] = st.tokens.get(name, 0) if st is not None else 0
        row["kv_load_s"] = st.load_ns / 1e9 if st is not None else 0.0
    return [f"{n}_hit_tokens" for n in names] + ["kv_load_s"]
