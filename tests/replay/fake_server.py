"""A fake vLLM OpenAI server for replay tests (standard library, 127.0.0.1, one thread each).

Known timing, measured from the moment the request body has been read (``t_recv``, the
server's ``time.monotonic()``, the same clock as the client's in one process): token i
(0-based) is sent at ``t_recv + FIRST_S + PER_PROMPT_S * len(prompt) + TOKEN_S * i``
(absolute targets, so sleep overshoot never accumulates). One token per SSE chunk, chunked
transfer encoding as uvicorn sends it. Token ids are deterministic:
``OUT_BASE + (31 * sum(prompt[-8:]) + 17 * i) % OUT_SPAN``, outside the replay's prompt id
range so tests can find them in later prompts. ``return_token_ids`` is honoured unless
``return_ids=False``; ``stream_options.continuous_usage_stats`` adds cumulative usage.

Fault injection: ``fail(request_id) -> bool`` answers HTTP 500; ``die_after=N`` makes the
server die when request N+1 arrives (that connection is dropped, streams in flight are cut,
the listening socket is closed so later connects are refused).
"""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIRST_S = 0.020
PER_PROMPT_S = 5e-6
TOKEN_S = 0.002
OUT_BASE, OUT_SPAN = 30000, 20000


def output_ids(prompt: list, n: int) -> list:
    s = sum(prompt[-8:])
    return [OUT_BASE + (31 * s + 17 * i) % OUT_SPAN for i in range(n)]


@dataclass
class Seen:
    """One completion request as the server saw it."""
    request_id: str
    body: dict
    t_recv: float
    token_ts: list = field(default_factory=list)
    output_ids: list = field(default_factory=list)
    status: int = 200


class FakeServer:
    def __init__(self, model: str = "fake/model", *, return_ids: bool = True, fail=None,
                 die_after: int | None = None, version: str | None = "0.19.0", max_model_len: int = 8192):
        self.model, self.return_ids, self.fail = model, return_ids, fail
        self.die_after, self.version, self.max_model_len = die_after, version, max_model_len
        self.seen: dict = {}
        self.count = 0
        self.dead = threading.Event()
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.kill()

    def kill(self) -> None:
        """Die: cut streams in flight, stop accepting, close the listening socket."""
        if self.dead.is_set():
            return
        self.dead.set()

        def down():
            self.httpd.shutdown()
            self.httpd.server_close()
        t = threading.Thread(target=down, daemon=True)
        t.start()
        if threading.current_thread() is not self.thread:
            t.join(5)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):   # cut connections are the point of some tests
        pass


def _handler(server: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):     # quiet
            pass

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _json(self, status: int, obj) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def do_GET(self):
            if self.path == "/version" and server.version:
                return self._json(200, {"version": server.version})
            if self.path == "/v1/models":
                return self._json(200, {"object": "list", "data": [
                    {"id": server.model, "object": "model", "owned_by": "vllm",
                     "max_model_len": server.max_model_len}]})
            self._json(404, {"error": {"message": "not found", "code": 404}})

        def _chunk(self, obj) -> None:
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            t_recv = time.monotonic()
            rid = self.headers.get("X-Request-Id", "")
            with server.lock:
                server.count += 1
                dying = server.die_after is not None and server.count > server.die_after
            if dying or server.dead.is_set():
                server.kill()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            seen = Seen(rid, body, t_recv)
            with server.lock:
                server.seen[rid] = seen
            if self.path != "/v1/completions":
                return self._json(404, {"error": {"message": "not found", "code": 404}})
            if server.fail is not None and server.fail(rid):
                seen.status = 500
                return self._json(500, {"error": {"message": "injected failure", "type": "InternalServerError",
                                                  "code": 500}})
            prompt, n = body["prompt"], int(body["max_tokens"])
            ids = output_ids(prompt, n)
            seen.output_ids = ids
            want_ids = bool(body.get("return_token_ids")) and server.return_ids
            opts = body.get("stream_options") or {}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            first = t_recv + FIRST_S + PER_PROMPT_S * len(prompt)
            for i, tok in enumerate(ids):
                delay = first + TOKEN_S * i - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if server.dead.is_set():           # died mid-stream: cut the connection
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                choice = {"index": 0, "text": f" t{tok}", "logprobs": None,
                          "finish_reason": "length" if i == n - 1 else None, "stop_reason": None}
                if want_ids:
                    choice["token_ids"] = [tok]
                    if i == 0:
                        choice["prompt_token_ids"] = prompt
                chunk = {"id": f"cmpl-{rid}", "object": "text_completion", "created": 0,
                         "model": server.model, "choices": [choice]}
                if opts.get("include_usage") and opts.get("continuous_usage_stats"):
                    chunk["usage"] = {"prompt_tokens": len(prompt), "completion_tokens": i + 1,
                                      "total_tokens": len(prompt) + i + 1}
                t_send = time.monotonic()          # before the write: the client reads it after this
                self._chunk(chunk)
                seen.token_ts.append(t_send)
            if opts.get("include_usage"):
                self._chunk({"id": f"cmpl-{rid}", "object": "text_completion", "created": 0,
                             "model": server.model, "choices": [],
                             "usage": {"prompt_tokens": len(prompt), "completion_tokens": n,
                                       "total_tokens": len(prompt) + n}})
            self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
