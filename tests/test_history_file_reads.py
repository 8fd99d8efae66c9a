"""A run directory's history read as it is verified, not whole (flowrt/store/durable.py
`FileBytes`): it answers the reader as the file's bytes would, a deferred open reads about a window
past what it has verified, a file cut under a reader reads as it stands after the cut (its durable
facts still found lost), and a file replaced under a reader is the file first opened."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrt.store import RunStore, StorageError
from flowrt.store import durable as store_durable
from flowrt.store import reading as store_reading
from tests.test_store_reading import START, encode, history, mutations, quick, reference, run_dir


class SmallChunks(store_durable.FileBytes):
    CHUNK = 7  # a search crosses many chunk edges


def file_bytes(tmp_path, data: bytes, name: str = "h") -> store_durable.FileBytes:
    path = tmp_path / name
    path.write_bytes(data)
    return SmallChunks.open(str(path), "history.jsonl")


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=80), sub=st.sampled_from([b"\n", b"ab", b'"kind":"C', b"\0", b""]),
       start=st.integers(-5, 90), end=st.one_of(st.none(), st.integers(-5, 90)))
def test_it_answers_as_the_bytes_would(tmp_path_factory, data, sub, start, end):
    held = file_bytes(tmp_path_factory.mktemp("f"), data)
    try:
        assert len(held) == len(data)
        assert held[start:end] == data[start:end]
        if 0 <= start:
            assert held.find(sub, start, end) == data.find(sub, start, end)
            assert held.rfind(sub, start, end) == data.rfind(sub, start, end)
            # the window just searched serves the slice after it, as the file would
            assert held[start:end] == data[start:end]
        if -len(data) <= start < len(data):
            assert held[start] == data[start]
        else:
            with pytest.raises(IndexError):
                held[start]
    finally:
        held.close()


@pytest.mark.parametrize("window", [1, 64, 300, 5000])
def test_a_reader_of_the_file_reads_as_a_reader_of_its_bytes(tmp_path, monkeypatch, window):
    """Sound, damaged and torn histories, windows smaller and larger than a line: the reader
    over the file finds the facts, the tear and the first damage the reference finds."""
    import random

    monkeypatch.setattr(store_reading, "_WINDOW", window)
    data = encode(history(rounds=5))
    cases = [("sound", data)] + list(mutations(data, random.Random(window)))
    for index, (name, case) in enumerate(cases):
        held = file_bytes(tmp_path, case, f"case-{index}")
        reader = store_reading._HistoryReader(held, "run-1", None)
        while not reader.read(2):
            pass
        error = (reader.error.message, reader.error.fact_n) if reader.error else None
        assert (reader.facts, reader.pos, reader.torn, error) == reference(case, "run-1"), name
        assert (reader.facts, reader.pos, reader.torn, error) == quick(case), name
        held.close()


def test_a_deferred_open_reads_about_a_window_past_what_it_verified(tmp_path, monkeypatch):
    monkeypatch.setattr(store_reading, "_WINDOW", 8192)
    facts = history(rounds=8000, big=False)
    root = run_dir(tmp_path, facts)
    size = os.path.getsize(os.path.join(root, "run-1", "history.jsonl"))
    read: list[int] = []
    real_pread = os.pread

    def counting_pread(fd, length, offset):
        chunk = real_pread(fd, length, offset)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(store_durable.os, "pread", counting_pread)
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.fact_at(store_reading._VERIFY_STEP) == facts[store_reading._VERIFY_STEP]
    verified_bytes = len(encode(facts[:len(lazy.verified_facts())]))
    assert size > 4 * verified_bytes  # (the rest of the file was never needed)
    # each window reads again the part line it ended in; and the end is read once, for reserved space
    assert sum(read) <= 1.05 * verified_bytes + 3 * 8192
    lazy.verify()
    assert lazy.facts() == facts and sum(read) < 1.05 * size + 3 * 8192


def live_run(root: str, monkeypatch) -> RunStore:
    """A run of 400 Calls still being written with fsync (reserved space after its facts), read
    8 KiB and 16 facts at a time, so that a deferred reader has most of it still to read."""
    monkeypatch.setattr(store_reading, "_WINDOW", 8192)
    monkeypatch.setattr(store_reading, "_VERIFY_STEP", 16)
    writer = RunStore.create(root, "run-1", dict(START), durability="fsync")
    for i in range(400):
        writer.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {"n": i}})
    return writer


def test_a_live_run_closed_under_its_reader_reads_as_it_stands(tmp_path, monkeypatch):
    """A live run's close cuts its reserved space while a reader (`flow history --follow`, a
    view of a running run) has the file open with the length it had: what is gone reads as the
    reserved space it was, and the reader finds every fact, no tear, no failure."""
    root = str(tmp_path)
    writer = live_run(root, monkeypatch)
    path = os.path.join(root, "run-1", "history.jsonl")
    reader = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert reader.fact_at(3)["call"] == "c2"
    before = os.path.getsize(path)
    writer.close()  # (cuts the reserved space after the last fact)
    assert os.path.getsize(path) < before
    reader.verify()
    assert reader.facts() == RunStore.open(root, "run-1", for_append=False).facts() and len(reader) == 401
    assert reader.torn_tail is None
    reader.close()


def test_durable_facts_cut_under_a_reader_are_found_lost(tmp_path, monkeypatch):
    """A closed history cut under its reader is read as it stands after the cut, and the facts the
    latest `durable` record says were durable and are gone are a storage failure, never fewer facts."""
    root = str(tmp_path)
    live_run(root, monkeypatch).close()
    path = os.path.join(root, "run-1", "history.jsonl")
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.fact_at(3)["call"] == "c2"
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(StorageError, match="was durable|facts were lost"):
        lazy.verify()
    with pytest.raises(StorageError):
        lazy.facts()


def test_a_history_replaced_under_a_deferred_reader_is_read_as_first_opened(tmp_path):
    """A file put in the history's place (as an archive or a redaction does) is another file: the
    reader goes on with the one it opened."""
    facts = history(rounds=4000, big=False)
    root = run_dir(tmp_path, facts)
    path = os.path.join(root, "run-1", "history.jsonl")
    lazy = RunStore.open(root, "run-1", for_append=False, defer=True)
    assert lazy.fact_at(3) == facts[3]
    other = tmp_path / "other"
    other.write_bytes(encode(history(rounds=10)))
    os.replace(other, path)
    lazy.verify()
    assert lazy.facts() == facts and lazy.ended


def rows_of(data: bytes) -> list[tuple[int, bytes]]:
    return [(n, line) for n, line in enumerate(data.split(b"\n")[:-1], 1)]


def pages_over(rows: list, size: int, page: int = 3):
    from flowrt.store.postgres_verify import RowPages

    return RowPages(lambda after, limit: [row for row in rows if row[0] > after][:limit], size, page=page)


@pytest.mark.parametrize("window", [1, 64, 300, 5000])
def test_rows_read_a_page_at_a_time_read_as_their_bytes(monkeypatch, window):
    """PostgreSQL's rows (flowrt/store/postgres_verify.py `RowPages`): the reader over pages of
    three rows finds what it finds in the rows' bytes, and the row numbers come along in order."""
    monkeypatch.setattr(store_reading, "_WINDOW", window)
    data = encode(history(rounds=5))
    rows = rows_of(data)
    pages = pages_over(rows, len(data))
    reader = store_reading._HistoryReader(pages, "run-1", None)
    while not reader.read(2):
        pass
    error = (reader.error.message, reader.error.fact_n) if reader.error else None
    assert (reader.facts, reader.pos, reader.torn, error) == reference(data, "run-1")
    assert list(pages.keys) == [n for n, _ in rows]


