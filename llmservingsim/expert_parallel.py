"""Mixture-of-experts layers under data and expert parallelism (vLLM 0.19 semantics).

One concept: what one MoE layer costs one rank of a data-parallel server, in compute and
in its dispatch / combine collectives. docs/data-expert-parallel.md explains the sources.

vLLM 0.19 (``model_executor/layers/fused_moe/config.py`` ``FusedMoEParallelConfig.make``):
the MoE layers of a server with ``dp`` ranks of ``tp`` GPUs each always span all
``dp x tp`` GPUs (``flatten_tp_across_dp``):

- expert parallelism off (``ep = 1``, no ``--enable-expert-parallel``): every GPU holds all
  E experts, their widths divided by ``dp x tp``;
- expert parallelism on (``ep = dp x tp``, the only EP size vLLM builds: ``use_ep`` sets
  ``ep_size = dp x tp``): every GPU holds E / ep whole experts.

With ``dp > 1`` each MoE layer first gathers the hidden states of every DP rank's tokens
(``allgather_reducescatter`` backend, ``distributed/device_communicators/all2all.py``
``AgRsAll2AllManager.dispatch``: an all-gather over the DP group) and after the experts
reduce-scatters the partial outputs back to their ranks (``combine``). So an expert GPU
works on the tokens of all ranks; the router runs on each rank's own tokens.

Invariants:
- :func:`moe_rank_work` at ``dp = ep = 1`` is exactly ``op_cost.moe_work`` (same tokens,
  same experts, same TP width), so :class:`MoERankTimer` reproduces the measured table
  there (ratio 1);
- collective sizes follow ASTRA-Sim's ``comm_size``: all-gather = what each rank
  contributes, reduce-scatter = the whole buffer reduced.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from .errors import ConfigError, astrasim_errors
from .model_config import ModelSpec
from .op_cost import Roofline, Work, _gemm, moe_work


@dataclass(frozen=True, slots=True)
class MoEParallel:
    """How one server's MoE layers are split: ``dp`` ranks of ``tp`` GPUs, ``ep`` 1 or dp x tp."""
    dp: int
    tp: int
    ep: int

    @property
    def moe_tp(self) -> int:
        """The width divisor of each expert (1 under EP: experts are whole)."""
        return 1 if self.ep > 1 else self.dp * self.tp

    def local_experts(self, model: ModelSpec) -> int:
        return model.num_experts // self.ep


def activated(num_experts: int, k: int, tokens: float) -> float:
    """Expected distinct experts ``tokens`` tokens activate out of ``num_experts``, each token
    picking k (the performance model's E (1 - (1 - k/E)^T))."""
    return num_experts * (1.0 - (1.0 - k / num_experts) ** tokens) if tokens > 0 else 0.0


def moe_rank_work(model: ModelSpec, own_tokens: float, gathered_tokens: float, par: MoEParallel) -> Work:
    """One MoE layer on one GPU: the router over its rank's own tokens (all E experts,
    replicated), then the experts it holds over the gathered tokens of every DP rank:
    gathered x k / ep routed (token, expert) pairs on average, the held experts that any
    gathered token activates read once, every expert width divided by ``moe_tp``."""
    E, k, b, h = model.num_experts, model.experts_per_token, model.dtype_bytes, model.hidden_size
    mi = model.moe_intermediate_size / par.moe_tp
    T, G = float(own_tokens), float(gathered_tokens)
    local = par.local_experts(model)
    # P(a given held expert is activated by some gathered token) = 1 - (1 - k/E)^G
    act = activated(E, k, G) * local / E
    pairs = G * k / par.ep
    router = _gemm(T, h, E, b)
    byts = router.bytes + b * act * 3 * h * mi + b * pairs * (h + 3 * mi + h) + b * G * h
    return Work(byts, router.flops + 2.0 * pairs * 3 * h * mi)


