"""Tool processes kept across runs (flowrt/tool_processes.py): a worker driving several runs of
one Tool starts it once, a process that died or broke the protocol is replaced, `reuse = false`
opts out, each reused run replays Matched; `flowrt.Host.queue` starts a Tool once for many runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowrt
from flowrt.bindings import BindError
from flowrt.tool_processes import ToolProcesses

PROGRAM = """\
/// The Tool process's pid; with `die`, the process kills itself mid-call.
@tool pub flow pid(die: Bool) -> Int

pub flow main(die: Bool) -> Int !tool = {
    let first = pid(false)
    let second = pid(die)
    if first == second { second } else { 0 }
}
"""

TOOL = """\
import os
import signal
import sys

from flowrt.toolkit import serve


def pid(die):
    if die:
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


with open("starts.log", "a") as starts:  # one line a process started
    starts.write(f"{os.getpid()}\\n")
if "--garbage" in sys.argv:  # answers describe, then breaks the protocol on its first call
    import json
    sys.stdout.write(json.dumps({"op": "described", "tools": []}) + "\\n")
    sys.stdout.flush()
    sys.stdin.readline()
    sys.stdin.readline()
    sys.stdout.write("not a protocol line\\n")
    sys.stdout.flush()
    sys.stdin.read()
else:
    serve({"p.pid": pid}, declared_in="p.flow")
"""


def flow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def program(tmp_path):
    def make(entry: str = '{ python = "pid_tool.py" }') -> Path:
        (tmp_path / "p.flow").write_text(PROGRAM)
        (tmp_path / "pid_tool.py").write_text(TOOL)
        (tmp_path / "flow.toml").write_text(f'[tools]\n"p" = {entry}\n')
        return tmp_path
    return make


def starts(directory: Path) -> list[str]:
    path = directory / "starts.log"
    return path.read_text().splitlines() if path.exists() else []


def queue(directory: Path, *dies: bool) -> list[str]:
    ids = []
    for die in dies:
        done = flow("run", "p.flow", "--allow", "--runs", "runs", "--detach", "--input", json.dumps({"die": die}),
                    cwd=directory)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def end_of(directory: Path, run_id: str) -> dict:
    lines = (directory / "runs" / run_id / "history.jsonl").read_text().splitlines()
    return json.loads([line for line in lines if line.strip("\0")][-1])


def drive(directory: Path) -> subprocess.CompletedProcess:
    done = flow("worker", "--runs", "runs", "--once", "--allow", "--concurrency", "1", cwd=directory)
    assert done.returncode == 0, done.stderr
    return done


def test_a_worker_starts_a_tool_once_for_many_runs_and_each_replays_matched(program):
    directory = program()
    ids = queue(directory, False, False, False)
    queued = len(starts(directory))  # each `flow run --detach` process started it to check it
    drive(directory)
    started = starts(directory)[queued:]
    assert len(started) == 1
    for run_id in ids:
        assert end_of(directory, run_id)["outcome"] == {"Completed": int(started[0])}
        assert flow("replay", run_id, "--runs", "runs", cwd=directory).stdout == "Matched\n"


def test_a_tool_process_that_died_is_replaced(program):
    directory = program()
    ids = queue(directory, False, True, False, True, False)
    queued = len(starts(directory))
    done = drive(directory)
    assert done.stdout.count(": faulted") == 2 and done.stdout.count(": completed") == 3, done.stdout
    started = starts(directory)[queued:]
    completed = {end_of(directory, r)["outcome"].get("Completed") for r in ids} - {None}
    # Whatever order the worker took them in: one process until a run killed it, then a new one.
    assert 2 <= len(started) <= 3 and completed <= {int(p) for p in started}
    for run_id in ids:
        assert flow("replay", run_id, "--runs", "runs", cwd=directory).stdout == "Matched\n"


def test_reuse_false_gives_each_run_its_own_process(program):
    directory = program('{ python = "pid_tool.py", reuse = false }')
    ids = queue(directory, False, False, False)
    queued = len(starts(directory))
    drive(directory)
    started = starts(directory)[queued:]
    assert len(started) == 3
    assert {end_of(directory, r)["outcome"]["Completed"] for r in ids} == {int(p) for p in started}


def test_reuse_must_be_a_boolean(program):
    directory = program('{ python = "pid_tool.py", reuse = "no" }')
    done = flow("run", "p.flow", "--allow", "--runs", "runs", "--input", '{"die": false}', cwd=directory)
    assert done.returncode == 2 and "reuse must be true or false" in done.stderr


def test_host_queue_starts_the_tool_once_and_close_ends_it(program):
    directory = program()
    with flowrt.Host(runs=str(directory / "runs"), allow=True) as host:
        ids = [host.queue(str(directory / "p.flow"), {"die": False}) for _ in range(4)]
        assert len(starts(directory)) == 1
        [kept] = [p for idle in host._processes.idle.values() for p in idle]
    assert kept.process.wait(timeout=30) is not None  # closed with the host
    assert len(set(ids)) == 4
    for run_id in ids:
        assert end_of(directory, run_id)["kind"] != "End"
    drive(directory)
    assert all(end_of(directory, r)["outcome"]["Completed"] for r in ids)


def test_host_run_and_start_share_one_tool_process_and_close_ends_it(program):
    directory = program()
    with flowrt.Host(runs=str(directory / "runs"), allow=True) as host:
        results = [host.run(str(directory / "p.flow"), {"die": False}) for _ in range(3)]
        handle = host.start(str(directory / "p.flow"), {"die": False}, detach=True)
        results.append(handle.wait(timeout=60))
        [started] = starts(directory)
        assert [r.output for r in results] == [int(started)] * 4
        [kept] = [p for idle in host._processes.idle.values() for p in idle]
    assert kept.process.wait(timeout=30) is not None  # closed with the host
    for result in results:
        assert flow("replay", result.run_id, "--runs", "runs", cwd=directory).stdout == "Matched\n"


def test_host_run_after_a_run_killed_its_tool_starts_a_new_one_and_reuse_false_opts_out(program):
    directory = program()
    with flowrt.Host(runs=str(directory / "runs"), allow=True) as host:
        assert host.run(str(directory / "p.flow"), {"die": True}).exit_code == 1
        after = host.run(str(directory / "p.flow"), {"die": False})
    first, second = starts(directory)
    assert after.output == int(second) != int(first)
    opted_out = program('{ python = "pid_tool.py", reuse = false }')
    (opted_out / "starts.log").unlink()
    with flowrt.Host(runs=str(opted_out / "runs"), allow=True) as host:
        values = [host.run(str(opted_out / "p.flow"), {"die": False}).output for _ in range(2)]
    assert sorted(values) == sorted(int(p) for p in starts(opted_out)) and len(set(values)) == 2


def test_host_resume_borrows_the_process_its_runs_use(program, tmp_path):
    directory = program()
    (directory / "p.flow").write_text(PROGRAM + """
