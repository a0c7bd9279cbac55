"""The untrusted side: one candidate policy in its own confined process (docs/security.md).

Started by the trusted worker (program_layer/search/proxy.py) as a fresh interpreter with
an environment of its own (PYTHONHASHSEED=0, as the worker) and only the two channel pipes:

    python -B -c BOOT REPO_ROOT OPTIONS_JSON

In this order, before it has seen any untrusted code, it

1. imports everything a policy may use (program_layer.policies, the PCB view, the modules
   the static check allows) — nothing can be imported later;
2. closes every file descriptor but the channel (stdin/stdout become /dev/null);
3. with namespaces: unshares mount, PID, network, IPC, UTS, cgroup (and user, when not
   root) namespaces and forks; this first process stays outside as a waiter that does
   nothing but wait (and kill the child if the worker dies), the child is PID 1 of the new
   PID namespace and makes an empty read-only tmpfs its root (pivot_root);
   without namespaces (fallback): chroot into an empty, deleted directory when root;
4. drops privileges (nobody when root; no capabilities otherwise), sets hard resource
   limits (CPU, address space, processes, file size 0, open files), installs a Landlock
   domain without file-system access and a seccomp filter (no exec, ptrace, prctl, setsid,
   sockets, namespaces, mounts, signals to others);
5. reports how it is confined ("ready"), then receives the policy source, executes it and
   answers one request at a time (program_layer/search/channel.py).
"""
from __future__ import annotations

import json
import os
import signal
import sys

BOOT = ("import sys; sys.path[:1] = [sys.argv[1]]; "
        "from program_layer.search.candidate import main; main(sys.argv[2:])")

_child_pid = None       # the waiter's child (PID 1 of the namespace)


def _on_term(signum, frame):          # the waiter: the worker died, take the namespace down
    if _child_pid:
        try:
            os.kill(_child_pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def _preimport() -> None:
    """Everything a policy may import, loaded while the file system is still there."""
    import importlib
    import linecache  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401
    import hashlib  # noqa: F401
    import program_layer.pcb  # noqa: F401
    import program_layer.policies  # noqa: F401
    import program_layer.policies.checks  # noqa: F401
    import program_layer.retention  # noqa: F401
    from program_layer.search import axes, channel, lockdown  # noqa: F401
    from program_layer.search.safety import ALLOWED_MODULES
    for name in sorted(ALLOWED_MODULES):
        importlib.import_module(name)


def _close_other_fds(keep: set) -> None:
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fork_pid1(fd_in: int, fd_out: int) -> None:
    """Fork after unshare: return in the child (PID 1 of the new PID namespace); the parent
    stays a waiter that reports the child's pid to the worker and mirrors its exit."""
    global _child_pid
    from program_layer.search import channel, lockdown
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        _child_pid = pid
        os.close(r)
        _write_all(fd_out, channel.frame(["w", pid]))
        os.write(w, b"g")
        for fd in (fd_in, fd_out, w):
            os.close(fd)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    os.close(w)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    lockdown.parent_death_signal(signal.SIGKILL, None)
    if os.read(r, 1) != b"g":          # the waiter died before handing over
        os._exit(70)
    os.close(r)


def main(argv: list) -> None:
    opts = json.loads(argv[0])
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _on_term)
    from program_layer.search import lockdown
    lockdown.parent_death_signal(signal.SIGTERM, parent)
    _preimport()
    from program_layer.search import channel
    fd_in, fd_out = opts["in"], opts["out"]
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _close_other_fds({0, 1, 2, fd_in, fd_out, null})

    mode, real_root = opts["mode"], os.geteuid() == 0
    isolation, notes = "fallback", []
    if mode != "fallback":
        try:
            notes.append("namespaces " + lockdown.unshare_namespaces(user=not real_root))
            isolation = "namespaces"
        except OSError as exc:
            if mode == "namespaces":
                _write_all(fd_out, channel.frame(["n", f"namespaces unavailable: {exc.strerror}"]))
                os._exit(3)
            notes.append(f"no namespaces ({exc.strerror})")
    try:
        if isolation == "namespaces":
            _fork_pid1(fd_in, fd_out)
            try:
                notes.append(f"PID 1, empty read-only root ({lockdown.empty_root()})")
            except OSError as exc:       # e.g. a container that forbids mounts in namespaces
                if mode == "namespaces":
                    raise
                isolation = "fallback"
                notes.append(f"PID 1, but no private root ({exc.strerror or exc})")
        else:
            lockdown.parent_death_signal(signal.SIGKILL, parent)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if isolation == "fallback":
            if real_root:                # chroot into an empty directory that no longer exists:
                import tempfile          # nothing can be created in it, nothing is left behind
                jail = tempfile.mkdtemp(prefix="agentservesim-jail-")
                os.chdir(jail)
                os.rmdir(jail)
                os.chroot(".")
                notes.append("chroot to an empty, deleted directory")
            os.chdir("/")
        nproc = int(opts.get("nproc") or 0) if isolation == "namespaces" else 0
        uid, gid = opts["nobody"]                   # looked up by the trusted side
        notes.append(lockdown.drop_privileges(real_root, uid, gid))
        lockdown.set_hard_limits(cpu_s=max(1, int(opts["cpu_s"])),
                                 memory_bytes=int(opts["memory_mb"]) << 20, nproc=nproc)
        notes.append(f"hard limits (cpu {int(opts['cpu_s'])} s, memory {int(opts['memory_mb'])} MiB, "
                     f"{nproc} processes, file size 0)")
        abi = lockdown.landlock_deny_all()
        notes.append(f"landlock ABI {abi}" if abi else "no landlock")
        notes.append("seccomp" if lockdown.seccomp_filter(os.getpid()) else "no seccomp")
    except Exception as exc:  # noqa: BLE001 - never run the policy half-confined
        _write_all(fd_out, channel.frame(["n", f"confinement failed: {type(exc).__name__}: {exc}"]))
        os._exit(3)
    os.dup2(null, 2)
    os.close(null)
    sys.argv = ["candidate"]
    os.environ.clear()
    _write_all(fd_out, channel.frame(["ready", {"isolation": isolation, "detail": "; ".join(notes)}]))
    _Server(fd_in, fd_out).serve()


