"""Reserved space in history.jsonl (flowrt/store/directory.py `RunStore._reserve`, docs/trace.md sections 9
and 10): a durable store writes its facts over NUL bytes it reserved past them, cuts them off when
it closes, and a reader takes them as unwritten space. A machine crash may leave zeros in any page
written since the last sync; reading such a history must give the durable facts and a prefix of the
others, never a storage failure."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store import durable as store_durable
from flowrt.store import format as store_format
from flowrt.store import reading as store_reading
from flowrt.store import RunStore, StorageError, TornTail, canonical_bytes, fact_hash

START = {
    "program": "sha256:" + "ab" * 32,
    "std": "std@v1",
    "entry": {"module": "m", "function": "main"},
    "input": {"n": 3},
    "modules": [],
}


def history_path(root: str) -> str:
    return os.path.join(root, "run-1", "history.jsonl")


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def reply(i: int, size: int = 10) -> tuple[str, dict]:
    return "Reply", {"call": f"root#{i}", "outcome": {"Ok": "r" * size}}


def lines_of(facts: list[dict]) -> bytes:
    return b"".join(canonical_bytes(f) + b"\n" for f in facts)


def test_a_durable_store_writes_over_reserved_space_and_cuts_it_off_when_it_closes(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    for i in range(20):
        s.append(*reply(i))
    live = read(history_path(root))
    assert len(live) >= store_durable._RESERVE_MIN and live.endswith(b"\0")
    assert live.rstrip(b"\0") == lines_of(s.facts())
    reader = RunStore.open(root, "run-1", for_append=False)  # a reader of the live run
    assert reader.facts() == s.facts() and reader.torn_tail is None
    s.close()
    assert read(history_path(root)) == lines_of(reader.facts())  # only its lines


def test_a_store_without_durability_reserves_nothing(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    s.append(*reply(1))
    assert read(history_path(root)) == lines_of(s.facts())
    s.close()


def test_reserved_space_a_dead_host_left_is_reserved_space_again(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    s.append(*reply(1))
    at_death = read(history_path(root))  # the file as the host left it when it died
    facts = s.facts()
    s.close()
    write(history_path(root), at_death)
    again = RunStore.open(root, "run-1", for_append=True)
    assert again.facts() == facts and again.torn_tail is None
    assert [r for r in again.host_records() if r["kind"] == "truncated"] == []  # nothing was torn
    fact = again.append(*reply(2))
    again.close()
    assert read(history_path(root)) == lines_of(facts + [fact])


def test_a_line_torn_over_reserved_space_is_a_torn_tail(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    s.append(*reply(1))
    facts = s.facts()
    s.close()
    good = read(history_path(root))
    partial = b'{"call":"root#2","kind":"Re'
    write(history_path(root), good + partial + bytes(5000))
    reader = RunStore.open(root, "run-1", for_append=False)
    assert reader.facts() == facts and reader.torn_tail == TornTail(len(good), len(partial))
    again = RunStore.open(root, "run-1", for_append=True)
    (record,) = [r for r in again.host_records() if r["kind"] == "truncated"]
    assert record["offset"] == len(good) and record["bytes"] == len(partial)
    again.close()
    assert read(history_path(root)) == good


def test_unsynced_bytes_never_exceed_the_tear_window(tmp_path, monkeypatch):
    monkeypatch.setattr(store_durable, "_TEAR_WINDOW", 600)
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    syncs = []
    real = store_durable._sync_appended
    monkeypatch.setattr(store_durable, "_sync_appended", lambda fd: (syncs.append(s._size), real(fd)))
    for i in range(30):
        s.append(*reply(i), sync=False)
        durable = s._unsynced_from[1] if s._unsynced_from else s._size
        assert s._size - durable <= 600
    assert len(syncs) >= 30 * 90 // 600 - 1  # about one sync per window's worth of replies
    s.close()


def test_a_write_larger_than_the_tear_window_is_appended_past_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(store_durable, "_TEAR_WINDOW", 600)
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    s.append(*reply(1))
    assert len(read(history_path(root))) > s._size  # reserved space after the small fact
    s.append(*reply(2, size=800))
    assert read(history_path(root)) == lines_of(s.facts())  # the reserved space was given up
    s.append(*reply(3))
    s.close()
    assert RunStore.open(root, "run-1", for_append=False).facts() == s.facts()


def test_a_nul_line_further_back_than_the_tear_window_is_damage(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    for i in range(12):
        s.append(*reply(i))
    s.close()
    lines = read(history_path(root)).split(b"\n")
    lines[3] = lines[3][:20] + bytes(len(lines[3]) - 20)  # zeros, as a torn page would leave
    damaged = b"\n".join(lines)
    write(history_path(root), damaged)
    offset = sum(len(line) + 1 for line in lines[:3])
    monkeypatch.setattr(store_durable, "_TEAR_WINDOW", len(damaged) - offset - 1)
    with pytest.raises(StorageError) as caught:
        RunStore.open(root, "run-1", for_append=False)
    assert caught.value.fact_n == 4 and "not JSON" in caught.value.message
    monkeypatch.setattr(store_durable, "_TEAR_WINDOW", len(damaged) - offset)
    reader = RunStore.open(root, "run-1", for_append=False)  # within the window: a tear
    assert len(reader.facts()) == 3 and reader.torn_tail == TornTail(offset, len(damaged) - offset)


def test_a_full_disk_while_reserving_still_appends_the_facts(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    real = os.pwrite

    def no_room_for_zeros(fd, data, offset):
        if fd == s._fd and not bytes(data).strip(b"\0"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", no_room_for_zeros)
    for i in range(100):  # past the space reserved before the disk filled up
        s.append(*reply(i, size=900))
    assert s._size > store_durable._RESERVE_MIN
    assert read(history_path(root)) == lines_of(s.facts())  # no room reserved: plain appends
    s.close()
    assert RunStore.open(root, "run-1", for_append=False).facts() == s.facts()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.integers(0, 3000)), min_size=1, max_size=12),
       st.lists(st.integers(0, 10_000), max_size=6), st.sampled_from([512, 4096]))
def test_a_machine_crash_leaves_the_durable_facts_and_a_prefix_of_the_rest(tmp_path_factory, writes, zeroed,
                                                                           page):
    """Writes (facts per write, synced or not, value size); then the pages written since the last
    sync that a machine crash lost read as zeros. Opening gives every durable fact and a prefix of
    the ones that were not; appending goes on from there."""
    root = str(tmp_path_factory.mktemp("crash"))
    s = RunStore.create(root, "run-1", START, durability="fsync")
    i = 0
    for count, sync, size in writes:
        items = []
        for _ in range(count):
            i += 1
            items.append(reply(i, size))
        s.append_many(items, sync=sync)
    durable_size = s._unsynced_from[1] if s._unsynced_from else s._size
    written = s.facts()
    ends = []
    position = 0
    for fact in written:
        position += len(canonical_bytes(fact)) + 1
        ends.append(position)
    durable = [f for f, end in zip(written, ends) if end <= durable_size]
    image = bytearray(read(history_path(root)))
    host = os.path.join(root, "run-1", "host.jsonl")
    host_image = read(host) if os.path.exists(host) else None
    s.close()
    # The crash came before close: host.jsonl as it was then (without the `closed` record).
    if host_image is None:
        os.unlink(host)
    else:
        write(host, host_image)
    unsynced_pages = range(durable_size // page, (len(image) + page - 1) // page)
    for choice in zeroed:
        if len(unsynced_pages) and s._size > durable_size:
            number = unsynced_pages[choice % len(unsynced_pages)]
            start = max(number * page, durable_size)
            image[start:(number + 1) * page] = bytes(len(image[start:(number + 1) * page]))
    write(history_path(root), bytes(image))
    reader = RunStore.open(root, "run-1", for_append=False)
    got = reader.facts()
    assert got[:len(durable)] == durable and got == written[:len(got)]
    again = RunStore.open(root, "run-1", for_append=True)
    fact = again.append(*reply(i + 1))
    assert fact["prev"] == got[-1]["hash"]
    again.close()
    assert RunStore.open(root, "run-1", for_append=False).facts() == got + [fact]


def test_the_reader_skips_reserved_space_of_any_length():
    facts = []
    prev = None
    for n, (kind, fields) in enumerate([("Start", dict(START, data=store_format.DATA_VERSION, run="run-1")),
                                        reply(1)], 1):
        fact = dict(fields, kind=kind, n=n, prev=prev)
        fact["hash"] = fact_hash(fact)
        facts.append(fact)
        prev = fact["hash"]
    data = lines_of(facts)
    for zeros in (0, 1, 4095, 4096, 4097, 70_000):
        reader = store_reading._HistoryReader(data + bytes(zeros), "run-1", None)
        reader.read()
        assert reader.facts == facts and reader.torn is None and reader.error is None


def test_the_first_reservation_is_small_and_a_short_run_fits_in_it(tmp_path, monkeypatch):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    start_line = len(lines_of(s.facts()))
    assert os.path.getsize(history_path(root)) == start_line + store_durable._RESERVE_FIRST
    reserved = []
    original = RunStore._reserve
    monkeypatch.setattr(RunStore, "_reserve", lambda self, start, end: (reserved.append(end), original(self, start, end))[1])
    for i in range(3):
        s.append(*reply(i, 100))
    assert reserved == [] and os.path.getsize(history_path(root)) == start_line + store_durable._RESERVE_FIRST
    for i in range(3, 12):  # past it: the usual room from then on
        s.append(*reply(i, 800))
    assert len(reserved) == 1
    assert os.path.getsize(history_path(root)) >= reserved[0] + store_durable._RESERVE_MIN
    s.close()
    assert read(history_path(root)) == lines_of(RunStore.open(root, "run-1", for_append=False).facts())
