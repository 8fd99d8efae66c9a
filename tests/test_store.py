"""The run directory (flowrt/store/directory.py) in bytes: durable appends, verification, torn
tails, failed writes, holes, and stored-run discovery. The format itself is docs/trace.md; what any
store must do, through the interface alone, is tests/test_store_contract.py."""

from __future__ import annotations

import errno
import hashlib
import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import discovery as store_discovery
from flowrt.store.format import rfc3339_ms
from flowrt.store import durable as store_durable
from flowrt.store import errors as store_errors
from flowrt.store import (
    DATA_VERSION,
    Hole,
    RedactRefused,
    RunBusy,
    RunExists,
    RunNotFound,
    RunStore,
    StorageError,
    canonical_bytes,
    fact_hash,
    loads_canonical,
    scan_runs,
)

START = {
    "program": "sha256:" + "ab" * 32,
    "std": "std@v1",
    "entry": {"module": "support", "function": "main"},
    "input": {"ticket": "Login fails on Safari"},
    "modules": [],
}
BIG = "x" * 2000  # canonical JSON over 1 KiB


def history_path(root, run="run-1"):
    return os.path.join(root, run, "history.jsonl")


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


def written(path):
    """What a reader takes from a history: a live store keeps NUL bytes reserved past its facts."""
    return read(path).rstrip(b"\0")


def write(path, data):
    with open(path, "wb") as handle:
        handle.write(data)


def make_run(root, run="run-1", *, end=True, durability="none", **kw):
    """A small history: Start, Call, Reply (by reference), Choice, Stop, Checkpoint, End."""
    s = RunStore.create(root, run, START, durability=durability, **kw)
    s.append("Call", {"call": "root#1", "tool": "planner.next", "fingerprint": "f1",
                      "arguments": {"ticket": "t", "notes": []}})
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": {"Search": BIG}}})
    s.append("Choice", {"task": "root", "picked": "root/2"})
    s.append("Stop", {"task": "root/1", "by": "root", "found": "Running", "closed": ["root/1#1"]})
    s.append("Checkpoint", {"function": {"module": "support", "name": "work"}, "types": [],
                            "arguments": {"round": 2}})
    if end:
        s.append("End", {"outcome": {"Completed": {"Resolved": "done"}}})
    return s


def raw_fact(n, kind, prev, **fields):
    fact = dict(fields, n=n, kind=kind, prev=prev)
    fact["hash"] = fact_hash(fact)
    return fact


def write_facts(root, run, facts, tail=b""):
    os.makedirs(os.path.join(root, run, "values"), exist_ok=True)
    write(history_path(root, run), b"".join(canonical_bytes(f) + b"\n" for f in facts) + tail)


# -- round trip ---------------------------------------------------------------------------------


def test_create_append_reopen_round_trip(tmp_path):
    root = str(tmp_path / "runs")
    s = make_run(root, durability="fsync")
    facts = s.facts()
    s.close()
    assert [f["n"] for f in facts] == list(range(1, 8))
    assert [f["kind"] for f in facts] == ["Start", "Call", "Reply", "Choice", "Stop", "Checkpoint", "End"]
    assert facts[0]["prev"] is None and facts[0]["data"] == DATA_VERSION and facts[0]["run"] == "run-1"
    for before, after in zip(facts, facts[1:]):
        assert after["prev"] == before["hash"]
    for f in facts:
        rest = {k: v for k, v in f.items() if k != "hash"}
        assert f["hash"] == "sha256:" + hashlib.sha256(canonical_bytes(rest)).hexdigest()
    # One canonical line per fact.
    lines = read(history_path(root)).split(b"\n")
    assert lines[-1] == b"" and len(lines) == 8
    for line, f in zip(lines, facts):
        assert line == orjson.dumps(f, option=orjson.OPT_SORT_KEYS)
    again = RunStore.open(root, "run-1", for_append=False)
    assert again.facts() == facts
    assert again.torn_tail is None and again.ended and again.head == facts[-1]["hash"]
    assert again.value(2, "arguments") == {"ticket": "t", "notes": []}
    assert facts[-1]["ending"] == "completed"


def test_field_names_around_hash_sort_canonically(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "k", START)
    odd = {"": 1, "Hash": 2, "ha": 3, "hash_": 4, "hasg": 5, "é": 6, "\U0001F600": 7, "~": 8}
    fact = s.append("Choice", dict(odd, task="root", picked="root/1"))
    s.close()
    line = read(history_path(root, "k")).split(b"\n")[1]
    assert line == orjson.dumps(fact, option=orjson.OPT_SORT_KEYS)
    assert RunStore.open(root, "k", for_append=False).fact(2) == fact


def test_append_many_syncs_once(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "g", START)
    syncs = []
    real = store_durable._sync_appended
    try:
        store_durable._sync_appended = lambda fd: (syncs.append(fd), real(fd))
        out = s.append_many([("Call", {"call": f"root#{i}", "tool": "t", "arguments": {"i": i}})
                             for i in range(1, 6)])
    finally:
        store_durable._sync_appended = real
    assert len(syncs) == 1
    assert [f["n"] for f in out] == [2, 3, 4, 5, 6]
    assert out[0]["prev"] == s.facts()[0]["hash"]
    s.close()
    assert RunStore.open(root, "g", for_append=False).facts()[1:] == out


