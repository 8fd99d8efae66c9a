"""`flow history`, `flow runs` and `flow redact` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPROVAL = ROOT / "examples" / "approval" / "main.flow"
BIG = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}


def flow(*args: str, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def completed_run(runs: Path, *extra: str) -> str:
    done = flow("run", str(APPROVAL), "--allow", *extra, "--input", json.dumps(BIG), "--runs", str(runs))
    run_id = done.stdout.split()[2]
    assert flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--runs", str(runs),
                "--allow").returncode == 0
    return run_id


def test_history_shows_numbered_facts_with_call_identities(tmp_path):
    run_id = completed_run(tmp_path)
    view = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json").stdout)
    kinds = [f["kind"] for f in view["facts"]]
    assert kinds[0] == "Start" and kinds[-1] == "End" and "Checkpoint" in kinds
    calls = [f for f in view["facts"] if f["kind"] == "Call"]
    assert calls[0]["call"] == "root#1" and calls[0]["tool"] == "people.approve"
    assert view["state"] == "ended" and view["hidden"] == 0 and view["total"] == len(kinds)
    assert view["rounds"] and view["rounds"][0]["function"] == {"module": "main", "name": "book"}
    only = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", "--kind", "Reply").stdout)
    assert [f["kind"] for f in only["facts"]] == ["Reply", "Reply"]
    assert only["hidden"] == view["total"] - 2
    assert [f["n"] for f in only["facts"]] == [f["n"] for f in view["facts"] if f["kind"] == "Reply"]
    one = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", "--fact", "2").stdout)
    assert [f["n"] for f in one["facts"]] == [2]
    found = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", "--search", "ledger").stdout)
    assert [f["tool"] for f in found["facts"]] == ["ledger.record"]
    text = flow("history", run_id, "--runs", str(tmp_path)).stdout
    assert "root#1" in text and "people.approve" in text


def test_history_source_is_the_recorded_module(tmp_path):
    run_id = completed_run(tmp_path)
    done = flow("history", run_id, "--runs", str(tmp_path), "--source", "people")
    assert done.returncode == 0
    assert done.stdout == (ROOT / "examples" / "approval" / "people.flow").read_text()
    assert flow("history", run_id, "--runs", str(tmp_path), "--source", "nope").returncode == 2


def test_runs_lists_rows_and_pages(tmp_path):
    first = completed_run(tmp_path)
    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(BIG), "--runs", str(tmp_path))
    second = paused.stdout.split()[2]
    page = json.loads(flow("runs", "--runs", str(tmp_path), "--json").stdout)
    rows = {r["run"]: r for r in page["runs"]}
    assert rows[first]["record"] == "complete" and rows[first]["ending"] == "completed"
    assert rows[second]["record"] == "incomplete"
    assert rows[first]["entry"] == {"module": "main", "function": "main"}
    limited = json.loads(flow("runs", "--runs", str(tmp_path), "--json", "--limit", "1").stdout)
    assert len(limited["runs"]) == 1 and limited["nextAfter"] == limited["runs"][0]["run"]
    missing = flow("runs", "--runs", str(tmp_path / "absent"), "--json")
    assert missing.returncode == 0 and json.loads(missing.stdout)["runs"] == []


def test_a_redacted_value_is_a_hole_and_a_replay_that_needs_it_is_incomplete(tmp_path):
    run_id = completed_run(tmp_path, "--redactable")
    assert flow("replay", run_id, "--runs", str(tmp_path)).returncode == 0
    view = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json").stdout)
    last_reply = [f["n"] for f in view["facts"] if f["kind"] == "Reply"][-1]
    done = flow("redact", run_id, "--fact", str(last_reply), "--runs", str(tmp_path))
    assert done.returncode == 0, done.stderr
    view = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json").stdout)
    fact = [f for f in view["facts"] if f["n"] == last_reply][0]
    assert fact["hole"]["field"] == "outcome" and fact["hole"]["hash"].startswith("sha256:")
    replayed = flow("replay", run_id, "--runs", str(tmp_path), "--json")
    assert replayed.returncode == 3
    assert json.loads(replayed.stdout)["verdict"] == "Incomplete"


def test_rounds_view_re_runs_the_program(tmp_path):
    run_id = completed_run(tmp_path)
    view = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", "--rounds").stdout)
    assert view["replay"]["verdict"] == "Matched"
    assert [r["function"]["name"] for r in view["rounds"]] == ["book"]
    assert view["rounds"][0]["arguments"]["note"] == "fine"
    assert view["rounds"][0]["checkpoint"] is not None