@tool pub flow ask(question: Text) -> Text

pub flow asking() -> Int !tool = {
    let before = pid(false)
    let answer = ask("go on?")
    if pid(false) == before { before } else { 0 }
}
""")
    (directory / "flow.toml").write_text('[tools]\n"p.pid" = { python = "pid_tool.py" }\n"p.ask" = { pending = true }\n')
    with flowrt.Host(runs=str(directory / "runs"), allow=True) as host:
        paused = host.run(str(directory / "p.flow"), entry="asking")
        assert paused.exit_code == 3
        [call] = paused.pending
        done = host.resume(paused.run_id, call=call.call, reply="yes")
        [started] = starts(directory)
        assert done.output == int(started)


def test_host_queue_refuses_bad_input_and_records_nothing(program):
    directory = program()
    with flowrt.Host(runs=str(directory / "runs"), allow=True) as host:
        with pytest.raises(flowrt.Refused):
            host.queue(str(directory / "p.flow"), {"die": "yes"})
    assert not (directory / "runs").exists() or os.listdir(directory / "runs") == []


def test_the_keeper_replaces_a_killed_process_and_one_that_broke_the_protocol(program):
    directory = program()
    command = [sys.executable, "pid_tool.py"]
    with ToolProcesses() as keeper:
        first = keeper.checkout(command, str(directory))
        first.close()
        again = keeper.checkout(command, str(directory))
        assert again is first and keeper.started == 1
        again.process.kill()
        again.process.wait()
        again.close()  # not fit: closed, not kept
        third = keeper.checkout(command, str(directory))
        assert third is not first and keeper.started == 2
        third.close()

        broken = keeper.checkout([*command, "--garbage"], str(directory))
        answers = []
        broken.call("run-x", "c1", "p.pid", {"die": False}, None, lambda call, outcome: answers.append(outcome))
        broken.process.wait(timeout=30)
        assert broken.broke is not None and answers and "BadReply" in answers[0]["Err"]
        broken.close()
        replaced = keeper.checkout([*command, "--garbage"], str(directory))
        assert replaced is not broken
        replaced.close()


def test_a_process_with_a_call_out_is_not_kept(program):
    directory = program()
    with ToolProcesses() as keeper:
        lent = keeper.checkout([sys.executable, "pid_tool.py"], str(directory))
        with lent.lock:
            lent.deliveries["c9"] = lambda call, outcome: None  # a call still open at the run's end
        assert keeper.give_back(lent) is False
        lent.keeper = None
        lent.close()
        assert keeper.idle == {} or all(not kept for kept in keeper.idle.values())


def test_an_edited_script_gets_a_new_process(program):
    directory = program()
    command = [sys.executable, "pid_tool.py"]
    with ToolProcesses() as keeper:
        first = keeper.checkout(command, str(directory))
        first.close()
        script = directory / "pid_tool.py"
        script.write_text(script.read_text() + "\n# edited\n")
        os.utime(script, ns=(1, 1))
        second = keeper.checkout(command, str(directory))
        assert second is not first and first.process.poll() is not None
        second.close()


def test_a_command_that_cannot_start_is_a_bind_error(tmp_path):
    with ToolProcesses() as keeper, pytest.raises(BindError):
        keeper.checkout([str(tmp_path / "no-such-command")], str(tmp_path))


def test_on_postgresql_runs_queued_through_the_api_share_one_tool_process_per_worker_slot(program, pg_url):
    directory = program()
    with flowrt.Host(runs=pg_url, allow=True) as host:
        ids = [host.queue(str(directory / "p.flow"), {"die": False}) for _ in range(4)]
    queued = len(starts(directory))
    assert queued == 1
    done = flow("worker", "--store", pg_url, "--once", "--allow", "--concurrency", "1", cwd=directory)
    assert done.returncode == 0, done.stderr
    started = starts(directory)[queued:]
    assert len(started) == 1 and done.stdout.count(": drove (queued): completed") == 4, done.stdout
    for run_id in ids:
        replay = flow("replay", run_id, "--store", pg_url, "--json", cwd=directory)
        assert json.loads(replay.stdout)["verdict"] == "Matched", replay.stdout + replay.stderr
