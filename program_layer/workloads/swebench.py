"""Synthetic mini-SWE-agent-on-SWE-bench programs (the paper's coding-agent workload).

A program is one mini-SWE-agent run on one SWE-bench instance. Each LLM call (a "turn") emits a
THOUGHT and exactly one bash command; the command's output (the observation) is appended to the
conversation, so call k+1's prompt = call k's prompt + call k's output + observation k. The
engine's default shared-prefix assumption (``input_k + output_k``) therefore holds exactly and no
``reuse_prefix_toks`` is written.

Context cap: mini-SWE-agent never truncates history. A program whose next prompt would exceed
``context_cap_tokens`` ENDS at the call before it (the real agent stops on the context-window
error) rather than being truncated, so every prompt is <= the cap.

Targets for 50 programs (paper §1, §4 "Workloads", Appendix A and D; TraceLab = Zhu et al. 2026 as
quoted in paper §1): median 47 calls per program; 2,873 calls in all (App. D: "over 2,873
calls" for the 50-program SWE-bench cell); 38.7 M context tokens summed over calls (App. A);
tool calls over 60 s are ~4% of tool calls but ~85% of tool time (§1); ~25 tool names.
Calibrated with seed 0; tests/workloads/test_workload_generators.py pins the numbers and bands.

Arithmetic the targets force: 38.7 M tokens over 2,873 calls is a mean prompt of 13.5 k. With a
~1.9 k first prompt and lognormal lengths (median 47, sigma 0.63), sum_k prompt_k ~= n*B +
g*n(n-1)/2 gives a mean context growth g of only ~260-270 tokens per turn: output (~170 tokens
on average) plus a short observation (seed 0: 255 = 171 output + 84 observation incl. the
20-token wrapper). So observations are small for a typical run (targeted
``grep -n``/``sed -n`` views, silent ``sed -i`` edits); a per-program verbosity factor, larger
for longer runs, lets the longest runs grow towards the cap.

Variance control: program lengths use stratified quantiles (every seed gives the same set of
lengths, in a different order); for each tool the number of slow-mode calls is fixed to
``floor(n_tool * p_slow + U)`` and the slow durations use stratified quantiles too. So the
statistics of a 50-program workload stay near their targets for every seed, not only seed 0
(seeds 0-29: median 47 always; 2,756-2,848 calls; 35.7-44.6 M context tokens; >60 s calls
3.65-4.47% of tool calls and 84.9-86.8% of tool time).

Invariants of every program produced: ``input_toks`` strictly grows call to call; every prompt
<= ``context_cap_tokens``; the last call has ``tool_duration_ns == 0`` and tool ``"submit"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ._sampling import lognormal_int, seconds_to_ns, stratified_uniforms

# --- program length ---------------------------------------------------------------------------
# Calls per program: lognormal. Median 47 is the paper's (§1, §4). Sigma 0.63 makes the mean
# ~57 calls, i.e. ~2,850 calls for 50 programs (paper App. D: 2,873).
CALLS_MEDIAN = 47
CALLS_SIGMA = 0.63
# mini-SWE-agent's SWE-bench config (config/extra/swebench.yaml) sets step_limit: 250; a run
# needs at least a look, an edit, a check and a submit.
STEP_LIMIT = 250
MIN_CALLS = 4
# Context window: Llama-3.1 allows 128 k; the paper's traces are capped near 100 k (issue 5).
CONTEXT_CAP_TOKENS = 100_000

# --- prompt sizes -----------------------------------------------------------------------------
# First prompt = mini-SWE-agent's SWE-bench system template (~0.15 k tokens) + instance template
# (workflow, command rules, examples, submission: ~6.5 k characters ~ 1.5 k tokens; mini-SWE-agent
# config/extra/swebench.yaml) + the problem statement (median ~0.3 k tokens, long-tailed).
BASE_PROMPT_MEDIAN = 1_900
BASE_PROMPT_SIGMA = 0.35
BASE_PROMPT_RANGE = (900, 12_000)

# --- outputs ----------------------------------------------------------------------------------
# One turn = "THOUGHT: ..." + one ```bash``` block: 100-600 tokens with a heavy tail (long
# plans, files written by heredoc). Lognormal median 145, sigma 0.6: 5-95% ~ 55-390, mean ~175.
OUTPUT_MEDIAN = 145
OUTPUT_SIGMA = 0.6
OUTPUT_RANGE = (20, 4_096)

# --- observations (tool results appended to the context) --------------------------------------
# mini-SWE-agent's action_observation_template wraps output in <returncode>/<output> tags (~20
# tokens) and, for outputs of 10,000+ characters, shows a warning plus the first and last 5,000
# characters (~10 k chars ~ 2,900 tokens): that is the cap.
OBSERVATION_OVERHEAD = 20
OBSERVATION_CAP = 2_900
# Multiplier on every per-tool observation median (a user knob; 1.0 = calibrated).
OBSERVATION_SCALE = 1.0
# Per-program verbosity multiplier on observations, lognormal with median 1: big, noisy
# repositories mean more to read and longer test output. Its normal score is correlated with the
# length's (Gaussian copula): long runs are long partly because there is more to read. Together
# with the tool medians below this is calibrated to the 38.7 M total (paper App. A).
VERBOSITY_SIGMA = 1.0
VERBOSITY_LENGTH_CORR = 0.8

# --- tools ------------------------------------------------------------------------------------
# The tool name is the command's first word. Phase weights: a run explores (first third of its
# calls), edits (second third), verifies (last third). Duration = a fast mode (lognormal; includes
# the ~0.1 s docker-exec round trip) or, with probability p_slow, a slow mode (a test suite, a
# package build, a command that runs to the timeout): lognormal around slow_median_s with
# SLOW_SIGMA. The slow mode is the heavy tail TraceLab measures: calls over 60 s are ~4% of tool
# calls but ~85% of tool time (paper §1; issue 5 asks for it). Note: mini-SWE-agent's SWE-bench
# config kills a command after 60 s (environment.timeout), so in its own traces such gaps would
# come from timeouts plus container overhead; the shape here follows the paper's statistic.
#  name : (w_explore, w_edit, w_verify, fast_median_s, fast_sigma, p_slow, slow_median_s,
#          obs_median_tokens, obs_sigma)
TOOLS: dict[str, tuple[float, float, float, float, float, float, float, float, float]] = {
    "ls":     (10.0, 2.0, 1.0, 0.12, 0.5, 0.0, 0.0, 5, 0.9),
    "find":   (10.0, 2.0, 1.0, 0.35, 1.0, 0.0, 0.0, 6, 1.0),
    "grep":   (18.0, 8.0, 4.0, 0.30, 1.0, 0.0, 0.0, 10, 1.1),
    "cat":    (14.0, 8.0, 3.0, 0.12, 0.5, 0.0, 0.0, 48, 1.0),
    "head":   (3.0, 2.0, 1.0, 0.12, 0.5, 0.0, 0.0, 24, 0.8),
    "tail":   (1.0, 1.0, 1.0, 0.12, 0.5, 0.0, 0.0, 24, 0.8),
    "sed":    (8.0, 30.0, 6.0, 0.12, 0.5, 0.0, 0.0, 5, 1.2),
    "nl":     (4.0, 4.0, 1.0, 0.12, 0.5, 0.0, 0.0, 40, 0.9),
    "wc":     (1.0, 1.0, 0.5, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "awk":    (1.0, 1.0, 0.5, 0.12, 0.5, 0.0, 0.0, 10, 1.0),
    "echo":   (0.5, 2.0, 1.0, 0.10, 0.5, 0.0, 0.0, 1, 0.5),
    "cd":     (3.0, 6.0, 10.0, 0.8, 1.2, 0.075, 120.0, 12, 1.2),
    "python": (4.0, 14.0, 20.0, 1.0, 1.0, 0.095, 120.0, 12, 1.2),
    "pytest": (0.0, 2.0, 12.0, 6.0, 1.0, 0.25, 150.0, 32, 1.0),
    "pip":    (1.0, 1.0, 2.0, 3.0, 1.0, 0.30, 120.0, 16, 1.0),
    "git":    (1.0, 2.0, 6.0, 0.2, 0.8, 0.0, 0.0, 20, 1.0),
    "diff":   (0.0, 1.0, 2.0, 0.12, 0.5, 0.0, 0.0, 16, 1.0),
    "cp":     (0.2, 1.0, 0.5, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "mv":     (0.1, 0.5, 0.3, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "rm":     (0.1, 0.5, 1.0, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "mkdir":  (0.2, 0.5, 0.2, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "touch":  (0.1, 0.5, 0.2, 0.12, 0.5, 0.0, 0.0, 1, 0.5),
    "tox":    (0.0, 0.2, 1.0, 20.0, 0.6, 0.80, 180.0, 40, 0.8),
    "make":   (0.2, 0.3, 0.6, 8.0, 0.8, 0.50, 120.0, 24, 1.0),
}
SLOW_SIGMA = 0.7
# The last call submits (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff`); no tool gap
# follows it. Counting it, the workload has 25 tool names.
SUBMIT_TOOL = "submit"


@dataclass(frozen=True)
class SwebenchParams:
    """User-settable knobs (``workload.params.<name>``); the defaults are the calibrated settings."""

    calls_median: float = CALLS_MEDIAN        # median calls per program
    calls_sigma: float = CALLS_SIGMA          # log-space spread of calls per program
    step_limit: int = STEP_LIMIT              # max calls per program
    context_cap_tokens: int = CONTEXT_CAP_TOKENS  # a program ends before exceeding this prompt
    output_median: float = OUTPUT_MEDIAN      # median output tokens per call
    observation_scale: float = OBSERVATION_SCALE  # multiplier on observation sizes
    tool_time_scale: float = 1.0              # multiplier on every tool duration


_STD_NORMAL = NormalDist()
_TOOL_NAMES = list(TOOLS)
_PHASE_P = [np.array([TOOLS[t][i] for t in _TOOL_NAMES]) / sum(TOOLS[t][i] for t in _TOOL_NAMES)
            for i in range(3)]


def generate(rng: np.random.Generator, programs: int, params: SwebenchParams) -> list[list[dict]]:
    """Return ``programs`` call lists (sub_requests), in generation order."""
    lengths, verbosity = [], []
    for u in stratified_uniforms(rng, programs):
        z = _STD_NORMAL.inv_cdf(u)
        n = round(params.calls_median * math.exp(params.calls_sigma * z))
        lengths.append(int(min(params.step_limit, max(MIN_CALLS, n))))
        z_v = VERBOSITY_LENGTH_CORR * z + math.sqrt(1.0 - VERBOSITY_LENGTH_CORR ** 2) * float(
            rng.standard_normal())
        verbosity.append(params.observation_scale * math.exp(VERBOSITY_SIGMA * z_v))
    out = [_one_program(rng, n, v, params) for n, v in zip(lengths, verbosity)]
    _assign_durations(rng, out, params.tool_time_scale)
    return out


def _one_program(rng: np.random.Generator, n_calls: int, verbosity: float,
                 params: SwebenchParams) -> list[dict]:
    """Token counts and tools of one run (durations come later); ends early at the cap."""
    prompt = lognormal_int(rng, BASE_PROMPT_MEDIAN, BASE_PROMPT_SIGMA, *BASE_PROMPT_RANGE)
    prompt = min(prompt, params.context_cap_tokens)
    calls: list[dict] = []
    for k in range(n_calls):
        output = lognormal_int(rng, params.output_median, OUTPUT_SIGMA, *OUTPUT_RANGE)
        phase = min(2, (3 * k) // n_calls)
        tool = _TOOL_NAMES[int(rng.choice(len(_TOOL_NAMES), p=_PHASE_P[phase]))]
        obs_med, obs_sig = TOOLS[tool][7], TOOLS[tool][8]
        observation = OBSERVATION_OVERHEAD + lognormal_int(
            rng, obs_med * verbosity, obs_sig, 0, OBSERVATION_CAP)
        calls.append({"input_toks": prompt, "output_toks": output,
                      "tool_duration_ns": 0, "tool_name": tool})
        nxt = prompt + output + observation
        if nxt > params.context_cap_tokens:
            break
        prompt = nxt
    calls[-1]["tool_name"] = SUBMIT_TOOL
    return calls


def _assign_durations(rng: np.random.Generator, programs: list[list[dict]], scale: float) -> None:
    """Fill ``tool_duration_ns`` of every call but each program's last (which stays 0).

    Per tool, exactly ``floor(n * p_slow + U)`` of its n calls (a uniformly random subset) take
    the slow mode; the slow durations use stratified normal quantiles. Fast durations are iid.
    """
    by_tool: dict[str, list[dict]] = {t: [] for t in _TOOL_NAMES}
    for calls in programs:
        for call in calls[:-1]:
            by_tool[call["tool_name"]].append(call)
    slow: list[tuple[dict, float]] = []
    for tool in _TOOL_NAMES:  # fixed table order: deterministic
        members = by_tool[tool]
        _, _, _, fast_med, fast_sig, p_slow, slow_med, _, _ = TOOLS[tool]
        n_slow = int(math.floor(len(members) * p_slow + float(rng.random()))) if p_slow else 0
        slow_idx = set(int(i) for i in rng.choice(len(members), size=n_slow, replace=False)) \
            if n_slow else set()
        for i, call in enumerate(members):
            if i in slow_idx:
                slow.append((call, slow_med))
            else:
                z = float(rng.standard_normal())
                call["tool_duration_ns"] = seconds_to_ns(scale * fast_med * math.exp(fast_sig * z))
    for (call, slow_med), u in zip(slow, stratified_uniforms(rng, len(slow))):
        z = _STD_NORMAL.inv_cdf(u)
        call["tool_duration_ns"] = seconds_to_ns(scale * slow_med * math.exp(SLOW_SIGMA * z))
