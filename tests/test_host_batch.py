"""Host records written together (`RunLog.host_records_many`, and a synced record after unsynced
`times`): one write and one fsync, each record after the write's first byte saying where the
write began (`batch`), so that a machine crash that tears the write anywhere reads as a torn
tail, while damage to a record synced on its own before it is still damage (docs/trace.md
section 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import RunStore, StorageError
from flowrt.store.host_records import TIMES_WINDOW, _parse_host

ROOT = Path(__file__).resolve().parents[1]
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {"n": 1}, "modules": []}
RECORDS = [{"kind": "origin", "root": "/a/main.flow"},
           {"kind": "binding", "tool": "m.t", "implementation": "python tools/t.py"},
           {"kind": "checkpoints", "policy": "every"}]


def host_bytes(root: str, run: str = "r") -> bytes:
    with open(os.path.join(root, run, "host.jsonl"), "rb") as handle:
        return handle.read()


def count_fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_records_written_together_take_one_write_and_one_fsync(tmp_path, monkeypatch):
    store = RunStore.create(str(tmp_path), "r", START)
    host_fd = store._host_fd
    assert host_fd is not None  # made with the run, so its name is covered by the run's directory sync
    calls = count_fsyncs(monkeypatch)
    written = store.host_records_many(RECORDS)
    assert written == RECORDS
    assert calls == [host_fd]
    store.close()
    read = RunStore.open(str(tmp_path), "r", for_append=False)
    assert [r for r in read.host_records() if r["kind"] != "durable"] == RECORDS  # `batch` is not shown
    # the three records, and the durable mark that close wrote in one write with the last times
    assert host_bytes(str(tmp_path)).count(b'"batch":') == 4


def test_a_record_alone_with_nothing_unsynced_is_written_as_before(tmp_path):
    store = RunStore.create(str(tmp_path), "r", START)
    store.host_record(RECORDS[0])
    store.close()
    first = host_bytes(str(tmp_path)).split(b"\n")[0]
    assert b'"batch"' not in first


def test_a_synced_record_after_unsynced_times_is_one_fsync_with_them(tmp_path, monkeypatch):
    store = RunStore.create(str(tmp_path), "r", START)
    store.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    store.sync()  # records the times, unsynced
    assert store._host_unsynced > 0
    calls = count_fsyncs(monkeypatch)
    store.host_record({"kind": "paused", "head": store.head, "pending": ["c1"]})
    assert calls == [store._host_fd] and store._host_unsynced == 0
    store.close()


@pytest.mark.parametrize("records, expected", [([], []), (RECORDS[:1], RECORDS[:1])])
def test_few_records(tmp_path, records, expected):
    store = RunStore.create(str(tmp_path), "r", START)
    assert store.host_records_many(records) == expected
    store.close()


@pytest.mark.parametrize("record", [{"kind": "x", "batch": 1}, {"kind": "x", "prev": None},
                                    {"kind": "times", "from": 1, "at": [1]}, {"nokind": 1}, "text"])
def test_records_a_host_may_not_write_are_refused_whole(tmp_path, record):
    store = RunStore.create(str(tmp_path), "r", START)
    before = host_bytes(str(tmp_path))
    with pytest.raises(ValueError):
        store.host_records_many([RECORDS[0], record])
    assert host_bytes(str(tmp_path)) == before  # nothing of the batch was written
    store.close()


def written_batch(tmp_path, count: int) -> tuple[bytes, int]:
    """host.jsonl after a record synced alone and then `count` records written together, and the
    offset at which the batch begins."""
    store = RunStore.create(str(tmp_path), "r", START)
    store.host_record({"kind": "alone", "n": 0})
    start = len(host_bytes(str(tmp_path)))
    store.host_records_many([{"kind": "together", "n": i, "pad": "x" * (i * 37 % 300)} for i in range(count)])
    store._host_fd and os.close(store._host_fd)  # (as a crash would: no durable mark, no times)
    store._host_fd = None
    store._fd and os.close(store._fd)
    store._fd = None
    return host_bytes(str(tmp_path)), start


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(2, 12), data=st.data())
def test_a_torn_batch_reads_as_a_torn_tail_wherever_it_tore(tmp_path_factory, count, data):
    raw, start = written_batch(tmp_path_factory.mktemp("b"), count)
    # Any run of pages the crash did not write: zeros from somewhere in the batch, for a while.
    # (drawn as shares of the batch, so that the draws do not depend on the bytes' length)
    share_from, share_length = data.draw(st.floats(0, 1, exclude_max=True)), data.draw(st.floats(0, 1))
    lost_from = start + int(share_from * (len(raw) - start))
    lost_to = lost_from + 1 + int(share_length * (len(raw) - lost_from - 1))
    torn = raw[:lost_from] + bytes(lost_to - lost_from) + raw[lost_to:]
    host = _parse_host(torn)
    kinds = [(r["kind"], r.get("n")) for r in host.records]
    assert kinds[0] == ("alone", 0)  # the record synced before the batch is kept
    assert kinds[1:] == [("together", i) for i in range(len(kinds) - 1)]  # a prefix of the batch
    assert host.torn is not None and host.torn.offset >= start


def test_damage_before_a_record_synced_alone_is_still_damage(tmp_path):
    store = RunStore.create(str(tmp_path), "r", START)
    store.host_record({"kind": "first", "n": 1})
    first_end = len(host_bytes(str(tmp_path)))
    store.host_record({"kind": "second", "n": 2})
    store.close()
    raw = host_bytes(str(tmp_path))
    damaged = raw[:first_end - 10] + bytes(5) + raw[first_end - 5:]
    with pytest.raises(StorageError):
        _parse_host(damaged)


def test_damage_before_a_batch_is_damage_even_within_the_window(tmp_path):
    raw, start = written_batch(tmp_path, 3)
    assert len(raw) < TIMES_WINDOW
    damaged = raw[:start - 8] + bytes(4) + raw[start - 4:]  # inside the record synced alone
    with pytest.raises(StorageError):
        _parse_host(damaged)


def test_a_batch_larger_than_the_tear_window_is_split_into_synced_writes(tmp_path, monkeypatch):
    store = RunStore.create(str(tmp_path), "r", START)
    big = [{"kind": "binding", "tool": f"m.t{i}", "implementation": "y" * 1000} for i in range(150)]
    calls = count_fsyncs(monkeypatch)
    store.host_records_many(big)
    assert 2 <= len(calls) <= 4  # ~150 KB in writes of at most TIMES_WINDOW each
    store.close()
    assert [r for r in RunStore.open(str(tmp_path), "r", for_append=False).host_records()
            if r["kind"] == "binding"] == big


def test_an_appender_cuts_a_torn_batch_and_goes_on(tmp_path):
    raw, start = written_batch(tmp_path, 4)
    path = os.path.join(str(tmp_path), "r", "host.jsonl")
    with open(path, "wb") as handle:
        handle.write(raw[:start + 20] + bytes(len(raw) - start - 20))
    again = RunStore.open(str(tmp_path), "r", for_append=True)
    again.host_record({"kind": "after", "n": 9})
    again.close()
    kinds = [r["kind"] for r in RunStore.open(str(tmp_path), "r", for_append=False).host_records()]
    assert [k for k in kinds if k != "durable"] == ["alone", "truncated", "after"]


def test_flow_run_writes_the_start_records_in_one_sync(tmp_path):
    (tmp_path / "hello.flow").write_text('pub flow main() -> Text = "hello, world"\n')
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "hello.flow", "--runs", "runs"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (run,) = os.listdir(tmp_path / "runs")
    lines = host_bytes(str(tmp_path / "runs"), run).split(b"\n")
    assert lines[0].startswith(b'{"batch":0,') and b'"kind":"origin"' in lines[0]
    assert b'"kind":"checkpoints"' in lines[1] and b'"batch":' in lines[1]
    records = RunStore.open(str(tmp_path / "runs"), run, for_append=False).host_records()
    assert [r["kind"] for r in records][:2] == ["origin", "checkpoints"]


def test_an_appender_syncs_the_times_a_closed_run_left_before_its_first_record(tmp_path, monkeypatch):
    store = RunStore.create(str(tmp_path), "r", START)
    store.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    store.close()
    # close writes its last times before the durable mark, in one write and one fsync with it
    last = host_bytes(str(tmp_path)).rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert b'"kind":"durable"' in last and b'"batch":' in last
    again = RunStore.open(str(tmp_path), "r", for_append=True)
    again.append("Reply", {"call": "c1", "outcome": {"Ok": 1}})
    again._record_times()  # times left unsynced at the end, as a host that died would leave them
    again._host_fd, fd = None, again._host_fd  # the appender dies here: nothing more is written
    import os
    os.close(fd)
    again._fd, fd2 = None, again._fd
    os.close(fd2)
    third = RunStore.open(str(tmp_path), "r", for_append=True)
    before = len(host_bytes(str(tmp_path)))
    calls = count_fsyncs(monkeypatch)
    third.host_record({"kind": "paused", "head": third.head, "pending": []})
    # The times the dead appender left were synced when the run was opened again (its durable
    # mark); the record is written alone: its write never claims the bytes before it.
    assert calls == [third._host_fd]
    assert b'"batch"' not in host_bytes(str(tmp_path))[before:]
    third.close()


def test_zeros_in_a_record_synced_alone_are_damage_even_with_only_times_after_it(tmp_path):
    store = RunStore.create(str(tmp_path), "r", START)
    store.host_record({"kind": "binding", "tool": "m.t", "implementation": "pending"})  # synced alone
    store.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    store.sync()  # its times recorded after the binding, unsynced: a live run's tail
    path = tmp_path / "r" / "host.jsonl"
    data = path.read_bytes()
    lines = data.split(b"\n")
    binding = next(i for i, line in enumerate(lines) if b'"kind":"binding"' in line)
    assert all(b'"kind":"times"' in line for line in lines[binding + 1:] if line)
    start = sum(len(line) + 1 for line in lines[:binding])
    # (zeros in its first bytes, `{"`, cannot be told from a lost write of a `times` record)
    for offset in range(start + 3, start + len(lines[binding])):
        damaged = bytearray(data)
        damaged[offset] = 0
        path.write_bytes(bytes(damaged))
        with pytest.raises(StorageError):
            RunStore.open(str(tmp_path), "r", for_append=False)
    path.write_bytes(data)
    store.close()
