"""Launching the sandbox child: its command line, environment, limits and the host's duty to kill it.

`start()` runs `sys.executable <flags> -m sandbox.child` (or a script, for tests) as a process
that shares nothing it does not need with the host; `flowrt.sandbox_process.Child.start` calls it
and then talks to the process it returns. The launch gives the child:

- environment: exactly `policy.CHILD_ENV` plus `PYTHONPATH` pointing at this checkout and at
  the directories of the packages the child imports (nothing is inherited; the flags are `-I`
  minus `-E`, plus `-S`: no `site`, no `.pth` files run; see `policy.CHILD_PYTHON_FLAGS` and
  `child_path()`);
- working directory: a fresh empty temporary directory, removed when the child is reaped;
- file descriptors: fd 0, 1 and 2 are pipes (the framed channel and stderr, which
  `sandbox_process` reads); nothing else is inherited (`close_fds`);
- its own session and process group, so a kill takes every process the child started;
- resource limits (`policy.LIMITS`: address space, CPU, file size, open files, processes, core)
  and `PR_SET_NO_NEW_PRIVS`, set in `preexec_fn` between fork and exec;
- where the kernel allows it, a new, empty network namespace (`unshare(CLONE_NEWNET)`); whether
  it took is read back from `/proc/<pid>/ns/net` into `Launched.network_isolated`;
- `PR_SET_PDEATHSIG` (SIGKILL), so the child dies with the host even when the host is SIGKILLed;
  the host also kills every child's group when it exits (atexit) or gets SIGTERM (`own`,
  `kill_all`);
- on its command line, what it needs for its own lockdown once it has loaded (`sandbox.lockdown`:
  uid, user namespace, no capabilities, Landlock, and a seccomp filter built here by
  `flowrt.syscall_filter`); `FLOW_SANDBOX_WITHOUT` leaves layers out (`layers_left_out`).

The child writes no files, so the bytecode caches of the modules only it imports are written
here, where this interpreter writes bytecode at all (`compile_for_child`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal as signals
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass

import flowdata
from flowdata.policy import (
    CHILD_ENV,
    CHILD_PACKAGES,
    CHILD_PYTHON_FLAGS,
    CHILD_SOURCE_PACKAGES,
    CHILD_UID,
    Limits,
)

SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(flowdata.__file__)))
CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1


#: the `Launched.origin` of a child started as an interpreter of its own
STARTED_ORIGIN = "its own interpreter, started for it"


@dataclass
class Launched:
    """A child process just started, and what the host knows about its isolation so far."""

    proc: subprocess.Popen  # or flowrt.child_template.ForkedProcess, which acts as one
    workdir: str
    argv: list[str]
    network_isolated: bool
    #: layer -> {"applied": bool, "detail": text}: the host's own layers (process group,
    #: network, parent death, rlimits, wall clock; seccomp when no filter could be built)
    layers: dict
    #: the wall-clock deadline (`wall_seconds`), None for none
    wall: float | None
    #: whether the child was asked to lock itself down (and so will report its layers)
    lockdown: bool
    #: how the process came to be: its own interpreter, or forked from the child template
    origin: str = STARTED_ORIGIN


@dataclass(frozen=True)
class Plan:
    """What a child started now gets, read from `limits` and the environment once: its command
    line (the lockdown's part names the process the child must find as its parent), its limits
    and what is left out. A forked child (flowrt/child_template.py) follows the same plan."""

    target: tuple  # after the interpreter's flags: ("-m", module) or a script and its arguments
    lockdown: bool
    lockdown_args: tuple  # uid, filter (hex), without: after "--lockdown PARENT_PID"
    without: frozenset
    wall: float | None
    rlimits: tuple  # (resource, (soft, hard)) pairs
    seccomp_problem: str

    def argv(self, parent_pid: int) -> list[str]:
        """The child's whole command line, with `parent_pid` as the parent its lockdown checks."""
        tail = list(self.target)
        if self.lockdown:
            tail += ["--lockdown", str(parent_pid), *self.lockdown_args]
        return [sys.executable, *CHILD_PYTHON_FLAGS, *tail]


def plan(main_module: str, limits: Limits, *, argv_tail: list[str] | None = None,
         lockdown: bool | None = None) -> Plan:
    """The plan for a child of `-m main_module`, or of `argv_tail` (see `start`)."""
    without = layers_left_out()
    target = tuple(argv_tail) if argv_tail is not None else ("-m", main_module)
    if lockdown is None:
        lockdown = argv_tail is None
    lockdown_args: tuple = ()
    problem = ""
    if lockdown:
        from flowrt import syscall_filter

        program, problem = ((b"", "left out on purpose (FLOW_SANDBOX_WITHOUT)") if "seccomp" in without
                            else syscall_filter.program())
        lockdown_args = (str(CHILD_UID), program.hex(), ",".join(sorted(without)))
    return Plan(target, lockdown, lockdown_args, without, wall_seconds(limits), tuple(_rlimits(limits)), problem)


def start(main_module: str, limits: Limits, *, argv_tail: list[str] | None = None,
          lockdown: bool | None = None, how: Plan | None = None) -> Launched:
    """Launch the child: `-m main_module`, or `argv_tail` (e.g. [script path, args...]).
    `lockdown` (default: only for `-m`) passes the child what it needs to lock itself down
    (`sandbox.lockdown.parse_argv`), which a test script may also use. `how`: the `plan` of
    those, when the caller has made it already."""
    if how is None:
        how = plan(main_module, limits, argv_tail=argv_tail, lockdown=lockdown)
    argv = how.argv(os.getpid())
    env = child_env()
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
            preexec_fn=_make_preexec(list(how.rlimits), how.without),
            bufsize=0,
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    _take_responsibility()
    return launched(how, proc, workdir, argv, network_isolated(proc.pid))


def network_isolated(pid: int) -> bool:
    """Whether process `pid` is in a network namespace other than this process's, as read back
    from /proc (false where either cannot be read)."""
    own_namespace = _net_namespace("self")
    theirs = _net_namespace(pid)
    return own_namespace is not None and theirs is not None and own_namespace != theirs


def child_env() -> dict:
    """The child's environment, entire (`policy.CHILD_ENV` and its PYTHONPATH)."""
    env = dict(CHILD_ENV)
    env["PYTHONPATH"] = child_path()
    return env


def launched(how: Plan, proc, workdir: str, argv: list[str], isolated: bool,
             origin: str = STARTED_ORIGIN) -> Launched:
    """The `Launched` of a child started by `how`: `proc` is its process (a Popen, or what
    flowrt/child_template.py gives for a forked one) and the layers the host holds for it."""
    without, wall = how.without, how.wall
    proc_started_here = origin == STARTED_ORIGIN
    layers = {
        "process_group": {"applied": True, "detail": f"its own session and group {proc.pid}, killed with it"},
        "network": {"applied": isolated, "detail": "a new network namespace (loopback only)" if isolated else
                    "missing: " + ("left out on purpose (FLOW_SANDBOX_WITHOUT)" if "network" in without
                                   else "unshare(CLONE_NEWNET) was refused")},
        "parent_death": {"applied": _PRCTL is not None and "parent_death" not in without,
                         "detail": ("SIGKILL when the host exits (armed before exec)" if proc_started_here
                                    else "SIGKILL when the template exits, which dies with the host (armed at the fork)")
                         if _PRCTL is not None and "parent_death" not in without else
                         "missing: " + ("left out on purpose (FLOW_SANDBOX_WITHOUT)"
                                        if "parent_death" in without else "no prctl")},
        "rlimits": {"applied": True, "detail": ", ".join(
            f"{_RLIMIT_NAMES.get(which, which)}={soft}" for which, (soft, _) in how.rlimits)},
        "wall_clock": {"applied": wall is not None,
                       "detail": f"killed after {wall:g} s without a message" if wall is not None
                       else "missing: no deadline (FLOW_SANDBOX_WALL_SECONDS=0 or Limits.wall_seconds=None)"},
    }
    if how.lockdown and "seccomp" not in without and how.seccomp_problem:
        layers["seccomp"] = {"applied": False, "detail": f"missing: {how.seccomp_problem}"}
    return Launched(proc, workdir, argv, isolated, layers, wall, how.lockdown, origin)


# -- between fork and exec ----------------------------------------------------------------------

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


def settings(limits: Limits) -> tuple:
    """What a child started now takes from `limits` and the environment, as the launch reads
    them: two children started under equal settings are alike (flowrt/spare_child.py)."""
    return (limits, layers_left_out(), wall_seconds(limits))


# -- children this host is responsible for ------------------------------------------------------

#: every child not yet reaped: killed when the host exits or is told to terminate
_LIVE: weakref.WeakSet = weakref.WeakSet()  # of `sandbox_process.Child`
_SPARE: weakref.WeakSet = weakref.WeakSet()  # those of _LIVE started ahead of a run, waiting for it
_TERM_HANDLER_SET = False


def own(child) -> None:
    """Count `child` (anything with the `pid` of its process group) among this host's children."""
    _LIVE.add(child)


def disown(child) -> None:
    """`child` has been reaped: nothing is left to kill."""
    _LIVE.discard(child)
    _SPARE.discard(child)


def set_aside(child) -> None:
    """`child` is a spare waiting for a run (flowrt/spare_child.py): not one this host drives."""
    _SPARE.add(child)


def in_use(child) -> None:
    """A spare has been handed to a run."""
    _SPARE.discard(child)


def others_live() -> bool:
    """Whether this host has more than one child not yet reaped (it drives several runs)."""
    return live_count() > 1


def live_count() -> int:
    """How many children this host has not yet reaped, spares not counted (the runs it drives).
    (Their weak references counted directly: `WeakSet.__len__` is a Python call, and this is
    asked twice a recorded call; a reference whose child is gone leaves the set at once, except
    while the set is iterated, which only the exit's kill does.)"""
    return len(_LIVE.data) - len(_SPARE.data)


def crowded(live: int) -> bool:
    """Whether `live` children (`live_count`) are more than this process's CPUs: then a child
    woken cannot have a CPU of its own, and should wait for one (`schedule_as_batch`)."""
    return live > _CPUS


def schedule_as_batch(pid: int, batch: bool) -> None:
    """Schedule child `pid` as SCHED_BATCH (`batch`) or as usual (SCHED_OTHER). A host that
    drives more runs than there are CPUs (`crowded`) wakes a child with every reply it writes;
    as usual, the child woken preempts the host on its CPU, and the host's other runs wait for
    it. As a batch process it waits for a CPU instead: with one host driving 20 runs on 2 cores,
    20,000 calls/s against 15,000, and less CPU per call on both sides (docs/impl.md, session
    14). Uncrowded, a child is scheduled as usual: with 2 runs on 2 cores a batch child cost 8%,
    and beside a CPU hog a single run's child would wait behind it too (a call 15% slower). No
    privilege is needed for a child of the host's own user; where the change is refused (a root
    host without CAP_SYS_NICE and a child run as nobody), nothing changes."""
    try:
        os.sched_setscheduler(pid, _SCHED_BATCH if batch else os.SCHED_OTHER, _NO_PRIORITY)
    except (OSError, AttributeError, TypeError):
        pass


_SCHED_BATCH = getattr(os, "SCHED_BATCH", None)
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_NO_PRIORITY = os.sched_param(0) if hasattr(os, "sched_param") else None


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


def compile_for_child() -> None:
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

