"""The ``kv_tiers:`` run-config key (docs/kv-tiers.md): validation, resolution against the
device, and building the engine's tier stores (``llmservingsim/kv_tiers.py``).

    kv_tiers:
      shared: false          # true: one store per node, shared by the node's instances
      eviction: lru          # vLLM's LRUOffloadingManager (the only policy modelled)
      cpu: {capacity_gib: 256, h2d_gbs: null, d2h_gbs: null, bandwidth_gbs: null, latency_us: null}
      cxl: {capacity_gib: 512, bandwidth_gbs: 20, latency_us: 20}    # optional

``capacity_gib`` is the tier's size for one instance (all its GPUs' KV shards; with
``shared`` the node's). A CPU link left null takes the device YAML's ``host_link``
(measured copy-engine GB/s); ``bandwidth_gbs`` sets both directions. A CXL tier has no
device default: its numbers must be given.
"""
from __future__ import annotations

from typing import Optional

from llmservingsim.errors import ConfigError

__all__ = ["TIER_KEYS", "TIER_LINK_KEYS", "validate_tiers", "build_tier_stores", "tier_specs"]

_NUM = (int, float)
TIER_KEYS = {"shared": ((bool,), False), "eviction": ((str,), "lru"), "cpu": ((dict,), None),
             "cxl": ((dict,), None)}
TIER_LINK_KEYS = {"capacity_gib": (_NUM, None), "bandwidth_gbs": (_NUM, None), "h2d_gbs": (_NUM, None),
                  "d2h_gbs": (_NUM, None), "latency_us": (_NUM, None)}


def validate_tiers(raw: Optional[dict], check, source, lines) -> Optional[dict]:
    """``check`` is config._check (unknown keys and types); None stays None (no tiers)."""
    if raw is None:
        return None
    cfg = check(raw, TIER_KEYS, "kv_tiers.", source, lines)

    def err(msg, key):
        return ConfigError(msg, file=source, line=lines.get(key) or lines.get("kv_tiers"), key=key)

    if cfg["eviction"] != "lru":
        raise err("must be lru (vLLM's LRUOffloadingManager)", "kv_tiers.eviction")
    if cfg["cpu"] is None:
        raise err("missing kv_tiers.cpu (a CXL tier sits below a CPU tier)", "kv_tiers")
    for name in ("cpu", "cxl"):
        if cfg[name] is None:
            continue
        t = check(cfg[name], TIER_LINK_KEYS, f"kv_tiers.{name}.", source, lines)
        for key, v in t.items():
            if v is not None and (v < 0 or (v == 0 and key != "latency_us")):
                raise err("must be > 0" if key != "latency_us" else "must be >= 0", f"kv_tiers.{name}.{key}")
        if t["capacity_gib"] is None:
            raise err("missing capacity_gib", f"kv_tiers.{name}")
        if t["bandwidth_gbs"] is not None and (t["h2d_gbs"] is not None or t["d2h_gbs"] is not None):
            raise err("give bandwidth_gbs (both directions) or h2d_gbs/d2h_gbs, not both",
                      f"kv_tiers.{name}.bandwidth_gbs")
        if name == "cxl" and (t["latency_us"] is None or (t["bandwidth_gbs"] is None and (
                t["h2d_gbs"] is None or t["d2h_gbs"] is None))):
            raise err("a CXL tier has no device default: give bandwidth_gbs (or h2d_gbs and d2h_gbs) "
                      "and latency_us", f"kv_tiers.{name}")
        cfg[name] = t
    return cfg


def tier_specs(cfg: dict, device, block_bytes: int) -> list:
    """The tiers as engine ``TierSpec``s (CPU first), links resolved against the device."""
    from llmservingsim.kv_tiers import TierSpec
    out = []
    for name in ("cpu", "cxl"):
        t = cfg.get(name)
        if t is None:
            continue
        link = device.host_link if name == "cpu" else None
        h2d = t["bandwidth_gbs"] or t["h2d_gbs"] or (link and link["h2d_gbs"])
        d2h = t["bandwidth_gbs"] or t["d2h_gbs"] or (link and link["d2h_gbs"])
        lat = t["latency_us"] if t["latency_us"] is not None else (link and link["latency_us"])
        if not h2d or not d2h or lat is None:
            raise ConfigError(f"device {device.name} has no host_link in its YAML: give "
                              f"kv_tiers.{name}.bandwidth_gbs and latency_us", key=f"kv_tiers.{name}")
        blocks = int(t["capacity_gib"] * (1 << 30)) // block_bytes
        if blocks < 1:
            raise ConfigError(f"{t['capacity_gib']} GiB holds no KV block of {block_bytes} bytes",
                              key=f"kv_tiers.{name}.capacity_gib")
        out.append(TierSpec(name, blocks, float(h2d), float(d2h), round(float(lat) * 1000)))
    return out


def build_tier_stores(cfg: dict, device, block_bytes: int, instances: int,
                      gpus_per_instance: int) -> list:
    """One list of stores per instance (CPU then CXL; CPU evictions demote to CXL); with
    ``shared`` the instances of one node hold the same stores."""
    from llmservingsim.kv_tiers import TierStore
    specs = tier_specs(cfg, device, block_bytes)
    per_node = max(device.gpus_per_node // gpus_per_instance, 1) if cfg["shared"] else 1
    out, cache = [], {}
    for i in range(instances):
        key = i // per_node
        if key not in cache:
            lower = None
            chain = []
            for spec in reversed(specs):
                lower = TierStore(spec, lower)
                chain.insert(0, lower)
            cache[key] = chain
        out.append(cache[key])
    return out
