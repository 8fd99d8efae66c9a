"""Durable writing to files: whole writes, fdatasync of appends, directory syncs, and the bounds
of reserved space and of the tear window that the run directory's appends keep and its reader
relies on (docs/trace.md sections 9 and 10)."""

from __future__ import annotations

import errno
import os
from typing import Callable

from flowdata.framing import write_all as _write_all  # (one whole-write loop for pipes and files)
from flowrt.store.canonical import _NotCanonical, _NotJSON, loads_canonical
from flowrt.store.errors import StorageError

#: The reserved space past the facts (see `RunStore._reserve`): at least this much, and at most ...
_RESERVE_MIN = 64 << 10
_RESERVE_MAX = 1 << 20
#: ... except the first, made with Start: a short run's whole history fits in it, and Start's
#: sync then flushes one page of zeros rather than sixteen.
_RESERVE_FIRST = 4 << 10
#: ... and never more than this many bytes written and not yet synced in it, so that what a
#: machine crash can leave torn in reserved space lies within the last _TEAR_WINDOW bytes.
_TEAR_WINDOW = 1 << 20


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    written = os.pwrite(fd, data, offset)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    offset += written
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:  # pragma: no cover - os.pwrite raises rather than return 0 on files
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]
        offset += written


def _call_here(call: Callable[[int], None], fd: int) -> None:
    call(fd)


#: How the sync of appended facts is waited for: here, on the caller's thread. A run hub
#: (flowrt/run_hub.py), which drives many runs from one thread, puts its own here: the sync runs
#: on a thread of the hub's while its other runs go on (and syncs of several runs overlap).
sync_waiter: Callable[[Callable[[int], None], int], None] = _call_here


def _sync_appended(fd: int) -> None:
    # An append changes the file's size, which fdatasync flushes too (it skips only metadata a
    # read does not need, such as the modification time): as durable as fsync here, and
    # cheaper. Looked up at each sync: scripts/bench/fsync_call_parts.py times it by replacing it.
    sync_waiter(getattr(os, "fdatasync", os.fsync), fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _read_canonical_file(path: str, component: str, named: str):
    """The canonical JSON line a small file of the run holds (the archive anchor, the
    host-record mark), or None when there is no such file; unreadable or not canonical is a
    StorageError naming `component`. What the value must hold is the caller's to check."""
    try:
        data = _read_file(path)
    except FileNotFoundError:
        return None
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=component) from problem
    try:
        return loads_canonical(data.rstrip(b"\n"))
    except (_NotJSON, _NotCanonical):
        raise StorageError(f"{named} is not canonical JSON", component=component) from None


def _strerror(problem: OSError) -> str:
    return problem.strerror or str(problem)



def _write_durably(path: str, data: bytes) -> None:
    """Write a whole new file and make it and its name durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(os.path.dirname(path))
