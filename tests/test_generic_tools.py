"""Generic Tools end to end (issue 15, item 1): `ask<T>` as docs/language.md §10.3 shows it. The
reply decodes at the call's concrete type, implementations are told that type (terms and JSON
Schemas: a Python callable's `call: flowrt.ToolCall`, the command protocol's `types`/`schema`,
`flowrt.toolkit.serve`'s handlers), and replay holds a run to the type its Call recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


import flowrt
from tests.forging import forge, read_facts

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "generic_ask" / "main.flow"
PLAN_TERM = {"Named": "main.Plan"}


def flow(*args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_a_python_callable_is_told_the_type_and_its_reply_decodes_at_it(tmp_path):
    seen: list[flowrt.ToolCall] = []

    def ask(prompt: str, call: flowrt.ToolCall):
        seen.append(call)
        return {"steps": ["draft", prompt]}

    outcome = flowrt.Host({"main.ask": ask}, runs_dir=str(tmp_path)).run(str(PROGRAM), {"goal": "ship"}, entry="plan")
    assert outcome.exit_code == 0, outcome
    assert json.loads(outcome.output_json) == {"Ok": {"steps": ["draft", "Plan the steps to: ship"]}}
    (call,) = seen
    assert (call.run, call.call, call.tool) == (outcome.run_id, "root#1", "main.ask")
    assert call.types == {"T": PLAN_TERM}
    assert call.defs["main.Plan"]["name"] == "Plan"
    plan_schema = call.schemas["T"]["$defs"]["main.Plan"]
    assert plan_schema["required"] == ["steps"] and plan_schema["properties"]["steps"]["items"] == {"type": "string"}
    ok_shape, err_shape = call.outcome_schema["oneOf"]
    assert ok_shape["properties"]["Ok"] == {"$ref": "#/$defs/main.Plan"}
    assert {"Failed", "NotRun", "Unknown", "BadReply"} == {
        next(iter(p["required"])) for p in err_shape["properties"]["Err"]["oneOf"]}
    # The Call records the concrete type; the run replays Matched.
    facts = read_facts(tmp_path / outcome.run_id)
    assert facts[1]["kind"] == "Call" and facts[1]["types"][0]["term"] == PLAN_TERM
    replayed = flow("replay", outcome.run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stderr


def test_a_reply_of_the_wrong_shape_is_bad_reply_with_its_path(tmp_path):
    host = flowrt.Host({"main.ask": lambda prompt: {"steps": ["one", 2]}}, runs_dir=str(tmp_path))
    outcome = host.run(str(PROGRAM), {"goal": "ship"}, entry="plan")
    assert outcome.exit_code == 4
    assert json.loads(outcome.output_json) == {"Err": {"BadReply": "$.Ok.steps[1]: expected a string, found the integer 2"}}
    undeclared = flowrt.Host({"main.ask": lambda prompt: {"steps": [], "extra": 1}}, runs_dir=str(tmp_path))
    bad = json.loads(undeclared.run(str(PROGRAM), {"goal": "ship"}, entry="plan").output_json)
    assert bad["Err"]["BadReply"].startswith("$.Ok") and "extra" in bad["Err"]["BadReply"]


def test_one_tool_at_two_types_in_one_run(tmp_path):
    told = []

    def ask(prompt, call):
        told.append(call.types["T"])
        return 7 if call.types["T"] == "Int" else {"steps": [prompt]}

    outcome = flowrt.Host({"main.ask": ask}, runs_dir=str(tmp_path)).run(str(PROGRAM), {"goal": "g"},
                                                                         entry="plan_and_count")
    assert outcome.exit_code == 0, outcome
    assert json.loads(outcome.output_json) == {"Ok": [{"steps": ["Plan the steps to: g"]}, 7]}
    assert told == [PLAN_TERM, "Int"]
    # An Int where the second call asked one, a Plan where the first did; swapped, both are wrong.
    swapped = flowrt.Host({"main.ask": lambda prompt, call: 7 if call.types["T"] != "Int" else {"steps": []}},
                          runs_dir=str(tmp_path)).run(str(PROGRAM), {"goal": "g"}, entry="plan_and_count")
    assert json.loads(swapped.output_json)["Err"]["BadReply"].startswith("$.Ok: expected")


def test_a_callable_without_a_call_parameter_gets_only_the_arguments(tmp_path):
    outcome = flowrt.Host({"main.ask": lambda **kw: {"steps": sorted(kw)}}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "g"}, entry="plan")
    assert json.loads(outcome.output_json) == {"Ok": {"steps": ["prompt"]}}


def test_a_command_tool_served_by_the_toolkit_answers_from_the_schemas(tmp_path):
    """`ask_tool.py` (flowrt.toolkit.serve) builds its answer from the schema the message carries."""
    runs = tmp_path / "runs"
    done = flow("run", str(PROGRAM), "--entry", "plan_and_count", "--input", '{"goal": "ship"}', "--runs", str(runs),
                "--allow")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"Ok": [{"steps": ["from the schema"]}, 3]}
    run_id = next(p.name for p in runs.iterdir())
    replayed = flow("replay", run_id, "--runs", str(runs))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stderr


def test_the_call_message_carries_terms_schemas_and_the_outcome_schema(tmp_path):
    """A raw command implementation (no toolkit) logs the call message it is sent."""
    log = tmp_path / "calls.jsonl"
    tool = tmp_path / "raw_tool.py"
    tool.write_text(
        "import json, sys\n"
        "from flowrt.toolkit import describe\n"
        f"log = open({str(log)!r}, 'a')\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m['op'] == 'describe':\n"
        f"        out = {{'op': 'described', 'tools': describe({str(PROGRAM)!r}, ['main.ask'])}}\n"
        "    elif m['op'] == 'call':\n"
        "        log.write(line); log.flush()\n"
        "        out = {'id': m['id'], 'outcome': {'Ok': {'steps': ['raw']}}}\n"
        "    else:\n"
        "        continue\n"
        "    print(json.dumps(out), flush=True)\n")
    program = tmp_path / "main.flow"
    program.write_text(PROGRAM.read_text())
    (tmp_path / "flow.toml").write_text('[tools]\n"main" = { python = "raw_tool.py" }\n')
    done = flow("run", str(program), "--entry", "plan", "--input", '{"goal": "x"}', "--runs", str(tmp_path / "runs"),
                "--allow", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (message,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert message["types"]["T"]["term"] == PLAN_TERM
    assert set(message["types"]["T"]["defs"]) == {"main.Plan"}
    assert message["types"]["T"]["schema"]["$ref"] == "#/$defs/main.Plan"
    assert message["schema"]["oneOf"][0]["properties"]["Ok"] == {"$ref": "#/$defs/main.Plan"}
    assert set(message["schema"]["$defs"]) == {"main.Plan", "main.AskError"}


def test_replay_diverges_at_a_call_whose_recorded_type_is_forged(tmp_path):
    outcome = flowrt.Host({"main.ask": lambda prompt: {"steps": ["a"]}}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "g"}, entry="plan")
    assert outcome.exit_code == 0
    run_dir = tmp_path / outcome.run_id
    call = next(f for f in read_facts(run_dir) if f["kind"] == "Call")
    forge(run_dir, call["n"], "types", lambda types: [{"term": "Int", "defs": {}}])
    replayed = flow("replay", outcome.run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "Diverged" in replayed.stdout and f"fact {call['n']}" in replayed.stdout + replayed.stderr
    assert "another type" in replayed.stdout + replayed.stderr


def test_a_paused_generic_call_answered_by_resume_decodes_at_its_type(tmp_path):
    outcome = flowrt.Host({"main.ask": lambda prompt: flowrt.PENDING}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "g"}, entry="plan")
    assert outcome.exit_code == 3
    refused = flow("resume", outcome.run_id, "--call", "root#1", "--reply", '{"Ok": {"steps": [1]}}', "--runs",
                   str(tmp_path), "--allow")
    assert refused.returncode == 2 and "$.Ok.steps[0]: expected a string" in refused.stderr, refused.stderr
    wrong = flow("resume", outcome.run_id, "--call", "root#1", "--reply", '{"Ok": {"steps": [1]}}', "--runs",
                 str(tmp_path), "--allow", "--admit-bad-reply")
    assert wrong.returncode == 4, wrong.stderr
    assert json.loads(wrong.stdout) == {"Err": {"BadReply": "$.Ok.steps[0]: expected a string, found the integer 1"}}
    again = flowrt.Host({"main.ask": lambda prompt: flowrt.PENDING}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "g"}, entry="plan")
    right = flow("resume", again.run_id, "--call", "root#1", "--reply", '{"Ok": {"steps": ["s"]}}', "--runs",
                 str(tmp_path), "--allow")
    assert right.returncode == 0, right.stderr
    assert json.loads(right.stdout) == {"Ok": {"steps": ["s"]}}


FAKE_ERRORS = """\
use "./main"

