"""Durable timers: the deadline of each `clock.sleep` the host serves, kept as a host record.

The host's own `std@v1/clock.sleep` is the host's to settle after a crash (DESIGN.md §3): when it
serves one, it writes `{"kind": "timer", "call": ID, "deadline": T}` (T in RFC 3339 UTC, the
wall clock) right after the Call is durable and before the sleep starts, and the sleep then
waits until T. After a crash, resume sends the sleep again under the same call id with the time
that remains until T (zero when T has passed, never negative), so a run that sleeps a day
survives a host restart. A crash between the Call and the timer record is a crash before the
sleep started: no record, and the sleep is sent again for its whole duration.

A run whose only open calls are sleeps (and calls left pending) needs no process while it
waits: a host asked to (`park_after`) lets go of it with a `sleeping` host decision naming the
earliest deadline, and `flow resume` or a worker (`flowrt.worker`) wakes it then.

Everything here is about the host's records, never the history: the Call's arguments stay
those the program passed, and replay serves the recorded Reply as for any Tool.
"""

from __future__ import annotations

import time
from typing import Iterable

from flowdata.values import Duration, Instant, duration_text, instant_text, parse_duration, parse_instant

SLEEP = "std@v1/clock.sleep"
NOW = "std@v1/clock.now"
#: a `park_after` that parks whatever the deadline (a host that stops lets go of sleeping runs)
ANY_TIME = -(1 << 62)


def now_ns() -> int:
    return time.time_ns()


def deadline_of(arguments: dict, started_ns: int) -> int:
    """The deadline of a sleep for `d` started at `started_ns` (a negative `d` is due at once)."""
    try:
        nanos = parse_duration(arguments.get("d", "PT0S")).nanos
    except (ValueError, AttributeError, TypeError):
        nanos = 0  # the child sends canonical Durations; anything else sleeps not at all, as before
    return started_ns + max(0, nanos)


def timer_record(call_id: str, deadline_ns: int) -> dict:
    return {"kind": "timer", "call": call_id, "deadline": instant_text(Instant(deadline_ns))}


def recorded_deadlines(records: Iterable[dict]) -> dict[str, int]:
    """Each call's deadline by its latest `timer` record (a resend after a lost record writes
    one anew); a record whose deadline does not read is ignored, so the sleep is sent whole."""
    out: dict[str, int] = {}
    for record in records:
        if record.get("kind") != "timer" or not isinstance(record.get("call"), str):
            continue
        try:
            out[record["call"]] = parse_instant(record.get("deadline")).nanos
        except (ValueError, TypeError):
            continue
    return out


def remaining_ns(deadline_ns: int, at_ns: int | None = None) -> int:
    """The time left until `deadline_ns`: zero once it has passed, never negative."""
    return max(0, deadline_ns - (now_ns() if at_ns is None else at_ns))


def remaining_text(deadline_ns: int, at_ns: int | None = None) -> str:
    return duration_text(Duration(remaining_ns(deadline_ns, at_ns)))


def deadline_text(deadline_ns: int) -> str:
    return instant_text(Instant(deadline_ns))


def parked_until(open_calls: dict[str, dict], deadlines: dict[str, int], park_after_ns: int | None,
                 at_ns: int | None = None) -> int | None:
    """The earliest deadline, when the run can be let go of now: at least one open call is a
    timer, every other is pending, and the earliest timer is due more than `park_after_ns` from
    now. None otherwise (or when parking was not asked for)."""
    if park_after_ns is None or not open_calls:
        return None
    due = [deadlines[c] for c in open_calls if c in deadlines]
    if not due:
        return None
    if any(c not in deadlines and not entry["pending"] for c, entry in open_calls.items()):
        return None
    earliest = min(due)
    if earliest - (now_ns() if at_ns is None else at_ns) <= park_after_ns:
        return None
    return earliest


def sleeping_record(head: str | None, until_ns: int, timers: dict[str, int], pending: list[str]) -> dict:
    """The `sleeping` host decision: the run waits only on `timers` (and on `pending` calls),
    holding no process, until `until`, the earliest deadline."""
    return {"kind": "sleeping", "head": head, "until": deadline_text(until_ns),
            "timers": [{"call": c, "deadline": deadline_text(d)} for c, d in sorted(timers.items())],
            "pending": sorted(pending)}


def decision_until(decision: dict) -> int | None:
    """A `sleeping` decision's `until` in nanoseconds, or None when it does not read."""
    try:
        return parse_instant(decision.get("until")).nanos
    except (ValueError, TypeError):
        return None


def seconds_ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1_000_000_000)
