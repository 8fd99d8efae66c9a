"""Live runs of one program served by one sandbox child, a lane each: the host's side of
sandbox/lanes.py (`SharedChildren.take`, the one entry; `FLOW_SANDBOX_LANES`, off unless set).

A host driving many runs at once wakes a child per call when each run has its own, and under load
each child then runs its Python on cold caches: 20 children cost ~32 µs of CPU a call where one
child serving the 20 runs costs ~15 (scripts/bench/child_lanes.py; docs/impl.md, session 21). With
`FLOW_SANDBOX_LANES=N` (N >= 2), a run hub (flowrt/run_hub.py) puts each live run from its start
into a lane of a child that already serves runs of the same program, up to N at once, and starts
such a child when none has room. Replays, resumes (a worker's drives among them), `flow test`
and runs outside a hub keep a child of their own.

What the runs in one child share is the process, so:

- **its death halts them all.** A shared child that dies (a crash, a limit of the process: CPU,
  memory) halts every run in it, resumable, with reason `shared-child` (a worker resumes them,
  as it resumes runs whose child template ended), and none is Faulted: which run caused it, the
  host cannot tell. Resumed, each runs in a child of its own, where a run that was the cause meets
  its limit again and ends as it would have alone.
- **a run let go of before its End** (it halted, was interrupted) has its lane dropped: the child
  ends that run where it waits. Lane numbers are never used twice in one child, so nothing the
  child said for a dropped lane reaches another run.
- **the child's limits**: RLIMIT_CPU counts its whole life, so a child takes no new run once it
  has used `NEW_LANES_CPU_SECONDS` of CPU or holds `NEW_LANES_RESIDENT_BYTES`. One whose last
  lane ended waits for the next runs of its program (at most `IDLE_SHARED` wait, as kept
  children do: a short run then skips the fork, load and lockdown), and `close()` ends those. A
  run computing without a call holds the other lanes up until it calls (the lanes are
  cooperative), as a slow inline Tool holds up a hub.

Each lane is a `Lane`, which a run's `Driver` speaks to as it speaks to a `Child`. One lane at a
time reads the child's pipe (through the hub, as a `Child` waits) and hands each message to its
lane; the others wait on their queues and one of them takes over the reading when the reader has
what it waited for. What the lanes post is held until every run of the hub waits, then written
in one write (`RunHub.before_poll`): the child wakes once for a round's replies, not once a reply
(20 runs in lanes: 26,000 calls/s against 24,500, medians of 6 alternating rounds), and each
run's replies keep their order, the order its history records.
"""

from __future__ import annotations

import collections
import itertools
import os
import queue
import signal as signals
import threading
import time
import weakref
from typing import Callable

from flowdata.policy import Limits
from flowrt import run_hub
from flowrt.halts import SharedChildHalt
from flowrt import sandbox_launch as launch
from flowrt.kept_child import cpu_seconds_of, usage
from flowrt.sandbox_process import IDLE_BEFORE_SLEEP, POLL_TICK, Child, ChildDied, ChildTimeout

#: Set to N >= 2: live runs in a hub share children, up to N runs a child.
LANES_VARIABLE = "FLOW_SANDBOX_LANES"
#: A shared child that has used this much CPU (of RLIMIT_CPU's 300 s) takes no new run ...
NEW_LANES_CPU_SECONDS = 60.0
#: ... nor one that holds this much memory.
NEW_LANES_RESIDENT_BYTES = 256 << 20
#: Shared children serving no run that wait for the next runs of their program, per host.
IDLE_SHARED = 4


_ALL: "weakref.WeakSet[SharedChildren]" = weakref.WeakSet()


def shared_cpu_seconds() -> float:
    """CPU seconds the shared children of this process have used so far, for benchmarks: one is
    reaped (and its CPU counted with the reaped ones) only once it is let go."""
    return cpu_seconds_of(child for shared in list(_ALL) for child in shared.children())


def lanes_per_child() -> int:
    """`FLOW_SANDBOX_LANES` as a count of runs a child may serve at once (0: lanes are off)."""
    try:
        count = int(os.environ.get(LANES_VARIABLE, "0"))
    except ValueError:
        return 0
    return count if count >= 2 else 0


class LaneLost(ChildDied):
    """The child serving this run beside others died (`died`): the run halts (reason
    `shared-child`, `halts.SharedChildHalt`), never Faulted."""

    def __init__(self, died: ChildDied) -> None:
        super().__init__(died.returncode, died.signal, died.stderr_tail, died.reason,
                         f"the child served it beside other runs of its program; {died.explanation}".rstrip("; "))
        self.halt = SharedChildHalt