def test_refusals(tmp_path):
    root = str(tmp_path)
    s = make_run(root, end=False)
    with pytest.raises(RunExists):
        RunStore.create(root, "run-1", START)
    with pytest.raises(RunNotFound):
        RunStore.open(root, "nope", for_append=False)
    with pytest.raises(RunBusy):
        RunStore.open(root, "run-1", for_append=True)
    with pytest.raises(ValueError):
        RunStore.create(root, "../evil", START)
    with pytest.raises(ValueError):
        RunStore.create(root, "x", dict(START, data="flow-data/9"))
    with pytest.raises(ValueError):
        s.append("Start", {})
    with pytest.raises(ValueError):
        s.append("Bogus", {})
    with pytest.raises(ValueError):
        s.append("Call", {"n": 3})
    with pytest.raises(ValueError):
        s.append("Call", {"arguments_ref": "sha256:" + "0" * 64})
    before = read(history_path(root))
    with pytest.raises(TypeError):
        s.append("Call", {"arguments": {"x": object()}})
    assert read(history_path(root)) == before
    s.close()
    ro = RunStore.open(root, "run-1", for_append=False)
    with pytest.raises(ValueError):
        ro.append("Call", {})
    with pytest.raises(ValueError):
        ro.host_record({"kind": "x"})
    # A run directory without a Start is not a run to open.
    os.makedirs(os.path.join(root, "empty"))
    write(history_path(root, "empty"), b"")
    with pytest.raises(StorageError):
        RunStore.open(root, "empty", for_append=False)


# -- values by reference --------------------------------------------------------------------------


def test_large_values_go_by_reference(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "v", dict(START, input={"doc": BIG}))
    start = s.facts()[0]
    assert "input" not in start and start["input_ref"].startswith("sha256:")
    small = s.append("Call", {"call": "root#1", "tool": "t", "arguments": {"a": "y" * 10}})
    assert "arguments" in small
    big = s.append("Reply", {"call": "root#1", "outcome": {"Ok": BIG}})
    same = s.append("Reply", {"call": "root#2", "outcome": {"Ok": BIG}})
    assert big["outcome_ref"] == same["outcome_ref"]
    hex_ = big["outcome_ref"][7:]
    blob = read(os.path.join(root, "v", "values", hex_))
    assert blob == canonical_bytes({"Ok": BIG}) and hashlib.sha256(blob).hexdigest() == hex_
    assert len(os.listdir(os.path.join(root, "v", "values"))) == 2
    s.close()
    again = RunStore.open(root, "v", for_append=False)
    assert again.value(1, "input") == {"doc": BIG}
    assert again.value(again.facts()[2], "outcome") == {"Ok": BIG}
    assert again.value(2, "arguments") == {"a": "y" * 10}
    with pytest.raises(KeyError):
        again.value(2, "outcome")


