"""Framing for the host/child pipe, used on both sides.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of canonical JSON
(`flowdata.canonical`, strict: UTF-8, sorted keys, no insignificant whitespace, JSON data and
nothing else). Flow's Int has no size limit and orjson writes and reads integers only up to 64
bits (it reads a larger one as a float, silently), so a frame that holds a larger integer is
written by the exact writer and says so in the top bit of its length (`EXACT`); the reader then
reads it exactly too (`canonical.loads_exact`).

A frame holds one message, a JSON object, or a batch of them, a JSON array of objects
(`encode_batch`): one write, one read and one parse for many messages, which is most of what a
message costs. Readers hand batched messages out one at a time, so `recv` can return None for a
clean end of stream without ambiguity. Frames longer than `MAX_FRAME` (64 MiB) are refused on
both sides: `send` before writing, `recv` as soon as the header announces one (the stream is
then unusable; the host kills the child).

Non-JSON Python values (dataclasses, datetimes, str/int subclasses, non-text keys, floats that
are not finite) are refused at `encode` rather than silently converted: what crosses the boundary
is JSON by construction.

`FrameReader` decodes incrementally, for a reader that polls with a deadline (the host);
`Receiver` is the buffered blocking reader (the child) and `recv` an unbuffered one.
`claim_stdio()` is for the child's first line: it moves the pipe off fds 0 and 1 so that a stray
`print` cannot corrupt the stream.

Waiting polls briefly before it sleeps (`Spin`): host and child alternate on the pipe, and a
process woken on another core costs more than the whole message (measured: a recorded call took
~2x the CPU when each side slept on every read). A host that drives other runs besides this one,
or finds the machine has no CPU to spare (`flowrt.cpu_contention`), sets `BUSY` in the length of
the frames it sends: its next answer waits behind other work, so the child sleeps at once
instead of polling for it, leaving the CPUs to whoever has work. One that drives more runs than
there are CPUs also sets `CROWDED`: the child then sleeps on the pipe without first trying a
read that nearly always finds nothing (one system call a call fewer for each of many children).

Only `orjson`, `gc`, `os`, `select`, `struct`, `time` and `flowdata.canonical` are imported:
this module is loaded inside the sandbox child, and by the host (`flowrt.sandbox_process`).
"""

from __future__ import annotations

import gc
import errno
import os
import select
import struct
import time

import orjson

from flowdata import canonical

MAX_FRAME = 64 * 1024 * 1024
# Bytes a Receiver asks of one read: below malloc's mmap threshold (128 KiB), so that the buffer
# each read allocates does not map and unmap fresh pages every time.
READ_CHUNK = 1 << 16
_ONLY_DICTS = {dict}
# How long a reader polls a pipe before it sleeps on it. The host waits on the child's work
# between two calls (tens of microseconds); the child waits on the host's, which includes the
# durable write of each Call (~0.3 ms on this machine's disk, with a tail): measured with fsync,
# the child polling 1 ms instead of 0.5 made calls ~15% cheaper (fewer sleeps during a slow sync).
SPIN_SECONDS = 0.0005
CHILD_SPIN_SECONDS = 0.001
# A poll that found nothing is held against polling only when the answer then took longer than
# this in all: the other side was slow (a slow Tool), or waiting for a CPU the poller held. An
# answer just after the poll (a host's fsync that took a little longer) is no reason to stop.
SPIN_SLOW_WAIT = 0.002
# After such a miss, the next this many waits sleep at once (doubling per miss, up to this).
SPIN_BACKOFF_MAX = 64
# A poll that lasted at least this long and held the CPU for less than this share of it was
# preempted: more processes want the CPUs than there are, and the one that was put aside for
# the poller may be the very peer it waits for. Polling then only burns a CPU someone needs
# (with one busy core beside host and child, calls were ~20x slower polling than sleeping).
SPIN_PREEMPT_MIN = 0.0001
SPIN_PREEMPT_SHARE = 0.7
HEADER = struct.Struct(">I")
#: Set in a frame's length when its body holds an integer beyond 64 bits (see the module's doc).
EXACT = 1 << 31
#: Set in a frame's length when its sender drives other runs too, or the machine has no CPU to
#: spare: do not poll for its next frame.
BUSY = 1 << 30
#: Set (with BUSY) when its sender drives more runs than there are CPUs: its next frame is
#: nearly never there yet when the reader looks, so do not look before sleeping on the pipe.
CROWDED = 1 << 29
_LENGTH = CROWDED - 1
_DUMP_OPTIONS = canonical.STRICT


