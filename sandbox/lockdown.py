"""The child's own lockdown: after it has loaded everything it will ever need, it gives up what
the operating system would still let it do.

`lock(config)` runs, in this order (each step needs what the previous one leaves, see
docs/sandbox.md §5):

1. **uid**: root drops to `config.uid` (nobody), with no supplementary groups, so the kernel's
   owner checks and RLIMIT_NPROC apply to it. A child that already runs unprivileged keeps its uid.
2. **parent death**: `PR_SET_PDEATHSIG` is set again (a uid change clears it; the host set it
   before exec), then the parent is checked to still be the host (the host may have died
   before the signal was armed).
3. **user namespace**: `unshare(CLONE_NEWUSER)`: the process is alone in a namespace with no uid
   mapped, so nothing it could gain inside means anything outside.
4. **capabilities**: the bounding set, ambient set and every capability set are emptied (the new
   namespace granted a full set inside it), read back with capget.
5. **Landlock**: a ruleset that handles every filesystem right the kernel knows, with no rule
   allowing any, plus TCP bind/connect (ABI 4) and signals and abstract sockets to outside the
   domain (ABI 6): no path can be opened, created, removed, executed or listed.
6. **seccomp**: the host's filter (`flowrt.syscall_filter`, classic BPF built with libseccomp from
   `policy.ALLOWED_SYSCALLS`), which kills the process on any other system call.

Every step is reported, applied or missing with the reason, in the `layers` dict that `lock`
returns; nothing is assumed. `config.without` names layers to treat as missing on purpose (the
host's FLOW_SANDBOX_WITHOUT), which is how the tests show what a kernel without a layer gives.

After `lock`, the child may do nothing but compute and talk on its pipe: no file, not even a
source line for a traceback (so `install_excepthook` prints tracebacks without them).
"""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_PDEATHSIG = 1
SIGKILL = 9  # Linux's number; `signal` is not imported for one constant (the child starts without it)
PR_GET_PDEATHSIG = 2
PR_GET_NO_NEW_PRIVS = 39
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_MAX = 63  # capability numbers the kernel might know; unknown ones fail with EINVAL

# Landlock: the same numbers on every architecture (the generic syscall table).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
# Filesystem rights by the ABI that introduced them: v1 has 13, v2 adds REFER, v3 TRUNCATE, v5
# IOCTL_DEV. A ruleset may only name rights its kernel knows.
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
LANDLOCK_NET_BIND_AND_CONNECT_TCP = 0b11  # ABI 4
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET_AND_SIGNAL = 0b11  # ABI 6

LAYERS = ("uid", "parent_death", "user_namespace", "capabilities", "landlock", "seccomp")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class Missing(Exception):
    """A layer this kernel, or this configuration, does not give."""


def _errno_text() -> str:
    number = ctypes.get_errno()
    return f"{os.strerror(number)} (errno {number})"


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def drop_uid(uid: int) -> str:
    if os.geteuid() != 0:
        return f"already unprivileged (uid {os.geteuid()})"
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as problem:
        raise Missing(f"cannot leave root: {problem}") from None
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise Missing(f"uid change did not take: {os.getresuid()}")
    return f"uid {uid}, gid {uid}, no supplementary groups"


def arm_parent_death(host_pid: int) -> str:
    if _prctl(PR_SET_PDEATHSIG, SIGKILL) != 0:
        raise Missing(f"prctl(PR_SET_PDEATHSIG) failed: {_errno_text()}")
    if os.getppid() != host_pid:  # the host died before the signal was armed: nobody is listening
        os._exit(1)
    got = ctypes.c_int(0)
    _libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(got), 0, 0, 0)
    if got.value != SIGKILL:
        raise Missing(f"PR_GET_PDEATHSIG reads {got.value}")
    # The parent is the host, or the child template (sandbox/template.py), which dies with it.
    return f"SIGKILL when its parent (pid {host_pid}) exits"


def enter_user_namespace() -> str:
    if _libc.unshare(CLONE_NEWUSER) != 0:
        raise Missing(f"unshare(CLONE_NEWUSER) failed: {_errno_text()}")
    return "a new user namespace with no uid mapped"


