"""`flow mcp` through a real MCP client (the SDK's stdio client, spawning the server as a user's
MCP host would): the six tools, their meaning next to the CLI's, concurrency, cancellation as a
halt, the accepted-Start progress notification, approval and the history view's bounds."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from flowrt.store import RunStore


def open_gate(gate: Path, text: str) -> None:
    """Write the gate whole at once (a rename): the Tool polls for it and reads it as soon as it
    exists, so a file created first and written after could be read empty."""
    partial = gate.with_name(gate.name + ".partial")
    partial.write_text(text)
    partial.rename(gate)


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

SLOW_FLOW = """\
/// Waits until a file appears (the test decides when), then answers its text.
@tool pub flow wait(path: Text) -> Text

pub flow main(path: Text) -> Text !tool = "got ${wait(path)}"
"""

SLOW_TOOL = """\
import os, time
from flowrt.toolkit import serve


def wait(path):
    for _ in range(3000):
        if os.path.exists(path):
            return open(path).read()
        time.sleep(0.01)
    return "gave up"

serve({"slow.wait": wait}, declared_in="slow.flow")
"""

BIG_FLOW = """\
pub flow main(n: Int) -> Text = pad("", n)

flow pad(acc: Text, n: Int) -> Text = if n == 0 { acc } else { pad("${acc}x", n - 1) }
"""


def slow_program(directory: Path) -> Path:
    (directory / "slow.flow").write_text(SLOW_FLOW)
    (directory / "slow_tool.py").write_text(SLOW_TOOL)
    (directory / "flow.toml").write_text('[tools]\n"slow" = { command = ["%s", "slow_tool.py"] }\n' % sys.executable)
    return directory / "slow.flow"


def session(runs: Path, *, allow: bool = True, messages: list | None = None, root: str = "/"):
    """A client session with a server started as `flow mcp --runs RUNS --root ROOT [--allow]`.
    The root is `/` unless a test is about it: most tests use both the examples and tmp files."""
    args = ["-m", "flowrt.cli", "mcp", "--runs", str(runs), "--root", root] + (["--allow"] if allow else [])
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))

    @contextlib.asynccontextmanager
    async def opened():
        async def handle(message):
            if messages is not None:
                messages.append(message)

        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(stdio_client(params, errlog=stack.enter_context(
                open(os.devnull, "w"))))
            client = await stack.enter_async_context(ClientSession(read, write, message_handler=handle))
            await client.initialize()
            yield client

    return opened()


def call(client, name: str, arguments: dict, **kw):
    return client.call_tool(name, arguments, **kw)


def scenario(fn):
    """Run an async test body with anyio (pytest sees its signature, so fixtures still come)."""
    @functools.wraps(fn)
    def test(*args, **kwargs):
        anyio.run(lambda: fn(*args, **kwargs))

    return test


async def call_is_out(runs: Path) -> None:
    """Wait (up to 15 s) until the one run in `runs` has recorded its Call."""
    for _ in range(300):
        ids = os.listdir(runs) if runs.exists() else []
        history = runs / ids[0] / "history.jsonl" if ids else None  # the directory is made first
        if history is not None and history.exists() and b'"kind":"Call"' in history.read_bytes():
            return
        await anyio.sleep(0.05)


STATE_FIELDS = ("state", "reason", "hostDecision", "pending", "open")


def cli_state(runs: Path, run_id: str) -> dict:
    """What `flow history --json` says of a run's state."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "history", run_id, "--runs", str(runs), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    view = json.loads(done.stdout)
    return {k: view[k] for k in STATE_FIELDS}


async def settled_view(client, run_id: str) -> dict:
    """The history view once the server has let go of the run (it holds it until the halt is
    written and the run closed), waiting up to 10 s."""
    for _ in range(200):
        view = (await call(client, "history", {"run": run_id})).structured_content
        if view["state"] != "running":
            return view
        await anyio.sleep(0.05)
    return view


ORDER = {"order": {"id": "o-1", "item": "kettle", "quantity": 1, "cents": 2599}}


