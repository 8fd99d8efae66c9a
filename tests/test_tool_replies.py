"""Nothing a Tool process writes hangs, crashes or bloats the host (issue 13, items 5-7), and a
command that cannot describe itself says why (item 16).

The corpus (tests/hostile/hostile_tool.py) describes itself honestly, then misbehaves once two
calls are out; each entry runs through the real `flow run` with a timeout, and the history must
record the outcome scripts/reliability/tool_replies.py expects, with no traceback and the host's
peak memory bounded. The bounded line reader and the id scan are checked on their own with
Hypothesis (any chunking of any lines; any object naming an id)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrt import tool_lines

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "reliability"))

import tool_replies  # noqa: E402


@pytest.mark.parametrize("mode", sorted(tool_replies.CASES))
def test_a_hostile_tool_process_gets_the_outcome_it_earned(tmp_path, mode):
    result = tool_replies.trial(tmp_path, mode)
    assert not result["hung"], f"{mode}: flow run did not end within {tool_replies.TIMEOUT} s"
    assert not result["traceback"], result["stderr"]
    assert result["exit"] == 0, result["stderr"]
    assert result["printed"] == tool_replies.CASES[mode]
    assert result["recorded"] == tool_replies.CASES[mode]
    assert result["rss_mb"] < tool_replies.RSS_LIMIT_MB, f"{mode}: peak RSS {result['rss_mb']:.0f} MB"
    assert result["seconds"] < 60


def test_a_broken_protocol_is_named_in_the_bad_reply_and_the_later_call_is_not_sent(tmp_path):
    tool_replies.trial(tmp_path, "unknown-id")
    first, second, third = tool_replies.replies(tmp_path / "unknown-id" / "runs")
    assert first == second
    assert "broke the Tool protocol" in first["Err"]["BadReply"] and "c9:nobody#1" in first["Err"]["BadReply"]
    assert third["Err"]["NotRun"].startswith("not sent: the implementation broke the Tool protocol")


def test_a_reply_over_the_line_limit_is_bad_reply_for_its_call_alone(tmp_path):
    tool_replies.trial(tmp_path, "huge-reply")
    first, second, third = tool_replies.replies(tmp_path / "huge-reply" / "runs")
    assert "over the 4194304-byte line limit" in first["Err"]["BadReply"]
    assert second == {"Ok": "two"} and third == {"Ok": "three"}


# ---- item 16: describe failures say why; { python = ... } needs nothing on PATH -----------------


MINIMAL_PATH = "/usr/bin:/bin"


def _echo_program(folder: Path, binding: str, script: str) -> None:
    folder.mkdir()
    (folder / "main.flow").write_text("@tool pub flow echo(text: Text) -> Text\n\n"
                                      "pub flow main() -> Text !tool = echo(\"hi\")\n")
    (folder / "tool.py").write_text(script)
    (folder / "flow.toml").write_text(f'[tools]\n"main" = {binding}\n')


ECHO_TOOL = ("from flowrt.toolkit import serve\n"
             "serve({'main.echo': lambda text: text + '!'}, declared_in='main.flow')\n")


def test_a_python_entry_runs_with_the_hosts_interpreter_on_a_minimal_path(tmp_path):
    _echo_program(tmp_path / "prog", '{ python = "tool.py" }', ECHO_TOOL)
    env = {"PATH": MINIMAL_PATH}  # as an MCP client or a service manager would start the host
    done = tool_replies.run_flow(["run", "main.flow", "--allow", "--runs", str(tmp_path / "runs")],
                                 tmp_path / "prog", env=env, timeout=120)
    assert done["exit"] == 0, done["stderr"]
    assert json.loads(done["stdout"]) == "hi!"


def test_a_describe_failure_shows_the_command_its_status_and_its_stderr(tmp_path):
    script = "import sys\nsys.stderr.write('starting\\nboom: the model file is missing\\n')\nsys.exit(7)\n"
    _echo_program(tmp_path / "prog", '{ python = ["tool.py", "--fast"] }', script)
    done = tool_replies.run_flow(["run", "main.flow", "--allow", "--runs", str(tmp_path / "runs")],
                                 tmp_path / "prog", env={"PATH": MINIMAL_PATH}, timeout=120)
    assert done["exit"] == 2
    assert "binding-failed" in done["stderr"]
    assert "`python tool.py --fast` did not describe its tools (exit status 7)" in done["stderr"]
    assert "boom: the model file is missing" in done["stderr"]
    assert "Traceback" not in done["stderr"]
    assert not (tmp_path / "runs").exists() or os.listdir(tmp_path / "runs") == []


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no python3 on the minimal PATH")
def test_python3_on_a_minimal_path_is_another_interpreter_and_its_error_is_shown(tmp_path):
    """The failure item 16 reports: `python3` found on PATH outside the venv cannot import
    flowrt. The run is still refused, but the real error is shown, not hidden."""
    import subprocess

    probe = subprocess.run(["/usr/bin/python3", "-c", "import flowrt"], capture_output=True,
                           env={"PATH": MINIMAL_PATH}, cwd=tmp_path)
    if probe.returncode == 0:
        pytest.skip("/usr/bin/python3 can import flowrt here")
    _echo_program(tmp_path / "prog", '{ command = ["python3", "tool.py"] }', ECHO_TOOL)
    done = tool_replies.run_flow(["run", "main.flow", "--allow", "--runs", str(tmp_path / "runs")],
                                 tmp_path / "prog", env={"PATH": MINIMAL_PATH}, timeout=120)
    assert done["exit"] == 2
    assert "`python3 tool.py` did not describe its tools (exit status 1)" in done["stderr"]
    assert "ModuleNotFoundError: No module named 'flowrt'" in done["stderr"]


def test_a_line_before_the_description_that_is_not_a_message_refuses_the_run_and_says_which(tmp_path):
    script = "print('Starting the echo server...', flush=True)\n" + ECHO_TOOL  # a log line on stdout
    _echo_program(tmp_path / "prog", '{ python = "tool.py" }', script)
    done = tool_replies.run_flow(["run", "main.flow", "--allow", "--runs", str(tmp_path / "runs")],
                                 tmp_path / "prog", timeout=120)
    assert done["exit"] == 2
    assert "`python tool.py` broke the Tool protocol: its output line 1 is not JSON" in done["stderr"]
    assert "Starting the echo server" in done["stderr"] and done["seconds"] < 30


def test_a_manifest_entry_that_names_no_implementation_is_refused(tmp_path):
    _echo_program(tmp_path / "prog", "{ }", ECHO_TOOL)
    done = tool_replies.run_flow(["run", "main.flow", "--allow", "--runs", str(tmp_path / "runs")],
                                 tmp_path / "prog", timeout=120)
    assert done["exit"] == 2
    assert "names no implementation" in done["stderr"] and "Traceback" not in done["stderr"]


# ---- the bounded line reader ---------------------------------------------------------------------


def _read_all(data: bytes, cuts: list[int], limit: int) -> list[tuple[bytes, bool]]:
    """What `lines` yields for `data` written to a pipe in pieces ending at `cuts`."""
    read_end, write_end = os.pipe()

    def write() -> None:
        start = 0
        for cut in [*sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]:
            os.write(write_end, data[start:cut])
            start = cut
        os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        return list(tool_lines.lines(read_end, limit))
    finally:
        writer.join()
        os.close(read_end)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
       st.booleans(), st.integers(1, 24), st.lists(st.integers(0, 400), max_size=10))
def test_lines_are_cut_at_the_limit_whatever_the_chunking(body, ends_with_newline, limit, cuts):
    data = b"\n".join(body) + (b"\n" if ends_with_newline and body else b"")
    expected = [(line[:limit + 1], len(line) > limit) for line in data.split(b"\n")]
    if data.endswith(b"\n") or not data:
        expected.pop()  # nothing after the last newline
    elif not expected[-1][0]:
        expected.pop()
    assert _read_all(data, cuts, limit) == expected


def test_a_line_without_end_is_cut_as_soon_as_the_limit_passes_and_never_held():
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b'{"id": "c1", ' + b"x" * 2000)  # and then nothing: the line may never end
        reader = tool_lines.lines(read_end, 100)
        line, cut = next(reader)
        assert cut and len(line) == 101 and line.startswith(b'{"id": "c1"')
        os.write(write_end, b"y" * 5000 + b"\nnext\n")
        assert next(reader) == (b"next", False)
    finally:
        os.close(write_end)
        os.close(read_end)


def test_the_stderr_tail_keeps_only_the_end():
    read_end, write_end = os.pipe()
    tail = bytearray()
    writer = threading.Thread(target=lambda: (os.write(write_end, b"a" * 50_000 + b"\nlast words \xff\n"),
                                              os.close(write_end)))
    writer.start()
    tool_lines.drain_tail(read_end, tail)
    writer.join()
    os.close(read_end)
    assert len(tail) == tool_lines.TAIL_BYTES
    assert tool_lines.tail_text(tail) == "last words \ufffd"


# ---- the id at the start of a line that did not parse --------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.dictionaries(st.text(max_size=6).filter(lambda k: k != "id"), _json, max_size=4),
       st.integers(0, 4), st.booleans())
def test_the_id_is_found_in_any_object_and_any_prefix_that_holds_it(call_id, others, place, ascii_only):
    members = list(others.items())
    members.insert(min(place, len(members)), ("id", call_id))
    text = "{" + ", ".join(f"{json.dumps(k, ensure_ascii=ascii_only)}: {json.dumps(v, ensure_ascii=ascii_only)}"
                           for k, v in members) + "}"
    assert tool_lines.top_level_id(text) == call_id
    id_end = text.index(json.dumps(call_id, ensure_ascii=ascii_only), text.index('"id": ')) + \
        len(json.dumps(call_id, ensure_ascii=ascii_only))
    assert tool_lines.top_level_id(text[:id_end]) == call_id  # a cut line keeps its start


@given(st.text(max_size=30))
def test_the_id_scan_never_raises(text):
    found = tool_lines.top_level_id(text)
    assert found is None or isinstance(found, str)
    assert tool_lines.nesting(text) >= 0


@given(_json)
def test_nesting_is_the_depth_of_the_value(value):
    def depth(v):
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        return 0

    assert tool_lines.nesting(json.dumps(value)) == depth(value)


def test_the_id_scan_walks_deep_nesting_without_recursing():
    deep = "[" * 100_000 + "]" * 100_000
    line = '{"id": "c1", "outcome": {"Ok": ' + deep + "}}"
    assert tool_lines.top_level_id(line) == "c1" and tool_lines.nesting(line) == 100_002
    assert tool_lines.top_level_id('{"outcome": {"Ok": ' + deep + '}, "id": "c2"}') == "c2"
    assert tool_lines.top_level_id(deep) is None
    assert tool_lines.top_level_id('{"id": 7}') is None
    assert tool_lines.top_level_id('{"a": {"id": "inner"}}') is None  # only the top level names the call


# ---- the host's writes to a Tool process never block the driver ---------------------------------


def test_a_process_that_stops_reading_is_broken_after_the_stall_bound(tmp_path):
    """flood.flow through the real CLI: the calls whose lines went (whole or in part) into the
    pipe are Unknown, the one queued behind them and every later call NotRun, never sent."""
    result = tool_replies.trial(tmp_path, "stops-reading")
    assert not result["hung"] and result["exit"] == 0, result["stderr"]
    one, two, big, four, five = tool_replies.replies(tmp_path / "stops-reading" / "runs")
    for seen in (one, two, big):
        assert seen["Err"]["Unknown"] == ("the implementation left its input unread for 10 s with the call out; "
                                          "it was closed")
    assert four == {"Err": {"NotRun": "not sent: the implementation left its input unread for 10 s"}}
    assert five["Err"]["NotRun"].startswith("not sent: the implementation left its input unread for 10 s")


def _unread_pipe():
    read_end, write_end = os.pipe()
    return read_end, os.fdopen(write_end, "wb", buffering=0)


def test_the_writer_never_blocks_and_knows_which_calls_reached_the_pipe(monkeypatch):
    from flowrt import tool_input

    monkeypatch.setattr(tool_input, "STALL_SECONDS", 0.5)
    read_end, stream = _unread_pipe()
    stalled = threading.Event()
    writer = tool_input.InputWriter(stream, stalled.set, lambda unsent: None)
    try:
        small = b"s" * 100 + b"\n"
        big = b"b" * (1024 * 1024) + b"\n"  # more than the pipe holds: written in part
        for call_id, line in (("c1", small), ("c2", big), ("c3", small)):
            assert writer.put(call_id, line) is None  # returns at once though nothing reads
        assert stalled.wait(10)
        assert writer.was_started("c1") and writer.was_started("c2") and not writer.was_started("c3")
        assert writer.put("c4", small) == "closed"
    finally:
        writer.stop()
        writer.done.wait(5)
        os.close(read_end)


def _unread_bytes(fd: int, fcntl, termios) -> int:
    import array

    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def test_the_writer_holds_a_bounded_amount_and_a_closed_pipe_leaves_the_rest_unsent(monkeypatch):
    from flowrt import tool_input

    monkeypatch.setattr(tool_input, "HELD_LIMIT", 1024 * 1024)
    read_end, stream = _unread_pipe()
    unsent_seen: list[list[str]] = []
    closed = threading.Event()
    writer = tool_input.InputWriter(stream, lambda: None,
                                    lambda unsent: (unsent_seen.append(unsent), closed.set()))
    line = b"x" * (300 * 1024) + b"\n"
    answers = [writer.put(f"c{i}", line) for i in range(6)]
    assert answers[:3] == [None] * 3 and "held" in answers  # the fourth line may already be in the pipe
    import fcntl
    import termios
    import time

    deadline = time.monotonic() + 10
    while _unread_bytes(read_end, fcntl, termios) < 4096 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the writer has put part of c0 in the pipe
    os.close(read_end)  # the process closes its input: the write fails, nothing blocks
    assert closed.wait(10)
    queued = [f"c{i}" for i, a in enumerate(answers) if a is None]
    assert unsent_seen == [[c for c in queued if not writer.was_started(c)]]
    assert writer.was_started("c0") and writer.put("c9", line) == "closed"
    writer.done.wait(5)
