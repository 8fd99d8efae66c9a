"""Live runs of one program sharing a sandbox child, a lane each (flowrt/lane_child.py, with
`FLOW_SANDBOX_LANES`): through `flowrt.Host`, as an application drives them. The runs compute and
record what runs in children of their own do; a child takes at most its count of runs; a shared
child that dies halts every run in it (resumable, reason `shared-child`), none Faulted, and each
resumes to its End; a run halted on its own leaves the others running."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import flowrt
from flowrt.store import RunStore

ECHO = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""


def wait_for(condition, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "echo.flow"
    path.write_text(ECHO)
    return str(path)


def records(runs: str, run_id: str) -> tuple[list[dict], list[dict]]:
    store = RunStore.open(runs, run_id, for_append=False)
    try:
        return store.facts(), store.host_records()
    finally:
        store.close()


def last_record(runs: str, run_id: str, kind: str) -> dict:
    """The run's last host record of `kind`."""
    return [r for r in records(runs, run_id)[1] if r["kind"] == kind][-1]


def killed_under(host, program: str, n: int, count: int) -> list:
    """`count` runs of `n` calls started in lanes, their shared child killed with SIGKILL once
    they are well into their calls: what each run came to."""
    handles = [host.start(program, {"n": n}, detach=True) for _ in range(count)]
    assert wait_for(lambda: host._spares().lanes.children())
    time.sleep(0.3)  # (every run well into its calls)
    (child,) = host._spares().lanes.children()
    os.kill(child.pid, signal.SIGKILL)
    return [handle.wait(timeout=60) for handle in handles]


def what_it_recorded(facts: list[dict]) -> list[tuple]:
    """A run's facts without what names the run (its Start, the chain's hashes)."""
    return [(f["kind"], {k: v for k, v in f.items() if k not in ("prev", "hash", "n")}) for f in facts[1:]]


def test_runs_in_lanes_compute_and_record_what_runs_alone_do(program, tmp_path, monkeypatch):
    runs = str(tmp_path / "runs")
    monkeypatch.setenv("FLOW_SANDBOX_KEEP", "0")  # (the run alone gives its child back to none)
    with flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs, durability="none") as host:
        alone = host.run(program, {"n": 30})
        monkeypatch.setenv("FLOW_SANDBOX_LANES", "4")
        handles = [host.start(program, {"n": n}, detach=True) for n in (30, 10, 20, 30, 5, 30)]
        results = [handle.wait(timeout=60) for handle in handles]
    assert [r.output for r in results] == [465, 55, 210, 465, 15, 465]
    expected = what_it_recorded(records(runs, alone.run_id)[0])
    origins = []
    for result in results:
        facts = records(runs, result.run_id)[0]
        if facts[-1]["outcome"] == {"Completed": 465}:
            assert what_it_recorded(facts) == expected
        sandbox = last_record(runs, result.run_id, "sandbox")
        assert sandbox["missing"] == [] or "seccomp" not in sandbox["missing"]
        origins.append(sandbox["origin"])
    assert all("lane" in origin and "up to 4 runs" in origin for origin in origins), origins
    assert "lane" not in last_record(runs, alone.run_id, "sandbox")["origin"]


def test_a_child_serves_at_most_its_count_of_runs_waits_for_the_next_and_ends_with_the_host(program, tmp_path,
                                                                                             monkeypatch):
    monkeypatch.setenv("FLOW_SANDBOX_LANES", "2")
    release = threading.Event()
    calls = []

    def echo(n):
        calls.append(n)
        release.wait(10)
        return n

    with flowrt.Host({"echo.echo": echo}, runs_dir=str(tmp_path / "runs"), durability="none") as host:
        handles = [host.start(program, {"n": 2}, detach=True) for _ in range(5)]
        assert wait_for(lambda: len(calls) == 5)
        shared = host._spares().lanes.children()
        assert len(shared) == 3 and len({child.pid for child in shared}) == 3  # 2 + 2 + 1
        release.set()
        assert [handle.wait(timeout=60).output for handle in handles] == [3] * 5
        # Serving none, they wait for the next runs of the program: the next one takes a lane.
        assert sorted(c.pid for c in host._spares().lanes.children()) == sorted(c.pid for c in shared)
        assert host.start(program, {"n": 2}, detach=True).wait(timeout=60).output == 3
        assert sorted(c.pid for c in host._spares().lanes.children()) == sorted(c.pid for c in shared)
    assert all(wait_for(lambda c=child: c._exited()) for child in shared)  # (closing the host ends them)


