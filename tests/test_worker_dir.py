"""`flow worker --runs DIR` (flowrt/worker.py), through the real `flow` entry point: one start
recovers every crashed run (resumed as `flow resume` resumes it), a sleeping run is woken at its
deadline, two workers racing over one directory never drive one run twice, and SIGTERM lets go
of the worker's runs, which stay resumable."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowdata.values import parse_instant

WORK = """\
use "std@v1/clock"

/// Notes a step in the test's log (a line a call) and answers it in capitals.
@tool pub flow note(step: Text) -> Text

pub flow main(name: Text, nap: Duration) -> Text !tool = {
    let a = note("${name}:a")
    clock.sleep(nap)
    let b = note("${name}:b")
    "${a} ${b}"
}
"""

NOTE_TOOL = """\
from flowrt.toolkit import serve


def note(step):
    with open("notes.log", "a") as log:
        log.write(step + "\\n")
    return step.upper()


serve({"work.note": note}, declared_in="work.flow")
"""


def flow(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def worker(*args: str, cwd: Path, ready: bool = True) -> subprocess.Popen:
    """A `flow worker` process; with `ready`, once it says it is serving (its signal handlers set)."""
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "worker", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ready:
        readable, _, _ = select.select([host.stderr], [], [], 60)
        line = host.stderr.readline() if readable else ""  # it writes the line first, or exits (EOF)
        if not line.startswith("flow worker: driving the runs of"):
            host.kill()
            raise AssertionError(f"the worker did not start: {line!r} {host.communicate(timeout=30)}")
    return host


@pytest.fixture
def work(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    (program / "work.flow").write_text(WORK)
    (program / "note_tool.py").write_text(NOTE_TOOL)
    (program / "flow.toml").write_text('[tools]\n"work" = { python = "note_tool.py" }\n')
    return program


def start(work: Path, runs: Path, name: str, nap: str, *extra: str, kill_after: int | None = None):
    env = {**os.environ}
    if kill_after is not None:
        env["FLOW_FAULT_KILL_AFTER"] = str(kill_after)
    before = set(os.listdir(runs)) if runs.exists() else set()
    done = flow("run", "work.flow", "--allow", "--input", json.dumps({"name": name, "nap": nap}), "--runs",
                str(runs), *extra, cwd=work, env=env)
    [run_id] = set(os.listdir(runs)) - before
    return done, run_id


def facts(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in (runs / run_id / "history.jsonl").read_text().splitlines()
            if line.strip("\0")]


def host_records(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in (runs / run_id / "host.jsonl").read_text().splitlines()]


def state(runs: Path, run_id: str, cwd: Path) -> dict:
    done = flow("history", run_id, "--runs", str(runs), "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def notes(work: Path) -> list[str]:
    path = work / "notes.log"
    return path.read_text().splitlines() if path.exists() else []


def crashed_runs(work: Path, runs: Path, count: int) -> dict[str, str]:
    """`count` crashed runs, by name: killed with no call out (after fact 3, the first Reply), or
    right after the sleep's Call (fact 4, before its timer record), in turn."""
    made = {}
    for i in range(count):
        name = f"r{i}"
        done, run_id = start(work, runs, name, "PT0.2S", kill_after=3 + i % 2)
        assert done.returncode == -signal.SIGKILL, done.stderr
        made[name] = run_id
    return made


