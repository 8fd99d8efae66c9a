"""Several live runs of one program in one child, each in a lane of its own (`serve_lanes`).

A host driving many runs at once wakes a child per call when each run has its own: under load
every child sleeps and wakes once a call and runs its Python on cold caches, ~35 µs of CPU a call
where its own work is ~10 (docs/impl.md, sessions 16-20). A child serving several runs of the
same program reads the replies of all of them in one read and runs each lane that got one before
it sleeps again, as seed 001's worker subprocess holds several isolates.

The protocol is `sandbox.wire`'s, with a lane number on every message, both ways:

  host  -> {"op": "load", "lane": 0, ...}      the first load: the program, and lane 0's run
  host  -> {"op": "load", "lane": k, ...}      another run of the same program (its modules the
                                               same, byte for byte), in lane k
  child -> {"op": "call", "lane": k, ...}      everything lane k's run says, as `sandbox.wire`
  host  -> {"op": "reply", "lane": k, ...}     ... and what the host says to it
  child -> {"op": "end", "lane": k, ...}       lane k's run ended: the lane is free again
  host  -> {"op": "drop", "lane": k}           end lane k's run where it waits (the host let go of
                                               the run: it halted); a drop for no lane is ignored

Each lane has its own scheduler, tasks, wire and values; the loaded modules hold functions and
constants only (generated code stores into nothing, docs/sandbox.md), which is what lets a kept
child (flowrt/kept_child.py) serve one run after another, and lanes one beside another. A lane's
run is live from its start: a replay, a resume from a checkpoint, a `flow test` or another
program ends the child (the host starts those in children of their own). What a child's death
or limit means for the runs beside it is the host's to decide: they share the process.

A lane waits for its host in a greenlet of its own; the loop switches to each lane a message
came for, in the order they came, and reads again only once every lane waits.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import greenlet

from flowdata import framing as channel
from sandbox.wire import Wire


class LaneWire(Wire):
    """Lane `lane`'s wire: what it says goes out tagged with its number, as `Wire` sends it;
    what it waits for comes from its `inbox`, which the lanes' loop fills."""

    def __init__(self, lane: int, write_fd: int, loop: greenlet.greenlet) -> None:
        super().__init__(None, write_fd)  # (no receiver of its own: the loop reads for every lane)
        self.lane = lane
        self.inbox: deque = deque()
        self.waiting = False
        self._loop = loop
        self.runner: greenlet.greenlet | None = None

    def send(self, message: dict) -> None:
        message["lane"] = self.lane
        Wire.send(self, message)

    def recv(self) -> dict:
        inbox = self.inbox
        while not inbox:
            self.flush()  # about to wait for the host: it must have everything said so far
            self.waiting = True
            self._loop.switch()
        return inbox.popleft()

    def stuck(self, why: str) -> None:
        # (only a replay is stuck, and no lane replays: `fits`)
        raise AssertionError(f"lane {self.lane} is stuck: {why}")


def fits(load: dict, first: dict) -> bool:
    """Whether `load` is a run a lane may take beside `first`'s: a live run of the same program,
    from its start, in a lane numbered by a non-negative int."""
    lane = load.get("lane")
    return (load.get("op") == "load" and type(lane) is int and lane >= 0 and not load.get("replay")
            and load.get("start") is None and load.get("modules") == first.get("modules"))


def serve_lanes(first: dict, receiver: channel.Receiver, write_fd: int,
                run_once: Callable[[dict, Wire], None]) -> None:
    """Run `first` in its lane and every later load that `fits` beside it in another, until the
    host closes the pipe; `run_once(load, wire)` runs one load to its `end`. A message for no
    lane, or a load that does not fit (or names a lane still running), ends the child."""
    loop = greenlet.getcurrent()
    lanes: dict[int, LaneWire] = {}
    ready: deque = deque()

    def start(load: dict) -> bool:
        if not fits(load, first) or load["lane"] in lanes:
            return False
        wire = LaneWire(load["lane"], write_fd, loop)

        def run() -> None:
            try:
                run_once(load, wire)
            finally:
                del lanes[wire.lane]

        wire.runner = greenlet.greenlet(run, loop)
        lanes[wire.lane] = wire
        ready.append(wire)
        return True

    def take(message: dict) -> bool:
        op = message.get("op")
        if op == "load":
            return start(message)
        wire = lanes.get(message.get("lane"))
        if op == "drop":
            if wire is not None:
                wire.runner.throw(greenlet.GreenletExit)  # (its run ends where it waits, saying nothing more)
            return True
        if wire is None:
            return False
        wire.inbox.append(message)
        if wire.waiting:
            wire.waiting = False
            ready.append(wire)
        return True

    if not start(first):
        return
    while True:
        while ready:
            runner = ready.popleft().runner
            if not runner.dead:  # (dropped while it was ready)
                runner.switch()
        message = receiver.recv()
        if message is None or not take(message):
            return
        while receiver.buffered():  # (a batch of replies: every lane they are for runs before the next read)
            if not take(receiver.recv()):
                return
