"""Replay from Start checks every Checkpoint it meets, through the real `flow` entry point: a
Checkpoint whose arguments were altered (and the chain hashed again, so the store finds nothing
wrong) is Diverged at that fact, with exit 1; a saved history whose program was changed before
its latest checkpoint fails `flow test` at the right fact; an untouched history, with several
checkpoints, concurrency and a task parked across checkpoints, is Matched from Start. Replay
from the latest checkpoint is the quick path, and says what it did not check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowrt.run import run
from tests.forging import alter_arguments, forge, read_facts

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "examples" / "support"

ROUNDS = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow work(round: Int, part: Int) -> Int

pub flow main(rounds: Int) -> Int !tool = loop(rounds, 0)

flow loop(left: Int, done: Int) -> Int !tool =
    if left == 0 { done } else {
        let answers = task.all([
            flow() = work(left, 1), flow() = work(left, 2), flow() = work(left, 3),
        ])
        loop(left - 1, done + list.length(answers))
    }
"""


def flow(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def verdict(runs: Path, run_id: str, *options: str) -> tuple[int, dict]:
    done = flow("replay", run_id, "--runs", str(runs), "--json", *options)
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    document = json.loads(done.stdout)
    # The verdict's fields, beside what every --json document has (docs/cli.md, "Results as data").
    assert document["exitCode"] == done.returncode and document["run"] == run_id
    return done.returncode, {k: document[k] for k in ("verdict", "fact", "reason", "from")}


@pytest.fixture
def support(tmp_path) -> tuple[Path, Path, str]:
    """A copy of the support example with its saved history: (folder, runs dir, run id)."""
    folder = tmp_path / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns(".flow"))
    runs = folder / "histories"
    [run_id] = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    return folder, runs, run_id


def checkpoints(runs: Path, run_id: str) -> list[int]:
    return [f["n"] for f in read_facts(runs / run_id) if f["kind"] == "Checkpoint"]


@pytest.fixture(scope="module")
def rounds_run(tmp_path_factory) -> tuple[Path, str]:
    """Five rounds of three concurrent calls, a checkpoint after each round."""
    work = tmp_path_factory.mktemp("rounds")
    (work / "rounds.flow").write_text(ROUNDS)
    outcome = run(str(work / "rounds.flow"), input_text='{"rounds": 5}', runs_dir=str(work / "runs"),
                  python_tools={"rounds.work": lambda round, part: round * 10 + part}, durability="none",
                  checkpoints="every")
    assert outcome.exit_code == 0, outcome.message
    return work / "runs", outcome.run_id