class MoERankTimer:
    """Per-GPU MoE layer time (µs) under ``par`` from a measured ``moe.csv`` (``table``,
    measured at TP ``source_tp`` with all experts on the GPU) by the derivation rule of
    ``derive_bundle``: t = t_measured(x) x cost(rank work) / cost(work at x), cost the MoE
    roofline fitted on that table. The measured point x is the one with the same routed
    pairs and activated experts as the rank: gathered / ep tokens, the rank's activated
    held experts. Memoised by (own, gathered) tokens."""

    def __init__(self, model: ModelSpec, table, source_tp: int, roofline: Roofline, par: MoEParallel):
        self.model, self.table, self.source_tp, self.roof, self.par = model, table, source_tp, roofline, par
        self._memo: dict = {}

    def us(self, own_tokens: int, gathered_tokens: int) -> float:
        key = (own_tokens, gathered_tokens)
        v = self._memo.get(key)
        if v is None:
            m, par = self.model, self.par
            x_tokens = gathered_tokens / par.ep
            x_act = activated(m.num_experts, m.experts_per_token, gathered_tokens) * par.local_experts(m) / m.num_experts
            src = moe_work(m, x_tokens, x_act, self.source_tp)
            dst = moe_rank_work(m, own_tokens, gathered_tokens, par)
            v = self._memo[key] = self.table(x_tokens, x_act) * self.roof.time_us(dst) / self.roof.time_us(src)
        return v


def moe_source(bundle_path: Path, tp: int) -> tuple[Path, int]:
    """The measured ``moe.csv`` to time MoE layers from: the bundle's own, else the one of
    the nearest measured TP degree that has one (derive_bundle's choice of source)."""
    from .derive_bundle import nearest_measured
    from .profiles import measured_tps
    from .errors import ProfileError
    own = bundle_path / "moe.csv"
    if own.is_file() and not (bundle_path / "PROVENANCE.md").exists():
        return own, tp
    base = bundle_path.parent
    have = [m for m in measured_tps(base) if (base / f"tp{m}" / "moe.csv").is_file()]
    if not have:
        raise ProfileError(f"no measured moe.csv under {base} to time the mixture-of-experts layers from",
                           file=str(bundle_path / "moe.csv"))
    m = nearest_measured(have, tp)
    return base / f"tp{m}" / "moe.csv", m


_FITS: dict = {}


def moe_timer(model: ModelSpec, device, bundle, par: MoEParallel) -> MoERankTimer:
    """A :class:`MoERankTimer` on the measured moe.csv nearest to the bundle's TP, its MoE
    roofline fitted once per (table, TP) in this process."""
    from .derive_bundle import _read, fit_source      # the derivation's own reader and fit
    from .profiles import MOE_COLUMNS, _moe, _read_csv
    if bundle.provenance.startswith("synthesized from datasheet") and bundle.moe is not None:
        # no measured moe.csv exists: the synthesized table and the roofline it was made with
        from .device_efficiency import load_fit
        return MoERankTimer(model, bundle.moe, bundle.tp, load_fit().for_class("moe").roofline(device), par)
    path, m = moe_source(Path(bundle.path), bundle.tp)
    key = (str(path), model.name, m)
    if key not in _FITS:
        table, works = _read(path, model, m)
        roof = fit_source([table], [works], device.memory_bandwidth_gbs, device.peak_bf16_tflops)["moe"]
        _FITS[key] = (_moe(_read_csv(path, MOE_COLUMNS), path), roof)
    grid, roof = _FITS[key]
    return MoERankTimer(model, grid, m, roof, par)


def with_moe(bundle, model: ModelSpec, device):
    """``bundle`` itself, or, for a MoE model whose bundle has no moe.csv (the measured
    RTXPRO6000 Qwen3-30B-A3B tp2), a copy whose MoE table is derived from the nearest
    measured one by the op cost model at the bundle's TP; its provenance says so."""
    if bundle.moe is not None or not model.is_moe:
        return bundle
    timer = moe_timer(model, device, bundle, MoEParallel(1, bundle.tp, 1))

    def derived(tokens: float, experts: float) -> float:
        # dp = ep = 1: the rank's own tokens are all its tokens; experts as the caller counts them
        src = moe_work(model, tokens, experts, timer.source_tp)
        dst = moe_work(model, tokens, experts, bundle.tp)
        return timer.table(tokens, experts) * timer.roof.time_us(dst) / timer.roof.time_us(src)
    return replace(bundle, moe=derived, provenance=f"{bundle.provenance}, moe.csv derived from tp{timer.source_tp}")


