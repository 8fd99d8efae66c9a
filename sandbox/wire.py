"""The child's side of the wire protocol with the host: framed canonical JSON on fds 0 (from the
host) and 1 (to the host), `flowdata.framing`'s frames; that pipe is the child's only egress
(`host.invoke`). One run, one process:

  host  -> {"op": "load", "modules": [...], "entry": {...}, "args": [...], "tools": {...},
            "checkpoints": policy, "replay": true?}
  child -> {"op": "call", "id": "root#1", "task": "root", "tool": "planner.next",
            "arguments": {...}, "types": {...}?}         a Tool call (the host records it first)
  child -> {"op": "choice", ...} / {"op": "stop", ...}    task.first's pick, a stopped task
  child -> {"op": "place", "function": {...}, "arguments": {...}, "taken": bool}
                                                           a checkpoint place (a root tail call)
  child -> {"op": "wait"}                                  every task waits: admit the next reply
            (or `"wait": true` on the call just before: the same, one message fewer)
  host  -> {"op": "reply", "id": "root#1", "outcome": {...}}
  child -> {"op": "end", "outcome": {"Completed": value} | {"Faulted": {...}}}

Only `wait` needs an answer. Whether a checkpoint is taken at a place follows from the policy
(`every`, `off`, or every Nth place), which the child applies itself and the host checks, so a
place costs no round trip (`sandbox.checkpoints`). The child sends in batches: what it has to say
goes out when it is about to wait for the host, before it runs another task (the scheduler
flushes then), and every `FLUSH_AT` messages.

Replay and resume stream the record instead of answering (`sandbox.record` steps through it):
`{"op": "record", "facts": [...]}` frames, then `{"op": "record-end", "checkpoints": policy}`.
Where the child cannot follow the record it says `{"op": "stuck", "message": ...}` and waits to
be ended.

A child serving several runs of one program tags every message, both ways, with its run's
`lane` (sandbox/lanes.py).
"""

from __future__ import annotations

import os

from flowdata import framing as channel

FLUSH_AT = 256  # messages held back at most before they are written


class Wire:
    """Messages to the host, batched, and messages from it."""

    def __init__(self, receiver: channel.Receiver, write_fd: int) -> None:
        self.receiver = receiver
        self.write_fd = write_fd
        self.out: list[dict] = []  # messages not yet written
        #: calls, choices and stops sent so far (each a fact of the history): a checkpoint place
        #: after none since the last adds nothing a checkpoint could let go of
        self.facts = 0
        #: where the run is live (not stepping through a record), a choice or a stop goes out at
        #: once: the host records it before it answers anything else
        self.live = True

    def send(self, message: dict) -> None:
        op = message["op"]
        if op == "call" or op == "choice" or op == "stop":
            self.facts += 1
        self.out.append(message)
        if len(self.out) >= FLUSH_AT or (self.live and (op == "choice" or op == "stop")):
            self.flush()

    def flush(self) -> None:
        if self.out:
            out, self.out = self.out, []
            channel.send_many(self.write_fd, out)

    def recv(self) -> dict:
        if not self.receiver.buffered():
            self.flush()  # about to wait for the host: it must have everything said so far
        message = self.receiver.recv()
        if message is None:
            os._exit(0)  # the host went away
        return message

    def ask_reply(self) -> None:
        """Every task waits: the host is to admit the next reply."""
        out = self.out
        if out and out[-1]["op"] == "call" and "wait" not in out[-1]:
            out[-1]["wait"] = True  # the same as a `wait` after it, one message fewer
        else:
            self.send({"op": "wait"})

    def reply(self, open_calls: dict) -> tuple[str, object]:
        """The next reply from the host to a call in `open_calls`: (call id, outcome). Replies
        to calls closed by a stop since are passed over."""
        while True:
            message = self.recv()
            if message.get("op") != "reply":
                continue
            if message["id"] not in open_calls:
                continue
            return message["id"], message["outcome"]

    def stuck(self, why: str) -> None:
        """Say why the child cannot go on, and end once the host has heard it (never returns)."""
        self.send({"op": "stuck", "message": why})
        self.flush()
        while self.receiver.recv() is not None:
            pass
        os._exit(0)
