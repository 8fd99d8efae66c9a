"""examples/research (issue 15, item 5): the research agent runs live against the example's own
fake model and search stand-ins, pauses for a person's approval, resumes to a structured answer,
replays Matched with nothing bound, and its `flow test` tests pass."""

from __future__ import annotations

import json
import re

from tests.example_model_server import ROOT, flow, serving

EXAMPLE = ROOT / "examples" / "research"
QUESTION = json.dumps({"question": "Does a four-day week keep productivity?"})


def facts_of(run_id: str, runs: str, cwd) -> dict:
    return json.loads(flow("history", run_id, "--runs", runs, "--json", cwd=cwd).stdout)


def test_the_agent_plans_races_pauses_for_approval_resumes_and_replays_matched(tmp_path):
    runs = str(tmp_path / "runs")
    with serving("research") as base_url:
        # --allow approves search_tools.py; XDG_CONFIG_HOME keeps the approval out of the user's own.
        env = {"OPENAI_BASE_URL": base_url, "FAKE_MODEL_KEY": "fake", "XDG_CONFIG_HOME": str(tmp_path / "config")}
        paused = flow("run", "main.flow", "--runs", runs, "--allow", "--input", QUESTION, cwd=EXAMPLE, env=env)
        assert paused.returncode == 3, paused.stdout + paused.stderr
        run_id = re.search(r"paused: run (\S+)", paused.stdout).group(1)
        [call] = re.findall(r"pending call (\S+)", paused.stdout)

        waiting = facts_of(run_id, runs, tmp_path)
        assert waiting["state"] == "paused" and waiting["pending"] == [call]
        facts = waiting["facts"]
        calls = [f["tool"] for f in facts if f["kind"] == "Call"]
        assert calls[:2] == ["model.ask", "model.ask"]  # the plan, and its repair
        assert '"BadReply":"$.Ok.queries: expected an array' in facts[2]["summary"]
        assert sorted(calls[2:11]) == sorted(["search.papers", "search.web", "search.archive"] * 3)
        assert calls[-1] == "people.approve"
        # Each of the three races picks a winner, and the searches it no longer needs are stopped.
        assert sum(f["kind"] == "Choice" for f in facts) >= 3
        assert sum(f["kind"] == "Stop" for f in facts) >= 3

        reply = json.dumps({"Ok": {"Approve": "say how many companies kept it"}})
        done = flow("resume", run_id, "--runs", runs, "--allow", "--call", call, "--reply", reply, cwd=EXAMPLE, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)["Ok"]
    assert answer["question"] == "Does a four-day week keep productivity?"
    urls = [s["url"] for s in answer["sources"]]
    assert sorted(urls) == ["https://example.org/papers/4dw-uk", "https://example.org/web/burnout",
                            "https://example.org/web/iceland"]
    report = answer["report"]
    assert sorted(c["source"] for c in report["claims"]) == [0, 1, 2]
    assert report["confidence"] == "High" and "(say how many companies kept it)" in report["summary"]
    ended = facts_of(run_id, runs, tmp_path)
    writes = [f for f in ended["facts"] if f["kind"] == "Reply" and "An uncited claim" in f["summary"]]
    assert len(writes) == 1  # the writer's first answer cited no given source, and was repaired

    # The model server and the search process are gone, nothing is bound; replay calls nothing.
    replayed = flow("replay", run_id, "--runs", runs, "--json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["verdict"] == "Matched"
    assert ended["state"] == "ended" and ended["facts"][-1]["kind"] == "End"


def test_a_rejection_ends_the_run_with_the_agents_own_err(tmp_path):
    runs = str(tmp_path / "runs")
    with serving("research") as base_url:
        env = {"OPENAI_BASE_URL": base_url, "FAKE_MODEL_KEY": "fake", "XDG_CONFIG_HOME": str(tmp_path / "config")}
        paused = flow("run", "main.flow", "--runs", runs, "--allow", "--input", QUESTION, cwd=EXAMPLE, env=env)
        assert paused.returncode == 3, paused.stderr
        run_id = re.search(r"paused: run (\S+)", paused.stdout).group(1)
        [call] = re.findall(r"pending call (\S+)", paused.stdout)
        done = flow("resume", run_id, "--runs", runs, "--call", call, "--reply", '{"Ok": {"Reject": "out of scope"}}',
                    "--allow", cwd=EXAMPLE, env=env)
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout) == {"Err": {"Rejected": "out of scope"}}
    # No answer was written: the model was asked only for the plan.
    calls = [f["tool"] for f in facts_of(run_id, runs, tmp_path)["facts"] if f["kind"] == "Call"]
    assert calls.count("model.ask") == 2


def test_without_approval_of_the_search_script_nothing_runs(tmp_path):
    done = flow("run", "main.flow", "--runs", str(tmp_path / "runs"), "--input", QUESTION, cwd=EXAMPLE,
                env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "FAKE_MODEL_KEY": "fake",
                     "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert done.returncode == 2 and "binding-not-approved" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_flow_test_passes_for_the_example():
    done = flow("test", "examples/research", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b6 passed, 0 failed", done.stdout)
