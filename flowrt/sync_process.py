"""A process of the host's own that makes its runs' histories durable for a run hub.

A run hub drives many runs from one thread (flowrt/run_hub.py), and a run's `fdatasync` blocks,
so each went to a helper thread of the hub's. With fsync and many runs that handoff cost more
than the sync: a helper thread takes the interpreter's lock three times a sync (after its wake,
after the sync, to hand the result back) while the hub's thread holds it for the other runs' work,
and a host driving 20 runs spent 180-270 µs of its own CPU a call, 7.7 context switches, where
the disk takes 20 syncs at once at ~41 µs each (docs/impl.md, session 15).

Here the syncs are made by small processes started once: the hub sends each sync as a message
over a socket, with the run's history descriptor attached (`SCM_RIGHTS`: the same open file, so
`fdatasync` there makes exactly that file's written data durable, as it would here); each of
`WORKERS` single-threaded processes takes the next message off the socket, syncs, and answers
with the errno, so syncs of several runs overlap. The hub polls the socket with the runs' pipes
and resumes each run as its answer comes. If the processes are gone (one killed ends them all;
failed to start), the syncs they had and every later one are made by the hub's helper threads as
before: nothing is lost, a sync is only ever reported done once a process has said so.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from typing import Callable

#: a request: its number; an answer: its number and the errno of the sync (0: durable)
_REQUEST = struct.Struct("=Q")
_ANSWER = struct.Struct("=Qi")

#: How many processes sync at once (each single-threaded: threads of one process took the
#: interpreter's lock around every sync, ~80 µs of CPU a sync against ~60 for processes).
WORKERS = 8

#: The helper's own program: it imports nothing of Flow and nothing but the standard library. Its
#: first process forks the workers and watches them: when one ends (the host closed the socket,
#: or it was killed), it ends them all, so that the host sees the socket's end and makes every
#: sync still out another way (a sync taken by a worker that died is never answered otherwise).
#: A worker dies with the first process (`PR_SET_PDEATHSIG`).
_HELPER = r"""
import ctypes, os, signal, socket, struct, sys
sock = socket.socket(fileno=int(sys.argv[1]))
request, answer = struct.Struct("=Q"), struct.Struct("=Qi")
leader = os.getpid()
for _ in range(int(sys.argv[2])):
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != leader:
            os._exit(0)
        break
else:
    sock.close()  # (the workers hold it: the host sees its end once they are gone)
    try:
        os.wait()
    finally:
        os.killpg(0, signal.SIGKILL)
while True:
    try:
        data, fds, _, _ = socket.recv_fds(sock, request.size, 1)
    except OSError:
        os._exit(0)
    if not data:
        os._exit(0)  # the host closed its end, or died
    if len(fds) != 1 or len(data) != request.size:
        for fd in fds:
            os.close(fd)
        continue
    try:
        os.fdatasync(fds[0])
        code = 0
    except OSError as problem:
        code = problem.errno or 5
    finally:
        os.close(fds[0])
    try:
        sock.send(answer.pack(request.unpack(data)[0], code))
    except OSError:
        os._exit(0)
"""


class SyncProcess:
    """The process and the hub's end of its socket. Used from the hub's thread only."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HELPER, str(theirs.fileno()), str(WORKERS)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env={}, close_fds=True, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.fileno = ours.fileno()
        self._next = 0
        #: request number -> what to call with the errno when it is answered
        self.waiting: dict[int, Callable[[int | None], None]] = {}
        self.alive = True

    def send(self, fd: int, answered: Callable[[int | None], None]) -> bool:
        """Ask for `fd` to be synced; `answered(errno)` once it is (0: durable), or
        `answered(None)` if the process goes away first. False when it is gone already."""
        if not self.alive:
            return False
        self._next += 1
        number = self._next
        try:
            socket.send_fds(self.sock, [_REQUEST.pack(number)], [fd])
        except (BlockingIOError, InterruptedError):
            return False  # full: this one is synced the other way
        except OSError:
            self._gone()
            return False
        self.waiting[number] = answered
        return True

    def take_answers(self) -> None:
        """Read every answer there is (the socket polled readable) and hand each on."""
        while True:
            try:
                data = self.sock.recv(_ANSWER.size)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if len(data) != _ANSWER.size:
                self._gone()
                return
            number, code = _ANSWER.unpack(data)
            answered = self.waiting.pop(number, None)
            if answered is not None:
                answered(code)

    def _gone(self) -> None:
        """The process went away: every sync it had is left to be made again another way."""
        if not self.alive:
            return
        self.alive = False
        waiting, self.waiting = self.waiting, {}
        for answered in waiting.values():
            answered(None)
        self.close()

    def cpu_seconds(self) -> float:
        """CPU seconds its processes (the first and its workers) have used so far, for
        benchmarks: they live as long as the host, so `RUSAGE_CHILDREN` never counts them.
        0 once they are gone."""
        pid = self.process.pid
        total = 0.0
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                workers = [int(child) for child in handle.read().split()]
            for process in [pid, *workers]:
                with open(f"/proc/{process}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
        return total

    def close(self) -> None:
        self.alive = False
        try:
            self.sock.close()
        except OSError:
            pass
        process = self.process
        if process.poll() is None:
            try:
                process.wait(timeout=5)  # (its end of the socket closed, it exits)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