class ChannelError(Exception):
    """The byte stream is not a sequence of valid frames."""


class FrameTooLarge(ChannelError):
    """A frame exceeds MAX_FRAME."""


def encode(obj: object, busy: bool = False, crowded: bool = False) -> bytes:
    """The frame for `obj`: header and canonical JSON. `busy`: set `BUSY`; `crowded`: set
    `CROWDED` too (see the module's doc)."""
    if not isinstance(obj, dict):
        raise ChannelError(
            f"channel messages are JSON objects, not {type(obj).__name__}: wrap the value, "
            'e.g. {"value": ...}'
        )
    flag = (BUSY | CROWDED) if crowded else BUSY if busy else 0
    return _frame(obj, "message", "send large values by reference (a content hash) instead", flag)


def encode_batch(messages: list) -> bytes:
    """One frame holding several messages (a JSON array of objects), in order."""
    if type(messages) is not list or not messages or set(map(type, messages)) != _ONLY_DICTS:
        raise ChannelError("a batch is a list of JSON objects")
    return _frame(messages, "batch", "send fewer messages per batch")


def _frame(payload: dict | list, what: str, advice: str, flag: int = 0) -> bytes:
    try:
        body = orjson.dumps(payload, option=_DUMP_OPTIONS)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        if "64-bit" not in str(exc):
            raise ChannelError(
                f"message is not JSON ({exc}): convert it to null/bool/int/str/list/dict first"
            ) from None
        try:
            body = canonical.exact_dumps(payload, strict=True)
        except canonical.NotJSON as problem:
            raise ChannelError(f"message is not JSON ({problem}): convert it to "
                               "null/bool/int/str/list/dict first") from None
        flag |= EXACT
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(f"{what} of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit: {advice}")
    return HEADER.pack(len(body) | flag) + body


def decode_body(body: bytes, exact: bool = False) -> dict | list:
    """A frame's message (an object), or its batch of messages (a list of objects). `exact`: the
    frame's length had `EXACT` set (it holds integers beyond 64 bits)."""
    if exact:
        try:
            obj = canonical.loads_exact(body)
        except (ValueError, RecursionError) as exc:  # IntOverLimit and UnicodeDecodeError included
            raise ChannelError(f"frame is not valid JSON: {exc}") from None
        return _checked(obj)
    # JSON builds no reference cycles, so the cyclic collector has nothing to find in what a
    # batch creates; left on, it would run every 700 new objects over everything the process
    # holds (a host replaying a long history holds every fact). A small frame makes too few
    # objects for that to matter.
    collecting = len(body) > 4096 and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ChannelError(f"frame is not valid JSON: {exc}") from None
    finally:
        if collecting:
            gc.enable()
    return _checked(obj)


def _checked(obj) -> dict | list:
    if type(obj) is dict:
        return obj
    if type(obj) is list and obj and set(map(type, obj)) == _ONLY_DICTS:
        return obj
    raise ChannelError(f"frame holds a JSON {type(obj).__name__}, not an object or a batch of objects")


def frame_length(header: bytes) -> int:
    """The body length a header announces (without its `EXACT`, `BUSY` and `CROWDED` flags)."""
    (length,) = HEADER.unpack(header)
    length &= _LENGTH
    if length > MAX_FRAME:
        raise FrameTooLarge(
            f"incoming frame announces {length} bytes, over the {MAX_FRAME}-byte limit: the "
            "peer is broken or hostile; the stream cannot be resynchronized"
        )
    return length


def send(fd: int, obj: object) -> None:
    """Write one frame to `fd` (blocking, all of it)."""
    write_all(fd, encode(obj))