class SharedChildren:
    """The children serving runs in lanes, by program; thread-safe (runs start on any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_program: dict[tuple, list[SharedChild]] = {}
        self._closed = False
        _ALL.add(self)

    def take(self, program: str, limits: Limits, child_for: Callable[[], Child]) -> "Lane | None":
        """A lane for a live run of `program` in a hub, in a child that serves runs of it under
        today's launch settings and has room, or in a new one (`child_for()`: a child no one has
        spoken to, which this takes); None where lanes are off or do not apply (the caller gives
        the run a child of its own)."""
        size = lanes_per_child()
        hub = run_hub.current()
        if not size or hub is None or self._closed:
            return None
        # (a child is shared by the runs of one hub: everything it does happens on that thread)
        key = (program, launch.settings(limits), id(hub))
        with self._lock:
            for shared in self._by_program.get(key, ()):
                lane = shared.open_lane(size)
                if lane is not None:
                    return lane
        shared = SharedChild(child_for(), key, size, self._forget, self._keep_idle)
        lane = shared.open_lane(size)
        with self._lock:
            if not self._closed:  # (closed meanwhile: the child serves this run alone)
                self._by_program.setdefault(key, []).append(shared)
        return lane

    def children(self) -> list[Child]:
        """The shared children taking runs now (tests, benchmarks)."""
        with self._lock:
            return [shared.child for children in self._by_program.values() for shared in children]

    def _forget(self, shared: "SharedChild") -> None:
        with self._lock:
            children = self._by_program.get(shared.key, [])
            if shared in children:
                children.remove(shared)
            if not children:
                self._by_program.pop(shared.key, None)

    def _keep_idle(self, shared: "SharedChild") -> bool:
        """Whether `shared`, whose last run has ended, may wait for the next runs of its program:
        at most `IDLE_SHARED` wait, and none once closed."""
        with self._lock:
            if self._closed:
                return False
            idle = sum(1 for children in self._by_program.values() for each in children if not each.lanes)
            return idle <= IDLE_SHARED  # (itself counted)

    def close(self) -> None:
        """Take no more runs: the children waiting for one are let go, those serving runs now
        end with their last lane."""
        with self._lock:  # (as `open_lane` is: no run takes a lane of one being let go)
            self._closed = True
            idle = [shared for children in self._by_program.values() for shared in children if not shared.lanes]
            for shared in idle:  # (one serving runs ends with its last, on its hub's thread)
                shared.retired = True
                shared.child.let_go()
            for shared in idle:
                self._by_program[shared.key].remove(shared)
                if not self._by_program[shared.key]:
                    del self._by_program[shared.key]


class SharedChild:
    """One child and the lanes it serves; touched from the hub's thread only, but for
    `open_lane` (under the `SharedChildren` lock)."""

    def __init__(self, child: Child, key: tuple, size: int, forget, keep_idle) -> None:
        self.child = child
        self.key = key  # (its `SharedChildren`'s: program, launch settings, hub)
        self.size = size
        self.lanes: dict[int, Lane] = {}
        self.numbers = itertools.count()
        self.reader: Lane | None = None
        self.heard = time.monotonic()  # when the child last said anything
        self.died: ChildDied | None = None
        self.retired = False  # takes no new run
        self.held: list[bytes] = []  # frames posted, not yet written (`post`)
        self._forget = forget
        self._keep_idle = keep_idle  # (whether it may wait, serving none, for the next run)
        launch.disown(child)  # (counted by its lanes instead: `live_count` is the runs driven)

    def open_lane(self, size: int) -> "Lane | None":
        if self.retired or self.died is not None or len(self.lanes) >= size:
            return None
        if self.lanes:
            used = usage(self.child.pid)
            if used is None or used[0] >= NEW_LANES_CPU_SECONDS or used[1] >= NEW_LANES_RESIDENT_BYTES:
                self.retired = True
                return None
        lane = Lane(self, next(self.numbers))
        self.lanes[lane.number] = lane
        launch.own(lane)
        return lane

    def post(self, message: dict) -> None:
        """Post `message` to the child: with other lanes, held until every run of the hub waits,
        and then written with the others' in one write, which wakes the child once for all."""
        child = self.child
        if not self.held and len(self.lanes) < 2:
            child.post(message)  # (alone, nothing to wait for; after what is held, never before it)
            return
        if not self.held:
            run_hub.current().before_poll(self.write_held)
        self.held.append(child.framed(message))

    def write_held(self) -> None:
        held, self.held = self.held, []
        if self.died is None and held:
            try:
                self.child.post_bytes(b"".join(held))
            except (OSError, ChildDied):
                pass  # (the lanes see the child's death when they read)

    def route(self, message: dict) -> None:
        """Hand `message` to its lane (one let go of already: dropped)."""
        lane = self.lanes.get(message.pop("lane", None))
        if lane is None:
            return
        lane.inbox.append(message)
        lane.wake()

    def route_buffered(self) -> None:
        child = self.child
        while child.has_message():
            self.route(child.recv(0))

    def read_for(self, lane: "Lane", timeout: float) -> None:
        """`lane` reads the pipe for every lane: the messages that are there, or the next one
        within `timeout`. A child that owes a lane a message and has sent nothing for its
        wall-clock deadline is killed (every lane's run halts, `lost`)."""
        self.reader = lane
        try:
            message = self.child.recv(timeout)
        except ChildTimeout:
            self._check_deadline()
            return
        except ChildDied as died:
            self.lost(died)
            raise LaneLost(died) from None
        except BaseException:  # (a halt of the reader's run: another lane reads on once it yields)
            self.hand_reading_on(lane)
            raise
        finally:
            self.reader = None
        self.heard = time.monotonic()
        self.route(message)
        self.route_buffered()

    def _check_deadline(self) -> None:
        wall = self.child.wall_seconds
        owed = [lane.owed_since for lane in self.lanes.values() if lane.owed_since is not None]
        if wall is None or not owed:
            return
        quiet_since = max(self.heard, min(owed))
        if time.monotonic() - quiet_since < wall:
            return
        self.child.kill()
        died = ChildDied(None, signals.SIGKILL, self.child.stderr_tail(), "passed its wall-clock deadline",
                         f"the host killed it after {wall:g} s without a message, while a run in it waited for one")
        self.lost(died)
        raise LaneLost(died)

    def hand_reading_on(self, leaving: "Lane") -> None:
        for lane in self.lanes.values():
            if lane is not leaving and lane.waiting and lane.owed_since is not None:
                lane.wake()  # (it finds no message of its own and reads)
                return

    def lost(self, died: ChildDied) -> None:
        """The child died: every lane's run halts at its next look."""
        self.died = died
        self._forget(self)
        for lane in list(self.lanes.values()):
            lane.wake()

    def release(self, lane: "Lane") -> None:
        """`lane`'s run is over: its lane dropped in the child unless it ended there; the child
        let go of with its last lane once it takes no more."""
        self.lanes.pop(lane.number, None)
        launch.disown(lane)
        if self.died is None and not lane.ended:
            try:
                self.post({"op": "drop", "lane": lane.number})
            except (OSError, ChildDied):
                pass
        if not self.lanes:
            # (kept for the next runs of the program, as a kept child is, unless it takes no more)
            if self.retired or self.died is not None or not self._keep_idle(self):
                self.retire()
        elif self.reader is None:
            self.hand_reading_on(lane)

    def retire(self) -> None:
        """Take no new run; let the child go now if it serves none."""
        self.retired = True
        if not self.lanes:
            self._forget(self)
            self.child.let_go()


