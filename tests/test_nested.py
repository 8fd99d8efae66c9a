"""Nested runs (std@v1/runner, flowrt/nested.py): a run of its own beside the outer run, endings
as values, the outer run's bindings, pausing and resuming through the outer program, replay
without running the nested program again, and halts that reach nested runs."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import orjson

from flowrt.nested import nested_run_id
from flowrt.replay import replay, resume
from flowrt.run import run
from flowrt.store import RunStore

OUTER = """\
use "std@v1/runner"

pub flow main(source: Text, input: Text) -> Text !tool = say(runner.run(source, input))

flow say(state: Result<runner.RunState, ToolProblem<runner.RunError>>) -> Text !tool =
    match state {
        Ok(runner.Completed(out)) => "completed ${out}",
        Ok(runner.Faulted(why)) => "faulted ${why}",
        Ok(runner.Paused { run, pending }) => match pending {
            [first, ..] => say(runner.resume(run, first.id, "{\\"Ok\\": \\"yes\\"}")),
            [] => "paused with nothing open",
        },
        Err(Failed(e)) => "refused: ${codes(e.diagnostics)}",
        Err(_) => "the host could not say",
    }

flow codes(ds: List<runner.Diagnostic>) -> Text =
    match ds {
        [] => "",
        [d, ..rest] => "${d.code} ${codes(rest)}",
    }

pub flow checks(source: Text) -> Text !tool =
    match runner.check(source) {
        Ok(()) => "checks",
        Err(Failed(ds)) => "does not check: ${codes(ds)}",
        Err(_) => "the host could not say",
    }
"""

ASKING = """\
/// Asked of someone outside.
@tool pub flow ask(question: Text) -> Text