def drop_capabilities() -> str:
    for cap in range(CAP_MAX + 1):
        _prctl(PR_CAPBSET_DROP, cap)  # EINVAL past the kernel's last capability
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    empty = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), empty) != 0:
        raise Missing(f"capset failed: {_errno_text()}")
    now = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), now) != 0:
        raise Missing(f"capget failed: {_errno_text()}")
    held = [(d.effective, d.permitted, d.inheritable) for d in now]
    if any(any(sets) for sets in held):
        raise Missing(f"capabilities remain: {held}")
    return "none effective, permitted, inheritable, ambient or in the bounding set"


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; Missing if it has none (or it is disabled)."""
    version = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if version < 1:
        raise Missing(f"Landlock is not available: {_errno_text()}")
    return int(version)


def restrict_filesystem() -> str:
    abi = landlock_abi()
    attr = _RulesetAttr(_FS_RIGHTS_BY_ABI.get(abi, _FS_RIGHTS_BY_ABI[5]), 0, 0)
    size = 8  # the ruleset attribute grew with the ABI: pass only what this kernel reads
    also = []
    if abi >= 4:
        attr.handled_access_net = LANDLOCK_NET_BIND_AND_CONNECT_TCP
        size = 16
        also.append("TCP bind and connect")
    if abi >= 6:
        attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET_AND_SIGNAL
        size = 24
        also.append("signals and abstract sockets outside the domain")
    fd = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise Missing(f"landlock_create_ruleset failed: {_errno_text()}")
    try:
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise Missing(f"landlock_restrict_self failed: {_errno_text()}")
    finally:
        os.close(fd)
    return f"ABI {abi}: every filesystem access denied" + (f"; also {', '.join(also)}" if also else "")


def install_seccomp(program: bytes) -> str:
    if not program or len(program) % 8:
        raise Missing("the host sent no seccomp filter")
    if _prctl(PR_GET_NO_NEW_PRIVS) != 1:
        raise Missing("no_new_privs is not set, so a filter cannot be installed unprivileged")
    count = len(program) // 8
    instructions = (_SockFilter * count).from_buffer_copy(program)
    fprog = _SockFprog(count, instructions)
    if _libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                   ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise Missing(f"prctl(PR_SET_SECCOMP) failed: {_errno_text()}")
    return f"{count} BPF instructions: any system call outside the allowed list kills the process"


def lock(host_pid: int, uid: int, seccomp_program: bytes, without: frozenset = frozenset()) -> dict:
    """Apply every layer in order; return {layer: {"applied": bool, "detail": text}}. A layer
    that fails is reported and the next is still tried (each stands on its own)."""
    steps = (
        ("uid", lambda: drop_uid(uid)),
        ("parent_death", lambda: arm_parent_death(host_pid)),
        ("user_namespace", enter_user_namespace),
        ("capabilities", drop_capabilities),
        ("landlock", restrict_filesystem),
        ("seccomp", lambda: install_seccomp(seccomp_program)),
    )
    layers = {}
    for name, step in steps:
        if name in without:
            layers[name] = {"applied": False, "detail": "missing: left out on purpose (FLOW_SANDBOX_WITHOUT)"}
            continue
        try:
            layers[name] = {"applied": True, "detail": step()}
        except Missing as missing:
            layers[name] = {"applied": False, "detail": f"missing: {missing}"}
    return layers


def install_excepthook() -> None:
    """Print uncaught exceptions without their source lines: reading a line would open the
    source file, which the locked-down child may not (it would be killed with SIGSYS instead
    of reporting the exception)."""
    def hook(kind, value, tb) -> None:
        lines = ["Traceback (most recent call last; source lines not shown: the sandbox opens no files):\n"]
        while tb is not None:
            code = tb.tb_frame.f_code
            lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
            tb = tb.tb_next
        lines.append(f"{kind.__name__}: {value}\n")
        try:
            os.write(2, "".join(lines).encode("utf-8", "replace"))
        except OSError:
            pass

    sys.excepthook = hook


def parse_argv(argv: list[str]) -> dict | None:
    """`--lockdown HOST_PID UID HEX_FILTER WITHOUT` as the host passes it (`flowrt.sandbox_launch`), or None."""
    if len(argv) < 5 or argv[0] != "--lockdown":
        return None
    return {"host_pid": int(argv[1]), "uid": int(argv[2]), "seccomp_program": bytes.fromhex(argv[3]),
            "without": frozenset(w for w in argv[4].split(",") if w)}
