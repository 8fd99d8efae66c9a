"""Following a run as it goes: live history is the progress feed (the execution seed, Live
execution). `watch_run` yields each fact of a run, as `flow history --json` shows it (with
`acceptedAt`, and `durationMs` on a Reply, where known), first those already recorded, then each
one as storage accepts it, whichever process writes it; it ends after End, at a pause or a halt
(the host's decision recorded at the last fact), or when no process holds the run any more and it
recorded neither (a crash). `flow history RUN --follow`, the MCP server's progress notifications
and the terminal's status line are built on the same `RunWatch`.

It reads the run through the store (`flowrt.store.open_store`), read-only: each poll asks the
store to read on (`RunLog.refresh`: two `stat`s when nothing changed, else only what was
appended, verified as an open verifies it), so following a long run costs what it appends. A
damaged record raises StorageError; facts it has yielded that vanish (a failed sync removed them)
are a StorageError too. Every wait is bounded: `poll` between reads, `timeout` for the whole
watch (TimeoutError when the run has not ended by then).

A fact's time is a host record the writer adds once the fact is durable, a moment after the fact
itself: a fact whose time is not known yet is held back for up to HOLD_SECONDS for it (so a feed
shows times), then given without it.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterator

from flowrt.fact_times import CallClock
from flowrt.store import RunLog, StorageError, open_store

#: how long a fact whose time is not recorded yet waits for it before it is given without
HOLD_SECONDS = 0.25
#: how often, while no facts arrive, the run's state (a pause, a halt, no appender) is looked at
STATE_EVERY = 0.2
#: the states that end a watch (flowrt.run_state); `unknown` ends it too unless the history was
#: only changing while it was read
ENDINGS = ("ended", "paused", "halted", "crashed")


class RunWatch:
    """One run followed: `step()` reads once and returns the fact rows ready to be given; `done`
    and `ending` (`ended`, `paused`, `halted`, `crashed` or `unknown`) say when it is over.

    `since`: give only facts after this fact number (earlier ones are read, for call durations).
    `settle`: end at a pause, halt or crash (a status line following its own command's run says
    False: the run it resumes is paused until the command takes it)."""

    def __init__(self, location: str, run_id: str, *, since: int = 0, settle: bool = True) -> None:
        self.location = location
        self.run_id = run_id
        self.since = since
        self.settle = settle
        self.run: RunLog = open_store(location).open(run_id, for_append=False)
        self.clock = CallClock()
        self.started = False
        self.last: dict | None = None  # the last fact read
        self.held: list[dict] = []  # facts read, not yet given (waiting for their time)
        self.held_since = 0.0
        self.checked = 0.0  # when the run's state was last looked at
        self.done = False
        self.ending: str | None = None
        self.reason: str | None = None

    @property
    def head_n(self) -> int:
        """The number of the last fact read (0 before any)."""
        return self.last["n"] if self.last is not None else 0

    def step(self, *, final: bool = False) -> list[dict]:
        """Read what is new; the rows to give now. `final`: give every fact read, timed or not."""
        if self.done:
            return []
        new = self._read()
        now = time.monotonic()
        if new:
            if not self.held:
                self.held_since = now
            self.held.extend(new)
            self.last = new[-1]
        ended = self.last is not None and self.last["kind"] == "End"
        if not new and not ended and self.settle and now - self.checked >= STATE_EVERY:
            self.checked = now
            self._settle()
        return self._give(now, final or self.done)

    def _read(self) -> list[dict]:
        if not self.started:
            # What the run held when it was opened, then what landed since: a run that went on
            # between the open and this first read (a quick one, followed for the last time) is
            # read to where it is now, not to where it was.
            self.started = True
            first = list(self.run.facts())
            last_n = first[-1]["n"] if first else 0
            return first + [f for f in self._read_on() if f["n"] > last_n]
        return self._read_on()

    def _read_on(self) -> list[dict]:
        new = self.run.refresh()
        if new is None:
            new = self._reopen()
        return new

    def _reopen(self) -> list[dict]:
        """The store could not read on: open the run again, and check that what was read is
        still there, unchanged."""
        again = open_store(self.location).open(self.run_id, for_append=False)
        last = self.last
        if last is not None:
            try:
                same = again.fact(last["n"])["hash"] == last["hash"]
            except IndexError:
                same = False
            if not same:
                again.close()
                raise StorageError(f"fact {last['n']} was read and is no longer in the history", last["n"])
        self.run.close()
        self.run = again
        return [f for f in again.facts() if f["n"] > self.head_n]

    def _settle(self) -> None:
        """Look at the run's state: over at a pause, a halt, or with no appender and no decision."""
        from flowrt.run_state import run_state

        state = run_state(self.run)
        if state["state"] in ENDINGS or (state["state"] == "unknown" and "changed" not in state["reason"]):
            more = self.run.refresh()
            if more:  # written just before the host let go: read them, look again later
                if not self.held:
                    self.held_since = time.monotonic()
                self.held.extend(more)
                self.last = more[-1]
                return
            self.done, self.ending, self.reason = True, state["state"], state["reason"]

    def _give(self, now: float, everything: bool) -> list[dict]:
        rows = self._timed(now, everything)
        if not self.held and self.last is not None and self.last["kind"] == "End":
            self.done, self.ending = True, "ended"
        return rows

    def _timed(self, now: float, everything: bool) -> list[dict]:
        if not self.held:
            return []
        from flowrt.inspect_cmd import describe_fact

        times = self.run.fact_times()
        waited = now - self.held_since >= HOLD_SECONDS
        rows = []
        while self.held:
            fact = self.held[0]
            if fact["n"] not in times and not (everything or waited):
                break
            self.held.pop(0)
            row = self.clock.stamp(describe_fact(self.run, fact), fact, times)
            if fact["n"] > self.since:
                rows.append(row)
        return rows

    def close(self) -> None:
        self.run.close()


