"""Where each instance's GPUs are: the run config's ``cluster`` mapping (docs/clusters.md).

    cluster:
      nodes: 2                    # nodes of the device (default: the fewest that hold the instances,
                                  # each instance on one node, as before the key existed)
      placement:                  # optional, one entry per instance, in instance order
        - stages:                 # one group per pipeline stage (x dp replicas), in rank order
            - {node: 0, gpus: 0-7}
            - {node: 1, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}

An instance has ``tp x pp x dp`` GPUs in ``pp x dp`` groups of ``tp`` (rank r = (replica x pp +
stage) x tp + t, vLLM's rank order); data-parallel rank (replica) d owns groups d x pp ..
d x pp + pp - 1. Invariants of a placement (checked when built; errors
are one ConfigError naming the key): every group lies inside one node (TP never spans nodes),
no GPU is used twice, every node index is below ``cluster.nodes`` and every GPU index below the
device's ``gpus_per_node``. Without ``placement`` the groups are packed first-fit in GPU order:
an instance that fits in a node never straddles two (the placement ``run`` always printed),
one that does not (only with ``cluster.nodes``) takes its stages node after node, a
data-parallel rank that fits in a node still never straddling two.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import ConfigError

CLUSTER_KEYS = ("nodes", "placement")


@dataclass(frozen=True)
class InstancePlacement:
    """One instance's GPUs: ``groups[g] = (node, local GPU ids)``, one group of ``tp`` per
    stage (x dp replica) in rank order."""
    index: int
    tp: int
    pp: int
    groups: tuple

    @property
    def nodes(self) -> tuple:
        """The nodes the instance uses, ascending."""
        return tuple(sorted({node for node, _ in self.groups}))

    @property
    def spans_nodes(self) -> bool:
        return len(self.nodes) > 1

    @property
    def dp(self) -> int:
        """Data-parallel ranks (replicas of the pipeline)."""
        return len(self.groups) // self.pp

    def rank_groups(self, replica: int) -> tuple:
        """Data-parallel rank ``replica``'s stage groups, stage order."""
        return self.groups[replica * self.pp:(replica + 1) * self.pp]

    def summary(self) -> dict:
        """summary.json's entry: ``{instance, node, gpus}`` for an instance on one node (the form
        single-node runs always wrote), plus ``stages`` with pp > 1; an instance spanning nodes
        gives ``nodes`` and ``stages`` (each stage's node and node-local GPUs) instead."""
        if self.dp > 1 and (self.spans_nodes or self.pp > 1):
            return self._dp_summary()
        stages = [{"stage": s, "node": n, "gpus": list(g)} for s, (n, g) in enumerate(self.groups)]
        if self.spans_nodes:
            return {"instance": self.index, "nodes": list(self.nodes), "stages": stages}
        out = {"instance": self.index, "node": self.groups[0][0], "gpus": [x for _, g in self.groups for x in g]}
        if self.pp > 1:
            out["stages"] = stages
        return out

    def _dp_summary(self) -> dict:
        """A data-parallel server on several nodes (or with pp > 1): ``ranks``, each rank as an
        instance would be written (``node`` and ``gpus``, plus ``stages`` with pp > 1; ``nodes``
        and ``stages`` for a rank whose stages span nodes). A one-node dp server with pp = 1
        keeps the plain ``{instance, node, gpus}`` form it always had."""
        ranks = []
        for d in range(self.dp):
            gs = self.rank_groups(d)
            nodes = sorted({n for n, _ in gs})
            stages = [{"stage": s, "node": n, "gpus": list(g)} for s, (n, g) in enumerate(gs)]
            if len(nodes) > 1:
                ranks.append({"rank": d, "nodes": nodes, "stages": stages})
                continue
            r = {"rank": d, "node": nodes[0], "gpus": [x for _, g in gs for x in g]}
            if self.pp > 1:
                r["stages"] = stages
            ranks.append(r)
        head = {"instance": self.index, "nodes": list(self.nodes)} if self.spans_nodes else \
            {"instance": self.index, "node": self.groups[0][0], "gpus": [x for _, g in self.groups for x in g]}
        return {**head, "ranks": ranks}

    def describe(self) -> str:
        """One line for ``run``'s header: each stage's node and GPUs."""
        return f"instance {self.index}: " + ", ".join(
            f"stage {s} node {n} GPU {_ranges(g)}" for s, (n, g) in enumerate(self.groups))


def _ranges(gpus) -> str:
    g = list(gpus)
    return f"{g[0]}-{g[-1]}" if len(g) > 1 and g == list(range(g[0], g[-1] + 1)) else ",".join(map(str, g))