def send_many(fd: int, messages: list) -> None:
    """Write several messages in order as one frame (a batch when there is more than one), or
    one frame each when together they are over the frame limit."""
    if len(messages) == 1:
        write_all(fd, encode(messages[0]))
        return
    try:
        data = encode_batch(messages)
    except FrameTooLarge:
        data = b"".join(encode(message) for message in messages)  # each alone may still be
    write_all(fd, data)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a pipe here, a run's files in the store): os.write may take
    part of it; a write that takes nothing is an error, never a loop."""
    written = os.write(fd, data)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:  # os.write raises rather than return 0 on blocking files and pipes
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def recv(fd: int) -> dict | None:
    """Read one frame from `fd` (blocking); None at a clean end of stream. Unbuffered: it reads
    nothing past the frame. A batch frame is refused (use `Receiver`)."""
    header = _read_exactly(fd, HEADER.size, at_start=True)
    if header is None:
        return None
    body = _read_exactly(fd, frame_length(header), at_start=False)
    message = decode_body(body or b"", bool(HEADER.unpack(header)[0] & EXACT))
    if type(message) is not dict:
        raise ChannelError("a batch frame reached an unbatched reader")
    return message


def _read_exactly(fd: int, count: int, at_start: bool) -> bytes | None:
    chunks: list[bytes] = []
    remaining = count
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            if at_start and remaining == count:
                return None
            raise ChannelError(f"stream ended inside a frame ({count - remaining} of {count} bytes)")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class Spin:
    """Whether a reader should poll before it sleeps. Polling pays while answers come within
    the poll or just after; when an answer takes longer than `SPIN_SLOW_WAIT` in all (a
    slow Tool, or a machine so busy that the other side waits for a CPU, which a polling reader
    would be holding), the reader sleeps at once for the next 1, 2, 4, ... waits (up to
    `SPIN_BACKOFF_MAX`), and an answer found by polling halves the wait. Measured on 2 cores: with
    two CPU-bound processes beside host and child, polling on every wait made recorded calls 2.5x
    slower than sleeping, and backing off after every miss made calls with fsync 1.3x slower than
    polling (an fsync a little over the poll made the reader sleep for the next ones).

    The answer's latency alone cannot tell a peer that is slow from one that waits for the CPU
    the poller holds (both answer just after the poll), so the poller also measures its own CPU
    time across the poll: a poll preempted for a good part of it (`SPIN_PREEMPT_SHARE`) shows
    a machine with more runnable processes than CPUs, and backs off as a slow answer does. The
    poll yields the CPU each round (`sched_yield`): a peer queued on the poller's own core then
    runs at once instead of after the poll, and the time it takes shows as the poller's lost CPU.
    With nothing else to run, the yield returns at once and polling is as before.

    The reader calls `wanted()` before it polls, then `hit()` when the poll found something, or
    `missed(started)` with the time the poll began, then `ran(wall, cpu)` with the poll's
    elapsed time and the CPU time its thread got meanwhile (`time.thread_time`), and `woke(now)`
    when its sleep ends."""

    __slots__ = ("_skip", "_penalty", "_missed_at")

    def __init__(self) -> None:
        self._skip = 0
        self._penalty = 0
        self._missed_at: float | None = None

    def wanted(self) -> bool:
        if self._skip:
            self._skip -= 1
            return False
        return True

    def hit(self) -> None:
        # Halved, not cleared: on a machine that stays busy the odd poll still finds its answer,
        # and starting over after each would poll every other wait.
        self._penalty >>= 1

    def missed(self, started: float) -> None:
        self._missed_at = started

    def ran(self, wall: float, cpu: float) -> None:
        if wall >= SPIN_PREEMPT_MIN and cpu < wall * SPIN_PREEMPT_SHARE:
            self._back_off()

    def woke(self, now: float) -> None:
        started = self._missed_at
        if started is None:
            return
        self._missed_at = None
        if now - started > SPIN_SLOW_WAIT:
            self._back_off()

    def _back_off(self) -> None:
        self._penalty = min(max(1, self._penalty * 2), SPIN_BACKOFF_MAX)
        self._skip = self._penalty


class Receiver:
    """A blocking reader of one fd that reads in large chunks and hands out one message at a
    time (batches unpacked in order): a stream of many small frames costs one `read` per chunk,
    not two per frame.

    When nothing is there it polls for up to `CHILD_SPIN_SECONDS` before it sleeps, as `Spin`
    says (the child is this reader), unless the last frame read had `BUSY` set."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._reader = FrameReader()
        self._messages: list = []
        self._next = 0
        self._spin = Spin()
        os.set_blocking(fd, False)

    def _read(self) -> bytes:
        fd = self.fd
        reader = self._reader
        if not reader.peer_crowded:
            # (Crowded, the host has other runs' work before this one's answer: the look nearly
            # always finds nothing, and costs a system call a call; `select` sleeps at once.)
            try:
                return os.read(fd, READ_CHUNK)
            except BlockingIOError:
                pass
        spin = self._spin
        clock = time.perf_counter
        if not reader.peer_busy and spin.wanted():
            cpu = time.thread_time()
            started = clock()
            until = started + CHILD_SPIN_SECONDS
            while (now := clock()) < until:
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    os.sched_yield()  # a peer waiting for this CPU takes it now
                    continue
                spin.hit()
                spin.ran(now - started, time.thread_time() - cpu)
                return chunk
            spin.missed(started)
            spin.ran(now - started, time.thread_time() - cpu)
        while True:
            select.select((fd,), (), ())
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:  # woken without data: sleep again
                continue
            spin.woke(clock())
            return chunk

    def recv(self) -> dict | None:
        """The next message (blocking); None at a clean end of stream."""
        if self._next < len(self._messages):
            message = self._messages[self._next]
            self._next += 1
            return message
        while True:
            chunk = self._read()
            if not chunk:
                if self._reader.mid_frame:
                    raise ChannelError("stream ended inside a frame")
                return None
            messages = self._reader.feed(chunk)
            if messages:
                self._messages = messages
                self._next = 1
                return messages[0]

    def buffered(self) -> bool:
        """Whether a message can be returned without reading."""
        return self._next < len(self._messages)


