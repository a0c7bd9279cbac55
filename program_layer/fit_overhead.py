"""Reproduce the shipped overhead fits: ``python -m program_layer.fit_overhead [--write]``.

Prints every fit with its data and leave-one-out residuals; ``--write`` also rewrites
``hardware/overhead/*.yaml`` and the generated ``docs/overhead-fit.md``. The data are the
residual tables of the measured bundles (profiles/*/*/*/bf16/tp*/step_overhead.csv). The dev
cell (examples/validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10, a real vLLM 0.19 run)
is not fitted: it checks the transferred per-prefill cost out of sample, and its own
in-sample best fit is printed beside it for comparison. Devices without TP step tables get
their collective regimes from public isolated benchmarks of vLLM's all-reduce backends
(hardware/measurements/allreduce/allreduce.csv, README.md there).
"""
from __future__ import annotations

import argparse
import bisect
import statistics
from dataclasses import replace

from llmservingsim import perf_model
from llmservingsim.model_config import load_model
from llmservingsim.overhead_fit import (VLLM_DISPATCH, fit_collectives, fit_framework, fit_measured_collectives,
                                        leave_one_out, leave_one_size_out, per_allreduce, predict,
                                        read_allreduce_table, read_rows, table_path)
from llmservingsim.overhead_model import Framework, Regime, regime_for
from llmservingsim.paths import examples_dir, hardware_dir, profiles_dir, project_root

DEV_CELL = "validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10"
B200_TABLES = [("meta-llama/Llama-3.1-8B", 1), ("meta-llama/Llama-3.1-70B", 1)]
RTX_TP1_TABLE = ("meta-llama/Llama-3.1-8B", 1)
RTX_TP2_TABLE = ("meta-llama/Llama-3.1-70B", 2)
# Devices whose collectives come from the isolated all-reduce benchmarks: device -> (CUDA
# capability that picks vLLM's dispatch table, TP sizes). H200 takes H100's regimes (below).
MEASURED_AR = {"H100": ("9.0", (2, 4, 8)), "A100": ("8.0", (2, 4, 8))}


def _rows(hw, model, tp):
    return read_rows(table_path(profiles_dir(), hw, model, tp))


def _ms(us: float) -> str:
    return f"{us / 1000:+.2f}"


