"""The host's writer of a Tool process's stdin (flowrt/tool_input.py): which calls the process may
have seen stays exact when `put` writes from the caller's thread (nothing queued before it) and
the pipe takes only part of a line."""

from __future__ import annotations

import os
import threading

from flowrt.tool_input import InputWriter


def writer_over_a_pipe():
    read_end, write_end = os.pipe()
    closed: list[list[str]] = []
    done = threading.Event()

    def on_closed(unsent: list[str]) -> None:
        closed.append(unsent)
        done.set()

    writer = InputWriter(os.fdopen(write_end, "wb", buffering=0), on_stall=lambda: None, on_closed=on_closed)
    return read_end, writer, closed, done


def test_a_line_the_pipe_takes_whole_is_written_by_the_caller_and_started():
    read_end, writer, _, _ = writer_over_a_pipe()
    try:
        assert writer.put("c1", b'{"id":"c1"}\n') is None
        assert writer.was_started("c1") and not writer.queue  # nothing left for the writer thread
        assert os.read(read_end, 100) == b'{"id":"c1"}\n'
    finally:
        writer.stop()
        os.close(read_end)


def test_a_line_the_pipe_takes_in_part_is_started_and_its_rest_is_no_calls():
    """The reader closes before reading: the call whose first bytes went in may have been seen
    (never reported unsent); the call queued behind it never went in (unsent: NotRun)."""
    read_end, writer, closed, done = writer_over_a_pipe()
    big = b"x" * (4 * 1024 * 1024) + b"\n"  # far more than a pipe's buffer
    try:
        assert writer.put("c1", big) is None
        assert writer.was_started("c1")
        assert writer.put("c2", b'{"id":"c2"}\n') is None
        assert not writer.was_started("c2")
        os.close(read_end)
        assert done.wait(10)
        assert closed == [["c2"]]
        assert writer.was_started("c1") and not writer.was_started("c2")
    finally:
        writer.stop()
