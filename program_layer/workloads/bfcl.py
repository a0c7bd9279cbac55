"""Synthetic BFCL v4 multi-turn function-calling programs (the paper's second workload).

A program is one BFCL v4 multi-turn entry driven by a multi-turn harness (paper App. A): the
conversation has several user turns; within a turn the model emits function calls, the harness
executes them against BFCL's stateful Python backends (file system, trading bot, travel, ...)
and returns the results, until the model answers in text, which ends the turn; the harness then
appends the next user query. Every step is one LLM call. Context only grows, so the engine's
default shared prefix (``input_k + output_k``) holds and no ``reuse_prefix_toks`` is written.

Targets (paper §4 "Workloads", §5.1): 100 programs, median 5.5 calls (half the programs have
<= 5 calls, half >= 6); short tool gaps; a program lasts about 11 s end to end when served alone
by Llama-3.1-8B on one B200.

Duration arithmetic (see :func:`estimated_duration_s`): on B200 + Llama-3.1-8B the paper measures
mean TTFT ~18 ms and mean TPOT ~4.4 ms (App. D: 18.3/17.5 ms and 4.35/4.42 ms, sim/real). With a
mean of 5.79 calls (pmf below), 4.79 gaps of mean ~0.45 s give ~2.2 s of tool time and 5.79 x
18 ms ~ 0.1 s of prefill, leaving ~8.7 s of decode = ~1,980 output tokens per program, ~340 per
call: the API model's function calls come with a reasoning preamble. Hence outputs lognormal with
median 280 (mean ~335) and the expected duration 5.79 x (0.018 + 335 x 0.0044) + 2.2 ~ 10.9 s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._sampling import lognormal_int, seconds_to_ns, stratified_uniforms

# Calls per program: pmf with P(calls <= 5) = 0.5 exactly, so with stratified draws an even
# number of programs has median 5.5 for every seed (paper §4: median 5.5 calls). Mean 5.79.
CALLS_PMF: dict[int, float] = {2: 0.06, 3: 0.12, 4: 0.15, 5: 0.17, 6: 0.15, 7: 0.12,
                               8: 0.09, 9: 0.06, 10: 0.04, 11: 0.02, 12: 0.02}
# User turns per entry: BFCL v4 multi-turn entries have a handful of user turns; 2-4 here,
# never more than the calls.
TURNS_RANGE = (2, 4)
# BFCL v4 multi-turn backends (the "involved classes" of an entry); 1-2 per program.
API_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI",
               "TradingBot", "TravelAPI", "VehicleControlAPI")
# First prompt: system prompt + JSON docs of the involved classes' functions (each class is
# ~0.6-1.5 k tokens of docs) + the first user query.
BASE_PROMPT_MEDIAN = 2_400
BASE_PROMPT_SIGMA = 0.35
BASE_PROMPT_RANGE = (800, 8_000)
# Output per call (reasoning preamble + function calls, or the turn's text answer); see the
# duration arithmetic in the module docstring.
OUTPUT_MEDIAN = 280
OUTPUT_SIGMA = 0.6
OUTPUT_RANGE = (8, 2_048)
# Appended after a function-call step: the execution results (usually a short dict; `cat`-like
# calls return file contents).
RESULT_MEDIAN = 60
RESULT_SIGMA = 0.8
RESULT_RANGE = (5, 2_000)
# Appended after a turn's text answer: the next user query.
QUERY_MEDIAN = 45
QUERY_SIGMA = 0.5
QUERY_RANGE = (8, 400)
# Tool gaps are short (BFCL's backends are in-process Python; the gap is the harness round trip:
# parse the calls, execute, format results). Function-call gap: lognormal median 0.4 s.
# Turn-end gap (the harness injects the next user query): median 0.2 s.
CALL_GAP_MEDIAN_S = 0.4
CALL_GAP_SIGMA = 0.8
TURN_GAP_MEDIAN_S = 0.2
TURN_GAP_SIGMA = 0.5
USER_TOOL = "user"  # tool name of a turn-end gap
# Serving constants for the duration arithmetic only (paper App. D, B200, Llama-3.1-8B, TP1).
B200_8B_TTFT_S = 0.018
B200_8B_TPOT_S = 0.0044


@dataclass(frozen=True)
class BfclParams:
    """User-settable knobs (``workload.params.<name>``); defaults are the calibrated settings."""

    output_median: float = OUTPUT_MEDIAN        # median output tokens per call
    call_gap_median_s: float = CALL_GAP_MEDIAN_S  # median function-execution gap
    tool_time_scale: float = 1.0                # multiplier on every gap


def generate(rng: np.random.Generator, programs: int, params: BfclParams) -> list[list[dict]]:
    """Return ``programs`` call lists (sub_requests), in generation order."""
    values = sorted(CALLS_PMF)
    cdf = np.cumsum([CALLS_PMF[v] for v in values])
    lengths = [values[min(int(np.searchsorted(cdf, u, side="right")), len(values) - 1)]
               for u in stratified_uniforms(rng, programs)]
    return [_one_program(rng, n, params) for n in lengths]


def _turn_ends(rng: np.random.Generator, n_calls: int) -> set[int]:
    """Indices of the calls that end a user turn (always includes the last call)."""
    turns = min(n_calls, int(rng.integers(TURNS_RANGE[0], TURNS_RANGE[1] + 1)))
    # choose turns-1 cut points among the n_calls-1 gaps; each turn has >= 1 call
    cuts = rng.choice(n_calls - 1, size=turns - 1, replace=False) if turns > 1 else []
    return {int(c) for c in cuts} | {n_calls - 1}


def _one_program(rng: np.random.Generator, n_calls: int, params: BfclParams) -> list[dict]:
    classes = [API_CLASSES[int(i)] for i in
               rng.choice(len(API_CLASSES), size=int(rng.integers(1, 3)), replace=False)]
    ends = _turn_ends(rng, n_calls)
    prompt = lognormal_int(rng, BASE_PROMPT_MEDIAN, BASE_PROMPT_SIGMA, *BASE_PROMPT_RANGE)
    calls: list[dict] = []
    for k in range(n_calls):
        output = lognormal_int(rng, params.output_median, OUTPUT_SIGMA, *OUTPUT_RANGE)
        if k in ends:
            tool, appended = USER_TOOL, lognormal_int(rng, QUERY_MEDIAN, QUERY_SIGMA, *QUERY_RANGE)
            gap_s = TURN_GAP_MEDIAN_S * math.exp(TURN_GAP_SIGMA * float(rng.standard_normal()))
        else:
            tool = classes[int(rng.integers(len(classes)))]
            appended = lognormal_int(rng, RESULT_MEDIAN, RESULT_SIGMA, *RESULT_RANGE)
            gap_s = params.call_gap_median_s * math.exp(
                CALL_GAP_SIGMA * float(rng.standard_normal()))
        calls.append({"input_toks": prompt, "output_toks": output,
                      "tool_duration_ns": seconds_to_ns(gap_s * params.tool_time_scale),
                      "tool_name": tool})
        prompt += output + appended
    calls[-1]["tool_duration_ns"] = 0
    calls[-1]["tool_name"] = ""
    return calls


def estimated_duration_s(sub_requests: list[dict]) -> float:
    """Unloaded end-to-end time of one program on B200 + Llama-3.1-8B (the docstring's
    arithmetic): sum over calls of TTFT + output x TPOT, plus all tool gaps."""
    llm = sum(B200_8B_TTFT_S + c["output_toks"] * B200_8B_TPOT_S for c in sub_requests)
    return llm + sum(c["tool_duration_ns"] for c in sub_requests) / 1e9
