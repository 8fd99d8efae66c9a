"""The host's side of the child template (`sandbox.template`): a process that has imported what a
sandbox child imports and forks one per run, so that a host driving run after run stops paying an
interpreter's start and imports for each (`start`, the one entry; docs/sandbox.md §2).

A child's start is mostly CPU: ~75 ms of it a child on this project's machines (the interpreter
and its imports, docs/impl.md), against ~12 ms of the host's own for a short run. A spare child
(flowrt/spare_child.py) hides that wait but not that work, which a host doing run after run, or a
worker, does again for every run. A child forked from the template costs a fork and a network
namespace. It is the same child: the same interpreter, flags, environment, code and command
line; its own session, network namespace, working directory, pipes and limits, made in the same
order before it reads a byte of its run (sandbox/template.py lists the steps); the same lockdown
afterwards. The template itself never receives a program or a value, so a forked child holds
nothing of any other run.

When: a process starts its first two children as before (a `flow run` starts one; starting a
template first would only cost it), and on the second it starts the template in the background;
from the third child on, children are forked. `FLOW_SANDBOX_TEMPLATE` sets that: `0` never (every
child its own interpreter), `1` from the first child on (waiting for the template's start), unset
or `auto` as described. Whatever goes wrong with the template (it cannot start, dies, does not
answer within `ANSWER_SECONDS`) leaves the child to be started as before: `start` returns None.
A template that died is started again at most `RESTARTS` times in a process; then the process
stops using one and says why once on stderr.

The template dies with the host: the thread that started it, which reads its answers, lives as
long as it does (the parent-death signal follows the thread that forked), and the template
itself ends, killing its children's groups, when the host's end of its socket closes. Its
children die with it (their own parent-death signal).
"""

from __future__ import annotations

import itertools
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

import orjson

from flowrt import sandbox_launch as launch

#: how long the host waits for the template to start, or to answer a fork, before starting the
#: child itself
ANSWER_SECONDS = 20.0
#: how often a process starts a template again after one died
RESTARTS = 3
#: how long a reaped child's exit may take to be reported after its group was killed
EXIT_SECONDS = 30.0
MAX_MESSAGE = 1 << 16