@pytest.mark.parametrize("change", ["fewer", "more"])
def test_rows_that_hold_other_bytes_than_counted_are_a_storage_failure(change):
    data = encode(history(rounds=5))
    rows = rows_of(data)
    if change == "fewer":
        rows = rows[:-1]  # the last row gone since the count
    else:
        rows = rows + [(len(rows) + 1, b"{}")]  # a row more than counted
    reader = store_reading._HistoryReader(pages_over(rows, len(data)), "run-1", None)
    reader.read()
    assert reader.error is not None and f"{change} bytes than when it was opened" in reader.error.message


@pytest.mark.parametrize("seed", range(12))
def test_an_open_for_appending_finds_what_a_whole_read_finds(tmp_path, monkeypatch, seed):
    """The appender's open verifies a step at a time and leaves the facts it passed
    (`ShelvingRead`): over sound, damaged and torn histories it raises the damage a read-only open
    raises, or ends with the same facts (a torn tail cut), and knows the same open calls."""
    import random

    from flowrt.store import shelf as shelving
    from flowrt.store.open_calls import open_calls_among

    monkeypatch.setattr(shelving, "SHELVE_AT", 12)
    monkeypatch.setattr(shelving, "KEEP", 3)
    rng = random.Random(seed)
    data = encode(history(rounds=rng.randrange(8, 30)))
    for index, (name, case) in enumerate([("sound", data)] + list(mutations(data, rng))):
        place = tmp_path / f"{name}-{index}"
        place.mkdir()
        root = run_dir(place, [])
        (place / "run-1" / "history.jsonl").write_bytes(case)

        def outcome(for_append: bool):
            try:
                store = RunStore.open(root, "run-1", for_append=for_append, durability="none")
            except StorageError as problem:
                return ("damage", problem.message, problem.fact_n)
            try:
                return ("facts", store.facts(), store.open_calls())
            finally:
                store.close()

        read_only = outcome(False)
        assert outcome(True) == read_only, name
