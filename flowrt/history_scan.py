"""One pass over a run's facts in order, for the views that show part of a history (`flow
history`, MCP's `history`, the Python API's `Host.history`): each fact is handed to the view as
it is verified, and the store has back the facts passed, so a view of a long run holds what it
shows, not the run (a store opened with `defer` verifies as the pass goes; by its end everything
is verified, before the view shows anything).

What every view needs besides its own selection is gathered on the way: the number of facts,
the last one, the open calls (`flowrt.store.open_calls`, for `run_state`) and each Call's number
(a Reply's duration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from flowrt.store.open_calls import OpenCalls
from flowrt.store import RunLog, StorageError

#: the pass lets the store have back the facts it has passed every this many facts
RELEASE_EVERY = 4096


@dataclass(frozen=True)
class Scanned:
    count: int
    last: dict | None
    open_calls: dict[str, dict]
    call_facts: dict[str, int]


def scan_history(store: RunLog, visit: Callable[[dict], None]) -> Scanned:
    """Hand every fact of `store` to `visit`, in order. A StorageError is the run's damage. When
    `visit` fails otherwise, the rest of the history is verified first, so that damage further on
    is what the caller reports, not a fact the view could not take."""
    open_calls = OpenCalls()
    call_facts: dict[str, int] = {}
    index, last = 0, None
    try:
        while (fact := store.fact_at(index)) is not None:
            index += 1
            last = fact
            if fact["kind"] == "Call":
                call_facts[fact.get("call")] = fact["n"]
            open_calls.take(fact)
            visit(fact)
            if index % RELEASE_EVERY == 0:
                store.release_before(index - 1)
    except Exception as problem:
        if not isinstance(problem, StorageError):
            store.verify()
        raise
    return Scanned(index, last, open_calls.calls, call_facts)