def test_damaged_value_file_is_a_storage_error(tmp_path):
    root = str(tmp_path)
    make_run(root).close()
    s = RunStore.open(root, "run-1", for_append=False)
    hex_ = s.fact(3)["outcome_ref"][7:]
    path = os.path.join(root, "run-1", "values", hex_)
    blob = bytearray(read(path))
    blob[len(blob) // 2] ^= 1
    write(path, bytes(blob))
    with pytest.raises(StorageError) as caught:
        s.value(3, "outcome")
    assert caught.value.fact_n == 3
    os.unlink(path)
    with pytest.raises(StorageError):  # missing and not a recorded hole
        RunStore.open(root, "run-1", for_append=False)


# -- integrity ----------------------------------------------------------------------------------


def test_every_flipped_byte_is_detected(tmp_path):
    root = str(tmp_path)
    make_run(root).close()
    path = history_path(root)
    original = read(path)
    good = RunStore.open(root, "run-1", for_append=False).facts()
    for position in range(len(original)):
        damaged = bytearray(original)
        damaged[position] ^= 0x01
        write(path, bytes(damaged))
        try:
            s = RunStore.open(root, "run-1", for_append=False)
        except StorageError as problem:
            assert problem.fact_n is not None
            continue
        # Never silently accepted: only damage to the final newline reads as a torn tail, and
        # then the facts before it are exactly the originals.
        assert position == len(original) - 1, position
        assert s.torn_tail is not None and s.facts() == good[:-1]
    write(path, original)
    assert RunStore.open(root, "run-1", for_append=False).facts() == good


def test_crafted_damage_cases(tmp_path):
    root = str(tmp_path)
    start = raw_fact(1, "Start", None, data=DATA_VERSION, run="r", program="p")
    call = raw_fact(2, "Call", start["hash"], call="root#1", arguments={})
    end = raw_fact(3, "End", call["hash"], outcome={"Completed": 1})
    write_facts(root, "r", [start, call, end])
    assert len(RunStore.open(root, "r", for_append=False)) == 3

    def damaged(data, n, word):
        os.makedirs(os.path.join(root, "r"), exist_ok=True)
        write(history_path(root, "r"), data)
        with pytest.raises(StorageError) as caught:
            RunStore.open(root, "r", for_append=True)
        assert caught.value.fact_n == n, caught.value
        assert word in str(caught.value)
        assert read(history_path(root, "r")) == data  # nothing repaired or appended

    line = lambda f: canonical_bytes(f) + b"\n"  # noqa: E731
    # A fact removed: the chain breaks.
    damaged(line(start) + line(end), 2, "n")
    # Reordered.
    damaged(line(start) + line(end) + line(call), 2, "")
    # A content change with a recomputed hash still breaks the next link.
    forged = raw_fact(2, "Call", start["hash"], call="root#9", arguments={})
    damaged(line(start) + line(forged) + line(end), 3, "chain")
    # Non-canonical layout of a valid fact.
    spaced = orjson.dumps(call, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).replace(b"\n", b"")
    damaged(line(start) + spaced + b"\n" + line(end), 2, "canonical")
    # Unsorted keys.
    unsorted = orjson.dumps(dict(reversed(list(call.items())))) + b"\n"
    damaged(line(start) + unsorted + line(end), 2, "canonical")
    # A blank line in the middle.
    damaged(line(start) + b"\n" + line(call) + line(end), 2, "JSON")
    # An unknown data version, a Start for another run.
    v2 = raw_fact(1, "Start", None, data="flow-data/2", run="r")
    damaged(line(v2), 1, "data version")
    other = raw_fact(1, "Start", None, data=DATA_VERSION, run="q")
    damaged(line(other), 1, "run")
    # A fact after End; a second Start; a fact that does not start with Start.
    after = raw_fact(4, "Call", end["hash"], call="x")
    damaged(line(start) + line(call) + line(end) + line(after), 4, "after End")
    again = raw_fact(2, "Start", start["hash"], data=DATA_VERSION, run="r")
    damaged(line(start) + line(again), 2, "Start")
    damaged(line(raw_fact(1, "Call", None)), 1, "Start")
    # A reference that is not a hash; both a value and its reference.
    bad_ref = raw_fact(2, "Reply", start["hash"], outcome_ref="sha256:XYZ")
    damaged(line(start) + line(bad_ref), 2, "outcome_ref")
    both = raw_fact(2, "Reply", start["hash"], outcome=1, outcome_ref="sha256:" + "0" * 64)
    damaged(line(start) + line(both), 2, "both")
    # A value file that is missing and not a recorded hole.
    ref = raw_fact(2, "Reply", start["hash"], outcome_ref="sha256:" + "0" * 64)
    damaged(line(start) + line(ref), 2, "missing")
    # Damage followed by a torn tail is still damage.
    damaged(line(start) + b"{garbage}\n" + b'{"n":', 2, "JSON")


# -- torn tails ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [
    b'{"call":"root#2","kind":"Ca',  # an unfinished write
    b"\x00" * 40 + b"\n",  # an extended, never-written region
    b"\x00" * 10 + b'"kind":"Call","n":7,"prev":null}\n',  # zeros, then the end of the line
])
def test_torn_tail_is_truncated_before_appending(tmp_path, tail):
    root = str(tmp_path)
    make_run(root, end=False).close()
    path = history_path(root)
    original = read(path)
    good = RunStore.open(root, "run-1", for_append=False).facts()
    write(path, original + tail)
    ro = RunStore.open(root, "run-1", for_append=False)
    assert ro.torn_tail == store_errors.TornTail(len(original), len(tail))
    assert ro.facts() == good
    assert read(path) == original + tail  # a reader changes nothing
    s = RunStore.open(root, "run-1", for_append=True, durability="fsync")
    assert read(path) == original  # truncated before anything is appended
    (record,) = [r for r in s.host_records() if r["kind"] == "truncated"]
    assert record["offset"] == len(original) and record["bytes"] == len(tail)
    assert record["head"] == good[-1]["hash"] and record["component"] == "history.jsonl"
    fact = s.append("Reply", {"call": "root#2", "outcome": {"Ok": 1}})
    assert fact["n"] == len(good) + 1 and fact["prev"] == good[-1]["hash"]
    s.close()
    again = RunStore.open(root, "run-1", for_append=False)
    assert again.torn_tail is None and again.facts() == good + [fact]


def test_an_unparseable_complete_last_line_is_damage(tmp_path):
    root = str(tmp_path)
    make_run(root, end=False).close()
    original = read(history_path(root))
    write(history_path(root), original + b'{"call":"x",\n')
    with pytest.raises(StorageError) as caught:
        RunStore.open(root, "run-1", for_append=True)
    assert caught.value.fact_n == 7
    # Two lines joined by a damaged newline are damage too, not a tear of both.
    joined = original[:-1] + b"\x0b"
    write(history_path(root), joined + b'{"n":7}\n')
    with pytest.raises(StorageError):
        RunStore.open(root, "run-1", for_append=True)


