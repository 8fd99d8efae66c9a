"""Reading what a Tool process writes, with a bound: its stdout as JSON lines of at most
`LINE_LIMIT` bytes (the rest of a longer line is discarded as it streams, never held), its stderr
as a tail of at most `TAIL_BYTES`, and the call id at the start of a reply line too long or too
deep to parse (and how deep it is).

A process is not trusted to end its lines, to write UTF-8 or to nest sensibly: nothing here grows
with what it writes beyond those bounds, and nothing here raises on what it writes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

REPLY_LIMIT = 1024 * 1024  # bytes of an outcome's canonical JSON; a larger one is admitted as BadReply
# A reply line may be longer than its outcome's canonical JSON: an envelope, whitespace, and
# `\uXXXX` escapes (Python's json.dumps escapes by default: 6 bytes for a character canonical JSON
# writes in 2 to 4). Four times the reply limit leaves room for all three, so a line is only cut
# where its outcome could not have been under the reply limit anyway... short of a pathologically
# indented one, which is BadReply as well.
LINE_LIMIT = 4 * REPLY_LIMIT
TAIL_BYTES = 8 * 1024  # of stderr, shown when a process fails to describe itself
CHUNK = 64 * 1024


def lines(fd: int, limit: int = LINE_LIMIT) -> Iterator[tuple[bytes, bool]]:
    """The lines read from `fd` until end of file, without their newline, as `(line, cut)`:
    `cut` when the line was longer than `limit`, and then `line` is its first `limit + 1` bytes,
    yielded as soon as the limit is passed (not when, if ever, the line ends). The rest of a cut
    line is read and dropped. A last line without a newline is yielded at end of file."""
    reader = LineReader(fd, limit)
    while True:
        got = reader.read()
        if got is None:
            return
        yield from got


class LineReader:
    """`lines` one read at a time, so that whichever thread reads `fd` next (one at a time)
    carries on where the last left off: a line begun in one read ends in another's."""

    def __init__(self, fd: int, limit: int = LINE_LIMIT) -> None:
        self.fd = fd
        self.limit = limit
        self.held = bytearray()
        self.dropping = False

    def read(self) -> list[tuple[bytes, bool]] | None:
        """The lines that one read of `fd` (blocking if nothing waits) completes, possibly none;
        None at end of file (after the last line, if it had no newline)."""
        while True:
            try:
                chunk = os.read(self.fd, CHUNK)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            break
        if not chunk:
            last = [] if not self.held or self.dropping else [(bytes(self.held), False)]
            self.held.clear()
            return last or None
        return self.split(chunk)

    def split(self, chunk: bytes) -> list[tuple[bytes, bool]]:
        held, limit = self.held, self.limit
        out = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if self.dropping:
                self.dropping = newline < 0
            elif len(held) + (end - start) > limit:
                held += chunk[start:start + limit + 1 - len(held)]
                out.append((bytes(held), True))
                held.clear()
                self.dropping = newline < 0
            elif newline >= 0:
                held += chunk[start:end]
                out.append((bytes(held), False))
                held.clear()
            else:
                held += chunk[start:end]
            if newline < 0:
                return out
            start = newline + 1


def drain_tail(fd: int, tail: bytearray, limit: int = TAIL_BYTES) -> None:
    """Read `fd` to its end, keeping only its last `limit` bytes in `tail`."""
    while True:
        try:
            chunk = os.read(fd, CHUNK)
        except InterruptedError:
            continue
        except OSError:
            return
        if not chunk:
            return
        tail += chunk
        if len(tail) > limit:
            del tail[:len(tail) - limit]


def tail_text(tail: bytes, max_lines: int = 12) -> str:
    """The last lines of a stderr tail, as text (bytes that are not UTF-8 replaced)."""
    text = bytes(tail).decode("utf-8", errors="replace")
    kept = text.rstrip("\n").split("\n")
    if len(tail) >= TAIL_BYTES and len(kept) > 1:
        kept = kept[1:]  # the first line kept is probably the end of a longer one
    return "\n".join(kept[-max_lines:])


_STRUCTURAL = re.compile(r'["{}\[\],:]')
_SPACE = re.compile(r"[ \t\r\n]*")


def top_level_id(text: str) -> str | None:
    """For a line that did not parse: the string value of its top-level `"id"` member, read from
    the start of the line (None when the line is not an object that names one before it breaks
    off). Iterative: a line nested 100,000 levels deep is scanned, not recursed into."""
    position = _SPACE.match(text, 0).end()
    if not text.startswith("{", position):
        return None
    scan = json.decoder.scanstring
    position += 1
    while True:
        position = _SPACE.match(text, position).end()
        if not text.startswith('"', position):
            return None
        try:
            key, position = scan(text, position + 1)
        except ValueError:
            return None
        position = _SPACE.match(text, position).end()
        if not text.startswith(":", position):
            return None
        position = _SPACE.match(text, position + 1).end()
        if key == "id":
            if not text.startswith('"', position):
                return None
            try:
                value, _ = scan(text, position + 1)
            except ValueError:
                return None
            return value
        # Skip the member's value: to the comma or brace that ends it at this level.
        depth = 0
        while True:
            found = _STRUCTURAL.search(text, position)
            if found is None:
                return None
            char = found.group()
            position = found.end()
            if char == '"':
                try:
                    _, position = scan(text, position)
                except ValueError:
                    return None
            elif char in "{[":
                depth += 1
            elif char in "}]":
                if depth == 0:
                    return None  # the object ended without an id
                depth -= 1
            elif char == "," and depth == 0:
                break


def nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in `text` (strings skipped), without recursing."""
    scan = json.decoder.scanstring
    position = depth = deepest = 0
    while True:
        found = _STRUCTURAL.search(text, position)
        if found is None:
            return deepest
        char = found.group()
        position = found.end()
        if char == '"':
            try:
                _, position = scan(text, position)
            except ValueError:
                return deepest
        elif char in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "}]":
            depth -= 1
