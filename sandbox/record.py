"""Replay and resume: the child steps through the record the host streams, as the host does.

After `load` (with `"replay": true`, and `"places": false` when only places where a checkpoint
is taken need reporting) the host sends `{"op": "record", "facts": [...]}` frames holding, for
every recorded fact from the start (or the checkpoint) on, the kind (`"Call"`, `"Checkpoint"`,
...), or for a Reply `["Reply", call id, outcome]` (`["Reply", call id]` when the outcome cannot
be had: a hole, a lost value), then `{"op": "record-end", "checkpoints": policy}`. Each call,
choice and stop passes one fact (a stop also the Replies to its open calls that follow it), a
wait takes the next Reply, and a place is taken exactly when the next fact is a Checkpoint. So
the child never waits for an answer the record already holds; the host checks every message
against the same facts, in order, and reports the first difference. Past the end of the record
the run is live (resume) and waits are answered by the host (`sandbox.wire`). Everything the
child decides depends only on what the record says, never on when its frames arrive.
"""

from __future__ import annotations

import collections

from sandbox import runtime as R
from sandbox.wire import Wire


class Record:
    """The recorded facts received and not yet stepped through."""

    def __init__(self, wire: Wire, replaying: bool, policy: str) -> None:
        self.wire = wire
        self.replaying = replaying
        wire.live = not replaying
        self.facts: collections.deque = collections.deque()
        #: the checkpoint policy where the run is live: the load's, or the one `record-end` gives
        self.policy = policy

    def _fill(self) -> bool:
        """Receive until a recorded fact is at hand (True) or the record has ended (False)."""
        while not self.facts:
            message = self.wire.recv()
            op = message.get("op")
            if op == "record":
                self.facts.extend(message["facts"])
            elif op == "record-end":
                self.replaying = False
                self.wire.live = True
                self.policy = str(message.get("checkpoints", "off"))
                return False
            else:
                raise R.Fault("internal", f"the host sent {op!r} while the record was being read")
        return True

    def next_fact(self):
        """The next recorded fact (not taken), or None: the record has ended and the run is live."""
        if not self.replaying or (not self.facts and not self._fill()):
            return None
        return self.facts[0]

    def pass_fact(self, closed=()) -> None:
        """A call, choice or stop was sent: it stands for the next recorded fact, and a stop also
        for the Replies to the calls it closed that follow it (they reach no value)."""
        if self.next_fact() is None:
            return
        self.facts.popleft()
        if closed:
            while True:
                item = self.next_fact()
                if item is None or type(item) is not list or item[1] not in closed:
                    return
                self.facts.popleft()

    def take_checkpoint(self) -> bool | None:
        """At a place: whether the record takes a checkpoint here (and passes it if so), or None
        when the record has ended and the live policy decides."""
        if self.next_fact() is None:
            return None
        taken = self.facts[0] == "Checkpoint"
        if taken:
            self.facts.popleft()
        return taken

    def take_reply(self, open_calls: dict) -> tuple[str, object] | None:
        """The recorded Reply a wait takes: (call id, outcome), or None when the record has ended
        (the host answers from here on)."""
        item = self.next_fact()
        if item is None:
            return None
        self.facts.popleft()
        if type(item) is not list or len(item) < 3:
            self.stuck(f"the record holds {item!r} where the program waits for a reply")
        if item[1] not in open_calls:
            self.stuck(f"the record replies to {item[1]}, which is not open")
        return item[1], item[2]

    def stuck(self, why: str) -> None:
        """The record holds what cannot be handed over here. The host, checking the same facts,
        reports why; this is only a safety net against a child and host that disagree."""
        self.wire.stuck(why)
