"""A sandbox child kept after its run for the next run of the same program (`KeptChildren`, held
by `flowrt.spare_child.SpareChild`; `keep` and `take` are its entries).

A short run spends most of its CPU on its child's life, not its calls: the fork from the child
template, a thousand copy-on-write page faults, the load of the program, the lockdown, the exit
(200 runs of 3 calls through one Host: 6.9 ms of the children's CPU a run against 2.5 of the
host's; docs/impl.md, session 16). A child that has run a program to its End has the program
loaded and the process locked down; a host driving run after run of the same program (an
application starting a run a request, a worker, `flow mcp`) hands it the next one.

What the next run meets is what a fresh child would give it:

- the same program, byte for byte: the host keys kept children by the program's identity and the
  launch's settings, and the child itself ends rather than run another program's load
  (sandbox/child.py);
- nothing of the run before: generated code stores into nothing (no item, attribute or global
  store compiles, docs/sandbox.md), so the loaded modules hold functions and constants only, and
  every run has its own scheduler, tasks, wire and values; the child collects the last run's
  garbage before the next;
- its limits, but for CPU: `RLIMIT_CPU` counts the child's whole life, so a child is kept only
  while it has used less than `KEEP_CPU_SECONDS` (a run in a kept child may use 300 s less that,
  of the limit's 300); and only while it is smaller than `KEEP_RESIDENT_BYTES`, and for at most
  `KEEP_RUNS` runs.

`FLOW_SANDBOX_KEEP=0` keeps none (every run its own child, as before). Only a live run that
reached its End with the child healthy gives its child back: a child that
died, was killed (a deadline, a halt), or is mid-message is let go as before. Replays, resumes
and `flow test` never take a kept child. A kept child waits for its next run asleep, counted
among this host's children but not among the runs it drives (`sandbox_launch.set_aside`), at most
`limit` of them; `close()` kills them."""

from __future__ import annotations

import os
import threading
import weakref

from flowdata.policy import LIMITS, Limits
from flowrt import sandbox_launch as launch

#: A child that has used this much CPU is let go after its run (`RLIMIT_CPU` is per process).
KEEP_CPU_SECONDS = 2.0
#: ... or holds this much memory (a run's garbage leaves the allocator's arenas larger).
KEEP_RESIDENT_BYTES = 96 << 20
#: ... or has served this many runs.
KEEP_RUNS = 500
#: Kept children waiting at once, per `KeptChildren` (a host's runs end and start in bursts).
KEEP_IDLE = 4
#: Set to 0, every run's child is let go after it, as before children were kept.
KEEP_VARIABLE = "FLOW_SANDBOX_KEEP"

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
_ALL: "weakref.WeakSet[KeptChildren]" = weakref.WeakSet()


def kept_cpu_seconds() -> float:
    """CPU seconds the children kept in this process have used so far, for benchmarks: a kept
    child is reaped (and its CPU counted with the reaped ones) only once it is let go."""
    return cpu_seconds_of(child for kept in list(_ALL) for child in kept.children())


def cpu_seconds_of(children) -> float:
    """CPU seconds the live `children` have used so far (one gone meanwhile counts none)."""
    total = 0.0
    for child in children:
        used = usage(child.pid)
        total += used[0] if used is not None else 0.0
    return total


def usage(pid: int) -> tuple[float, int] | None:
    """CPU seconds and resident bytes of process `pid` (single-threaded: a sandbox child), or
    None if it is gone. The CPU from `/proc/<pid>/sched` (microseconds) where the kernel has it,
    else `stat`'s 10 ms ticks (more than a short run takes)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            resident = int(statm.read().split()[1]) * _PAGE
        try:
            with open(f"/proc/{pid}/sched") as sched:
                for line in sched:
                    if line.startswith("se.sum_exec_runtime"):
                        return float(line.split(":")[1]) / 1e3, resident
        except (FileNotFoundError, IndexError, ValueError):
            pass
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK, resident
    except (OSError, IndexError, ValueError):
        return None


class KeptChildren:
    """Children kept after their runs, by program; thread-safe."""

    def __init__(self, limits: Limits = LIMITS, limit: int | None = None) -> None:
        self.limits = limits
        self.limit = KEEP_IDLE if limit is None else limit
        self._lock = threading.Lock()
        self._kept: list[tuple[str, tuple, object]] = []  # (program, launch settings, child), oldest first
        self._closed = False
        #: runs handed a kept child (tests, benchmarks)
        self.reused = 0
        _ALL.add(self)

    def children(self) -> list:
        """The children kept now."""
        with self._lock:
            return [child for _, _, child in self._kept]

    def keep(self, child, program: str) -> bool:
        """Keep `child`, whose run of `program` has just ended cleanly, for the next run of it;
        False (the caller lets it go) when it cannot be kept."""
        if self._closed or self.limit < 1 or os.environ.get(KEEP_VARIABLE) == "0" or not _healthy(child):
            return False
        evicted = None
        with self._lock:
            if self._closed:
                return False
            if len(self._kept) >= self.limit:
                evicted = self._kept.pop(0)[2]
            self._kept.append((program, launch.settings(self.limits), child))
            launch.set_aside(child)
        child.clear_stderr()  # (what a later run's fault shows is its own)
        if evicted is not None:
            evicted.let_go()
        return True

    def take(self, program: str):
        """A child kept after a run of `program` under today's settings, handed over (the
        caller owns it), or None."""
        settings = launch.settings(self.limits)
        while True:
            with self._lock:
                index = next((i for i, (p, s, _) in enumerate(self._kept) if p == program and s == settings), None)
                if index is None:
                    return None
                child = self._kept.pop(index)[2]
            if child._exited():  # (died while it waited: nothing of a run was lost)
                child.let_go()
                continue
            launch.in_use(child)
            child.runs += 1
            if child.first_origin is None:
                child.first_origin = child.origin
            earlier = f"{child.runs} run{'s' if child.runs > 1 else ''}"
            child.origin = f"{child.first_origin}; kept for this run after {earlier} of the same program"
            with self._lock:
                self.reused += 1
            return child

    def close(self) -> None:
        """Kill the kept children and keep no more."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, []
        for _, _, child in kept:
            child.let_go()


def _healthy(child) -> bool:
    """Whether `child` is as its run left it after a clean End and within the keeping bounds."""
    if not child.idle() or child.runs + 1 >= KEEP_RUNS:
        return False
    used = usage(child.pid)
    return used is not None and used[0] < KEEP_CPU_SECONDS and used[1] < KEEP_RESIDENT_BYTES