class Lane:
    """One run's lane of a `SharedChild`: what `flowrt.run.Driver` asks of its child."""

    kept_by = None

    def __init__(self, shared: SharedChild, number: int) -> None:
        self.shared = shared
        self.number = number
        self.inbox: collections.deque = collections.deque()
        self.waiting = False
        self.ended = False
        self.before_sleep = None
        self.check_halt = None
        self.owed_since: float | None = None  # since when its run waits on the child
        self._queue = None

    @property
    def pid(self) -> int:
        return self.shared.child.pid

    @property
    def layers(self) -> dict:
        return self.shared.child.layers

    @property
    def origin(self) -> str:
        return f"{self.shared.child.origin}; lane {self.number} of a child serving up to {self.shared.size} runs " \
               "of the same program at once"

    def send(self, message: dict, timeout: float | None = None) -> None:
        self._check_alive()
        self.shared.child.send(dict(message, lane=self.number), timeout)

    def post(self, message: dict) -> None:
        self._check_alive()
        message["lane"] = self.number
        self.shared.post(message)

    def _check_alive(self) -> None:
        if self.shared.died is not None:
            raise LaneLost(self.shared.died)

    def has_message(self) -> bool:
        if not self.inbox and self.shared.died is None:
            self.shared.route_buffered()
        return bool(self.inbox)

    def peek(self) -> dict | None:
        return self.inbox[0] if self.has_message() else None

    def recv(self, timeout: float | None = None) -> dict:
        inbox = self.inbox
        shared = self.shared
        if not inbox:
            self.owed_since = time.monotonic()
            try:
                self._wait_for_message(timeout)
            finally:
                self.owed_since = None
            if shared.reader is None:
                shared.hand_reading_on(self)  # (this lane read last: another that waits reads now)
        message = inbox.popleft()
        if message.get("op") == "end":
            self.ended = True
        return message

    def _wait_for_message(self, timeout: float | None) -> None:
        inbox = self.inbox
        shared = self.shared
        slept = False
        while not inbox:
            if shared.died is not None:
                raise LaneLost(shared.died)
            if shared.reader is None:
                child = shared.child
                child.before_sleep, child.check_halt = self.before_sleep, self.check_halt
                shared.read_for(self, POLL_TICK if timeout is None else timeout)
                if timeout is not None and not inbox:
                    raise ChildTimeout(timeout, "answer")
                continue
            self.waiting = True
            try:
                self._wait(IDLE_BEFORE_SLEEP if not slept else POLL_TICK)
            except queue.Empty:
                if not slept and self.before_sleep is not None:
                    self.before_sleep()  # (as a child's own wait: a Reply unsynced is synced)
                slept = True
                if self.check_halt is not None:
                    self.check_halt()
            finally:
                self.waiting = False

    def _wait(self, seconds: float) -> None:
        if self._queue is None:
            self._queue = run_hub.current().queue()
        self._queue.get(timeout=seconds)

    def wake(self) -> None:
        """Resume this lane's run if it waits on its queue (on the hub's thread)."""
        if self.waiting:
            self.waiting = False
            self._queue.put_here(True)

    def let_go(self) -> None:
        self.shared.release(self)

    kill = let_go
