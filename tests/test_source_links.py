"""Runs of one program in one runs directory share their sources' files (flowrt/store/blobs.py,
`SourceCopies`): the second run's `sources/<hex>` is a hard link to the first's, so a run with
fsync writes and syncs no source data of its own; a copy that changed, one written without
fsync (for a run with it), or a link the file system refuses is never used, and the run then
writes its own copy. And a one-step run with fsync makes the eight syncs counted below, no more."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

import flowrt
from flowrt.store import open_store
from flowrt.store import blobs

START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {}, "modules": []}
SOURCE = "pub flow main() -> Int = 1\n"
HEX = hashlib.sha256(SOURCE.encode()).hexdigest()


@pytest.fixture(autouse=True)
def fresh_copies(monkeypatch):
    monkeypatch.setattr(blobs, "SOURCE_COPIES", blobs.SourceCopies())


def created(root, run_id, durability="fsync"):
    store = open_store(str(root)).create(run_id, START, sources=[SOURCE], durability=durability)
    store.close()
    return os.stat(root / run_id / "sources" / HEX)


def source_of(root, run_id):
    return open_store(str(root)).open(run_id, for_append=False).source("sha256:" + HEX)


def test_the_second_run_links_the_first_runs_source(tmp_path):
    first = created(tmp_path, "run-1")
    second = created(tmp_path, "run-2")
    third = created(tmp_path, "run-3", durability="none")  # a run without fsync may use it too
    assert first.st_ino == second.st_ino == third.st_ino and third.st_nlink == 3
    assert [source_of(tmp_path, r) for r in ("run-1", "run-2", "run-3")] == [SOURCE] * 3


def test_runs_directories_do_not_share(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert created(tmp_path / "a", "run-1").st_ino != created(tmp_path / "b", "run-1").st_ino


def test_a_copy_that_changed_is_not_linked(tmp_path):
    first = created(tmp_path, "run-1")
    path = tmp_path / "run-1" / "sources" / HEX
    path.write_bytes(b"pub flow main() -> Int = 2\n")  # in place: the inode the first run holds
    second = created(tmp_path, "run-2")
    assert second.st_ino != first.st_ino and source_of(tmp_path, "run-2") == SOURCE
    # ... and the new copy is the one linked next
    assert created(tmp_path, "run-3").st_ino == second.st_ino


def test_a_run_with_fsync_never_links_a_copy_written_without(tmp_path):
    unsynced = created(tmp_path, "run-1", durability="none")
    synced = created(tmp_path, "run-2")
    assert synced.st_ino != unsynced.st_ino
    assert created(tmp_path, "run-3").st_ino == synced.st_ino  # the durable copy from then on


def test_a_deleted_run_or_a_refused_link_falls_back_to_a_copy(tmp_path, monkeypatch):
    created(tmp_path, "run-1")
    for name in os.listdir(tmp_path / "run-1" / "sources"):
        os.unlink(tmp_path / "run-1" / "sources" / name)
    second = created(tmp_path, "run-2")
    assert second.st_nlink == 1 and source_of(tmp_path, "run-2") == SOURCE

    def refused(*_args, **_kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refused)
    third = created(tmp_path, "run-3")
    assert third.st_ino != second.st_ino and third.st_nlink == 1 and source_of(tmp_path, "run-3") == SOURCE


def test_a_one_step_run_with_fsync_makes_eight_syncs(tmp_path, monkeypatch):
    """Counted in the host: the run directory's three (sources/, the run's, the runs
    directory's), Start, the start's host records, the Call, the Reply with the Checkpoint and
    End (one write), and the close's host records (times, the sandbox report, the durable mark). The first run of
    a program in the process also syncs its sources' data."""
    program = tmp_path / "steps.flow"
    program.write_text("@tool pub flow echo(n: Int) -> Int\n\n"
                       "pub flow main(n: Int) -> Int !tool = loop(n, 0)\n\n"
                       "flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }\n")
    host = flowrt.Host({"steps.echo": lambda n: n}, runs_dir=str(tmp_path / "runs"), durability="fsync")
    first = host.run(str(program), {"n": 1})
    assert first.exit_code == 0
    syncs = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real, name=name: (syncs.append(name), real(fd))[1])
    second = host.run(str(program), {"n": 1})
    monkeypatch.undo()
    assert second.exit_code == 0
    assert len(syncs) == 8, syncs
    runs = open_store(str(tmp_path / "runs"))
    kinds = [r["kind"] for r in runs.open(second.run_id, for_append=False).host_records()]
    assert kinds.count("sandbox") == 1 and kinds.index("sandbox") < kinds.index("durable")
    assert os.stat(tmp_path / "runs" / second.run_id / "history.jsonl").st_size == \
        len((tmp_path / "runs" / second.run_id / "history.jsonl").read_bytes().rstrip(b"\0"))