_SIMPLE_REPLIES = {name: f'["r","{name}"]'.encode() for name in ("release", "evict", "none", "protect")}


def _fast_reply(raw):
    """The reply bytes for the common shapes (a name, an int, a finite float, ("protect",
    until[, value])) without the JSON encoder; None for anything else."""
    t = type(raw)
    if t is str:
        body = _SIMPLE_REPLIES.get(raw)
    elif t is int:
        body = b'["r",%d]' % raw
    elif t is float:
        body = f'["r",{raw!r}]'.encode() if raw - raw == 0.0 else None
    elif t is tuple and 2 <= len(raw) <= 3 and type(raw[0]) is str and raw[0] == "protect":
        parts = []
        for v in raw[1:]:
            tv = type(v)
            if tv is float and v - v == 0.0:
                parts.append(repr(v))
            elif tv is int:
                parts.append(str(v))
            elif v is None:
                parts.append("null")
            else:
                return None
        body = ('["r",["protect",' + ",".join(parts) + "]]").encode()
    else:
        body = None
    return None if body is None else len(body).to_bytes(4, "big") + body


def _view_maker():
    """PCBView(...) from a snapshot list, without building a keyword dict per call."""
    from program_layer.pcb import PCBView
    from program_layer.search.channel import VIEW_INIT_NAMES
    args = ", ".join(f"{name}=v[{i}]" for i, name in enumerate(VIEW_INIT_NAMES))
    namespace = {"PCBView": PCBView}
    exec(f"def make(v, gaps, own):\n    return PCBView({args}, gaps=gaps, own_gaps=own)\n", namespace)
    return namespace["make"]


