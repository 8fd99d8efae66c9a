"""std@v1/task at run time: concurrent calls, race with a recorded Choice and Stop, the support
example's history, faults in spawned tasks, replay of concurrent runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson

import flowrt
from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]

TEN = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow slow(n: Int) -> Int

pub flow main(n: Int) -> List<Int> !tool = task.all(list.map(list.range(0, n), flow(i) = flow() = slow(i)))
"""

FAULTY = """
use "std@v1/task"

pub flow main(n: Int) -> Int !tool = {
    let t = task.spawn(flow() = 10 / n)
    task.wait(t)
}
"""


def flow(*args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def facts(runs: Path, run_id: str) -> list[dict]:
    store = RunStore.open(str(runs), run_id, for_append=False)
    try:
        return store.facts()
    finally:
        store.close()


def test_ten_one_second_calls_take_about_one_second_through_the_python_api(tmp_path):
    program = tmp_path / "ten.flow"
    program.write_text(TEN)

    def slow(n):
        time.sleep(1)
        return n * n

    host = flowrt.Host({"ten.slow": slow}, runs_dir=str(tmp_path / "runs"))
    start = time.perf_counter()
    outcome = host.run(str(program), {"n": 10})
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0
    assert orjson.loads(outcome.output_json) == [n * n for n in range(10)]
    assert elapsed < 4, elapsed  # ten seconds if the calls ran one after another


def test_ten_one_second_calls_take_about_one_second_through_a_command(tmp_path):
    (tmp_path / "ten.flow").write_text(TEN)
    (tmp_path / "slow.py").write_text(
        "import time\nfrom flowrt.toolkit import serve\n\n"
        "def slow(n):\n    time.sleep(1)\n    return n * n\n\n"
        "serve({'ten.slow': slow}, declared_in='ten.flow')\n")
    (tmp_path / "flow.toml").write_text(f'[tools]\n"ten" = {{ command = ["{sys.executable}", "slow.py"] }}\n')
    start = time.perf_counter()
    done = flow("run", "ten.flow", "--allow", "--input", '{"n": 10}', "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [n * n for n in range(10)]
    assert elapsed < 5, elapsed


def test_a_fault_in_a_spawned_task_faults_the_run(tmp_path):
    program = tmp_path / "faulty.flow"
    program.write_text(FAULTY)
    outcome = flowrt.Host({}, runs_dir=str(tmp_path)).run(str(program), {"n": 0})
    assert outcome.exit_code == 1
    assert outcome.status == "faulted"
    assert outcome.fault.kind == "division-by-zero" and outcome.fault.task == "root/1"
    assert outcome.fault.location["line"] == 5


def test_the_support_example_records_the_seeds_history_and_replays(tmp_path):
    """expected-history.txt of the seed: the same kinds, ids and order, the checkpoint at fact 9,
    the pause on c1:root#2, the resume from fact 9, and replay Matched."""
    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--input", '{"ticket": "Login fails on Safari"}', "--runs", str(runs),
                cwd=folder)
    assert done.returncode == 3, done.stderr
    assert "pending call c1:root#2" in done.stdout
    run_id = done.stdout.split()[2]
    recorded = [(f["kind"], f.get("call") or f.get("task")) for f in facts(runs, run_id)]
    assert recorded == [
        ("Start", None), ("Call", "root#1"), ("Reply", "root#1"), ("Call", "root/1#1"), ("Call", "root/2#1"),
        ("Reply", "root/2#1"), ("Choice", "root"), ("Stop", "root/1"), ("Checkpoint", None),
        ("Call", "c1:root#1"), ("Reply", "c1:root#1"), ("Call", "c1:root#2")]
    history = facts(runs, run_id)
    assert history[6]["picked"] == "root/2"
    assert history[7]["closed"] == ["root/1#1"] and history[7]["found"] == "Running"
    assert history[8]["function"] == {"module": "main", "name": "work"}
    assert history[8]["arguments"] == {"ticket": "Login fails on Safari",
                                       "notes": ["SameSite=None requires Secure ..."], "round": 2}
    done = flow("resume", run_id, "--call", "c1:root#2", "--reply", '{"Ok": "Safari 17.4"}', "--runs", str(runs),
                "--allow", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"Resolved": "SameSite=None requires Secure ... | Safari 17.4"}
    after = [(f["kind"], f.get("call")) for f in facts(runs, run_id)][12:]
    assert after[0] == ("Reply", "c1:root#2") and after[-1] == ("End", None)
    replayed = flow("replay", run_id, "--runs", str(runs))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched"


def test_checkpoint_policy_off_records_none(tmp_path):
    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--checkpoints", "off", "--input", '{"ticket": "x"}', "--runs",
                str(runs), cwd=folder)
    assert done.returncode == 3
    assert "pending call root#3" in done.stdout
    run_id = done.stdout.split()[2]
    assert all(f["kind"] != "Checkpoint" for f in facts(runs, run_id))


