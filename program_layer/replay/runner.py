"""Causal replay: one thread per program, a bound on requests in flight.

Times are ``time.monotonic()`` seconds; ``t0`` is the run's start. Invariants:

- program p's call 0 is released at ``t0 + arrival`` (the plan's scaled arrival); call k+1
  is released only after call k completed (its last token was read) and its tool gap
  elapsed: ``release(k+1) >= last_token(k) + gap(k)``;
- a released call waits for one of ``max_concurrency`` slots (unbounded when None; first
  released, first served) and holds it until its stream ends; its record's
  ``arrival_time`` is the release, ``queued_ts`` the send, so ``arrival_time <= queued_ts``;
- a failed call stops its program (its successors are never sent); the other programs go on;
- after ``stop`` (Ctrl-C) no new call is sent and nothing more is recorded.

The runner owns the counts and the per-program state (prompts, attained service); the
record owns the files.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Optional

from .priority import priority as priority_of
from .prompts import ProgramPrompts
from .slots import FifoSlots

NS = 1e9
LAUNCH_LEAD_S = 1.0     # a program's thread starts this long before its arrival (start-up is not release jitter)


@dataclass
class ReplayOptions:
    model: str
    max_concurrency: Optional[int] = None
    priority: str = "none"
    seed: int = 0


@dataclass
class Counts:
    total: int
    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0          # sent and not finished; "unfinished" once the run is stopped

    @property
    def not_sent(self) -> int:
        return self.total - self.succeeded - self.failed - self.in_flight

    def as_dict(self) -> dict:
        return {"calls": self.total, "succeeded": self.succeeded, "failed": self.failed,
                "unfinished": self.in_flight, "not_sent": self.not_sent}


def _header_safe(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "_" for c in text)


class Replayer:
    def __init__(self, plan, server, record, options: ReplayOptions, bar=None):
        self.plan, self.server, self.record, self.opt = plan, server, record, options
        self.bar = bar
        self.counts = Counts(plan.num_calls)
        self.output_ids_from_server: Optional[bool] = None
        self.t0: Optional[float] = None          # monotonic start of run()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._slots = FifoSlots(options.max_concurrency) if options.max_concurrency else None

    # -- waiting -------------------------------------------------------------------------
    def _sleep_until(self, target: float) -> bool:
        """Wait until monotonic time ``target``; False if stopped first."""
        while True:
            left = target - time.monotonic()
            if self.stop.is_set():
                return False
            if left <= 0:
                return True
            self.stop.wait(left)

    def _acquire(self) -> bool:
        if self._slots is None:
            return not self.stop.is_set()
        return self._slots.acquire(self.stop)

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> Counts:
        """Replay every program; returns the counts. Ctrl-C sets ``stop`` and re-raises."""
        t0 = time.monotonic()
        self.t0 = t0
        threads = []
        try:
            for prog in sorted(self.plan.programs, key=lambda p: p.order):
                if not self._sleep_until(t0 + prog.arrival_ns / NS - LAUNCH_LEAD_S):
                    break
                th = threading.Thread(target=self._program_guarded, args=(prog, t0), daemon=True,
                                      name=f"replay-{prog.index}")
                th.start()
                threads.append(th)
            for th in threads:
                while th.is_alive():
                    th.join(0.2)
        except BaseException:
            self.stop.set()
            raise
        return self.counts

    def _program_guarded(self, prog, t0: float) -> None:
        state = {"call": 0, "sent": False}
        try:
            self._program(prog, t0, state)
        except Exception as exc:  # a client bug must not hang the run: record it, stop the program
            if state["call"] < len(prog.calls):
                self._failed(prog, state["call"], None, None, f"client error: {type(exc).__name__}: {exc}",
                             time.monotonic(), 0, in_flight=state["sent"])

    def _program(self, prog, t0: float, state: dict) -> None:
        prompts = ProgramPrompts(self.opt.seed, prog.index)
        attained = 0.0
        target = t0 + prog.arrival_ns / NS
        for call in prog.calls:
            state["call"], state["sent"] = call.index, False
            if not self._sleep_until(target):
                return
            released = time.monotonic()
            prompt = prompts.prompt(call)
            prio = priority_of(self.opt.priority, prog.order, attained)
            body = {"model": self.opt.model, "max_tokens": call.output_toks,
                    "min_tokens": call.output_toks, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    "return_token_ids": True}
            if prio is not None:
                body["priority"] = prio
            # the prompt's text is kept per program and extended, never re-encoded whole
            payload = (json.dumps(body, separators=(",", ":"))[:-1] + ',"prompt":[' + prompt.text + "]}").encode()
            request_id = _header_safe(f"{prog.session_id}#{call.index}")
            if not self._acquire():
                return
            with self._lock:
                self.counts.in_flight += 1
                state["sent"] = True
            try:
                out = self.server.complete(payload, call.output_toks, request_id)
            finally:
                self._release()
            if self.stop.is_set():
                return                              # interrupted: this call stays "unfinished"
            if not out.ok:
                self._failed(prog, call.index, released, out.queued_ts, out.reason,
                             out.ended_ts or time.monotonic(), out.tokens, in_flight=True)
                return
            ids_ok = out.output_ids is not None
            rec = {"request_id": request_id, "program_id": prog.session_id, "call_index": call.index,
                   "input_toks": call.input_toks, "output_toks": call.output_toks,
                   "arrival_time": released, "queued_ts": out.queued_ts,
                   "first_token_ts": out.first_token_ts, "last_token_ts": out.last_token_ts,
                   "output_ids_from_server": ids_ok}
            for key, value in (("priority", prio), ("server_request_id", out.server_request_id),
                               ("server_prompt_tokens", out.prompt_tokens), ("cached_tokens", out.cached_tokens)):
                if value is not None:
                    rec[key] = value
            with self._lock:
                if not self.record.request(rec):
                    return
                self.counts.in_flight -= 1
                state["call"], state["sent"] = call.index + 1, False    # a later error fails the next call
                self.counts.succeeded += 1
                self.output_ids_from_server = ids_ok and self.output_ids_from_server is not False
                self._tick(1)
            prompts.observe(prompt, out.output_ids, call.output_toks)
            attained += out.last_token_ts - out.queued_ts
            target = out.last_token_ts + call.gap_ns / NS

    def _failed(self, prog, k: int, released, queued, reason: str, when: float, tokens: int,
                in_flight: bool = False) -> None:
        rec = {"program_id": prog.session_id, "call_index": k, "reason": reason, "time": when,
               "arrival_time": released, "queued_ts": queued, "tokens_received": tokens,
               "not_sent_after": len(prog.calls) - k - 1}
        with self._lock:
            if not self.record.failure(rec):
                return
            if in_flight:
                self.counts.in_flight -= 1
            self.counts.failed += 1
            self._tick(1 + len(prog.calls) - k - 1)

    def close_record(self, **meta) -> Counts:
        """Stop recording and rewrite meta.json with the final counts, atomically with respect
        to the program threads (no record can land between the counts and the close)."""
        self.stop.set()
        with self._lock:
            self.record.close(counts=self.counts.as_dict(), num_requests=self.counts.succeeded,
                              complete=self.counts.succeeded == self.counts.total,
                              output_ids_from_server=self.output_ids_from_server, **meta)
            return Counts(**vars(self.counts))

    def _tick(self, n: int) -> None:
        if self.bar is not None:
            c = self.counts
            self.bar.update(n, note=f"{c.succeeded} ok, {c.failed} failed")