class _Server:
    """Answers the trusted side's requests, one at a time."""

    def __init__(self, fd_in: int, fd_out: int):
        from program_layer.policies.base import InflightLoad, Signals
        from program_layer.policies.checks import describe_exception
        from program_layer.retention import EntryView
        from program_layer.search import channel
        self.fd_in, self.fd_out, self.buf = fd_in, fd_out, bytearray()
        self.policy = None
        from program_layer.pcb import ToolGapLog
        self.gap_log_type = ToolGapLog
        self.gaps, self.own = channel.GapReplica(ToolGapLog), {}
        self.channel = channel
        self.make_view = _view_maker()
        self.Signals, self.InflightLoad, self.EntryView = Signals, InflightLoad, EntryView
        self.describe_exception = describe_exception
        self._oom = channel.frame(["x", "MemoryError: ", ""])

    def read(self):
        buf, unframe = self.buf, self.channel.request_unframe
        while True:
            if len(buf) >= 4:
                n = int.from_bytes(buf[:4], "big")
                if len(buf) >= 4 + n:
                    data = bytes(buf[4:4 + n])
                    del buf[:4 + n]
                    return unframe(data)
                want = max(1 << 16, 4 + n - len(buf))
            else:
                want = 1 << 16
            chunk = os.read(self.fd_in, want)
            if not chunk:
                os._exit(0)
            buf += chunk

    def serve(self) -> None:
        frame = self.channel.frame
        while True:
            msg = self.read()
            tag = msg[0]
            if tag == "q":
                os._exit(0)
            try:
                reply = self.load(*msg[1:]) if tag == "load" else self.call(msg)
            except MemoryError:
                reply = self._oom
            except BaseException as exc:  # noqa: BLE001 - never leave the trusted side waiting
                try:
                    reply = frame(["x", f"{type(exc).__name__} while answering", ""])
                except BaseException:  # noqa: BLE001
                    reply = self._oom
            _write_all(self.fd_out, reply)

    def load(self, source: str, filename: str, class_name, axis, prefer) -> bytes:
        import hashlib
        import linecache
        import traceback
        import types
        from program_layer.policies.loader import construction_failure
        from program_layer.search import axes
        from program_layer.search.channel import MAX_TEXT, describe_error, frame
        name = "_agentservesim_policy_" + hashlib.sha1(filename.encode()).hexdigest()[:12]
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec"), module.__dict__)
            cls = axes.find_policy_class(module, class_name, axis, prefer=prefer)
        except BaseException as exc:  # noqa: BLE001 - reported, the candidate scores 0
            return frame(["f", describe_error(exc), traceback.format_exc(limit=-8)[-MAX_TEXT:]])
        got = axis or axes.axis_of_class(cls)
        info = {"class_name": cls.__name__, "axis": got, "engine_args": {}, "eviction_key": False}
        try:
            self.policy = cls()
        except BaseException as exc:  # noqa: BLE001 - reported, the trusted side raises it
            info["init_error"] = list(construction_failure(exc))
        if self.policy is not None:
            info["eviction_key"] = callable(getattr(self.policy, "eviction_key", None))
            if got == "scheduling":
                try:
                    info["engine_args"] = dict(getattr(self.policy, "engine_args", {}) or {})
                    frame(info["engine_args"])
                except BaseException:  # noqa: BLE001 - the trusted side rejects it
                    info["engine_args"] = None
        return frame(["i", info])

    def view(self, v, gap_delta):
        if gap_delta:
            self.gaps.apply(gap_delta)
        own = self.own.get(v[0])
        if own is None:
            own = self.own[v[0]] = self.channel.GapReplica(self.gap_log_type)
        if v[-1]:
            own.apply(v[-1])
        return self.make_view(v, self.gaps.snapshot, own.snapshot)

    def call(self, msg) -> bytes:
        policy, tag = self.policy, msg[0]
        try:
            if tag == "c":
                _, now, request_id, v, sig, gaps = msg
                view = self.view(v, gaps)
                policy.signals = self.Signals(*sig)
                raw = policy.on_turn_complete(view, request_id, now)
            elif tag == "a":
                _, now, v, sig, gaps = msg
                view = self.view(v, gaps)
                policy.signals = self.Signals(*sig)
                raw = policy.on_turn_arrival(view, now)
            elif tag == "p":
                _, now, v, sig, gaps = msg
                view = self.view(v, gaps)
                policy.signals = self.Signals(*sig)
                raw = policy.priority(view, now)
            elif tag == "s":
                _, now, v, loads, gaps = msg
                inflight = tuple(self.InflightLoad(*x) for x in loads)
                raw = policy.select(self.view(v, gaps), inflight, now)
            elif tag == "e":
                _, now, e, v, gaps = msg
                entry = object.__new__(self.EntryView)
                for key, value in zip(self.channel.ENTRY_FIELDS, e):
                    object.__setattr__(entry, key, value)
                object.__setattr__(entry, "program", None if v is None else self.view(v, gaps))
                raw = policy.eviction_key(entry, now)
            else:
                return self.channel.frame(["x", f"unknown request {tag!r}", ""])
            fast = _fast_reply(raw)
            return fast if fast is not None else self.channel.frame(["r", self.channel.encode_value(raw)])
        except MemoryError:
            return self._oom
        except BaseException as exc:  # noqa: BLE001 - the plane turns it into a PolicyError
            import traceback
            try:
                detail = self.describe_exception(exc)
            except BaseException:  # noqa: BLE001
                detail = f"{type(exc).__name__}: <unprintable>"
            return self.channel.frame(["x", detail[:self.channel.MAX_TEXT],
                                       traceback.format_exc(limit=-8)[-self.channel.MAX_TEXT:]])
