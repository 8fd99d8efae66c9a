"""Batch frames on the host/child channel (flowdata/framing.py): several messages in one frame,
handed out one at a time by every reader, in order, however the bytes are cut."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from flowdata import framing


def frames() -> bytes:
    return (framing.encode_batch([{"op": "a", "i": i} for i in range(3)]) + framing.encode({"op": "b"})
            + framing.encode_batch([{"op": "c", "s": "é" * 50}, {"op": "d"}]))


EXPECTED = [{"op": "a", "i": 0}, {"op": "a", "i": 1}, {"op": "a", "i": 2}, {"op": "b"},
            {"op": "c", "s": "é" * 50}, {"op": "d"}]


@pytest.mark.parametrize("step", [1, 2, 3, 5, 17, 10_000])
def test_the_incremental_reader_unpacks_batches_wherever_the_bytes_are_cut(step):
    data = frames()
    reader = framing.FrameReader()
    got = []
    for i in range(0, len(data), step):
        got += reader.feed(data[i:i + step])
    assert got == EXPECTED and not reader.mid_frame


def test_the_blocking_reader_hands_out_one_message_at_a_time():
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, frames())
        framing.send_many(write_fd, [{"op": "e"}])
        framing.send_many(write_fd, [{"op": "f"}, {"op": "g"}])
        os.close(write_fd)
        receiver = framing.Receiver(read_fd)
        got = []
        while (message := receiver.recv()) is not None:
            got.append(message)
        assert got == EXPECTED + [{"op": "e"}, {"op": "f"}, {"op": "g"}]
    finally:
        os.close(read_fd)


@pytest.mark.parametrize("busy", [False, True])
def test_the_blocking_reader_waits_for_frames_that_come_later(busy):
    # Busy (the host drives other runs): one blocking read per wait. Not busy: it polls first,
    # then sleeps in the same read. Either way every frame is handed out, in order, and the end
    # of the stream is None.
    read_fd, write_fd = os.pipe()
    receiver = framing.Receiver(read_fd)

    def later() -> None:
        for i in range(4):
            time.sleep(0.003 * (i % 2))  # some frames there at once, some after the reader waits
            os.write(write_fd, framing.encode({"op": "m", "i": i}, busy))
        os.close(write_fd)

    writer = threading.Thread(target=later)
    writer.start()
    try:
        got = []
        while (message := receiver.recv()) is not None:
            got.append(message)
        assert got == [{"op": "m", "i": i} for i in range(4)]
        assert receiver._reader.peer_busy is busy
    finally:
        writer.join(5)
        os.close(read_fd)


def test_a_batch_over_the_frame_limit_goes_as_single_frames(monkeypatch):
    monkeypatch.setattr(framing, "MAX_FRAME", 200)
    read_fd, write_fd = os.pipe()
    try:
        messages = [{"op": "x", "v": "y" * 120}, {"op": "z", "v": "w" * 120}]
        framing.send_many(write_fd, messages)
        os.close(write_fd)
        receiver = framing.Receiver(read_fd)
        assert [receiver.recv(), receiver.recv(), receiver.recv()] == messages + [None]
        with pytest.raises(framing.FrameTooLarge):
            framing.send_many(os.open(os.devnull, os.O_WRONLY), [{"v": "y" * 300}, {"v": 1}])
    finally:
        os.close(read_fd)


@pytest.mark.parametrize("body", [b"[]", b"[1]", b'[{"a":1},2]', b"[[]]", b'"x"', b"7"])
def test_a_frame_is_an_object_or_a_nonempty_array_of_objects(body):
    with pytest.raises(framing.ChannelError):
        framing.decode_body(body)


def test_batches_are_refused_unless_they_are_lists_of_objects():
    for bad in ([], [1], ({"a": 1},), [{"a": 1}, "b"]):
        with pytest.raises(framing.ChannelError):
            framing.encode_batch(bad)


def test_the_unbuffered_reader_refuses_a_batch():
    read_fd, write_fd = os.pipe()
    try:
        framing.send_many(write_fd, [{"a": 1}, {"b": 2}])
        with pytest.raises(framing.ChannelError, match="batch"):
            framing.recv(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_reader_that_polls_in_vain_backs_off_and_hits_wear_the_backoff_down():
    spin = framing.Spin()
    assert spin.wanted()
    slow = framing.SPIN_SLOW_WAIT * 2
    skipped = []
    for _ in range(8):  # every poll misses and the answer is slow: sleep at once for 1, 2, 4, ... waits
        spin.missed(0.0)
        spin.woke(slow)
        run = 0
        while not spin.wanted():
            run += 1
        skipped.append(run)
    assert skipped == [1, 2, 4, 8, 16, 32, 64, 64]
    for _ in range(6):  # each answer found by polling halves the backoff: 64 -> 1 in six
        spin.hit()
    spin.missed(0.0)
    spin.woke(slow)
    assert [spin.wanted() for _ in range(3)] == [False, False, True]  # 1 doubled
    for _ in range(2):
        spin.hit()
    spin.missed(0.0)
    spin.woke(slow)
    assert not spin.wanted() and spin.wanted()  # back to one skipped wait


def test_an_answer_just_after_the_poll_is_no_reason_to_stop_polling():
    spin = framing.Spin()
    for _ in range(10):
        assert spin.wanted()
        spin.missed(1.0)
        spin.woke(1.0 + framing.SPIN_SLOW_WAIT / 2)
    spin.woke(99.0)  # a wake without a missed poll before it changes nothing
    assert spin.wanted()


@pytest.mark.parametrize("wall, cpu, backs_off", [
    (framing.SPIN_PREEMPT_MIN * 10, framing.SPIN_PREEMPT_MIN * 10, False),  # held the CPU throughout
    (framing.SPIN_PREEMPT_MIN * 10, framing.SPIN_PREEMPT_MIN * 10 * framing.SPIN_PREEMPT_SHARE * 0.9, True),
    (framing.SPIN_PREEMPT_MIN * 10, 0.0, True),  # put aside for the whole poll
    (framing.SPIN_PREEMPT_MIN / 2, 0.0, False),  # too short a poll to tell
])
def test_a_poll_that_was_preempted_backs_off_as_a_slow_answer_does(wall, cpu, backs_off):
    spin = framing.Spin()
    assert spin.wanted()
    spin.hit()
    spin.ran(wall, cpu)
    assert spin.wanted() is not backs_off
    if backs_off:  # the next poll is wanted again, and a second preemption doubles the wait
        assert spin.wanted()
        spin.ran(wall, cpu)
        assert [spin.wanted() for _ in range(3)] == [False, False, True]


def test_a_reader_woken_by_a_slow_writer_still_gets_every_message():
    """Past the poll the reader sleeps; a writer that answers late is read all the same."""
    import threading
    import time

    read_fd, write_fd = os.pipe()
    receiver = framing.Receiver(read_fd)

    def late_writer():
        for i in range(3):
            time.sleep(framing.SPIN_SECONDS * 4)
            framing.send(write_fd, {"op": "late", "i": i})
        os.close(write_fd)

    writer = threading.Thread(target=late_writer)
    writer.start()
    try:
        assert [receiver.recv() for _ in range(4)] == [{"op": "late", "i": i} for i in range(3)] + [None]
    finally:
        writer.join()
        os.close(read_fd)


# -- integers beyond 64 bits (Flow's Int has no size limit) --------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BIG = {"op": "reply", "outcome": {"Ok": [2 ** 64, -(2 ** 200), 10 ** 400, 7]}, "s": "é\n\""}


def test_a_frame_with_integers_beyond_64_bits_is_read_exactly_by_every_reader():
    frame = framing.encode(BIG)
    assert framing.HEADER.unpack(frame[:4])[0] & framing.EXACT  # said in the length's top bit
    data = framing.encode({"op": "a"}) + frame + framing.encode_batch([BIG, {"op": "b"}])
    for step in (1, 3, 7, len(data)):
        reader = framing.FrameReader()
        got = []
        for i in range(0, len(data), step):
            got += reader.feed(data[i:i + step])
        assert got == [{"op": "a"}, BIG, BIG, {"op": "b"}] and not reader.mid_frame
    read_fd, write_fd = os.pipe()
    try:
        framing.send(write_fd, BIG)
        assert framing.recv(read_fd) == BIG
        os.write(write_fd, data)
        os.close(write_fd)
        write_fd = None
        receiver = framing.Receiver(read_fd)
        assert [receiver.recv() for _ in range(4)] == [{"op": "a"}, BIG, BIG, {"op": "b"}]
        assert receiver.recv() is None
    finally:
        os.close(read_fd)
        if write_fd is not None:
            os.close(write_fd)


def test_frames_within_64_bits_stay_orjson_frames():
    frame = framing.encode({"n": 2 ** 63 - 1, "m": -(2 ** 63), "u": 2 ** 64 - 1})
    assert not framing.HEADER.unpack(frame[:4])[0] & framing.EXACT


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2 ** 63, max_value=2 ** 300) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_value_crosses_the_channel_unchanged(value):
    message = {"value": value}
    frame = framing.encode(message)
    assert framing.FrameReader().feed(frame) == [message]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.text(), json_values, max_size=3), st.booleans(), st.booleans()),
                min_size=1, max_size=6),
       st.integers(min_value=1, max_value=64))
def test_the_busy_flags_leave_every_message_as_it_was_and_the_reader_knows_the_last(sent, step):
    """BUSY (the host drives other runs) and CROWDED (more than its CPUs) sit in a frame's length
    beside EXACT: readers strip them all, and `peer_busy` and `peer_crowded` follow the last
    header read, however the bytes are cut. CROWDED comes with BUSY."""
    data = b"".join(framing.encode(message, busy, crowded) for message, busy, crowded in sent)
    reader = framing.FrameReader()
    got = []
    for i in range(0, len(data), step):
        got += reader.feed(data[i:i + step])
    assert got == [message for message, _, _ in sent] and not reader.mid_frame
    _, busy, crowded = sent[-1]
    assert reader.peer_busy is (busy or crowded) and reader.peer_crowded is crowded


@pytest.mark.parametrize("crowded", [False, True])
def test_a_receiver_looks_for_the_next_frame_before_sleeping_only_when_the_last_was_not_crowded(
        crowded, monkeypatch):
    """Crowded, the receiver sleeps on the pipe (`select`) before its first read; otherwise its
    first read comes first (and finds the frame already there, with no `select` at all)."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, framing.encode({"op": "first"}, crowded=crowded))
        receiver = framing.Receiver(read_fd)
        assert receiver.recv() == {"op": "first"}
        order = []
        real_read, real_select = framing.os.read, framing.select.select
        monkeypatch.setattr(framing.os, "read", lambda *a: order.append("read") or real_read(*a))
        monkeypatch.setattr(framing.select, "select", lambda *a: order.append("select") or real_select(*a))
        os.write(write_fd, framing.encode({"op": "second"}))
        assert receiver.recv() == {"op": "second"}
        assert order == (["select", "read"] if crowded else ["read"])
    finally:
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.parametrize("busy", [False, True])
def test_a_receiver_polls_for_the_next_frame_only_when_the_last_was_not_busy(busy, monkeypatch):
    read_fd, write_fd = os.pipe()
    writer = None
    try:
        os.write(write_fd, framing.encode({"op": "first"}, busy))
        receiver = framing.Receiver(read_fd)
        assert receiver.recv() == {"op": "first"}
        polls = []
        real_thread_time = framing.time.thread_time
        monkeypatch.setattr(framing.time, "thread_time", lambda: polls.append(1) or real_thread_time())
        # The frame arrives once the reader has had the time to poll and go to sleep.
        writer = threading.Timer(0.02, lambda: os.write(write_fd, framing.encode({"op": "second"})))
        writer.start()
        assert receiver.recv() == {"op": "second"}
        assert bool(polls) is not busy
    finally:
        if writer is not None:
            writer.join(5)
        os.close(read_fd)
        os.close(write_fd)
