"""Which calls of a run are open: each Call with no Reply that no Stop closed, in the order of the
Calls. One definition, taken a fact at a time in the history's order, for every reader: a pass
over the facts that shows them (`flowrt.history_scan`), resume and the API's answers
(`flowrt.replay.open_calls`), and a run's state (`flowrt.run_state`)."""

from __future__ import annotations

from typing import Iterable


class OpenCalls:
    """The open calls so far: `tools` maps each open call's id to its Tool, in the order of their
    Calls. `take` each fact in order."""

    __slots__ = ("tools",)

    def __init__(self) -> None:
        self.tools: dict[str, str | None] = {}

    def take(self, fact: dict) -> None:
        kind = fact["kind"]
        if kind == "Call":
            self.tools[fact.get("call")] = fact.get("tool")
        elif kind == "Reply":
            self.tools.pop(fact.get("call"), None)
        elif kind == "Stop":
            for closed in fact.get("closed", ()):
                self.tools.pop(closed, None)


def open_tools_among(facts: Iterable[dict]) -> dict[str, str | None]:
    """The open calls of a run whose facts these are (call id -> Tool, in the order of the Calls)."""
    calls = OpenCalls()
    take = calls.take
    for fact in facts:
        take(fact)
    return calls.tools
