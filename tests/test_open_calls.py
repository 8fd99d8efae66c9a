"""One definition of a run's open calls (flowrt/store/open_calls.py): each Call with no Reply that no
Stop closed, in the order of the Calls, whoever asks (a history view's pass, resume, run_state)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowrt.store.open_calls import OpenCalls, open_calls_among


def call(id_: str, tool: str = "t.echo") -> dict:
    return {"kind": "Call", "call": id_, "tool": tool}


def reply(id_: str) -> dict:
    return {"kind": "Reply", "call": id_}


def stop(*closed: str) -> dict:
    return {"kind": "Stop", "task": "root/1", "closed": list(closed)}


CASES = [
    ([], {}),
    ([call("a"), reply("a")], {}),
    ([call("a", "t.one"), call("b", "t.two")], {"a": "t.one", "b": "t.two"}),
    ([call("b"), call("a"), reply("b")], {"a": "t.echo"}),
    ([call("a"), call("b"), call("c"), stop("a", "c")], {"b": "t.echo"}),
    ([call("a"), {"kind": "Checkpoint"}, {"kind": "Choice"}, {"kind": "Stop", "task": "x"}], {"a": "t.echo"}),
    ([reply("x"), stop("y"), call("a")], {"a": "t.echo"}),  # (closing what was never open is nothing)
]


@pytest.mark.parametrize(("facts", "open_tools"), CASES)
def test_open_calls_of_a_history(facts, open_tools):
    calls = open_calls_among(facts)
    assert {c: f["tool"] for c, f in calls.items()} == open_tools
    assert list(calls) == list(open_tools)  # in the order of the Calls
    assert all(f["kind"] == "Call" and f["call"] == c for c, f in calls.items())


@given(st.lists(st.tuples(st.sampled_from(["reply", "stop"]), st.integers(0, 30)), max_size=40),
       st.integers(1, 30))
def test_a_pass_a_fact_at_a_time_is_the_whole_read_at_every_point(closings, calls):
    """As a host writes them: each call id once, its Reply or a Stop after its Call. At every point
    the open calls are those called and not yet closed, in the order they were called."""
    facts, closed = [], set()
    for i in range(calls):
        facts.append(call(f"c{i}"))
    for how, i in closings:
        if i < calls and f"c{i}" not in closed:
            closed.add(f"c{i}")
            facts.append(reply(f"c{i}") if how == "reply" else stop(f"c{i}"))
    calls_so_far = OpenCalls()
    called, done = [], set()
    for fact in facts:
        calls_so_far.take(fact)
        if fact["kind"] == "Call":
            called.append(fact["call"])
        else:
            done.update([fact["call"]] if fact["kind"] == "Reply" else fact["closed"])
        assert list(calls_so_far.calls) == [c for c in called if c not in done]
    assert list(calls_so_far.calls) == [f"c{i}" for i in range(calls) if f"c{i}" not in closed]
