"""The host's side of a Tool process's stdin: lines written from a thread of their own, so the
driver never blocks on a process that does not read its input (docs/cli.md, "Tool processes are
not trusted to behave").

`InputWriter.put` queues a line and returns at once (when nothing waits before it, it first
tries one non-blocking write itself). The writer thread writes with non-blocking writes, waiting for the pipe with a short poll so that it can always be stopped. What it holds
is bounded (`HELD_LIMIT` bytes of lines not yet written: a line past it is refused, the caller
answers its call NotRun), and so is how long the process may leave its input unread: lines
waiting while the pipe takes no byte for `STALL_SECONDS` make the process broken (`on_stall`).

Which calls the process may have seen is exact: a call is *started* once any byte of its line
went into the pipe. A call never started was never delivered (NotRun); a started one may have
been read (Unknown), even when it is still in the pipe's buffer.
"""

from __future__ import annotations

import collections
import os
import select
import threading
import time
from collections.abc import Callable

STALL_SECONDS = 10.0  # lines waiting and not a byte read for this long: the process is broken
HELD_LIMIT = 64 * 1024 * 1024  # bytes of lines the host holds for one process, not yet in its pipe
POLL_SECONDS = 0.1  # how often a waiting writer looks whether it was stopped


class InputWriter:
    def __init__(self, stream, on_stall: Callable[[], None], on_closed: Callable[[list[str]], None]) -> None:
        """`stream`: the process's stdin (closed by the writer when it stops). `on_stall()`: the
        process left its input unread too long. `on_closed(unsent)`: the pipe stopped taking
        input (the process closed it or exited); `unsent` are the calls never started."""
        self.stream = stream
        self.fd = stream.fileno()
        os.set_blocking(self.fd, False)
        self.on_stall = on_stall
        self.on_closed = on_closed
        self.queue: collections.deque[tuple[str | None, bytes]] = collections.deque()
        self.held = 0
        self.started: set[str] = set()
        self.condition = threading.Condition()
        self.stopping = False
        self.broken = False  # the pipe took no more input
        self.done = threading.Event()
        threading.Thread(target=self._run, name="tool writer", daemon=True).start()

    def put(self, call_id: str | None, line: bytes) -> str | None:
        """Queue `line` (of the call `call_id`, or a message of no call): None, or why it was not
        queued (`"closed"`: the input takes no more; `"held"`: too much already waits)."""
        with self.condition:
            if self.stopping or self.broken:
                return "closed"
            if self.held + len(line) > HELD_LIMIT:
                return "held"
            if not self.queue:
                # Nothing waits before it: try the pipe from this thread (a non-blocking write
                # never blocks the caller), which spares a wake of the writer thread per call.
                # Whatever the pipe does not take, and every failure, is the writer's as before.
                try:
                    wrote = os.write(self.fd, line)
                except OSError:  # BlockingIOError (full) or BrokenPipeError: the writer reports it
                    wrote = 0
                if wrote:
                    if call_id is not None:
                        self.started.add(call_id)
                    if wrote == len(line):
                        return None
                    # Started: what is left goes as no call's, so a failure later cannot call it
                    # never delivered.
                    call_id, line = None, line[wrote:]
            self.queue.append((call_id, line))
            self.held += len(line)
            self.condition.notify()
        return None

    def stop(self) -> None:
        """No line is started after this returns (so `was_started` is final); queued lines are
        dropped and the process's stdin is closed within `POLL_SECONDS`."""
        with self.condition:
            self.stopping = True
            self.condition.notify()

    def was_started(self, call_id: str) -> bool:
        with self.condition:
            return call_id in self.started

    def _run(self) -> None:
        try:
            while True:
                with self.condition:
                    while not self.queue and not self.stopping:
                        self.condition.wait()
                    if self.stopping:
                        return
                    call_id, line = self.queue[0]
                    if call_id is not None:
                        self.started.add(call_id)  # before the first byte can reach the pipe
                outcome, wrote = self._write(line)
                with self.condition:
                    self.queue.popleft()
                    self.held -= len(line)
                    if outcome in ("stalled", "closed"):
                        # No more is written. A line of which no byte went in was never delivered.
                        self.broken = True
                        if call_id is not None and not wrote:
                            self.started.discard(call_id)
                        unsent = [call_id] if call_id is not None and not wrote else []
                        unsent += [c for c, _ in self.queue if c is not None]
                        self.queue.clear()
                        self.held = 0
                if outcome == "stalled":
                    self.on_stall()
                    return
                if outcome == "closed":
                    self.on_closed(unsent)
                    return
                if outcome == "stopped":
                    return
        finally:
            try:
                self.stream.close()
            except OSError:
                pass
            self.done.set()

    def _write(self, line: bytes) -> tuple[str, bool]:
        """How the write ended: "written", "stopped", "stalled" (no byte taken for
        STALL_SECONDS) or "closed"; and whether any byte of the line went into the pipe."""
        view = memoryview(line)
        last_progress = time.monotonic()
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        while view:
            if self.stopping:
                return "stopped", len(view) < len(line)
            try:
                view = view[os.write(self.fd, view):]
                last_progress = time.monotonic()
                continue
            except BlockingIOError:
                pass
            except OSError:  # BrokenPipeError: the process no longer reads its stdin
                return "closed", len(view) < len(line)
            if time.monotonic() - last_progress >= STALL_SECONDS:
                return "stalled", len(view) < len(line)
            poller.poll(POLL_SECONDS * 1000)
        return "written", True
