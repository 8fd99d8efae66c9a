"""`flow run` end to end through the real entry point and the embedding API: output, exit codes,
refusals before the first fact, faults with Flow locations, pauses, BadReply, recorded history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest


import flowrt
from flowrt.store import STORE_RECORDS
from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"


def flow(*args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def runs_in(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def kinds(runs: Path, run_id: str) -> list[str]:
    store = RunStore.open(str(runs), run_id, for_append=False)
    try:
        return [f["kind"] for f in store.facts()]
    finally:
        store.close()


def test_a_pure_program_runs_and_records_start_and_end(tmp_path):
    done = flow("run", str(PROGRAMS / "arith.flow"), "--input", '{"xs": [1, 2, 3, 4]}', "--runs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"label": "n=4 even", "mean": "2.5", "sum": 10}
    [run_id] = runs_in(tmp_path)
    assert kinds(tmp_path, run_id) == ["Start", "End"]


def test_input_is_refused_before_any_fact(tmp_path):
    for text in ("not json", "[1]", '{"xs": [1, "two"]}', '{"xs": [], "extra": 1}', "{}"):
        done = flow("run", str(PROGRAMS / "arith.flow"), "--input", text, "--runs", str(tmp_path))
        assert done.returncode == 2, (text, done.stderr)
        assert "input-invalid" in done.stderr
    assert runs_in(tmp_path) == []


def test_input_from_stdin(tmp_path):
    done = flow("run", str(PROGRAMS / "arith.flow"), "--input", "-", "--runs", str(tmp_path), stdin='{"xs": [5]}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sum"] == 5


def test_division_by_zero_faults_with_the_flow_location(tmp_path):
    done = flow("run", str(PROGRAMS / "divide.flow"), "--input", '{"a": 1, "b": 0}', "--runs", str(tmp_path))
    assert done.returncode == 1
    assert "divide.flow:2:" in done.stderr and "division-by-zero" in done.stderr
    assert "Traceback" not in done.stderr
    [run_id] = runs_in(tmp_path)
    store = RunStore.open(str(tmp_path), run_id, for_append=False)
    end = store.facts()[-1]
    store.close()
    assert end["kind"] == "End" and end["outcome"]["Faulted"]["kind"] == "division-by-zero"
    assert end["outcome"]["Faulted"]["location"]["line"] == 2


def test_a_million_tail_calls_run_in_constant_stack(tmp_path):
    done = flow("run", str(PROGRAMS / "loop.flow"), "--input", '{"n": 1000000}', "--runs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1000000"


def test_tools_through_the_embedding_api(tmp_path):
    notes: list[str] = []

    async def ask(question):
        return f"yes to {question}"

    host = flowrt.Host({"ask.ask": ask, "ask.note": lambda text: notes.append(text)}, runs_dir=str(tmp_path))
    outcome = host.run(str(PROGRAMS / "ask.flow"), {"topic": "tea"})
    assert outcome.exit_code == 0, outcome.diagnostics
    assert orjson.loads(outcome.output_json) == "answer: yes to What about tea?"
    assert notes == ["asking about tea"]
    assert kinds(tmp_path, outcome.run_id) == ["Start", "Call", "Reply", "Call", "Reply", "End"]


def test_a_reply_that_does_not_decode_is_a_bad_reply(tmp_path):
    host = flowrt.Host({"ask.ask": lambda question: 42, "ask.note": lambda text: None}, runs_dir=str(tmp_path))
    outcome = host.run(str(PROGRAMS / "ask.flow"), {"topic": "tea"})
    assert outcome.exit_code == 0
    assert orjson.loads(outcome.output_json).startswith("bad reply:")


def test_failed_and_declined(tmp_path):
    host = flowrt.Host({"ask.ask": lambda question: flowrt.failed("Declined"), "ask.note": lambda text: None},
                       runs_dir=str(tmp_path))
    assert host.run(str(PROGRAMS / "ask.flow"), {"topic": "x"}).output == "declined"


def test_a_pending_call_pauses_the_run(tmp_path):
    host = flowrt.Host({"ask.ask": lambda question: flowrt.PENDING, "ask.note": lambda text: None},
                       runs_dir=str(tmp_path))
    outcome = host.run(str(PROGRAMS / "ask.flow"), {"topic": "x"})
    assert outcome.exit_code == 3
    assert [p.call for p in outcome.pending] == ["root#2"]
    assert outcome.pending[0].arguments == {"question": "What about x?"}
    assert kinds(tmp_path, outcome.run_id) == ["Start", "Call", "Reply", "Call"]
    store = RunStore.open(str(tmp_path), outcome.run_id, for_append=False)
    decisions = [r for r in store.host_records() if r["kind"] not in STORE_RECORDS]
    assert decisions[-1]["kind"] == "paused"
    store.close()


def test_an_unbound_tool_refuses_the_run(tmp_path):
    with pytest.raises(flowrt.Refused) as refused:
        flowrt.Host({}, runs_dir=str(tmp_path)).run(str(PROGRAMS / "ask.flow"), {"topic": "x"})
    assert refused.value.diagnostics[0].code == "binding-missing"
    assert runs_in(tmp_path) == []


def test_orders_example_with_command_tools(tmp_path):
    order = {"order": {"id": "o-1", "item": "kettle", "quantity": 1, "cents": 2599}}
    done = flow("run", "main.flow", "--allow", "--input", json.dumps(order), "--runs", str(tmp_path),
                cwd=ROOT / "examples" / "orders")
    assert done.returncode == 0, done.stderr
    receipt = json.loads(done.stdout)["Ok"]
    assert receipt["order"] == "o-1" and receipt["tracking"].startswith("TRK-")


def test_orders_retry_an_unknown_charge_and_exit_4_on_err(tmp_path):
    flaky = {"order": {"id": "o-2-flaky", "item": "kettle", "quantity": 1, "cents": 100}}
    done = flow("run", "main.flow", "--allow", "--input", json.dumps(flaky), "--runs", str(tmp_path),
                cwd=ROOT / "examples" / "orders")
    assert done.returncode == 0, done.stderr
    [run_id] = runs_in(tmp_path)
    assert kinds(tmp_path, run_id).count("Call") == 4  # reserve, charge (Unknown), charge, ship
    declined = {"order": {"id": "o-3", "item": "kettle", "quantity": 1, "cents": 500000}}
    done = flow("run", "main.flow", "--allow", "--input", json.dumps(declined), "--runs", str(tmp_path),
                cwd=ROOT / "examples" / "orders")
    assert done.returncode == 4
    assert json.loads(done.stdout) == {"Err": {"Declined": "over the card limit"}}


def test_manifest_commands_need_approval(tmp_path):
    order = {"order": {"id": "o-1", "item": "kettle", "quantity": 1, "cents": 1}}
    done = flow("run", "main.flow", "--input", json.dumps(order), "--runs", str(tmp_path),
                cwd=ROOT / "examples" / "orders", stdin="")
    assert done.returncode == 2
    assert "binding-not-approved" in done.stderr
    assert runs_in(tmp_path) == []


def test_a_child_that_exhausts_memory_is_a_fault_not_a_hang(tmp_path):
    done = flow("run", str(PROGRAMS / "memory.flow"), "--input", '{"n": 40}', "--runs", str(tmp_path), timeout=120)
    assert done.returncode == 1
    assert "fault[limit]" in done.stderr


def test_an_unknown_entry_is_refused(tmp_path):
    done = flow("run", str(PROGRAMS / "arith.flow"), "--entry", "nope", "--input", "{}", "--runs", str(tmp_path))
    assert done.returncode == 2
    assert "entry-not-found" in done.stderr
    assert runs_in(tmp_path) == []


def _tool_program(tmp_path: Path, command: str) -> Path:
    (tmp_path / "prog").mkdir()
    (tmp_path / "prog" / "main.flow").write_text(
        "@tool pub flow echo(text: Text) -> Text\n\npub flow main() -> Text !tool = echo(\"hi\")\n")
    (tmp_path / "prog" / "flow.toml").write_text(f'[tools]\n"main" = {{ command = {command} }}\n')
    return tmp_path / "prog" / "main.flow"


def test_an_implementation_that_cannot_start_refuses_the_run(tmp_path):
    main = _tool_program(tmp_path, '["/nonexistent/tool"]')
    done = flow("run", str(main), "--allow", "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2
    assert "binding-failed" in done.stderr
    assert runs_in(tmp_path / "runs") == []


def test_an_implementation_with_another_fingerprint_is_refused(tmp_path):
    script = tmp_path / "wrong.py"
    script.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m.get('op') == 'describe':\n"
        "        print(json.dumps({'op': 'described', 'tools': [{'tool': 'main.echo', 'fingerprint': 'sha256:00',"
        " 'signature': 'echo(text: Int) -> Text'}]}), flush=True)\n")
    main = _tool_program(tmp_path, json.dumps([sys.executable, str(script)]))
    done = flow("run", str(main), "--allow", "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2
    assert "binding-mismatch" in done.stderr
    assert runs_in(tmp_path / "runs") == []


def test_a_tour_of_std_through_flow_run(tmp_path):
    done = flow("run", str(PROGRAMS / "stdtour.flow"), "--input",
                '{"xs": [30, 5, 12, 1], "sentence": "to be or not to be"}', "--runs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    tour = json.loads(done.stdout)
    assert tour["sorted"] == [1, 5, 12, 30]
    assert tour["counts"] == {"be": 2, "not": 1, "or": 1, "to": 2}
    assert tour["unique"] == ["be", "not", "or", "to"]
    assert tour["first_big"] == 12 and tour["total"] == "16" and tour["rounded"] == "2.34"
    assert tour["wait"] == "PT90.25S" and tour["later"] == "1970-01-01T02:00:00Z"
    assert tour["decoded"] == {"Ok": {"name": "kettle", "price": "25.99", "tags": ["kitchen", "tea"]}}
    assert tour["safe"] == 2 and tour["folded"] == 285 and tour["joined"] == "TO-BE-OR-NOT-TO-BE"


def test_a_reply_over_the_limit_is_a_bad_reply(tmp_path):
    host = flowrt.Host({"ask.ask": lambda question: "x" * (2 * 1024 * 1024), "ask.note": lambda text: None},
                       runs_dir=str(tmp_path))
    outcome = host.run(str(PROGRAMS / "ask.flow"), {"topic": "tea"})
    assert outcome.exit_code == 0
    assert "over the 1048576-byte limit" in orjson.loads(outcome.output_json)


def test_an_implementation_that_dies_with_a_call_out_answers_unknown(tmp_path):
    (tmp_path / "prog").mkdir()
    (tmp_path / "prog" / "main.flow").write_text(
        "pub type E { Bad }\n@tool pub flow echo(text: Text) -> Result<Text, E>\n\n"
        "pub flow main() -> Text !tool = match echo(\"hi\") { Ok(t) => t, Err(Unknown(why)) => \"unknown: ${why}\","
        " Err(_) => \"other\" }\n")
    script = tmp_path / "dies.py"
    script.write_text(
        "import json, sys\n"
        "from flowrt.toolkit import describe\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m.get('op') == 'describe':\n"
        "        print(json.dumps({'op': 'described', 'tools': describe('main.flow', ['main.echo'])}), flush=True)\n"
        "    elif m.get('op') == 'call':\n"
        "        sys.exit(3)\n")
    (tmp_path / "prog" / "flow.toml").write_text(f'[tools]\n"main" = {{ command = ["{sys.executable}", "{script}"] }}\n')
    done = flow("run", "main.flow", "--allow", "--runs", str(tmp_path / "runs"), cwd=tmp_path / "prog")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout).startswith("unknown: the implementation exited")


def test_an_interrupt_halts_the_run_with_a_host_record_and_no_end(tmp_path):
    import shutil
    import signal
    import time

    folder = tmp_path / "slow"
    shutil.copytree(ROOT / "tests" / "programs" / "slow", folder)
    (folder / "delay").write_text("30")
    runs = tmp_path / "runs"
    process = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "main.flow", "--allow", "--input",
                                '{"topic": "tea"}', "--runs", str(runs)], cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        ids = runs_in(runs)
        # (the run's directory is made before its history file)
        history = runs / ids[0] / "history.jsonl" if ids else None
        if history is not None and history.exists() and b'"kind":"Call"' in history.read_bytes():
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    [run_id] = runs_in(runs)
    store = RunStore.open(str(runs), run_id, for_append=False)
    assert [f["kind"] for f in store.facts()] == ["Start", "Call"]
    assert [r for r in store.host_records() if r["kind"] != "durable"][-1]["kind"] == "halted"
    store.close()


ECHO_LOOP = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""


def test_every_fact_is_durable_before_anything_leaves_the_host(tmp_path, monkeypatch):
    """A Reply may be written without waiting for the disk (it is synced with the next Call, or
    while the host sleeps), but whenever a Tool is called, and when the run ends, every fact
    written so far is durable: the history's facts are the facts at its last sync (the NUL bytes
    the store reserves past them are not facts)."""
    from flowrt.store import durable as store_durable

    def written(path):
        with open(path, "rb") as handle:
            return len(handle.read().rstrip(b"\0"))

    synced_size = {}
    real = store_durable._sync_appended
    runs = tmp_path / "runs"

    def sync(fd):
        real(fd)
        [history] = runs.glob("*/history.jsonl")
        synced_size["history"] = written(history)

    monkeypatch.setattr(store_durable, "_sync_appended", sync)
    (tmp_path / "echo.flow").write_text(ECHO_LOOP)
    seen = []

    def echo(n):
        [history] = runs.glob("*/history.jsonl")
        seen.append((written(history), synced_size.get("history")))
        return n

    host = flowrt.Host({"echo.echo": echo}, runs_dir=str(runs), durability="fsync")
    outcome = host.run(str(tmp_path / "echo.flow"), {"n": 200})
    assert outcome.exit_code == 0 and orjson.loads(outcome.output_json) == sum(range(201))
    assert len(seen) == 200
    assert all(size == synced for size, synced in seen)
    [history] = runs.glob("*/history.jsonl")
    assert history.stat().st_size == written(history) == synced_size["history"]
    assert kinds(runs, outcome.run_id).count("Reply") == 200


def test_a_halt_asked_for_from_another_thread_halts_as_an_interrupt_does(tmp_path):
    """`run(..., halt=event)` (what the MCP server sets when a client cancels): the run stops
    with a `halted` record and no End, and `flow resume` continues it."""
    import threading

    from flowrt.replay import resume
    from flowrt.run import run

    (tmp_path / "echo.flow").write_text(ECHO_LOOP)
    runs = tmp_path / "runs"
    halt = threading.Event()
    started = []

    async def echo(n):  # served on a worker: the host waits for its reply
        if n == 3:
            halt.set()
            import asyncio

            await asyncio.sleep(0.3)
        return n

    outcome = run(str(tmp_path / "echo.flow"), input_text='{"n": 5}', runs_dir=str(runs),
                  python_tools={"echo.echo": echo}, halt=halt, on_start=lambda run_id, fact: started.append(fact))
    assert outcome.exit_code == 130 and outcome.message == "halted by an interrupt"
    assert [f["kind"] for f in started] == ["Start"]
    store = RunStore.open(str(runs), outcome.run_id, for_append=False)
    assert not store.ended and [r["kind"] for r in store.host_records() if r["kind"] != "durable"][-1] == "halted"
    resumed = resume(str(runs), outcome.run_id, python_tools={"echo.echo": lambda n: n},
                     resend={f["call"] for f in store.facts() if f["kind"] == "Call"} - {
                         f["call"] for f in store.facts() if f["kind"] == "Reply"})
    assert resumed.exit_code == 0 and orjson.loads(resumed.output) == 15
    before = threading.Event()
    before.set()
    refused = run(str(tmp_path / "echo.flow"), input_text='{"n": 1}', runs_dir=str(tmp_path / "other"),
                  python_tools={"echo.echo": echo}, halt=before)
    assert refused.exit_code == 130 and refused.run_id is None and not (tmp_path / "other").exists()


BIG_INTS = """\
@tool pub flow echo(n: Int) -> Int

