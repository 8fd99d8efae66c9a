"""The reply to the only call out, read by the thread that waits for it (`CommandTools.call_here`,
flowrt/tool_output.py): delivered before `call_here` returns when it comes within
REPLY_HERE_SECONDS, by the reader thread when later; and what the process does between calls
(exits, writes a broken line) or during one (dies) ends the same way as when the reader thread
reads everything."""

from __future__ import annotations

import queue
import sys
from pathlib import Path

import pytest

from flowrt import bindings
from flowrt.bindings import PENDING, CommandTools

TOOL = r"""
import json, os, sys, time

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    message = json.loads(line)
    if message.get("op") == "describe":
        send({"op": "described", "tools": [{"tool": "t." + n, "fingerprint": "f"} for n in
              ("echo", "slow", "quit", "junk", "die", "wait")]})
        continue
    if message.get("op") != "call":
        continue
    tool, arguments, call_id = message["tool"], message["arguments"], message["id"]
    if tool == "t.slow":
        time.sleep(arguments["s"])
    if tool == "t.die":
        os._exit(3)  # with the call out, unanswered
    if tool == "t.wait":
        send({"id": call_id, "pending": True})
        continue
    send({"id": call_id, "outcome": {"Ok": arguments.get("n")}})
    if tool == "t.junk":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
    if tool == "t.quit":
        sys.stdout.close()
        os._exit(0)
"""

WAIT = 30  # seconds: a reply not delivered within this fails the test (never hangs it)


class Here:
    """Calls made as the Driver makes the only call out: outcomes delivered here, or queued."""

    def __init__(self, tools: CommandTools) -> None:
        self.tools = tools
        self.here: list[tuple[str, object]] = []
        self.queued: queue.SimpleQueue = queue.SimpleQueue()
        self.count = 0

    def call(self, tool: str, **arguments) -> str:
        self.count += 1
        call_id = f"c{self.count}"
        self.tools.call_here("r", call_id, f"t.{tool}", arguments, None, lambda c, o: self.here.append((c, o)),
                             lambda c, o: self.queued.put((c, o)))
        return call_id

    def later(self) -> tuple[str, object]:
        try:
            return self.queued.get(timeout=WAIT)
        except queue.Empty:
            pytest.fail(f"no reply within {WAIT} s")


@pytest.fixture
def tools(tmp_path: Path):
    (tmp_path / "tool.py").write_text(TOOL)
    started = CommandTools([sys.executable, "tool.py"], str(tmp_path))
    started.start()
    yield started
    started.close()


def test_replies_within_the_wait_are_delivered_before_call_here_returns(tools: CommandTools):
    calls = Here(tools)
    for n in range(50):
        call_id = calls.call("echo", n=n)
        assert calls.here == [(call_id, {"Ok": n})]
        calls.here.clear()
    assert calls.queued.empty()


def test_a_reply_later_than_the_wait_is_read_by_the_reader_thread(tools: CommandTools):
    calls = Here(tools)
    slow = calls.call("slow", s=bindings.REPLY_HERE_SECONDS * 4, n=1)
    assert calls.here == []
    assert calls.later() == (slow, {"Ok": 1})
    fast = calls.call("echo", n=2)  # the output taken back from the reader thread
    assert calls.here == [(fast, {"Ok": 2})]


def test_a_pending_answer_is_delivered_here_and_the_call_stays_out(tools: CommandTools):
    calls = Here(tools)
    waiting = calls.call("wait")
    assert calls.here == [(waiting, PENDING)]
    assert waiting in tools.deliveries  # its outcome, if the process sends one, comes through the queue
    fast = calls.call("echo", n=5)
    assert calls.here[-1] == (fast, {"Ok": 5})


def test_a_reply_to_a_call_made_otherwise_goes_where_that_call_said(tools: CommandTools):
    calls = Here(tools)
    # Answered before the next (the process serves one at a time), read by either thread.
    tools.call("r", "other", "t.echo", {"n": 7}, None, lambda c, o: calls.queued.put((c, o)))
    fast = calls.call("echo", n=8)
    assert calls.here == [(fast, {"Ok": 8})]
    assert calls.later() == ("other", {"Ok": 7})