OWNERSHIP = """
use "std@v1/task"

@tool pub flow slow(n: Int) -> Int

flow helper() -> Int !tool = {
    let forgotten = task.spawn(flow() = slow(1))
    2
}

flow keeper() -> Task<Int> !tool = task.spawn(flow() = slow(3))

pub flow main() -> Int !tool = {
    let a = helper()
    let kept = keeper()
    a + task.wait(kept)
}
"""


def test_tasks_are_owned_by_the_call_that_spawned_them(tmp_path):
    """A running task still owned when its call returns is stopped (and recorded); a task the call
    returns changes owner and goes on."""
    program = tmp_path / "own.flow"
    program.write_text(OWNERSHIP)
    outcome = flowrt.Host({"own.slow": lambda n: n * 10}, runs_dir=str(tmp_path / "runs")).run(str(program))
    assert outcome.exit_code == 0, outcome.fault
    assert orjson.loads(outcome.output_json) == 32
    recorded = [(f["kind"], f.get("task") or f.get("call")) for f in facts(tmp_path / "runs", outcome.run_id)]
    assert recorded == [("Start", None), ("Stop", "root/1"), ("Call", "root/2#1"), ("Reply", "root/2#1"),
                        ("End", None)]
    stop = facts(tmp_path / "runs", outcome.run_id)[1]
    assert stop["by"] == "root" and stop["found"] == "Running" and stop["closed"] == []


def test_a_loop_passing_a_pending_read_checkpoints_every_round_and_resumes(tmp_path):
    """The history seed's feed loop: a task parked on its only Tool call travels from round to
    round; each round checkpoints with it (its call, constructor and data), and a resume from the
    latest checkpoint waits on that call again."""
    folder = tmp_path / "feed"
    shutil.copytree(ROOT / "tests" / "programs" / "feed", folder)
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--input", '{"rounds": 3}', "--runs", str(runs), cwd=folder)
    assert done.returncode == 3, done.stderr
    assert "pending call root/1#1" in done.stdout
    run_id = done.stdout.split()[2]
    history = facts(runs, run_id)
    checkpoints = [f for f in history if f["kind"] == "Checkpoint"]
    assert len(checkpoints) == 3
    assert checkpoints[-1]["arguments"]["pending"] == {"call": "root/1#1", "tool": "main.next", "arguments": {},
                                                       "ctor": ["main.Msg", "Received"]}
    done = flow("resume", run_id, "--call", "root/1#1", "--reply", '{"Ok": "hello"}', "--runs", str(runs), "--allow",
                cwd=folder)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 1006
    assert flow("replay", run_id, "--runs", str(runs)).stdout.strip() == "Matched"
    forked = flow("fork", run_id, "--checkpoint", str(checkpoints[0]["n"]), "--runs", str(runs), "--allow",
                  cwd=folder)
    # The fork's parked task keeps its call; as after a crash, the open call is settled Unknown
    # under the fork's run id, and `main.next` (declared without Result) then faults.
    assert forked.returncode == 1, forked.stderr
    assert "ended in Unknown" in forked.stderr


def test_a_parked_task_whose_reply_arrived_still_lets_checkpoints_be_taken(tmp_path):
    feed = Path(__file__).resolve().parent / "programs" / "feed" / "main.flow"
    host = flowrt.Host({"main.next": lambda: "hello", "main.tick": lambda n: n}, runs_dir=str(tmp_path),
                       durability="none")
    outcome = host.run(str(feed), {"rounds": 6})
    assert outcome.exit_code == 0 and outcome.output_json == b"1021"
    facts = RunStore.open(str(tmp_path), outcome.run_id, for_append=False).facts()
    reply = next(f["n"] for f in facts if f["kind"] == "Reply" and f["call"] == "root/1#1")
    assert any(f["kind"] == "Checkpoint" and f["n"] > reply for f in facts)


