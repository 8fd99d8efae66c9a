"""A sandbox child kept after its run for the next run of the same program (flowrt/kept_child.py):
the next run of that program is handed it (and computes what a fresh child computes), another
program never is, a run that did not end cleanly gives nothing back, the bounds on a kept child's
CPU and runs hold, the child itself refuses another program's load, and closing the host ends
the kept children."""

from __future__ import annotations

import json
import threading
import time

import pytest

import flowrt
from flowrt import kept_child
from flowrt.replay import replay
from flowrt.run import load_message, prepare
from flowrt.sandbox_process import ChildDied
from flowrt.store import RunStore
from tests.test_spare_child import gone, wait_for

ECHO = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""
OTHER = "pub flow main(n: Int) -> Int = n * 2\n"


@pytest.fixture
def programs(tmp_path):
    (tmp_path / "echo.flow").write_text(ECHO)
    (tmp_path / "other.flow").write_text(OTHER)
    return str(tmp_path / "echo.flow"), str(tmp_path / "other.flow")


def kept_pids(host) -> list[int]:
    return [child.pid for child in host._spares().kept.children()]


def sandbox_record(runs: str, run_id: str) -> dict:
    store = RunStore.open(runs, run_id, for_append=False)
    try:
        return [r for r in store.host_records() if r["kind"] == "sandbox"][-1]
    finally:
        store.close()


def test_the_next_run_of_a_program_is_handed_the_child_its_last_run_ended_with(programs, tmp_path):
    echo, _ = programs
    runs = str(tmp_path / "runs")
    with flowrt.Host({"echo.echo": lambda n: n * 10}, runs=runs, durability="none") as host:
        first = host.run(echo, {"n": 3})
        assert first.output == 60 and len(kept_pids(host)) == 1
        pid = kept_pids(host)[0]
        results = [host.run(echo, {"n": n}) for n in (4, 0, 5)]
        assert [r.output for r in results] == [100, 0, 150]  # each its own input, nothing of the one before
        assert kept_pids(host) == [pid] and host._spares().kept.reused == 3
        record = sandbox_record(runs, results[-1].run_id)
        assert "kept for this run after 3 runs of the same program" in record["origin"]
        assert "kept" not in sandbox_record(runs, first.run_id)["origin"]
        assert record["layers"] == sandbox_record(runs, first.run_id)["layers"]
    wait_for(lambda: gone(pid), "the kept child to end with the host")
    for result in [first, *results]:
        assert replay(runs, result.run_id).verdict.kind == "Matched"


def test_another_program_is_never_handed_a_kept_child(programs, tmp_path):
    echo, other = programs
    with flowrt.Host({"echo.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none") as host:
        assert host.run(echo, {"n": 2}).output == 3
        echo_pid = kept_pids(host)[0]
        assert host.run(other, {"n": 21}).output == 42
        assert echo_pid in kept_pids(host) and len(kept_pids(host)) == 2
        assert host._spares().kept.reused == 0
        assert host.run(echo, {"n": 1}).output == 1 and host._spares().kept.reused == 1


def test_a_run_that_did_not_end_cleanly_gives_no_child_back(programs, tmp_path):
    echo, _ = programs
    entered, release = threading.Event(), threading.Event()

    def slow(n: int) -> int:
        entered.set()
        release.wait(30)
        return n

    with flowrt.Host({"echo.echo": slow}, runs=str(tmp_path / "runs"), durability="none") as host:
        handle = host.start(echo, {"n": 2}, detach=True)
        assert entered.wait(30)
        handle.halt()
        release.set()
        assert handle.wait(timeout=60).status == "halted"
        assert kept_pids(host) == []


def test_a_child_past_its_cpu_or_its_runs_is_let_go(programs, tmp_path, monkeypatch):
    echo, _ = programs
    with flowrt.Host({"echo.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none") as host:
        monkeypatch.setattr(kept_child, "KEEP_CPU_SECONDS", 0.0)
        assert host.run(echo, {"n": 1}).output == 1 and kept_pids(host) == []
        monkeypatch.setattr(kept_child, "KEEP_CPU_SECONDS", 60.0)
        monkeypatch.setattr(kept_child, "KEEP_RUNS", 3)
        pids = []
        for n in range(5):
            assert host.run(echo, {"n": n}).output == n * (n + 1) // 2
            pids.append(tuple(kept_pids(host)))
        # kept after its 1st and 2nd runs, let go after its 3rd; then the same again
        assert pids[0] == pids[1] and pids[2] == () and pids[3] != pids[0] and len(pids[3]) == 1


def test_a_kept_child_ends_rather_than_load_another_program(programs, tmp_path):
    echo, other = programs
    with flowrt.Host({"echo.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none") as host:
        assert host.run(echo, {"n": 1}).output == 1
        identity = prepare(echo, "main", json.dumps({"n": 1}), python_tools={"echo.echo": lambda n: n}).compiled.identity
        child = host._spares().kept.take(identity)
        try:
            message = load_message(prepare(other, "main", json.dumps({"n": 1})))
            message["keep"] = True
            child.send(message, timeout=10)
            with pytest.raises(ChildDied):
                child.recv(timeout=10)
        finally:
            child.let_go()


def test_flow_sandbox_keep_0_keeps_none(programs, tmp_path, monkeypatch):
    echo, _ = programs
    monkeypatch.setenv("FLOW_SANDBOX_KEEP", "0")
    with flowrt.Host({"echo.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="none") as host:
        assert [host.run(echo, {"n": n}).output for n in (1, 2)] == [1, 3]
        assert kept_pids(host) == [] and host._spares().kept.reused == 0


def test_a_child_kept_by_a_background_run_outlives_the_thread_it_was_started_from(programs, tmp_path):
    """A child's parent-death signal follows the thread that forked it. The first children of a
    host are started when a run first needs one, on the thread driving it: a background run's is
    the run hub's, which ends when it has no run left. Forked there, the child kept for the next
    run of the program was killed as that thread ended, now and then while the next run had it
    ("SIGKILL came from outside the host's control"). It is forked on a thread that lives as
    long as it does, so it is alive, and handed on, after the hub's thread has gone."""
    from flowrt import run_hub

    echo, _ = programs
    runs = str(tmp_path / "runs")
    with flowrt.Host({"echo.echo": lambda n: n * 10}, runs=runs, durability="none") as host:
        first = host.start(echo, {"n": 3}, detach=True).wait(timeout=60)
        assert first.exit_code == 0 and first.output == 60
        wait_for(lambda: run_hub.shared()._thread is None, "the hub's thread to end with its last run")
        [pid] = kept_pids(host)
        time.sleep(0.2)  # (the signal of a thread's end is sent as it ends; room for it to land)
        assert not gone(pid)
        second = host.start(echo, {"n": 4}, detach=True).wait(timeout=60)
        assert second.exit_code == 0 and second.output == 100, second.fault
        assert "kept for this run" in sandbox_record(runs, second.run_id)["origin"]
