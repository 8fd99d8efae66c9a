"""A host driving more runs than it has CPUs schedules their sandbox children as SCHED_BATCH
(flowrt/sandbox_launch.py `schedule_as_batch`): a reply it writes then wakes a child without
preempting the host, whose other runs would wait. With fewer runs, children are scheduled as
usual."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import flowrt
from flowrt import sandbox_launch as launch
from tests.test_run_hub import COUNT  # a loop of `n` calls of `count.echo`


pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")


def test_a_child_is_scheduled_as_batch_and_back():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        launch.schedule_as_batch(child.pid, True)
        assert os.sched_getscheduler(child.pid) == os.SCHED_BATCH
        launch.schedule_as_batch(child.pid, False)
        assert os.sched_getscheduler(child.pid) == os.SCHED_OTHER
    finally:
        child.kill()
        child.wait()
    launch.schedule_as_batch(child.pid, True)  # gone: nothing to change, nothing raised


def _policies_seen(tmp_path, runs: int, monkeypatch) -> set[int]:
    """The scheduling policies of this host's live children, as its Tool sees them at each call,
    while `runs` runs of 150 calls go at once on a host taken to have 2 CPUs."""
    monkeypatch.setattr(launch, "_CPUS", 2)
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    seen: set[int] = set()

    def echo(n):
        for child in list(launch._LIVE):
            if child not in launch._SPARE:
                try:
                    seen.add(os.sched_getscheduler(child.pid))
                except ProcessLookupError:
                    pass
        return n

    host = flowrt.Host({"count.echo": echo}, runs=str(tmp_path / "runs"), durability="none")
    try:
        handles = [host.start(str(program), {"n": 150}, detach=True) for _ in range(runs)]
        assert [h.wait(timeout=120).output for h in handles] == [11325] * runs
    finally:
        host.close()
    return seen


def _may_reschedule_children() -> bool:
    """Whether this host may change its children's policy: a child of its own user always; a
    root host's children run as nobody (docs/sandbox.md §5), which takes CAP_SYS_NICE."""
    if os.geteuid() != 0:
        return True
    with open("/proc/self/status") as status:
        effective = int(status.read().split("CapEff:")[1].split()[0], 16)
    return bool(effective >> 23 & 1)  # CAP_SYS_NICE


def test_more_runs_than_cpus_run_their_children_as_batch(tmp_path, monkeypatch):
    seen = _policies_seen(tmp_path, 4, monkeypatch)
    if _may_reschedule_children():
        assert os.SCHED_BATCH in seen
    else:  # the kernel refuses the change: nothing changes, and the runs go on as usual
        assert seen == {os.SCHED_OTHER}


def test_no_more_runs_than_cpus_leave_their_children_scheduled_as_usual(tmp_path, monkeypatch):
    assert _policies_seen(tmp_path, 2, monkeypatch) == {os.SCHED_OTHER}
