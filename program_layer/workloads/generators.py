"""Seeded synthetic agent-program workloads: registry and the one entry point.

``generate_programs("swebench", programs=50, rate_jps=0.02, seed=0)`` returns program dicts in
the workload JSONL schema (docs/workloads.md), sorted by arrival. Randomness comes only from
``numpy.random.default_rng`` seeded with ``seed``: one child stream for the programs' contents
and an independent one for the arrivals, so changing ``rate_jps`` rescales the arrival times
but leaves every program identical (the paper runs the same programs at five rates).

Arrivals are Poisson at ``rate_jps`` programs per second, the first at time 0 (see
``_sampling.poisson_arrivals_ns``). Session ids are ``"<generator>-<index:04d>"`` in arrival
order. Each generator module documents its constants and their sources.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from llmservingsim.errors import ConfigError, finite_number

from . import bfcl, swebench
from ._sampling import poisson_arrivals_ns


@dataclass(frozen=True)
class GeneratorSpec:
    """One registered generator: its one-line description, its parameter dataclass (every field
    is a ``workload.params.<field>`` knob with a calibrated default) and its call-list builder."""

    description: str
    params_type: type
    build: Callable[[np.random.Generator, int, Any], list[list[dict]]]


GENERATORS: dict[str, GeneratorSpec] = {
    "swebench": GeneratorSpec(
        "mini-SWE-agent on SWE-bench: median 47 calls, growing contexts up to 100k tokens, "
        "heavy-tailed bash tool gaps (paper §4, App. A)",
        swebench.SwebenchParams, swebench.generate),
    "bfcl": GeneratorSpec(
        "BFCL v4 multi-turn function calling: median 5.5 calls, short tool gaps, ~11 s per "
        "program on B200 + Llama-3.1-8B (paper §4, §5.1)",
        bfcl.BfclParams, bfcl.generate),
}


def generate_programs(generator: str, *, programs: int, rate_jps: float, seed: int,
                      **params: Any) -> list[dict]:
    """Generate ``programs`` agent programs, sorted by ``arrival_time_ns``.

    Raises ConfigError naming the key (``workload.generator``, ``workload.programs``,
    ``workload.rate_jps``, ``workload.seed`` or ``workload.<param>``) for bad input.
    """
    spec = GENERATORS.get(generator)
    if spec is None:
        raise ConfigError(f"unknown generator {generator!r} (known: {', '.join(GENERATORS)})",
                          key="workload.generator")
    if isinstance(programs, bool) or not isinstance(programs, int) or programs < 1:
        raise ConfigError(f"must be a positive integer, got {programs!r}", key="workload.programs")
    if not finite_number(rate_jps) or rate_jps <= 0:
        raise ConfigError(f"must be a positive number of jobs per second, got {rate_jps!r}",
                          key="workload.rate_jps")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"must be a non-negative integer, got {seed!r}", key="workload.seed")
    knobs = _make_params(generator, spec.params_type, params)
    content_seq, arrival_seq = np.random.SeedSequence(seed).spawn(2)
    call_lists = spec.build(np.random.default_rng(content_seq), programs, knobs)
    arrivals = poisson_arrivals_ns(np.random.default_rng(arrival_seq), programs, float(rate_jps))
    return [{"session_id": f"{generator}-{i:04d}", "arrival_time_ns": t, "sub_requests": calls}
            for i, (t, calls) in enumerate(zip(arrivals, call_lists))]


def describe_params(generator: str) -> dict[str, Any]:
    """The parameter names of ``generator`` with their defaults (for ``--help`` and docs)."""
    spec = GENERATORS[generator]
    return {f.name: f.default for f in dataclasses.fields(spec.params_type)}


def _make_params(generator: str, params_type: type, given: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    for name, value in given.items():
        key = f"workload.{name}"
        if name not in fields:
            raise ConfigError(f"unknown parameter for generator {generator!r} "
                              f"(known: {', '.join(fields)})", key=key)
        if not finite_number(value) or value <= 0:
            raise ConfigError(f"must be a positive number, got {value!r}", key=key)
        if fields[name].type in ("int", int) and not isinstance(value, int):
            raise ConfigError(f"must be an integer, got {value!r}", key=key)
    return params_type(**given)
