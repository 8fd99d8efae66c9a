"""Reading a history fast: the quick per-line check (flowrt/store/reading.py `_HistoryReader`) must accept
exactly what the line-by-line reference (`loads_canonical` then `_check_fact`, as docs/trace.md
section 10 describes) accepts, and report the same first damage; a deferred open must end in the
same facts, or raise the same error, as an eager one."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import canonical as store_canonical
from flowrt.store import chain as store_chain
from flowrt.store import durable as store_durable
from flowrt.store import errors as store_errors
from flowrt.store import format as store_format
from flowrt.store import reading as store_reading
from flowrt.store import RunStore, StorageError, TornTail, canonical_bytes, fact_hash

START = {
    "program": "sha256:" + "ab" * 32,
    "std": "std@v1",
    "entry": {"module": "m", "function": "main"},
    "input": {"n": 3},
    "modules": [{"module": "m", "hash": "sha256:" + "cd" * 32}],
}


def reference(data: bytes, run_id: str | None, anchor: dict | None = None):
    """The reader docs/trace.md section 10 describes, one line at a time, with no shortcut."""
    facts: list[dict] = []
    size = len(data.rstrip(b"\0"))  # NUL bytes that end the file are reserved space
    pos, prev, ended = 0, None, False
    while pos < size:
        newline = data.find(b"\n", pos)
        if newline < 0:
            return facts, pos, TornTail(pos, size - pos), None
        n = facts[-1]["n"] + 1 if facts else 1
        line = data[pos:newline]
        try:
            obj = store_canonical.loads_canonical(line)
        except store_canonical._NotJSON:
            if b"\0" in line and (newline + 1 == size or size - pos <= store_durable._TEAR_WINDOW):
                return facts, pos, TornTail(pos, size - pos), None
            return facts, pos, None, ("the line is not JSON", n)
        except store_canonical._NotCanonical:
            return facts, pos, None, ("the line is not canonical JSON", n)
        if anchor is not None and len(facts) == 1 and isinstance(obj, dict) \
                and obj.get("n") == anchor["through"] + 1 and anchor["through"] > 1:
            n, prev = anchor["through"] + 1, anchor["head"]
        problem = store_chain._check_fact(obj, n, prev, ended, run_id)
        if problem is not None:
            return facts, pos, None, (problem, n)
        facts.append(obj)
        prev, ended = obj["hash"], obj["kind"] == "End"
        pos = newline + 1
    return facts, pos, None, None


def chain(facts: list[dict]) -> list[dict]:
    """Number, link and hash the facts (each a dict of fields with its `kind`)."""
    out, prev = [], None
    for n, fields in enumerate(facts, 1):
        fact = dict(fields, n=n, prev=prev)
        fact["hash"] = fact_hash(fact)
        out.append(fact)
        prev = fact["hash"]
    return out


def history(rounds: int = 6, big: bool = True) -> list[dict]:
    facts = [dict(START, kind="Start", data=store_format.DATA_VERSION, run="run-1")]
    for i in range(rounds):
        facts.append({"kind": "Call", "call": f"root#{i + 1}", "tool": "m.t", "fingerprint": "f",
                      "arguments": {"n": i, "deep": {"hash": "sha256:" + "0" * 64, "kind": "Call"}}})
        facts.append({"kind": "Reply", "call": f"root#{i + 1}",
                      "outcome": {"Ok": 2 ** 70 if big and i == 2 else [i, "é", None, True]}})
        if i % 3 == 2:
            facts.append({"kind": "Checkpoint", "function": {"module": "m", "name": "loop"},
                          "arguments": {"n": i}})
    facts.append({"kind": "Choice", "task": "root", "picked": "root/2"})
    facts.append({"kind": "Stop", "task": "root/1", "by": "root", "found": "Running", "closed": []})
    facts.append({"kind": "End", "outcome": {"Completed": 7}, "ending": "completed"})
    return chain(facts)


def encode(facts: list[dict]) -> bytes:
    return b"".join(canonical_bytes(f) + b"\n" for f in facts)


def quick(data: bytes, run_id: str | None = "run-1", count: int | None = None):
    reader = store_reading._HistoryReader(data, run_id, None)
    if count is None:
        reader.read()
    else:
        while not reader.read(count):
            pass
    error = (reader.error.message, reader.error.fact_n) if reader.error else None
    return reader.facts, reader.pos, reader.torn, error


def test_a_sound_history_reads_the_same_either_way_in_any_steps():
    data = encode(history())
    expected = reference(data, "run-1")
    assert expected[3] is None and len(expected[0]) == len(history())
    for count in (None, 1, 2, 5, 1000):
        assert quick(data, count=count) == expected


def mutations(data: bytes, rng: random.Random):
    """Damage of the kinds a disk, a crash or a hand can do."""
    lines = data.split(b"\n")[:-1]
    k = rng.randrange(len(lines))
    flip = bytearray(data)
    at = rng.randrange(len(data))
    flip[at] = (flip[at] + rng.randrange(1, 255)) % 256
    yield "flip", bytes(flip)
    yield "cut", data[:rng.randrange(len(data))]
    yield "nul tail", data + b"\0" * rng.randrange(1, 9) + b"\n"
    yield "drop", b"".join(line + b"\n" for i, line in enumerate(lines) if i != k)
    if k + 1 < len(lines):
        swapped = list(lines)
        swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
        yield "swap", b"".join(line + b"\n" for line in swapped)
    yield "spaces", b"".join((line.replace(b":", b": ", 1) if i == k else line) + b"\n"
                             for i, line in enumerate(lines))
    yield "duplicate", b"".join(line + b"\n" for line in lines[:k + 1] + lines[k:])


@pytest.mark.parametrize("seed", range(40))
def test_damage_is_found_where_and_as_the_reference_finds_it(seed):
    rng = random.Random(seed)
    data = encode(history(rounds=rng.randrange(1, 8)))
    for name, damaged in mutations(data, rng):
        expected = reference(damaged, "run-1")
        for count in (None, 1, 3):
            assert quick(damaged, count=count) == expected, (name, count)


def test_refit_facts_with_a_valid_chain_are_checked_field_by_field():
    """Damage a hand could make consistent with the chain (every hash recomputed): the quick
    check refuses it and the reference's words report it."""
    base = [{k: v for k, v in f.items() if k not in ("n", "prev", "hash")} for f in history(rounds=2)]
    reply = next(i for i, f in enumerate(base) if f["kind"] == "Reply")
    cases = {
        "not a number": (1, lambda f: f.update(n=str(f["n"]))),
        "a bool number": (1, lambda f: f.update(n=True)),
        "unknown kind": (1, lambda f: f.update(kind="Guess")),
        "both value and ref": (reply, lambda f: f.update(outcome_ref="sha256:" + "1" * 64)),
        "bad ref": (reply, lambda f: (f.pop("outcome"), f.update(outcome_ref="sha256:XYZ"))),
        "null ref": (reply, lambda f: (f.pop("outcome"), f.update(outcome_ref=None))),
        "bad ending": (len(base) - 1, lambda f: f.update(ending="faulted")),
        "other run": (0, lambda f: f.update(run="run-2")),
        "other data": (0, lambda f: f.update(data="flow-data/0")),
    }
    for name, (index, change) in cases.items():
        facts, prev = [], None
        for n, fields in enumerate(base, 1):
            fact = dict(fields, n=n, prev=prev)
            if n - 1 == index:
                change(fact)
            fact["hash"] = fact_hash(fact)
            facts.append(fact)
            prev = fact["hash"]
        data = encode(facts)
        expected = reference(data, "run-1")
        assert expected[3] is not None, name
        assert quick(data) == expected, name
    forged = history(rounds=2)
    forged[1] = dict(forged[1], hash=7)
    data = encode(forged)
    assert quick(data) == reference(data, "run-1")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=3), st.integers(min_value=0, max_value=10_000), st.integers(1, 4))