pub flow main(topic: Text) -> Text !tool = "answer: ${ask("what about ${topic}?")}"
"""


def outer_program(tmp_path: Path, manifest: str | None = None) -> str:
    (tmp_path / "outer.flow").write_text(OUTER)
    if manifest is not None:
        (tmp_path / "flow.toml").write_text(manifest)
    return str(tmp_path / "outer.flow")


def go(tmp_path: Path, source: str, input_value: dict, **kw):
    text = json.dumps({"source": source, "input": json.dumps(input_value)})
    return run(outer_program(tmp_path, kw.pop("manifest", None)), input_text=text, runs_dir=str(tmp_path / "runs"),
               **kw)


def facts(tmp_path: Path, run_id: str) -> list[dict]:
    return RunStore.open(str(tmp_path / "runs"), run_id, for_append=False).facts()


def test_a_nested_run_is_a_run_of_its_own_and_its_result_a_value(tmp_path):
    outcome = go(tmp_path, "pub flow main(n: Int) -> Int = n * 2\n", {"n": 21})
    assert outcome.exit_code == 0 and orjson.loads(outcome.output) == "completed 42"
    outer = facts(tmp_path, outcome.run_id)
    assert [f["kind"] for f in outer] == ["Start", "Call", "Reply", "Checkpoint", "End"]  # the outer run's only
    call = outer[1]
    assert call["tool"] == "std@v1/runner.run"
    nested_id = nested_run_id(outcome.run_id, call["call"])
    nested = facts(tmp_path, nested_id)  # beside the outer run, under the same root
    assert nested[0]["outer"] == {"run": outcome.run_id, "call": call["call"]}
    assert nested[0]["entry"] == {"module": "main", "function": "main"} and nested[-1]["kind"] == "End"
    assert outer[2]["outcome"] == {"Ok": {"Completed": "42"}}
    from flowrt.inspect_cmd import history_view

    view = history_view(RunStore.open(str(tmp_path / "runs"), nested_id, for_append=False))
    assert view["facts"][0]["outer"] == {"run": outcome.run_id, "call": call["call"]}
    assert f"outer={outcome.run_id} call {call['call']}" in view["facts"][0]["summary"]


def test_a_nested_fault_comes_back_as_faulted_and_never_faults_the_outer_run(tmp_path):
    outcome = go(tmp_path, "pub flow main(n: Int) -> Int = n / 0\n", {"n": 1})
    assert outcome.exit_code == 0
    assert orjson.loads(outcome.output) == "faulted division-by-zero: division by zero at main.flow:1:32"


def test_a_source_that_does_not_check_is_refused_with_its_diagnostics(tmp_path):
    outcome = go(tmp_path, "pub flow main(n: Int) -> Int = m\n", {"n": 1})
    assert orjson.loads(outcome.output) == "refused: name-undefined "
    # The submitted source is one file: a local module cannot be used.
    other = go(tmp_path, 'use "./helper"\npub flow main(n: Int) -> Int = n\n', {"n": 1})
    assert orjson.loads(other.output).startswith("refused: ")
    bad_input = go(tmp_path, "pub flow main(n: Int) -> Int = n\n", {"n": "one"})
    assert orjson.loads(bad_input.output) == "refused: input-invalid "
    text = json.dumps({"source": "pub flow main() -> Int = 1 +\n"})
    checked = run(outer_program(tmp_path), entry="checks", input_text=text, runs_dir=str(tmp_path / "runs"))
    assert orjson.loads(checked.output).startswith("does not check: ")
    text = json.dumps({"source": "pub flow main() -> Int = 1\n"})
    fine = run(outer_program(tmp_path), entry="checks", input_text=text, runs_dir=str(tmp_path / "runs"))
    assert orjson.loads(fine.output) == "checks"


def test_a_paused_nested_run_is_resumed_through_the_outer_program(tmp_path):
    # The nested program's Tool is bound by the outer run's flow.toml: its calls stay open.
    outcome = go(tmp_path, ASKING, {"topic": "tea"}, manifest='[tools]\n"main" = { pending = true }\n')
    assert outcome.exit_code == 0
    assert orjson.loads(outcome.output) == 'completed "answer: yes"'
    outer = facts(tmp_path, outcome.run_id)
    paused = outer[2]["outcome"]["Ok"]["Paused"]
    assert paused["run"] == nested_run_id(outcome.run_id, outer[1]["call"])
    assert paused["pending"] == [{"id": "root#1", "tool": "main.ask",
                                  "arguments": '{"question":"what about tea?"}'}]
    assert [f["tool"] for f in outer if f["kind"] == "Call"] == ["std@v1/runner.run", "std@v1/runner.resume"]


def test_nested_runs_use_the_outer_runs_python_bindings(tmp_path):
    outcome = go(tmp_path, ASKING, {"topic": "tea"}, python_tools={"main.ask": lambda question: "green"})
    assert orjson.loads(outcome.output) == 'completed "answer: green"'


def test_replaying_the_outer_run_does_not_run_the_nested_program_again(tmp_path):
    asked = []
    outcome = go(tmp_path, ASKING, {"topic": "tea"}, python_tools={"main.ask": lambda question: asked.append(1) or "x"})
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    result = replay(str(tmp_path / "runs"), outcome.run_id)
    assert result.exit_code == 0 and result.verdict.kind == "Matched"
    assert asked == [1] and sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs


def test_a_refused_resume_is_an_err_with_diagnostics(tmp_path):
    source = """\
use "std@v1/runner"

pub flow main(run: Text) -> Text !tool =
    match runner.run("@tool pub flow ask(q: Text) -> Text\\npub flow main() -> Text !tool = ask(\\"?\\")\\n", "{}") {
        Ok(runner.Paused { run, pending }) => match runner.resume(run, "no-such-call", "{\\"Ok\\": \\"x\\"}") {
            Err(Failed(e)) => match e.diagnostics {
                [d, ..] => "${d.code}: ${d.message}",
                [] => "no diagnostics",
            },
            Err(_) => "the host could not say",
            Ok(_) => "resumed",
        },
        _ => "did not pause",
    }
