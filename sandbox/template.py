"""The child template, `python -m sandbox.template`: one process that has imported what a sandbox
child imports and forks a child per run, so that a host driving run after run does not pay an
interpreter's start and imports (~75 ms of CPU a child on this project's machines) each time.

The host starts it like a child (`flowrt.child_template`: the same interpreter, flags, environment
and parent-death signal) with a `SOCK_SEQPACKET` socket as fd 0, and asks on it for children. The
template never runs a program, never receives a value, and never locks down: it only forks. Each
child it forks is what `python -m sandbox.child` would have been, made in the same order the host
makes one (flowrt/sandbox_launch.py), before it reads anything of its run:

1. its own session and process group (`setsid`), so the host's group kill takes it;
2. `PR_SET_PDEATHSIG` (SIGKILL), checked: it dies with the template, which dies with the host;
3. the three pipes the host made for it as fds 0, 1 and 2, and no other descriptor;
4. its own, fresh working directory (the host made it);
5. a new, empty network namespace of its own (not the template's: runs share none);
6. `PR_SET_NO_NEW_PRIVS` and the run's resource limits (its CPU clock starts at zero at the fork);
7. then `sandbox.child.main()` with the command line `-m sandbox.child` would have had; it locks
   itself down once the program is loaded, exactly as a started child does.

The protocol, one JSON object per datagram (the host's side is `flowrt.child_template`):

- host: `{"op": "fork", "id", "workdir", "argv", "rlimits": [[which, soft, hard]], "network",
  "parent_death"}` with the child's three pipe ends attached (SCM_RIGHTS);
- template: `{"op": "forked", "id", "pid", "network": bool}` once the child has done 1-6, or
  `{"op": "failed", "id", "error"}`;
- template: `{"op": "exited", "pid", "returncode"}` when a child ends (Popen's convention: minus
  the signal's number if a signal ended it). The child stays a zombie, so its pid and group id
  cannot be reused, until the host answers `{"op": "release", "pid"}` (it has killed the group).

The host closing its end (it exited, or it is done with the template) ends the template, after a
SIGKILL to every child's group it still has.
"""

from __future__ import annotations

import gc
import os
import resource
import select
import signal
import socket
import sys

import orjson

# Everything a child imports before its lockdown, imported once here (tests/test_child_layout.py).
import sandbox.child as child_main
from sandbox import lockdown
from sandbox.intrinsics import INTRINSICS  # noqa: F401 - preloaded for every child
from sandbox.lanes import serve_lanes  # noqa: F401 - preloaded for every child
from sandbox.loader import load  # noqa: F401 - preloaded for every child
from sandbox.testing import run_tests  # noqa: F401 - preloaded for every child
import json  # noqa: F401,E401 - the channel imports these lazily (sandbox.child.lock_down)
import math  # noqa: F401

CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
MAX_MESSAGE = 1 << 20
#: the descriptor a new child tells the template it is ready on (then closes)
READY_FD = 3


def main() -> None:
    host = socket.socket(fileno=0)
    gc.freeze()  # what is imported stays put: the children's copies of its pages stay shared
    template_pid = os.getpid()
    poller = select.poll()
    poller.register(host.fileno(), select.POLLIN)
    starting: dict[int, tuple[int, object]] = {}  # ready pipe -> (pid, request id)
    watching: dict[int, int] = {}  # pidfd -> pid, until it exits
    exited: set[int] = set()  # zombies reported, not yet released
    while True:
        for fd, _events in poller.poll():
            if fd == host.fileno():
                try:
                    data, fds, _flags, _address = socket.recv_fds(host, MAX_MESSAGE, 3)
                except OSError:
                    data, fds = b"", []
                if not data:
                    _end(watching, exited)
                message = orjson.loads(data)
                if message["op"] == "fork":
                    _fork(host, message, fds, template_pid, poller, starting, watching)
                elif message["op"] == "release":
                    pid = message["pid"]
                    if pid in exited:
                        exited.discard(pid)
                        os.waitpid(pid, 0)
            elif fd in starting:
                pid, request = starting.pop(fd)
                poller.unregister(fd)
                byte = _read_byte(fd)
                os.close(fd)
                if byte:
                    _send(host, {"op": "forked", "id": request, "pid": pid, "network": byte == b"1"})
                else:
                    _send(host, {"op": "failed", "id": request,
                                 "error": "the forked child ended before it was ready"})
            elif fd in watching:
                pid = watching.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                exited.add(pid)
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                _send(host, {"op": "exited", "pid": pid, "returncode": code})


def _send(host: socket.socket, message: dict) -> None:
    try:
        host.send(orjson.dumps(message))
    except OSError:
        pass  # the host is gone: its end's EOF ends the loop next


def _read_byte(fd: int) -> bytes:
    try:
        return os.read(fd, 1)
    except OSError:
        return b""


def _end(watching: dict[int, int], exited: set[int]) -> None:
    for pid in list(watching.values()) + list(exited):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


def _fork(host, message: dict, fds: list[int], template_pid: int, poller, starting, watching) -> None:
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        _send(host, {"op": "failed", "id": message.get("id"), "error": f"{len(fds)} descriptors, not 3"})
        return
    ready_read, ready_write = os.pipe()
    try:
        pid = os.fork()
    except OSError as problem:
        for fd in (*fds, ready_read, ready_write):
            os.close(fd)
        _send(host, {"op": "failed", "id": message["id"], "error": f"fork: {problem}"})
        return
    if pid == 0:
        _become_child(message, fds, ready_write, template_pid)  # never returns
    for fd in (*fds, ready_write):
        os.close(fd)
    starting[ready_read] = (pid, message["id"])
    poller.register(ready_read, select.POLLIN | select.POLLHUP)
    pidfd = os.pidfd_open(pid)
    watching[pidfd] = pid
    poller.register(pidfd, select.POLLIN)


def _become_child(message: dict, fds: list[int], ready_write: int, template_pid: int) -> None:
    """In the forked child: steps 1-6 of the docstring, then the child's own main. Never returns."""
    code = 1
    try:
        os.setsid()
        if message["parent_death"]:
            try:
                lockdown.arm_parent_death(template_pid)  # exits if the template is gone already
            except lockdown.Missing:
                pass  # as a started child's preexec_fn: the lockdown arms it again and reports it
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.dup2(ready_write, READY_FD)
        os.closerange(READY_FD + 1, os.sysconf("SC_OPEN_MAX"))
        os.chdir(message["workdir"])
        network = False
        if message["network"]:
            network = lockdown._libc.unshare(CLONE_NEWNET) == 0
        lockdown._libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        for which, soft, hard in message["rlimits"]:
            resource.setrlimit(which, (soft, hard))
        os.write(READY_FD, b"1" if network else b"0")
        os.close(READY_FD)
        sys.argv = [child_main.__file__, *message["argv"]]
        code = _run_child()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)


def _run_child() -> int:
    """`sandbox.child.main()` with the exit status the interpreter would have given it."""
    try:
        child_main.main()
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        os.write(2, f"{stop.code}\n".encode("utf-8", "replace"))
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


if __name__ == "__main__":
    main()
