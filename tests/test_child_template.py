"""Children forked from the child template (flowrt/child_template.py, sandbox/template.py): each
is the child a started one would have been (its own session, network namespace, working
directory, descriptors, limits and lockdown; the same history for the same run), an exit is
reported as a started child's is, the template reaps what it forks, and whatever goes wrong with
the template (killed, stopped, switched off) leaves children started as before, never a hang."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import flowrt
from flowrt import child_template, kept_child
from flowrt.sandbox_process import Child, ChildDied
from tests.test_sandbox_lifetime import children_of, command_of
from tests.test_spare_child import wait_for

HELLO = "pub flow main(n: Int) -> Int = n + 1\n"
TOOLS = """\
@tool pub flow twice(n: Int) -> Int

pub flow main(n: Int) -> List<Int> !tool = [twice(n), twice(n + 1)]
"""
FORKED = "forked from the child template"


@pytest.fixture
def fresh_template(monkeypatch):
    """This process's template state from scratch, and the template (if any) ended after."""
    child_template.shut_down()
    monkeypatch.setattr(child_template, "_started_directly", 0)
    monkeypatch.setattr(child_template, "_restarts", 0)
    yield
    child_template.shut_down()


def forked_child(monkeypatch) -> Child:
    monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", "1")
    child = Child.start()
    assert child.origin.startswith(FORKED), child.origin
    return child


def state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # (reaped before, or between open and read)
        return "gone"


def test_a_forked_child_is_set_up_as_a_started_one(fresh_template, monkeypatch):
    one, two = forked_child(monkeypatch), forked_child(monkeypatch)
    try:
        template = child_template._template.pid
        assert set(children_of(template)) == {one.pid, two.pid}
        for child in (one, two):
            assert os.getpgid(child.pid) == child.pid and os.getsid(child.pid) == child.pid
            assert Path(f"/proc/{child.pid}/cwd").resolve() == Path(child.workdir).resolve()
            # its three pipes, and the channel's copies of 0 and 1 once sandbox.child has
            # claimed them (framing.claim_stdio): nothing of the template's or the host's
            fds = lambda pid=child.pid: sorted(map(int, os.listdir(f"/proc/{pid}/fd")))  # noqa: E731
            wait_for(lambda: len(fds()) >= 5, "the child to claim its channel", 10)
            assert fds() == [0, 1, 2, 3, 4]
            limits = Path(f"/proc/{child.pid}/limits").read_text()
            assert any(line.startswith("Max open files") and line.split()[3:5] == ["32", "32"]
                       for line in limits.splitlines())
            assert any(line.startswith("Max cpu time") and line.split()[3:5] == ["300", "305"]
                       for line in limits.splitlines())
            assert child.network_isolated and child.layers["network"]["applied"]
            assert "template exits" in child.layers["parent_death"]["detail"]
        namespaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in (one.pid, two.pid, os.getpid())}
        assert len(namespaces) == 3  # each child its own, neither the host's (nor the template's)
        assert os.readlink(f"/proc/{template}/ns/net") == os.readlink("/proc/self/ns/net")
    finally:
        one.kill()
        two.kill()


def test_exits_and_signals_are_reported_as_a_started_childs(fresh_template, monkeypatch):
    child = forked_child(monkeypatch)
    os.kill(child.pid, signal.SIGSEGV)
    with pytest.raises(ChildDied) as died:
        child.recv(timeout=10)
    assert died.value.signal == signal.SIGSEGV and child.returncode == -signal.SIGSEGV
    assert "killed from outside" in str(died.value)
    quiet = forked_child(monkeypatch)
    assert quiet.close() == 0  # its input closed before a load: sandbox.child returns, exit 0


def test_the_template_reaps_every_child_it_forked(fresh_template, monkeypatch):
    children = [forked_child(monkeypatch) for _ in range(5)]
    template = child_template._template.pid
    for child in children:
        child.kill()
    wait_for(lambda: children_of(template) == [], "the template to reap its children", 10)
    assert all(state_of(c.pid) == "gone" for c in children)


