"""The store contract (flowrt/store/interface.py), run against every implementation in
tests/store_backends.py: only the interface's methods, plus the backend's ways to damage a record.
What is particular to one implementation (the run directory's bytes, reserved space, torn files)
is tested in tests/test_store*.py."""

from __future__ import annotations

import threading

import pytest

from flowrt.store import (
    DATA_VERSION,
    STORE_RECORDS,
    Hole,
    RedactRefused,
    RunBusy,
    RunExists,
    RunLog,
    RunNotFound,
    StorageError,
    canonical_bytes,
    fact_hash,
)
from flowrt.store.open_calls import open_calls_among
from tests.store_backends import BACKENDS

START = {
    "program": "sha256:" + "ab" * 32,
    "std": "std@v1",
    "entry": {"module": "support", "function": "main"},
    "input": {"ticket": "Login fails on Safari"},
    "modules": [],
}
BIG = "x" * 2000  # canonical JSON over the default inline limit of 1 KiB
CHECKPOINT = {"function": {"module": "support", "name": "work"}, "types": [], "arguments": {"round": 2}}
SOURCE = "use \"std@v1/task\"\npub flow main() -> Int = 1 // é\n"


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, tmp_path):
    made = BACKENDS[request.param](tmp_path, request)
    yield made
    made.close()


@pytest.fixture
def store(backend):
    return backend.store


def make_run(store, run="run-1", *, end=True, **kw) -> RunLog:
    """Start, Call, Reply (by reference), Choice, Stop, Checkpoint and, unless `end` is False, End."""
    s = store.create(run, START, durability="none", **kw)
    s.append("Call", {"call": "root#1", "tool": "planner.next", "fingerprint": "f1",
                      "arguments": {"ticket": "t", "notes": []}})
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": {"Search": BIG}}})
    s.append("Choice", {"task": "root", "picked": "root/2"})
    s.append("Stop", {"task": "root/1", "by": "root", "found": "Running", "closed": ["root/1#1"]})
    s.append("Checkpoint", CHECKPOINT)
    if end:
        s.append("End", {"outcome": {"Completed": {"Resolved": "done"}}})
    return s


# -- create, append, open -------------------------------------------------------------------------


def test_create_append_open_round_trip(store):
    s = store.create("run-1", START, sources=[SOURCE])
    assert isinstance(s, RunLog) and s.for_append and s.run_id == "run-1"
    s.append("Call", {"call": "root#1", "tool": "t", "arguments": {"a": 1}})
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": 2}})
    s.append("Checkpoint", CHECKPOINT)
    s.append("End", {"outcome": {"Completed": 3}})
    facts = s.facts()
    s.close()
    assert not s.for_append
    assert [f["n"] for f in facts] == [1, 2, 3, 4, 5]
    assert [f["kind"] for f in facts] == ["Start", "Call", "Reply", "Checkpoint", "End"]
    assert facts[0]["prev"] is None and facts[0]["data"] == DATA_VERSION and facts[0]["run"] == "run-1"
    for before, after in zip(facts, facts[1:]):
        assert after["prev"] == before["hash"]
    for fact in facts:
        assert fact["hash"] == fact_hash({k: v for k, v in fact.items() if k != "hash"})
    assert facts[-1]["ending"] == "completed"
    with store.open("run-1", for_append=False) as again:
        assert again.facts() == facts and len(again) == 5 and not again.for_append
        assert again.head == facts[-1]["hash"] and again.ended and again.torn_tail is None
        assert again.fact(3) == facts[2] and again.fact_at(0) == facts[0] and again.fact_at(5) is None
        assert again.facts_from(1, 2) == facts[1:3] and again.facts_from(9, 2) == []
        assert again.verified_facts() == facts and again.latest_checkpoint() == 3
        assert again.value(2, "arguments") == {"a": 1} and again.value(facts[2], "outcome") == {"Ok": 2}
        assert again.source("sha256:" + __import__("hashlib").sha256(SOURCE.encode()).hexdigest()) == SOURCE
        with pytest.raises(IndexError):
            again.fact(6)
        with pytest.raises(KeyError):
            again.value(2, "outcome")


def test_a_deferred_open_reads_the_same_facts(store):
    s = make_run(store)
    facts = s.facts()
    s.close()
    deferred = store.open("run-1", for_append=False, defer=True)
    assert deferred.fact_at(0) == facts[0]
    deferred.verify()
    assert not deferred.deferred and deferred.facts() == facts and deferred.head == facts[-1]["hash"]