def test_torn_start_leaves_a_not_started_run(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "t"))
    write(history_path(root, "t"), b'{"data":"flow-')
    with pytest.raises(StorageError):
        RunStore.open(root, "t", for_append=True)
    assert read(history_path(root, "t")) == b'{"data":"flow-'


def test_torn_host_record_is_ignored_then_repaired(tmp_path):
    root = str(tmp_path)
    s = make_run(root, end=False)
    s.host_record({"kind": "binding", "tool": "planner.next", "command": ["python3", "p.py"]})
    s.close()
    host = os.path.join(root, "run-1", "host.jsonl")
    write(host, read(host) + b'{"kind":"hal')
    ro = RunStore.open(root, "run-1", for_append=False)
    assert [r["kind"] for r in ro.host_records()] == ["binding"]
    s = RunStore.open(root, "run-1", for_append=True)
    s.host_record({"kind": "halted", "head": s.head})
    kinds = [r["kind"] for r in s.host_records()]
    # The open synced what it read and marked it durable (docs/trace.md section 7).
    assert kinds == ["binding", "truncated", "durable", "halted"]
    assert read(host).endswith(b"\n")


# -- failed writes ------------------------------------------------------------------------------


def failing_write(monkeypatch, target_fd, *, after_bytes=0, err=errno.ENOSPC, times=1):
    """os.write and os.pwrite that write `after_bytes` of the data to `target_fd`, then raise."""
    real, real_at = os.write, os.pwrite
    left = {"n": times}

    def failing(fd, data, offset=None):
        if fd == target_fd and left["n"] > 0:
            left["n"] -= 1
            if after_bytes:
                part = bytes(data[:after_bytes])
                real(fd, part) if offset is None else real_at(fd, part, offset)
            raise OSError(err, os.strerror(err))
        return None

    def fake(fd, data):
        return failing(fd, data) or real(fd, data)

    def fake_at(fd, data, offset):
        return failing(fd, data, offset) or real_at(fd, data, offset)

    monkeypatch.setattr(os, "write", fake)
    monkeypatch.setattr(os, "pwrite", fake_at)


