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


def test_summary_with_rounds_shows_the_latest_checkpoint(tmp_path):
    run_id = completed_run(tmp_path)
    done = flow("history", run_id, "--runs", str(tmp_path), "--summary", "--rounds")
    assert done.returncode == 0, done.stderr
    assert f"run {run_id}: ended" in done.stdout and "latest checkpoint: fact " in done.stdout
    assert "rounds: 1; replay: Matched" in done.stdout


def test_an_unknown_kind_is_refused_as_mcp_refuses_it(tmp_path):
    run_id = completed_run(tmp_path)
    bogus = flow("history", run_id, "--runs", str(tmp_path), "--kind", "Bogus")
    assert bogus.returncode == 2 and bogus.stdout == ""
    assert "--kind is one of Start, Call, Reply, Choice, Stop, Checkpoint, End" in bogus.stderr
    lower = flow("history", run_id, "--runs", str(tmp_path), "--kind", "reply", "--json")
    assert lower.returncode == 0 and {f["kind"] for f in json.loads(lower.stdout)["facts"]} == {"Reply"}


def test_runs_prints_a_root_problem_as_text(tmp_path):
    missing = flow("runs", "--runs", str(tmp_path / "absent"))
    assert missing.returncode == 0
    assert missing.stdout == "problem: root not-created: the runs directory does not exist\n"
    (tmp_path / "file").write_text("")
    unreadable = flow("runs", "--runs", str(tmp_path / "file"))
    assert unreadable.returncode == 2 and unreadable.stdout.startswith("problem: root unreadable: ")
    assert "{" not in unreadable.stdout


def feed_run(tmp_path: Path, rounds: int) -> tuple[Path, str]:
    """The history seed's feed loop (a task parked on its only call, passed from round to round),
    paused on that call after `rounds` rounds."""
    import shutil

    folder = tmp_path / "feed"
    if not folder.exists():
        shutil.copytree(ROOT / "tests" / "programs" / "feed", folder)
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "main.flow", "--allow", "--input",
                           json.dumps({"rounds": rounds}), "--runs", str(runs)], cwd=folder, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    return runs, done.stdout.split()[2]


def test_rounds_point_out_every_task_two_rounds_carry(tmp_path):
    runs, run_id = feed_run(tmp_path, 3)
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json", "--rounds").stdout)
    assert [[t["call"] for t in r["tasks"]] for r in view["rounds"]] == [["root/1#1"]] * 3
    assert view["carried"] == [{"call": "root/1#1", "tool": "main.next", "params": ["pending"], "rounds": [1, 2, 3],
                                "after_facts": [r["after_fact"] for r in view["rounds"]]}]
    text = flow("history", run_id, "--runs", str(runs), "--rounds").stdout
    assert "tasks carried across rounds:\n  root/1#1 (main.next, as pending): rounds 1, 2, 3 (after facts " in text
    # One round holds the task: no two rounds carry it. A run with no parked task carries none.
    runs, one = feed_run(tmp_path / "one", 1)
    single = json.loads(flow("history", one, "--runs", str(runs), "--json", "--rounds").stdout)
    assert len(single["rounds"]) == 1 and single["rounds"][0]["tasks"] and single["carried"] == []
    plain = completed_run(tmp_path / "plain")
    text = flow("history", plain, "--runs", str(tmp_path / "plain"), "--rounds").stdout
    assert "tasks carried across rounds: none\n" in text


