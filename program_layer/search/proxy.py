"""Trusted side of the candidate channel: start the confined candidate process, and stand in
for its policy inside the simulator (docs/security.md).

:class:`CandidateProcess` starts ``program_layer/search/candidate.py`` (which confines
itself before it sees any untrusted code), hands it the policy source and exchanges one
request/reply per decision with a per-decision deadline. :func:`make_proxy` builds the
policy object the planes call: a ``RetentionPolicy`` / ``SchedulingPolicy`` /
``RoutingPolicy`` named like the candidate's class, whose methods send a plain-data snapshot
(program_layer/search/channel.py) and return the candidate's decoded reply. The planes then
validate that reply exactly as they validate an in-process policy's, so results are the
same; anything the channel itself refuses (no reply in time, the process gone, a malformed
reply) is raised as an ``InvalidDecision`` and becomes the usual one-line ``PolicyError``
naming policy, program, call and simulated time.
"""
from __future__ import annotations

import json
import math
import os
import pwd
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

from program_layer.policies.base import RetentionPolicy, RoutingPolicy, SchedulingPolicy
from program_layer.policies.checks import InvalidDecision

from . import channel
from .candidate import BOOT
from .sandbox import DEFAULT_DECISION_TIMEOUT_S, repo_root

LOAD_TIMEOUT_S = 10.0          # executing the policy file and constructing the class
START_TIMEOUT_S = 30.0         # interpreter start, imports and confinement
ISOLATION_MODES = ("auto", "namespaces", "fallback")


class ChannelFailure(InvalidDecision):
    """The candidate gave no usable answer; the candidate process is killed."""


class DecisionTimeout(ChannelFailure):
    """No reply within the per-decision deadline."""


class CandidateRaised(InvalidDecision):
    """The candidate's method raised; the message is what the plane would have said."""


class CandidateStartError(Exception):
    """The candidate process could not be started or confined (names why)."""


class CandidateLoadError(Exception):
    """The policy file failed to load in the candidate process (detail, traceback)."""

    def __init__(self, detail: str, traceback: str = ""):
        super().__init__(detail)
        self.detail, self.traceback = detail, traceback


# A run without an address-space limit (memory_mb None) still limits its candidate process.
UNLIMITED_RUN_CANDIDATE_MB = 4096


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


