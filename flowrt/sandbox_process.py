"""The host side of the sandbox: start, talk to, time out and kill the child process.

`Child.start()` runs `sys.executable <flags> -m sandbox.child` (or a script, for tests) as a
process that shares nothing it does not need with the host:

- environment: exactly `policy.CHILD_ENV` plus `PYTHONPATH` pointing at this checkout and at
  the directories of the packages the child imports (nothing is inherited; the flags are `-I`
  minus `-E`, plus `-S`: no `site`, no `.pth` files run; see `policy.CHILD_PYTHON_FLAGS` and
  `child_path()`);
- working directory: a fresh empty temporary directory, removed when the child is reaped;
- file descriptors: fd 0 and 1 are the two ends of the framed channel (`flowdata.framing`), fd 2
  is a pipe the host drains into a bounded tail (`policy.STDERR_TAIL_BYTES`); nothing else is
  inherited (`close_fds`);
- its own session and process group, so `kill()` takes every process the child started;
- resource limits (`policy.LIMITS`: address space, CPU, file size, open files, processes, core)
  and `PR_SET_NO_NEW_PRIVS`, set in `preexec_fn` between fork and exec;
- where the kernel allows it, a new, empty network namespace (`unshare(CLONE_NEWNET)`); whether
  it took is read back from `/proc/<pid>/ns/net` into `child.network_isolated`;
- `PR_SET_PDEATHSIG` (SIGKILL), so the child dies with the host even when the host is SIGKILLed;
  the host also kills every child's group when it exits (atexit) or gets SIGTERM;
- a wall-clock deadline (`Limits.wall_seconds`, or FLOW_SANDBOX_WALL_SECONDS): the longest the
  host waits for the child's next message before it kills it (`ChildDeadline`);
- the child's own lockdown once it has loaded (`sandbox.lockdown`: uid, user namespace, no
  capabilities, Landlock, a seccomp filter built here by `flowrt.syscall_filter`), which it
  reports; `child.layers` says which layers were applied and why any is missing.

The child writes no files, so the bytecode caches of the modules only it imports are written
here, where this interpreter writes bytecode at all (`_compile_for_child`).

Every way the child can end surfaces as `ChildDied` (exit, signal, closed pipe, a limit hit);
waiting longer than the caller allows surfaces as `ChildTimeout`. Timeouts are enforced from
outside, because code inside the child could catch anything raised inside it. The child's exit is
observed without reaping it (`waitid(WNOWAIT)`) so that its pid, which is also its process
group id, cannot be reused before the group has been killed.
"""

from __future__ import annotations

import collections
import ctypes
import fcntl
import os
import resource
import select
import shutil
import signal as signals
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Callable

import flowdata
from flowdata import framing as channel
from flowdata.policy import (
    CHILD_ENV,
    CHILD_PACKAGES,
    CHILD_PYTHON_FLAGS,
    CHILD_SOURCE_PACKAGES,
    CHILD_UID,
    LIMITS,
    STDERR_TAIL_BYTES,
    Limits,
)

SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(flowdata.__file__)))
CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
POLL_TICK = 0.05  # seconds between liveness checks while waiting on the pipe
EXIT_GRACE = 2.0  # seconds a child that closed its pipe gets to exit by itself
# Bytes asked of one read. A read allocates its buffer first; at 128 KiB and above malloc maps
# fresh pages for it and unmaps them after, which costs more than the read itself.
READ_CHUNK = 1 << 16
PIPE_SIZE = 1 << 20  # bytes each pipe holds (F_SETPIPE_SZ): a streamed record rarely waits on it
PIPE_CHUNK = 1 << 16  # bytes offered to the pipe in one write (a slice of the outbox: see READ_CHUNK)
OUTBOX_LOW = 1 << 18  # bytes of posted output below which the feeder is asked for more
F_SETPIPE_SZ = 1031


class ChildError(Exception):
    """Base class of the host's view of child failures."""


