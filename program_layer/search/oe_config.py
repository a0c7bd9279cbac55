"""The OpenEvolve configuration of a policy search (Appendix F defaults) and the LLM config.

Appendix F: two islands, population 40, migration every 10 iterations, elite ratio 0.2,
exploration 0.3, exploitation 0.6, diff-based mutations, a prompt with the three best and two
diverse programs, a model ensemble at temperature 1.0, a 90-minute evaluation timeout
(here 600 s by default: a target-cell run takes seconds, and a stuck candidate should not
hold a search for an hour and a half).

LLM config YAML (all keys optional)::

    api_base: http://localhost:8000/v1     # else $OPENAI_BASE_URL, else OpenAI's
    api_key: sk-...                        # else $OPENAI_API_KEY (never written to DIR)
    temperature: 1.0
    max_tokens: 4096
    request_timeout_s: 600                 # per LLM request
    retries: 3
    evaluation_timeout_s: 600              # per simulator run of a candidate
    models:                                # the ensemble; weights are sampling weights
      - {name: qwen3.7-plus, weight: 0.7}
      - {name: claude-sonnet-5, weight: 0.3}
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Optional

import yaml

from llmservingsim.errors import ConfigError

DEFAULT_MODELS = [{"name": "qwen3.7-plus", "weight": 0.7}, {"name": "claude-sonnet-5", "weight": 0.3}]
DEFAULT_EVAL_TIMEOUT_S = 600
_LLM_KEYS = {"api_base", "api_key", "temperature", "max_tokens", "request_timeout_s", "retries",
             "retry_delay_s", "evaluation_timeout_s", "models", "random_seed"}

SYSTEM_MESSAGE = """\
You improve a {axis} policy for AgentServeSim, a simulator of LLM serving for agent programs
(multi-call programs with tool gaps between calls). The policy is a Python class deriving
from {base}. Fitness is the seed policy's mean job completion time (JCT) divided by the
candidate's on the target cell ({cell}); 1.0 is parity, higher is better. A candidate that
raises, returns an invalid decision, or reads anything beyond the read-only PCB view, the
current time `now` (seconds) and `self.signals` (e.g. `kv_utilization`) scores 0.
Interface:
{interface}
Change only the code between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END; keep the class name
and base class. Keep the policy cheap: it runs on every call."""

INTERFACES = {
    "retention": ("on_turn_complete(self, pcb, request_id, now) and on_turn_arrival(self, pcb, now) "
                  "each return ('protect', until_s) | 'release' | 'evict' | 'none'."),
    "scheduling": ("priority(self, pcb, now) -> int (smaller runs first); class attribute "
                   "engine_args = {'scheduling_policy': 'priority'}."),
    "routing": "select(self, pcb, inflight, now) -> int, the index of the serving instance.",
}


def load_llm_config(path: Optional[str | Path]) -> dict:
    """Read the LLM config YAML (or {} without one) and fill api_base / api_key from the
    environment. Unknown keys are an error naming the file and key."""
    data: dict = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read LLM config: {exc}", file=str(path)) from exc
        if not isinstance(data, dict):
            raise ConfigError("LLM config must be a mapping", file=str(path))
        for key in data:
            if key not in _LLM_KEYS:
                raise ConfigError(f"unknown key (known: {', '.join(sorted(_LLM_KEYS))})",
                                  file=str(path), key=key)
        for i, model in enumerate(data.get("models") or []):
            if not isinstance(model, dict) or "name" not in model:
                raise ConfigError("each model needs a name", file=str(path), key=f"models[{i}]")
    out = dict(data)
    out.setdefault("api_base", os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1")
    out["api_key_from_env"] = "api_key" not in data
    if "api_key" not in data:
        out["api_key"] = os.environ.get("OPENAI_API_KEY") or "EMPTY"   # local servers ignore it
    out.setdefault("models", copy.deepcopy(DEFAULT_MODELS))
    return out


def build_config(*, axis: str, base_name: str, cell: str, iterations: int, llm: dict,
                 eval_timeout_s: float, trace_path: str, parallel: int = 1,
                 random_seed: int = 42) -> dict:
    """The OpenEvolve config as a plain dict (``openevolve.config.Config.from_dict`` input).
    Contains the API key in clear: write it to disk only through :func:`redacted`."""
    llm_section = {
        "api_base": llm["api_base"],
        "api_key": llm["api_key"],
        "temperature": float(llm.get("temperature", 1.0)),
        "max_tokens": int(llm.get("max_tokens", 4096)),
        "timeout": int(llm.get("request_timeout_s", 600)),
        "retries": int(llm.get("retries", 3)),
        "retry_delay": int(llm.get("retry_delay_s", 5)),
        "models": [{"name": m["name"], "weight": float(m.get("weight", 1.0))} for m in llm["models"]],
    }
    if llm.get("random_seed") is not None:
        llm_section["random_seed"] = int(llm["random_seed"])
    system = SYSTEM_MESSAGE.format(axis=axis, base=base_name, cell=Path(cell).name,
                                   interface=INTERFACES[axis])
    return {
        "max_iterations": int(iterations),
        "checkpoint_interval": max(1, int(iterations)),
        "log_level": "INFO",
        "random_seed": random_seed,
        "language": "python",
        "file_suffix": ".py",
        "diff_based_evolution": True,
        "max_code_length": 20000,
        "llm": llm_section,
        "prompt": {"system_message": system, "num_top_programs": 3, "num_diverse_programs": 2,
                   "include_artifacts": True},
        "database": {"population_size": 40, "archive_size": 40, "num_islands": 2,
                     "migration_interval": 10, "elite_selection_ratio": 0.2,
                     "exploration_ratio": 0.3, "exploitation_ratio": 0.6,
                     "random_seed": random_seed, "log_prompts": True},
        # One evaluation runs the candidate on each cell in turn; allow for all of them.
        "evaluator": {"timeout": int(eval_timeout_s) + 60, "max_retries": 0,
                      "cascade_evaluation": False, "parallel_evaluations": int(parallel),
                      "enable_artifacts": True},
        "evolution_trace": {"enabled": True, "format": "jsonl", "include_code": False,
                            "include_prompts": False, "include_failures": True,
                            "output_path": trace_path, "buffer_size": 1},
    }


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the system message) as readable ``|`` blocks."""


def _str_representer(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def dump_yaml(config: dict) -> str:
    return yaml.dump(config, Dumper=_BlockDumper, sort_keys=False, width=100)


def redacted(config: dict, *, key_from_env: bool) -> dict:
    """A copy safe to write to disk: the key becomes ``${OPENAI_API_KEY}`` (OpenEvolve
    expands it on load) when it came from the environment, and is removed otherwise."""
    out = copy.deepcopy(config)
    if key_from_env and os.environ.get("OPENAI_API_KEY"):
        out["llm"]["api_key"] = "${OPENAI_API_KEY}"
    else:
        out["llm"].pop("api_key", None)
    return out