@fake(main.ask) flow fake_ask<T: Data>(call: Int, prompt: Text) -> Result<T, ToolProblem<main.AskError>> =
    if call == 1 { Err(Failed(main.Refused(prompt))) } else { Err(NotRun("offline")) }

@test flow a_refusal_comes_back() -> Result<Unit, Text> = {
    guard main.plan("x") == Err(Failed(main.Refused("Plan the steps to: x"))) else { return Err("expected the refusal") }
    guard main.plan("y") == Err(NotRun("offline")) else { return Err("expected NotRun") }
    Ok(())
}
"""

FAKE_VALUE = """\
use "std@v1/json"
use "./main"

@fake(main.ask) flow fake_ask<T: Data>(prompt: Text) -> Result<T, ToolProblem<main.AskError>> =
    match json.decode("{\\"steps\\": [\\"one\\"]}") {
        Ok(v) => Ok(v),
        Err(why) => Err(BadReply(why)),
    }

@test flow plans_from_the_fake() -> Result<Unit, Text> = {
    guard main.plan("x") == Ok(main.Plan { steps: ["one"] }) else { return Err("the fake's plan did not come back") }
    Ok(())
}
"""


def fake_test(tmp_path: Path, text: str):
    (tmp_path / "main.flow").write_text(PROGRAM.read_text())
    (tmp_path / "main_test.flow").write_text(text)
    return flow("test", "main_test.flow", cwd=tmp_path)


def test_a_fake_of_a_generic_tool_answers_its_problems(tmp_path):
    done = fake_test(tmp_path, FAKE_ERRORS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS a_refusal_comes_back" in done.stdout


def test_a_fake_of_a_generic_tool_makes_a_value_of_the_call_type(tmp_path):
    """The fake is handed the call's type arguments (flowc/runtypes.py): json.decode in it decodes a Plan."""
    done = fake_test(tmp_path, FAKE_VALUE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS plans_from_the_fake" in done.stdout