pub flow main(e: Int) -> Int !tool = echo(pow(2, e)) - pow(2, e)

flow pow(b: Int, e: Int) -> Int = if e == 0 { 1 } else { b * pow(b, e - 1) }
"""


def test_integers_beyond_64_bits_cross_the_sandbox_and_the_history_exactly(tmp_path):
    """Int has no size limit: such values go to a Tool, come back, are recorded and replayed."""
    from flowrt.replay import replay

    (tmp_path / "big.flow").write_text(BIG_INTS)
    runs = str(tmp_path / "runs")
    seen = []
    host = flowrt.Host({"big.echo": lambda n: (seen.append(n), n + 1)[1]}, runs_dir=runs)
    outcome = host.run(str(tmp_path / "big.flow"), {"e": 200})
    assert outcome.exit_code == 0 and outcome.output_json == b"1" and seen == [2 ** 200]
    call = next(f for f in RunStore.open(runs, outcome.run_id, for_append=False).facts() if f["kind"] == "Call")
    assert call["arguments"] == {"n": 2 ** 200}
    assert replay(runs, outcome.run_id).verdict.kind == "Matched"
    (tmp_path / "pure.flow").write_text("pub flow main(e: Int) -> Int = pow(2, e) + 1\n\n"
                                        + BIG_INTS.split("\n\n")[-1])
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", str(tmp_path / "pure.flow"), "--input",
                           '{"e": 70}', "--runs", runs], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == f"{2 ** 70 + 1}\n"
