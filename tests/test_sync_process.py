"""The run hub's sync process (flowrt/sync_process.py): a hub driving several runs with fsync has
their histories synced by a process of its own, which is handed each history's descriptor. A
sync is reported done only once that process has synced it; an error comes back as the errno the
sync would have raised here; and if the process goes away, its syncs, and every later one, are
made by the hub's helper threads, so no run fails or hangs for it."""

from __future__ import annotations

import errno
import os
import signal
import threading

import pytest

import flowrt
from flowrt import run_hub
from flowrt import sync_process
from flowrt.sync_process import SyncProcess
from tests.test_run_hub import COUNT
from tests.test_spare_child import gone, wait_for


def answer_of(syncer: SyncProcess, fd: int, timeout: float = 30.0):
    """Send one sync and read answers until it has its own (the socket polled, as the hub does)."""
    got: list = []
    assert syncer.send(fd, got.append)
    return answer_of_sent(syncer, got, timeout)


def answer_of_sent(syncer: SyncProcess, got: list, timeout: float = 30.0):
    import select

    poller = select.poll()
    poller.register(syncer.fileno, select.POLLIN)
    while not got:
        assert poller.poll(int(timeout * 1000)), "no answer"
        syncer.take_answers()
    return got[0]


def test_the_process_syncs_a_file_and_answers_an_error_with_its_errno(tmp_path):
    syncer = SyncProcess()
    try:
        with open(tmp_path / "history.jsonl", "wb") as handle:
            handle.write(b'{"n":1}\n')
            handle.flush()
            assert answer_of(syncer, handle.fileno()) == 0
        wait_for(lambda: len(workers_of(syncer)) == sync_process.WORKERS, "every worker forked")
        reading, writing = os.pipe()
        try:
            assert answer_of(syncer, reading) == errno.EINVAL  # a pipe cannot be synced
        finally:
            os.close(reading)
            os.close(writing)
        assert syncer.alive and not syncer.waiting
        workers = workers_of(syncer)
    finally:
        syncer.close()
    assert syncer.process.returncode is not None  # closed: the processes have ended
    wait_for(lambda: all(gone(pid) for pid in workers), "the workers to end")


def test_syncs_out_when_the_process_dies_are_answered_none_and_later_ones_refused(tmp_path):
    syncer = SyncProcess()
    with open(tmp_path / "history.jsonl", "wb") as handle:
        assert answer_of(syncer, handle.fileno()) == 0
        os.kill(syncer.process.pid, signal.SIGKILL)
        syncer.process.wait(timeout=30)
        got: list = []
        if syncer.send(handle.fileno(), got.append):  # (the workers may not have died yet)
            assert answer_of_sent(syncer, got) is None  # their end of the socket closes
        assert not syncer.alive and not syncer.send(handle.fileno(), got.append)


def runs_with_fsync(tmp_path, count: int = 4, n: int = 30) -> tuple[flowrt.Host, list]:
    program = tmp_path / "count.flow"
    program.write_text(COUNT)
    host = flowrt.Host({"count.echo": lambda n: n}, runs=str(tmp_path / "runs"), durability="fsync")
    handles = [host.start(str(program), {"n": n}, detach=True) for _ in range(count)]
    return host, handles


def completed_and_matched(host: flowrt.Host, handles: list, output: int) -> None:
    """Each run gave `output` and replays Matched; the host closed either way."""
    try:
        assert [h.wait(timeout=120).output for h in handles] == [output] * len(handles)
        assert all(host.replay(h.run_id).verdict == "Matched" for h in handles)
    finally:
        host.close()


def test_a_hubs_runs_with_fsync_are_synced_by_its_process(tmp_path, monkeypatch):
    answered = []
    real = SyncProcess.take_answers

    def counting(self):
        before = len(self.waiting)
        real(self)
        answered.append(before - len(self.waiting))

    monkeypatch.setattr(SyncProcess, "take_answers", counting)
    completed_and_matched(*runs_with_fsync(tmp_path), 465)
    assert sum(answered) > 30  # most of the 4 x 30 calls' syncs (the last run alone syncs here)


def workers_of(syncer: SyncProcess) -> list[int]:
    pid = syncer.process.pid
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(child) for child in handle.read().split()]


@pytest.mark.parametrize("which", ["first", "worker"])
def test_runs_go_on_when_the_sync_process_is_killed_under_them(tmp_path, monkeypatch, which):
    killed = threading.Event()
    real = SyncProcess.send

    def send_then_kill(self, fd, answered):
        sent = real(self, fd, answered)
        if sent and len(self.waiting) >= 2 and not killed.is_set():
            killed.set()
            os.kill(self.process.pid if which == "first" else workers_of(self)[0], signal.SIGKILL)
        return sent

    monkeypatch.setattr(SyncProcess, "send", send_then_kill)
    completed_and_matched(*runs_with_fsync(tmp_path, n=40), 820)
    assert killed.is_set()


def test_a_sync_the_process_failed_is_a_storage_failure_of_that_run(tmp_path, monkeypatch):
    failed: list = []
    sent: list = []
    real = SyncProcess.send

    def send_failing_once(self, fd, answered):
        sent.append(fd)
        if failed or len(sent) < 12:  # (the twelfth: a Call's, in the middle of a run)
            return real(self, fd, answered)

        def as_eio(code):
            answered(errno.EIO if code == 0 else code)

        failed.append(fd)
        return real(self, fd, as_eio)

    monkeypatch.setattr(SyncProcess, "send", send_failing_once)
    host, handles = runs_with_fsync(tmp_path)
    try:
        # (a run whose start failed is reported at once, as its result)
        results = [h if isinstance(h, flowrt.RunResult) else h.wait(timeout=120) for h in handles]
    finally:
        host.close()
    statuses = sorted(r.status for r in results)
    assert failed and statuses.count("completed") == 3 and statuses.count("storage-failure") == 1, statuses
    [broken] = [r for r in results if r.status != "completed"]
    assert broken.exit_code == 5


def test_without_the_process_the_helper_threads_sync(tmp_path, monkeypatch):
    monkeypatch.setattr(run_hub, "SYNC_PROCESS", False)
    monkeypatch.setattr(SyncProcess, "__init__", lambda self: pytest.fail("no process wanted"))
    host, handles = runs_with_fsync(tmp_path, count=3)
    try:
        assert [h.wait(timeout=120).output for h in handles] == [465] * 3
    finally:
        host.close()