def test_arbitrary_bytes_spliced_in_read_as_the_reference_reads_them(junk, where, step):
    data = encode(history(rounds=3))
    at = where % (len(data) + 1)
    damaged = data[:at] + junk + data[at:]
    assert quick(damaged, count=step) == reference(damaged, "run-1")


def run_dir(tmp_path, facts, run="run-1", tail=b""):
    path = tmp_path / run
    (path / "values").mkdir(parents=True)
    (path / "sources").mkdir()
    (path / "history.jsonl").write_bytes(encode(facts) + tail)
    return str(tmp_path)


def test_a_deferred_open_ends_in_the_same_store(tmp_path):
    root = run_dir(tmp_path, history(rounds=30), tail=b'{"partial')
    eager = RunStore.open(root, "run-1", for_append=False)
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.deferred and lazy.fact(1) == eager.fact(1)
    assert lazy.fact_at(10) == eager.facts()[10]
    assert lazy.facts_from(20, 5) == eager.facts()[20:25]
    assert lazy.fact_at(len(eager) + 5) is None and not lazy.deferred
    assert lazy.facts() == eager.facts() and lazy.torn_tail == eager.torn_tail
    assert lazy.head == eager.head and lazy.ended == eager.ended


def test_a_deferred_open_raises_what_an_eager_one_would_when_asked_for_everything(tmp_path):
    facts = history(rounds=4000, big=False)
    assert len(facts) > 2 * store_reading._VERIFY_STEP
    data = bytearray(encode(facts))
    data[-40] ^= 0x01  # damage near the end, far past what a deferred open reads first
    (tmp_path / "run-1" / "values").mkdir(parents=True)
    (tmp_path / "run-1" / "history.jsonl").write_bytes(bytes(data))
    with pytest.raises(StorageError) as eager:
        RunStore.open(str(tmp_path), "run-1", for_append=False)
    lazy = RunStore.open(str(tmp_path), "run-1", for_append=False, defer=True)
    assert lazy.fact_at(3) == facts[3]  # the sound beginning is served
    for ask in (lazy.verify, lambda: lazy.facts(), lambda: lazy.fact_at(10 ** 6), lambda: len(lazy)):
        with pytest.raises(StorageError) as late:
            ask()
        assert str(late.value) == str(eager.value)