def test_rounds_report_a_refused_re_run_not_matched(tmp_path):
    """A re-run the sandbox refuses has no verdict: `--rounds` says so (exit 2) as `flow replay`
    does, instead of counting it Matched. The refusal comes from a build cache whose generated
    code the sandbox's verifier rejects."""
    import os

    cache = tmp_path / "cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    runs = tmp_path / "runs"

    def flow_in(*args: str):
        return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env=env)

    done = flow_in("run", str(APPROVAL), "--allow", "--input", json.dumps(BIG), "--runs", str(runs))
    run_id = done.stdout.split()[2]
    entries = list((cache / "flow" / "build").glob("*.json"))
    assert entries
    for entry in entries:
        data = json.loads(entry.read_text())
        for module in data["modules"]:
            module["source"] = "import os\n" + module["source"]
        entry.write_text(json.dumps(data))
    replayed = flow_in("replay", run_id, "--runs", str(runs))
    assert replayed.returncode == 2 and "sandbox refused" in replayed.stderr + replayed.stdout
    shown = flow_in("history", run_id, "--runs", str(runs), "--rounds")
    assert shown.returncode == 2 and shown.stdout == ""
    assert shown.stderr.startswith("no rounds: the sandbox refused the program")
    as_data = flow_in("history", run_id, "--runs", str(runs), "--json", "--rounds")
    assert as_data.returncode == 2 and as_data.stderr == ""  # the refusal is the document
    document = json.loads(as_data.stdout)
    assert document["exitCode"] == 2 and document["message"].startswith("no rounds: the sandbox refused the program")


def test_rounds_verdict_covers_the_facts_from_the_earliest_held_checkpoint(tmp_path):
    runs, run_id = feed_run(tmp_path, 3)
    assert flow("archive", run_id, "--runs", str(runs)).returncode == 0
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json", "--rounds").stdout)
    held = [f["n"] for f in view["facts"] if f["kind"] == "Checkpoint"]
    assert view["replay"]["verdict"] == "Incomplete"  # paused: the record ends while the program waits
    assert held and view["replay"]["from"] == held[0] > 1
    replayed = json.loads(flow("replay", run_id, "--runs", str(runs), "--json").stdout)
    assert replayed["from"] == view["replay"]["from"]


def test_a_filtered_view_shows_exactly_the_whole_view_s_rows_for_its_facts(tmp_path):
    """Facts a selection hides are not described (a long run's `--fact 5` described every fact),
    yet each one shown is the whole view's row, its time and a Reply's duration included, and
    the checkpoints, the counts and the state are the whole view's."""
    run_id = completed_run(tmp_path)
    whole = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json").stdout)
    by_n = {row["n"]: row for row in whole["facts"]}
    assert any("durationMs" in row for row in whole["facts"])
    for selection in (["--kind", "Reply"], ["--kind", "checkpoint"], ["--fact", "3"], ["--search", "ledger"],
                      ["--kind", "Call", "--search", "people"], ["--fact", "999"]):
        view = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", *selection).stdout)
        assert view["facts"] == [by_n[row["n"]] for row in view["facts"]], selection
        assert {k: v for k, v in view.items() if k not in ("facts", "hidden")} == \
            {k: v for k, v in whole.items() if k not in ("facts", "hidden")}, selection
        assert view["hidden"] == whole["total"] - len(view["facts"])
    kinds = json.loads(flow("history", run_id, "--runs", str(tmp_path), "--json", "--kind", "Reply").stdout)
    assert [row["n"] for row in kinds["facts"]] == [row["n"] for row in whole["facts"] if row["kind"] == "Reply"]
    assert all("durationMs" in row for row in kinds["facts"]) == \
        all("durationMs" in by_n[row["n"]] for row in kinds["facts"])


LOOP = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""


def long_run(tmp_path, calls: int = 3000) -> tuple[Path, str]:
    """A run of `calls` echo calls (a Checkpoint, a Call and a Reply each: more facts than two
    of a deferred open's verification steps)."""
    import flowrt

    program = tmp_path / "echo.flow"
    program.write_text(LOOP)
    runs = tmp_path / "runs"
    outcome = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=str(runs), durability="none").run(
        str(program), {"n": calls})
    assert outcome.exit_code == 0
    return runs, outcome.run_id


