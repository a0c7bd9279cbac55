"""OS-level confinement of the candidate policy process (Linux; docs/security.md).

The candidate process (program_layer/search/candidate.py) calls these after it imported
everything it needs and before it receives any untrusted code:

- :func:`unshare_namespaces`: new mount, PID, network, IPC, UTS and cgroup namespaces (plus a
  user namespace when not root); the process then forks, and the child is PID 1 of the new
  PID namespace, so the kernel kills every process it starts when it dies.
- :func:`empty_root`: a private read-only empty tmpfs becomes the root (``pivot_root``, the
  old root detached): no file of the host is reachable, none can be written.
- :func:`drop_privileges`: as real root, ``setresuid``/``setresgid`` to nobody (all
  capabilities go); in a user namespace, the bounding, ambient, effective, permitted and
  inheritable capability sets are emptied.
- :func:`set_hard_limits`: soft = hard for CPU seconds, address space, processes, file size
  (0), open files and more; a process can lower a hard limit but never raise it again.
- :func:`landlock_deny_all`: a Landlock domain with no allowed file-system access (and, with
  ABI >= 4 / 6, no TCP and no signals or abstract sockets outside the domain).
- :func:`seccomp_filter`: a seccomp filter refusing exec, ptrace, prctl, setsid/setpgid,
  namespace and mount calls, sockets, signals to other processes and kernel-facing calls.
Only the standard library is used (ctypes for the system calls Python 3.11 lacks).
"""
from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
NS_FLAGS = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
_ANY_NS = NS_FLAGS | CLONE_NEWUSER | CLONE_NEWTIME

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 22, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

ARCH = platform.machine()
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]

# System call numbers the filter and pivot_root need (x86_64 and aarch64).
_NR = {
    "x86_64": dict(pivot_root=155, clone=56, clone3=435, kill=62, tkill=200, tgkill=234,
                   rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, deny=(
                       101, 310, 311, 424, 434, 438,      # ptrace, process_vm_*, pidfd_*
                       112, 109, 157,                     # setsid, setpgid, prctl
                       272, 308, 165, 166, 155, 161,      # unshare, setns, mount, umount2, pivot_root, chroot
                       428, 429, 430, 431, 432, 433, 442,  # new mount API
                       41, 321, 298, 323, 250, 248, 249,  # socket, bpf, perf, userfaultfd, keys
                       425, 426, 427, 246, 320, 175, 313, 176, 169,  # io_uring, kexec, modules, reboot
                       59, 322, 303, 304, 172, 173, 163, 167, 168, 179, 135)),  # exec*, handles, ...
    "aarch64": dict(pivot_root=41, clone=220, clone3=435, kill=129, tkill=130, tgkill=131,
                    rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, deny=(
                        117, 270, 271, 424, 434, 438,
                        157, 154, 167,
                        97, 268, 40, 39, 41, 51,
                        428, 429, 430, 431, 432, 433, 442,
                        198, 280, 241, 282, 219, 217, 218,
                        425, 426, 427, 104, 294, 105, 273, 106, 142,
                        221, 281, 264, 265, 89, 224, 225, 60, 92)),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> int:
    ret = _libc.prctl(option, a, b, c, d)
    if ret == -1:
        raise _fail(f"prctl({option})")
    return ret


def parent_death_signal(sig: int, expected_parent: int | None) -> None:
    """Get ``sig`` when the parent dies; exit at once if it already has."""
    prctl(PR_SET_PDEATHSIG, sig)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(70)


def not_dumpable() -> None:
    """No ptrace attach and no /proc/PID/mem by processes of the same user (a candidate on
    a platform without namespaces runs as that user)."""
    try:
        prctl(PR_SET_DUMPABLE, 0)
    except OSError:
        pass


def unshare_namespaces(user: bool) -> str:
    """New namespaces for this process (PID: for its children). With ``user`` the caller is
    mapped to root of a new user namespace (needed for the rest when not real root)."""
    flags = NS_FLAGS | (CLONE_NEWUSER if user else 0)
    uid, gid = os.getuid(), os.getgid()
    names = "user+pid+net+mount+ipc+uts+cgroup" if user else "pid+net+mount+ipc+uts+cgroup"
    if _libc.unshare(flags) != 0:
        if ctypes.get_errno() != 22:                 # EINVAL: a kernel without cgroup namespaces
            raise _fail(f"unshare({names})")
        names = names.replace("+cgroup", "")
        if _libc.unshare(flags & ~CLONE_NEWCGROUP) != 0:
            raise _fail(f"unshare({names})")
    if user:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"),
                           ("/proc/self/gid_map", f"0 {gid} 1")):
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
    return names


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        raise _fail(f"mount {target}")


