"""A Tool process that describes itself honestly, then misbehaves as `argv[1]` says once two
calls to `a.ask` are out (main.flow and race.flow make them at once). It serves `a.ask` and `b.ask`, so the
`b.ask` call after them goes to the same process (a process serving two modules).

Each misbehaviour is one entry of MISBEHAVIOURS; scripts/reliability/tool_replies.py says what the
host must make of each.
"""

from __future__ import annotations

import json
import os
import sys
import time

from flowrt.toolkit import describe

out = sys.stdout.buffer
MIB = 1024 * 1024


def send(data: bytes) -> None:
    out.write(data)
    out.flush()


def reply(call_id: str, value) -> None:
    send(json.dumps({"id": call_id, "outcome": {"Ok": value}}).encode() + b"\n")


def huge_line(prefix: bytes, size: int, end: bytes) -> None:
    """`prefix`, `size` bytes of x, `end`: written as it goes, never held whole."""
    send(prefix)
    block = b"x" * MIB
    for _ in range(size // MIB):
        out.write(block)
    send(end)


def endless() -> None:
    block = b"x" * MIB
    while True:  # until the host closes the pipe (BrokenPipeError ends the process)
        out.write(block)


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def dies(first: str, second: str) -> None:
    os._exit(3)


def closes_stdout(first: str, second: str) -> None:
    out.close()
    os.close(1)
    time.sleep(3600)  # still running, but it can never answer


def answers_late(first: str, second: str) -> None:
    """race.flow: the second call wins; the first, cancelled by then, is answered anyway."""
    reply(second, "fast")
    time.sleep(0.5)
    reply(first, "slow")


def stops_reading(first: str, second: str) -> None:
    """flood.flow: it neither reads its input nor answers again, and never exits."""
    time.sleep(3600)


MISBEHAVIOURS = {
    "honest": lambda first, second: (reply(first, "one"), reply(second, "two")),
    "not-json": lambda first, second: send(b"hello, this is not JSON\n"),
    "array": lambda first, second: send(b'[1, 2, 3]\n'),
    "string": lambda first, second: send(b'"hello"\n'),
    "no-id": lambda first, second: send(b'{"outcome": {"Ok": "one"}}\n'),
    "int-id": lambda first, second: send(b'{"id": 7, "outcome": {"Ok": "one"}}\n'),
    "unknown-id": lambda first, second: send(b'{"id": "c9:nobody#1", "outcome": {"Ok": "one"}}\n'),
    "deep-line": lambda first, second: send(deep(100_000) + b"\n"),
    "deep-reply": lambda first, second: (
        send(b'{"id": "%s", "outcome": {"Ok": %s}}\n' % (first.encode(), deep(100_000))), reply(second, "two")),
    "not-utf8": lambda first, second: send(b'{"id": "%s", "outcome": {"Ok": "\xff\xfe caf\xe9"}}\n' % first.encode()),
    "long-int": lambda first, second: (
        send(b'{"id": "%s", "outcome": {"Ok": %s}}\n' % (first.encode(), b"7" * 5000)), reply(second, "two")),
    "endless": lambda first, second: endless(),
    "huge-reply": lambda first, second: (
        huge_line(b'{"id": "%s", "outcome": {"Ok": "' % first.encode(), 120 * MIB, b'"}}\n'), reply(second, "two")),
    "huge-line": lambda first, second: huge_line(b"", 120 * MIB, b"\n"),
    "dies": dies,
    "closes-stdout": closes_stdout,
    "answers-late": answers_late,
    "stops-reading": stops_reading,
}


def main() -> None:
    misbehave = MISBEHAVIOURS[sys.argv[1]]
    waiting: list[str] = []
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message["op"] == "describe":
            send(json.dumps({"op": "described", "tools": describe("main.flow", ["a.ask", "b.ask"])}).encode() + b"\n")
        elif message["op"] == "call" and message["tool"] == "b.ask":
            reply(message["id"], "three")
        elif message["op"] == "call":
            waiting.append(message["id"])
            if len(waiting) == 2:
                misbehave(*waiting)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        os._exit(0)  # the host closed the pipe: it no longer listens