def _table_rows_md(fw: Framework, rows: list, label: str, fixed: dict | None = None) -> list:
    loo = leave_one_out(rows, fixed)
    out = ["| model | prefill chunk | decodes | kernels ms | wall - kernels ms | fit ms | leave-one-out ms |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r, p in loo:
        out.append(f"| {label} | {r.pc} | {r.nd} | {r.kernel_us / 1000:.2f} | {_ms(r.extra_us)} | "
                   f"{_ms(predict(fw, r))} | {_ms(p)} |")
    err = [abs(p - r.extra_us) / r.wall_us for r, p in loo]
    out.append(f"\nLeave-one-out |error| relative to the step: median {100 * statistics.median(err):.1f} %, "
               f"max {100 * max(err):.1f} %.\n")
    return out


def fit_b200(out: list) -> tuple:
    """The per-prefill host cost from the one table with small chunks (B200 Llama-3.1-8B, 64 to
    1,900 tokens); each B200 bundle's other terms from its own table with that cost fixed."""
    rows8 = _rows("B200", *B200_TABLES[0])
    fw8 = fit_framework(rows8)
    out.append("## Per-prefill host cost and B200 (TP1 tables, Huber least squares on residuals relative "
               "to the step)\n")
    out.append(f"B200 Llama-3.1-8B (chunks 64-16,384 with 4-120 decodes): step_us = {fw8.step_us:.0f}, "
               f"prefill_us = {fw8.prefill_us:.0f}, prefill_compute = {fw8.prefill_compute:.4f}\n")
    out += _table_rows_md(fw8, rows8, "Llama-3.1-8B")
    fixed = {"prefill_us": fw8.prefill_us}
    rows70 = _rows("B200", *B200_TABLES[1])
    fw70 = fit_framework(rows70, fixed)
    out.append(f"B200 Llama-3.1-70B (chunks 1,024-16,368 only), prefill_us fixed at {fw8.prefill_us:.0f}: "
               f"step_us = {fw70.step_us:.0f}, prefill_compute = {fw70.prefill_compute:.4f}\n")
    out += _table_rows_md(fw70, rows70, "Llama-3.1-70B", fixed)
    out.append(f"prefill_compute differs by model ({fw8.prefill_compute:.3f} vs {fw70.prefill_compute:.3f}): "
               "each B200 bundle keeps its own terms (`models:`).\n")
    return fw8, fw70


def fit_rtx(out: list, prefill_us: float) -> Framework:
    from .calibrate import calibrate
    from .config import load_config
    from .validate import load_real

    rows = _rows("RTXPRO6000", *RTX_TP1_TABLE)
    decode = [r.extra_us for r in rows if r.pc == 0]
    prefill = [(r, r.extra_us / r.kernel_us) for r in rows if r.pc > 0]
    out.append("## RTX PRO 6000 framework\n")
    out.append(f"Its TP1 table (Llama-3.1-8B) has decode rows at 4-16 decodes: wall - kernels = "
               f"{', '.join(_ms(v) for v in decode)} ms (mean {_ms(statistics.mean(decode))}): step_us = 0. "
               f"Its prefill rows start at 4,096-token chunks: relative residual "
               f"{', '.join(f'{100 * x:+.1f} %' for _, x in prefill)} (chunks "
               f"{', '.join(str(r.pc) for r, _ in prefill)}): no consistent factor, prefill_compute = 0.")
    fw = Framework(0.0, prefill_us, 0.0)
    cell = examples_dir() / DEV_CELL
    cfg = load_config(str(cell) + ".yaml")
    real = load_real(cell)
    from .calibrate import Evaluator
    t = Evaluator(cfg, real).table(fw)
    e = lambda tab, m, s: tab[m][s]["error_pct"]
    out.append(f"\nprefill_us = {prefill_us:.0f}, the per-prefill host cost of the B200 fit (the same vLLM "
               f"0.19 path; this device's table has no small chunks). The dev cell, not used in any fit, "
               f"checks it out of sample: TTFT / TPOT / latency errors mean "
               f"{e(t, 'ttft_s', 'mean'):+.2f} / {e(t, 'tpot_s', 'mean'):+.2f} / {e(t, 'latency_s', 'mean'):+.2f} %, "
               f"p50 {e(t, 'ttft_s', 'p50'):+.2f} / {e(t, 'tpot_s', 'p50'):+.2f} / {e(t, 'latency_s', 'p50'):+.2f} %, "
               f"p90 {e(t, 'ttft_s', 'p90'):+.2f} / {e(t, 'tpot_s', 'p90'):+.2f} / {e(t, 'latency_s', 'p90'):+.2f} %, "
               f"p99 {e(t, 'ttft_s', 'p99'):+.2f} / {e(t, 'tpot_s', 'p99'):+.2f} / {e(t, 'latency_s', 'p99'):+.2f} %.")
    res = calibrate(cfg, real, replace(fw, prefill_us=0.0), ("prefill_us",), max_evals=60)
    out.append(f"For comparison, the dev cell's own best fit (`agentservesim calibrate examples/{DEV_CELL} "
               f"--params prefill_us`, in sample) is prefill_us = {res.framework.prefill_us:.0f}: mean errors "
               f"{e(res.after, 'ttft_s', 'mean'):+.2f} / {e(res.after, 'tpot_s', 'mean'):+.2f} / "
               f"{e(res.after, 'latency_s', 'mean'):+.2f} %; with no framework overhead at all: "
               f"{e(res.before, 'ttft_s', 'mean'):+.2f} / {e(res.before, 'tpot_s', 'mean'):+.2f} / "
               f"{e(res.before, 'latency_s', 'mean'):+.2f} %.")
    return fw


def fit_rtx_tp2(out: list, fw: Framework):
    from llmservingsim.hardware import load_device
    from llmservingsim.overhead_fit import implausible
    model = load_model(RTX_TP2_TABLE[0])
    rows = _rows("RTXPRO6000", *RTX_TP2_TABLE)
    busbw = load_device("RTXPRO6000").nccl_allreduce_busbw_gbs
    regimes = fit_collectives(rows, model.num_layers, model.hidden_size, fw, busbw)
    out.append("\n## RTX PRO 6000 TP2 collectives (Llama-3.1-70B TP2 table)\n")
    out.append("Per all-reduce = (wall - kernels - framework) / 160 (80 layers x 2). NCCL points faster than "
               f"the pair's measured bus bandwidth ({busbw} GB/s) are physically impossible (the kernel sum is "
               "off there) and left out of the fit: "
               + (", ".join(sorted({f"chunk {p[2].pc}" for p in implausible(per_allreduce(rows, model.num_layers,
                  model.hidden_size, fw), busbw) if p[0] >= 8 << 20})) or "none") + ".")
    for r in regimes:
        bound = f"below {r.max_bytes} B (vLLM custom all-reduce)" if r.max_bytes else "above (NCCL)"
        out.append(f"- {bound}: latency {r.latency_us:.1f} us, bandwidth {r.bandwidth_gbs:.2f} GB/s")
    out.append("\n| prefill chunk | decodes | bytes | per all-reduce us | fit us | leave-one-chunk-out us |")
    out.append("|---:|---:|---:|---:|---:|---:|")
    pts = per_allreduce(rows, model.num_layers, model.hidden_size, fw)
    for size, t, r in pts:
        reg2 = fit_collectives([x for x in rows if x.pc != r.pc], model.num_layers, model.hidden_size, fw, busbw)
        out.append(f"| {r.pc} | {r.nd} | {size} | {t:.1f} | {regime_for(regimes, size).us(size):.1f} | {regime_for(reg2, size).us(size):.1f} |")
    return regimes


def nccl_regime(device, tp: int) -> Regime:
    """The device file's NCCL model as a regime: the ring a TP group runs without a fit
    (measured bus bandwidth, fixed cost paid n - 1 times), per call."""
    return Regime.of_ring(device.nccl_allreduce_busbw_gbs, device.collective_latency_ns, tp)


def _size(b) -> str:
    return "unbounded" if b is None else (f"{b / (1 << 20):g} MiB" if b >= 1 << 20 else f"{b / 1024:g} KiB")


def fit_allreduce_tables(out: list, hw: str) -> dict:
    """TP size -> regimes of ``hw`` from the isolated benchmarks, each backend's line on the
    points ``overhead_fit.regime_points`` picks, with leave-one-size-out residuals."""
    from llmservingsim.hardware import load_device
    cap, tps = MEASURED_AR[hw]
    device = load_device(hw)
    points = [p for p in read_allreduce_table(hardware_dir() / "measurements" / "allreduce" / "allreduce.csv")
              if p.device == hw]
    out.append(f"\n## {hw} collectives (isolated all-reduce benchmarks, no step table)\n")
    out.append("Per TP size, each range goes to the backend vLLM 0.19 dispatches it to (capability "
               f"{cap}: `overhead_fit.VLLM_DISPATCH`), a line `latency + bytes / bandwidth` fitted on that "
               "backend's measurements (hardware/measurements/allreduce/allreduce.csv): *in range* = CUDA-graph "
               "points inside the range; *extrapolated* = CUDA-graph points of that backend outside it; *eager* = "
               "only benchmarks without CUDA graphs (launch cost included: an upper bound); *none* = no "
               "measurement, the device file's NCCL model. Leave-one-size-out: every point predicted by the line "
               "fitted without its size.\n")
    result = {}
    for tp in tps:
        regimes, notes = fit_measured_collectives(points, tp, VLLM_DISPATCH[cap][tp], nccl_regime(device, tp))
        result[tp] = regimes
        out.append(f"\n### TP{tp}\n")
        out.append("| sizes | backend | fitted on | latency us | bandwidth GB/s | points | leave-one-size-out error, median / max of abs |")
        out.append("|---|---|---|---:|---:|---:|---:|")
        rows = []
        for r, (backend, lo, hi, how, pts) in zip(regimes, notes):
            loso = [(p, q) for p, q in leave_one_size_out(pts) if q == q]
            err = [abs(q / p.us - 1) for p, q in loso]
            e = f"{100 * statistics.median(err):.1f} / {100 * max(err):.1f} %" if err else "n/a"
            srcs = ", ".join(sorted({p.source for p in pts})) or "device NCCL model"
            out.append(f"| {_size(lo)} - {_size(hi)} | {backend} | {how} ({srcs}) | {r.latency_us:.2f} | "
                       f"{r.bandwidth_gbs:.1f} | {len(pts)} | {e} |")
            rows += [(backend, p, q, r) for p, q in leave_one_size_out(pts)]
        out.append("\n| backend | source | bytes | measured us | fit us | leave-one-size-out us |")
        out.append("|---|---|---:|---:|---:|---:|")
        for backend, p, q, r in rows:
            out.append(f"| {backend} | {p.source} | {p.bytes} | {p.us:.1f} | {r.us(p.bytes):.1f} | "
                       + ("n/a" if q != q else f"{q:.1f}") + " |")
        out.append("")
    return result


def _fw_lines(fw: Framework, indent: str) -> list:
    return [f"{indent}step_us: {fw.step_us:.1f}", f"{indent}prefill_us: {fw.prefill_us:.1f}",
            f"{indent}prefill_compute: {fw.prefill_compute:.4f}"]


def overhead_yaml(device: str, fw: Framework, provenance: str, regimes=None, models=None) -> str:
    lines = [f"# Overhead model of {device} deployments (llmservingsim/overhead_model.py). Generated by",
             "# `python -m program_layer.fit_overhead --write`; docs/overhead-model.md explains each term.",
             f"device: {device}",
             "provenance: >-", f"  {provenance}",
             "framework:", *_fw_lines(fw, "  ")]
    if models:
        lines.append("models:")
        for name, mfw in models.items():
            lines += [f"  {name}:", *_fw_lines(mfw, "    ")]
    if regimes:
        lines.append("collectives:")
        for tp, regs in sorted(regimes.items()):
            lines.append(f"  tp{tp}:")
            for r in regs:
                mb = f"max_bytes: {r.max_bytes}, " if r.max_bytes else ""
                lines.append(f"    - {{{mb}latency_us: {r.latency_us:.1f}, bandwidth_gbs: {r.bandwidth_gbs:.2f}}}")
    return "\n".join(lines) + "\n"


def _floor_pc_alpha_of(self, prefill_tokens, nd, prefill_ctx):
    """The skew lookup before this change: the chunk's bucket at the grid value below it
    (as ``PerformanceModel._alpha_of``, a function of the spread rate and longest KV length)."""
    sk = self.bundle.skew
    if sk is None:
        return lambda rate, kv_max: 0.0
    pcs = sorted(sk.pc_set)
    pc = pcs[max(bisect.bisect_right(pcs, prefill_tokens) - 1, 0)] if prefill_tokens and pcs else 0.0
    label = perf_model._label
    return lambda rate, kv_max: sk.table.get(
        (pc, label(sk.n_bins, sk.n_labels, nd), label(sk.sr_bins, sk.sr_labels, rate),
         label(sk.kvb_bins, sk.kvb_labels, kv_max), label(sk.kp_bins, sk.kp_labels, prefill_ctx)), sk.alpha_default)


def ablation() -> str:
    """The dev cell (mean / p50 errors) with each term of the model switched off in turn."""
    from . import outputs
    from .calibrate import Evaluator
    from .config import load_config
    from .run import build_simulation
    from .validate import compare, load_real, metrics, pair, sim_records
    cell = examples_dir() / DEV_CELL
    cfg, real = load_config(str(cell) + ".yaml"), load_real(cell)
    shipped = build_simulation(cfg).overhead.framework
    rows = []

    def row(name, table):
        rows.append(f"| {name} | " + " | ".join(f"{table[m]['mean']['error_pct']:+.2f} / {table[m]['p50']['error_pct']:+.2f}"
                                                 for m in ("ttft_s", "tpot_s", "latency_s")) + " |")
    row("shipped model", Evaluator(cfg, real).table(shipped))
    row("prefill_us off (no framework overhead)", Evaluator(cfg, real).table(replace(shipped, prefill_us=0.0)))
    alpha = perf_model.PerformanceModel._alpha_of
    perf_model.PerformanceModel._alpha_of = _floor_pc_alpha_of
    try:
        row("skew alpha at the chunk's grid floor (before)", Evaluator(cfg, real).table(shipped))
    finally:
        perf_model.PerformanceModel._alpha_of = alpha
    sim = build_simulation(cfg)
    sim.run()
    calls = outputs.call_rows(sim.cluster.finished_calls, sim.programs)
    for c in calls:                  # measured from the release instead of vLLM's queued_ts
        c["queued_s"] = c["release_s"]
    pairs = pair(real, sim_records(calls, False))
    row("TTFT and latency from the release, not queued_ts (before)",
        compare(metrics(real.records), metrics([x for _, x in pairs])))
    return "| dev cell, mean / p50 error | TTFT | TPOT | latency |\n|---|---:|---:|---:|\n" + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m program_layer.fit_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite hardware/overhead/*.yaml and docs/overhead-fit.md")
    ap.add_argument("--ablation", action="store_true", help="print the dev cell with each term switched off")
    args = ap.parse_args(argv)
    if args.ablation:
        print(ablation())
        return 0
    out = ["# Overhead fits (generated by `python -m program_layer.fit_overhead --write`; do not edit)\n"]
    b200_8b, b200_70b = fit_b200(out)
    rtx = fit_rtx(out, b200_8b.prefill_us)
    regimes = fit_rtx_tp2(out, rtx)
    measured = {hw: fit_allreduce_tables(out, hw) for hw in MEASURED_AR}
    text = "\n".join(out) + "\n"
    print(text)
    if args.write:
        d = hardware_dir() / "overhead"
        d.mkdir(exist_ok=True)
        (d / "B200.yaml").write_text(overhead_yaml(
            "B200", b200_8b, "framework fitted on the B200 Llama-3.1-8B TP1 step_overhead.csv table, and the "
            "Llama-3.1-70B terms on its own table (Huber least squares); collectives: the device file's NVLink "
            "model (no TP>1 table).", models={B200_TABLES[1][0]: b200_70b}))
        (d / "RTXPRO6000.yaml").write_text(overhead_yaml(
            "RTXPRO6000", rtx, "step_us and prefill_compute from the Llama-3.1-8B TP1 table (both 0 within its "
            "noise), prefill_us the per-prefill host cost of the B200 Llama-3.1-8B fit (no small chunks in this "
            "device's tables; the dev cell checks it out of sample); TP2 collectives fitted on the "
            "Llama-3.1-70B TP2 table.", {2: regimes}))
        no_step = ("no step table on this device: the per-prefill host cost of the B200 Llama-3.1-8B fit (the "
                   "same vLLM 0.19 host-side work), no step or prefill-compute term; ")
        (d / "H100.yaml").write_text(overhead_yaml(
            "H100", replace(rtx, prefill_compute=0.0), no_step + "collectives (TP2/4/8): per size the backend vLLM "
            "0.19 dispatches to, fitted on public isolated benchmarks of vLLM's all-reduce backends on H100 "
            "(vllm-project/vllm PRs 24111, 24532, 42324; sgl-project/sglang PR 2904; "
            "hardware/measurements/allreduce/README.md).", measured["H100"]))
        (d / "H200.yaml").write_text(overhead_yaml(
            "H200", replace(rtx, prefill_compute=0.0), no_step + "collectives: H100's regimes (same GH100 die and "
            "CUDA capability 9.0, so the same vLLM dispatch tables; same NVLink 4 / third-generation NVSwitch "
            "fabric); no H200 all-reduce benchmark.", measured["H100"]))
        (d / "A100.yaml").write_text(overhead_yaml(
            "A100", replace(rtx, prefill_compute=0.0), no_step + "collectives (TP2/4/8): per size the backend vLLM "
            "0.19 dispatches to on capability 8.0, fitted on a public isolated benchmark of vLLM's custom "
            "all-reduce on A100 without CUDA graphs (sgl-project/sglang PR 2688: an upper bound); sizes with no "
            "measurement keep the device file's NCCL model (hardware/measurements/allreduce/README.md).",
            measured["A100"]))
        for dev in ("RTX4090", "L40S", "MI300X"):
            (d / f"{dev}.yaml").write_text(overhead_yaml(
                dev, replace(rtx, prefill_compute=0.0), "no measurement on this device: the per-prefill host cost "
                "of the B200 Llama-3.1-8B fit (the same vLLM 0.19 host-side work), no step or prefill-compute "
                "term; collectives: the device file's NCCL model."))
        (project_root() / "docs" / "overhead-fit.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
