"""LLM-driven policy search (paper §5.3, Appendix F).

An LLM (through OpenEvolve) edits a policy class; AgentServeSim scores it by simulating the
target cell: fitness = seed mean JCT / candidate mean JCT. Modules:

    axes          policy specs (NAME | FILE.py:Class), axes, class discovery by base class
    seed_render   built-in NAME -> standalone seed file with EVOLVE-BLOCK markers
    worker        one simulator run in a child process (trusted: runs the simulator, writes
                  the result); a policy file runs in its own confined candidate process
    candidate     the candidate process: confines itself, then runs the untrusted policy
    lockdown      namespaces, empty root, privileges, hard limits, Landlock, seccomp
    channel       the wire format between worker and candidate (plain-data PCB snapshots)
    proxy         starts the candidate; the proxy policy the simulator calls
    sandbox       starts the worker with a wall-time limit; every outcome -> RunOutcome
    evaluator     fitness, seed baseline cache, OpenEvolve's evaluate(program_path)
    oe_config     OpenEvolve config (Appendix F defaults) and the LLM config YAML
    history       history.csv and the best-fitness plot
    cli           `agentservesim search`
    evaluate_cmd  `agentservesim evaluate-policy`
"""

__all__ = ["EvalSettings", "evaluate_policy", "seed_baseline"]


def __getattr__(name):
    # Lazy: the candidate process imports submodules of this package but needs nothing of
    # the evaluator (YAML, the simulator); it imports only what a policy may use.
    if name in __all__:
        from program_layer.search import evaluator
        return getattr(evaluator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