def place(spec: Optional[dict], *, instances: int, tp: int, pp: int, dp: int, gpus_per_node: int,
          device: str, source: Optional[str] = None, lines: Optional[dict] = None) -> list[InstancePlacement]:
    """The validated placement of every instance (see the module docstring)."""
    lines = lines or {}

    def error(message, key):
        return ConfigError(message, file=source, line=lines.get(key) or lines.get(key.rsplit(".", 1)[0])
                           or lines.get("cluster"), key=key)

    spec = {} if spec is None else spec
    unknown = sorted(set(spec) - set(CLUSTER_KEYS))
    if unknown:
        raise error(f"unknown key (valid: {', '.join(CLUSTER_KEYS)})", f"cluster.{unknown[0]}")
    nodes = spec.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise error(f"must be an integer >= 1, got {nodes!r}", "cluster.nodes")
    per_instance = tp * pp * dp
    if tp > gpus_per_node:
        raise error(f"tp = {tp}, but a {device} node has {gpus_per_node} GPUs: a tensor-parallel group "
                    f"cannot span nodes (its all-reduces run on the intra-node network)", "parallelism.tp")
    if per_instance > gpus_per_node and nodes is None:
        raise error(f"tp x pp{' x dp' if dp > 1 else ''} = {per_instance} GPUs, but a {device} node has "
                    f"{gpus_per_node}: one instance must fit in one node unless cluster.nodes gives more "
                    f"nodes (pipeline stages{' and data-parallel ranks' if dp > 1 else ''} may span nodes)",
                    "parallelism.dp" if dp > 1 and tp * pp <= gpus_per_node else "parallelism.tp")
    if spec.get("placement") is not None:
        out = _explicit(spec["placement"], instances, tp, pp * dp, gpus_per_node, nodes, error)
    else:
        out = _packed(instances, tp, pp, dp, gpus_per_node)
    used = max((n for p in out for n, _ in p.groups), default=0) + 1
    if nodes is not None and used > nodes:
        need = f"{instances} instance(s) of tp x pp{' x dp' if dp > 1 else ''} = {per_instance} GPUs"
        raise error(f"{need} need {used} node(s) of {gpus_per_node} {device} GPUs, but the cluster has "
                    f"{nodes}", "cluster.nodes")
    return [InstancePlacement(p.index, tp, pp, p.groups) for p in out]


def _packed(instances: int, tp: int, pp: int, dp: int, g: int) -> list[InstancePlacement]:
    groups, per_rank = pp * dp, tp * pp
    per_instance = tp * groups
    out = []
    node, free = 0, 0                       # next free local GPU on ``node``
    for i in range(instances):
        if per_instance <= g and g - free < per_instance:
            node, free = node + 1, 0        # an instance that fits a node stays in one node
        gs = []
        for k in range(groups):
            if k % pp == 0 and per_rank <= g and g - free < per_rank:
                node, free = node + 1, 0    # so does a data-parallel rank (dp = 1: the instance, above)
            if g - free < tp:
                node, free = node + 1, 0
            gs.append((node, tuple(range(free, free + tp))))
            free += tp
        out.append(InstancePlacement(i, tp, groups, tuple(gs)))
    return out


def _explicit(entries, instances: int, tp: int, groups: int, g: int, nodes: Optional[int],
              error) -> list[InstancePlacement]:
    if nodes is None:
        raise error("an explicit placement needs cluster.nodes", "cluster.placement")
    if not isinstance(entries, list) or len(entries) != instances:
        raise error(f"must list one entry per instance ({instances}), got "
                    f"{len(entries) if isinstance(entries, list) else type(entries).__name__}", "cluster.placement")
    seen: dict = {}
    out = []
    for i, entry in enumerate(entries):
        key = f"cluster.placement[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"stages"} or not isinstance(entry["stages"], list):
            raise error("expected {stages: [{node: N, gpus: ...}, ...]}", key)
        stages = entry["stages"]
        if len(stages) != groups:
            raise error(f"must list {groups} stage group(s) (pp{' x dp' if groups != 1 else ''}), got "
                        f"{len(stages)}", f"{key}.stages")
        gs = []
        for s, grp in enumerate(stages):
            k = f"{key}.stages[{s}]"
            if not isinstance(grp, dict) or set(grp) != {"node", "gpus"}:
                raise error("expected {node: N, gpus: [..] or 'a-b'}", k)
            node = grp["node"]
            if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < nodes:
                raise error(f"node must be one of 0..{nodes - 1}, got {node!r}", f"{k}.node")
            gpus = _gpu_list(grp["gpus"])
            if gpus is None or len(gpus) != tp or len(set(gpus)) != tp or not all(0 <= x < g for x in gpus):
                raise error(f"gpus must be {tp} distinct GPUs of the node (0..{g - 1}; a list or 'a-b'), got "
                            f"{grp['gpus']!r}", f"{k}.gpus")
            for x in gpus:
                if (node, x) in seen:
                    raise error(f"node {node} GPU {x} is already used by {seen[(node, x)]}", f"{k}.gpus")
                seen[(node, x)] = f"instance {i}"
            gs.append((node, tuple(gpus)))
        out.append(InstancePlacement(i, tp, groups, tuple(gs)))
    return out


def _gpu_list(v) -> Optional[list]:
    if isinstance(v, list):
        return v if all(isinstance(x, int) and not isinstance(x, bool) for x in v) else None
    if isinstance(v, str):
        a, sep, b = v.partition("-")
        if a.strip().isdigit() and (not sep or b.strip().isdigit()):
            lo, hi = int(a), int(b) if sep else int(a)
            return list(range(lo, hi + 1)) if hi >= lo else None
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    return None