def test_one_worker_start_recovers_every_crashed_run(work, tmp_path):
    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 4)
    assert {state(runs, r, work)["state"] for r in made.values()} == {"crashed"}
    assert sorted(notes(work)) == sorted(f"{n}:a" for n in made)
    # Bound from the given flow.toml, run from another directory.
    done = flow("worker", "--runs", str(runs), "--once", "--allow", "--concurrency", "2", "--tools",
                str(work / "flow.toml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name, run_id in made.items():
        assert f"{run_id}: recovered (crashed): completed" in done.stdout
        assert facts(runs, run_id)[-1]["outcome"] == {"Completed": f"{name.upper()}:A {name.upper()}:B"}
        assert flow("replay", run_id, "--runs", str(runs), cwd=work).stdout == "Matched\n"
    # No call sent twice: each run's notes, once each (the first before the crash, the second after).
    assert sorted(notes(work)) == sorted([f"{n}:a" for n in made] + [f"{n}:b" for n in made])
    # Nothing left to do: a second start does nothing.
    again = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == "", again.stderr


def test_a_worker_leaves_paused_halted_and_ended_runs_alone(work, tmp_path):
    runs = tmp_path / "runs"
    ended, ended_id = start(work, runs, "e", "PT0S")
    assert ended.returncode == 0
    approval = Path(__file__).resolve().parents[1] / "examples" / "approval" / "main.flow"
    expense = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}
    paused = flow("run", str(approval), "--allow", "--input", json.dumps(expense), "--runs", str(runs), cwd=work)
    assert paused.returncode == 3
    done = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert {state(runs, r, work)["state"] for r in os.listdir(runs)} == {"ended", "paused"}


def test_a_sleeping_run_is_woken_at_its_deadline(work, tmp_path):
    runs = tmp_path / "runs"
    done, run_id = start(work, runs, "s", "PT2S", "--park-after", "0.2")
    assert done.returncode == 3 and done.stdout.startswith(f"sleeping: run {run_id} until"), done.stderr
    until = state(runs, run_id, work)["hostDecision"]["until"]
    # Before the deadline there is nothing to do now.
    early = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    if time.time_ns() < parse_instant(until).nanos:
        assert early.returncode == 0 and early.stdout == "", early.stderr
    host = worker("--runs", str(runs), "--allow", "--poll", "0.2", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and facts(runs, run_id)[-1]["kind"] != "End":
            time.sleep(0.1)
        assert facts(runs, run_id)[-1]["outcome"] == {"Completed": "S:A S:B"}
    finally:
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    assert f"{run_id}: woke (timer due): completed" in out
    [resent] = [r for r in host_records(runs, run_id) if r["kind"] == "resent"]
    assert resent["deadline"] == until and resent["remaining"] == "PT0S"
    assert notes(work) == ["s:a", "s:b"]


def test_two_workers_racing_never_drive_one_run_twice(work, tmp_path):
    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 6)
    racers = [worker("--runs", str(runs), "--once", "--allow", "--concurrency", "3", cwd=tmp_path, ready=False)
              for _ in range(2)]
    outputs = []
    for racer in racers:
        out, err = racer.communicate(timeout=300)
        assert racer.returncode == 0, err
        outputs.append(out)
    for name, run_id in made.items():
        # Exactly one worker drove each run, and the run was settled once.
        assert sum(out.count(f"{run_id}: ") for out in outputs) == 1, outputs
        assert facts(runs, run_id)[-1]["kind"] == "End"
        decisions = [r for r in host_records(runs, run_id) if r["kind"] in ("resent", "settled")]
        assert len(decisions) == (1 if int(name[1:]) % 2 else 0), decisions
    assert sorted(notes(work)) == sorted([f"{n}:a" for n in made] + [f"{n}:b" for n in made])


def test_a_run_another_host_holds_is_not_claimed(work, tmp_path):
    """The claim is the appender's lock: while another process holds the run, a worker leaves it
    (and takes it once that host lets go)."""
    from flowrt.store import RunStore

    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 1)
    [run_id] = made.values()
    holder = RunStore.open(str(runs), run_id, for_append=True)
    try:
        held = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
        assert held.returncode == 0 and held.stdout == "", held.stderr
        assert facts(runs, run_id)[-1]["kind"] == "Reply"
    finally:
        holder.close()
    done = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert done.returncode == 0 and f"{run_id}: recovered (crashed): completed" in done.stdout, done.stderr


