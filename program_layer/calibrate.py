"""Fit a deployment's framework overhead to one real vLLM run, by simulation in the loop.

``calibrate(cfg, real)`` searches the parameters of ``overhead_model.Framework`` (by default
``step_us`` and ``prefill_us``) that make the simulation of the real run's workload match
it. The objective, over TTFT, TPOT and latency (errors in %): 3 x (mean error)^2 plus the
squared errors of p50, p90 and p99, plus the mean squared per-request error relative to the
metric's real mean (request by request, which separates terms that trade off in the
aggregates: a per-step cost weighs on long decodes, a per-prefill cost on short requests).
The search is deterministic: a coarse grid over each parameter's range, then Nelder-Mead from
the best grid point (scipy), clipped to the range. Each evaluation is one full simulation
(about 0.5 s for a 300-request run).

The result is a calibration file (``write_calibration``) that a config references with
``calibration: CAL.yaml``; it replaces the device's fitted framework overhead for that
config (``load_calibration``) and records what it was fitted on and the errors before and
after.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import yaml

from llmservingsim.errors import ConfigError, ProfileError, parse_yaml, read_text
from llmservingsim.overhead_model import FRAMEWORK_KEYS, Framework, parse_framework

from .digests import file_sha256
from .outputs import call_rows, write_atomic
from .run import build_simulation      # run imports this module only inside a function
from .validate import STATS, compare_calls

# search range of each parameter: (low, high); the grid uses GRID points across it
RANGES = {"step_us": (-3000.0, 10000.0), "prefill_us": (0.0, 20000.0), "prefill_compute": (-0.3, 1.0)}
GRID = {1: 14, 2: 8, 3: 5}
DEFAULT_PARAMS = ("step_us", "prefill_us")
MEAN_WEIGHT = 3.0


def objective(table: dict, pairs: Optional[list] = None) -> float:
    total = 0.0
    for stats in table.values():
        for stat in STATS:
            e = stats[stat]["error_pct"]
            if e is None:
                continue
            total += (MEAN_WEIGHT if stat == "mean" else 1.0) * e * e
    if pairs:
        for attr in ("ttft", "latency", "tpot"):
            vals = [(getattr(r, attr), getattr(s, attr)) for r, s in pairs if getattr(r, attr) is not None]
            scale = sum(rv for rv, _ in vals) / len(vals) if vals else 0.0
            if scale > 0:
                total += sum((100.0 * (sv - rv) / scale) ** 2 for rv, sv in vals) / len(vals)
    return total


@dataclass
class Result:
    framework: Framework
    params: tuple
    before: dict
    after: dict
    evaluations: int


class Evaluator:
    """Simulates ``cfg`` with a given framework overhead and compares with ``real``."""

    def __init__(self, cfg: dict, real, config_path: Optional[str] = None):
        self.cfg, self.real, self.config_path = cfg, real, config_path
        self.evaluations = 0
        self._memo: dict = {}

    def evaluate(self, fw: Framework) -> tuple:
        """(table, request pairs) of the simulation with ``fw`` (memoised)."""
        key = tuple(round(getattr(fw, k), 9) for k in FRAMEWORK_KEYS)
        if key not in self._memo:
            sim = build_simulation(self.cfg, framework=fw)
            sim.run()
            self._memo[key] = compare_calls(self.real, call_rows(sim.cluster.finished_calls, sim.programs),
                                            self.config_path)
            self.evaluations += 1
        return self._memo[key]

    def table(self, fw: Framework) -> dict:
        return self.evaluate(fw)[0]


def calibrate(cfg: dict, real, start: Framework, params=DEFAULT_PARAMS, config_path: Optional[str] = None,
              max_evals: int = 200, progress: Optional[Callable[[int, float], None]] = None) -> Result:
    """Fit ``params`` (names of Framework fields) starting from ``start``."""
    params = tuple(params)
    unknown = [p for p in params if p not in RANGES]
    if not params or unknown or len(set(params)) != len(params):
        raise ConfigError(f"calibration parameters must be distinct names among {', '.join(RANGES)}"
                          + (f" (got {', '.join(unknown)})" if unknown else ""), key="--params")
    from .extras import require            # before any simulation: a missing extra fails fast
    minimize = require("scipy.optimize", "calibrate", "calibrate").minimize
    ev = Evaluator(cfg, real, config_path)
    lo = [RANGES[p][0] for p in params]
    hi = [RANGES[p][1] for p in params]

    def fw_of(x) -> Framework:
        return replace(start, **{p: min(max(float(v), a), b) for p, v, a, b in zip(params, x, lo, hi)})

    best = [float("inf"), None]

    def f(x) -> float:
        v = objective(*ev.evaluate(fw_of(x)))
        if v < best[0]:
            best[0], best[1] = v, [min(max(float(t), a), b) for t, a, b in zip(x, lo, hi)]
        if progress is not None:
            progress(ev.evaluations, best[0])
        return v

    before = ev.table(start)
    n = GRID.get(len(params), 4)
    axes = [[a + (b - a) * i / (n - 1) for i in range(n)] for a, b in zip(lo, hi)]
    for x in itertools.product(*axes):
        f(x)
    step = [(b - a) / (n - 1) / 2 for a, b in zip(lo, hi)]
    x0 = list(best[1])
    simplex = [x0] + [[x0[j] + (step[j] if j == i else 0.0) for j in range(len(x0))] for i in range(len(x0))]
    budget = max(max_evals - ev.evaluations, 0)
    if budget:
        minimize(f, x0, method="Nelder-Mead",
                 options={"initial_simplex": simplex, "maxfev": budget, "xatol": 1e-3, "fatol": 1e-4})
    fitted = fw_of(best[1])
    return Result(fitted, params, before, ev.table(fitted), ev.evaluations)


def write_calibration(path: Path, result: Result, cfg: dict, real, config_path: str) -> None:
    """A calibration file: what it applies to, the fitted framework, and its provenance."""
    doc = {"calibration": {
        "applies_to": {"hardware": cfg["hardware"], "model": cfg["model"], "tp": cfg["parallelism"]["tp"],
                       "pp": cfg["parallelism"]["pp"]},
        "framework": {k: round(v, 6) for k, v in asdict(result.framework).items()},
        "fitted": list(result.params),
        "fitted_on": {"real_run": str(real.path), "requests": len(real.records),
                      "requests_sha256": file_sha256(Path(real.path) / "requests.jsonl"), "config": str(config_path),
                      "evaluations": result.evaluations},
        "errors_pct_before": {m: {s: v["error_pct"] for s, v in st.items()} for m, st in result.before.items()},
        "errors_pct_after": {m: {s: v["error_pct"] for s, v in st.items()} for m, st in result.after.items()},
    }}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "# agentservesim calibrate: a deployment's framework overhead fitted to one real run\n"
                 + yaml.safe_dump(doc, sort_keys=False))


def load_calibration(path: Path, cfg: dict, overhead):
    """``overhead`` with its framework replaced by the calibration file's. The framework
    terms are the deployment host's costs, so the file must have been fitted on the config's
    hardware; another model or parallelism on it may reuse them (its collectives and kernels
    stay the device's)."""
    path = Path(path)
    text = read_text(path, what="the calibration file")
    raw = parse_yaml(text, file=str(path))
    if not isinstance(raw, dict) or not isinstance(raw.get("calibration"), dict):
        raise ConfigError("not a calibration file (no top-level 'calibration' mapping)", file=str(path),
                          key="calibration")
    cal = raw["calibration"]
    got = cal.get("applies_to") or {}
    if got.get("hardware") != cfg["hardware"]:
        raise ConfigError(f"calibration fitted for hardware={got.get('hardware')!r}, but the config has "
                          f"{cfg['hardware']!r}", file=str(path), key="calibration.applies_to.hardware")
    try:
        fw = parse_framework(cal.get("framework") or {}, str(path), "calibration.framework")
    except ProfileError as exc:
        raise ConfigError(exc.message, file=exc.file, key=exc.key) from None
    return replace(overhead, framework=fw, source=f"calibration {path.name}")