def test_create_and_open_refusals(store):
    make_run(store, end=False).close()
    with pytest.raises(RunExists):
        store.create("run-1", START)
    with pytest.raises(RunNotFound):
        store.open("nope", for_append=False)
    for bad in ("../evil", "", ".hidden", "a/b", "x" * 129):
        with pytest.raises(ValueError):
            store.create(bad, START)
    with pytest.raises(ValueError):
        store.create("x", dict(START, data="flow-data/9"))
    with pytest.raises(ValueError):
        store.create("y", dict(START, run="someone-else"))
    with pytest.raises(RunNotFound):
        store.open("x", for_append=False)  # a refused create makes nothing


def test_refused_appends_write_nothing(store):
    s = make_run(store, end=False)
    before = s.facts()
    for kind, fields, error in [
        ("Start", {}, ValueError),
        ("Bogus", {}, ValueError),
        ("Call", {"n": 3}, ValueError),
        ("Call", {"hash": "sha256:" + "0" * 64}, ValueError),
        ("Call", {"arguments_ref": "sha256:" + "0" * 64}, ValueError),
        ("Call", {"arguments": {"x": object()}}, TypeError),
        ("End", {"outcome": {"Completed": 1}, "ending": "faulted"}, ValueError),
    ]:
        with pytest.raises(error):
            s.append(kind, fields)
    with pytest.raises(TypeError):
        s.append_many([("Call", {"call": "a"}), ("Call", {"arguments": {"x": object()}})])
    assert s.facts() == before
    s.append("End", {"outcome": {"Completed": 1}})
    with pytest.raises(ValueError):
        s.append("Call", {"call": "x"})  # nothing after End
    s.close()
    ro = store.open("run-1", for_append=False)
    assert ro.facts()[:-1] == before and len(ro) == len(before) + 1
    with pytest.raises(ValueError):
        ro.append("Call", {})
    with pytest.raises(ValueError):
        ro.host_record({"kind": "x"})
    with pytest.raises(ValueError):
        ro.put_source("x")


def test_append_many_is_one_chained_group(store):
    s = store.create("g", START)
    out = s.append_many([("Call", {"call": f"root#{i}", "tool": "t", "arguments": {"i": i}})
                         for i in range(1, 6)])
    assert [f["n"] for f in out] == [2, 3, 4, 5, 6]
    assert out[0]["prev"] == s.facts()[0]["hash"] and s.synced
    assert s.append_many([]) == []
    s.close()
    assert store.open("g", for_append=False).facts()[1:] == out


def test_host_records_many_writes_them_in_order_after_the_facts(store):
    s = store.create("h", START)
    s.append("Call", {"call": "root#1", "tool": "t", "arguments": {}}, sync=False)
    records = [{"kind": "origin", "root": "/a.flow"}, {"kind": "binding", "tool": "m.t", "implementation": "x"},
               {"kind": "checkpoints", "policy": "every"}]
    assert s.host_records_many(records) == records
    assert s.synced  # the records name the head: the facts before them are durable first
    assert s.host_records_many([]) == []
    with pytest.raises(ValueError):
        s.host_records_many([{"kind": "note"}, {"kind": "note", "batch": 0}])  # the store's key
    s.host_record({"kind": "note"})
    s.close()
    kinds = [r for r in store.open("h", for_append=False).host_records() if r["kind"] != "durable"]
    assert kinds == [*records, {"kind": "note"}]


def test_an_appender_lists_the_host_records_a_reader_does_before_and_after_it_writes(store):
    """A reopened appender answers `host_records` from what its open read until it writes one
    (a resume asks several times first); what it gives is the reader's, and a copy."""
    s = store.create("listed", START)
    s.host_records_many([{"kind": "origin", "root": "/a.flow"}, {"kind": "note", "pending": ["root#1"]}])
    s.close()

    def as_read() -> list[dict]:
        reader = store.open("listed", for_append=False)
        try:
            return reader.host_records()
        finally:
            reader.close()

    appender = store.open("listed", for_append=True)
    assert appender.host_records() == as_read()
    appender.host_records()[-1]["pending"] = "changed"
    assert appender.host_records() == as_read()
    appender.host_record({"kind": "resumed", "n": 1})
    assert appender.host_records()[-1] == {"kind": "resumed", "n": 1}
    appender.close()
    assert [r for r in as_read() if r["kind"] not in STORE_RECORDS][-1] == {"kind": "resumed", "n": 1}