"""
    (tmp_path / "refuse.flow").write_text(source)
    (tmp_path / "flow.toml").write_text('[tools]\n"main" = { pending = true }\n')
    outcome = run(str(tmp_path / "refuse.flow"), input_text='{"run": "x"}', runs_dir=str(tmp_path / "runs"))
    said = orjson.loads(outcome.output)
    assert said.startswith("nested-refused: call no-such-call is not open in run "), said


def test_halting_the_outer_run_halts_the_nested_run_and_resend_continues_it(tmp_path):
    """The outer run halts while a nested run waits on a Tool: the nested run records its own
    halt; the outer call stays open. Resuming the outer run with that call sent again continues
    the same nested run (its id comes from the call), which resumes like a crashed run: its own
    call that was out is answered Unknown (a Tool declared without Result: a fault, which comes
    back to the outer run as Faulted)."""
    halt = threading.Event()

    async def slow(question: str) -> str:
        halt.set()  # the outer run is asked to halt while this call is out
        await asyncio.sleep(5)
        return "late"

    outcome = go(tmp_path, ASKING, {"topic": "tea"}, python_tools={"main.ask": slow}, halt=halt)
    assert outcome.exit_code == 130
    outer = facts(tmp_path, outcome.run_id)
    assert [f["kind"] for f in outer] == ["Start", "Call"]
    runs = str(tmp_path / "runs")
    nested_id = nested_run_id(outcome.run_id, outer[1]["call"])
    nested = RunStore.open(runs, nested_id, for_append=False)
    assert not nested.ended and [r["kind"] for r in nested.host_records() if r["kind"] != "durable"][-1] == "halted"
    resumed = resume(runs, outcome.run_id, resend={outer[1]["call"]},
                     python_tools={"main.ask": lambda question: "now"})
    assert resumed.exit_code == 0
    assert orjson.loads(resumed.output) == ("faulted tool-problem: main.ask ended in Unknown: the run stopped "
                                            "while the call was out at main.flow:4:55")
    again = RunStore.open(runs, nested_id, for_append=False)
    assert again.ended and again.facts()[0]["outer"]["run"] == outcome.run_id  # the same nested run
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([outcome.run_id, nested_id])
    # Sent again once more (the outer run resumed from an older point): the ended run's ending.
    from flowrt.nested import RunnerTools
    from flowrt.bind import RunHost

    tools = RunnerTools(RunHost(runs, "fsync"), python_tools={}, allow=False, manifest_dir=str(tmp_path))
    got = []
    delivered = threading.Event()
    tools.call(outcome.run_id, outer[1]["call"], "std@v1/runner.run", {"source": ASKING, "input": "{}"},
               None, lambda call_id, reply: (got.append(reply), delivered.set()))
    assert delivered.wait(30)
    tools.close()
    assert got == [{"Ok": {"Faulted": orjson.loads(resumed.output)[len("faulted "):]}}]


def test_stopping_the_call_halts_the_nested_run_and_answers_nothing(tmp_path):
    source = """\
use "std@v1/runner"
use "std@v1/task"

pub flow main(source: Text) -> Text !tool =
    task.race([
        flow() = match runner.run(source, "{\\"topic\\": \\"tea\\"}") { Ok(_) => "nested", Err(_) => "refused" },
        flow() = quick(),
    ])

@tool pub flow quick() -> Text
"""
    (tmp_path / "race.flow").write_text(source)
    started = threading.Event()

    async def slow(question: str) -> str:
        started.set()
        await asyncio.sleep(30)
        return "too late"

    async def quick() -> str:
        while not started.is_set():
            await asyncio.sleep(0.01)
        return "quick"

    runs = str(tmp_path / "runs")
    outcome = run(str(tmp_path / "race.flow"), input_text=json.dumps({"source": ASKING}), runs_dir=runs,
                  python_tools={"main.ask": slow, "race.quick": quick})
    assert outcome.exit_code == 0 and orjson.loads(outcome.output) == "quick"
    outer = facts(tmp_path, outcome.run_id)
    [stop] = [f for f in outer if f["kind"] == "Stop"]
    [nested_call] = [f["call"] for f in outer if f["kind"] == "Call" and f["tool"] == "std@v1/runner.run"]
    assert nested_call in stop["closed"]  # closed with no reply: answered by nothing
    nested = RunStore.open(runs, nested_run_id(outcome.run_id, nested_call), for_append=False)
    assert not nested.ended and [r["kind"] for r in nested.host_records() if r["kind"] != "durable"][-1] == "halted"
