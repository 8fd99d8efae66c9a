"""std@v1/structured (issue 15, item 2, step 2): structured output with repair, written in Flow.
Each attempt is its own recorded Tool call; the run replays Matched."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import flowrt
from tests.forging import read_facts

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "structured_ask" / "main.flow"
BAD = "$.Ok.steps[1]: expected a string, found the integer 2"


def flow(*args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def run(tmp_path, answer, attempts):
    seen: list[tuple] = []

    def ask(prompt, repair, call: flowrt.ToolCall):
        seen.append((prompt, repair, dict(call.types)))
        return answer(len(seen))

    outcome = flowrt.Host({"main.ask": ask}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "ship", "attempts": attempts}, entry="plan")
    return outcome, seen


def calls_and_replies(tmp_path, run_id):
    facts = read_facts(tmp_path / run_id)
    return [f for f in facts if f["kind"] == "Call"], [f for f in facts if f["kind"] == "Reply"]


def replays_matched(tmp_path, run_id):
    replayed = flow("replay", run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stdout + replayed.stderr


def test_a_bad_shape_then_a_good_one_is_ok_after_two_recorded_calls(tmp_path):
    outcome, seen = run(tmp_path, lambda n: {"steps": ["a", 2]} if n == 1 else {"steps": ["a", "b"]}, 3)
    assert outcome.exit_code == 0, outcome
    assert json.loads(outcome.output_json) == {"Ok": {"steps": ["a", "b"]}}
    assert seen == [("Plan the steps to: ship", None, {"T": {"Named": "main.Plan"}}),
                    ("Plan the steps to: ship", {"attempt": 1, "problem": BAD}, {"T": {"Named": "main.Plan"}})]
    calls, replies = calls_and_replies(tmp_path, outcome.run_id)
    assert [c["arguments"]["repair"] for c in calls] == [None, {"attempt": 1, "problem": BAD}]
    assert all(c["types"][0]["term"] == {"Named": "main.Plan"} for c in calls)
    assert [r["outcome"] for r in replies] == [{"Err": {"BadReply": BAD}}, {"Ok": {"steps": ["a", "b"]}}]
    replays_matched(tmp_path, outcome.run_id)


def test_always_bad_is_the_last_bad_reply_after_n_calls(tmp_path):
    outcome, seen = run(tmp_path, lambda n: {"steps": ["a", n]}, 4)
    assert outcome.exit_code == 4, outcome
    last = "$.Ok.steps[1]: expected a string, found the integer 4"
    assert json.loads(outcome.output_json) == {"Err": {"BadReply": last}}
    assert [r for _, r, _ in seen] == [None] + [
        {"attempt": n, "problem": f"$.Ok.steps[1]: expected a string, found the integer {n}"} for n in (1, 2, 3)]
    calls, replies = calls_and_replies(tmp_path, outcome.run_id)
    assert len(calls) == len(replies) == 4
    replays_matched(tmp_path, outcome.run_id)


def test_a_problem_that_is_not_the_shape_is_not_repaired(tmp_path):
    outcome, seen = run(tmp_path, lambda n: flowrt.failed({"Refused": "no"}), 3)
    assert outcome.exit_code == 4, outcome
    assert json.loads(outcome.output_json) == {"Err": {"Failed": {"Refused": "no"}}}
    assert len(seen) == 1
    replays_matched(tmp_path, outcome.run_id)


def test_fewer_than_one_attempt_still_asks_once(tmp_path):
    outcome, seen = run(tmp_path, lambda n: {"steps": [1]}, 0)
    assert outcome.exit_code == 4 and len(seen) == 1


def test_the_language_guide_example_is_the_tested_program():
    guide = (ROOT / "docs" / "language.md").read_text()
    section = guide[guide.index("### 10.7 Structured output with repair"):]
    block = re.search(r"```flow\n(.*?)```", section, re.S).group(1)
    assert block == PROGRAM.read_text()


FAKE = """\
use "std@v1/json"
use "std@v1/structured"
use "./main"

@fake(main.ask) flow fake_ask<T: Data>(call: Int, prompt: Text, repair: Option<structured.Repair>) -> Result<T, ToolProblem<main.AskError>> =
    match repair {
        None => Err(BadReply("$.Ok: expected an object")),
        Some(r) => match json.decode("{\\"steps\\": [\\"repaired after ${r.attempt}\\"]}") {
            Ok(v) => Ok(v),
            Err(why) => Err(BadReply(why)),
        },
    }

@test flow repairs_once() -> Result<Unit, Text> = {
    guard main.plan("x", 3) == Ok(main.Plan { steps: ["repaired after 1"] }) else { return Err("no repair") }
    guard main.plan("x", 1) == Err(BadReply("$.Ok: expected an object")) else { return Err("repaired past the bound") }
    Ok(())
}
"""


def test_flow_test_drives_the_repair_with_a_fake(tmp_path):
    (tmp_path / "main.flow").write_text(PROGRAM.read_text())
    (tmp_path / "main_test.flow").write_text(FAKE)
    done = flow("test", "main_test.flow", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS repairs_once" in done.stdout
