"""A sandbox child started ahead of its run (flowrt/spare_child.py): a host that drives run after
run hands each a child already started, one that is unfit (dead, or made under other sandbox
settings) is never used, a spare is not counted among the children a host drives, and closing
the host kills it."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

import flowrt
from flowrt import kept_child, sandbox_launch
from flowrt.spare_child import SpareChild

HELLO = "pub flow main(n: Int) -> Int = n + 1\n"


def gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie no one has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # (reaped before, or between open and read)
        return True


def wait_for(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def ready_spare(spares: SpareChild):
    """The child of the spare waiting now (it has started)."""
    wait_for(lambda: spares._spares, "a spare to be started")
    return spares._spares[0][0].child()


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "hello.flow"
    path.write_text(HELLO)
    return str(path)


def test_a_host_hands_its_later_runs_children_started_ahead(program, tmp_path, monkeypatch):
    monkeypatch.setattr(kept_child, "KEEP_IDLE", 0)  # (no child kept after its run: tests/test_kept_child.py)
    with flowrt.Host(runs=str(tmp_path / "runs"), durability="none") as host:
        results = [host.run(program, {"n": n}) for n in range(4)]
        spares = host._spare
        assert [r.output for r in results] == [1, 2, 3, 4]
        # the first two runs start their own; the end of the second starts one for the third,
        # and so on
        assert spares.used == 2
        waiting = ready_spare(spares)
        assert not gone(waiting.pid)
    wait_for(lambda: gone(waiting.pid), "the spare to be killed when the host closed")
    assert host.run(program, {"n": 9}).output == 10  # a closed host still runs, as before


def test_a_host_that_runs_once_starts_no_spare(program, tmp_path):
    host = flowrt.Host(runs=str(tmp_path / "runs"), durability="none")
    assert host.run(program, {"n": 1}).output == 2
    assert host._spare._spares == [] and host._spare.used == 0


def test_a_spare_is_not_counted_among_the_children_a_host_drives():
    spares = SpareChild()
    first = spares.take()
    try:
        second = spares.take()
        spares.refill()  # as a third run's end would: a spare beside the two driven children
        try:
            ready_spare(spares)
            assert sandbox_launch.others_live()  # two driven children
        finally:
            second.kill()
        assert not sandbox_launch.others_live()  # one driven child, and the spare beside it
    finally:
        first.kill()
        spares.close()


@contextlib.contextmanager
def spare_after_two_runs():
    """(spares, the children taken, the spare waiting): as after two runs' ends, all of them
    killed after."""
    spares = SpareChild()
    taken = [spares.take(), spares.take()]
    spares.refill()
    try:
        yield spares, taken, ready_spare(spares)
    finally:
        for child in taken:
            child.kill()
        spares.close()


def test_a_spare_made_under_other_sandbox_settings_is_killed_not_used(monkeypatch):
    with spare_after_two_runs() as (spares, taken, stale):
        monkeypatch.setenv("FLOW_SANDBOX_WALL_SECONDS", "7")
        taken.append(spares.take())
        assert taken[-1] is not stale and taken[-1].wall_seconds == 7 and spares.used == 0
        wait_for(lambda: gone(stale.pid), "the stale spare to be killed")


def test_a_spare_that_died_while_it_waited_is_replaced():
    with spare_after_two_runs() as (spares, taken, dead):
        os.kill(dead.pid, signal.SIGKILL)
        wait_for(lambda: dead._exited(), "the spare to die")
        taken.append(spares.take())
        assert taken[-1] is not dead and spares.used == 0
        assert not taken[-1]._exited()


def test_a_worker_keeps_spares_for_the_runs_it_drives(program, tmp_path):
    from flowrt.worker import Worker

    runs = str(tmp_path / "runs")
    ids = []
    for n in range(5):
        with flowrt.Host(runs=runs) as host:
            ids.append(host.queue(program, {"n": n}))
    worker = Worker(runs, concurrency=1)
    assert worker.serve(once=True) == 0
    assert worker.children.used >= 1 and worker.children._spares == []  # closed as it stopped
    host = flowrt.Host(runs=runs)
    ends = [host.history(run_id, kinds=["End"]).facts for run_id in ids]
    assert [[end.outcome for end in facts] for facts in ends] == [[{"Completed": n + 1}] for n in range(5)]


def test_a_host_dropped_without_close_kills_its_spare_when_collected(program, tmp_path):
    import gc

    host = flowrt.Host(runs=str(tmp_path / "runs"), durability="none")
    for n in range(2):
        host.run(program, {"n": n})
    waiting = ready_spare(host._spare)
    del host
    gc.collect()
    wait_for(lambda: gone(waiting.pid), "the spare of a collected host to be killed")


def test_a_burst_of_runs_ending_at_once_wastes_no_spare(monkeypatch):
    import threading

    from flowrt.sandbox_process import Child

    started = []
    real = Child.start_soon.__func__

    def counted(cls, *args, **kwargs):
        started.append(kwargs.get("spare"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(Child, "start_soon", classmethod(counted))
    spares = SpareChild(keep=2)
    spares.take().kill()  # past the first run: each run's end refills
    taken, lock = [], threading.Lock()

    def take() -> None:
        child = spares.take()
        spares.refill()  # the run ended at once
        with lock:
            taken.append(child)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert len(taken) == 8
        wait_for(lambda: len(spares._spares) + spares._starting >= 1, "the spares to start")
        wait_for(lambda: spares._starting == 0, "the spares being started to be in place")
        # every spare started was used or waits in one of the places: none started to be thrown away
        assert len(started) == spares.used + len(spares._spares) and len(spares._spares) <= 2
    finally:
        for child in taken:
            child.kill()
        spares.close()


def test_a_spare_starts_after_a_run_never_beside_it(monkeypatch):
    """Taking a child starts nothing in the background: the runs going on keep the CPUs. A
    spare starts when a run ends (`refill`), from the second on."""
    from flowrt.sandbox_process import Child

    started = []
    real = Child.start_soon.__func__
    monkeypatch.setattr(Child, "start_soon", classmethod(lambda cls, *a, **k: started.append(1) or real(cls, *a, **k)))
    spares = SpareChild()
    try:
        for _ in range(3):
            spares.take().kill()
        assert started == []
        spares.refill()
        assert started == [1]
    finally:
        spares.close()


def test_a_child_to_come_is_the_spare_once_the_run_speaks_to_it():
    with spare_after_two_runs() as (spares, taken, waiting):
        coming = spares.take_soon()
        assert spares._spares == []  # taken at once, waited for only now:
        child = coming.started()
        taken.append(child)
        assert child is waiting and coming.started() is child and spares.used == 1


def test_a_run_refused_before_its_child_was_used_kills_the_spare(program, tmp_path):
    with flowrt.Host(runs=str(tmp_path / "runs"), durability="none") as host:
        for n in range(2):
            host.run(program, {"n": n})
        waiting = ready_spare(host._spare)
        with pytest.raises(flowrt.Refused):
            host.run(program, {"n": "not a number"})
        wait_for(lambda: gone(waiting.pid), "the refused run's spare to be killed")
        assert host.run(program, {"n": 2}).output == 3


def test_a_child_to_come_with_no_spare_starts_one_when_needed():
    spares = SpareChild()
    coming = spares.take_soon()
    child = coming.started()
    try:
        assert not child._exited() and spares.used == 0
    finally:
        child.kill()
    coming.kill()  # once handed over, killing it again is harmless
    assert gone(child.pid)


def test_an_ended_runs_child_is_killed_at_once_and_reaped_soon_after(program, tmp_path):
    from flowrt import child_reaper
    from flowrt.sandbox_process import Child

    child = Child.start()
    pid, workdir = child.pid, child.workdir
    assert os.path.isdir(workdir)
    child.let_go()
    assert not sandbox_launch.others_live() and child not in sandbox_launch._LIVE
    assert child_reaper.wait_for_reaps(10)
    assert gone(pid) and not os.path.exists(workdir) and child.returncode == -signal.SIGKILL
    # a host's run lets its child go the same way (or keeps it for the next run of the program
    # until the host closes: flowrt/kept_child.py): nothing of it is left once the reaps are done
    with flowrt.Host(runs=str(tmp_path / "runs"), durability="none") as host:
        before = set(os.listdir(os.path.dirname(workdir)))
        assert host.run(program, {"n": 1}).output == 2
    assert child_reaper.wait_for_reaps(10)
    left = {d for d in set(os.listdir(os.path.dirname(workdir))) - before if d.startswith("flow-sandbox-")}
    assert left == set()


def test_a_process_forked_from_a_host_has_none_of_its_reaps():
    from flowrt import child_reaper
    from flowrt.sandbox_process import Child

    child = Child.start()
    child.let_go()
    pid = os.fork()
    if pid == 0:  # the parent's pending reap is not this process's to wait for
        os._exit(0 if child_reaper._thread is None and child_reaper._count == 0 and child_reaper.wait_for_reaps(0) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_reaper.wait_for_reaps(10) and gone(child.pid)