def test_a_shared_child_that_dies_halts_every_run_in_it_and_each_resumes_to_its_end(program, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOW_SANDBOX_LANES", "8")
    runs = str(tmp_path / "runs")
    with flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs, durability="none") as host:
        results = killed_under(host, program, 30_000, 3)
        assert [r.status for r in results] == ["halted"] * 3
        for result in results:
            assert records(runs, result.run_id)[0][-1]["kind"] != "End"
            assert last_record(runs, result.run_id, "halted")["reason"] == "shared-child"
        monkeypatch.setenv("FLOW_SANDBOX_LANES", "0")
        resumed = [host.resume(result.run_id) for result in results]
    assert [r.output for r in resumed] == [30_000 * 30_001 // 2] * 3


def test_a_run_halted_on_its_own_leaves_the_others_in_its_child_running(program, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOW_SANDBOX_LANES", "4")
    runs = str(tmp_path / "runs")
    with flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs, durability="none") as host:
        stopped = host.start(program, {"n": 100_000}, detach=True)
        others = [host.start(program, {"n": 20_000}, detach=True) for _ in range(2)]
        assert wait_for(lambda: host._spares().lanes.children())
        time.sleep(0.2)
        stopped.halt()
        assert stopped.wait(timeout=60).status == "halted"
        assert [handle.wait(timeout=60).output for handle in others] == [20_000 * 20_001 // 2] * 2
        # Resumed (in a child of its own), it goes on from where the halt left it, to its End.
        monkeypatch.setenv("FLOW_SANDBOX_LANES", "0")
        resumed = host.resume(stopped.run_id)
        assert resumed.status in ("completed", "faulted")
        assert records(runs, stopped.run_id)[0][-1]["kind"] == "End"


SPIN = ECHO.replace("pub flow main(n: Int) -> Int !tool = loop(n, 0)",
                    "pub flow main(n: Int) -> Int !tool = if n < 0 { spin(echo(n)) } else { loop(n, 0) }\n\n"
                    "flow spin(n: Int) -> Int = spin(n + 1)")


def test_a_run_that_computes_past_the_deadline_halts_the_runs_beside_it_and_none_is_faulted(tmp_path, monkeypatch):
    """Lanes are cooperative: a run that never calls again holds up the others in its child. The
    child then owes them a message past its wall-clock deadline and is killed; every run in it
    halts (none Faulted), and resumed alone, the one that spins meets its own deadline."""
    program = tmp_path / "spin.flow"
    program.write_text(SPIN)
    monkeypatch.setenv("FLOW_SANDBOX_LANES", "4")
    monkeypatch.setenv("FLOW_SANDBOX_WALL_SECONDS", "1")
    runs = str(tmp_path / "runs")
    with flowrt.Host({"spin.echo": lambda n: n}, runs_dir=runs, durability="none") as host:
        others = [host.start(str(program), {"n": 1_000_000}, detach=True) for _ in range(2)]
        spinning = host.start(str(program), {"n": -1}, detach=True)
        results = [handle.wait(timeout=60) for handle in [*others, spinning]]
        assert [r.status for r in results] == ["halted"] * 3
        for result in results:
            assert last_record(runs, result.run_id, "halted")["reason"] == "shared-child"
        monkeypatch.setenv("FLOW_SANDBOX_LANES", "0")
        alone = host.resume(spinning.run_id)
    assert alone.status == "halted"
    assert last_record(runs, spinning.run_id, "halted")["reason"] == "deadline"


def test_an_async_hosts_runs_share_children_too(program, tmp_path, monkeypatch):
    import asyncio

    monkeypatch.setenv("FLOW_SANDBOX_LANES", "3")
    runs = str(tmp_path / "runs")

    async def echo(n):
        await asyncio.sleep(0)
        return n

    async def main() -> list:
        host = flowrt.AsyncHost({"echo.echo": echo}, runs=runs, durability="none")
        try:
            return await asyncio.gather(*[host.run(program, {"n": n}) for n in (40, 30, 20, 10)])
        finally:
            await host.close()

    results = asyncio.run(main())
    assert [r.output for r in results] == [820, 465, 210, 55]
    origins = [last_record(runs, result.run_id, "sandbox")["origin"] for result in results]
    assert sum("lane" in origin for origin in origins) == 4, origins


FAN_OUT = """
use "std@v1/task"

@tool pub flow slow(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = {
    let a = task.spawn(flow() = slow(n))
    let b = task.spawn(flow() = slow(n + 1))
    let c = task.spawn(flow() = slow(n + 2))
    task.wait(a) * 100 + task.wait(b) * 10 + task.wait(c)
}
"""


def test_replies_that_come_back_out_of_order_reach_each_lane_in_the_order_recorded(tmp_path, monkeypatch):
    """Several calls out at once in each run, answered in an order of the Tool's own: the
    replies written to a shared child together keep each run's order, so every run replays
    against its history."""
    import random

    program = tmp_path / "fan.flow"
    program.write_text(FAN_OUT)
    monkeypatch.setenv("FLOW_SANDBOX_LANES", "8")
    pick = random.Random(7)

    def slow(n):
        time.sleep(pick.random() * 0.003)
        return n % 10

    runs = str(tmp_path / "runs")
    with flowrt.Host({"fan.slow": slow}, runs_dir=runs, durability="none") as host:
        handles = [host.start(str(program), {"n": n}, detach=True) for n in range(8)]
        results = [handle.wait(timeout=60) for handle in handles]
        assert [r.output for r in results] == [(n % 10) * 100 + (n + 1) % 10 * 10 + (n + 2) % 10 for n in range(8)]
        assert [host.replay(r.run_id).verdict for r in results] == ["Matched"] * 8


def test_a_worker_takes_up_the_runs_a_shared_childs_death_halted(program, tmp_path, monkeypatch):
    """The halts are the host's, not a person's: `flow worker` resumes them by itself."""
    import subprocess
    import sys

    monkeypatch.setenv("FLOW_SANDBOX_LANES", "4")
    runs = str(tmp_path / "runs")
    with flowrt.Host({"echo.echo": lambda n: n}, runs_dir=runs, durability="none") as host:
        halted = killed_under(host, program, 10_000, 2)
    assert [r.status for r in halted] == ["halted"] * 2
    (tmp_path / "flow.toml").write_text('[tools]\n"echo" = { python = "echo_tool.py" }\n')
    (tmp_path / "echo_tool.py").write_text('from flowrt.toolkit import serve\n\n'
                                           'serve({"echo.echo": lambda n: n}, declared_in="echo.flow")\n')
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "worker", "--runs", runs, "--once", "--allow"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for result in halted:
        assert f"{result.run_id}: recovered (the child it shared with other runs ended)" in done.stdout, done.stdout
        assert records(runs, result.run_id)[0][-1]["outcome"] == {"Completed": 10_000 * 10_001 // 2}