def copy_of(recorded: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    runs, run_id = recorded
    shutil.copytree(runs / run_id, tmp_path / "runs" / run_id)
    return tmp_path / "runs", run_id


# ---- (c) an untouched history is Matched from Start ---------------------------------------------


def test_the_saved_support_history_matches_from_start_and_from_its_latest_checkpoint(support):
    _, runs, run_id = support
    assert checkpoints(runs, run_id) == [9, 14]
    code, whole = verdict(runs, run_id)
    assert code == 0 and whole == {"verdict": "Matched", "fact": None, "reason": "", "from": 1}
    code, explicit = verdict(runs, run_id, "--from-start")
    assert code == 0 and explicit == whole
    code, quick = verdict(runs, run_id, "--from-latest-checkpoint")
    assert code == 0 and quick["verdict"] == "Matched" and quick["from"] == 14
    human = flow("replay", run_id, "--runs", str(runs), "--from-latest-checkpoint")
    assert human.returncode == 0 and human.stdout == "Matched\n"
    assert "replayed from the checkpoint at fact 14; the facts before it were not checked" in human.stderr
    assert flow("replay", run_id, "--runs", str(runs)).stderr == ""  # from Start: nothing left unchecked


def test_a_run_with_many_checkpoints_and_concurrent_calls_matches_from_start(rounds_run):
    runs, run_id = rounds_run
    assert len(checkpoints(runs, run_id)) == 5
    assert verdict(runs, run_id) == (0, {"verdict": "Matched", "fact": None, "reason": "", "from": 1})


def test_a_task_parked_across_checkpoints_matches_from_start(tmp_path):
    """`next` stays open while four rounds pass (each checkpoint carries the task parked on it);
    the run pauses, is resumed with the reply, and the whole history replays."""
    folder = tmp_path / "feed"
    shutil.copytree(ROOT / "tests" / "programs" / "feed", folder)
    runs = tmp_path / "runs"
    paused = flow("run", "main.flow", "--allow", "--input", '{"rounds": 4}', "--runs", str(runs), cwd=folder)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    run_id = paused.stdout.split()[2]
    assert verdict(runs, run_id)[1]["verdict"] == "Incomplete"
    done = flow("resume", run_id, "--call", "root/1#1", "--reply", '{"Ok": "hello"}', "--runs", str(runs), "--allow",
                cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    parked = [f["n"] for f in read_facts(runs / run_id)
              if f["kind"] == "Checkpoint" and f["arguments"]["pending"].get("call") == "root/1#1"]
    assert len(parked) == 4
    assert verdict(runs, run_id) == (0, {"verdict": "Matched", "fact": None, "reason": "", "from": 1})
    # Altering the data of a checkpoint that also carries the parked task is found there.
    forge(runs / run_id, parked[1], "arguments", alter_arguments)
    assert verdict(runs, run_id)[1]["fact"] == parked[1]


def test_an_archived_history_replays_from_the_checkpoint_it_goes_on_at(support):
    _, runs, run_id = support
    archived = flow("archive", run_id, "--runs", str(runs))
    assert archived.returncode == 0, archived.stderr
    assert [f["n"] for f in read_facts(runs / run_id)][:2] == [1, 14]
    code, whole = verdict(runs, run_id)
    assert code == 0 and whole["verdict"] == "Matched" and whole["from"] == 14
    assert "the facts before it were not checked" in flow("replay", run_id, "--runs", str(runs)).stderr


# ---- (b) a Checkpoint altered and the chain hashed again ---------------------------------------


@pytest.mark.parametrize("which", [0, 1])
def test_an_altered_checkpoint_of_the_support_history_diverges_at_that_fact(support, which):
    folder, runs, run_id = support
    target = checkpoints(runs, run_id)[which]
    forge(runs / run_id, target, "arguments", alter_arguments)
    assert flow("history", run_id, "--runs", str(runs)).returncode == 0  # the store sees a sound chain
    for options in ((), ("--from-start",)):
        code, seen = verdict(runs, run_id, *options)
        assert code == 1, seen
        assert seen["verdict"] == "Diverged" and seen["fact"] == target and seen["from"] == 1
        assert seen["reason"] == f"checkpoint {target} holds other arguments than the program computes"
    human = flow("replay", run_id, "--runs", str(runs))
    assert human.returncode == 1
    assert human.stdout.startswith(f"Diverged at fact {target}: checkpoint {target} holds other arguments")
    tested = flow("test", str(runs), "--json")
    assert tested.returncode == 1, tested.stdout + tested.stderr
    [result] = json.loads(tested.stdout)["tests"]
    assert result["outcome"] == "failed" and result["message"].startswith(f"Diverged at fact {target}: ")
    if which == 0:
        # The quick path trusts what comes before the latest checkpoint, and says so.
        quick = flow("replay", run_id, "--runs", str(runs), "--from-latest-checkpoint")
        assert quick.returncode == 0 and "were not checked" in quick.stderr


def test_every_checkpoint_of_a_run_with_many_altered_in_turn_diverges_at_it(rounds_run, tmp_path):
    numbers = checkpoints(*rounds_run)
    for index, target in enumerate(numbers):
        runs, run_id = copy_of(rounds_run, tmp_path / str(index))
        forge(runs / run_id, target, "arguments", alter_arguments)
        code, seen = verdict(runs, run_id)
        assert (code, seen["verdict"], seen["fact"]) == (1, "Diverged", target), seen


def test_an_altered_checkpoint_by_reference_diverges_at_that_fact(tmp_path):
    """Arguments over the inline limit are stored in values/: the forgery writes the new value
    under its own hash and refers to it."""
    (tmp_path / "notes.flow").write_text(
        "@tool pub flow note(i: Int) -> Text\n\n"
        "pub flow main(n: Int) -> Int !tool = loop(n, [])\n\n"
        "flow loop(n: Int, seen: List<Text>) -> Int !tool =\n"
        "    if n == 0 { 0 } else { loop(n - 1, seen ++ [note(n)]) }\n")
    outcome = run(str(tmp_path / "notes.flow"), input_text='{"n": 4}', runs_dir=str(tmp_path / "runs"),
                  python_tools={"notes.note": lambda i: "x" * 600}, durability="none", checkpoints="every")
    assert outcome.exit_code == 0, outcome.message
    facts = read_facts(tmp_path / "runs" / outcome.run_id)
    by_reference = [f["n"] for f in facts if f["kind"] == "Checkpoint" and "arguments_ref" in f]
    assert by_reference
    forge(tmp_path / "runs" / outcome.run_id, by_reference[0], "arguments", alter_arguments)
    code, seen = verdict(tmp_path / "runs", outcome.run_id)
    assert (code, seen["fact"]) == (1, by_reference[0])


# ---- (a) the program changed before the history's latest checkpoint ----------------------------


@pytest.mark.parametrize("old, new, fact", [
    # what the race's winner adds to the notes: the first checkpoint (fact 9) holds other notes
    ("Ok(hit) => work(ticket, notes ++ [hit], round + 1)", 'Ok(hit) => work(ticket, notes ++ [hit ++ "."], round + 1)',
     9),
    # the first call's arguments (fact 2)
    ("= work(ticket, [], 1)", '= work(ticket, ["seen"], 1)', 2),
])
def test_flow_test_fails_a_history_whose_program_changed_before_its_latest_checkpoint(support, old, new, fact):
    folder, runs, run_id = support
    main = folder / "main.flow"
    assert old in main.read_text()
    main.write_text(main.read_text().replace(old, new))
    assert fact < checkpoints(runs, run_id)[-1]
    tested = flow("test", str(runs), "--json")
    assert tested.returncode == 1, tested.stdout + tested.stderr
    [result] = json.loads(tested.stdout)["tests"]
    assert result["outcome"] == "failed" and result["message"].startswith(f"Diverged at fact {fact}: "), result
    human = flow("test", str(runs))
    assert f"Diverged at fact {fact}:" in human.stdout and human.stdout.strip().endswith("0 passed, 1 failed")
    # `flow replay` re-runs the program the history recorded (its stored sources), not the
    # working file: the record is still what that program does, from Start and from the checkpoint.
    assert verdict(runs, run_id)[1]["verdict"] == "Matched"
    assert verdict(runs, run_id, "--from-latest-checkpoint")[1]["verdict"] == "Matched"


# ---- the MCP tool says the same ----------------------------------------------------------------


def test_the_mcp_replay_tool_replays_from_start_unless_asked(support):
    from tests.test_mcp import call, scenario, session

    _, runs, run_id = support
    target = checkpoints(runs, run_id)[0]
    forge(runs / run_id, target, "arguments", alter_arguments)

    @scenario
    async def check() -> None:
        async with session(runs) as client:
            whole = (await call(client, "replay", {"run": run_id})).structured_content
            assert whole["exitCode"] == 1 and whole["verdict"]["verdict"] == "Diverged"
            assert whole["verdict"]["fact"] == target and whole["verdict"]["from"] == 1
            quick = (await call(client, "replay", {"run": run_id, "from_latest_checkpoint": True})
                     ).structured_content
            assert quick["exitCode"] == 0 and quick["verdict"] == {"verdict": "Matched", "fact": None, "reason": "",
                                                                   "from": 14}

    check()
