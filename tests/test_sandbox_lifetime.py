"""The sandbox child never outlives its host, and never computes past its wall-clock deadline.

Through the real `flow` entry point: a program that spins in the child forever, a host killed
with SIGKILL or SIGTERM, and a run halted by the deadline (resumable, never Faulted). Also the
`sandbox` host record every run writes, naming the isolation layers applied and missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowrt.sandbox_process import Child, ChildDeadline, ChildDied

SPIN = "pub flow main() -> Int = spin(0)\n\nflow spin(n: Int) -> Int = spin(n + 1)\n"
HELLO = 'pub flow main() -> Text = "hello, world"\n'
ECHO_CHILD = str(Path(__file__).resolve().with_name("sandbox_echo_child.py"))


def flow(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def gone(pid: int) -> bool:
    """True once `pid` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """The processes `pid`'s threads started (any thread may fork: `flow run` starts its child on
    a thread of its own)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += (task / "children").read_text().split()
        except FileNotFoundError:
            continue
    return list(map(int, children))


def command_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def sandbox_child_of(host: subprocess.Popen, timeout: float = 20.0) -> int:
    """The pid of the host's sandbox child, once it has started and is computing: its own child,
    or a child of its child template (flowrt/child_template.py)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children_of(host.pid):
            if b"sandbox.child" in command_of(pid):
                return pid
            if b"sandbox.template" in command_of(pid) and children_of(pid):
                return children_of(pid)[0]
        time.sleep(0.05)
    raise AssertionError("the host started no sandbox child")


def template_of(host: subprocess.Popen) -> int | None:
    return next((pid for pid in children_of(host.pid) if b"sandbox.template" in command_of(pid)), None)


def spinning_host(tmp_path, env=None) -> tuple[subprocess.Popen, int]:
    program = tmp_path / "spin.flow"
    program.write_text(SPIN)
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", str(program), "--runs", str(tmp_path / "runs")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    pid = sandbox_child_of(host)
    wait_locked_down(pid)
    assert not gone(pid)
    return host, pid


def wait_locked_down(pid: int, timeout: float = 20.0) -> None:
    """Until the child has loaded the program and locked down (so it is spinning in generated
    code, not waiting for the host: a child waiting would end on its own when the pipe closes).
    Seen as its uid turning to nobody's where the host is root, else its CPU time growing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
        except (FileNotFoundError, ProcessLookupError):
            raise AssertionError("the sandbox child ended before it spun") from None
        uid = int(status.split("\nUid:")[1].split()[1])
        if (os.geteuid() == 0 and uid != 0) or (os.geteuid() != 0 and ticks > 50):
            time.sleep(0.2)
            return
        time.sleep(0.05)
    raise AssertionError("the sandbox child did not start computing")


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


@pytest.mark.parametrize("template", ["0", "1"], ids=["started", "forked"])
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_child_dies_with_its_host(tmp_path, how, template):
    host, pid = spinning_host(tmp_path, {"FLOW_SANDBOX_TEMPLATE": template})
    forked_from = template_of(host)
    assert (forked_from is not None) == (template == "1")
    try:
        host.send_signal(how)
        assert host.wait(timeout=10) == -how
        assert wait_gone(pid, 5.0), f"the sandbox child {pid} outlived its host's {how.name}"
        if forked_from is not None:
            assert wait_gone(forked_from, 5.0), f"the child template {forked_from} outlived its host"
    finally:
        for left in (pid, forked_from):
            if left is not None and not gone(left):
                os.kill(left, signal.SIGKILL)


def test_without_the_parent_death_signal_the_template_still_ends_its_children(tmp_path):
    """A template started without the parent-death signal still sees the host's end of its
    socket close when the host is killed, and kills its children's groups before it exits."""
    host, pid = spinning_host(tmp_path, {"FLOW_SANDBOX_WITHOUT": "parent_death", "FLOW_SANDBOX_TEMPLATE": "1"})
    forked_from = template_of(host)
    try:
        host.kill()
        host.wait(timeout=10)
        assert wait_gone(pid, 5.0)
        assert wait_gone(forked_from, 5.0)
    finally:
        for left in (pid, forked_from):
            if not gone(left):
                os.kill(left, signal.SIGKILL)