def _check(poll: float, timeout: float | None) -> None:
    if not isinstance(poll, (int, float)) or not poll > 0:
        raise ValueError("poll is a number of seconds > 0")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError("timeout is None or a number of seconds >= 0")


def _timed_out(run_id: str, timeout: float) -> TimeoutError:
    return TimeoutError(f"run {run_id} did not end, pause or halt within {timeout} s")


def follow(watch: RunWatch, *, poll: float = 0.05, timeout: float | None = None) -> Iterator[dict]:
    """The rows of `watch` as they come, until it is done; TimeoutError after `timeout` s."""
    _check(poll, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        yield from watch.step()
        if watch.done:
            return
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timed_out(watch.run_id, timeout)
            time.sleep(min(poll, left))
        else:
            time.sleep(poll)


def watch_run(location: str, run_id: str, *, poll: float = 0.05, timeout: float | None = None) -> Iterator[dict]:
    """Each fact of run `run_id` in the store at `location`, as `flow history --json` shows a fact
    (with `acceptedAt` where known), as it is accepted; ends after End, a pause or a halt (or a
    crash: no process holds the run and it recorded neither). RunNotFound for an absent run,
    StorageError for a damaged record, TimeoutError when `timeout` seconds pass first."""
    _check(poll, timeout)
    watch = RunWatch(location, run_id)
    try:
        yield from follow(watch, poll=poll, timeout=timeout)
    finally:
        watch.close()


async def follow_async(watch: RunWatch, *, poll: float = 0.05, timeout: float | None = None) -> AsyncIterator[dict]:
    """`follow` on the loop: each read on a worker thread, each wait an asyncio sleep."""
    _check(poll, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for row in await asyncio.to_thread(watch.step):
            yield row
        if watch.done:
            return
        wait = poll
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timed_out(watch.run_id, timeout)
            wait = min(poll, left)
        await asyncio.sleep(wait)


async def watch_run_async(location: str, run_id: str, *, poll: float = 0.05,
                          timeout: float | None = None) -> AsyncIterator[dict]:
    """`watch_run` as an async iterator: the reads run on a worker thread, the waits on the loop."""
    _check(poll, timeout)
    watch = await asyncio.to_thread(RunWatch, location, run_id)
    try:
        async for row in follow_async(watch, poll=poll, timeout=timeout):
            yield row
    finally:
        watch.close()