class CandidateProcess:
    """One confined candidate process and its channel. ``start()`` returns at once;
    ``wait_ready()`` waits for the confinement report, ``load()`` sends the policy."""

    def __init__(self, *, memory_mb: Optional[int], cpu_s: float,
                 decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S,
                 isolation: str = "auto", max_processes: int = 0):
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATION_MODES)}")
        self.memory_mb = int(memory_mb or UNLIMITED_RUN_CANDIDATE_MB)
        self.cpu_s = max(1, int(math.ceil(cpu_s)))
        self.decision_timeout_s = float(decision_timeout_s)
        self.mode = isolation
        self.max_processes = int(max_processes)
        self.isolation: Optional[str] = None          # "namespaces" | "fallback"
        self.detail = ""
        self.pid1: Optional[int] = None               # PID 1 of the namespace, as seen here
        self.proc: Optional[subprocess.Popen] = None
        self.decisions = 0
        self.channel_s = 0.0
        self.last_traceback = ""
        self.dead_reason: Optional[str] = None
        self._buf = bytearray()
        self._log = None

    # ----- lifecycle ----------------------------------------------------------------------
    def start(self) -> "CandidateProcess":
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        opts = {"in": req_r, "out": rep_w, "mode": self.mode, "memory_mb": self.memory_mb,
                "cpu_s": self.cpu_s, "nproc": self.max_processes, "nobody": list(_nobody())}
        env = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        self._log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-B", "-c", BOOT, repo_root(), json.dumps(opts)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
                pass_fds=(req_r, rep_w), env=env, cwd="/", start_new_session=True)
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._out, self._in = req_w, rep_r
        os.set_blocking(self._out, False)
        os.set_blocking(self._in, False)
        self._poll_in = select.poll()
        self._poll_in.register(self._in, select.POLLIN)
        self._poll_out = select.poll()
        self._poll_out.register(self._out, select.POLLOUT)
        return self

    def wait_ready(self) -> str:
        """Wait for the confinement report; returns the isolation ("namespaces" or
        "fallback"). Raises CandidateStartError when the process died or was refused."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                msg = channel.unframe(self._read(deadline))
            except ChannelFailure as exc:
                self.kill()
                raise CandidateStartError(f"candidate process did not start: {exc}{self._log_tail()}") from None
            except (ValueError, channel.ProtocolError) as exc:
                self.kill()
                raise CandidateStartError(f"candidate process did not start: {exc}") from None
            if type(msg) is list and len(msg) == 2 and msg[0] == "w" and type(msg[1]) is int:
                self.pid1 = msg[1]
                continue
            if type(msg) is list and len(msg) == 2 and msg[0] == "n" and type(msg[1]) is str:
                self.kill()
                raise CandidateStartError(f"candidate process not confined: {msg[1]}")
            if type(msg) is list and len(msg) == 2 and msg[0] == "ready" and type(msg[1]) is dict:
                self.isolation = msg[1].get("isolation")
                self.detail = str(msg[1].get("detail", ""))
                if self.isolation not in ("namespaces", "fallback"):
                    self.kill()
                    raise CandidateStartError("candidate process sent a bad report")
                return self.isolation
            self.kill()
            raise CandidateStartError("candidate process sent an unexpected message")

    def load(self, source: str, filename: str, class_name: Optional[str], axis: Optional[str],
             prefer: Optional[str]) -> dict:
        """Execute the policy file in the candidate; returns the checked class info."""
        deadline = time.monotonic() + max(LOAD_TIMEOUT_S, self.decision_timeout_s)
        try:
            self._write(channel.request_frame(["load", source, filename, class_name, axis, prefer]), deadline)
            reply = channel.decode_reply(self._read(deadline))
        except DecisionTimeout:
            self.kill()
            raise CandidateLoadError(f"timeout: loading the policy took longer than "
                                     f"{max(LOAD_TIMEOUT_S, self.decision_timeout_s):g} s") from None
        except ChannelFailure as exc:
            self.kill()
            raise CandidateLoadError(f"the candidate process failed while loading the policy: {exc}") from None
        except channel.ProtocolError as exc:
            self.kill()
            raise CandidateLoadError(f"invalid reply from the candidate process: {exc}") from None
        if reply[0] == "f":
            raise CandidateLoadError(reply[1], reply[2])
        if reply[0] != "i":
            self.kill()
            raise CandidateLoadError("invalid reply from the candidate process while loading")
        try:
            info = channel.check_info(reply[1], axis)
        except channel.ProtocolError as exc:
            self.kill()
            raise CandidateLoadError(f"invalid policy class: {exc}") from None
        init = reply[1].get("init_error")
        if init is not None:
            if not (type(init) is list and len(init) == 2 and all(type(x) is str for x in init)):
                raise CandidateLoadError("invalid reply from the candidate process while loading")
            info["init_error"] = (init[0], channel.printable(" ".join(init[1].split())[:channel.MAX_TEXT]))
        return info

    def request(self, data: bytes):
        """Send one request and return the decoded reply (kind, payload...)."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.decision_timeout_s
        try:
            self._write(data, deadline)
            reply = channel.decode_reply(self._read(deadline))
            if self._buf:
                raise channel.ProtocolError("unsolicited data after the reply")
        except DecisionTimeout:
            self.kill()
            raise DecisionTimeout(f"no reply within the per-decision deadline of "
                                  f"{self.decision_timeout_s:g} s (candidate process killed)") from None
        except channel.ProtocolError as exc:
            self.kill()
            raise ChannelFailure(f"invalid reply from the candidate process ({exc}); "
                                 "candidate process killed") from None
        finally:
            self.decisions += 1
            self.channel_s += time.perf_counter() - started
        if reply[0] not in ("r", "x"):
            self.kill()
            raise ChannelFailure("invalid reply from the candidate process; candidate process killed")
        return reply

    def close(self) -> None:
        """Ask the candidate to exit, then make sure that it and everything in its
        namespace are gone."""
        if self.proc is not None and self.proc.poll() is None and self.dead_reason is None:
            try:
                self._write(channel.request_frame(["q"]), time.monotonic() + 0.2)
            except ChannelFailure:
                pass
            try:
                self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        for fd in ("_out", "_in"):
            if getattr(self, fd, None) is not None:
                try:
                    os.close(getattr(self, fd))
                except OSError:
                    pass
                setattr(self, fd, None)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL the namespace's PID 1 (the kernel then kills all of its processes) and the
        process group of the started process; reap it."""
        if self.pid1:
            try:
                os.kill(self.pid1, signal.SIGKILL)
            except OSError:
                pass
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if self.dead_reason is None:
                self.dead_reason = _status_text(self.proc.returncode)

    # ----- framing with deadlines ---------------------------------------------------------
    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._out, view):]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError):
                raise ChannelFailure(self._gone()) from None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._poll_out.poll(remaining * 1000):
                raise DecisionTimeout("deadline")

    def _read(self, deadline: float) -> bytes:
        buf = self._buf
        while True:
            if len(buf) >= 4:
                (n,) = channel.HEADER.unpack_from(buf)
                if n > channel.MAX_REPLY_BYTES:
                    raise channel.ProtocolError(f"reply of {n} bytes")
                if len(buf) >= 4 + n:
                    data = bytes(buf[4:4 + n])
                    del buf[:4 + n]
                    return data
            try:
                chunk = os.read(self._in, 1 << 16)
            except BlockingIOError:            # (busy-waiting here measured no faster)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._poll_in.poll(max(remaining * 1000, 0)):
                    raise DecisionTimeout("deadline")
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise ChannelFailure(self._gone())
            buf += chunk

    def _gone(self) -> str:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self.dead_reason = _status_text(self.proc.returncode if self.proc else None)
        return f"the candidate process ended without replying ({self.dead_reason})"

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0)
            lines = self._log.read()[-2000:].decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""


def _status_text(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0 or code > 128:
        sig = -code if code < 0 else code - 128
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        hint = " (CPU-time or memory limit, or killed)" if name in ("SIGKILL", "SIGXCPU") else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


# ----- proxy policies -------------------------------------------------------------------

class _Proxy:
    """Shared by the three proxy policy classes."""

    def __init__(self, process: CandidateProcess):
        self._process = process
        self._enc = channel.SnapshotEncoder()

    def _call(self, data: bytes):
        reply = self._process.request(data)
        if reply[0] == "r":
            return reply[1]
        self._process.last_traceback = reply[2]
        raise CandidateRaised(reply[1])


class RetentionProxy(_Proxy, RetentionPolicy):
    def on_turn_complete(self, pcb, request_id, now):
        return self._call(self._enc.complete(pcb, request_id, now, self.signals))

    def on_turn_arrival(self, pcb, now):
        return self._call(self._enc.arrival(pcb, now, self.signals))


def _eviction_key(self, entry, now):
    return self._call(self._enc.eviction_key(entry, now))


class SchedulingProxy(_Proxy, SchedulingPolicy):
    def priority(self, pcb, now):
        return self._call(self._enc.priority(pcb, now, self.signals))


class RoutingProxy(_Proxy, RoutingPolicy):
    def select(self, pcb, inflight, now):
        return self._call(self._enc.select(pcb, inflight, now))


_PROXIES = {"retention": RetentionProxy, "scheduling": SchedulingProxy, "routing": RoutingProxy}


def make_proxy(process: CandidateProcess, info: dict):
    """The policy object for the simulator: named like the candidate's class (so messages
    read the same), with its engine_args and, when it has one, eviction_key."""
    attrs = {"engine_args": dict(info["engine_args"]), "__module__": "candidate"}
    if info["axis"] == "retention" and info["eviction_key"]:
        attrs["eviction_key"] = _eviction_key
    cls = type(info["class_name"], (_PROXIES[info["axis"]],), attrs)
    return cls(process)