def test_a_deferred_open_finds_the_latest_checkpoint_without_reading_everything_when_there_is_none(tmp_path):
    facts = [f for f in history(rounds=40) if f["kind"] != "Checkpoint"]
    root = run_dir(tmp_path, chain([{k: v for k, v in f.items() if k not in ("n", "prev", "hash")} for f in facts]))
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.latest_checkpoint() is None and lazy.deferred
    with_checkpoints = run_dir(tmp_path / "other", history(rounds=40))
    store = RunStore.open(with_checkpoints, "run-1", for_append=False, defer=True)
    eager = RunStore.open(with_checkpoints, "run-1", for_append=False)
    assert store.latest_checkpoint() == max(i for i, f in enumerate(eager.facts()) if f["kind"] == "Checkpoint")


def test_a_deferred_open_of_a_nested_checkpoint_lookalike_still_reads_to_decide(tmp_path):
    facts = history(rounds=2)
    facts = [f for f in facts if f["kind"] != "Checkpoint"]
    bare = [{k: v for k, v in f.items() if k not in ("n", "prev", "hash")} for f in facts]
    bare[1]["arguments"] = {"kind": "Checkpoint"}  # the bytes, nested, not a Checkpoint fact
    root = run_dir(tmp_path, chain(bare))
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.latest_checkpoint() is None


def test_holes_are_met_before_a_deferred_verification_ends(tmp_path):
    root = str(tmp_path)
    store = RunStore.create(root, "run-1", START, durability="none", inline_limit=0)
    store.append_many([item for i in range(store_reading._VERIFY_STEP) for item in (
        ("Call", {"call": f"root#{i}", "tool": "m.t", "fingerprint": "f", "arguments": {"i": i}}),
        ("Reply", {"call": f"root#{i}", "outcome": {"Ok": i}}))])
    store.redact(5, "outcome")  # the Reply to root#1
    store.close()
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    with pytest.raises(store_errors.Hole):
        lazy.value(lazy.fact_at(4), "outcome")
    assert lazy.value(lazy.fact_at(2), "outcome") == {"Ok": 0}
    assert lazy.deferred
    lazy.verify()
    assert not lazy.deferred and lazy.holes() == {(5, "outcome"): lazy.fact(5)["outcome_ref"]}


def test_deferred_is_only_for_reading(tmp_path):
    root = run_dir(tmp_path, history(rounds=30))
    store = RunStore.open(root, "run-1", for_append=True, defer=True)
    try:
        assert not store.deferred
    finally:
        store.close()


