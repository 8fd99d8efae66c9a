"""The seccomp filter of the sandbox child, built on the host.

libseccomp (through `pyseccomp`) turns `policy.ALLOWED_SYSCALLS` into a classic BPF program for
this machine's architecture: allow those calls, kill the process on any other, and kill it too if
a call arrives through another architecture's entry (x32 or 32-bit calls on x86-64). The child
only installs the finished program (`sandbox.lockdown.install_seccomp`, one prctl), so it needs
neither libseccomp nor `ctypes.util.find_library`, which would start a subprocess.

Importing `pyseccomp` costs the host ~20 ms (it runs `ldconfig -p` to find the libraries), so the
program is kept in a file next to the child's bytecode caches, named by a digest of the allowed
list and the architecture: every later host reads it instead (as it reads a `.pyc`). Where
bytecode is not written (`-B`, PYTHONDONTWRITEBYTECODE, a read-only installation) the program is
built once per host process.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys

import flowdata
from flowdata.policy import ALLOWED_SYSCALLS

_PROGRAM: bytes | None = None
_PROBLEM: str | None = None
# The cache's format, in its name: bump when the way the program is built changes.
_FORMAT = "1"


def _cache_path(allowed: tuple[str, ...]) -> str:
    digest = hashlib.sha256("\n".join((_FORMAT, platform.machine(), *allowed)).encode()).hexdigest()[:16]
    return os.path.join(os.path.dirname(os.path.abspath(flowdata.__file__)), "__pycache__",
                        f"syscall-filter.{platform.machine()}.{digest}.bpf")


def build(allowed: tuple[str, ...] = ALLOWED_SYSCALLS) -> bytes:
    """The BPF program (8 bytes an instruction) that allows `allowed` and kills on anything else.
    Raises OSError or ImportError where libseccomp is not available."""
    import tempfile

    import pyseccomp

    syscall_filter = pyseccomp.SyscallFilter(pyseccomp.KILL_PROCESS)
    # A call made through another ABI (x32, int 0x80) would miss the allowed list's numbers.
    syscall_filter.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
    for name in allowed:
        try:
            syscall_filter.add_rule(pyseccomp.ALLOW, name)
        except (ValueError, OSError, RuntimeError):
            pass  # a call this architecture does not have (select on aarch64): nothing to allow
    with tempfile.TemporaryFile() as handle:
        syscall_filter.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def program() -> tuple[bytes, str | None]:
    """(the child's filter program, None), or (b"", why there is none) where it cannot be built:
    the child then reports its seccomp layer missing. Cached in memory and, where bytecode is
    written, on disk (see the module's docstring)."""
    global _PROGRAM, _PROBLEM
    if _PROGRAM is not None or _PROBLEM is not None:
        return _PROGRAM or b"", _PROBLEM
    if not sys.platform.startswith("linux"):
        _PROBLEM = f"seccomp is Linux's ({sys.platform} has none)"
        return b"", _PROBLEM
    path = _cache_path(ALLOWED_SYSCALLS)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if data and len(data) % 8 == 0:
            _PROGRAM = data
            return data, None
    except OSError:
        pass
    try:
        data = build()
    except (ImportError, OSError, RuntimeError, AttributeError) as problem:
        _PROBLEM = f"libseccomp is not available: {problem}"
        return b"", _PROBLEM
    _PROGRAM = data
    if not (sys.dont_write_bytecode or sys.pycache_prefix):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)  # whole or not at all: another host may be reading it
        except OSError:
            pass
    return data, None
