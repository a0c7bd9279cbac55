"""One OpenAI-compatible server: its metadata and one streamed completion per call.

Every completion opens its own ``http.client`` connection (no pooling: requests never wait
on each other's sockets). ``--timeout`` is the socket timeout: the connect and every read
must make progress within it (a long generation that keeps streaming never times out).
Times are ``time.monotonic()`` on this host: ``queued_ts`` once the request (headers and
body) is written, ``first_token_ts`` / ``last_token_ts`` when the first / last chunk that
carries a token is read. A completion never raises for the server's behaviour: connection
errors, HTTP errors, timeouts, a broken stream and a token count other than the one asked
for all come back as a failed ``CallOutcome`` with a one-line reason.
"""
from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from llmservingsim.errors import ConfigError

from .sse import DONE, StreamError, chunk_tokens, events


@dataclass
class CallOutcome:
    ok: bool
    queued_ts: float
    first_token_ts: Optional[float] = None
    last_token_ts: Optional[float] = None
    tokens: int = 0
    output_ids: Optional[list] = None       # None when any token chunk came without ids
    reason: str = ""
    ended_ts: Optional[float] = None        # when the outcome was known (success or failure)
    server_request_id: Optional[str] = None
    prompt_tokens: Optional[int] = None     # the server's usage.prompt_tokens, when reported
    cached_tokens: Optional[int] = None     # usage.prompt_tokens_details.cached_tokens, when reported


@dataclass
class ServerInfo:
    served_models: Optional[list]           # ids from GET /v1/models, None if not available
    max_model_len: Optional[int]            # of --model, from /v1/models (vLLM reports it)
    vllm_version: Optional[str]             # GET /version, None if the server has none


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Server:
    """The server at ``base_url`` (its root, e.g. ``http://host:8000``; a trailing ``/v1`` is
    dropped so ``/version`` is found too)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 600.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{base_url!r} is not an http(s) URL like http://127.0.0.1:8000", key="--base-url")
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(f"{base_url!r} has a bad port", key="--base-url") from None
        self.base_url = base_url
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, port
        prefix = parts.path.rstrip("/")
        self.prefix = prefix[:-3] if prefix.endswith("/v1") else prefix
        self.api_key = api_key
        self.timeout = timeout

    def _connection(self, timeout: float):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _headers(self, extra: Optional[dict] = None) -> dict:
        h = {"Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(extra or {})
        return h

    def get_json(self, path: str, timeout: float):
        """(HTTP status, decoded JSON or None). Raises OSError / HTTPException on transport errors."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", self.prefix + path, headers=self._headers())
            resp = conn.getresponse()
            body = resp.read()
            try:
                obj = json.loads(body) if body else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                obj = None
            return resp.status, obj
        finally:
            conn.close()

    def info(self, model: str) -> ServerInfo:
        """Check the server answers and serves ``model``; ConfigError (one line) if not."""
        timeout = min(self.timeout, 30.0)
        try:
            status, models = self.get_json("/v1/models", timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise ConfigError(f"cannot reach the server at {self.base_url} ({_transport_reason(exc)})",
                              key="--base-url") from None
        if status in (401, 403):
            raise ConfigError(f"the server at {self.base_url} refused the request (HTTP {status}); "
                              "check --api-key", key="--api-key")
        served, max_len = None, None
        if status == 200 and isinstance(models, dict) and isinstance(models.get("data"), list):
            cards = [m for m in models["data"] if isinstance(m, dict)]
            served = [str(m.get("id")) for m in cards]
            if served and model not in served:
                raise ConfigError(f"the server does not serve {model!r} (it serves {', '.join(served)})",
                                  key="--model")
            for m in cards:
                if m.get("id") == model and isinstance(m.get("max_model_len"), int):
                    max_len = m["max_model_len"]
        version = None
        try:
            status, v = self.get_json("/version", timeout)
            if status == 200 and isinstance(v, dict) and v.get("version") is not None:
                version = str(v["version"])
        except (OSError, http.client.HTTPException):
            pass
        return ServerInfo(served, max_len, version)

    def complete(self, payload: bytes, expected_tokens: int, request_id: str) -> CallOutcome:
        """Stream one completion (``payload``: the JSON request body); a failed outcome (never
        an exception) if it goes wrong."""
        headers = self._headers({"Content-Type": "application/json", "Accept": "text/event-stream",
                                 "X-Request-Id": request_id})
        conn = self._connection(self.timeout)
        out = CallOutcome(False, time.monotonic())
        try:
            conn.connect()
            # no Nagle: small request writes and the server's small chunks must not wait on ACKs
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.request("POST", self.prefix + "/v1/completions", body=payload, headers=headers)
            out.queued_ts = time.monotonic()
            resp = conn.getresponse()
            if resp.status != 200:
                text = resp.read(2000).decode("utf-8", "replace")
                return self._fail(out, f"HTTP {resp.status}: {_one_line(_error_message(text))}")
            return self._read_stream(resp, out, expected_tokens)
        except socket.timeout:
            return self._fail(out, f"timeout (no data for {self.timeout:g} s)")
        except (OSError, http.client.HTTPException) as exc:
            return self._fail(out, f"connection error ({_transport_reason(exc)})")
        except StreamError as exc:
            return self._fail(out, f"bad stream: {exc}")
        finally:
            conn.close()

    @staticmethod
    def _fail(out: CallOutcome, reason: str) -> CallOutcome:
        out.ok, out.reason, out.ended_ts = False, reason, time.monotonic()
        return out

    def _read_stream(self, resp, out: CallOutcome, expected: int) -> CallOutcome:
        ids, with_ids, done = [], True, False
        for t, obj in events(resp.readline):
            if obj is DONE:
                done = True
                break
            if obj.get("error"):
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                return self._fail(out, f"server error in stream: {_one_line(msg)}")
            out.server_request_id = out.server_request_id or obj.get("id")
            usage = obj.get("usage")
            if isinstance(usage, dict):
                if isinstance(usage.get("prompt_tokens"), int):
                    out.prompt_tokens = usage["prompt_tokens"]
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                    out.cached_tokens = details["cached_tokens"]
            n, chunk_ids = chunk_tokens(obj, out.tokens)
            if n <= 0:
                continue
            if out.first_token_ts is None:
                out.first_token_ts = t
            out.last_token_ts = t
            out.tokens += n
            if chunk_ids is None:
                with_ids = False
            else:
                ids.extend(chunk_ids)
        if not done:
            return self._fail(out, f"stream ended before [DONE] after {out.tokens} of {expected} tokens")
        if out.tokens != expected:
            return self._fail(out, f"length mismatch: received {out.tokens} tokens, expected {expected}")
        out.output_ids = ids if with_ids else None
        out.ok, out.ended_ts = True, time.monotonic()
        return out


def _transport_reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error_message(text: str) -> str:
    """The ``message`` of an OpenAI-style error body, else the body itself."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(obj.get("message"), str):
            return obj["message"]
    return text
