"""``agentservesim replay``: drive a real OpenAI-compatible completions server (vLLM's
``/v1/completions``) with an agent workload, causally, and record the run in the real-run
format that ``validate`` and ``calibrate`` read (docs/replay.md).

Standard library only. One concept per module:

- ``plan``: the workload, read by the simulator's own loader, as programs of calls (arrival,
  prompt and output lengths, tool gaps, shared prefixes), times scaled by ``--time-scale``;
- ``prompts``: token-id prompts built so that a call's prompt contains its predecessor's real
  context (prompt + the server's actual output ids), as the simulator derives prefix reuse;
- ``priority``: the request ``priority`` field of each mode (plas, program-fcfs, none);
- ``sse``: server-sent-event parsing of a streamed completion;
- ``client``: one streamed completion over ``http.client`` and the server's metadata;
- ``record``: the output folder (requests.jsonl, failed.jsonl, meta.json, workload.jsonl);
- ``slots``: the first-come-first-served ``--max-concurrency`` bound;
- ``runner``: one thread per program, causal release, the counts.
"""
