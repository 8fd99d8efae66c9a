"""Sandbox children a finished run let go of, reaped on a thread of their own (`let_go`, the one
entry).

When a run has ended, its outcome is durable and its child has nothing left to say; the child's
exit is still ~2 ms of this machine's time a run (the kernel tears down its network namespace,
and a forked child's exit reaches the host through its template). The run's caller need not wait
for that: the child's whole process group is sent SIGKILL on the run's own thread, so nothing of
it runs on, and the reap (its pid kept reserved until then, as for any kill) and the removal of
its working directory happen here. A process that exits first waits for the reaps still pending,
for at most `EXIT_WAIT` seconds (docs/impl.md, "Session 11").
"""

from __future__ import annotations

import atexit
import os
import queue
import threading

#: seconds an exiting host waits for children it let go of to be reaped
EXIT_WAIT = 5.0

_pending: "queue.SimpleQueue" = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None
_idle = threading.Event()
_idle.set()
_count = 0  # children handed over and not yet reaped


def _forget() -> None:
    """In a process forked from a host: the parent's children are the parent's to reap, and its
    reaper thread and locks were not copied in a usable state."""
    global _pending, _lock, _thread, _idle, _count
    _pending, _lock, _thread, _count = queue.SimpleQueue(), threading.Lock(), None, 0
    _idle = threading.Event()
    _idle.set()


os.register_at_fork(after_in_child=_forget)
atexit.register(lambda: wait_for_reaps(EXIT_WAIT))  # at once when nothing is pending


def let_go(child) -> None:
    """Reap `child` (whose group has been sent SIGKILL, see `Child.let_go`) on the reaper thread:
    `child.kill()` there waits for the exit and cleans up after it."""
    global _thread, _count
    with _lock:
        _count += 1
        _idle.clear()
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_reap_forever, name="sandbox-reaper", daemon=True)
            _thread.start()
    _pending.put(child)


def wait_for_reaps(seconds: float) -> bool:
    """Wait until every child let go of so far is reaped, at most `seconds`; whether they are."""
    return _idle.wait(seconds)


def _reap_forever() -> None:
    global _count
    while True:
        child = _pending.get()
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - one child's cleanup failing must not stop the others'
            pass
        with _lock:
            _count -= 1
            if _count == 0:
                _idle.set()


def children_cpu_seconds() -> float:
    """CPU seconds of this process's sandbox children that have ended, for benchmarks: the
    children let go of are reaped first (a child still pending would count later, in the next
    figure), a started child's CPU is in `RUSAGE_CHILDREN`, and a forked one's in what its
    template reaped (`child_template.reaped_cpu_seconds`)."""
    import resource

    from flowrt import child_template

    wait_for_reaps(EXIT_WAIT)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return reaped.ru_utime + reaped.ru_stime + child_template.reaped_cpu_seconds()