def check_parallelism(model: ModelSpec, gpus_per_node: int, device_name: str, tp: int, pp: int, dp: int,
                      ep: int) -> None:
    """The dp / ep values vLLM 0.19 accepts (ConfigError naming the key otherwise)."""
    # how many nodes a server's ranks take is placement's rule (placement.place: ranks may span
    # nodes with cluster.nodes; a TP group never does)
    if ep == 1:
        return
    if not model.is_moe:
        raise ConfigError(f"{model.name} is a dense model: expert parallelism needs a mixture-of-experts model "
                          f"(use ep: 1; dp alone runs independent data-parallel ranks)", key="parallelism.ep")
    if ep != dp * tp:
        raise ConfigError(f"ep = {ep}, but vLLM's expert parallelism (--enable-expert-parallel) always spans "
                          f"dp x tp = {dp * tp} GPUs: give ep: {dp * tp} (on) or ep: 1 (off)", key="parallelism.ep")
    if model.num_experts % ep:
        raise ConfigError(f"ep = {ep} does not divide {model.name}'s {model.num_experts} experts "
                          f"(each rank holds num_experts / ep of them)", key="parallelism.ep")


class EPCommModel:
    """The dispatch all-gather and combine reduce-scatter of one MoE layer over the DP group
    (the ranks with the same TP index, ``dp`` of them), timed by the system simulator on the
    device network of the server's ``dp x tp`` GPUs with its NCCL bandwidth and fixed cost.

    Chunks are the largest rank's tokens: a ring all-gather of unequal chunks moves at the
    pace of the largest one, and vLLM pads every rank to the largest batch when it runs
    CUDA graphs (``coordinate_batch_across_dp``). Returns (all-gather ns, reduce-scatter ns)
    per layer, memoised by the largest rank's token count.

    ``layout`` (``rank_layout.dp_layout``, only for a server whose ranks span nodes): the
    server's GPUs on the two-level network ``[intra-node, inter-node]``; each TP index's DP
    group is then timed on its own NPUs (a ring whose steps between nodes cross the NIC) and
    the slowest of the ``tp`` concurrent groups sets the layer's time."""

    def __init__(self, model: ModelSpec, device, dp: int, tp: int, layout=None):
        from .execution_graph import network_config, system_simulator
        self.model, self.dp, self.tp, self.layout = model, dp, tp, layout
        net = self.network = network_config(device, dp * tp, 1, None, device.collective_latency_ns)
        if layout is not None and layout.multi_node:
            net = self.network = layout.network(net)
            self.sim = system_simulator(device, dp * tp, 1, net, groups={})
            self.groups = [[layout.npus[d * tp + t] for d in range(dp)] for t in range(tp)]
        else:
            self.sim = system_simulator(device, dp * tp, 1, net)
            self.groups = [[d * tp for d in range(dp)]]     # every TP index's group costs the same
        self.group = self.groups[0]
        self._memo: dict[int, tuple[int, int]] = {}

    def sizes(self, max_tokens: int) -> tuple[int, int]:
        """(all-gather comm_size per rank, reduce-scatter comm_size): max tokens x hidden x
        dtype bytes contributed by each rank, and dp times that for the reduced buffer."""
        chunk = max_tokens * self.model.hidden_size * self.model.dtype_bytes
        return chunk, self.dp * chunk

    def layer_ns(self, max_tokens: int) -> tuple[int, int]:
        v = self._memo.get(max_tokens)
        if v is None:
            ag, rs = self.sizes(max_tokens)
            sim = self.sim
            with astrasim_errors():
                v = self._memo[max_tokens] = (max(sim.collective_time_ns("all_gather", ag, g) for g in self.groups),
                                              max(sim.collective_time_ns("reduce_scatter", rs, g) for g in self.groups))
        return v


def moe_layers(model: ModelSpec, pp: int) -> int:
    """MoE layers one step runs through (every decoder layer of Qwen3-MoE / Mixtral-style models)."""
    return -(-model.num_layers // pp) * pp


def describe(par: MoEParallel, model: ModelSpec) -> Optional[dict]:
    """What summary.json records about the MoE split (None for a dense model)."""
    if not model.is_moe:
        return None
    return {"expert_parallel": par.ep > 1, "ep": par.ep, "experts_per_gpu": par.local_experts(model),
            "expert_width_divisor": par.moe_tp, "dispatch": "allgather_reducescatter" if par.dp > 1 else "none"}
