"""Host-side OpenTelemetry spans (flowrt/telemetry.py): a span per run and a child span per Tool call
with run id, call id, Tool and outcome kind, read back from the SDK's in-memory exporter through
flowrt.Host in-process; a pause and its resume; the environment switch through the real `flow`
entry point; and nothing of opentelemetry loaded when telemetry is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowrt
from flowrt.store import open_store

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
pub type Missing { Missing }

@tool pub flow lookup(key: Text) -> Result<Text, Missing>
@tool pub flow ask(question: Text) -> Result<Text, Missing>

pub flow main(one: Text, two: Text) -> Text !tool = {
    let first = match lookup(one) { Ok(v) => v, Err(_) => "none" }
    let second = match lookup(two) { Ok(v) => v, Err(_) => "none" }
    match ask("${first} ${second}?") { Ok(answer) => answer, Err(_) => "no answer" }
}
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "main.flow"
    path.write_text(PROGRAM)
    return path


@pytest.fixture
def exporter():
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    exported.provider = provider
    return exported


def lookup(key: str):
    return key.upper() if key != "gone" else flowrt.failed("Missing")


def calls_of(runs_dir: Path, run_id: str) -> dict[str, str]:
    store = open_store(str(runs_dir)).open(run_id, for_append=False)
    try:
        return {f["call"]: f["tool"] for f in store.facts() if f["kind"] == "Call"}
    finally:
        store.close()


def test_a_run_span_with_a_child_span_per_call(program, tmp_path, exporter):
    host = flowrt.Host({"main.lookup": lookup, "main.ask": lambda question: "yes to " + question},
                       runs_dir=str(tmp_path / "runs"), telemetry=exporter.provider)
    outcome = host.run(str(program), {"one": "a", "two": "gone"})
    assert outcome.exit_code == 0 and outcome.output == "yes to A none?"
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "flow.run"]
    assert len(runs) == 1
    run = runs[0]
    assert run.attributes["flow.run.id"] == outcome.run_id
    assert run.attributes["flow.outcome"] == "Completed" and run.attributes["flow.exit_code"] == 0
    assert run.attributes["flow.entry"] == "main.main"
    calls = [s for s in spans if s.name.startswith("flow.call ")]
    recorded = calls_of(tmp_path / "runs", outcome.run_id)
    assert {s.attributes["flow.call.id"]: s.attributes["flow.tool"] for s in calls} == recorded
    kinds = [(s.attributes["flow.tool"], s.attributes["flow.outcome.kind"]) for s in calls]
    assert kinds == [("main.lookup", "Ok"), ("main.lookup", "Failed"), ("main.ask", "Ok")]
    for span in calls:
        assert span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
        assert span.attributes["flow.run.id"] == outcome.run_id
        assert run.start_time <= span.start_time <= span.end_time <= run.end_time
    failed = next(s for s in calls if s.attributes["flow.outcome.kind"] == "Failed")
    assert not failed.status.is_ok


def test_a_pause_ends_the_open_call_as_pending_and_the_resume_has_its_own_span(program, tmp_path, exporter):
    runs = tmp_path / "runs"
    host = flowrt.Host({"main.lookup": lookup, "main.ask": lambda question: flowrt.PENDING},
                       runs_dir=str(runs), telemetry=exporter.provider)
    outcome = host.run(str(program), {"one": "a", "two": "b"})
    assert outcome.exit_code == 3
    spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.name == "flow.run")
    assert run.attributes["flow.outcome"] == "Paused" and run.attributes["flow.exit_code"] == 3
    pending = [s for s in spans if s.attributes.get("flow.outcome.kind") == "Pending"]
    waiting = [p.call for p in outcome.pending]
    assert [s.attributes["flow.call.id"] for s in pending] == waiting
    exporter.clear()
    resumed = host.resume(outcome.run_id, call=waiting[0], reply="granted")
    assert resumed.exit_code == 0 and resumed.output == "granted"
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["flow.call main.ask", "flow.resume"]
    call, again = spans
    assert call.attributes["flow.call.id"] == waiting[0] and call.attributes["flow.call.resumed"]
    assert call.attributes["flow.outcome.kind"] == "Ok"
    assert again.attributes["flow.run.id"] == outcome.run_id and again.attributes["flow.outcome"] == "Completed"
    assert call.parent.span_id == again.context.span_id


def test_the_history_is_the_same_traced_or_not(program, tmp_path, exporter):
    def facts(telemetry) -> list[dict]:
        runs = tmp_path / f"runs-{telemetry is not False}"
        outcome = flowrt.Host({"main.lookup": lookup, "main.ask": lambda question: "ok"}, runs_dir=str(runs),
                              telemetry=telemetry).run(str(program), {"one": "x", "two": "gone"})
        store = open_store(str(runs)).open(outcome.run_id, for_append=False)
        try:
            return [{k: v for k, v in f.items() if k not in ("hash", "prev", "run")} for f in store.facts()]
        finally:
            store.close()

    assert facts(exporter.provider) == facts(False)
    assert exporter.get_finished_spans()


OFF = """
import json, sys
import flowrt
outcome = flowrt.Host({"main.lookup": lambda key: key.upper(), "main.ask": lambda question: question.lower()},
                      runs_dir=sys.argv[2],
                      telemetry=json.loads(sys.argv[3])).run(sys.argv[1], {"one": "a", "two": "b"})
assert outcome.exit_code == 0, outcome
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
"""


@pytest.mark.parametrize("environment, option", [({}, None), ({"FLOW_OTEL": "1"}, False),
                                                 ({"FLOW_OTEL": "0", "OTEL_TRACES_EXPORTER": "console"}, None)])
def test_off_loads_nothing_of_opentelemetry(program, tmp_path, environment, option):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FLOW_OTEL"))}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", OFF, str(program), str(tmp_path / "runs"), json.dumps(option)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def console_spans(text: str) -> list[dict]:
    decoder = json.JSONDecoder()
    spans, i = [], text.find("{")
    while i != -1:
        span, end = decoder.raw_decode(text, i)
        spans.append(span)
        i = text.find("{", end)
    return spans


def test_flow_otel_in_the_environment_traces_a_cli_run(tmp_path):
    env = dict(os.environ, FLOW_OTEL="1", OTEL_TRACES_EXPORTER="console")
    expense = {"expense": {"id": "e1", "who": "Ada", "cents": 1200, "reason": "train"}}
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "--runs", str(tmp_path / "runs"), "--allow",
                           "--input", json.dumps(expense), "examples/approval/main.flow"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["Approved"].endswith(": within policy")  # stdout is the result alone
    spans = console_spans(done.stderr[done.stderr.find("{"):])
    by_name = {s["name"]: s for s in spans}
    assert set(by_name) == {"flow.run", "flow.call ledger.record"}
    call = by_name["flow.call ledger.record"]
    assert call["attributes"]["flow.outcome.kind"] == "Ok" and call["attributes"]["flow.tool"] == "ledger.record"
    assert call["parent_id"] == by_name["flow.run"]["context"]["span_id"]
    assert by_name["flow.run"]["attributes"]["flow.outcome"] == "Completed"


def test_an_exporter_flow_does_not_set_up_is_said_and_the_run_goes_on(tmp_path):
    env = dict(os.environ, OTEL_TRACES_EXPORTER="zipkin-json")
    (tmp_path / "main.flow").write_text("pub flow main() -> Int = 1\n")
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "--runs", str(tmp_path / "runs"),
                           str(tmp_path / "main.flow")], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "1"
    assert "OTEL_TRACES_EXPORTER=zipkin-json is not one flow sets up" in done.stderr