@scenario
async def test_the_six_tools_and_a_run_that_completes(tmp_path):
    runs = tmp_path / "runs"
    messages: list = []
    async with session(runs, messages=messages) as client:
        listed = await client.list_tools()
        assert sorted(t.name for t in listed.tools) == ["check", "history", "replay", "resume", "run", "runs"]
        progress = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        done = await call(client, "run", {"file": str(EXAMPLES / "orders" / "main.flow"), "input": ORDER},
                          progress_callback=on_progress)
        result = done.structured_content
        assert not done.is_error and result["exitCode"] == 0 and result["ending"] == "completed"
        assert result["output"] == {"Ok": {"charge": result["output"]["Ok"]["charge"], "order": "o-1",
                                           "tracking": result["output"]["Ok"]["tracking"]}}
        run_id = result["run"]
        start = RunStore.open(str(runs), run_id, for_append=False).facts()[0]
        # The first progress notification: Start accepted, naming the recorded run and fact, no
        # values (one per fact follows: tests/test_mcp_feed.py).
        assert progress[0] == (1.0, f"run {run_id} started (fact 1 accepted)")
        note = [m for m in messages if getattr(m, "method", None) == "notifications/progress"][0]
        meta = note.params.meta
        assert meta["ng.flowla/run"] == run_id and meta["ng.flowla/fact"] == "1"
        assert meta["ng.flowla/hash"] == start["hash"] and type(meta["ng.flowla/request"]) is int
        assert "o-1" not in json.dumps(note.params.model_dump(by_alias=True))
        replayed = (await call(client, "replay", {"run": run_id})).structured_content
        assert replayed["exitCode"] == 0 and replayed["verdict"]["verdict"] == "Matched"
        page = (await call(client, "runs", {})).structured_content
        assert [row["run"] for row in page["runs"]] == [run_id] and page["runs"][0]["record"] == "complete"
        assert page["nextAfter"] is None


@scenario
async def test_check_reports_diagnostics_as_data(tmp_path):
    broken = tmp_path / "broken.flow"
    broken.write_text("pub flow main() -> Int = missing + 1\n")
    async with session(tmp_path / "runs") as client:
        good = (await call(client, "check", {"paths": [str(EXAMPLES / "support")]})).structured_content
        assert good["ok"] and good["diagnostics"] == [] and good["checkpoints"]
        bad = (await call(client, "check", {"paths": [str(broken)]})).structured_content
        assert not bad["ok"]
        [diagnostic] = bad["diagnostics"]
        assert diagnostic["severity"] == "error" and diagnostic["location"]["line"] == 1
        assert "\x1b[" not in json.dumps(bad)  # never styled


@scenario
async def test_without_allow_a_run_needing_a_manifest_command_is_refused(tmp_path):
    runs = tmp_path / "runs"
    async with session(runs, allow=False) as client:
        done = (await call(client, "run", {"file": str(EXAMPLES / "orders" / "main.flow"), "input": ORDER})
                ).structured_content
        assert done["exitCode"] == 2 and done["run"] is None and done["diagnostics"]
        assert (await call(client, "runs", {})).structured_content["runs"] == []  # nothing recorded


@scenario
async def test_bad_input_is_refused_before_any_fact(tmp_path):
    runs = tmp_path / "runs"
    async with session(runs) as client:
        done = (await call(client, "run", {"file": str(EXAMPLES / "orders" / "main.flow"),
                                           "input": {"order": {"id": 7}}})).structured_content
        assert done["exitCode"] == 2 and done["run"] is None
        assert not runs.exists() or os.listdir(runs) == []


