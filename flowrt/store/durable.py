"""Durable writing to files: whole writes, fdatasync of appends, directory syncs, and the bounds
of reserved space and of the tear window that the run directory's appends keep and its reader
relies on (docs/trace.md sections 9 and 10)."""

from __future__ import annotations

import errno
import os
from typing import Any, Callable

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


class FileBytes:
    """A file read as its reader goes, a window at a time, not whole: what a history's reader
    (`reading._HistoryReader`) asks of its bytes (`len`, slices, one byte, `find`, `rfind`), read
    with `pread` from the descriptor opened first, within the length the file had then.

    So a long history is never held whole while it is verified (a replay of 100,000 calls held
    its 85 MB file to the end). The bytes it reads later are those it would have read at once:
    within that length a history's bytes are only ever written over NUL bytes (reserved space,
    a torn tail's zeros) with what they were meant to hold, and a file replaced meanwhile (an
    archive, a redaction) is another file: the descriptor still reads the first. A file cut
    under the reader reads as NUL bytes past its new end: reserved space, as a writer cuts it
    (a live run's close cuts its reserved space, a failed sync the facts it wrote unsynced,
    both back to a line's end), so the reader finds the history as it stands after the cut, as
    an open a moment later would, where it had not read yet. Facts that were durable and are
    gone are still found lost (the reader's check of the latest `durable` record). The last
    window read is kept, so a slice of the stretch just searched is not read twice. A failed
    read is a StorageError naming `component`."""

    __slots__ = ("_fd", "_size", "_component", "_at", "_window")

    #: bytes a search reads at a time
    CHUNK = 4 << 20

    def __init__(self, fd: int, size: int, component: str) -> None:
        self._fd: int | None = fd
        self._size = size
        self._component = component
        self._at = 0  # where the kept window starts
        self._window = b""

    @classmethod
    def open(cls, path: str, component: str) -> "FileBytes":
        """The file at `path` (raises OSError as `os.open` does)."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        return cls(fd, size, component)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._size)
            if step != 1:
                raise ValueError("FileBytes slices have no step")
            return self._read(start, max(start, stop))
        index = key + self._size if key < 0 else key
        if not 0 <= index < self._size:
            raise IndexError("FileBytes index out of range")
        return self._read(index, index + 1)[0]

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """As `bytes.find`, a chunk at a time (chunks overlap by `len(sub) - 1` bytes)."""
        start, end = self._bounds(start, end)
        if end - start < len(sub):
            return -1
        if not sub:
            return start
        overlap, chunk = len(sub) - 1, max(self.CHUNK, 2 * len(sub))
        while True:
            stop = min(end, start + chunk)
            found = self._read(start, stop).find(sub)
            if found >= 0:
                return start + found
            if stop == end:
                return -1
            start = stop - overlap

    def rfind(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """As `bytes.rfind` over [start, end), read whole (the reader asks it of one window);
        the stretch is kept for the slice that follows."""
        start, end = self._bounds(start, end)
        if end - start < len(sub):
            return -1
        found = self._read(start, end, keep=True).rfind(sub)
        return -1 if found < 0 else start + found

    def _bounds(self, start: int, end: int | None) -> tuple[int, int]:
        """`start` and `end` as `bytes.find` takes them (negative from the end; `end` at most the
        length, `start` not: past it nothing is found)."""
        size = self._size
        if start < 0:
            start = max(0, start + size)
        if end is None:
            end = size
        elif end < 0:
            end = max(0, end + size)
        return start, min(end, size)

    def _read(self, start: int, stop: int, *, keep: bool = False) -> bytes:
        if start >= stop:
            return b""
        at, window = self._at, self._window
        if at <= start and stop <= at + len(window):
            return window[start - at:stop - at]
        fd = self._fd
        if fd is None:
            raise StorageError("the file was closed before it was read", component=self._component)
        chunks, offset = [], start
        try:
            while offset < stop:
                chunk = os.pread(fd, stop - offset, offset)
                if not chunk:  # cut since it was opened: what is gone reads as reserved space
                    chunk = bytes(stop - offset)
                chunks.append(chunk)
                offset += len(chunk)
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=self._component) from problem
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if keep:
            self._at, self._window = start, data
        return data

    def close(self) -> None:
        """Give the descriptor back (what was kept is dropped; reading again raises)."""
        fd, self._fd = self._fd, None
        self._window = b""
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:  # a reader dropped before it was done (a deferred open let go)
        try:
            self.close()
        except Exception:  # pragma: no cover - at interpreter exit `os` may be gone
            pass


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
