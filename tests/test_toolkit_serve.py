"""`flowrt.toolkit.serve`'s reading and running of calls, spoken to over its pipes as the host
speaks to it: the thread that reads a call runs it and hands reading to another thread first, so
a call that never returns holds up neither the calls after it nor the cancels, nor the end of
the process when its input closes. Every wait here has a bound: a process that stops reading
fails the test rather than hanging it."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

DECLARATIONS = """\
@tool pub flow hold(key: Text) -> Text
@tool pub flow release(key: Text) -> Text
@tool pub flow echo(n: Int) -> Int
"""

TOOL = """\
import threading

from flowrt.toolkit import serve

events = {}
guard = threading.Lock()


def event(key):
    with guard:
        return events.setdefault(key, threading.Event())


def hold(key):
    # Bounded, and longer than any test waits: a held call never ends within a test.
    return "released" if event(key).wait(120) else "timed out"


def release(key):
    event(key).set()
    return key


serve({"held.hold": hold, "held.release": release, "held.echo": lambda n: n}, declared_in="held.flow")
"""

REPLY_SECONDS = 60  # a reply the test waits for and does not get within this fails it


class Served:
    """The Tool process, with its replies read line by line under a deadline."""

    def __init__(self, directory: Path, declared_in: str = "held.flow") -> None:
        (directory / "held.flow").write_text(DECLARATIONS)
        (directory / "held_tool.py").write_text(TOOL.replace('"held.flow"', json.dumps(declared_in)))
        self.process = subprocess.Popen([sys.executable, "held_tool.py"], cwd=directory, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        self.pending = b""

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    def call(self, call_id: str, tool: str, **arguments) -> None:
        self.send({"op": "call", "run": "r", "id": call_id, "tool": f"held.{tool}", "arguments": arguments})

    def reply(self) -> dict | None:
        """The next reply line, or None at end of output."""
        deadline = time.monotonic() + REPLY_SECONDS
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail(f"no reply within {REPLY_SECONDS} s")
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> int:
        """Close its input; its exit status (it must end, whatever its handlers are doing)."""
        self.process.stdin.close()
        try:
            return self.process.wait(REPLY_SECONDS)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def served(tmp_path: Path):
    tool = Served(tmp_path)
    yield tool
    if tool.process.poll() is None:
        tool.process.kill()
        tool.process.wait()


def test_describe_names_each_tool(served: Served):
    served.send({"op": "describe"})
    described = served.reply()
    assert described["op"] == "described"
    assert [t["tool"] for t in described["tools"]] == ["held.echo", "held.hold", "held.release"]
    assert all(t["fingerprint"] for t in described["tools"])


def test_a_call_that_does_not_return_holds_up_none_after_it(served: Served):
    served.call("slow", "hold", key="a")
    for n in range(5):  # each answered while the first is still out
        served.call(f"fast{n}", "echo", n=n)
        assert served.reply() == {"id": f"fast{n}", "outcome": {"Ok": n}}
    served.call("free", "release", key="a")
    assert sorted([served.reply(), served.reply()], key=lambda r: r["id"]) == [
        {"id": "free", "outcome": {"Ok": "a"}}, {"id": "slow", "outcome": {"Ok": "released"}}]


def test_many_calls_out_at_once_all_run_at_once(served: Served):
    # Each hold waits for the release sent after all of them: served one at a time, none would end.
    for n in range(8):
        served.call(f"hold{n}", "hold", key="together")
    served.call("free", "release", key="together")
    replies = {served.reply()["id"] for _ in range(9)}
    assert replies == {f"hold{n}" for n in range(8)} | {"free"}


def test_a_cancel_is_read_while_the_call_runs_and_its_answer_dropped(served: Served):
    served.call("slow", "hold", key="a")
    served.send({"op": "cancel", "id": "slow"})
    served.call("free", "release", key="a")  # read after the cancel: the held call ends cancelled
    assert served.reply() == {"id": "free", "outcome": {"Ok": "a"}}
    served.call("after", "echo", n=7)
    assert served.reply() == {"id": "after", "outcome": {"Ok": 7}}
    assert served.close() == 0
    assert served.reply() is None  # the cancelled call was never answered


def test_the_process_ends_when_its_input_closes_with_a_call_stuck(served: Served):
    served.call("stuck", "hold", key="never")
    served.call("fast", "echo", n=1)
    assert served.reply() == {"id": "fast", "outcome": {"Ok": 1}}
    assert served.close() == 0


def test_lines_that_are_not_calls_are_skipped_and_serving_goes_on(served: Served):
    served.process.stdin.write(b"not json\n[1, 2]\n\xff\xfe\n")
    served.send({"op": "call", "id": 5, "tool": "held.echo", "arguments": {"n": 1}})  # an id not a string
    served.call("ok", "echo", n=3)
    assert served.reply() == {"id": "ok", "outcome": {"Ok": 3}}


def test_a_call_to_a_tool_it_does_not_serve_is_not_run(served: Served):
    served.call("other", "elsewhere")
    assert served.reply() == {"id": "other", "outcome": {"Err": {"NotRun": "this implementation does not serve held.elsewhere"}}}


def test_a_declaration_that_does_not_check_ends_the_process_with_why(tmp_path: Path):
    (tmp_path / "broken.flow").write_text("pub flow oops( -> Int\n")
    tool = Served(tmp_path, declared_in="broken.flow")
    tool.send({"op": "describe"})
    assert tool.reply() is None
    assert tool.close() == 1
    assert "broken.flow does not check" in tool.process.stderr.read().decode()