class ForkedProcess:
    """A child forked by the template, as the `subprocess.Popen` that `sandbox_process.Child`
    drives: `pid`, `stdin`/`stdout`/`stderr` (the host's ends of its pipes), `returncode` (set
    when it has exited: it is a zombie until `wait` releases it, so its pid cannot be reused
    while the host may still kill its group), `wait()`; and `has_exited()`, where `Child` asks
    `waitid(WNOWAIT)` of a process of its own."""

    def __init__(self, template: Template, pid: int, stdin, stdout, stderr) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        #: it ended because its template did (flowrt/run.py halts the run, it does not fault it)
        self.template_lost = False
        self._template = template
        self._exit = threading.Event()
        self._released = False

    def exited(self, returncode: int) -> None:
        self.returncode = returncode
        self._exit.set()

    def has_exited(self) -> bool:
        return self._exit.is_set()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the exit (at most EXIT_SECONDS: the template answers, or its end marks every
        child of it ended), then let the template reap it."""
        if not self._exit.wait(EXIT_SECONDS if timeout is None else timeout):
            if timeout is not None:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
            self.exited(-9)  # the template never said: it is stuck, and forks no more
            self._template.retire()
        if not self._released:
            self._released = True
            self._template.release(self.pid)
        return self.returncode


class Template:
    """One template process and the thread that started it and reads its answers."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, list] = {}  # request id -> [Event, answer]
        self._children: dict[int, ForkedProcess] = {}  # pid -> process, until it exits
        self._exits: dict[int, int] = {}  # exits reported before the fork's own answer
        self._unwanted: set[int] = set()  # forked after its asker stopped waiting: killed
        self._sock: socket.socket | None = None
        self.pid: int | None = None
        self.error: str | None = None
        self.ended = False
        self.retired = False  # forks no more (see `retire`)
        self._thread = threading.Thread(target=self._run, name="sandbox-template", daemon=True)
        self._thread.start()

    # -- the thread that owns the template ---------------------------------------------------

    def _run(self) -> None:
        host_end = None
        try:
            launch.compile_for_child()  # the template imports what a child does, with `-B`
            host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                proc = subprocess.Popen(
                    [sys.executable, *launch.CHILD_PYTHON_FLAGS, "-m", "sandbox.template"],
                    stdin=template_end.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    cwd="/", env=launch.child_env(), close_fds=True, start_new_session=True,
                    preexec_fn=launch._make_preexec(_TEMPLATE_RLIMITS, frozenset({"network"})
                                                    | (launch.layers_left_out() & {"parent_death"})))
            finally:
                template_end.close()
        except BaseException as problem:  # noqa: BLE001 - reported as the template's error
            if host_end is not None:
                host_end.close()
            self.error = f"the template did not start: {problem}"
            self.ended = True
            self._ready.set()
            return
        self._sock, self.pid = host_end, proc.pid
        self._ready.set()
        if self.retired:
            self.stop()  # given up on while it started: it is not wanted
        try:
            self._read_answers(host_end)
        finally:
            self._end(proc)

    def _read_answers(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(MAX_MESSAGE)
            except OSError:
                return
            if not data:
                return
            message = orjson.loads(data)
            op = message["op"]
            if op in ("forked", "failed"):
                with self._lock:
                    slot = self._waiting.pop(message["id"], None)
                if slot is not None:
                    slot[1] = message
                    slot[0].set()
                elif op == "forked":  # its asker gave up waiting: the child is not wanted
                    self._unwanted.add(message["pid"])
                    _kill_group(message["pid"])
            elif op == "exited":
                pid, code = message["pid"], message["returncode"]
                with self._lock:
                    child = self._children.pop(pid, None)
                    if child is None and pid not in self._unwanted:
                        self._exits[pid] = code
                if child is not None:
                    child.exited(code)
                elif pid in self._unwanted:
                    self._unwanted.discard(pid)
                    self.release(pid)

    def _end(self, proc: subprocess.Popen) -> None:
        """The template is gone (or its socket failed): its children die with it."""
        self.ended = True
        if self.error is None:
            self.error = "the template ended"
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()
        with self._lock:
            children, self._children = list(self._children.values()), {}
            waiting, self._waiting = list(self._waiting.values()), {}
        for child in children:
            _kill_group(child.pid)
            child.template_lost = True
            child.exited(-9)
        for slot in waiting:
            slot[0].set()
        if self._sock is not None:
            self._sock.close()

    # -- asking it -----------------------------------------------------------------------------

    def fork(self, how: launch.Plan) -> launch.Launched | None:
        """A child forked for `how`, or None (the template is gone or did not answer in time)."""
        if not self._ready.wait(ANSWER_SECONDS):
            self.retire()  # not started in time: the next child asks a new one, or starts itself
            return None
        if self.ended or self.retired or self._sock is None:
            return None
        workdir = tempfile.mkdtemp(prefix="flow-sandbox-")
        pipes = [os.pipe() for _ in range(3)]  # (read, write) each: stdin, stdout, stderr
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        argv = how.argv(self.pid)
        request = {"op": "fork", "workdir": workdir, "argv": argv[argv.index("-m") + 2:],
                   "rlimits": [[which, soft, hard] for which, (soft, hard) in how.rlimits],
                   "network": "network" not in how.without, "parent_death": "parent_death" not in how.without}
        slot = [threading.Event(), None]
        with self._lock:
            request["id"] = next(self._ids)
            self._waiting[request["id"]] = slot
        try:
            socket.send_fds(self._sock, [orjson.dumps(request)], theirs)
            sent = True
        except OSError:
            sent = False
        finally:
            for fd in theirs:
                os.close(fd)
        if not sent or not slot[0].wait(ANSWER_SECONDS):
            with self._lock:
                self._waiting.pop(request["id"], None)
        answer = slot[1]
        if answer is None or answer["op"] != "forked":
            for fd in ours:
                os.close(fd)
            shutil.rmtree(workdir, ignore_errors=True)
            if answer is None:
                self.retire()  # it did not answer: a template that does not is not used again
            return None
        proc = ForkedProcess(self, answer["pid"], open(ours[0], "wb", buffering=0),
                             open(ours[1], "rb", buffering=0), open(ours[2], "rb", buffering=0))
        with self._lock:
            early = self._exits.pop(proc.pid, None)
            if early is None:
                self._children[proc.pid] = proc
        if early is not None:
            proc.exited(early)
        launch._take_responsibility()
        isolated = bool(answer["network"]) and launch.network_isolated(proc.pid)
        return launch.launched(how, proc, workdir, argv, isolated,
                               origin=f"forked from the child template (pid {self.pid})")

    def release(self, pid: int) -> None:
        """The host has killed `pid`'s group and seen it exit: the template may reap it."""
        sock = self._sock
        if sock is None or self.ended:
            return
        try:
            sock.send(orjson.dumps({"op": "release", "pid": pid}))
        except OSError:
            pass
        with self._lock:
            last = self.retired and not self._children
        if last:
            self.stop()

    def retire(self) -> None:
        """Fork no more from this template (it did not answer in time), but leave the children
        it has running: it is ended once the last of them has exited."""
        with self._lock:
            self.retired = True
            idle = not self._children
        if idle:
            self.stop()

    def stop(self) -> None:
        """End the template (its children with it): closing our end ends its loop."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


#: the template's own limits: no core dump. Not the children's CPU limit (it lives as long as the
#: host, and its forks add up) nor their address space (each child sets its own after the fork).
_TEMPLATE_RLIMITS = [(resource.RLIMIT_CORE, (0, 0))]

_lock = threading.Lock()
_template: Template | None = None
_started_directly = 0
_restarts = 0


def mode() -> str:
    """FLOW_SANDBOX_TEMPLATE: "0" (never), "1" (from the first child on) or "auto"."""
    text = os.environ.get("FLOW_SANDBOX_TEMPLATE", "auto").strip().lower() or "auto"
    if text not in ("0", "1", "auto"):
        launch._warn(f"FLOW_SANDBOX_TEMPLATE is {text!r}, not 0, 1 or auto; using auto")
        return "auto"
    return text


def start(how: launch.Plan) -> launch.Launched | None:
    """A child for `how` forked from this process's template, or None: start it yourself (the
    template is off, not started yet, or failed; see the module's docstring for when)."""
    global _template, _started_directly, _restarts
    which = mode()
    if which == "0" or how.target != ("-m", "sandbox.child") or not hasattr(os, "pidfd_open"):
        return None
    with _lock:
        template = _template
        if template is not None and (template.ended or template.retired):
            error = template.error if template.ended else f"it did not answer within {ANSWER_SECONDS:g} s"
            template, _template = None, None
            _restarts += 1
            launch._warn(f"the sandbox child template ended ({error}); "
                         + ("starting another" if _restarts <= RESTARTS
                            else "children are started as their own interpreters from now on"))
        if _restarts > RESTARTS:
            return None
        if template is None:
            _started_directly += 1
            if which == "auto" and _started_directly < 2:
                return None
            template = _template = Template()
            _end_at_exit()
            if which == "auto":
                return None  # this child starts as before while the template starts
    return template.fork(how)


def reaped_cpu_seconds() -> float:
    """CPU seconds of the children this process's template has reaped (its `cutime + cstime`):
    a forked child is the template's child, so the host's `RUSAGE_CHILDREN` never counts it
    (benchmarks add this). 0 without a running template."""
    template = _template
    if template is None or template.pid is None or template.ended:
        return 0.0
    try:
        with open(f"/proc/{template.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def shut_down(seconds: float = EXIT_SECONDS) -> None:
    """End this process's template and wait (at most `seconds`) until it is reaped."""
    global _template
    with _lock:
        template, _template = _template, None
    if template is not None:
        template.stop()
        template._thread.join(timeout=seconds)


def _forget_in_forked_process() -> None:
    """In a process forked from a host (an application's workers, say): the template and its
    socket are the parent's, and the thread that reads its answers was not copied. This process
    starts its own when it needs one."""
    global _template, _started_directly, _restarts
    template, _template, _started_directly, _restarts = _template, None, 0, 0
    if template is not None and template._sock is not None:
        try:
            template._sock.close()  # this process's copy only: the parent's stays open
        except OSError:
            pass


os.register_at_fork(after_in_child=_forget_in_forked_process)

_AT_EXIT = False


def _end_at_exit() -> None:
    """Once per process: at exit the template is ended and reaped (briefly waited for), so that
    its CPU and its children's count among the host's reaped children's, as a started child's
    does. A host killed outright leaves it to its parent-death signal and its socket's end."""
    global _AT_EXIT
    if not _AT_EXIT:
        _AT_EXIT = True
        import atexit

        atexit.register(shut_down, 2.0)