def test_the_reader_leaves_the_collector_as_it_found_it():
    import gc

    data = encode(history())
    gc.disable()
    try:
        quick(data)
        assert not gc.isenabled()
    finally:
        gc.enable()
    quick(data)
    assert gc.isenabled()


def test_a_checkpoint_in_the_deferred_part_is_found(tmp_path):
    facts = history(rounds=40)
    root = run_dir(tmp_path, facts)
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    latest = lazy.latest_checkpoint()
    assert facts[latest]["kind"] == "Checkpoint"
    assert all(f["kind"] != "Checkpoint" for f in facts[latest + 1:])
    assert os.path.exists(os.path.join(root, "run-1", "history.jsonl"))


@pytest.mark.parametrize("window", [1, 64, 300, 5000])
def test_lines_split_a_window_at_a_time_read_the_same(monkeypatch, window):
    """Lines are split a window of bytes at a time; lines longer than a window, damage and torn
    tails across window edges read as the reference reads them."""
    monkeypatch.setattr(store_reading, "_WINDOW", window)
    rng = random.Random(window)
    data = encode(history(rounds=5))
    assert quick(data, count=3) == reference(data, "run-1")
    for name, damaged in mutations(data, rng):
        assert quick(damaged, count=2) == reference(damaged, "run-1"), name
        assert quick(damaged) == reference(damaged, "run-1"), name


@pytest.mark.parametrize("taken", [0, 3, 9], ids=["none-taken", "durable-fact-held", "durable-fact-taken"])
@pytest.mark.parametrize("sound", [True, False], ids=["sound", "changed"])
def test_a_reader_whose_owner_took_facts_off_the_front_still_checks_the_durable_fact(taken, sound):
    """A store that leaves verified facts to the file while its reader reads on
    (`RunStore.release_before`) takes them off the front of `facts`, counts them in `shelved`
    and notes the durable fact's hash if that fact is among them: the reader's check of the
    durable mark at the end finds the same fault, or none, as if it held every fact."""
    facts = history()
    durable_n = 6
    head = facts[durable_n - 1]["hash"] if sound else "sha256:" + "1" * 64
    reader = store_reading._HistoryReader(encode(facts), "run-1", None, {"facts": durable_n, "head": head})
    assert not reader.read(10)
    for fact in reader.facts[:taken]:
        if fact["n"] == reader.durable:
            reader.durable_seen = fact["hash"]
    del reader.facts[:taken]
    reader.shelved += taken
    assert reader.read()
    assert [f["n"] for f in reader.facts] == list(range(taken + 1, len(facts) + 1))
    if sound:
        assert reader.error is None
    else:
        assert (reader.error.message, reader.error.fact_n) == \
            ("the fact does not have the hash it had when it was durable", durable_n)


def test_a_deferred_open_that_releases_as_it_reads_ends_in_the_same_store(tmp_path, monkeypatch):
    """Verified a few facts at a time and the facts passed released at each step: the values by
    reference, the durable mark (a fact in the middle: the host stopped without closing the run)
    and every fact come out as an eager open has them."""
    monkeypatch.setattr(store_reading, "_VERIFY_STEP", 4)
    live = RunStore.create(str(tmp_path / "live"), "run-1", dict(START))
    for i in range(12):
        live.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {"big": "x" * 2000 if i % 4 == 0 else i}})
    live.close()
    live = RunStore.open(str(tmp_path / "live"), "run-1", for_append=True)
    for i in range(12, 40):  # after the durable mark its open wrote, and never closed
        live.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {"big": "x" * 2000 if i % 4 == 0 else i}})
    import shutil

    shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    live.close()
    root = str(tmp_path / "crashed")
    eager = RunStore.open(root, "run-1", for_append=False)
    model = eager.facts()
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    for index in range(0, len(model), 3):
        assert lazy.fact_at(index) == model[index]
        lazy.release_before(index)
    assert lazy.verified_facts().base > 0 and not lazy.deferred
    assert lazy.facts() == model and lazy.head == eager.head
    for fact in model[1:]:
        if fact["n"] % 4 == 2:  # by reference
            assert lazy.value(fact["n"], "arguments") == eager.value(fact["n"], "arguments")
