"""`flow history` tells a run's state from real runs: one whose host is still running, one whose host
was killed with a call out, one paused on a pending call, one halted by an interrupt; and what it
says a user can do about each open call fits (the hint it gives is one that works)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowrt.run_state import appender_holds, run_state
from flowrt.store import RunStore


def open_gate(gate: Path, text: str) -> None:
    """Write the gate whole at once (a rename): the Tool polls for it and reads it as soon as it
    exists, so a file created first and written after could be read empty."""
    partial = gate.with_name(gate.name + ".partial")
    partial.write_text(text)
    partial.rename(gate)


ROOT = Path(__file__).resolve().parents[1]
APPROVAL = ROOT / "examples" / "approval" / "main.flow"
EXPENSE = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}

GATED_FLOW = """\
/// Waits until a file appears (the test decides when), then answers its text.
@tool pub flow wait(path: Text) -> Text

pub flow main(path: Text) -> Text !tool = "got ${wait(path)}"
"""

GATED_TOOL = """\
import os, time
from flowrt.toolkit import serve


def wait(path):
    for _ in range(6000):  # at most a minute, so a test that fails leaves nothing behind
        if os.path.exists(path):
            return open(path).read()
        time.sleep(0.01)
    return "gave up"

serve({"gated.wait": wait}, declared_in="gated.flow")
"""


def flow(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def history(runs: Path, run_id: str, *extra: str) -> dict:
    done = flow("history", run_id, "--runs", str(runs), "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def gated(tmp_path):
    """A program whose one call is answered when the test writes the gate file."""
    (tmp_path / "gated.flow").write_text(GATED_FLOW)
    (tmp_path / "gated_tool.py").write_text(GATED_TOOL)
    (tmp_path / "flow.toml").write_text('[tools]\n"gated" = { command = ["%s", "gated_tool.py"] }\n' % sys.executable)
    gate = tmp_path / "gate"
    yield tmp_path
    open_gate(gate, "done")  # whatever happened, the Tool process ends


def start_gated(work: Path) -> tuple[subprocess.Popen, str]:
    """A live `flow run` of the gated program, once its call is out: the host and the run id."""
    runs = work / "runs"
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "gated.flow", "--allow", "--input",
                             json.dumps({"path": str(work / "gate")}), "--runs", str(runs)],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ids = os.listdir(runs) if runs.exists() else []
        history = runs / ids[0] / "history.jsonl" if ids else None
        if history is not None and history.exists() and b'"kind":"Call"' in history.read_bytes():
            return host, ids[0]
        if host.poll() is not None:
            break
        time.sleep(0.05)
    host.kill()
    raise AssertionError(f"the run's call never went out: {host.communicate(timeout=10)}")


def test_a_live_run_is_running_with_its_call_out(gated):
    host, run_id = start_gated(gated)
    try:
        view = history(gated / "runs", run_id)
        assert view["state"] == "running" and view["pending"] == "unknown"
        assert view["open"] == [{"call": "root#1", "tool": "gated.wait", "status": "out", "next": []}]
        text = flow("history", run_id, "--runs", str(gated / "runs"), "--summary").stdout
        assert f"run {run_id}: running" in text and "--reply" not in text and "--resend" not in text
    finally:
        open_gate((gated / "gate"), "through")
        out, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    assert history(gated / "runs", run_id)["state"] == "ended"


def test_a_host_killed_with_a_call_out_leaves_a_crashed_run_to_resume_or_resend(gated):
    host, run_id = start_gated(gated)
    host.send_signal(signal.SIGKILL)
    host.communicate(timeout=30)
    runs = gated / "runs"
    view = history(runs, run_id)
    assert view["state"] == "crashed" and view["pending"] == [] and view["hostDecision"] is None
    [entry] = view["open"]
    assert entry["status"] == "unknown-outcome"
    assert entry["next"] == [f"flow resume {run_id}", f"flow resume {run_id} --resend root#1"]
    text = flow("history", run_id, "--runs", str(runs)).stdout
    assert f"run {run_id}: crashed" in text and "--resend root#1" in text and "--reply" not in text
    assert "pending calls" not in text  # nothing is pending by anyone's say-so
    # The hint works: the call is sent again under its id and the run completes.
    (gated / "gate").write_text("again")
    done = flow("resume", run_id, "--resend", "root#1", "--allow", "--runs", str(runs), cwd=gated)
    assert done.returncode == 0 and done.stdout == '"got again"\n', done.stderr


def test_an_interrupted_host_leaves_a_halted_run(gated):
    host, run_id = start_gated(gated)
    host.send_signal(signal.SIGINT)
    out, err = host.communicate(timeout=30)
    assert host.returncode == 130, err
    view = history(gated / "runs", run_id)
    assert view["state"] == "halted" and view["hostDecision"]["kind"] == "halted"
    assert [e["status"] for e in view["open"]] == ["unknown-outcome"] and view["pending"] == []
    # A plain resume answers the call Unknown (the program does not handle that: it faults).
    done = flow("resume", run_id, "--allow", "--runs", str(gated / "runs"), cwd=gated)
    assert done.returncode == 1 and "ended in Unknown" in done.stderr
    assert history(gated / "runs", run_id)["state"] == "ended"


def test_a_paused_run_names_its_pending_calls_and_the_reply_that_answers_them(tmp_path):
    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(tmp_path))
    assert paused.returncode == 3
    run_id = paused.stdout.split()[2]
    view = history(tmp_path, run_id)
    assert view["state"] == "paused" and view["pending"] == ["root#1"]
    # The exact command, with an example that fits (flowrt/reply_check.py; tests/test_reply_check.py).
    command = f"""flow resume {run_id} --call 'root#1' --reply '{{"Ok":{{"Yes":"text"}}}}' --runs {tmp_path}"""
    entry, = view["open"]
    assert {k: entry[k] for k in ("call", "tool", "status", "next")} == {
        "call": "root#1", "tool": "people.approve", "status": "pending", "next": [command]}
    assert entry["reply"]["example"] == {"Ok": {"Yes": "text"}}
    text = flow("history", run_id, "--runs", str(tmp_path), "--summary").stdout
    assert f"run {run_id}: paused" in text and command in text and "--resend" not in text
    done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--allow",
                "--runs", str(tmp_path))
    assert done.returncode == 0, done.stderr


def test_a_pause_record_that_leaves_an_open_call_out_makes_the_state_unknown(gated):
    host, run_id = start_gated(gated)
    host.send_signal(signal.SIGKILL)
    host.communicate(timeout=30)
    runs = gated / "runs"
    store = RunStore.open(str(runs), run_id, for_append=True)
    try:  # a pause that names no pending call, at the last fact: the record contradicts itself
        store.host_record({"kind": "paused", "head": store.head, "pending": []})
    finally:
        store.close()
    view = history(runs, run_id)
    assert view["state"] == "unknown" and view["pending"] == "unknown"
    assert [e["status"] for e in view["open"]] == ["unknown"]
    assert "pending calls: unknown" in flow("history", run_id, "--runs", str(runs)).stdout


def test_a_history_that_grows_after_it_was_read_is_not_taken_for_a_crash(tmp_path):
    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(tmp_path))
    run_id = paused.stdout.split()[2]
    read = RunStore.open(str(tmp_path), run_id, for_append=False)
    try:
        assert flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--allow",
                    "--runs", str(tmp_path)).returncode == 0
        # What `read` holds ends at the Call, but the run went on (and ended) since.
        assert run_state(read)["state"] == "unknown"
    finally:
        read.close()


def test_the_lock_probe_sees_an_appender_and_not_another_reader(tmp_path):
    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(tmp_path))
    run_id = paused.stdout.split()[2]
    history_path = str(tmp_path / run_id / "history.jsonl")
    assert appender_holds(history_path) is False
    appender = RunStore.open(str(tmp_path), run_id, for_append=True)
    try:
        assert appender_holds(history_path) is True
        assert history(tmp_path, run_id)["state"] == "running"
    finally:
        appender.close()
    # Another reader's probe (a shared lock) is not an appender, and the probe gives its lock back.
    fd = os.open(history_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        assert appender_holds(history_path) is False
    finally:
        os.close(fd)
    RunStore.open(str(tmp_path), run_id, for_append=True).close()  # nothing was left locked
    assert appender_holds(str(tmp_path / run_id / "absent.jsonl")) is None


def test_a_readers_probe_never_makes_an_append_open_busy(tmp_path):
    """A reader's probe holds a shared lock for microseconds; opening for appending retries its
    lock for a bounded time instead of failing RunBusy in that instant (a resume must not fail
    because someone looked at `flow runs`). A real appender still makes the run busy."""
    from flowrt.store import RunBusy
    from flowrt.store.directory import APPEND_LOCK_SECONDS

    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(tmp_path))
    run_id = paused.stdout.split()[2]
    history_path = str(tmp_path / run_id / "history.jsonl")
    # Another process, as `flow runs` would be (a thread of this one seldom probes in the very
    # instant this one takes the lock: the GIL serializes them); with the lock taken at once
    # about one open in ten failed.
    probes = tmp_path / "probes"
    prober = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom flowrt.run_state import appender_holds\nn = 0\n"
        "while True:\n    appender_holds(sys.argv[1])\n    n += 1\n"
        "    if n % 1000 == 0: open(sys.argv[2], 'w').write(str(n))\n"), history_path, str(probes)])
    try:
        deadline = time.monotonic() + 30
        while not probes.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert probes.exists()
        for _ in range(300):
            RunStore.open(str(tmp_path), run_id, for_append=True, durability="none").close()
        resumed = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--runs",
                       str(tmp_path), "--allow")
        assert resumed.returncode == 0, resumed.stderr
    finally:
        prober.kill()
        prober.wait(10)
    appender = RunStore.open(str(tmp_path), run_id, for_append=True)
    try:
        started = time.monotonic()
        with pytest.raises(RunBusy):
            RunStore.open(str(tmp_path), run_id, for_append=True)
        assert APPEND_LOCK_SECONDS <= time.monotonic() - started < APPEND_LOCK_SECONDS + 2
    finally:
        appender.close()