def test_a_checkpoint_carries_a_parked_task_with_the_reply_it_finished_on(tmp_path):
    """History seed 003: a parked task 'counts whether or not its reply has arrived ... on resume it
    waits on that call again, or is finished if the reply is recorded'. The run pauses after the
    task finished; its early facts, the Reply among them, are archived; the resume finishes the
    task on the reply the checkpoint carries, and replay agrees."""
    program = Path(__file__).resolve().parent / "programs" / "feedask" / "main.flow"
    host = flowrt.Host({"main.next": lambda: "hello", "main.tick": lambda n: n, "main.ask": lambda round: flowrt.PENDING},
                       runs_dir=str(tmp_path), durability="none")
    paused = host.run(str(program), {"rounds": 6})
    assert paused.status == "paused", paused
    store = RunStore.open(str(tmp_path), paused.run_id, for_append=False)
    facts = store.facts()
    reply = next(f["n"] for f in facts if f["kind"] == "Reply" and f["call"] == "root/1#1")
    carried = [store.value(f, "arguments")["pending"] for f in facts if f["kind"] == "Checkpoint" and f["n"] > reply]
    assert carried and carried[-1] == {"call": "root/1#1", "tool": "main.next", "arguments": {},
                                       "ctor": ["main.Msg", "Received"], "reply": {"Ok": "hello"}, "finished": 1}
    archived = subprocess.run([sys.executable, "-m", "flowrt.cli", "archive", paused.run_id, "--runs", str(tmp_path),
                               "--json"], capture_output=True, text=True, timeout=120)
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["archived"] > 0
    assert not any(f["kind"] == "Reply" and f["call"] == "root/1#1"
                   for f in RunStore.open(str(tmp_path), paused.run_id, for_append=False).facts())
    [question] = paused.pending
    done = host.resume(paused.run_id, call=question.call, reply=7)
    # 6 + 5 + 4 + 3 ticked, 7 answered, 1 ticked, then 1000 + len("hello")
    assert done.status == "completed" and done.output == 6 + 5 + 4 + 3 + 7 + 1 + 1005, done
    assert host.replay(paused.run_id).verdict == "Matched"
    resumed = RunStore.open(str(tmp_path), paused.run_id, for_append=False).facts()
    assert not any(f["kind"] == "Call" and f["call"] == "root/1#1" for f in resumed)


def test_task_first_keeps_the_order_carried_tasks_finished_in(tmp_path):
    """Two parked tasks both finished before the checkpoint: task.first after the resume picks the
    one that finished first then, not the one restored first."""
    program = tmp_path / "race.flow"
    program.write_text(RACE)
    runs = tmp_path / "runs"
    host = flowrt.Host({"race.slow": _slow_slow, "race.fast": lambda: "fast", "race.tick": _slow_tick,
                        "race.ask": lambda round: flowrt.PENDING}, runs_dir=str(runs), durability="none")
    paused = host.run(str(program), {"rounds": 4})
    assert paused.status == "paused", paused
    store = RunStore.open(str(runs), paused.run_id, for_append=False)
    last = [store.value(f, "arguments") for f in store.facts() if f["kind"] == "Checkpoint"][-1]
    assert {last["a"]["finished"], last["b"]["finished"]} == {1, 2}
    first = "a" if last["a"]["finished"] == 1 else "b"
    done = host.resume(paused.run_id, call=paused.pending[0].call, reply=0)
    assert done.status == "completed" and done.output == last[first]["reply"]["Ok"], (done, last)
    assert host.replay(paused.run_id).verdict == "Matched"


def _slow_slow() -> str:
    time.sleep(0.05)
    return "slow"


def _slow_tick(n: int) -> int:
    time.sleep(0.1)  # by the last checkpoint both tasks have their replies
    return n


RACE = """
use "std@v1/task"

pub type Got { Got(Text) }

@tool pub flow slow() -> Text
@tool pub flow fast() -> Text
@tool pub flow tick(n: Int) -> Int
@tool pub flow ask(round: Int) -> Int

pub flow main(rounds: Int) -> Text !tool =
    loop(task.spawn(flow() = Got(slow())), task.spawn(flow() = Got(fast())), rounds, 0)

flow loop(a: Task<Got>, b: Task<Got>, rounds: Int, seen: Int) -> Text !tool =
    if rounds == 0 {
        match task.first([a, b]) {
            (_, Got(text)) => text,
        }
    } else if rounds == 1 {
        loop(a, b, rounds - 1, seen + ask(rounds))
    } else {
        loop(a, b, rounds - 1, seen + tick(rounds) + sleepy(rounds))
    }

flow sleepy(n: Int) -> Int !tool = tick(n)
"""
