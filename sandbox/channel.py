"""Framing for the host/child pipe, used on both sides.

A frame is a 4-byte big-endian unsigned length followed by that many bytes of canonical JSON
(orjson with sorted keys: UTF-8, no insignificant whitespace). Every message is a JSON object,
so `recv` can return None for a clean end of stream without ambiguity. Frames longer than
`MAX_FRAME` (64 MiB) are refused on both sides: `send` before writing, `recv` as soon as the
header announces one (the stream is then unusable; the host kills the child).

Non-JSON Python values (dataclasses, datetimes, str/int subclasses, non-text keys, integers
beyond 64 bits) are refused at `encode` rather than silently converted: what crosses the
boundary is JSON by construction.

`FrameReader` decodes incrementally, for a reader that polls with a deadline (the host);
`recv` is the blocking reader (the child). `claim_stdio()` is for the child's first line: it
moves the pipe off fds 0 and 1 so that a stray `print` cannot corrupt the stream.

Only `orjson`, `os` and `struct` are imported: this module is loaded inside the sandbox child.
"""

from __future__ import annotations

import os
import struct

import orjson

MAX_FRAME = 64 * 1024 * 1024
HEADER = struct.Struct(">I")
_DUMP_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class ChannelError(Exception):
    """The byte stream is not a sequence of valid frames."""


class FrameTooLarge(ChannelError):
    """A frame exceeds MAX_FRAME."""


def encode(obj: object) -> bytes:
    """The frame for `obj`: header and canonical JSON."""
    if not isinstance(obj, dict):
        raise ChannelError(
            f"channel messages are JSON objects, not {type(obj).__name__}: wrap the value, "
            'e.g. {"value": ...}'
        )
    try:
        body = orjson.dumps(obj, option=_DUMP_OPTIONS)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise ChannelError(
            f"message is not JSON ({exc}): convert it to null/bool/int/str/list/dict first"
        ) from None
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(
            f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit: send "
            "large values by reference (a content hash) instead"
        )
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ChannelError(f"frame is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ChannelError(f"frame holds a JSON {type(obj).__name__}, not an object")
    return obj


def frame_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise FrameTooLarge(
            f"incoming frame announces {length} bytes, over the {MAX_FRAME}-byte limit: the "
            "peer is broken or hostile; the stream cannot be resynchronized"
        )
    return length


def send(fd: int, obj: object) -> None:
    """Write one frame to `fd` (blocking, all of it)."""
    data = memoryview(encode(obj))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def recv(fd: int) -> dict | None:
    """Read one frame from `fd` (blocking); None at a clean end of stream."""
    header = _read_exactly(fd, HEADER.size, at_start=True)
    if header is None:
        return None
    body = _read_exactly(fd, frame_length(header), at_start=False)
    return decode_body(body or b"")


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


class FrameReader:
    """Incremental decoder: `feed(bytes)` returns the messages completed so far."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._need: int | None = None  # body length once the header is in

    @property
    def mid_frame(self) -> bool:
        return bool(self._buffer) or self._need is not None

    def feed(self, data: bytes) -> list[dict]:
        self._buffer += data
        messages: list[dict] = []
        while True:
            if self._need is None:
                if len(self._buffer) < HEADER.size:
                    return messages
                self._need = frame_length(bytes(self._buffer[: HEADER.size]))
                del self._buffer[: HEADER.size]
            if len(self._buffer) < self._need:
                return messages
            body = bytes(self._buffer[: self._need])
            del self._buffer[: self._need]
            self._need = None
            messages.append(decode_body(body))


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
