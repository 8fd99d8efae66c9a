"""Which Python Tools a run hub may serve on its own thread: those whose calls have been quick.

A run on a thread of its own serves a Python callable's call on that thread when the program
waits on it alone (`Driver.inline`): nothing else could run meanwhile. A run hub's thread drives
every background run of the process (flowrt/run_hub.py), so a call it served that blocked would
stop them all; sent to a worker thread instead, a call costs two thread handoffs, which for a
call of a few microseconds is most of a recorded call's cost (docs/impl.md). So the hub serves a
callable itself only once its first `PROVEN_AFTER` calls have each taken under
`QUICK_SECONDS`, and never again once any call of it has taken longer: a slow Tool (a model, a
web API) is found slow on its first call, served on workers, and costs the other runs nothing.
What remains is a callable quick for its first calls that later blocks: the hub's runs wait for
that one call, once (docs/api.md).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

QUICK_SECONDS = 0.001
PROVEN_AFTER = 3

_quick: "weakref.WeakKeyDictionary[Callable, int]" = weakref.WeakKeyDictionary()
_slow: "weakref.WeakSet[Callable]" = weakref.WeakSet()
_lock = threading.Lock()


def proven_quick(fn: Callable) -> bool:
    """Whether every call of `fn` so far was quick, and there were enough of them."""
    try:
        return fn not in _slow and _quick.get(fn, 0) >= PROVEN_AFTER
    except TypeError:  # a callable that cannot be weakly referenced is never proven
        return False


def timed(fn: Callable, arguments: dict) -> Any:
    """`fn(**arguments)`, its duration noted (however it ends)."""
    started = time.perf_counter()
    try:
        return fn(**arguments)
    finally:
        note(fn, time.perf_counter() - started)


def note(fn: Callable, seconds: float) -> None:
    try:
        with _lock:
            if seconds > QUICK_SECONDS:
                _slow.add(fn)
            elif fn not in _slow:
                _quick[fn] = _quick.get(fn, 0) + 1
    except TypeError:
        pass
