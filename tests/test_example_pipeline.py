"""examples/pipeline (issue 15, item 5): seed 001's pipeline runs live against the example's own
fake model, pauses for a person's review, resumes to its digest, replays Matched with nothing
bound, and its `flow test` tests pass."""

from __future__ import annotations

import json
import re

from tests.example_model_server import ROOT, flow, serving

EXAMPLE = ROOT / "examples" / "pipeline"


def test_the_pipeline_runs_pauses_for_review_resumes_and_replays_matched(tmp_path):
    runs = str(tmp_path / "runs")
    batch = (EXAMPLE / "input.json").read_text()
    with serving("pipeline") as base_url:
        env = {"OPENAI_BASE_URL": base_url, "FAKE_MODEL_KEY": "fake"}
        paused = flow("run", "main.flow", "--runs", runs, "--input", batch, cwd=EXAMPLE, env=env)
        assert paused.returncode == 3, paused.stdout + paused.stderr
        run_id = re.search(r"paused: run (\S+)", paused.stdout).group(1)
        [call] = re.findall(r"pending call (\S+)", paused.stdout)

        waiting = json.loads(flow("history", run_id, "--runs", runs, "--json", cwd=tmp_path).stdout)
        assert waiting["state"] == "paused" and waiting["pending"] == [call]
        calls = [f for f in waiting["facts"] if f["kind"] == "Call"]
        assert [f["tool"] for f in calls].count("model.extract") == 5  # three documents, two repairs
        assert calls[-1]["tool"] == "review.confirm" and "q-3" in calls[-1]["summary"]
        replies = [f["summary"] for f in waiting["facts"] if f["kind"] == "Reply"]
        assert any('has no constructor \\"Crash\\"' in r for r in replies)  # bug-12's first answer

        done = flow("resume", run_id, "--runs", runs, "--call", call, "--reply", '{"Ok": "Keep"}', cwd=EXAMPLE, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    digest = json.loads(done.stdout)["Ok"]
    assert [(t["id"], t["reviewed"], t["finding"]["severity"]) for t in digest["triaged"]] == [
        ("inv-7", False, 3), ("bug-12", False, 4), ("q-3", True, 1)]
    assert digest["dropped"] == []
    assert digest["summary"].startswith("3 findings this batch, the worst of severity 4")

    # The server is gone and no OpenAI settings are in the environment; replay calls nothing.
    replayed = flow("replay", run_id, "--runs", runs, "--json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["verdict"] == "Matched"
    ended = json.loads(flow("history", run_id, "--runs", runs, "--json", cwd=tmp_path).stdout)
    assert ended["state"] == "ended" and ended["facts"][-1]["kind"] == "End"


def test_a_person_who_drops_the_finding_leaves_it_out_of_the_digest(tmp_path):
    runs = str(tmp_path / "runs")
    with serving("pipeline") as base_url:
        env = {"OPENAI_BASE_URL": base_url, "FAKE_MODEL_KEY": "fake"}
        paused = flow("run", "main.flow", "--runs", runs, "--input", (EXAMPLE / "input.json").read_text(),
                      cwd=EXAMPLE, env=env)
        assert paused.returncode == 3, paused.stderr
        run_id = re.search(r"paused: run (\S+)", paused.stdout).group(1)
        [call] = re.findall(r"pending call (\S+)", paused.stdout)
        done = flow("resume", run_id, "--runs", runs, "--call", call, "--reply", '{"Ok": {"Drop": "asked twice"}}',
                    cwd=EXAMPLE, env=env)
    assert done.returncode == 0, done.stderr
    digest = json.loads(done.stdout)["Ok"]
    assert [t["id"] for t in digest["triaged"]] == ["inv-7", "bug-12"]
    assert digest["dropped"] == ["q-3: asked twice"]


def test_an_answer_that_never_fits_ends_with_output_invalid_exit_4(tmp_path):
    batch = {"batch": {"documents": [{"id": "broken-1", "text": "Nothing the model can read."}],
                       "parallel": 1, "deadline": "PT1M", "agent_runs": 10}}
    with serving("pipeline") as base_url:
        done = flow("run", "main.flow", "--runs", str(tmp_path / "runs"), "--input", json.dumps(batch),
                    cwd=EXAMPLE, env={"OPENAI_BASE_URL": base_url, "FAKE_MODEL_KEY": "fake"})
    assert done.returncode == 4, done.stdout + done.stderr
    problem = json.loads(done.stdout)["Err"]["OutputInvalid"]
    assert problem["document"] == "broken-1" and "not JSON" in problem["problem"]


def test_input_that_does_not_decode_is_refused_before_anything_is_recorded(tmp_path):
    # Seed 001's workflow-input-validation: the input is decoded against the entry's types.
    done = flow("run", "main.flow", "--runs", str(tmp_path / "runs"), "--input", '{"batch": {"documents": []}}',
                cwd=EXAMPLE, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "FAKE_MODEL_KEY": "fake"})
    assert done.returncode == 2 and "input-invalid" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_flow_test_passes_for_the_example():
    done = flow("test", "examples/pipeline", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b14 passed, 0 failed", done.stdout)
