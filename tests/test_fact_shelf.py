"""A live run's older facts left to history.jsonl (flowrt/store/shelf.py): every reading method
of a store that shelved gives what a store holding every fact gives, a shelved fact read back is
verified, a failed sync never reaches a shelved fact, and a host driving a long run holds a
bounded number of facts. The store's thresholds are made small here so that a few dozen facts
shelve many times."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import RunStore, StorageError, canonical_bytes
from flowrt.store import shelf as shelving
from flowrt.store import durable as store_durable
from flowrt.store.shelf import FactShelf

START = {"program": "sha256:" + "ab" * 32, "std": "std@v1",
         "entry": {"module": "m", "function": "main"}, "input": {}, "modules": []}
BIG = "x" * 1500  # over the inline limit: kept by reference


@pytest.fixture(autouse=True)
def small_shelves(monkeypatch):
    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)


def fields_of(kind: str, i: int) -> dict:
    if kind == "Call":
        return {"call": f"c{i}", "tool": "t.echo", "arguments": {"n": i, "big": BIG if i % 7 == 0 else ""}}
    if kind == "Reply":
        return {"call": f"c{i}", "outcome": {"Ok": i}}
    if kind == "Checkpoint":
        return {"function": {"module": "m", "name": "loop"}, "types": [], "arguments": {"n": i}}
    return {"task": "root", "picked": f"root/{i}"}


def check_reads(s: RunStore, model: list[dict]) -> None:
    """Every reading method against the facts written, as a list."""
    assert s.facts() == model and len(s) == len(model)
    assert list(s.verified_facts()) == model and s.verified_facts() == model
    assert list(reversed(s.verified_facts())) == model[::-1]
    assert s.head == model[-1]["hash"]
    for index in range(len(model)):
        assert s.fact_at(index) == model[index]
        assert s.fact(model[index]["n"]) == model[index]
        assert s.verified_facts()[index - len(model)] == model[index]
    assert s.fact_at(len(model)) is None
    for first in range(0, len(model), 5):
        assert s.facts_from(first, 7) == model[first:first + 7]
        assert s.verified_facts()[first:first + 9] == model[first:first + 9]
    checkpoints = [i for i, f in enumerate(model) if f["kind"] == "Checkpoint"]
    assert s.latest_checkpoint() == (checkpoints[-1] if checkpoints else None)
    for fact in model:
        for field in ("arguments", "outcome"):
            if field in fact or field + "_ref" in fact:
                assert s.value(fact["n"], field) == (fact.get(field) or s.value(fact, field))
    with pytest.raises(IndexError):
        s.fact(model[-1]["n"] + 1)


def append_rounds(s: RunStore, model: list[dict], numbers: range) -> None:
    """A Checkpoint, a Call and its Reply after another, appended to the store and the model,
    never more than SHELVE_AT of them held."""
    for i in numbers:
        kind = ("Checkpoint", "Call", "Reply")[i % 3]
        model.append(s.append(kind, fields_of(kind, i)))
        assert len(s._facts.kept) < 12


def test_a_long_history_shelves_and_reads_the_same(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    model = s.facts()
    append_rounds(s, model, range(60))
    assert s._facts.base > 40
    check_reads(s, model)
    s.close()
    with RunStore.open(root, "run-1", for_append=False) as again:
        assert again.facts() == model


def test_a_resumed_store_shelves_what_it_reads_as_it_opens(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    model = s.facts() + s.append_many([("Call", fields_of("Call", i)) for i in range(30)])
    model += s.append_many([("Reply", fields_of("Reply", i)) for i in range(0, 30, 3)])
    s.close()
    s = RunStore.open(root, "run-1", for_append=True, durability="fsync")
    assert 0 < s._facts.base and len(s._facts.kept) < 12 + 3  # a step read, all but the newest left
    assert list(s.open_calls()) == [f"c{i}" for i in range(30) if i % 3]
    check_reads(s, model)
    model.append(s.append("Reply", fields_of("Reply", 1)))
    model.append(s.append("Call", fields_of("Call", 40)))
    assert list(s.open_calls()) == [f"c{i}" for i in range(2, 30) if i % 3] + ["c40"]
    assert s.open_calls()["c40"] == model[-1]
    check_reads(s, model)
    s.close()


def test_a_damaged_shelved_line_is_a_storage_error_never_a_wrong_fact(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    for i in range(30):
        s.append("Call", fields_of("Call", i))
    assert s._facts.base > 10
    path = os.path.join(root, "run-1", "history.jsonl")
    with open(path, "r+b") as handle:
        data = handle.read()
        line_at = sum(len(line) + 1 for line in data.split(b"\n")[:4])  # fact 5 (Call i = 3)
        at = data.index(b'"n":3}', line_at)
        handle.seek(at + 4)
        handle.write(b"7")  # same length, another value: the line no longer has its hash
    with pytest.raises(StorageError) as raised:
        s.fact(5)
    assert raised.value.fact_n == 5
    with pytest.raises(StorageError):
        s.facts()
    with pytest.raises(StorageError):
        s.fact(6)  # (read with the fact before it, whose hash its chain goes on from)
    assert s.fact(4)["arguments"]["n"] == 2 and s.fact(7)["arguments"]["n"] == 5  # the rest is sound
    s.close()


def test_a_failed_sync_cuts_only_facts_still_held(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    durable = s.facts() + [s.append("Call", fields_of("Call", i)) for i in range(20)]
    for i in range(20, 40):  # unsynced: more than SHELVE_AT of them, none may be shelved
        s.append("Reply", fields_of("Reply", i), sync=False)
    assert s._facts.base <= len(durable)

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_durable, "_sync_appended", failing)
    with pytest.raises(StorageError):
        s.sync()
    monkeypatch.undo()
    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)
    check_reads(s, durable)
    durable.append(s.append("Reply", fields_of("Reply", 99)))
    check_reads(s, durable)
    s.close()


def test_archive_of_a_store_that_shelved(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    model = s.facts()
    append_rounds(s, model, range(40))
    latest = max(i for i, f in enumerate(model) if f["kind"] == "Checkpoint")
    assert s.archive() == latest - 1
    model = [model[0]] + model[latest:]
    check_reads(s, model)
    for i in range(40, 70):
        model.append(s.append("Call", fields_of("Call", i)))
    assert s._facts.base > 1
    check_reads(s, model)
    s.close()
    with RunStore.open(root, "run-1", for_append=False) as again:
        assert again.facts() == model


operation = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["Call", "Reply", "Checkpoint", "Choice"])),
    st.tuples(st.just("many"), st.integers(1, 9)),
    st.tuples(st.just("unsynced"), st.integers(1, 5)),
    st.tuples(st.just("archive"), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=25), st.sampled_from(["none", "fsync"]))
def test_any_sequence_of_writes_reads_as_the_facts_written(operations, durability):
    root = tempfile.mkdtemp()
    try:
        s = RunStore.create(root, "run-1", START, durability=durability)
        model = s.facts()
        i = 0
        for what, arg in operations:
            i += 1
            if what == "append":
                model.append(s.append(arg, fields_of(arg, i)))
            elif what == "many":
                model += s.append_many([("Call", fields_of("Call", i * 10 + k)) for k in range(arg)])
            elif what == "unsynced":
                for k in range(arg):
                    model.append(s.append("Reply", fields_of("Reply", i * 10 + k), sync=False))
                s.sync()
            elif what == "archive":
                latest = max((j for j, f in enumerate(model) if f["kind"] == "Checkpoint"), default=None)
                moved = s.archive()
                if latest is not None and latest > 1:
                    assert moved == latest - 1
                    model = [model[0]] + model[latest:]
            else:
                s.close()
                s = RunStore.open(root, "run-1", for_append=True, durability=durability)
            check_reads(s, model)
        s.close()
        with RunStore.open(root, "run-1", for_append=False) as again:
            assert again.facts() == model
    finally:
        shutil.rmtree(root)


def test_the_shelf_is_a_sequence_like_a_list():
    facts = [{"n": 1, "kind": "Start"}] + [{"n": n, "kind": "Call"} for n in range(2, 9)]
    shelf = FactShelf(list(facts))
    assert shelf == facts and len(shelf) == 8 and shelf[-1] == facts[-1] and shelf[2:5] == facts[2:5]
    assert shelf[::2] == facts[::2] and shelf.index_of(5) == 4 and shelf.index_of(9) is None
    assert not FactShelf([]) and FactShelf([]).index_of(1) is None
    with pytest.raises(IndexError):
        shelf[-9]
    with pytest.raises(TypeError):
        hash(shelf)


def test_a_host_driving_a_long_run_holds_a_bounded_number_of_facts(tmp_path, monkeypatch):
    import flowrt

    held = []
    real_shelve = FactShelf.shelve

    def noting(self, count):
        real_shelve(self, count)
        held.append(len(self.kept))

    monkeypatch.setattr(FactShelf, "shelve", noting)
    program = tmp_path / "echo.flow"
    program.write_text("@tool pub flow echo(n: Int) -> Int\n\n"
                       "pub flow main(n: Int) -> Int !tool = loop(n, 0)\n\n"
                       "flow loop(n: Int, acc: Int) -> Int !tool = "
                       "if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }\n")
    host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=str(tmp_path / "runs"), durability="none")
    result = host.run(str(program), {"n": 200})
    assert result.exit_code == 0 and result.output == sum(range(201))
    assert len(held) > 10 and max(held) == 3
    with RunStore.open(str(tmp_path / "runs"), result.run_id, for_append=False) as stored:
        assert stored.ended and len(stored) > 400


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.lists(st.integers(0, 2**62), max_size=8)), max_size=12),
       st.dictionaries(st.integers(1, 80), st.integers(0, 2**40), max_size=10))
def test_known_times_hold_what_a_dict_of_fact_times_would(stretches, mapping):
    from flowrt.store.known_times import KnownTimes

    known, model = KnownTimes(), {}
    for first, times in stretches:
        known.put(first, times)
        model.update(zip(range(first, first + len(times)), times))
        assert known.as_dict() == model
    known.update(mapping)
    model.update(mapping)
    assert known.as_dict() == model and KnownTimes(model).as_dict() == model


@pytest.mark.parametrize("window", [16, 200, 1 << 20])
def test_lines_noted_a_window_at_a_time_are_where_they_are(tmp_path, window, monkeypatch):
    """`HistoryLines.note` splits the file a window at a time (doubled for a line longer than
    it): the offsets it notes are every line's, and a resume that shelves after an open of a
    long history (one note of thousands of lines) reads every fact back as it was."""
    monkeypatch.setattr(shelving, "NOTE_WINDOW", window)
    store = RunStore.create(str(tmp_path), "run-1", dict(START), durability="none")
    for i in range(2, 700):
        store.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {"i": i, "pad": "x" * (i % 97)}})
    model = store.facts()
    store.close()
    data = (tmp_path / "run-1" / "history.jsonl").read_bytes().rstrip(b"\0")
    lines = shelving.HistoryLines(str(tmp_path / "run-1"))
    lines.note(600, 0, len(data))
    expected, at = [], 0
    for line in data.split(b"\n")[:600]:
        expected.append(at)
        at += len(line) + 1
    assert list(lines.starts) == expected[1:] and lines.kept_at == at
    with pytest.raises(StorageError):
        shelving.HistoryLines(str(tmp_path / "run-1")).note(len(model) + 5, 0, len(data))
    monkeypatch.setattr(shelving, "SHELVE_AT", 64)
    resumed = RunStore.open(str(tmp_path), "run-1", for_append=True, durability="none")
    resumed.append("Call", {"call": "last", "tool": "m.t", "arguments": {}})
    assert resumed.verified_facts().base > 0
    assert resumed.facts()[:-1] == model
    resumed.close()


def test_picked_facts_are_the_facts_at_those_indexes(tmp_path, monkeypatch):
    monkeypatch.setattr(shelving, "SHELVE_AT", 64)
    monkeypatch.setattr(shelving, "LOAD_STEP", 50)
    store = RunStore.create(str(tmp_path), "run-1", dict(START), durability="none")
    for i in range(2, 400):
        store.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {"i": i}})
    shelf = store.verified_facts()
    assert shelf.base > 200
    model = store.facts()
    for indexes in ([], [0], [0, 1, 2, 3], list(range(0, len(model), 7)), [5, 120, 121, 170, len(model) - 1]):
        assert list(shelf.picked(indexes)) == [model[i] for i in indexes]
    store.close()


class CountingLoader:
    """A loader over facts held in memory that keeps each range it was asked for."""

    def __init__(self, facts: list[dict]) -> None:
        self.facts = facts
        self.asked: list[tuple[int, int]] = []

    def load(self, first: int, stop: int, shelf: FactShelf) -> list[dict]:
        self.asked.append((first, stop))
        return self.facts[first:stop]


@given(st.lists(st.integers(min_value=-1, max_value=119), max_size=60), st.integers(1, 40))
def test_shelved_facts_asked_by_index_are_the_facts_there_and_a_walk_reads_ahead(indexes, step):
    facts = [{"n": 1, "kind": "Start"}] + [{"n": n, "kind": "Call"} for n in range(2, 121)]
    loader = CountingLoader(facts)
    shelf = FactShelf(list(facts), loader)
    shelf.shelve(100)
    original = shelving.LOAD_STEP
    shelving.LOAD_STEP = step
    try:
        assert [shelf[i] for i in indexes] == [facts[i] for i in indexes]
        assert all(stop - first == 1 or stop - first == min(step, 100 - first) for first, stop in loader.asked)
        shelf = FactShelf(list(facts), loader)
        shelf.shelve(100)  # (Start and the 99 facts after it)
        loader.asked.clear()
        walked = [shelf[i] for i in range(1, len(facts))]
    finally:
        shelving.LOAD_STEP = original
    assert walked == facts[1:]
    # a walk in order from index 1 reads the shelved facts a step at a time, never one each
    assert len(loader.asked) == -(-99 // step)
    assert all(stop - first == min(step, 100 - first) for first, stop in loader.asked)