def test_a_record_written_soon_goes_out_with_the_next_durable_ones(store):
    s = store.create("soon", START)
    s.host_record_soon({"kind": "sandbox", "layers": {}})
    s.host_record({"kind": "note"})  # the queued report first, in the same write
    s.host_record_soon({"kind": "report", "n": 2})
    with pytest.raises(ValueError):
        s.host_record_soon({"kind": "durable"})  # the store's own
    s.append("End", {"outcome": {"Completed": 1}})
    s.close()  # ... and at the latest as the store closes
    kinds = [r["kind"] for r in store.open("soon", for_append=False).host_records() if r["kind"] not in STORE_RECORDS]
    assert kinds == ["sandbox", "note", "report"]
    unsynced = store.create("soon-none", START, durability="none")
    unsynced.host_record_soon({"kind": "report", "n": 1})
    unsynced.close()
    assert [r["kind"] for r in store.open("soon-none", for_append=False).host_records()
            if r["kind"] not in STORE_RECORDS] == ["report"]


def test_concurrent_appends_from_threads_chain(store):
    s = store.create("t", START, durability="none")

    def reply(task):
        for i in range(50):
            s.append("Reply", {"call": f"{task}#{i}", "outcome": {"Ok": "r" * (i * 40)}})

    threads = [threading.Thread(target=reply, args=(f"root/{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    s.close()
    again = store.open("t", for_append=False)
    assert len(again) == 201 and again.facts() == s.facts()


def test_reopen_for_append_continues_the_chain(store):
    make_run(store, end=False).close()
    s = store.open("run-1", for_append=True)
    fact = s.append("End", {"outcome": {"Faulted": {"kind": "div", "message": "m", "location": None,
                                                    "task": "root"}}})
    assert fact["n"] == 7 and fact["prev"] == s.facts()[5]["hash"] and fact["ending"] == "faulted"
    s.close()
    assert len(store.open("run-1", for_append=False)) == 7


def test_facts_written_without_sync(store):
    s = store.create("u", START)
    fact = s.append("Call", {"call": "root#1", "arguments": {}}, sync=False)
    assert not s.synced and s.facts()[-1] == fact and s.head == fact["hash"]
    s.sync()
    assert s.synced
    s.append("Reply", {"call": "root#1", "outcome": {"Ok": 1}}, sync=False)
    s.host_record({"kind": "paused", "head": s.head})  # a record names the head: synced first
    assert s.synced
    s.append("Reply", {"call": "root#2", "outcome": {"Ok": 2}}, sync=False)
    s.close()  # syncs what it can
    assert [f["n"] for f in store.open("u", for_append=False).facts()] == [1, 2, 3, 4]


# -- the run lock ---------------------------------------------------------------------------------


def test_one_appender_at_a_time(store):
    s = make_run(store, end=False)
    with pytest.raises(RunBusy):
        store.open("run-1", for_append=True)
    reader = store.open("run-1", for_append=False)  # readers take no lock
    assert reader.facts() == s.facts()
    s.close()
    with store.open("run-1", for_append=True) as again:
        with pytest.raises(RunBusy):
            store.open("run-1", for_append=True)
        again.append("End", {"outcome": {"Completed": 1}})
    store.open("run-1", for_append=True).close()


# -- values and sources by hash ---------------------------------------------------------------------


def test_large_values_go_by_reference(store):
    s = store.create("v", dict(START, input={"doc": BIG}))
    start = s.facts()[0]
    assert "input" not in start and start["input_ref"].startswith("sha256:")
    small = s.append("Call", {"call": "root#1", "tool": "t", "arguments": {"a": "y" * 10}})
    assert "arguments" in small
    big = s.append("Reply", {"call": "root#1", "outcome": {"Ok": BIG}})
    same = s.append("Reply", {"call": "root#2", "outcome": {"Ok": BIG}})
    assert big["outcome_ref"] == same["outcome_ref"]
    assert big["outcome_ref"] == "sha256:" + __import__("hashlib").sha256(canonical_bytes({"Ok": BIG})).hexdigest()
    s.close()
    again = store.open("v", for_append=False)
    assert again.value(1, "input") == {"doc": BIG}
    assert again.value(again.facts()[2], "outcome") == {"Ok": BIG}
    assert again.value(same, "outcome") == {"Ok": BIG}
    again.verify_files()


def test_inline_limit_boundary(store):
    s = store.create("b", START)
    at = "z" * (1024 - 2)  # JSON "zzz...": exactly 1024 bytes
    assert len(canonical_bytes(at)) == 1024
    assert "arguments" in s.append("Call", {"arguments": at})
    assert "arguments_ref" in s.append("Call", {"arguments": at + "z"})


def test_big_integers_round_trip(store):
    s = store.create("i", dict(START, input={"n": 2**100, "m": -(2**70)}))
    s.append("Reply", {"outcome": {"Ok": [2**200] * 30}})  # by reference
    s.close()
    again = store.open("i", for_append=False)
    assert again.value(1, "input") == {"n": 2**100, "m": -(2**70)}
    assert again.value(2, "outcome") == {"Ok": [2**200] * 30}


def test_a_recorded_inline_limit_is_kept(store):
    store.create("z", START, inline_limit=0).close()
    with store.open("z", for_append=True) as s:
        assert s.inline_limit == 0 and "input_ref" in s.facts()[0]
        assert "arguments_ref" in s.append("Call", {"call": "root#1", "arguments": {}})


def test_damaged_or_lost_values_are_storage_errors(backend, store):
    make_run(store).close()
    ref = store.open("run-1", for_append=False).fact(3)["outcome_ref"]
    backend.damage_value("run-1", ref)
    s = store.open("run-1", for_append=False)
    with pytest.raises(StorageError) as caught:
        s.value(3, "outcome")
    assert caught.value.fact_n == 3
    with pytest.raises(StorageError):
        s.verify_files()
    backend.lose_value("run-1", ref)
    for for_append in (False, True):
        with pytest.raises(StorageError):  # missing and not a recorded hole
            store.open("run-1", for_append=for_append)


def test_sources(backend, store):
    s = store.create("src", START, sources=[SOURCE])
    ref = "sha256:" + __import__("hashlib").sha256(SOURCE.encode()).hexdigest()
    assert s.source(ref) == SOURCE and s.put_source(SOURCE) == ref
    other = s.put_source("x")
    s.close()
    ro = store.open("src", for_append=False)
    assert ro.source(other) == "x"
    with pytest.raises(ValueError):
        ro.source("md5:abc")
    with pytest.raises(StorageError):
        ro.source("sha256:" + "0" * 64)  # never stored
    backend.damage_source("src", ref)
    with pytest.raises(StorageError):
        ro.source(ref)


# -- damage -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage, n", [("content", 1), ("content", 4), ("content", 7), ("chain", 2), ("chain", 7)])
def test_damage_is_a_storage_error(backend, store, damage, n):
    make_run(store).close()
    if damage == "content":
        backend.alter_fact("run-1", n, "spoof", True)
    else:
        backend.break_chain("run-1", n)
    for for_append in (False, True):
        with pytest.raises(StorageError) as caught:
            store.open("run-1", for_append=for_append)
        assert caught.value.fact_n == n
    with pytest.raises(StorageError):  # at open, or by `verify` at the latest
        store.open("run-1", for_append=False, defer=True).verify()
    row = store.scan()["runs"][0]
    assert row["record"] == "unreadable" and row["problem"]["fact"] == n


def test_damaged_host_records_are_a_storage_error(backend, store):
    s = make_run(store, end=False)
    s.host_record({"kind": "paused", "head": s.head})
    s.close()
    backend.damage_host_record("run-1", 0)
    for for_append in (False, True):
        with pytest.raises(StorageError):
            store.open("run-1", for_append=for_append)


def test_an_interrupted_append_is_not_damage(backend, store):
    s = make_run(store, end=False)
    facts = s.facts()
    s.close()
    if not backend.interrupt_append("run-1"):
        pytest.skip("an interrupted append leaves nothing in this store")
    ro = store.open("run-1", for_append=False)
    assert ro.facts() == facts and ro.torn_tail is not None
    with store.open("run-1", for_append=True) as s:  # removes it, and says so
        assert s.facts() == facts
        assert s.append("End", {"outcome": {"Completed": 1}})["n"] == 7
    again = store.open("run-1", for_append=False)
    assert again.torn_tail is None and len(again) == 7


# -- host records ------------------------------------------------------------------------------------


def test_host_records_are_chained_and_kept_in_order(store):
    s = make_run(store, end=False)
    first = {"kind": "paused", "head": s.head, "pending": ["c1:root#2"]}
    assert s.host_record(first) == first
    s.host_record({"kind": "resumed", "at": "t"})
    for refused in ({"kind": 3}, {"no": "kind"}, {"kind": "x", "prev": None}, {"kind": "x", "hash": "h"}, "x"):
        with pytest.raises(ValueError):
            s.host_record(refused)
    for kind in STORE_RECORDS:
        with pytest.raises(ValueError):
            s.host_record({"kind": kind})
    s.close()
    records = [r for r in store.open("run-1", for_append=False).host_records() if r["kind"] not in STORE_RECORDS]
    assert records == [first, {"kind": "resumed", "at": "t"}]


# -- redaction and archive -------------------------------------------------------------------------


def test_redaction_makes_a_hole_and_keeps_the_chain(store):
    make_run(store).close()
    s = store.open("run-1", for_append=True)
    facts = s.facts()
    ref = s.fact(3)["outcome_ref"]
    (record,) = s.redact(3, "outcome")
    assert record == {"kind": "hole", "fact": 3, "field": "outcome", "ref": ref}
    assert s.facts() == facts  # the facts do not change
    with pytest.raises(Hole) as caught:
        s.value(3, "outcome")
    assert (caught.value.fact_n, caught.value.field, caught.value.hash) == (3, "outcome", ref)
    assert s.redact(3) == []  # already a hole
    s.close()
    again = store.open("run-1", for_append=False)  # verification still passes
    assert again.facts() == facts
    assert again.holes() == {(3, "outcome"): ref} and again.is_hole(3, "outcome")
    with pytest.raises(Hole):
        again.value(3, "outcome")
    again.verify_files()  # a hole is not a missing value
    assert again.value(2, "arguments") == {"ticket": "t", "notes": []}
    assert store.scan()["runs"][0]["record"] == "complete"


def test_what_cannot_be_redacted(store):
    s = make_run(store)
    facts = s.facts()
    with pytest.raises(RedactRefused, match="inline"):
        s.redact(2, "arguments")
    with pytest.raises(RedactRefused):
        s.redact(4)  # Choice holds no value
    with pytest.raises(RedactRefused):
        s.redact(2, "call")  # not a value field
    assert s.facts() == facts and s.holes() == {}
    assert [r for r in s.host_records() if r["kind"] == "hole"] == []


def test_redacting_shared_content(store):
    s = store.create("sh", START)
    a = s.append("Reply", {"outcome": {"Ok": BIG}})
    b = s.append("Reply", {"outcome": {"Ok": BIG}})
    s.redact(a["n"], "outcome")
    assert s.value(b, "outcome") == {"Ok": BIG}  # still referenced
    with pytest.raises(Hole):
        s.value(a, "outcome")
    s.redact(b["n"], "outcome")
    c = s.append("Reply", {"outcome": {"Ok": BIG}})  # the same content again is stored again
    assert s.value(c, "outcome") == {"Ok": BIG}
    s.close()
    ro = store.open("sh", for_append=False)
    assert ro.value(c, "outcome") == {"Ok": BIG} and ro.holes().keys() == {(2, "outcome"), (3, "outcome")}


def test_inline_limit_zero_makes_every_value_redactable(store):
    store.create("z", START, inline_limit=0).close()
    s = store.open("z", for_append=True)  # the recorded limit is kept
    assert s.inline_limit == 0
    call = s.append("Call", {"call": "root#1", "arguments": {}})
    assert "arguments_ref" in call
    s.redact(1)
    s.redact(2)
    with pytest.raises(Hole):
        s.value(1, "input")
    s.close()
    assert store.open("z", for_append=False).holes().keys() == {(1, "input"), (2, "arguments")}


def test_redaction_through_the_store(store):
    store.create("z", START, inline_limit=0).close()
    assert [r["field"] for r in store.redact("z", 1)] == ["input"]
    with pytest.raises(Hole):
        store.open("z", for_append=False).value(1, "input")


def test_archive_keeps_the_chain_verifiable(store):
    s = make_run(store, end=False)
    s.append("Call", {"call": "root#2", "arguments": {}})
    s.append("Checkpoint", CHECKPOINT)
    s.append("Reply", {"call": "root#2", "outcome": {"Ok": 1}})
    facts = s.facts()
    assert s.archive() == 6  # facts 2 to 7 move; Start and the latest checkpoint (8) on stay
    kept = s.facts()
    assert kept == [facts[0]] + facts[7:] and s.head == facts[-1]["hash"]
    assert s.archived_checkpoints == 1 and s.latest_checkpoint() == 1
    with pytest.raises(IndexError):
        s.fact(3)
    end = s.append("End", {"outcome": {"Completed": 1}})
    assert end["prev"] == facts[-1]["hash"] and end["n"] == 10
    assert s.archive() == 0  # nothing between Start and the latest checkpoint any more
    s.close()
    again = store.open("run-1", for_append=False)
    assert again.facts() == kept + [end] and again.archived_checkpoints == 1
    assert again.value(1, "input") == START["input"]


def test_archive_through_the_store(store):
    make_run(store).close()
    assert store.archive("run-1") == 4
    assert [f["n"] for f in store.open("run-1", for_append=False).facts()] == [1, 6, 7]


# -- discovery -------------------------------------------------------------------------------------


def test_discovery_rows(store):
    done = make_run(store, "a-complete")
    done_facts = done.facts()
    done.close()
    s = make_run(store, "b-paused", end=False)
    s.host_record({"kind": "paused", "head": s.head, "pending": ["c1:root#2"]})
    s.close()
    s = make_run(store, "c-stale", end=False)
    s.host_record({"kind": "halted", "head": s.head})
    s.append("Reply", {"call": "root#2", "outcome": {"Ok": 1}})
    s.close()
    s = store.create("d-faulted", START)
    s.append("End", {"outcome": {"Faulted": {"kind": "division-by-zero", "message": "m" * 3000,
                                             "location": None, "task": "root"}}})
    s.close()
    result = store.scan()
    assert result["problems"] == [] and result["nextAfter"] is None
    rows = {row["run"]: row for row in result["runs"]}
    assert list(rows) == ["a-complete", "b-paused", "c-stale", "d-faulted"]
    times = {name: rows["a-complete"].pop(name) for name in ("startedAt", "lastActivityAt")}
    assert all(t is None or isinstance(t, str) for t in times.values())  # (a store may keep no times)
    assert rows["a-complete"] == {
        "run": "a-complete", "historyPresent": True, "record": "complete", "truncated": False,
        "ending": "completed", "entry": {"module": "support", "function": "main"},
        "program": START["program"], "lastFact": {"n": 7, "hash": done_facts[-1]["hash"]},
        "hostDecision": None, "problem": None}
    b = rows["b-paused"]
    assert b["record"] == "incomplete" and b["ending"] is None
    assert b["hostDecision"]["kind"] == "paused" and b["hostDecision"]["head"] == b["lastFact"]["hash"]
    assert rows["c-stale"]["record"] == "incomplete" and rows["c-stale"]["hostDecision"] is None
    assert rows["d-faulted"]["record"] == "complete" and rows["d-faulted"]["ending"] == "faulted"
    assert store.open("a-complete", for_append=False).facts() == done_facts  # discovery changed nothing


def test_discovery_pages(store):
    ids = [f"run-{i:02}" for i in range(7)]
    for run in reversed(ids):
        store.create(run, START, durability="none").close()
    seen, after = [], None
    while True:
        page = store.scan(limit=3, after=after)
        seen += [row["run"] for row in page["runs"]]
        after = page["nextAfter"]
        if after is None:
            break
    assert seen == ids
    with pytest.raises(ValueError):
        store.scan(limit=0)


# -- times and reading on (the interface's defaults allow a store without either) ------------------


def test_times_are_for_facts_that_exist_and_in_order(store):
    s = make_run(store)
    s.close()
    times = store.open("run-1", for_append=False).fact_times()
    facts = store.open("run-1", for_append=False).facts()
    assert set(times) <= {f["n"] for f in facts}
    assert all(type(ms) is int and ms > 0 for ms in times.values())
    assert [times[n] for n in sorted(times)] == sorted(times.values())


def test_refresh_reads_on_or_says_it_cannot(store):
    writer = store.create("run-1", START, durability="none")
    reader = store.open("run-1", for_append=False)
    first = reader.refresh()
    assert first in ([], None) and reader.open_calls() == {}
    writer.append("Call", {"call": "root#1", "tool": "planner.next", "arguments": {"big": BIG}})
    writer.sync()
    new = reader.refresh()
    if new is not None:
        assert [f["kind"] for f in new] == ["Call"] and len(reader) == 2
        assert reader.value(2, "arguments") == {"big": BIG} and reader.refresh() == []
        assert list(reader.open_calls()) == ["root#1"]  # (the open calls it knew, and the facts read on)
    else:  # a store that cannot read on: the run is opened again
        assert len(store.open("run-1", for_append=False)) == 2
    writer.close()


# -- a long live run: its older facts left to the store (flowrt/store/shelf.py) --------------------


def call_fields(i: int) -> dict:
    return {"call": f"c{i}", "tool": "t", "arguments": {"i": i, "big": BIG if i % 9 == 0 else ""}}


def test_a_live_run_that_left_its_older_facts_to_the_store_reads_the_same(store, monkeypatch):
    from flowrt.store import shelf as shelving

    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)
    s = store.create("run-1", START)
    model = s.facts()
    for i in range(45):
        if i % 5 == 4:
            model.append(s.append("Checkpoint", dict(CHECKPOINT, arguments={"round": i})))
        elif i % 10 == 3:
            model += s.append_many([("Call", call_fields(i)), ("Reply", {"call": f"c{i}", "outcome": {"Ok": i}})])
        else:
            model.append(s.append("Call", call_fields(i), sync=i % 2 == 0))
        assert len(s.verified_facts().kept) < 12 and s.facts() == model
    assert len(s) == len(model) and s.head == model[-1]["hash"]
    for index, fact in enumerate(model):
        assert s.fact(fact["n"]) == fact and s.fact_at(index) == fact
    assert s.facts_from(2, 10) == model[2:12] and list(reversed(s.verified_facts())) == model[::-1]
    latest = max(i for i, f in enumerate(model) if f["kind"] == "Checkpoint")
    assert s.latest_checkpoint() == latest
    assert s.value(model[1]["n"], "arguments") == call_fields(0)["arguments"]  # by reference
    assert s.archive() == latest - 1
    model = [model[0]] + model[latest:]
    for i in range(45, 70):
        model.append(s.append("Call", call_fields(i)))
    assert s.facts() == model and s.fact(model[2]["n"]) == model[2]
    s.close()
    with store.open("run-1", for_append=False) as again:
        assert again.facts() == model


def test_a_shelved_fact_changed_under_a_live_run_is_a_storage_error(backend, monkeypatch):
    from flowrt.store import shelf as shelving

    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)
    s = backend.store.create("run-1", START, durability="none")
    for i in range(1, 31):
        s.append("Call", call_fields(i))
    backend.alter_fact("run-1", 5, "arguments", {"i": 55, "big": ""})
    with pytest.raises(StorageError):
        s.fact(5)
    with pytest.raises(StorageError):
        s.facts()
    assert s.fact(30)["arguments"]["i"] == 29  # kept: read from memory
    s.close()


# -- a reader going through a long history in order: the facts it passed left to the store --------


def test_a_reader_that_released_the_facts_it_passed_reads_the_same(store):
    s = store.create("run-1", START, durability="none")
    for i in range(1, 61):
        if i % 7 == 0:
            s.append("Checkpoint", dict(CHECKPOINT, arguments={"round": i}))
        else:
            s.append("Call", call_fields(i))
    s.release_before(40)  # an appender leaves its facts on its own: nothing here
    assert s.verified_facts().base == 0
    model = s.facts()
    s.close()
    reader = store.open("run-1", for_append=False, defer=True)
    for index in range(0, 61, 10):
        assert reader.facts_from(index, 10) == model[index:index + 10]
        reader.release_before(index)
        shelf = reader.verified_facts()
        assert shelf.base == (index if index >= 2 else 0)
        assert reader.fact_at(index) == model[index] and len(shelf.kept) <= len(model) - shelf.base
    reader.release_before(1000)  # (past the end: the newest fact stays held)
    assert reader.verified_facts().kept
    reader.verify()
    assert reader.facts() == model and list(reader.verified_facts()) == model and len(reader) == 61
    for index, fact in enumerate(model):
        assert reader.fact(fact["n"]) == fact and reader.fact_at(index) == fact
    assert reader.head == model[-1]["hash"] and reader.latest_checkpoint() == 56
    assert reader.value(model[9]["n"], "arguments") == call_fields(9)["arguments"]  # by reference
    reader.close()


def test_a_released_fact_changed_under_its_reader_is_a_storage_error(backend):
    s = backend.store.create("run-1", START, durability="none")
    for i in range(1, 31):
        s.append("Call", call_fields(i))
    s.close()
    reader = backend.store.open("run-1", for_append=False, defer=True)
    reader.verify()
    reader.release_before(20)
    backend.alter_fact("run-1", 5, "arguments", {"i": 55, "big": ""})
    with pytest.raises(StorageError):
        reader.fact(5)
    with pytest.raises(StorageError):
        reader.facts()
    assert reader.fact(31)["arguments"]["i"] == 30  # held: read from memory
    reader.close()


def test_a_deferred_open_read_a_page_at_a_time_reads_and_fails_as_an_eager_one(backend, monkeypatch):
    """Pages of 16 rows (PostgreSQL), 8 facts verified at a time (both): the facts, released as
    they are passed, come out as an eager open has them; damage near the end is raised by the
    deferred open, once asked for everything, as the eager open raises it."""
    from flowrt.store import postgres_verify
    from flowrt.store import reading as store_reading

    monkeypatch.setattr(postgres_verify.RowPages, "PAGE", 16)
    monkeypatch.setattr(store_reading, "_VERIFY_STEP", 8)
    s = backend.store.create("run-1", START, durability="none")
    for i in range(1, 151):
        s.append("Call", call_fields(i))
    s.close()
    model = backend.store.open("run-1", for_append=False).facts()
    reader = backend.store.open("run-1", for_append=False, defer=True)
    assert reader.deferred
    for index in range(0, len(model), 5):
        assert reader.fact_at(index) == model[index]
        reader.release_before(index)
    assert reader.fact_at(len(model)) is None and not reader.deferred
    assert reader.facts() == model and reader.head == model[-1]["hash"]
    reader.close()
    backend.alter_fact("run-1", 140, "arguments", {"i": 0, "big": ""})
    with pytest.raises(StorageError) as eager:
        backend.store.open("run-1", for_append=False)
    reader = backend.store.open("run-1", for_append=False, defer=True)
    assert reader.fact_at(20) == model[20]  # the sound beginning is served
    with pytest.raises(StorageError) as late:
        reader.verify()
    assert str(late.value) == str(eager.value)
    reader.close()


def test_an_open_for_appending_leaves_the_facts_it_passed_and_knows_the_open_calls(backend, monkeypatch):
    """A resume's open goes through the facts a step at a time: it ends holding the newest only,
    reads the rest back as they were, numbers checkpoints without reading them back, and knows
    the open calls (a Call with no Reply that no Stop closed) from its pass, appends included."""
    from flowrt.store import shelf as shelving

    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)
    s = backend.store.create("run-1", START, durability="none")
    for i in range(1, 80):
        if i % 9 == 0:
            s.append("Checkpoint", dict(CHECKPOINT, arguments={"round": i}))
        elif i % 4 == 0:
            s.append("Reply", {"call": f"c{i - 3}", "outcome": {"Ok": i}})
        elif i % 13 == 0:
            s.append("Stop", {"task": "root/1", "by": "root", "found": "Running", "closed": [f"c{i - 2}"]})
        else:
            s.append("Call", call_fields(i))
    model = s.facts()
    s.close()
    expected = open_calls_among(model)
    assert 5 < len(expected) < 40
    s = backend.store.open("run-1", for_append=True, durability="none")
    shelf = s.verified_facts()
    assert shelf.base > 40 and len(shelf.kept) < 12 + 12  # (at most a step past the newest kept)
    assert s.open_calls() == expected and list(s.open_calls()) == list(expected)
    checkpoints = [i for i, f in enumerate(model) if f["kind"] == "Checkpoint"]
    for index in (0, 1, checkpoints[0], checkpoints[3], checkpoints[-1], len(model) - 1):
        assert shelf.checkpoints_through(index) == sum(1 for f in model[1:index + 1] if f["kind"] == "Checkpoint")
    assert s.facts() == model and s.latest_checkpoint() == checkpoints[-1]
    first_open = next(iter(expected))
    model.append(s.append("Reply", {"call": first_open, "outcome": {"Ok": 0}}))
    model.append(s.append("Call", call_fields(100)))
    assert s.open_calls() == open_calls_among(model) and first_open not in s.open_calls()
    s.close()
    with backend.store.open("run-1", for_append=False) as again:
        assert again.facts() == model and again.open_calls() == open_calls_among(model)
