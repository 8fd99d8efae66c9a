"""Which Python Tools a run hub may serve on its own thread: those whose calls have been quick.

A run on a thread of its own serves a Python callable's call on that thread when the program
waits on it alone (`Driver.inline`): nothing else could run meanwhile. A run hub's thread drives
every background run of the process (flowrt/run_hub.py), so a call it served that blocked would
stop them all; sent to a worker thread instead, a call costs two thread handoffs, which for a
call of a few microseconds is most of a recorded call's cost (docs/impl.md). So the hub serves a
callable itself only once its first `PROVEN_AFTER` calls have each taken under
`QUICK_SECONDS`, and never again once a second call of it has taken longer within
`SLOW_AGAIN_WITHIN` calls of another: a slow Tool (a model, a web API) is found slow on its first
call, served on workers, and costs the other runs nothing. One slow call alone does not make a
proven callable slow: on a machine with more runnable processes than CPUs the hub's thread is
now and then put aside for over a millisecond in the middle of a call of a few microseconds
(measured: once in ~55,000 calls with 20 runs on 2 cores, and from then on every call of that
process went to a worker, each with a reply that came later than the run's wait). What remains
is a callable quick for its first calls that later blocks: the hub's runs wait for its first
two such calls (docs/api.md).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

QUICK_SECONDS = 0.001
PROVEN_AFTER = 3
#: A proven callable is slow for good once a call takes longer than QUICK_SECONDS within this many
#: calls of the last one that did.
SLOW_AGAIN_WITHIN = 1000


class Record:
    """One callable's calls so far: how many were quick (counted up to `PROVEN_AFTER`), whether
    it is slow (for good), how many calls it has had and the number of its last slow one.
    Updated without a lock: a count lost to a race moves a call's count by one, and `slow` is
    only ever set."""

    __slots__ = ("quick", "slow", "calls", "slow_at")

    def __init__(self) -> None:
        self.quick = 0
        self.slow = False
        self.calls = 0
        self.slow_at: int | None = None

    @property
    def proven(self) -> bool:
        return not self.slow and self.quick >= PROVEN_AFTER

    def timed(self, fn: Callable, arguments: dict) -> Any:
        """`fn(**arguments)`, its duration noted (however it ends)."""
        started = time.perf_counter()
        try:
            return fn(**arguments)
        finally:
            self.calls += 1
            if time.perf_counter() - started > QUICK_SECONDS:
                last = self.slow_at
                if self.quick < PROVEN_AFTER or (last is not None and self.calls - last <= SLOW_AGAIN_WITHIN):
                    self.slow = True
                self.slow_at = self.calls
            elif self.quick < PROVEN_AFTER:
                self.quick += 1


_records: "weakref.WeakKeyDictionary[Callable, Record]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def record_of(fn: Callable) -> Record:
    """The process's record of `fn` (the same for every binding of it); a callable that cannot
    be weakly referenced gets one of its own per call, so it is never proven."""
    try:
        record = _records.get(fn)
        if record is None:
            with _lock:
                record = _records.setdefault(fn, Record())
        return record
    except TypeError:
        return Record()


def never_quick(fn: Callable) -> None:
    """Never serve `fn` on a hub's thread, however quick its calls: each waits on another thread
    (an `async def` Tool waits for the application's event loop, `AsyncHost`), which a busy
    loop can hold up for as long as it likes."""
    record_of(fn).slow = True