class ChildDied(ChildError):
    """The child exited, was killed, or closed its end of the pipe."""

    def __init__(self, returncode: int | None, signal: int | None, stderr_tail: str,
                 reason: str = "ended", explanation: str = ""):
        self.returncode = returncode
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.reason = reason
        self.explanation = explanation
        if signal is not None:
            status = f"was killed by {_signal_name(signal)}"
        else:
            status = f"exited with code {returncode}"
        message = f"sandbox child {reason} and {status}"
        if explanation:
            message += f": {explanation}"
        last = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
        if last:
            message += f" (last stderr line: {last[0]})"
        super().__init__(message)


class ChildDeadline(ChildError):
    """The child computed longer than its wall-clock deadline without a message; it was killed.
    A host limit, not an outcome of the program: the run is halted (resumable), not faulted."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(
            f"sandbox child sent nothing for {seconds:g} s (its wall-clock deadline, "
            "Limits.wall_seconds or FLOW_SANDBOX_WALL_SECONDS) and was killed"
        )


class ChildTimeout(ChildError):
    """The child did not answer (or accept a message) within the time allowed."""

    def __init__(self, timeout: float, doing: str):
        self.timeout = timeout
        super().__init__(
            f"sandbox child did not {doing} within {timeout:g} s; it is still running: call "
            "kill() (the host enforces time limits from outside)"
        )


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- launching -------------------------------------------------------------------------------

def _unshare_function():
    """The unshare(2) callable (os.unshare from Python 3.12, libc before), or None."""
    if hasattr(os, "unshare"):
        return os.unshare
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare
    except (OSError, AttributeError):
        return None


def _prctl_function():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_UNSHARE = _unshare_function()
_PRCTL = _prctl_function()


def _rlimits(limits: Limits) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) pairs, never above the host's own hard limits."""
    wanted = [
        (resource.RLIMIT_AS, limits.address_space_bytes, 0),
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_grace_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes, 0),
        (resource.RLIMIT_NOFILE, limits.open_files, 0),
        (resource.RLIMIT_NPROC, limits.processes, 0),
        (resource.RLIMIT_CORE, limits.core_bytes, 0),
    ]
    pairs = []
    for which, soft, extra in wanted:
        if soft is None:
            continue
        _, host_hard = resource.getrlimit(which)
        hard = soft + extra
        if host_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, host_hard), min(hard, host_hard)
        pairs.append((which, (soft, hard)))
    return pairs