class FrameReader:
    """Incremental decoder: `feed(bytes)` returns the messages completed so far (a batch frame
    contributes each of its messages)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._need: int | None = None  # body length once the header is in
        self._exact = False  # ... and whether it has the EXACT flag
        #: whether the last frame whose header was read had the BUSY flag, and CROWDED
        self.peer_busy = False
        self.peer_crowded = False

    @property
    def mid_frame(self) -> bool:
        return bool(self._buffer) or self._need is not None

    def feed(self, data: bytes) -> list[dict]:
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
        messages: list[dict] = []
        pos = 0
        size = len(data)
        need = self._need
        exact = self._exact
        while True:
            if need is None:
                if size - pos < HEADER.size:
                    break
                (need,) = HEADER.unpack_from(data, pos)
                if need > MAX_FRAME:
                    exact = need & EXACT != 0
                    self.peer_busy = need & BUSY != 0
                    self.peer_crowded = need & CROWDED != 0
                    need = frame_length(HEADER.pack(need))  # raises FrameTooLarge
                else:
                    self.peer_busy = self.peer_crowded = False
                pos += HEADER.size
            if size - pos < need:
                break
            message = decode_body(data[pos:pos + need], exact)
            pos += need
            need = None
            exact = False
            if type(message) is dict:
                messages.append(message)
            else:
                messages.extend(message)
        self._need = need
        self._exact = exact
        self._buffer = bytearray(data[pos:]) if pos < size else bytearray()
        return messages


def claim_stdio() -> tuple[int, int]:
    """For the child: take the pipe (fds 0 and 1) for the channel and return (read, write).

    Afterwards fd 0 reads /dev/null and fd 1 is a copy of stderr, so `print` and stray writes to
    stdout end up in the host's stderr record instead of inside a frame.
    """
    read_fd = os.dup(0)
    write_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return read_fd, write_fd