def test_enospc_on_append_leaves_no_partial_line(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    path = history_path(root)
    before = written(path)
    failing_write(monkeypatch, s._fd, after_bytes=17)
    with pytest.raises(StorageError) as caught:
        s.append("Reply", {"call": "root#2", "outcome": {"Ok": "late"}})
    assert caught.value.fact_n == 7 and "No space" in str(caught.value)
    assert written(path) == before
    assert len(s) == 6
    fact = s.append("Reply", {"call": "root#2", "outcome": {"Ok": "later"}})  # the run goes on
    assert fact["n"] == 7
    s.close()
    assert RunStore.open(root, "run-1", for_append=False).facts()[-1] == fact


def test_failed_group_commit_is_all_or_nothing(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False)
    before = written(history_path(root))
    failing_write(monkeypatch, s._fd, after_bytes=300)  # more than one whole line
    with pytest.raises(StorageError):
        s.append_many([("Reply", {"call": f"c{i}", "outcome": {"Ok": i}}) for i in range(5)])
    assert written(history_path(root)) == before and len(s) == 6
    assert len(s.append_many([("Reply", {"call": "c", "outcome": {"Ok": 0}})])) == 1


def test_failed_fsync_is_a_storage_error(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    before = written(history_path(root))
    real = store_durable._sync_appended
    calls = {"n": 0}

    def fake(fd):
        if fd == s._fd and calls["n"] == 0:
            calls["n"] += 1
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(store_durable, "_sync_appended", fake)
    with pytest.raises(StorageError):
        s.append("Reply", {"outcome": {"Ok": 1}})
    assert written(history_path(root)) == before
    s.append("Reply", {"outcome": {"Ok": 2}})
    s.close()
    assert RunStore.open(root, "run-1", for_append=False).facts()[-1]["outcome"] == {"Ok": 2}


def test_a_fact_written_without_sync_is_synced_by_the_next_write(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    syncs = []
    real = store_durable._sync_appended
    monkeypatch.setattr(store_durable, "_sync_appended", lambda fd: (syncs.append(fd), real(fd)))
    reply = s.append("Reply", {"call": "c", "outcome": {"Ok": 1}}, sync=False)
    assert syncs == [] and not s.synced
    # written: a reader (or a resumed host after this process dies) sees it already
    assert RunStore.open(root, "run-1", for_append=False).facts()[-1] == reply
    s.append("Call", {"call": "d", "tool": "t", "arguments": {}})
    assert len(syncs) == 1 and s.synced
    s.sync()  # nothing left to sync
    assert len(syncs) == 1
    s.append("Reply", {"call": "d", "outcome": {"Ok": 2}}, sync=False)
    s.host_record({"kind": "paused", "head": s.head, "pending": []})  # names the head: syncs first
    assert len(syncs) == 2 and s.synced
    s.close()


def test_a_failed_sync_cuts_every_fact_that_was_not_durable(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    before = written(history_path(root))
    durable = s.facts()
    s.append("Reply", {"call": "c", "outcome": {"Ok": 1}}, sync=False)
    s.append("Reply", {"call": "d", "outcome": {"Ok": 2}}, sync=False)

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_durable, "_sync_appended", failing)
    with pytest.raises(StorageError):
        s.append("Call", {"call": "e", "tool": "t", "arguments": {}})
    assert written(history_path(root)) == before
    assert s.facts() == durable and s.synced
    monkeypatch.undo()
    s.append("Reply", {"call": "c", "outcome": {"Ok": 3}})  # the store goes on from the durable head
    s.close()
    facts = RunStore.open(root, "run-1", for_append=False).facts()
    assert facts[:-1] == durable and facts[-1]["outcome"] == {"Ok": 3}


def test_a_failed_explicit_sync_is_a_storage_error(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    before = written(history_path(root))
    s.append("Reply", {"call": "c", "outcome": {"Ok": 1}}, sync=False)
    monkeypatch.setattr(store_durable, "_sync_appended",
                        lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(StorageError):
        s.sync()
    assert written(history_path(root)) == before


def test_enospc_while_writing_a_value_file(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = make_run(root, end=False)
    before = read(history_path(root))
    values = os.path.join(root, "run-1", "values")
    listed = sorted(os.listdir(values))
    real = os.write

    def fake(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(values):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", fake)
    with pytest.raises(StorageError):
        s.append("Reply", {"outcome": {"Ok": "q" * 5000}})
    monkeypatch.setattr(os, "write", real)
    assert read(history_path(root)) == before and sorted(os.listdir(values)) == listed
    assert "outcome_ref" in s.append("Reply", {"outcome": {"Ok": "q" * 5000}})


# -- holes --------------------------------------------------------------------------------------


def test_redaction_makes_a_hole_and_keeps_the_chain(tmp_path):
    root = str(tmp_path)
    make_run(root).close()
    s = RunStore.open(root, "run-1", for_append=True)
    history = read(history_path(root))
    ref = s.fact(3)["outcome_ref"]
    (record,) = s.redact(3, "outcome")
    assert record == {"kind": "hole", "fact": 3, "field": "outcome", "ref": ref}
    assert read(history_path(root)) == history  # the facts do not change
    assert not os.path.exists(os.path.join(root, "run-1", "values", ref[7:]))
    with pytest.raises(Hole) as caught:
        s.value(3, "outcome")
    assert (caught.value.fact_n, caught.value.field, caught.value.hash) == (3, "outcome", ref)
    assert s.redact(3) == []  # already a hole
    s.close()
    again = RunStore.open(root, "run-1", for_append=False)  # verification still passes
    assert again.holes() == {(3, "outcome"): ref} and again.is_hole(3, "outcome")
    assert again.fact(3)["outcome_ref"] == ref  # inspection still shows the hash
    with pytest.raises(Hole):
        again.value(3, "outcome")
    assert again.value(2, "arguments") == {"ticket": "t", "notes": []}
    assert scan_runs(root)["runs"][0]["record"] == "complete"


def test_inline_values_cannot_be_redacted(tmp_path):
    root = str(tmp_path)
    s = make_run(root)
    history = read(history_path(root))
    with pytest.raises(RedactRefused, match="inline"):
        s.redact(2, "arguments")
    with pytest.raises(RedactRefused):
        s.redact(4)  # Choice holds no value
    with pytest.raises(RedactRefused):
        s.redact(2, "call")  # not a value field
    assert read(history_path(root)) == history and s.holes() == {}
    assert s.host_records() == []


def test_redacting_shared_content(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "sh", START)
    a = s.append("Reply", {"outcome": {"Ok": BIG}})
    b = s.append("Reply", {"outcome": {"Ok": BIG}})
    blob = os.path.join(root, "sh", "values", a["outcome_ref"][7:])
    s.redact(a["n"], "outcome")
    assert os.path.exists(blob) and s.value(b, "outcome") == {"Ok": BIG}  # still referenced
    with pytest.raises(Hole):
        s.value(a, "outcome")
    s.redact(b["n"], "outcome")
    assert not os.path.exists(blob)
    c = s.append("Reply", {"outcome": {"Ok": BIG}})  # the same content again is stored again
    assert s.value(c, "outcome") == {"Ok": BIG}
    with pytest.raises(Hole):
        s.value(a, "outcome")
    s.close()
    ro = RunStore.open(root, "sh", for_append=False)
    assert ro.value(c, "outcome") == {"Ok": BIG}


def test_interrupted_redaction_is_finished_on_open(tmp_path):
    root = str(tmp_path)
    make_run(root).close()
    s = RunStore.open(root, "run-1", for_append=True)
    ref = s.fact(3)["outcome_ref"]
    with pytest.raises(ValueError):
        s.host_record({"kind": "hole", "fact": 3, "field": "outcome", "ref": ref})  # the store's
    s.close()
    # What a crash between the hole record and the file's deletion leaves:
    write(os.path.join(root, "run-1", "host.jsonl"),
          canonical_bytes({"kind": "hole", "fact": 3, "field": "outcome", "ref": ref}) + b"\n")
    ro = RunStore.open(root, "run-1", for_append=False)
    with pytest.raises(Hole):
        ro.value(3, "outcome")  # a hole even while the file is still there
    RunStore.open(root, "run-1", for_append=True).close()
    assert not os.path.exists(os.path.join(root, "run-1", "values", ref[7:]))


def test_a_lost_value_file_can_be_recorded_as_a_hole(tmp_path):
    root = str(tmp_path)
    make_run(root).close()
    ref = RunStore.open(root, "run-1", for_append=False).fact(3)["outcome_ref"]
    os.unlink(os.path.join(root, "run-1", "values", ref[7:]))
    with pytest.raises(StorageError):
        RunStore.open(root, "run-1", for_append=True)
    # The host accepts the loss as a hole (a hole says nothing about why).
    host = os.path.join(root, "run-1", "host.jsonl")
    write(host, canonical_bytes({"kind": "hole", "fact": 3, "field": "outcome", "ref": ref}) + b"\n")
    with pytest.raises(Hole):
        RunStore.open(root, "run-1", for_append=False).value(3, "outcome")


# -- discovery ----------------------------------------------------------------------------------


def row_of(result, run):
    (row,) = [r for r in result["runs"] if r["run"] == run]
    return row


def test_scan_runs_rows(tmp_path):
    root = str(tmp_path / "runs")
    make_run(root, "a-complete").close()
    s = make_run(root, "b-paused", end=False)
    s.host_record({"kind": "paused", "head": s.head, "pending": ["c1:root#2"]})
    s.close()
    s = make_run(root, "c-stale", end=False)
    s.host_record({"kind": "halted", "head": s.head})
    s.append("Reply", {"call": "root#2", "outcome": {"Ok": 1}})
    s.close()
    make_run(root, "d-torn", end=False).close()
    with open(history_path(root, "d-torn"), "ab") as handle:
        handle.write(b'{"call":')
    os.makedirs(os.path.join(root, "e-empty"))
    os.makedirs(os.path.join(root, "f-empty-history"))
    write(history_path(root, "f-empty-history"), b"")
    make_run(root, "g-damaged").close()
    damaged = bytearray(read(history_path(root, "g-damaged")))
    second = damaged.index(b"\n") + 1
    damaged[second + 30] ^= 1
    write(history_path(root, "g-damaged"), bytes(damaged))
    write(os.path.join(root, "h-file"), b"not a run")
    os.makedirs(os.path.join(root, "i-history-is-a-dir", "history.jsonl"))
    make_run(root, "j-moved").close()
    os.rename(os.path.join(root, "j-moved"), os.path.join(root, "j-renamed"))
    s = RunStore.create(root, "k-faulted", START)
    s.append("End", {"outcome": {"Faulted": {"kind": "division-by-zero", "message": "m" * 3000,
                                             "location": None, "task": "root"}}})
    s.close()
    os.makedirs(os.path.join(root, ".hidden"))
    os.makedirs(os.path.join(root, "l-fifo"))
    os.mkfifo(history_path(root, "l-fifo"))

    result = scan_runs(root)
    assert result["problems"] == [] and result["nextAfter"] is None
    assert [r["run"] for r in result["runs"]] == [
        "a-complete", "b-paused", "c-stale", "d-torn", "e-empty", "f-empty-history", "g-damaged",
        "h-file", "i-history-is-a-dir", "j-renamed", "k-faulted", "l-fifo"]
    for row in result["runs"]:
        assert list(row) == ["run", "historyPresent", "record", "truncated", "ending", "entry",
                             "program", "lastFact", "hostDecision", "startedAt", "lastActivityAt", "problem"]
        orjson.dumps(row)

    a = row_of(result, "a-complete")
    opened = RunStore.open(root, "a-complete", for_append=False)
    facts, times = opened.facts(), opened.fact_times()
    assert a == {"run": "a-complete", "historyPresent": True, "record": "complete", "truncated": False,
                 "ending": "completed", "entry": {"module": "support", "function": "main"},
                 "program": START["program"], "lastFact": {"n": 7, "hash": facts[-1]["hash"]},
                 "hostDecision": None, "startedAt": rfc3339_ms(times[1]), "lastActivityAt": rfc3339_ms(times[7]),
                 "problem": None}
    b = row_of(result, "b-paused")
    assert b["record"] == "incomplete" and b["ending"] is None
    assert b["hostDecision"]["kind"] == "paused" and b["hostDecision"]["head"] == b["lastFact"]["hash"]
    c = row_of(result, "c-stale")
    assert c["record"] == "incomplete" and c["hostDecision"] is None  # its head is not the last fact
    d = row_of(result, "d-torn")
    assert d["record"] == "incomplete" and d["truncated"] is True and d["lastFact"]["n"] == 6
    e = row_of(result, "e-empty")
    assert e["record"] == "not-started" and e["historyPresent"] is False and e["lastFact"] is None
    f = row_of(result, "f-empty-history")
    assert f["record"] == "not-started" and f["historyPresent"] is True
    g = row_of(result, "g-damaged")
    assert g["record"] == "unreadable" and g["problem"]["component"] == "history.jsonl"
    assert g["problem"]["status"] == "unreadable" and g["problem"]["fact"] == 2
    assert g["lastFact"]["n"] == 1 and g["hostDecision"] is None
    h = row_of(result, "h-file")
    assert h["record"] == "unreadable" and h["problem"]["component"] == "run"
    i = row_of(result, "i-history-is-a-dir")
    assert i["record"] == "unreadable" and i["historyPresent"] is True
    j = row_of(result, "j-renamed")
    assert j["record"] == "unreadable" and "run" in j["problem"]["message"]
    assert row_of(result, "l-fifo")["problem"]["message"] == "not a regular file"
    k = row_of(result, "k-faulted")
    assert k["record"] == "complete" and k["ending"] == "faulted"  # outcome is by reference


def test_scan_runs_paging(tmp_path):
    root = str(tmp_path)
    ids = [f"run-{i:02}" for i in range(7)]
    for run in reversed(ids):
        RunStore.create(root, run, START, durability="none").close()
    os.makedirs(os.path.join(root, "run-03x"))  # a not-started candidate takes a slot too
    order = sorted(ids + ["run-03x"])
    seen, after, pages = [], None, 0
    while True:
        page = scan_runs(root, limit=3, after=after)
        pages += 1
        assert len(page["runs"]) <= 3
        seen += [r["run"] for r in page["runs"]]
        after = page["nextAfter"]
        if after is None:
            break
        assert after == page["runs"][-1]["run"]
    assert seen == order and pages == 3
    assert [r["run"] for r in scan_runs(root, after="run-05")["runs"]] == ["run-06"]
    assert scan_runs(root, after="run-06") == {"runs": [], "nextAfter": None, "problems": []}
    assert scan_runs(root, after="run-03", limit=1)["runs"][0]["run"] == "run-03x"
    assert scan_runs(root, limit=8)["nextAfter"] is None
    for bad in (0, 201, True, "3"):
        with pytest.raises(ValueError):
            scan_runs(root, limit=bad)
    with pytest.raises(ValueError):
        scan_runs(root, after="")


def test_scan_runs_root_problems(tmp_path, monkeypatch):
    missing = str(tmp_path / "nowhere" / "runs")
    assert scan_runs(missing) == {
        "runs": [], "nextAfter": None,
        "problems": [{"component": "root", "status": "not-created",
                      "message": "the runs directory does not exist", "fact": None}]}
    assert not os.path.exists(str(tmp_path / "nowhere"))  # never created
    afile = str(tmp_path / "file")
    write(afile, b"")
    assert scan_runs(afile)["problems"][0]["status"] == "unreadable"
    root = str(tmp_path / "many")
    for i in range(6):
        os.makedirs(os.path.join(root, f"r{i}"))
    monkeypatch.setattr(store_discovery, "ENTRY_LIMIT", 5)
    result = scan_runs(root)
    assert result["runs"] == [] and result["problems"][0]["status"] == "inspection-limited"
    monkeypatch.setattr(store_discovery, "ENTRY_LIMIT", 6)
    assert len(scan_runs(root)["runs"]) == 6


def test_scan_runs_read_bounds(tmp_path, monkeypatch):
    root = str(tmp_path)
    make_run(root, "a").close()
    os.makedirs(os.path.join(root, "b"))
    write(history_path(root, "b"), b"x" * (4 * 1024 * 1024 + 1))
    os.makedirs(os.path.join(root, "c"))
    write(history_path(root, "c"), b"x" * (4 * 1024 * 1024))  # exactly the bound: inspected
    result = scan_runs(root)
    assert row_of(result, "b")["record"] == "inspection-limited"
    assert row_of(result, "b")["problem"]["status"] == "inspection-limited"
    assert row_of(result, "c")["record"] == "not-started"  # a torn line, nothing else
    assert row_of(result, "c")["truncated"] is True
    # The page ceiling ends a page early rather than half-inspect a run.
    size = len(read(history_path(root, "a")))
    for run in ("d", "e", "f"):
        make_run(root, run).close()
    monkeypatch.setattr(store_discovery, "COMPONENT_LIMIT", size + size // 5)
    monkeypatch.setattr(store_discovery, "PAGE_LIMIT", 4 * (size + size // 5) + 4)
    pages, after = [], None
    while True:
        page = scan_runs(root, after=after)
        pages.append([(r["run"], r["record"]) for r in page["runs"]])
        after = page["nextAfter"]
        if after is None:
            break
    seen = dict(row for rows in pages for row in rows)
    assert sorted(seen) == ["a", "b", "c", "d", "e", "f"]
    assert seen["a"] == seen["d"] == seen["e"] == seen["f"] == "complete"
    assert seen["b"] == seen["c"] == "inspection-limited"
    assert len(pages) > 1 and all(len(rows) < 50 for rows in pages)


def test_scan_runs_never_loads_blobs_or_writes(tmp_path, monkeypatch):
    root = str(tmp_path)
    make_run(root, "a").close()
    s = make_run(root, "b", end=False)
    s.put_source("module text")
    s.close()
    write(history_path(root, "b"), read(history_path(root, "b")) + b'{"n"')
    opened = []
    real = os.open

    def spy(path, flags, *args, **kw):
        opened.append((os.fspath(path), flags))
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", spy)
    before = {p: read(os.path.join(d, p)) for d, _, fs in os.walk(root) for p in fs}
    scan_runs(root)
    for path, flags in opened:
        assert "/values/" not in path and "/sources/" not in path
        assert flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) == 0
    assert {p: read(os.path.join(d, p)) for d, _, fs in os.walk(root) for p in fs} == before


# -- canonical JSON -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@settings(deadline=None)
@given(json_values)
def test_slow_encoder_matches_orjson(value):
    from flowdata import canonical

    encoded = canonical.exact_dumps(value)  # the store's writer when orjson refuses
    assert encoded == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert loads_canonical(encoded) == value


def test_loads_canonical_rejects():
    for bad in (b'{"b":1,"a":2}', b"{ }", b'{"a":1,"a":1}', b"1.0e5", b'"\\u0041"', b"NaN"):
        with pytest.raises(ValueError):
            loads_canonical(bad)
    assert loads_canonical(b"123456789012345678901234567890") == 123456789012345678901234567890


# -- property: random histories reopen to the same facts ------------------------------------------

sized_values = st.one_of(
    json_values,
    st.text(min_size=900, max_size=1200),  # around the inline limit
    st.lists(st.text(min_size=100, max_size=400), min_size=1, max_size=12),
    st.integers(min_value=2**64, max_value=2**300),
)
non_end = st.sampled_from(["Call", "Reply", "Choice", "Stop", "Checkpoint"])
value_field = {"Call": "arguments", "Reply": "outcome", "Stop": "found", "Checkpoint": "arguments",
               "End": "outcome"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start_input=sized_values,
    steps=st.lists(st.tuples(non_end, sized_values, st.booleans()), max_size=12),
    end=st.one_of(st.none(), sized_values),
)
def test_random_histories_reopen_to_the_same_facts(tmp_path_factory, start_input, steps, end):
    root = str(tmp_path_factory.mktemp("runs"))
    s = RunStore.create(root, "p", dict(START, input=start_input), durability="none")
    expected_values = {(1, "input"): start_input}
    batch: list = []
    for kind, value, flush in steps:
        fields = {"call": "root#1"}
        if kind in value_field:
            fields[value_field[kind]] = value
        batch.append((kind, fields))
        if flush:
            s.append_many(batch)
            batch = []
    s.append_many(batch)
    if end is not None:
        s.append("End", {"outcome": end})
    n = 1
    for kind, value, _ in steps:
        n += 1
        if kind in value_field:
            expected_values[(n, value_field[kind])] = value
    if end is not None:
        expected_values[(n + 1, "outcome")] = end
    written = s.facts()
    s.close()
    again = RunStore.open(root, "p", for_append=True)
    assert again.facts() == written and again.torn_tail is None
    for (n, field), value in expected_values.items():
        assert again.value(n, field) == value
        stored_inline = field in again.fact(n)
        assert stored_inline == (len(canonical_bytes(value)) <= 1024)
    again.close()
    row = scan_runs(root)["runs"][0]
    assert row["record"] == ("complete" if end is not None else "incomplete")
    assert row["lastFact"] == {"n": written[-1]["n"], "hash": written[-1]["hash"]}


def test_an_interrupted_sync_keeps_what_was_written_for_the_next_sync(tmp_path, monkeypatch):
    """An interrupt is not a disk failure: the written fact stays, in the file and in memory, and
    the next sync (the halt's) makes it durable."""
    root = str(tmp_path)
    s = make_run(root, end=False, durability="fsync")
    real = store_durable._sync_appended

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_durable, "_sync_appended", interrupted)
    with pytest.raises(KeyboardInterrupt):
        s.append("Call", {"call": "e", "tool": "t", "arguments": {}})
    assert s.facts()[-1]["kind"] == "Call" and not s.synced
    synced = []
    monkeypatch.setattr(store_durable, "_sync_appended", lambda fd: (synced.append(fd), real(fd)))
    s.sync()
    assert synced and s.synced
    s.append("Reply", {"call": "e", "outcome": {"Ok": 1}})  # chained after the kept Call
    s.close()
    assert [f["kind"] for f in RunStore.open(root, "run-1", for_append=False).facts()][-2:] == ["Call", "Reply"]
