"""When facts landed, as the views show it: `acceptedAt` (RFC 3339 UTC, milliseconds) on each fact
whose time the store recorded, and `durationMs` (Call to Reply, wall clock) on each Reply whose
Call's time is known too. Times are host records (`RunLog.fact_times`): never facts, never seen by
the program, and so never part of a replay; a view simply leaves out what is not known."""

from __future__ import annotations

from flowrt.store.format import rfc3339_ms as accepted_at


class CallClock:
    """Adds times to fact rows in order, remembering when each call was made, so that a Reply
    row gets its call's duration (a live feed meets the Call before the Reply)."""

    def __init__(self) -> None:
        self.called: dict[str, int] = {}  # call id -> ms of its Call

    def note(self, fact: dict, times: dict[int, int]) -> None:
        """`fact` goes by unshown: only a Call's time is kept, for its Reply's duration."""
        if fact["kind"] == "Call":
            ms = times.get(fact["n"])
            if ms is not None:
                self.called[fact["call"]] = ms

    def stamp(self, row: dict, fact: dict, times: dict[int, int]) -> dict:
        """`row` (a fact as a view shows it) with `acceptedAt`, and for a Reply `durationMs`,
        where known."""
        ms = times.get(fact["n"])
        if ms is not None:
            row["acceptedAt"] = accepted_at(ms)
        kind = fact["kind"]
        if kind == "Call" and ms is not None:
            self.called[fact["call"]] = ms
        elif kind == "Reply" and ms is not None:
            made = self.called.get(fact["call"])
            if made is not None:
                row["durationMs"] = max(0, ms - made)
        return row


def run_times(times: dict[int, int], last_n: int | None) -> dict:
    """`startedAt` (fact 1) and `lastActivityAt` (the latest fact with a known time) of a run."""
    started = times.get(1)
    known = [n for n in times if last_n is None or n <= last_n]
    latest = times[max(known)] if known else None
    return {"startedAt": accepted_at(started) if started is not None else None,
            "lastActivityAt": accepted_at(latest) if latest is not None else None}


def duration_text(ms: int) -> str:
    """A duration for people: `850 ms`, `12.4 s`, `3 min 05 s`, `2 h 07 min`."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
