"""A sandbox child serving several runs of one program, a lane each (sandbox/lanes.py).

Each test starts a real child through `flowrt.sandbox_process.Child` (locked down as for any run)
and speaks the lanes protocol to it from the test, standing in for the host: the loads, the
replies in whatever order the test picks, and what the child says back, lane by lane."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from flowrt.run import load_message, prepare
from flowrt.sandbox_process import Child, ChildDied

PROGRAM = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""

OTHER = PROGRAM.replace("acc + echo(n)", "acc + echo(n) * 2")


def base_load(tmp_path, source: str = PROGRAM) -> dict:
    program = tmp_path / "echo.flow"
    program.write_text(source)
    prepared = prepare(str(program), "main", '{"n": 1}', python_tools={"echo.echo": lambda n: n})
    load = load_message(prepared)
    load["checkpoints"] = "every"
    return load


def run_load(base: dict, n: int, lane: int | None = None) -> dict:
    load = dict(base, args=[n])
    if lane is not None:
        load["lane"] = lane
    return load


def echo_reply(call: dict) -> dict:
    reply = {"op": "reply", "id": call["id"], "outcome": {"Ok": call["arguments"]["n"]}}
    if "lane" in call:
        reply["lane"] = call["lane"]
    return reply


def answer_until_ended(child: Child, runs: int, answer=echo_reply) -> tuple[dict, list[int]]:
    """Answer every call (`answer(call)`) until `runs` lanes have ended: each lane's outcome, and
    the lane of every message, in the order they came."""
    ends, lanes_seen = {}, []
    while len(ends) < runs:
        message = child.recv(timeout=10)
        lanes_seen.append(message["lane"])
        if message["op"] == "call":
            child.post(answer(message))
        elif message["op"] == "end":
            ends[message["lane"]] = message["outcome"]
    return ends, lanes_seen


def said_alone(base: dict, n: int) -> list[dict]:
    """What a child running the run alone says, every message in order (the lockdown's report
    aside, which `Child` takes)."""
    with Child.start() as child:
        child.send(run_load(base, n))
        said = []
        while True:
            message = child.recv(timeout=10)
            said.append(message)
            if message["op"] == "call":
                child.post(echo_reply(message))
            elif message["op"] == "end":
                return said


def test_three_lanes_run_side_by_side_and_each_ends_as_it_would_alone(tmp_path):
    base = base_load(tmp_path)
    with Child.start() as child:
        for lane, n in enumerate((5, 3, 7)):
            child.send(run_load(base, n, lane))
        ends, lanes_seen = answer_until_ended(child, 3)
        assert ends == {0: {"Completed": 15}, 1: {"Completed": 6}, 2: {"Completed": 28}}
        assert child.lockdown_reported and child.layers["seccomp"]["applied"]
        # The lanes took turns: each lane's first call came before any lane's second.
        assert lanes_seen[:3] == [0, 1, 2]


def test_a_lane_whose_run_faults_leaves_the_others_running(tmp_path):
    base = base_load(tmp_path)
    with Child.start() as child:
        child.send(run_load(base, 3, 0))
        child.send(run_load(base, 3, 1))

        def failing_in_lane_1(call: dict) -> dict:
            reply = echo_reply(call)
            if call["lane"] == 1:
                reply["outcome"] = {"Err": {"Unknown": "the service went away"}}
            return reply

        ends = answer_until_ended(child, 2, failing_in_lane_1)[0]
        assert ends[0] == {"Completed": 6}
        assert ends[1]["Faulted"]["kind"] == "tool-problem"
        assert "the service went away" in ends[1]["Faulted"]["message"]


def test_a_lane_takes_another_run_once_its_run_has_ended(tmp_path):
    base = base_load(tmp_path)
    with Child.start() as child:
        pid = child.pid
        for n in (2, 4):
            child.send(run_load(base, n, 0))
            assert answer_until_ended(child, 1)[0] == {0: {"Completed": n * (n + 1) // 2}}
        assert child.pid == pid


@pytest.mark.parametrize("change", [
    {"replay": True},
    {"start": {"checkpoint": 1}},
    {"lane": 0},  # still running
    {"lane": -1},
    {"lane": "1"},
    {"modules": "another program"},
])
def test_a_load_that_does_not_fit_beside_the_lanes_ends_the_child(tmp_path, change):
    """Another program, a replay, a resume, or a lane still running: the child ends rather than
    run it beside the others (the host gives those a child of their own)."""
    base = base_load(tmp_path)
    if change.get("modules") == "another program":
        change = {"modules": base_load(tmp_path, OTHER)["modules"]}
    with Child.start() as child:
        child.send(run_load(base, 3, 0))
        first = child.recv(timeout=10)
        assert first["op"] == "call" and first["lane"] == 0
        child.send(dict(run_load(base, 3, 1), **change))
        with pytest.raises(ChildDied):
            child.recv(timeout=10)


def test_a_reply_for_no_lane_ends_the_child(tmp_path):
    base = base_load(tmp_path)
    with Child.start() as child:
        child.send(run_load(base, 3, 0))
        call = child.recv(timeout=10)
        child.post(dict(echo_reply(call), lane=7))
        with pytest.raises(ChildDied):
            child.recv(timeout=10)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(0, 5), min_size=1, max_size=4), data=st.data())
def test_each_lane_says_what_its_run_alone_says_whatever_the_order_of_the_replies(tmp_path, counts, data):
    """Determinism across lanes: the replies answered in any order and in batches of any size,
    each lane's messages are exactly those of its run in a child of its own, tagged."""
    base = base_load(tmp_path)
    alone = {n: said_alone(base, n) for n in set(counts)}
    said: dict[int, list[dict]] = {lane: [] for lane in range(len(counts))}
    with Child.start() as child:
        for lane, n in enumerate(counts):
            child.send(run_load(base, n, lane))
        pending: list[dict] = []
        ended = 0
        while ended < len(counts):
            if pending and (not child.has_message() or data.draw(st.booleans(), label="answer now")):
                count = data.draw(st.integers(1, len(pending)), label="replies in one go")
                for _ in range(count):
                    call = pending.pop(data.draw(st.integers(0, len(pending) - 1), label="which"))
                    child.post(echo_reply(call))
                continue
            message = child.recv(timeout=10)
            lane = message.pop("lane")
            said[lane].append(message)
            if message["op"] == "call":
                pending.append(dict(message, lane=lane))
            elif message["op"] == "end":
                ended += 1
    for lane, n in enumerate(counts):
        assert said[lane] == alone[n]


def test_a_dropped_lane_ends_where_it_waits_and_says_nothing_more(tmp_path):
    base = base_load(tmp_path)
    with Child.start() as child:
        child.send(run_load(base, 3, 0))
        child.send(run_load(base, 3, 1))
        firsts = [child.recv(timeout=10), child.recv(timeout=10)]
        assert sorted(m["lane"] for m in firsts) == [0, 1]
        child.post({"op": "drop", "lane": 0})
        child.post({"op": "drop", "lane": 9})  # (a lane that has ended already, or never was: ignored)
        child.post(echo_reply(next(m for m in firsts if m["lane"] == 1)))
        child.send(run_load(base, 2, 2))
        ends, lanes_seen = answer_until_ended(child, 2)
        assert ends == {1: {"Completed": 6}, 2: {"Completed": 3}}
        assert 0 not in lanes_seen