def test_runs_on_forked_children_record_what_runs_on_started_ones(fresh_template, monkeypatch, tmp_path):
    (tmp_path / "tools.flow").write_text(TOOLS)
    histories = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", mode)
        with flowrt.Host({"tools.twice": lambda n: 2 * n}, runs=str(tmp_path / f"runs-{mode}"),
                         durability="none") as host:
            done = host.run(str(tmp_path / "tools.flow"), {"n": 20})
        assert done.exit_code == 0 and done.output == [40, 42]
        (run,) = (tmp_path / f"runs-{mode}").iterdir()
        facts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
        histories[mode] = [{k: v for k, v in fact.items() if k not in ("at", "run", "hash", "prev")}
                           for fact in facts]
        records = [json.loads(line) for line in (run / "host.jsonl").read_text().splitlines()]
        (sandbox,) = [r for r in records if r["kind"] == "sandbox"]
        assert sandbox["origin"].startswith(FORKED) == (mode == "1")
        assert sandbox["missing"] == sorted(n for n, layer in sandbox["layers"].items() if not layer["applied"])
        assert {"uid", "user_namespace", "capabilities", "landlock", "seccomp"} <= set(sandbox["layers"])
    assert histories["0"] == histories["1"]


def test_by_default_a_process_forks_from_its_third_child_on(fresh_template, monkeypatch):
    monkeypatch.delenv("FLOW_SANDBOX_TEMPLATE", raising=False)
    children = [Child.start() for _ in range(4)]
    try:
        assert [c.origin.startswith(FORKED) for c in children] == [False, False, True, True]
    finally:
        for child in children:
            child.kill()


def test_switched_off_no_template_is_started(fresh_template, monkeypatch):
    monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", "0")
    children = [Child.start() for _ in range(3)]
    for child in children:
        assert not child.origin.startswith(FORKED)
        child.kill()
    assert child_template._template is None


def test_a_bad_setting_is_said_and_auto_used(fresh_template, monkeypatch, capsys):
    monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", "sometimes")
    assert child_template.mode() == "auto"
    assert "FLOW_SANDBOX_TEMPLATE is 'sometimes'" in capsys.readouterr().err


def test_a_killed_template_takes_its_children_and_another_is_started(fresh_template, monkeypatch):
    child = forked_child(monkeypatch)
    template = child_template._template.pid
    os.kill(template, signal.SIGKILL)
    with pytest.raises(ChildDied):
        child.recv(timeout=10)  # its parent-death signal: it dies with the template
    wait_for(lambda: child_template._template.ended, "the host to see the template end", 10)
    again = forked_child(monkeypatch)
    try:
        assert child_template._template.pid != template
        assert child_template._restarts == 1
    finally:
        again.kill()


