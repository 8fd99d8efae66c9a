"""Group commit (issue 19, item 3): the Calls of one frame of the child's share one sync, each
Call is durable before its Tool is called, and replies in hand are admitted without a sync each.

The Driver is driven by a scripted child (its messages fixed in advance), so what is grouped
does not depend on how the real child's frames happen to arrive; a real fan-out run checks the
invariant that matters whatever the grouping: no Tool sees a call whose Call is not durable."""

from __future__ import annotations

import collections
import threading
from pathlib import Path

import pytest

import flowrt
from flowrt.run import Driver, prepare, start_fields
from flowrt.store import open_store
from flowrt.store.directory import RunStore

PROGRAM = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow work(n: Int) -> Int

pub flow main(n: Int) -> Int !tool =
    list.fold(task.all(list.map(list.range(0, n), flow(i) = flow() = work(i))), 0, flow(a, b) = a + b)
"""


class DurableCalls:
    """Wraps RunStore's sync to note, at every sync, the arguments of the Calls it made durable."""

    def __init__(self, monkeypatch):
        self.lock = threading.Lock()
        self.durable_args: set[int] = set()
        self.calls_per_sync: list[int] = []  # per sync that made Calls durable, how many
        self.unsynced_at_call: list[int] = []
        original = RunStore._sync_history
        seen = self

        def sync_history(store, fact_n):
            pending = store._unsynced_from
            original(store, fact_n)
            if pending is None:
                return
            calls = [f for f in store._facts[pending[0]:] if f["kind"] == "Call"]
            with seen.lock:
                seen.durable_args.update(f["arguments"]["n"] for f in calls)
                if calls:
                    seen.calls_per_sync.append(len(calls))

        monkeypatch.setattr(RunStore, "_sync_history", sync_history)

    def tool(self, n):
        with self.lock:
            if n not in self.durable_args:
                self.unsynced_at_call.append(n)
        return n


class ScriptedChild:
    """Stands for the sandbox child: says the messages it is given, one frame's worth at a time
    (`frames`), and answers each reply by going on with the script."""

    def __init__(self, frames: list[list[dict]]):
        self.frames = collections.deque(frames)
        self.inbox: collections.deque[dict] = collections.deque()
        self.replies: list[dict] = []
        self.layers: dict = {}
        self.before_sleep = None
        self.check_halt = None

    def send(self, message, timeout=None):
        assert message["op"] == "load"

    def post(self, message):
        self.replies.append(message)

    def _arrive(self):
        if not self.inbox and self.frames:
            self.inbox.extend(self.frames.popleft())

    def recv(self, timeout=None):
        self._arrive()
        return self.inbox.popleft()

    def peek(self):
        return self.inbox[0] if self.inbox else None

    def has_message(self):
        return bool(self.inbox)

    def kill(self):
        return 0

    let_go = kill


def call(i: int, wait: bool = False) -> dict:
    message = {"op": "call", "id": f"root/{i}#1", "task": f"root/{i}", "tool": "tasks.work", "arguments": {"n": i}}
    if wait:
        message["wait"] = True
    return message


def drive(tmp_path, monkeypatch, frames):
    path = tmp_path / "tasks.flow"
    path.write_text(PROGRAM)
    seen = DurableCalls(monkeypatch)
    prepared = prepare(str(path), "main", '{"n": 3}', python_tools={"tasks.work": seen.tool})
    fields, sources = start_fields(prepared)
    store = open_store(str(tmp_path / "runs")).create("run-group", fields, sources=sources, durability="fsync")
    child = ScriptedChild(frames)
    try:
        outcome = Driver(prepared, store, "run-group", child).run()
        kinds = [f["kind"] for f in store.facts()]
    finally:
        store.close()
    return outcome, seen, child, kinds


def test_the_calls_of_one_frame_share_one_sync_and_each_is_durable_before_it_is_sent(tmp_path, monkeypatch):
    frames = [[call(0), call(1), call(2, wait=True)], [{"op": "wait"}], [{"op": "wait"}],
              [{"op": "end", "outcome": {"Completed": 3}}]]
    outcome, seen, child, kinds = drive(tmp_path, monkeypatch, frames)
    assert outcome.exit_code == 0
    assert kinds == ["Start", "Call", "Call", "Call", "Reply", "Reply", "Reply", "End"]
    assert seen.unsynced_at_call == []
    assert seen.calls_per_sync[0] == 3  # one sync for the frame's three Calls
    assert sorted(r["id"] for r in child.replies) == ["root/0#1", "root/1#1", "root/2#1"]


def test_calls_in_separate_frames_are_each_synced_before_they_are_sent(tmp_path, monkeypatch):
    frames = [[call(0)], [call(1)], [call(2, wait=True)], [{"op": "wait"}], [{"op": "wait"}],
              [{"op": "end", "outcome": {"Completed": 3}}]]
    outcome, seen, _, kinds = drive(tmp_path, monkeypatch, frames)
    assert outcome.exit_code == 0
    assert seen.unsynced_at_call == []
    assert seen.calls_per_sync[:3] == [1, 1, 1]


@pytest.mark.parametrize("after", [{"op": "choice", "task": "root", "picked": "root/0"},
                                   {"op": "end", "outcome": {"Completed": 0}}])
def test_held_calls_go_out_before_what_follows_them_in_the_frame(tmp_path, monkeypatch, after):
    frames = [[call(0), call(1), after]]
    if after["op"] == "choice":
        frames.append([{"op": "end", "outcome": {"Completed": 0}}])
    outcome, seen, _, kinds = drive(tmp_path, monkeypatch, frames)
    assert outcome.exit_code == 0
    assert kinds[1:3] == ["Call", "Call"]
    assert sorted(seen.durable_args) == [0, 1] and seen.calls_per_sync[0] == 2
    assert seen.unsynced_at_call == []


def test_a_real_fan_out_sends_no_call_before_it_is_durable(tmp_path, monkeypatch):
    path = tmp_path / "tasks.flow"
    path.write_text(PROGRAM)
    seen = DurableCalls(monkeypatch)
    host = flowrt.Host({"tasks.work": seen.tool}, runs_dir=str(tmp_path / "runs"), durability="fsync")
    outcome = host.run(str(path), {"n": 200})
    assert outcome.exit_code == 0 and outcome.output == sum(range(200))
    assert seen.unsynced_at_call == []
    assert sorted(seen.durable_args) == list(range(200))
