"""LLM-driven policy search (paper §5.3, Appendix F).

An LLM (through OpenEvolve) edits a policy class; AgentServeSim scores it by simulating the
target cell: fitness = seed mean JCT / candidate mean JCT. Modules:

    axes          policy specs (NAME | FILE.py:Class), axes, class discovery by base class
    seed_render   built-in NAME -> standalone seed file with EVOLVE-BLOCK markers
    worker        one simulator run in a child process (memory limit set before user code)
    sandbox       starts the worker with a wall-time limit; every outcome -> RunOutcome
    evaluator     fitness, seed baseline cache, OpenEvolve's evaluate(program_path)
    oe_config     OpenEvolve config (Appendix F defaults) and the LLM config YAML
    history       history.csv and the best-fitness plot
    cli           `agentservesim search`
    evaluate_cmd  `agentservesim evaluate-policy`
"""
from program_layer.search.evaluator import EvalSettings, evaluate_policy, seed_baseline

__all__ = ["EvalSettings", "evaluate_policy", "seed_baseline"]