def test_a_template_that_does_not_answer_leaves_the_child_started_as_before(fresh_template, monkeypatch):
    first = forked_child(monkeypatch)
    first.kill()
    template = child_template._template
    monkeypatch.setattr(child_template, "ANSWER_SECONDS", 0.5)
    os.kill(template.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        child = Child.start()
        assert time.monotonic() - began < 5
        assert not child.origin.startswith(FORKED)  # started itself, after half a second
        child.kill()
        wait_for(lambda: template.ended, "the stuck template to be given up", 10)
    finally:
        try:
            os.kill(template.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_process_forked_from_a_host_starts_a_template_of_its_own(fresh_template, monkeypatch):
    first = forked_child(monkeypatch)
    first.kill()
    parents = child_template._template.pid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked application process: not the parent's template, a child all the same
        try:
            os.close(read_end)
            child = Child.start()
            mine = child_template._template.pid
            child.kill()
            child_template.shut_down(5.0)
            os.write(write_end, json.dumps({"origin": child.origin, "template": mine}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        said = json.loads(answer.read() or "{}")
    os.waitpid(pid, 0)
    assert said["origin"].startswith(FORKED) and said["template"] != parents
    again = forked_child(monkeypatch)  # the parent's template is untouched
    assert child_template._template.pid == parents
    again.kill()


SLOW = """\
@tool pub flow step(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = walk(n, 0)

flow walk(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { walk(n - 1, acc + step(n)) }
"""


def test_a_run_whose_template_is_killed_is_halted_not_faulted_and_resumes(fresh_template, monkeypatch, tmp_path):
    """Nothing the program did: the run halts (reason `template`), keeps every fact, and a
    resume on a new template reaches the End an undisturbed run has."""
    monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", "1")
    (tmp_path / "slow.flow").write_text(SLOW)
    killed = []

    def step(n):
        if n == 3 and not killed:
            killed.append(child_template._template.pid)
            os.kill(killed[0], signal.SIGKILL)
            wait_for(lambda: child_template._template.ended, "the host to see the template end", 10)
        return n

    with flowrt.Host({"slow.step": step}, runs=str(tmp_path / "runs"), durability="none") as host:
        halted = host.run(str(tmp_path / "slow.flow"), {"n": 5})
        assert halted.exit_code == 130 and killed, halted
        (run,) = (tmp_path / "runs").iterdir()
        facts = [json.loads(line)["kind"] for line in (run / "history.jsonl").read_text().splitlines()]
        assert "End" not in facts and facts.count("Reply") >= 3
        records = [json.loads(line) for line in (run / "host.jsonl").read_text().splitlines()]
        assert [r for r in records if r["kind"] == "halted"][-1]["reason"] == "template"
        done = host.resume(run.name)
    assert done.exit_code == 0 and done.output == 15
    assert child_template._template.pid != killed[0]


def test_a_worker_takes_up_again_a_run_halted_by_its_templates_end(tmp_path):
    """Through `flow worker`: the template is killed while the worker drives a run (its child
    waits in a sleep); the run halts with reason `template`, and the worker drives it again to
    the End an undisturbed run has, each Tool call made once."""
    import subprocess
    import sys

    from tests.test_worker_dir import NOTE_TOOL, WORK, facts, host_records, notes, start

    work = tmp_path / "program"
    work.mkdir()
    (work / "work.flow").write_text(WORK)
    (work / "note_tool.py").write_text(NOTE_TOOL)
    (work / "flow.toml").write_text('[tools]\n"work" = { python = "note_tool.py" }\n')
    runs = tmp_path / "runs"
    done, run_id = start(work, runs, "r0", "PT3S", kill_after=3)  # crashed after note a's Reply
    assert done.returncode == -signal.SIGKILL
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "worker", "--runs", str(runs), "--allow",
                             "--poll", "0.2"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLOW_SANDBOX_TEMPLATE": "1"})
    try:
        def template_with_a_child():
            for pid in children_of(host.pid):
                if b"sandbox.template" in command_of(pid) and children_of(pid):
                    return pid
            return None

        wait_for(lambda: template_with_a_child() is not None, "the worker's run on a forked child", 60)
        time.sleep(0.5)  # the child is in its sleep
        os.kill(template_with_a_child(), signal.SIGKILL)
        wait_for(lambda: any(f["kind"] == "End" for f in facts(runs, run_id)), "the run's End", 60)
    finally:
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=60)
    halts = [r for r in host_records(runs, run_id) if r["kind"] == "halted"]
    assert [h["reason"] for h in halts] == ["template"], err
    assert "recovered (its child template ended)" in out + err
    (end,) = [f for f in facts(runs, run_id) if f["kind"] == "End"]
    assert end["outcome"] == {"Completed": "R0:A R0:B"}
    assert notes(work) == ["r0:a", "r0:b"]


def test_the_cpu_of_reaped_forked_children_is_counted(fresh_template, monkeypatch, tmp_path):
    """A forked child is the template's child: what it cost shows in the template's reaped CPU
    (benchmarks add it to the host's RUSAGE_CHILDREN, which never sees it)."""
    spin = "pub flow main(n: Int) -> Int = count(n, 0)\n\nflow count(n: Int, acc: Int) -> Int = if n == 0 { acc } else { count(n - 1, acc + 1) }\n"
    (tmp_path / "count.flow").write_text(spin)
    monkeypatch.setenv("FLOW_SANDBOX_TEMPLATE", "1")
    monkeypatch.setattr(kept_child, "KEEP_IDLE", 0)  # (a kept child is reaped only when let go)
    assert child_template.reaped_cpu_seconds() == 0.0  # no template yet
    with flowrt.Host(runs=str(tmp_path / "runs"), durability="none") as host:
        assert host.run(str(tmp_path / "count.flow"), {"n": 10}).output == 10
        template = child_template._template.pid
        wait_for(lambda: children_of(template) == [], "the first child to be reaped", 10)
        before = child_template.reaped_cpu_seconds()
        assert host.run(str(tmp_path / "count.flow"), {"n": 20_000_000}).output == 20_000_000
    wait_for(lambda: child_template.reaped_cpu_seconds() - before >= 0.2, "the counting child's CPU to be reaped", 10)