def test_sigterm_lets_go_of_a_sleeping_run_as_sleeping(work, tmp_path):
    """A worker stopped while a run it drives sleeps (shorter than its park threshold, so in the
    process) lets go of it as sleeping, at the same deadline; the next worker wakes it."""
    runs = tmp_path / "runs"
    done, run_id = start(work, runs, "t", "PT3S", kill_after=3)
    assert done.returncode == -signal.SIGKILL
    host = worker("--runs", str(runs), "--allow", "--poll", "0.2", "--park-after", "60", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [r for r in host_records(runs, run_id) if r["kind"] == "timer"]:
            time.sleep(0.05)
    finally:
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    [timer] = [r for r in host_records(runs, run_id) if r["kind"] == "timer"]
    view = state(runs, run_id, work)
    assert view["state"] == "sleeping", (view, out, err)
    assert view["hostDecision"]["until"] == timer["deadline"]
    assert f"{run_id}: recovered (crashed): sleeping until {timer['deadline']}" in out
    again = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    while facts(runs, run_id)[-1]["kind"] != "End":  # woken once due: the deadline passes
        assert time.time_ns() < parse_instant(timer["deadline"]).nanos + 60 * 10 ** 9
        time.sleep(0.1)
        again = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
    assert facts(runs, run_id)[-1]["outcome"] == {"Completed": "T:A T:B"}
    assert notes(work) == ["t:a", "t:b"]


def test_sigterm_halts_a_run_with_a_call_out_for_the_next_worker(work, tmp_path):
    """Stopped while a Tool call other than a timer is out, the worker halts the run with reason
    `worker-stop`; the next worker recovers it (the call out settled as after a crash)."""
    slow = work / "slow_tool.py"
    slow.write_text(NOTE_TOOL.replace("def note(step):\n", "def note(step):\n    import time\n"
                                      "    if step.endswith(':b'):\n        time.sleep(30)\n"))
    (work / "flow.toml").write_text('[tools]\n"work" = { python = "slow_tool.py" }\n')
    runs = tmp_path / "runs"
    done, run_id = start(work, runs, "h", "PT0S", kill_after=3)
    assert done.returncode == -signal.SIGKILL
    host = worker("--runs", str(runs), "--allow", "--poll", "0.2", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [f for f in facts(runs, run_id)
                                                   if f["kind"] == "Call" and f["call"] == "root#3"]:
            time.sleep(0.05)
    finally:
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    view = state(runs, run_id, work)
    assert view["state"] == "halted" and view["hostDecision"]["reason"] == "worker-stop", view
    again = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"{run_id}: recovered (a worker stopped): faulted" in again.stdout
    settled = [r for r in host_records(runs, run_id) if r["kind"] == "settled"]
    assert [(r["call"], r["as"]) for r in settled] == [("root#3", "Unknown")]


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_an_idle_worker_stops_on_a_signal(tmp_path, signum, code):
    host = worker("--runs", str(tmp_path / "none-yet"), "--poll", "0.2", cwd=tmp_path)
    host.send_signal(signum)
    out, err = host.communicate(timeout=60)
    assert host.returncode == code and out == "", err
    assert not (tmp_path / "none-yet").exists()  # looking never creates the root


def test_a_runs_root_that_cannot_be_read_is_a_storage_failure(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    done = flow("worker", "--runs", str(tmp_path / "file"), "--once", cwd=tmp_path)
    assert done.returncode == 5 and "storage failure: the runs root" in done.stdout + done.stderr


def test_a_damaged_run_is_left_and_the_others_are_recovered(work, tmp_path):
    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 2)
    damaged, good = made["r0"], made["r1"]
    history_path = runs / damaged / "history.jsonl"
    data = bytearray(history_path.read_bytes())
    data[data.index(b'"r0:a"') + 2] ^= 0x01  # a flipped bit in the first Call's arguments
    history_path.write_bytes(bytes(data))
    done = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{good}: recovered (crashed): completed" in done.stdout and damaged not in done.stdout
    assert history_path.read_bytes() == bytes(data)  # nothing written to the damaged run


def test_a_look_reads_again_only_the_runs_whose_files_changed(work, tmp_path, monkeypatch):
    from flowrt import worker_look
    from flowrt.worker_look import DirectoryRuns

    monkeypatch.setattr(worker_look, "RECENT_NS", 0)  # the test's files are all seconds old
    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 2)
    (runs / "not-a-run").mkdir()
    seen = DirectoryRuns(str(runs))
    first = seen.rows()
    assert seen.read == 3 and {r["run"] for r in first} == {*made.values(), "not-a-run"}
    assert seen.rows() == first and seen.read == 0  # nothing changed: nothing read
    one = made["r0"]
    done = flow("resume", one, "--runs", str(runs), "--allow", cwd=work)
    assert done.returncode == 0, done.stderr
    after = {r["run"]: r for r in seen.rows()}
    assert seen.read == 1 and after[one]["record"] == "complete"
    seen.rows()
    assert seen.read == 0  # ended: final, not even looked at again
    (runs / "not-a-run").rmdir()
    assert "not-a-run" not in {r["run"] for r in seen.rows()}


def test_a_worker_finds_a_crashed_run_among_more_entries_than_discovery_examines(work, tmp_path):
    from flowrt.store.discovery import ENTRY_LIMIT

    runs = tmp_path / "runs"
    made = crashed_runs(work, runs, 1)
    for i in range(ENTRY_LIMIT + 1):  # ended runs' directories, as far as the listing goes
        os.mkdir(runs / f"x{i:05d}")
    done = flow("worker", "--runs", str(runs), "--once", "--allow", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{made['r0']}: recovered (crashed): completed" in done.stdout


def test_a_stop_signal_that_lands_inside_the_workers_wait_does_not_deadlock(tmp_path):
    """The signal handler runs on the main thread, possibly while it holds the lock of the event it
    waits on (inside `Event.wait`): the stop must still come through, not wait on that lock."""
    from flowrt.worker import Worker

    worker = Worker(str(tmp_path / "runs"))
    done = threading.Event()

    def handler_inside_the_wait():
        with worker.changed._cond:  # as Event.wait holds it when the signal lands
            worker._on_signal(signal.SIGTERM, None)
        done.set()

    thread = threading.Thread(target=handler_inside_the_wait, daemon=True)
    thread.start()
    assert done.wait(10), "the handler waited on the lock its own thread holds"
    assert worker.changed.wait(10) and worker.stopping == signal.SIGTERM
    worker.processes.close()
    worker.children.close()