@scenario
async def test_a_paused_run_resumes_with_a_reply(tmp_path):
    runs = tmp_path / "runs"
    expense = {"expense": {"id": "e-9", "who": "Ann", "cents": 12_000, "reason": "a train"}}
    async with session(runs) as client:
        paused = (await call(client, "run", {"file": str(EXAMPLES / "approval" / "main.flow"),
                                             "input": expense})).structured_content
        assert paused["exitCode"] == 3 and paused["ending"] == "paused" and len(paused["pending"]) == 1
        view = (await call(client, "history", {"run": paused["run"]})).structured_content
        assert view["state"] == "paused" and view["pending"] == paused["pending"]
        assert [e["status"] for e in view["open"]] == ["pending"]
        assert cli_state(runs, paused["run"]) == {k: view[k] for k in STATE_FIELDS}
        bad = await call(client, "resume", {"run": paused["run"], "call": paused["pending"][0]})
        assert bad.is_error  # call and reply go together
        done = (await call(client, "resume", {"run": paused["run"], "call": paused["pending"][0],
                                              "reply": {"Ok": {"Yes": "fine"}}})).structured_content
        assert done["exitCode"] == 0 and done["output"]["Approved"].endswith("fine")


@scenario
async def test_requests_are_answered_while_a_run_waits(tmp_path):
    program = slow_program(tmp_path)
    gate = tmp_path / "gate"
    async with session(tmp_path / "runs") as client:
        results: dict = {}

        async def slow_run():
            results["run"] = (await call(client, "run", {"file": str(program), "input": {"path": str(gate)}})
                              ).structured_content

        async with anyio.create_task_group() as group:
            group.start_soon(slow_run)
            await anyio.sleep(0.5)
            checked = (await call(client, "check", {"paths": [str(program)]})).structured_content
            listed = (await call(client, "runs", {})).structured_content
            assert checked["ok"] and "run" not in results  # answered while the run still waits
            await call_is_out(tmp_path / "runs")
            [run_id] = os.listdir(tmp_path / "runs")
            view = (await call(client, "history", {"run": run_id})).structured_content
            # The server drives it: running, its call out, as the CLI says too.
            assert view["state"] == "running" and [e["status"] for e in view["open"]] == ["out"]
            assert cli_state(tmp_path / "runs", run_id) == {k: view[k] for k in STATE_FIELDS}
            assert [row["record"] for row in listed["runs"]] in ([], ["incomplete"])
            open_gate(gate, "through")
        assert results["run"]["exitCode"] == 0 and results["run"]["output"] == "got through"


@scenario
async def test_cancelling_a_run_halts_it_and_resume_continues_it(tmp_path):
    program = slow_program(tmp_path)
    runs = tmp_path / "runs"
    gate = tmp_path / "gate"
    async with session(runs) as client:
        answered = []
        with anyio.move_on_after(30):
            async with anyio.create_task_group() as group:
                async def slow_run():
                    answered.append(await call(client, "run", {"file": str(program), "input": {"path": str(gate)}}))

                group.start_soon(slow_run)
                await call_is_out(runs)  # then cancel the request
                group.cancel_scope.cancel()
        assert answered == []  # the cancelled call is answered by nothing
        [run_id] = os.listdir(runs)
        for _ in range(200):  # the server halts the run: a `halted` record, and no End
            store = RunStore.open(str(runs), run_id, for_append=False)
            if any(r["kind"] == "halted" for r in store.host_records()):
                break
            await anyio.sleep(0.05)
        assert [r["reason"] for r in store.host_records() if r["kind"] == "halted"] == ["interrupt"]
        assert not store.ended
        view = await settled_view(client, run_id)
        assert view["state"] == "halted" and view["facts"][-1]["kind"] == "Call"  # the call was out at the halt
        call_id = view["facts"][-1]["call"]
        assert view["open"] == [{"call": call_id, "tool": "slow.wait", "status": "unknown-outcome",
                                 "next": [f"flow resume {run_id}", f"flow resume {run_id} --resend {call_id}"]}]
        assert cli_state(runs, run_id) == {k: view[k] for k in STATE_FIELDS}
        open_gate(gate, "later")
        done = (await call(client, "resume", {"run": run_id, "resend": [call_id]})).structured_content
        assert done["exitCode"] == 0 and done["output"] == "got later"


