"""``agentservesim replay WORKLOAD --base-url URL --model NAME --out DIR``: drive a real
OpenAI-compatible completions server (vLLM ``/v1/completions``) with an agent workload,
causally, and record the run for ``validate`` / ``calibrate`` (docs/replay.md).

Exit status: 0 when every call of the workload completed, 1 when some failed or were not
sent (the record is then partial: failed.jsonl says why, the summary line counts them), 2 for
bad input (an unreachable server, a bad workload, a bad option; one line), 130 on Ctrl-C
(the record written so far stays valid; meta.json says ``"complete": false``).
"""
from __future__ import annotations

import math
import sys
import time
from datetime import datetime, timezone


def add_arguments(p) -> None:
    from program_layer.replay.priority import MODES
    p.add_argument("workload", help="workload JSONL (requests or agent programs, as the simulator reads)")
    p.add_argument("--base-url", required=True, metavar="URL", help="server root, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, metavar="NAME", help="model name as the server serves it")
    p.add_argument("--out", required=True, metavar="DIR", help="record folder (must be new or empty)")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                   help="multiply arrivals and tool gaps by X (default 1; 0.1 replays 10x faster)")
    p.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                   help="at most N requests in flight (default: unbounded)")
    p.add_argument("--priority", choices=MODES, default="none",
                   help="request priority: plas (attained service, ms), program-fcfs (program arrival "
                        "order) or none (omit; default). plas/program-fcfs need the server's "
                        "--scheduling-policy priority")
    p.add_argument("--api-key", default=None, metavar="KEY", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="socket timeout: fail a call when the server sends nothing for S seconds (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts' token ids (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _check_options(args) -> None:
    from llmservingsim.errors import ConfigError
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise ConfigError(f"must be a number > 0, got {args.time_scale:g}", key="--time-scale")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ConfigError(f"must be >= 1, got {args.max_concurrency}", key="--max-concurrency")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ConfigError(f"must be a number of seconds > 0, got {args.timeout:g}", key="--timeout")


def _check_fits(plan, max_model_len) -> None:
    """Every call's prompt + output within the server's max_model_len (it would answer 400)."""
    from llmservingsim.errors import WorkloadError
    if max_model_len is None:
        return
    for p in plan.programs:
        for c in p.calls:
            if c.input_toks + c.output_toks > max_model_len:
                raise WorkloadError(f"{p.session_id} call {c.index} needs {c.input_toks} + {c.output_toks} tokens, "
                                    f"more than the server's max_model_len {max_model_len}", file=str(plan.path))


def main(args) -> int:
    from program_layer.replay.client import Server
    from program_layer.replay.plan import load_plan
    from program_layer.replay.record import RunRecord, check_out_dir
    from program_layer.replay.runner import Replayer, ReplayOptions
    from program_layer.sweep.progress import progress

    _check_options(args)
    plan = load_plan(args.workload, args.time_scale)
    check_out_dir(args.out)
    server = Server(args.base_url, args.api_key, args.timeout)
    info = server.info(args.model)
    _check_fits(plan, info.max_model_len)
    clock = time.get_clock_info("monotonic")
    meta = {
        "tool": "agentservesim replay",
        "model": args.model,
        "served_models": info.served_models,
        "vllm_version": info.vllm_version,
        "engine_kwargs": {"max_model_len": info.max_model_len} if info.max_model_len is not None else {},
        "engine_kwargs_source": "GET /v1/models (max_model_len only); the OpenAI API exposes no other "
                                "engine argument: add them by hand to mirror the server's flags",
        "base_url": args.base_url,
        "dataset_path": str(plan.path),
        "dataset_hash": plan.sha256,
        "replayed_workload": "workload.jsonl",
        "time_scale": args.time_scale,
        "priority": args.priority,
        "max_concurrency": args.max_concurrency,
        "seed": args.seed,
        "timeout_s": args.timeout,
        "num_programs": len(plan.programs),
        "num_calls": plan.num_calls,
        "clock": {"function": "time.monotonic", "implementation": clock.implementation,
                  "resolution_s": clock.resolution, "monotonic": clock.monotonic,
                  "adjustable": clock.adjustable, "timestamps": "client (this host)"},
        "request": {"endpoint": "/v1/completions", "stream": True, "return_token_ids": True,
                    "min_tokens": "output_toks", "max_tokens": "output_toks", "ignore_eos": True},
        "output_ids_from_server": None,
        "started_at": _utc_now(),
        "finished_at": None,
        "complete": False,
        "interrupted": False,
    }
    record = RunRecord(args.out, meta, plan.records)
    bar = progress(plan.num_calls, "replay", args.quiet)
    replayer = Replayer(plan, server, record,
                        ReplayOptions(args.model, args.max_concurrency, args.priority, args.seed),
                        bar)

    def finish(interrupted: bool):
        c = replayer.close_record(finished_at=_utc_now(), interrupted=interrupted,
                                  clock=dict(meta["clock"], run_start_ts=replayer.t0))
        unfinished = f", {c.in_flight} unfinished" if c.in_flight else ""
        tail = f"; failures in {record.out}/failed.jsonl" if c.failed else ""
        return c, (f"replay: {c.succeeded} calls succeeded, {c.failed} failed{unfinished}, {c.not_sent} not sent "
                   f"({len(plan.programs)} programs); record in {record.out}/{tail}")

    try:
        replayer.run()
    except KeyboardInterrupt:
        bar.close()
        print(finish(interrupted=True)[1], file=sys.stderr)
        raise
    bar.close()
    counts, line = finish(interrupted=False)
    print(line)
    return 0 if counts.succeeded == counts.total else 1