_RLIMIT_NAMES = {getattr(resource, n): n[len("RLIMIT_"):].lower()
                 for n in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE")}


def _make_preexec(pairs: list[tuple[int, tuple[int, int]]], without: frozenset = frozenset()):
    """The function run in the child between fork and exec. Everything it needs is bound now,
    so it allocates little and takes no locks (the host may have threads)."""
    unshare, prctl, setrlimit = _UNSHARE, _PRCTL, resource.setrlimit
    host_pid, getppid, exit_now = os.getpid(), os.getppid, os._exit
    network = "network" not in without
    parent_death = "parent_death" not in without

    def preexec() -> None:
        if parent_death and prctl is not None:
            # The signal follows the thread that forked: the child dies with the host. Armed
            # before the check, so a host that died just before cannot be missed.
            prctl(PR_SET_PDEATHSIG, signals.SIGKILL, 0, 0, 0)
            if getppid() != host_pid:
                exit_now(1)
        if network and unshare is not None:
            try:
                unshare(CLONE_NEWNET)  # libc returns -1 on EPERM/EINVAL; os.unshare raises
            except OSError:
                pass  # no network namespace here; recorded by the host as network_isolated
        if prctl is not None:
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        for which, limit in pairs:
            setrlimit(which, limit)

    return preexec


def _widen_pipe(fd: int) -> None:
    """Let the pipe hold PIPE_SIZE bytes where the system allows (the default is 64 KiB):
    either side can then run further ahead before it has to wait for the other."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass


def _net_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


#: The layers FLOW_SANDBOX_WITHOUT may name (comma-separated): each is then left out and
#: reported missing, as on a kernel without it (tests and docs/sandbox.md §5 use this).
LAYER_NAMES = ("network", "parent_death", "uid", "user_namespace", "capabilities", "landlock", "seccomp")


def layers_left_out() -> frozenset:
    """The layers FLOW_SANDBOX_WITHOUT names; an unknown name is an error, not a silent no-op."""
    names = frozenset(n.strip() for n in os.environ.get("FLOW_SANDBOX_WITHOUT", "").split(",") if n.strip())
    unknown = sorted(names - set(LAYER_NAMES))
    if unknown:
        _warn(f"FLOW_SANDBOX_WITHOUT names unknown layers {', '.join(unknown)} (ignored); "
              f"known: {', '.join(LAYER_NAMES)}")
    return names & frozenset(LAYER_NAMES)


_WARNED: set[str] = set()


def _warn(text: str) -> None:
    """A bad setting in the environment: said once on stderr, and the safe default used."""
    if text not in _WARNED:
        _WARNED.add(text)
        sys.stderr.write(f"flow: warning: {text}\n")


def wall_seconds(limits: Limits) -> float | None:
    """The child's wall-clock deadline: FLOW_SANDBOX_WALL_SECONDS if set (0: none), else the
    limits' own."""
    text = os.environ.get("FLOW_SANDBOX_WALL_SECONDS")
    if text is None or not text.strip():
        return limits.wall_seconds
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        _warn(f"FLOW_SANDBOX_WALL_SECONDS is {text!r}, not seconds >= 0 (0: no deadline); "
              f"using {limits.wall_seconds}")
        return limits.wall_seconds
    return seconds or None


# -- children this host is responsible for ------------------------------------------------------

#: every child not yet reaped: killed when the host exits or is told to terminate
_LIVE: "weakref.WeakSet[Child]" = weakref.WeakSet()
_TERM_HANDLER_SET = False


def kill_all() -> None:
    """SIGKILL the process group of every child this host started and has not reaped."""
    for child in list(_LIVE):
        try:
            os.killpg(child.pid, signals.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _on_sigterm(number, frame) -> None:
    # Kill the children's groups (a grandchild is not covered by the parent-death signal), then
    # terminate as SIGTERM would have without this handler.
    kill_all()
    signals.signal(signals.SIGTERM, signals.SIG_DFL)
    os.kill(os.getpid(), signals.SIGTERM)


def _take_responsibility() -> None:
    """Once per process: atexit kills the children left; SIGTERM does too, where nothing else
    handles it (a handler can only be set from the main thread)."""
    global _TERM_HANDLER_SET
    if _TERM_HANDLER_SET:
        return
    _TERM_HANDLER_SET = True
    import atexit

    atexit.register(kill_all)
    if threading.current_thread() is threading.main_thread():
        try:
            if signals.getsignal(signals.SIGTERM) == signals.SIG_DFL:
                signals.signal(signals.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


_CHILD_PATH: str | None = None


def child_path() -> str:
    """The child's PYTHONPATH: this checkout, then the directory of each `policy.CHILD_PACKAGES`
    package as the host's interpreter finds it (the child starts without `site`, see
    `policy.CHILD_PYTHON_FLAGS`). The user site directory is left out: the child never saw it (a
    package only installed there is not found by the child, as before). Computed once."""
    global _CHILD_PATH
    if _CHILD_PATH is None:
        folders = [SOURCE_ROOT]
        user_site = _user_site()
        for name in CHILD_PACKAGES:
            folder = _package_folder(name)
            if folder is None or folder in folders:
                continue
            if user_site is not None and os.path.realpath(folder) == user_site:
                continue
            folders.append(folder)
        _CHILD_PATH = os.pathsep.join(folders)
    return _CHILD_PATH


def _package_folder(name: str) -> str | None:
    """The `sys.path` entry the host imports (or would import) the top-level `name` from."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
    if spec is None or not spec.has_location or not spec.origin:
        return None
    folder = os.path.dirname(os.path.abspath(spec.origin))
    if spec.submodule_search_locations is not None:  # a package: origin is <entry>/<name>/__init__.py
        folder = os.path.dirname(folder)
    return folder


def _user_site() -> str | None:
    try:
        import site

        folder = site.getusersitepackages()
    except Exception:  # noqa: BLE001 - no user site at all
        return None
    return os.path.realpath(folder) if isinstance(folder, str) else None


_COMPILED = False


def _child_sources() -> list[str]:
    """The modules of this checkout the child imports, whose bytecode only the host can write
    (`-B`): all of `sandbox/` and of `flowdata/` (nothing of `flowrt`: the child imports none)."""
    sources = []
    for package in CHILD_SOURCE_PACKAGES:
        folder = os.path.join(SOURCE_ROOT, package)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        except OSError:
            names = []
        sources.extend(os.path.join(folder, n) for n in names)
    return sources


def _compile_for_child() -> None:
    """Write the bytecode caches of the child's modules, missing or stale, as importing them here
    would have. The child may write no files (`-B`, RLIMIT_FSIZE=0), so without this the modules
    only it imports were compiled again at every start. Nothing is written where this interpreter
    writes no bytecode (PYTHONDONTWRITEBYTECODE, `-B`) or writes it elsewhere (PYTHONPYCACHEPREFIX,
    which the child does not have). The child runs unoptimized (no `-O`): so is what is written
    here, whatever this interpreter's flags. Once per process."""
    global _COMPILED
    if _COMPILED or sys.dont_write_bytecode or sys.pycache_prefix:
        return
    _COMPILED = True
    import importlib.util

    for source in _child_sources():
        try:
            cached = importlib.util.cache_from_source(source, optimization="")
        except NotImplementedError:  # no cache tag: this interpreter caches nothing
            return
        try:
            stat = os.stat(source)
            with open(cached, "rb") as handle:
                header = handle.read(16)
            if (len(header) == 16 and header[:4] == importlib.util.MAGIC_NUMBER
                    and int.from_bytes(header[4:8], "little") == 0  # checked by timestamp
                    and int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
                    and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF):
                continue
        except OSError:
            pass  # no cache yet (or no source: py_compile says so below)
        import py_compile

        try:
            py_compile.compile(source, cfile=cached, doraise=True, optimize=0,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (OSError, py_compile.PyCompileError, ValueError):
            pass  # a read-only installation, a source gone: the child compiles it, as before


class _StderrTail(threading.Thread):
    """Drains the child's stderr, keeping the last `limit` bytes."""

    def __init__(self, fd: int, limit: int):
        super().__init__(name=f"sandbox-stderr-{fd}", daemon=True)
        self.fd = fd
        self.limit = limit
        self.total = 0
        self._buffer = bytearray()
        self._lock = threading.Lock()

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.total += len(chunk)
                self._buffer += chunk
                if len(self._buffer) > self.limit:
                    del self._buffer[: len(self._buffer) - self.limit]

    def text(self) -> str:
        with self._lock:
            return self._buffer.decode("utf-8", "replace")


class Child:
    """A running sandbox child. Create with `Child.start()`; use as a context manager."""

    def __init__(self, proc: subprocess.Popen, workdir: str, limits: Limits, argv: list[str],
                 network_isolated: bool, layers: dict | None = None, wall: float | None = None):
        self._proc = proc
        self.pid = proc.pid
        self.workdir = workdir
        self.limits = limits
        self.argv = argv
        self.network_isolated = network_isolated
        #: layer -> {"applied": bool, "detail": text}: the host's own (process group, network,
        #: parent death, rlimits) now, the child's lockdown once it reports (`lockdown_reported`)
        self.layers: dict = dict(layers or {})
        self.lockdown_reported = False
        self._expect_report = False  # set by start() when the child locks down and reports
        #: seconds the host waits for the child's next message before killing it (None: forever)
        self.wall_seconds = wall
        self._write_fd = proc.stdin.fileno()
        self._read_fd = proc.stdout.fileno()
        os.set_blocking(self._write_fd, False)
        os.set_blocking(self._read_fd, False)
        for fd in (self._write_fd, self._read_fd):
            _widen_pipe(fd)
        self._reader = channel.FrameReader()
        self._inbox: collections.deque[dict] = collections.deque()
        #: bytes posted but not yet taken by the pipe, in order (see `post`)
        self._outbox = bytearray()
        self._feeder = None  # an iterator of more bytes to post once the outbox runs low
        self._out_closed = False  # the child closed its end: what is left will never be read
        self._blocked = False  # the last write found the pipe full
        self._poller = select.poll()  # what `recv` waits on: the reading end, and the writing
        self._poller.register(self._read_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._polling_out = False  # ... end too while posted output waits
        self._stderr = _StderrTail(proc.stderr.fileno(), STDERR_TAIL_BYTES)
        self._stderr.start()
        self._died: ChildDied | None = None
        self._closed = False
        self._eof = False
        self._spin = channel.Spin()  # polling before sleeping, as the child's Receiver does
        #: called whenever `recv` is about to sleep on the child (the run makes a written Reply
        #: durable then: see flowrt/run.py)
        self.before_sleep: Callable[[], None] | None = None
        #: called after each sleep that ended with nothing to read: it raises to stop waiting
        #: (the run halts: see `flowrt.run.Driver.check_halt`)
        self.check_halt: Callable[[], None] | None = None

    @classmethod
    def start(cls, main_module: str = "sandbox.child", limits: Limits = LIMITS, *,
              argv_tail: list[str] | None = None, lockdown: bool | None = None) -> Child:
        """Launch the child: `-m main_module`, or `argv_tail` (e.g. [script path, args...]).
        `lockdown` (default: only for `-m`) passes the child what it needs to lock itself down
        (`sandbox.lockdown.parse_argv`), which a test script may also use."""
        without = layers_left_out()
        wall = wall_seconds(limits)
        target = list(argv_tail) if argv_tail is not None else ["-m", main_module]
        if lockdown is None:
            lockdown = argv_tail is None
        if lockdown:
            from flowrt import syscall_filter

            program, problem = ((b"", "left out on purpose (FLOW_SANDBOX_WITHOUT)") if "seccomp" in without
                                else syscall_filter.program())
            target += ["--lockdown", str(os.getpid()), str(CHILD_UID), program.hex(), ",".join(sorted(without))]
        argv = [sys.executable, *CHILD_PYTHON_FLAGS, *target]
        env = dict(CHILD_ENV)
        env["PYTHONPATH"] = child_path()
        workdir = tempfile.mkdtemp(prefix="flow-sandbox-")
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=env,
                close_fds=True,
                start_new_session=True,
                preexec_fn=_make_preexec(_rlimits(limits), without),
                bufsize=0,
            )
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        _take_responsibility()
        own = _net_namespace("self")
        theirs = _net_namespace(proc.pid)
        isolated = own is not None and theirs is not None and own != theirs
        layers = {
            "process_group": {"applied": True, "detail": f"its own session and group {proc.pid}, killed with it"},
            "network": {"applied": isolated, "detail": "a new network namespace (loopback only)" if isolated else
                        "missing: " + ("left out on purpose (FLOW_SANDBOX_WITHOUT)" if "network" in without
                                       else "unshare(CLONE_NEWNET) was refused")},
            "parent_death": {"applied": _PRCTL is not None and "parent_death" not in without,
                             "detail": "SIGKILL when the host exits (armed before exec)"
                             if _PRCTL is not None and "parent_death" not in without else
                             "missing: " + ("left out on purpose (FLOW_SANDBOX_WITHOUT)"
                                            if "parent_death" in without else "no prctl")},
            "rlimits": {"applied": True, "detail": ", ".join(
                f"{_RLIMIT_NAMES.get(which, which)}={soft}" for which, (soft, _) in _rlimits(limits))},
            "wall_clock": {"applied": wall is not None,
                           "detail": f"killed after {wall:g} s without a message" if wall is not None
                           else "missing: no deadline (FLOW_SANDBOX_WALL_SECONDS=0 or Limits.wall_seconds=None)"},
        }
        if lockdown and "seccomp" not in without and problem:
            layers["seccomp"] = {"applied": False, "detail": f"missing: {problem}"}
        child = cls(proc, workdir, limits, argv, isolated, layers, wall)
        child._expect_report = lockdown
        _LIVE.add(child)
        if argv_tail is None:
            _compile_for_child()  # while the child's interpreter starts; it reads them on its next start
        return child

    # -- talking -----------------------------------------------------------------------------

    def send(self, obj: dict, timeout: float | None = None) -> None:
        """Send one message (after anything posted before it). Raises ChildDied if the child is
        gone, ChildTimeout if it does not take the message in time (a partly written frame kills
        the child: the stream is lost)."""
        self._raise_if_dead()
        data = channel.encode(obj)  # refusals (size, non-JSON) before any write
        self._drain_feeder()
        self._outbox += data
        deadline = None if timeout is None else time.monotonic() + timeout
        wall = self.wall_seconds if timeout is None else None
        wall_deadline = None if wall is None else time.monotonic() + wall
        poller = select.poll()
        poller.register(self._write_fd, select.POLLOUT)
        while True:
            try:
                self._write_some()
            except BrokenPipeError:
                self._finish("closed its end of the pipe")
            if not self._outbox:
                return
            if self._exited():
                self._finish("ended while a message was being sent")
            if deadline is not None and time.monotonic() >= deadline:
                if len(self._outbox) < len(data):
                    self.kill()
                raise ChildTimeout(timeout, "accept a message")
            if wall_deadline is not None and time.monotonic() >= wall_deadline:
                self._deadline_passed(wall)
            poller.poll(self._tick(deadline) * 1000)

    def post(self, obj: dict) -> None:
        """Queue one message and write what the pipe takes now; the rest goes out while `recv`
        waits. A host that also reads never deadlocks against a child that is writing (a
        blocking `send` could: both pipes full, each side waiting for the other)."""
        self.post_bytes(channel.encode(obj))

    def post_bytes(self, data: bytes) -> None:
        """Queue encoded frames, as `post`, after everything `feed` was given."""
        self._raise_if_dead()
        if self._out_closed:
            return
        self._drain_feeder()
        try:
            if not self._outbox:  # the usual case: straight to the pipe, what it leaves queued
                try:
                    written = os.write(self._write_fd, data)
                except BlockingIOError:
                    written = 0
                if written < len(data):
                    self._outbox += data[written:]
                return
            self._outbox += data
            self._write_some()
        except BrokenPipeError:
            self._close_out()

    def _drain_feeder(self) -> None:
        if self._feeder is not None:
            for chunk in self._feeder:
                self._outbox += chunk
            self._feeder = None

    def feed(self, chunks) -> None:
        """Post the encoded frames `chunks` yields, each when the outbox has run low, after
        anything already posted; frames posted later go after all of them."""
        self._feeder = iter(chunks)
        self._refill()
        try:
            self._write_some()
        except BrokenPipeError:
            self._close_out()

    def _refill(self) -> None:
        feeder = self._feeder
        while feeder is not None and len(self._outbox) < OUTBOX_LOW:
            chunk = next(feeder, None)
            if chunk is None:
                self._feeder = feeder = None
            else:
                self._outbox += chunk

    def _write_some(self) -> None:
        """Write what the pipe takes without blocking (BrokenPipeError when the child is gone)."""
        outbox = self._outbox
        while outbox:
            try:
                written = os.write(self._write_fd, outbox[:PIPE_CHUNK] if len(outbox) > PIPE_CHUNK else outbox)
            except BlockingIOError:
                self._blocked = True  # the pipe is full: try again when poll says it has room
                return
            del outbox[:written]
            if not outbox and self._feeder is not None:
                self._refill()
        self._blocked = False

    def _close_out(self) -> None:
        self._out_closed = True
        self._outbox.clear()
        self._feeder = None

    def _pump(self) -> None:
        if self._outbox or self._feeder is not None:
            self._refill()
            try:
                self._write_some()
            except BrokenPipeError:
                self._close_out()  # the child is gone: its reading end tells how

    def peek(self) -> dict | None:
        """The next message if one has arrived (never blocks), without taking it."""
        if not self._inbox and self._died is None and not self._closed:
            try:
                data = os.read(self._read_fd, READ_CHUNK)
            except BlockingIOError:
                return None
            if not data:  # EOF: left for recv to report
                self._eof = True
                return None
            self._take(data)
        return self._inbox[0] if self._inbox else None

    def recv(self, timeout: float | None = None) -> dict:
        """The next message. Raises ChildDied when the child exits or closes its pipe, and
        ChildTimeout when nothing complete arrives within `timeout` seconds (None: wait).
        Posted output is written while waiting."""
        if self._inbox:
            if (self._outbox and not self._blocked) or (self._feeder is not None and len(self._outbox) < OUTBOX_LOW):
                self._pump()
            return self._inbox.popleft()
        self._raise_if_dead()
        deadline = None if timeout is None else time.monotonic() + timeout
        wall = self.wall_seconds if timeout is None else None
        wall_deadline = None if wall is None else time.monotonic() + wall
        poller = self._poller
        writing = self._polling_out
        while True:
            self._pump()
            want = bool(self._outbox) and not self._out_closed
            if want != writing:
                if want:
                    poller.register(self._write_fd, select.POLLOUT)
                else:
                    poller.unregister(self._write_fd)
                self._polling_out = writing = want
            if want or not self._spin_for_message():
                sleeping = self.before_sleep
                if sleeping is not None and not want:
                    sleeping()
                events = poller.poll(self._tick(deadline) * 1000)
                if events:
                    self._spin.woke(time.perf_counter())
                elif self.check_halt is not None:
                    self.check_halt()
            else:
                events = poller.poll(0)
            readable = False
            for fd, _ in events:
                if fd == self._read_fd:
                    readable = True
                else:
                    self._blocked = False
            if readable or self._eof:
                if self._read_available():
                    return self._inbox.popleft()
            if not readable and (not events or self._eof) and self._exited():
                if self._read_available():  # a last message written just before exiting
                    return self._inbox.popleft()
                self._finish("ended")
            if deadline is not None and time.monotonic() >= deadline:
                raise ChildTimeout(timeout, "answer")
            if wall_deadline is not None and time.monotonic() >= wall_deadline:
                self._deadline_passed(wall)

    def _spin_for_message(self) -> bool:
        """Poll for up to `channel.SPIN_SECONDS` (when `channel.Spin` says it pays): True once
        the child has written something."""
        spin = self._spin
        if not spin.wanted():
            return False
        poll = self._poller.poll
        clock = time.perf_counter
        started = clock()
        until = started + channel.SPIN_SECONDS
        while clock() < until:
            if poll(0):
                spin.hit()
                return True
        spin.missed(started)
        return False

    def _read_available(self) -> bool:
        """Read what the pipe holds; True once a message is queued. EOF ends the child."""
        while True:
            try:
                data = os.read(self._read_fd, READ_CHUNK)
            except BlockingIOError:
                return bool(self._inbox)
            if not data:
                if self._inbox:
                    return True
                reason = "closed its pipe mid-frame" if self._reader.mid_frame else "closed its pipe"
                self._finish(reason)
            self._take(data)
            if self._inbox and len(data) < READ_CHUNK:
                return True  # the pipe held less than we asked for: it is empty now

    def _take(self, data: bytes) -> None:
        try:
            messages = self._reader.feed(data)
        except channel.ChannelError:
            self.kill()  # the stream cannot be resynchronized
            raise
        if self._expect_report and not self.lockdown_reported:
            messages = self._note_report(messages)
        self._inbox.extend(messages)

    def _note_report(self, messages) -> list:
        """Take the child's lockdown report (`{"op": "sandbox", "layers": ...}`, sent once before
        anything else it says after loading) into `layers`; the caller never sees it."""
        kept = []
        for message in messages:
            if not self.lockdown_reported and message.get("op") == "sandbox":
                self.lockdown_reported = True
                for name, layer in message.get("layers", {}).items():
                    known = self.layers.get(name)
                    if known is not None and not known["applied"] and not layer.get("applied"):
                        continue  # the host already knows why (no filter could be built)
                    self.layers[name] = {"applied": bool(layer.get("applied")), "detail": str(layer.get("detail", ""))}
            else:
                kept.append(message)
        return kept

    def missing_layers(self) -> list[str]:
        """The names of the isolation layers not in force for this child (see `layers`)."""
        return sorted(name for name, layer in self.layers.items() if not layer["applied"])

    @staticmethod
    def _tick(deadline: float | None) -> float:
        if deadline is None:
            return POLL_TICK
        return max(0.0, min(POLL_TICK, deadline - time.monotonic()))

    # -- ending ------------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def stderr_tail(self) -> str:
        return self._stderr.text()

    def _exited(self) -> bool:
        """Whether the child has exited, without reaping it (its pid stays reserved)."""
        if self._proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None and info.si_pid != 0

    def _reap(self) -> None:
        """Kill the whole process group (the leader may already be a zombie), then reap."""
        try:
            os.killpg(self.pid, signals.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()
        self._cleanup()

    def _finish(self, reason: str) -> None:
        """The child is ending (EOF, broken pipe, exit): wait briefly, reap, raise ChildDied."""
        deadline = time.monotonic() + EXIT_GRACE
        while not self._exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        killed_by_host = not self._exited()
        self._reap()
        returncode = self._proc.returncode
        signal = -returncode if returncode is not None and returncode < 0 else None
        if killed_by_host:
            reason += f" but did not exit within {EXIT_GRACE:g} s (the host killed it)"
        self._died = ChildDied(
            None if signal is not None else returncode, signal, self.stderr_tail(), reason,
            self._explain(signal, killed_by_host),
        )
        raise self._died

    def _explain(self, signal: int | None, killed_by_host: bool) -> str:
        tail = self.stderr_tail()
        limits = self.limits
        if "MemoryError" in tail:
            return (f"it ran out of memory under its address-space limit "
                    f"({limits.address_space_bytes} bytes); raise Limits.address_space_bytes "
                    "if the workflow legitimately needs more")
        if signal == signals.SIGXCPU:
            return (f"its CPU-time limit ({limits.cpu_seconds} s) ran out; raise "
                    "Limits.cpu_seconds if the work is legitimate, otherwise look for a loop "
                    "that never yields")
        if signal == signals.SIGKILL and not killed_by_host:
            return ("SIGKILL came from outside the host's control: the kernel's OOM killer, an "
                    "operator, or the hard CPU limit (cpu_seconds + cpu_grace_seconds)")
        if signal == signals.SIGSYS:
            return ("it made a system call the sandbox forbids (its seccomp filter, "
                    "policy.ALLOWED_SYSCALLS); generated code cannot, so report this as a sandbox bug")
        if signal == signals.SIGXFSZ:
            return "it tried to write a file; the sandbox child writes no files"
        if signal is not None and not killed_by_host:
            return "the sandbox child crashed or was killed from outside; see its stderr"
        return ""

    def _deadline_passed(self, seconds: float) -> None:
        self.kill()
        self._died = ChildDied(None, signals.SIGKILL, self.stderr_tail(), "passed its wall-clock deadline",
                               f"the host killed it after {seconds:g} s without a message")
        raise ChildDeadline(seconds)

    def _raise_if_dead(self) -> None:
        if self._died is not None:
            raise self._died
        if self._closed:
            returncode = self._proc.returncode
            signal = -returncode if returncode is not None and returncode < 0 else None
            raise ChildDied(None if signal else returncode, signal, self.stderr_tail(),
                            "was stopped by the host")

    def kill(self) -> int | None:
        """SIGKILL the child's whole process group and reap it; returns the exit status."""
        if not self._closed:
            self._reap()
        return self._proc.returncode

    def close(self, grace: float = 1.0) -> int | None:
        """Close the child's input, give it `grace` seconds to exit, then kill the group."""
        if not self._closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            deadline = time.monotonic() + grace
            while not self._exited() and time.monotonic() < deadline:
                time.sleep(0.01)
            self._reap()
        return self._proc.returncode

    def _cleanup(self) -> None:
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.join(timeout=1.0)
        if not self._stderr.is_alive():
            try:
                self._proc.stderr.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.kill()
            except Exception:  # interpreter shutdown: best effort only
                pass

    def __repr__(self) -> str:
        state = "running" if not self._exited() else f"exited {self._proc.returncode}"
        return f"<Child pid={self.pid} {state} network_isolated={self.network_isolated}>"