def empty_root() -> str:
    """Make a read-only empty tmpfs this process's root. Needs a private mount namespace
    and CAP_SYS_ADMIN in it. Returns how: "pivot_root" (the old root detached: nothing of it
    stays reachable) or "chroot" where pivot_root is refused (e.g. an initramfs root)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    base = next((d for d in ("/tmp", "/mnt", "/opt", "/srv", "/media", "/var/tmp", "/dev")
                 if os.path.isdir(d) and not os.path.islink(d)), None)
    if base is None:
        raise OSError(2, "no directory to mount the empty root on")
    _mount("none", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,nr_inodes=16,mode=0755")
    os.chdir(base)
    os.mkdir(".old", 0o700)
    how = "pivot_root"
    if _libc.syscall(_NR.get(ARCH, {}).get("pivot_root", -1), b".", b".old") != 0:
        how = f"chroot ({_fail('pivot_root').strerror})"
        os.rmdir(".old")
        os.chroot(".")
    else:
        os.chroot(".")
        if _libc.umount2(b"/.old", MNT_DETACH) != 0:
            raise _fail("umount old root")
        os.rmdir("/.old")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return how


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    _drop_bounding()
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise _fail("capset")


def drop_privileges(real_root: bool, uid: int, gid: int) -> str:
    """Real root: become ``uid``/``gid`` (nobody) with no supplementary groups, which clears
    every capability. Otherwise (root of a user namespace, or an ordinary user): empty all
    capability sets. Both: no new privileges through exec."""
    if real_root:
        _drop_bounding()
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:
        _drop_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    return f"uid {uid}" if real_root else "no capabilities"


def _drop_bounding() -> None:
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break                                   # EINVAL past the last one (EPERM: none to drop)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def set_hard_limits(*, cpu_s: int, memory_bytes: int, nproc: int, nofile: int = 16) -> None:
    """soft = hard, never above the current hard limit."""
    wanted = [(resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory_bytes),
              (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_FSIZE, 0),
              (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0),
              (resource.RLIMIT_MEMLOCK, 0), (getattr(resource, "RLIMIT_MSGQUEUE", None), 0)]
    for res, value in wanted:
        if res is None:
            continue
        _, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(res, (value, value))


def landlock_deny_all() -> int:
    """Restrict this process (and anything it starts) to no file-system access at all; from
    Landlock ABI 4 no TCP bind/connect, from ABI 6 no signals and abstract Unix sockets
    outside its domain. Returns the ABI used, 0 where Landlock is unavailable."""
    abi = _libc.syscall(444, None, 0, 1)             # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return 0
    fs = (1 << 13) - 1                               # ABI 1: execute .. make_sym
    fs |= (1 << 13) if abi >= 2 else 0               # refer
    fs |= (1 << 14) if abi >= 3 else 0               # truncate
    fs |= (1 << 15) if abi >= 5 else 0               # ioctl_dev
    fields = [fs]
    if abi >= 4:
        fields.append(0b11)                          # bind_tcp, connect_tcp
    if abi >= 6:
        fields.append(0b11)                          # scope: abstract unix socket, signal
    attr = ctypes.create_string_buffer(struct.pack(f"{len(fields)}Q", *fields))
    fd = _libc.syscall(444, attr, len(fields) * 8, 0)
    if fd < 0:
        return 0
    try:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if _libc.syscall(446, int(fd), 0) != 0:       # landlock_restrict_self
            return 0
    finally:
        os.close(fd)
    return int(abi)


_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


def _assemble(program: list, labels: dict) -> bytes:
    out = []
    for i, (code, jt, jf, k) in enumerate(program):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("seccomp program too long for a jump")
        out.append(struct.pack("HBBI", code, jt, jf, k))
    return b"".join(out)


def seccomp_program(own_pid: int, arch: str = ARCH) -> bytes:
    nr = _NR[arch]
    prog, labels = [], {}
    label = lambda name: labels.__setitem__(name, len(prog))
    prog += [(_LD_ABS_W, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH[arch]), (_RET, 0, 0, _KILL),
             (_LD_ABS_W, 0, 0, 0)]
    if arch == "x86_64":
        prog.append((_JGE, "deny", 0, 0x40000000))   # x32 system calls
    prog += [(_JEQ, "deny", 0, n) for n in nr["deny"]]
    prog += [(_JEQ, "clone", 0, nr["clone"]), (_JEQ, "enosys", 0, nr["clone3"])]
    prog += [(_JEQ, "signal", 0, nr[n]) for n in ("kill", "tkill", "tgkill", "rt_sigqueueinfo",
                                                   "rt_tgsigqueueinfo")]
    prog.append((_RET, 0, 0, _ALLOW))
    label("clone")                                   # fork yes, new namespaces no
    prog += [(_LD_ABS_W, 0, 0, 16), (_JSET, "deny", 0, _ANY_NS), (_RET, 0, 0, _ALLOW)]
    label("signal")                                  # signals to itself only
    prog += [(_LD_ABS_W, 0, 0, 16), (_JEQ, "allow", "deny", own_pid & 0xFFFFFFFF)]
    label("allow")
    prog.append((_RET, 0, 0, _ALLOW))
    label("deny")
    prog.append((_RET, 0, 0, _ERRNO | 1))            # EPERM
    label("enosys")
    prog.append((_RET, 0, 0, _ERRNO | 38))           # ENOSYS: libc falls back to clone
    return _assemble(prog, labels)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_filter(own_pid: int) -> bool:
    """Install the filter (after no_new_privs); False on an architecture it does not know."""
    if ARCH not in _NR:
        return False
    code = seccomp_program(own_pid)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if _libc.prctl(PR_SET_SECCOMP, 2, ctypes.addressof(prog), 0, 0) != 0:
        raise _fail("seccomp")
    return True