def test_an_exit_between_calls_makes_the_next_not_run(tools: CommandTools):
    calls = Here(tools)
    quit_id = calls.call("quit", n=1)
    assert calls.here == [(quit_id, {"Ok": 1})]
    tools.process.wait(WAIT)
    after = calls.call("echo", n=2)
    assert calls.here[-1] == (after, {"Err": {"NotRun": "not sent: the implementation had exited"}})


def test_a_broken_line_between_calls_makes_the_next_not_run(tools: CommandTools):
    calls = Here(tools)
    junk = calls.call("junk", n=1)
    assert calls.here == [(junk, {"Ok": 1})]
    after = calls.call("echo", n=2)
    (got, outcome), = calls.here[1:] or [calls.later()]
    # NotRun when the broken line was read before the call went out; BadReply when it came after
    # (the process wrote it after its reply), as when the reader thread reads everything.
    (kind, text), = outcome["Err"].items()
    assert got == after and kind in ("NotRun", "BadReply") and "broke the Tool protocol: its output line 3 is" in text


def test_a_process_that_dies_with_the_call_out_answers_it_unknown(tools: CommandTools):
    calls = Here(tools)
    died = calls.call("die")
    (got, outcome), = calls.here or [calls.later()]
    assert got == died and outcome == {"Err": {"Unknown": "the implementation exited (status 3) with the call out"}}
    after = calls.call("echo", n=1)
    (got, outcome), = calls.here[1:] or [calls.later()]  # with the output's end read, through the queue
    assert got == after and outcome == {"Err": {"NotRun": "not sent: the implementation had exited"}}


def test_closing_gives_the_output_back_and_the_process_ends(tools: CommandTools):
    calls = Here(tools)
    calls.call("echo", n=1)
    tools.close()
    assert tools.process.poll() is not None
    tools.output.give_back()  # nothing left to give: a no-op


# ---- the hand-over itself: whichever thread reads, every line is served once, in order ----------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flowrt.tool_output import ToolOutput  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=30).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=30),
       st.lists(st.integers(1, 50), min_size=1, max_size=20),
       st.lists(st.sampled_from(["take", "read", "give back"]), max_size=40))
def test_every_line_is_served_once_in_order_whoever_reads(lines, chunking, steps):
    import os
    import threading

    data = b"".join(line + b"\n" for line in lines)
    read_end, write_end = os.pipe()
    served: list[bytes] = []
    ended = threading.Event()
    output = ToolOutput(read_end, lambda got: served.extend(line for line, _ in got), ended.set)
    reader = threading.Thread(target=output.run, daemon=True)
    reader.start()
    position = 0
    for n, step in enumerate(steps):  # this thread writes a chunk, then takes, reads or gives back
        size = chunking[n % len(chunking)]
        os.write(write_end, data[position:position + size])
        position += size
        if step == "take" and output.take():
            output.done_here()
        elif step == "read" and output.take():
            output.read_here(0.01)
            output.done_here()
        elif step == "give back":
            output.give_back()
    os.write(write_end, data[position:])
    os.close(write_end)
    output.give_back()  # the reader thread reads the rest, to the end
    try:
        assert ended.wait(WAIT), "the output's end was never read"
        reader.join(WAIT)
        assert not reader.is_alive()
        assert served == lines
    finally:
        os.close(read_end)


SEQUENTIAL = """\
@tool pub flow echo(n: Int) -> Int
@tool pub flow slow(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool =
    if n == 0 { acc } else if n % 5 == 0 { loop(n - 1, acc + slow(n)) } else { loop(n - 1, acc + echo(n)) }
"""

SEQUENTIAL_TOOL = """\
import time

from flowrt.toolkit import serve


def slow(n):
    time.sleep(%r)  # longer than the host reads for it on the driving thread
    return n


serve({"seq.echo": lambda n: n, "seq.slow": slow}, declared_in="seq.flow")
"""


def test_a_run_of_sequential_calls_some_slower_than_the_wait_completes(tmp_path: Path):
    import json
    import subprocess

    (tmp_path / "seq.flow").write_text(SEQUENTIAL)
    (tmp_path / "seq_tool.py").write_text(SEQUENTIAL_TOOL % (bindings.REPLY_HERE_SECONDS * 3))
    (tmp_path / "flow.toml").write_text('[tools]\n"seq" = { python = "seq_tool.py" }\n')
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "seq.flow", "--allow", "--input", '{"n": 20}'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == sum(range(1, 21))
