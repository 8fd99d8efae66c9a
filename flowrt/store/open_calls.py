"""Which calls of a run are open: each Call with no Reply that no Stop closed, in the order of the
Calls. One definition, taken a fact at a time in the history's order, for every reader: a store
that goes through a run's facts as it opens it for appending (`RunLog.open_calls`), a pass over
the facts that shows them (`flowrt.history_scan`), resume and the API's answers
(`flowrt.replay.open_calls`), and a run's state (`flowrt.run_state`)."""

from __future__ import annotations

from typing import Iterable


class OpenCalls:
    """The open calls so far: `calls` maps each open call's id to its Call fact, in the order of
    the Calls. `take` each fact in order."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: dict[str, dict] = {}

    def take(self, fact: dict) -> None:
        kind = fact["kind"]
        if kind == "Call":
            self.calls[fact.get("call")] = fact
        elif kind == "Reply":
            self.calls.pop(fact.get("call"), None)
        elif kind == "Stop":
            for closed in fact.get("closed", ()):
                self.calls.pop(closed, None)


def open_calls_among(facts: Iterable[dict]) -> dict[str, dict]:
    """The open calls of a run whose facts these are: call id -> its Call fact, in order."""
    calls = OpenCalls()
    take = calls.take
    for fact in facts:
        take(fact)
    return calls.calls