def test_a_long_history_viewed_as_it_is_verified_shows_what_a_whole_read_shows(tmp_path):
    """`flow history` goes through the facts once, verifying as it goes and letting go of the
    facts it passed: its view is the one made from every fact held."""
    from flowrt import history_scan, inspect_cmd
    from flowrt.store import RunStore

    runs, run_id = long_run(tmp_path)
    whole = RunStore.open(str(runs), run_id, for_append=False)
    held = history_scan.RELEASE_EVERY
    history_scan.RELEASE_EVERY = 10 ** 9
    try:
        for selection in ((), ("--kind", "reply"), ("--fact", "8000"), ("--search", "4242")):
            options = dict(zip(("kind", "fact", "search"), (None, None, None)))
            if selection:
                name, value = selection[0].lstrip("-"), selection[1]
                options[name] = int(value) if name == "fact" else value
            expected = inspect_cmd.history_view(whole, **options)
            shown = flow("history", run_id, "--runs", str(runs), "--json", *selection)
            assert shown.returncode == 0, shown.stderr
            view = json.loads(shown.stdout)
            for key in ("exitCode", "message", "diagnostics"):
                view.pop(key)
            assert view == json.loads(json.dumps(expected)), selection
    finally:
        history_scan.RELEASE_EVERY = held
    assert expected["total"] == 9002 and view["facts"] and all("4242" in f["summary"] for f in view["facts"])


def test_damage_far_into_a_long_history_is_a_storage_failure(tmp_path):
    runs, run_id = long_run(tmp_path)
    path = runs / run_id / "history.jsonl"
    data = bytearray(path.read_bytes())
    data[-200] ^= 0x01  # in the last facts, far past what the open verifies first
    path.write_bytes(bytes(data))
    for selection in (("--fact", "5"), ("--json",), ("--source", "echo")):
        shown = flow("history", run_id, "--runs", str(runs), *selection)
        assert shown.returncode == 5 and "storage failure" in shown.stdout + shown.stderr, (selection, shown)


def test_pages_of_a_long_history_are_the_slices_of_the_whole(tmp_path, monkeypatch):
    """The Python API's `history` and MCP's `history` page by one pass that holds the page only
    (flowrt/history_scan.py, letting go of the facts passed every 500 here): each page is the
    slice of every fact a whole read gives, with the same totals and cursors."""
    import flowrt
    from flowrt import history_scan
    from flowrt.mcp_server import history_page
    from flowrt.store import RunStore

    monkeypatch.setattr(history_scan, "RELEASE_EVERY", 500)
    runs, run_id = long_run(tmp_path)
    whole = RunStore.open(str(runs), run_id, for_append=False).facts()
    host = flowrt.Host({}, runs_dir=str(runs))
    for after, kinds, limit in ((0, None, 100), (4000, None, 7), (8990, None, 100), (6000, ["Reply"], 50)):
        expected = [f for f in whole if f["n"] > after and (kinds is None or f["kind"] in kinds)]
        page = host.history(run_id, kinds=kinds, after=after, limit=limit)
        assert [f.n for f in page.facts] == [f["n"] for f in expected[:limit]]
        assert page.total == len(whole) and page.state == "ended"
        assert page.next_after == (expected[limit - 1]["n"] if len(expected) > limit else None)
    for kind, offset, limit in ((None, 0, 50), (None, 8990, 50), ("Call", 2500, 200), ("Checkpoint", 2999, 10)):
        expected = [f for f in whole if kind is None or f["kind"] == kind]
        view = history_page(str(runs), run_id, kind=kind, offset=offset, limit=limit, source=None, source_offset=0)
        assert [f["n"] for f in view["facts"]] == [f["n"] for f in expected[offset:offset + limit]]
        assert view["page"]["total"] == len(expected) and view["state"] == "ended"
        assert view["ending"] == "completed" and view["program"] == whole[0]["program"]
        after = offset + len(view["facts"])
        assert view["page"]["nextOffset"] == (after if after < len(expected) else None)
