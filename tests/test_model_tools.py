"""Models as Tools (issue 15, item 3): a flow.toml model binding answers `ask<T>` from an
OpenAI-compatible chat completions endpoint through the `openai` SDK. The endpoint is a server on
127.0.0.1 started here (tests/model_server.py); every run goes through the real `flow run`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model_server import Answer, ModelServer, free_port

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "model_ask" / "main.flow"


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


def flow(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    full = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FLOW_MODEL")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full)


def project(tmp_path: Path, binding: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROGRAM, tmp_path / "main.flow")
    (tmp_path / "flow.toml").write_text(f'[tools]\n"main" = {{ {binding} }}\n')
    return tmp_path


def run(tmp_path: Path, entry: str, binding: str, env: dict | None = None, timeout: float = 120, allow: bool = True):
    """`flow run` of the program with `binding` as its flow.toml entry (`--allow`: flow.toml names
    the endpoint, which must be approved)."""
    where = project(tmp_path, binding)
    done = flow("run", "main.flow", "--entry", entry, "--input", '{"goal": "ship"}', "--runs", "runs",
                *(["--allow"] if allow else []), cwd=where, env={"OPENAI_API_KEY": "sk-test", **(env or {})},
                timeout=timeout)
    return done


def bound(server: ModelServer, *extra: str) -> str:
    return ", ".join([f'model = "test-model", base_url = "{server.url}"', *extra])


def outcome(done) -> dict:
    return json.loads(done.stdout)


@pytest.mark.parametrize("stream", [False, True])
def test_a_record_is_asked_with_a_strict_schema_and_decodes(tmp_path, server, stream):
    server.script.append(Answer(content='{"steps": ["draft", "ship"], "done": false}'))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 0, done.stderr
    assert outcome(done) == {"Ok": {"steps": ["draft", "ship"], "done": False}}
    (request,) = server.requests
    body = request["body"]
    assert request["authorization"] == "Bearer sk-test"
    assert body["model"] == "test-model" and bool(body.get("stream")) is stream
    assert body["messages"] == [{"role": "system", "content": "You plan work."},
                                {"role": "user", "content": "Plan the steps to: ship"}]
    form = body["response_format"]
    assert form["type"] == "json_schema" and form["json_schema"]["strict"] is True
    schema = form["json_schema"]["schema"]
    plan = schema["$defs"]["main.Plan"]
    # The record itself at the root (strict outputs want an object there), no `$schema`.
    assert "$schema" not in schema and "$ref" not in schema
    assert schema["properties"] == plan["properties"] == {"steps": {"type": "array", "items": {"type": "string"}},
                                                          "done": {"type": "boolean"}}
    assert plan["required"] == schema["required"] == ["steps", "done"] and schema["additionalProperties"] is False
    # The run is replayed from its history alone: no endpoint, no binding.
    server.httpd.shutdown()
    (tmp_path / "flow.toml").unlink()
    run_id = next((tmp_path / "runs").iterdir()).name
    replayed = flow("replay", run_id, "--runs", "runs", cwd=tmp_path)
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stdout + replayed.stderr


@pytest.mark.parametrize("stream", [False, True])
def test_an_int_is_wrapped_in_an_object_and_unwrapped(tmp_path, server, stream):
    server.script.append(Answer(content='{"value": 4}'))
    done = run(tmp_path, "count", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 0, done.stderr
    assert outcome(done) == {"Ok": 4}
    schema = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    assert schema == {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"],
                      "additionalProperties": False}


@pytest.mark.parametrize("stream", [False, True])
def test_a_text_result_is_plain_text_without_a_response_format(tmp_path, server, stream):
    server.script.append(Answer(content="Shipping is {not} JSON."))
    done = run(tmp_path, "say", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 0, done.stderr
    assert outcome(done) == {"Ok": "Shipping is {not} JSON."}
    assert "response_format" not in server.requests[0]["body"]


def test_without_structured_outputs_the_schema_goes_in_the_system_message(tmp_path, server):
    server.script.append(Answer(content='{"steps": [], "done": true}'))
    done = run(tmp_path, "plan", bound(server, "structured = false"))
    assert done.returncode == 0, done.stderr
    assert outcome(done) == {"Ok": {"steps": [], "done": True}}
    body = server.requests[0]["body"]
    assert "response_format" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("You plan work.") and "JSON Schema" in system and '"main.Plan"' in system


@pytest.mark.parametrize("stream", [False, True])
def test_output_that_is_not_json_is_bad_reply(tmp_path, server, stream):
    server.script.append(Answer(content='{"steps": ["draft"'))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    problem = outcome(done)["Err"]["BadReply"]
    assert problem.startswith("the model's reply is not JSON") and '{"steps": ["draft"' in problem


def test_json_that_does_not_fit_the_type_is_bad_reply_with_the_path(tmp_path, server):
    server.script.append(Answer(content='{"steps": ["draft", 7], "done": false}'))
    done = run(tmp_path, "plan", bound(server))
    assert done.returncode == 4, done.stderr
    assert outcome(done) == {"Err": {"BadReply": "$.Ok.steps[1]: expected a string, found the integer 7"}}


def test_a_400_is_failed_in_the_declared_error_type(tmp_path, server):
    server.script.append(Answer(status=400, error="response_format is not supported by this model"))
    done = run(tmp_path, "plan", bound(server))
    assert done.returncode == 4, done.stderr
    refused = outcome(done)["Err"]["Failed"]["Refused"]
    assert "answered 400" in refused and "response_format is not supported" in refused


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_failed(tmp_path, server, stream):
    server.script.append(Answer(content=None, refusal="I can't help with that."))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    assert outcome(done) == {"Err": {"Failed": {"Refused": "the model refused: I can't help with that."}}}


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_is_not_a_chat_completion_is_bad_reply(tmp_path, server, stream):
    server.script.append(Answer(raw="<html><body>Welcome to nginx!</body></html>"))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    assert "answered with something that is not a chat completion" in outcome(done)["Err"]["BadReply"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_stopped_by_the_content_filter_is_failed(tmp_path, server, stream):
    server.script.append(Answer(content='{"steps": ["dr', finish_reason="content_filter"))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    assert outcome(done) == {"Err": {"Failed": {"Refused": "the endpoint's content filter stopped the answer"}}}


def test_a_500_is_unknown(tmp_path, server):
    server.script.append(Answer(status=503, error="overloaded"))
    done = run(tmp_path, "plan", bound(server))
    assert done.returncode == 4, done.stderr
    problem = outcome(done)["Err"]["Unknown"]
    assert "answered 503" in problem and "overloaded" in problem
    assert len(server.requests) == 1  # the SDK's own retries are off


@pytest.mark.parametrize("stream", [False, True])
def test_a_slow_answer_beyond_the_timeout_is_unknown(tmp_path, server, stream):
    server.script.append(Answer(content='{"steps": [], "done": true}', delay=5))
    done = run(tmp_path, "plan", bound(server, "timeout = 0.5", f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    problem = outcome(done)["Err"]["Unknown"]
    assert "no answer in time after the request was sent" in problem, problem


@pytest.mark.parametrize("stream", [False, True])
def test_a_connection_dropped_mid_answer_is_unknown(tmp_path, server, stream):
    server.script.append(Answer(content='{"steps": ["one", "two", "three", "four"], "done": true}', drop=True))
    done = run(tmp_path, "plan", bound(server, f"stream = {str(stream).lower()}"))
    assert done.returncode == 4, done.stderr
    problem = outcome(done)["Err"]["Unknown"]
    assert "the connection broke after the request was sent" in problem, problem


def test_an_endpoint_not_listening_is_not_run(tmp_path):
    done = run(tmp_path, "plan", f'model = "m", base_url = "http://127.0.0.1:{free_port()}/v1"')
    assert done.returncode == 4, done.stderr
    problem = outcome(done)["Err"]["NotRun"]
    assert "no connection was made, nothing was sent" in problem, problem


def test_model_base_url_and_key_come_from_the_environment(tmp_path, server):
    server.script.append(Answer(content='{"value": 2}'))
    # An endpoint from the environment is the user's own choice: no approval is asked for.
    done = run(tmp_path, "count", 'openai = true, api_key_env = "MY_KEY"', allow=False,
               env={"FLOW_MODEL": "env-model", "OPENAI_BASE_URL": server.url, "MY_KEY": "sk-mine"})
    assert done.returncode == 0, done.stderr
    assert outcome(done) == {"Ok": 2}
    assert server.requests[0]["body"]["model"] == "env-model"
    assert server.requests[0]["authorization"] == "Bearer sk-mine"


@pytest.mark.parametrize("binding, env, said", [
    ('openai = true', {}, "names no model"),
    ('model = "m", api_key_env = "NOT_SET_HERE"', {}, "NOT_SET_HERE, which is not set"),
    ('model = "m", timeout = -1', {}, "timeout must be a number of seconds"),
    ('model = "m", stream = "yes"', {}, "stream must be true or false"),
    ('model = "m", temperature = 0', {}, "temperature, which a model binding does not take"),
    ('model = "m", command = ["x"]', {}, "binds a model and names command"),
])
def test_a_binding_that_cannot_serve_refuses_the_run(tmp_path, binding, env, said):
    done = run(tmp_path, "plan", binding, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_endpoint_flow_toml_names_must_be_approved(tmp_path, server):
    server.script.append(Answer(content='{"value": 1}'))
    refused = run(tmp_path / "a", "count", bound(server), allow=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"running `send prompts and $OPENAI_API_KEY to {server.url}` was not approved" in refused.stderr
    assert not server.requests and not (tmp_path / "a" / "runs").exists()
    allowed = run(tmp_path / "b", "count", bound(server))
    assert allowed.returncode == 0, allowed.stderr
    run_dir = next((tmp_path / "b" / "runs").iterdir())
    records = [json.loads(line) for line in (run_dir / "host.jsonl").read_text().splitlines()]
    approval = next(r for r in records if r["kind"] == "approval")
    assert approval["command"] == ["send", "prompts", "and", "$OPENAI_API_KEY", "to", server.url]
    assert approval["how"] == "--allow"


def test_a_tool_with_other_parameters_cannot_be_bound_to_a_model(tmp_path, server):
    (tmp_path / "main.flow").write_text(
        "@tool pub flow rate(prompt: Text, stars: Int) -> Int\n"
        "pub flow main() -> Int !tool = rate(\"x\", 3)\n")
    (tmp_path / "flow.toml").write_text(f'[tools]\n"main" = {{ {bound(server)} }}\n')
    done = flow("run", "main.flow", "--runs", "runs", "--allow", cwd=tmp_path, env={"OPENAI_API_KEY": "k"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "parameter `stars`" in done.stderr and not server.requests


def test_a_failure_the_error_type_cannot_hold_is_bad_reply(tmp_path, server):
    (tmp_path / "main.flow").write_text(
        "@tool pub flow rate(prompt: Text) -> Int\n"
        "pub flow main() -> Int !tool = rate(\"how many?\")\n")
    (tmp_path / "flow.toml").write_text(f'[tools]\n"main" = {{ {bound(server)} }}\n')
    server.script.append(Answer(status=401, error="bad key"))
    done = flow("run", "main.flow", "--runs", "runs", "--allow", cwd=tmp_path, env={"OPENAI_API_KEY": "k"})
    # A Tool declared `-> Int` has no Failed: the 401 is BadReply, which faults the run (exit 1).
    assert done.returncode == 1, done.stdout + done.stderr
    assert "main.rate ended in BadReply" in done.stderr and "answered 401: bad key" in done.stderr


# ---- the request's schema and the reading of the answer, without an endpoint ------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from flowrt.model_tools import WantedReply  # noqa: E402
from flowrt.tool_types import Typed  # noqa: E402

ASK_ERROR = {"kind": {"enum": {"ctors": [{"name": "Refused", "payload": {"positional": ["Text"]}},
                                         {"name": "Busy"}]}}, "args": [], "name": "AskError",
             "identity": "main.AskError", "doc": None}
PLAN_DEF = {"kind": {"record": {"fields": [{"name": "steps", "type": {"List": "Text"}}]}}, "args": [],
            "name": "Plan", "identity": "main.Plan", "doc": None}
DEFS = {"main.AskError": ASK_ERROR, "main.Plan": PLAN_DEF}


def typed_at(term) -> Typed:
    description = {"tool": "main.ask", "type_params": ["T"], "ok": {"Param": "T"},
                   "err": {"Named": "main.AskError"}, "types": {"main.AskError": ASK_ERROR}}
    return Typed(description, [{"term": term, "defs": DEFS}])


def keys_in(schema) -> set:
    if isinstance(schema, dict):
        return set(schema) | set().union(*(keys_in(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(keys_in(v) for v in schema)) if schema else set()
    return set()


def test_an_enum_is_wrapped_and_put_in_the_strict_subset():
    wanted = WantedReply.of(typed_at({"Named": "main.AskError"}))
    assert wanted.wrapped and wanted.name == "main_AskError"
    assert wanted.schema["properties"]["value"] == {"$ref": "#/$defs/main.AskError"}
    enum = wanted.schema["$defs"]["main.AskError"]
    assert enum["anyOf"][1] == {"enum": ["Busy"]}
    assert not keys_in(wanted.schema) & {"oneOf", "const", "$schema"}
    assert wanted.outcome('{"value": "Busy"}') == {"Ok": "Busy"}
    assert wanted.outcome('"Busy"')["Err"]["BadReply"].startswith("$: expected an object with the one property")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_any_json_answer_for_a_record_is_handed_to_the_host_as_it_is(value):
    # Deciding whether it fits is the host's admit (with the path); the binding only parses.
    assert WantedReply.of(typed_at({"Named": "main.Plan"})).outcome(json.dumps(value)) == {"Ok": value}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_text_answer_is_ok_json_or_bad_reply_never_an_exception(text):
    got = WantedReply.of(typed_at({"List": "Int"})).outcome(text)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and set(parsed) == {"value"}:
        assert got == {"Ok": parsed["value"]}
    else:
        assert set(got["Err"]) == {"BadReply"}


def test_an_interrupt_with_a_model_call_out_halts_at_once_and_resume_says_unknown(tmp_path, server):
    import signal
    import time

    server.script.append(Answer(content='{"steps": [], "done": true}', delay=30))
    where = project(tmp_path, bound(server))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "FLOW_MODEL")}
    env["OPENAI_API_KEY"] = "k"
    running = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "main.flow", "--entry", "plan", "--input",
                                '{"goal": "g"}', "--runs", "runs", "--allow"], cwd=where, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.requests, "the call never reached the endpoint"
    running.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = running.communicate(timeout=60)
    # Not held up by the request still out (its answer would take 30 s).
    assert running.returncode == 130 and time.monotonic() - started < 10, (running.returncode, err)
    run_id = next((where / "runs").iterdir()).name
    resumed = flow("resume", run_id, "--runs", "runs", "--allow", cwd=where, env={"OPENAI_API_KEY": "k"})
    assert resumed.returncode == 4, resumed.stderr
    assert set(outcome(resumed)["Err"]) == {"Unknown"}


@pytest.mark.parametrize("term, strict", [
    ({"Named": "main.Plan"}, True),
    ({"Option": {"List": "Int"}}, True),
    ({"Dict": ["Text", "Int"]}, False),  # an open object: strict outputs want every object closed
    ({"Tuple": ["Int", "Text"]}, False),
    ("json.Value", False),
])
def test_a_type_strict_outputs_cannot_express_is_sent_with_strict_false(term, strict):
    wanted = WantedReply.of(typed_at(term))
    assert wanted.strict is strict and wanted.schema["type"] == "object"


def test_a_dict_is_sent_with_strict_false_and_still_decodes(tmp_path, server):
    (tmp_path / "main.flow").write_text(
        "@tool pub flow tally(prompt: Text) -> Dict<Text, Int>\n"
        "pub flow main() -> Dict<Text, Int> !tool = tally(\"count the words\")\n")
    (tmp_path / "flow.toml").write_text(f'[tools]\n"main" = {{ {bound(server)} }}\n')
    server.script.append(Answer(content='{"a": 2, "b": 1}'))  # an object already: not wrapped
    done = flow("run", "main.flow", "--runs", "runs", "--allow", cwd=tmp_path, env={"OPENAI_API_KEY": "k"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"a": 2, "b": 1}
    form = server.requests[0]["body"]["response_format"]["json_schema"]
    assert form["strict"] is False and form["schema"] == {"type": "object", "additionalProperties": {"type": "integer"}}