@scenario
async def test_a_client_that_goes_away_leaves_its_runs_halted(tmp_path):
    program = slow_program(tmp_path)
    runs = tmp_path / "runs"
    with anyio.move_on_after(60):
        async with session(runs) as client:
            async with anyio.create_task_group() as group:
                async def slow_run():
                    await call(client, "run", {"file": str(program), "input": {"path": str(tmp_path / "gate")}})

                group.start_soon(slow_run)
                await call_is_out(runs)
                group.cancel_scope.cancel()  # and the session closes: the server's input ends
    [run_id] = os.listdir(runs)
    store = RunStore.open(str(runs), run_id, for_append=False)
    assert not store.ended and [r["kind"] for r in store.host_records() if r["kind"] != "durable"][-1] == "halted"


@scenario
async def test_the_history_view_pages_and_bounds_what_it_shows(tmp_path):
    runs = tmp_path / "runs"
    (tmp_path / "big.flow").write_text(BIG_FLOW)
    async with session(runs) as client:
        small = (await call(client, "run", {"file": str(EXAMPLES / "orders" / "main.flow"), "input": ORDER})
                 ).structured_content
        big = (await call(client, "run", {"file": str(tmp_path / "big.flow"), "input": {"n": 5000}})
               ).structured_content
        assert small["exitCode"] == 0 and big["exitCode"] == 0

        first = (await call(client, "history", {"run": small["run"], "limit": 3})).structured_content
        assert [f["n"] for f in first["facts"]] == [1, 2, 3]
        assert first["page"] == {"total": 8, "offset": 0, "limit": 3, "nextOffset": 3}
        assert first["state"] == "ended" and first["ending"] == "completed" and first["truncated"] is False
        last = (await call(client, "history", {"run": small["run"], "offset": 6, "limit": 3})).structured_content
        assert [f["n"] for f in last["facts"]] == [7, 8] and last["page"]["nextOffset"] is None
        replies = (await call(client, "history", {"run": small["run"], "kind": "Reply"})).structured_content
        assert [f["n"] for f in replies["facts"]] == [3, 5, 7]  # numbers as recorded
        assert replies["facts"][0]["values"] == {"outcome": {"Ok": None}}
        # Sources: listed by module and hash; a page of recorded text.
        modules = {s["module"]: s for s in first["sources"]}
        assert modules["main"]["available"] and modules["main"]["length"] > 0
        text = (EXAMPLES / "orders" / "main.flow").read_text()
        source = (await call(client, "history", {"run": small["run"], "source": "main"})).structured_content
        assert source["source"]["text"] == text[:4096] and source["source"]["nextOffset"] is None
        # A value over 4096 bytes of JSON is omitted whole; its hash stays visible.
        end = (await call(client, "history", {"run": big["run"], "kind": "End"})).structured_content
        [fact] = end["facts"]
        assert fact["valuesOmitted"] is True and fact["values"] == {}
        assert fact["stored"][0]["ref"].startswith("sha256:") and fact["saysTruncated"] is True
        assert len(fact["summary"]) == 1024
        # A redacted value shows as a hole that keeps its reference, never as a value.
        with RunStore.open(str(runs), big["run"], for_append=True) as store:
            store.redact(fact["n"], "outcome")
        end = (await call(client, "history", {"run": big["run"], "kind": "End"})).structured_content
        assert end["facts"][0]["stored"] == [{"field": "outcome", "ref": fact["stored"][0]["ref"],
                                              "available": False, "hole": True}]
        assert end["facts"][0]["values"] == {} and end["facts"][0]["valuesOmitted"] is False
        # Invalid selections are refused.
        for bad in ({"limit": 0}, {"limit": 201}, {"offset": -1}, {"kind": "Nope"}, {"source": "nowhere"},
                    {"source_offset": -2}):
            refused = await call(client, "history", dict(bad, run=small["run"]))
            assert refused.is_error, bad
        assert (await call(client, "history", {"run": "no-such-run"})).is_error
        assert (await call(client, "runs", {"limit": 0})).is_error
        page = (await call(client, "runs", {"limit": 1})).structured_content
        assert len(page["runs"]) == 1 and page["nextAfter"] == page["runs"][0]["run"]
        rest = (await call(client, "runs", {"after": page["nextAfter"]})).structured_content
        assert len(rest["runs"]) == 1 and rest["nextAfter"] is None