def test_without_the_parent_death_signal_a_killed_host_leaves_an_orphan(tmp_path):
    """What the layer stops, shown by its absence (and reported: see the sandbox record test)."""
    host, pid = spinning_host(tmp_path, {"FLOW_SANDBOX_WITHOUT": "parent_death", "FLOW_SANDBOX_TEMPLATE": "0"})
    try:
        host.kill()
        host.wait(timeout=10)
        assert not wait_gone(pid, 1.5)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 5.0)


def test_a_spinning_child_is_halted_at_its_wall_clock_deadline_and_the_run_resumes(tmp_path):
    program = tmp_path / "spin.flow"
    program.write_text(SPIN)
    runs = tmp_path / "runs"
    started = time.monotonic()
    result = flow("run", str(program), "--runs", str(runs), env={"FLOW_SANDBOX_WALL_SECONDS": "1"})
    assert result.returncode == 130, result.stderr
    assert time.monotonic() - started < 30
    assert "wall-clock deadline" in result.stderr
    (run,) = runs.iterdir()
    facts = [json.loads(line)["kind"] for line in (run / "history.jsonl").read_text().splitlines()]
    assert "End" not in facts  # a host limit, not the program's outcome: nothing was faulted
    records = [json.loads(line) for line in (run / "host.jsonl").read_text().splitlines()]
    assert {"kind": "halted", "reason": "deadline"}.items() <= [r for r in records if r["kind"] == "halted"][-1].items()
    again = flow("resume", run.name, "--runs", str(runs), env={"FLOW_SANDBOX_WALL_SECONDS": "1"})
    assert again.returncode == 130, again.stderr
    assert "wall-clock deadline" in again.stderr


def test_the_deadline_kills_the_child_and_every_later_use_says_so(monkeypatch):
    monkeypatch.setenv("FLOW_SANDBOX_WALL_SECONDS", "0.5")
    child = Child.start(argv_tail=[ECHO_CHILD])
    assert child.wall_seconds == 0.5 and child.layers["wall_clock"]["applied"]
    child.send({"op": "spin"}, timeout=5)
    started = time.monotonic()
    with pytest.raises(ChildDeadline):
        child.recv()
    assert 0.4 < time.monotonic() - started < 5
    assert gone(child.pid)
    with pytest.raises(ChildDied, match="wall-clock deadline"):
        child.send({"op": "echo", "value": 1})


@pytest.mark.parametrize("setting", ["soon", "-1", "inf"])
def test_a_bad_deadline_setting_is_said_and_the_default_kept(tmp_path, setting):
    program = tmp_path / "hello.flow"
    program.write_text(HELLO)
    result = flow("run", str(program), "--runs", str(tmp_path / "runs"), env={"FLOW_SANDBOX_WALL_SECONDS": setting})
    assert result.returncode == 0
    assert f"FLOW_SANDBOX_WALL_SECONDS is {setting!r}" in result.stderr


def sandbox_record(runs: Path) -> dict:
    (run,) = runs.iterdir()
    records = [json.loads(line) for line in (run / "host.jsonl").read_text().splitlines()]
    (record,) = [r for r in records if r["kind"] == "sandbox"]
    return record


def test_every_run_records_its_sandbox_layers(tmp_path):
    program = tmp_path / "hello.flow"
    program.write_text(HELLO)
    result = flow("run", str(program), "--runs", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    record = sandbox_record(tmp_path / "runs")
    assert set(record["layers"]) == {"process_group", "network", "parent_death", "rlimits", "wall_clock", "uid",
                                     "user_namespace", "capabilities", "landlock", "seccomp"}
    assert record["missing"] == sorted(n for n, layer in record["layers"].items() if not layer["applied"])


def test_a_missing_layer_is_recorded_missing(tmp_path):
    program = tmp_path / "hello.flow"
    program.write_text(HELLO)
    result = flow("run", str(program), "--runs", str(tmp_path / "runs"),
                  env={"FLOW_SANDBOX_WITHOUT": "landlock,seccomp,parent_death,nonsense"})
    assert result.returncode == 0, result.stderr
    assert "FLOW_SANDBOX_WITHOUT names unknown layers nonsense" in result.stderr
    record = sandbox_record(tmp_path / "runs")
    assert {"landlock", "seccomp", "parent_death"} <= set(record["missing"])
    assert record["layers"]["seccomp"]["detail"] == "missing: left out on purpose (FLOW_SANDBOX_WITHOUT)"