@scenario
async def test_a_damaged_history_is_a_storage_failure(tmp_path):
    runs = tmp_path / "runs"
    async with session(runs) as client:
        done = (await call(client, "run", {"file": str(EXAMPLES / "orders" / "main.flow"), "input": ORDER})
                ).structured_content
        history = runs / done["run"] / "history.jsonl"
        history.write_bytes(history.read_bytes().replace(b'"kettle"', b'"kettlf"', 1))
        replayed = (await call(client, "replay", {"run": done["run"]})).structured_content
        assert replayed["exitCode"] == 5 and replayed["verdict"] is None
        assert replayed["message"].startswith("storage failure")
        assert (await call(client, "history", {"run": done["run"]})).is_error


def test_flow_mcp_is_a_command_of_the_cli():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "mcp", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--allow" in done.stdout and "--runs" in done.stdout


@scenario
async def test_an_int_result_of_5000_digits_comes_back_whole(tmp_path):
    """CPython's json and pydantic's (which the MCP SDK reads every message with) stop at 4,300
    digits: the server reads a run's output as the runtime does, gives it exactly in
    `outputJson`, and never puts a number in `output` that would make the reply unreadable."""
    digits = "7" * 4999 + "8"
    program = tmp_path / "big.flow"
    program.write_text(f"pub flow main() -> Int = {'7' * 5000} + 1\n")
    edge = tmp_path / "edge.flow"
    edge.write_text(f"pub flow main() -> List<Int> = [{'9' * 4300}, 1]\n")
    async with session(tmp_path / "runs") as client:
        with anyio.fail_after(60):
            done = await call(client, "run", {"file": str(program)})
            at_edge = await call(client, "run", {"file": str(edge)})
        assert not done.is_error, done.content
        result = done.structured_content
        assert result["exitCode"] == 0 and result["outputJson"] == digits and result["output"] is None
        assert "more than 4300 digits" in result["message"]
        result = at_edge.structured_content
        assert result["exitCode"] == 0 and result["outputJson"] == f"[{'9' * 4300},1]"
        assert isinstance(result["output"][0], int) and result["output"][1] == 1 and result["message"] is None


PID_FLOW = """\
/// The Tool process's pid.
@tool pub flow pid() -> Int

pub flow main() -> Int !tool = pid()
"""

PID_TOOL = """\
import os
from flowrt.toolkit import serve

with open("starts.log", "a") as starts:
    starts.write(f"{os.getpid()}\\n")
serve({"pid.pid": os.getpid}, declared_in="pid.flow")
"""


@scenario
async def test_runs_through_one_server_share_a_tool_process_that_ends_with_the_server(tmp_path):
    (tmp_path / "pid.flow").write_text(PID_FLOW)
    (tmp_path / "pid_tool.py").write_text(PID_TOOL)
    (tmp_path / "flow.toml").write_text('[tools]\n"pid" = { command = ["%s", "pid_tool.py"] }\n' % sys.executable)
    async with session(tmp_path / "runs") as client:
        outputs = [(await call(client, "run", {"file": str(tmp_path / "pid.flow")})).structured_content["output"]
                   for _ in range(3)]
        [started] = (tmp_path / "starts.log").read_text().split()
        assert outputs == [int(started)] * 3
    # the server closed its kept processes as it ended
    for _ in range(300):
        try:
            with open(f"/proc/{started}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    break
        except (FileNotFoundError, ProcessLookupError):  # (reaped before, or between open and read)
            break
        await anyio.sleep(0.05)
    else:
        raise AssertionError("the Tool process outlived the server")
