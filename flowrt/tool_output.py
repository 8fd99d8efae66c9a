"""A Tool process's output (its stdout), read by one thread at a time: its reader thread, or the
run's driving thread while it waits for the reply of the only call out (`CommandTools.call_here`),
which spares the reply two thread wake-ups: the reader thread's, and the driving thread's when the
reader thread hands it the reply (docs/impl.md, "A Tool process's round trip").

The reader thread lets go of the output when asked (`take`) and waits until it is given it back
(`give_back`); both read through the same `LineReader`, so a line begun in one thread's read ends
in the other's, and lines are served in the order they were written whichever thread reads them.
The driving thread keeps the output from one call to the next (giving it back would cost the
reader thread's wake-up a call) and gives it back as soon as a call is out whose reply it does
not wait for, or the run lets the process go: until then nothing else is due from the process,
and what it writes meanwhile (an exit, a broken line) is read before the next call goes out.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable

from flowrt.tool_lines import LINE_LIMIT, LineReader

TAKE_SECONDS = 1.0  # for the reader thread to let go of the output (it does between reads)


class ToolOutput:
    def __init__(self, fd: int, serve: Callable[[list[tuple[bytes, bool]]], None], ended: Callable[[], None],
                 limit: int = LINE_LIMIT) -> None:
        """`serve(lines)`: lines read, as `LineReader.read` gives them. `ended()`: the output's end
        was read; called once, on the thread that read it."""
        self.lines = LineReader(fd, limit)
        self.serve = serve
        self.ended = ended
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)
        self.condition = threading.Condition()
        self.wanted = False  # another thread asked the reader thread to let go
        self.parked = False  # the reader thread has let go, and waits
        self.held_by: int | None = None  # the thread that took it, until it is done (`done_here`)
        self.give_back_after = False  # asked while held: given back once the holder is done
        self.done = False  # its end was read
        self.wake_r, self.wake_w = os.pipe()  # a byte: let go

    def run(self) -> None:
        """The reader thread: read and serve lines until the end, letting go when asked."""
        poller = select.poll()
        poller.register(self.lines.fd, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        try:
            while True:
                ready = [fd for fd, _ in poller.poll()]
                if self.wake_r in ready:
                    os.read(self.wake_r, 64)
                    with self.condition:
                        if self.wanted:
                            self.parked = True
                            self.condition.notify_all()
                            while self.wanted:
                                self.condition.wait()  # until `give_back`
                            self.parked = False
                        if self.done:  # the other thread read its end
                            return
                    continue
                if not self._read():
                    return
        finally:
            with self.condition:
                os.close(self.wake_r)
                os.close(self.wake_w)
                self.wake_w = -1

    def _read(self) -> bool:
        got = self.lines.read()
        if got is None:
            with self.condition:
                self.done = True
            self.ended()
            return False
        self.serve(got)
        return True

    def take(self) -> bool:
        """Have the reader thread let go, for this thread to read (`read_here`) until `done_here`;
        False when it cannot be had (its end was read, the reader thread did not let go in time,
        or another thread holds it)."""
        with self.condition:
            if self.held_by is not None or self.done:
                return False
            if self.parked:
                # Still not the reader thread's, or given back and not yet resumed: it reads
                # `wanted` again before it resumes.
                self.wanted = True
            elif self.wake_w < 0:
                return False
            else:
                self.wanted = True
                os.write(self.wake_w, b"\0")
                if not self.condition.wait_for(lambda: self.parked or self.done, TAKE_SECONDS):
                    self.wanted = False  # it keeps reading
            if not self.parked or self.done:
                return False
            self.held_by = threading.get_ident()
            return True

    def done_here(self) -> bool:
        """This thread is done reading the output it took (it stays let go of); whether another
        thread asked for it to be given back meanwhile."""
        with self.condition:
            self.held_by = None
            asked, self.give_back_after = self.give_back_after, False
            return asked

    def read_here(self, seconds: float) -> bool:
        """With the output taken: read it once, if it has something within `seconds`."""
        if self.done or not self.poller.poll(max(0, int(seconds * 1000 + 0.999))):
            return False
        self._read()
        return True

    def give_back(self) -> None:
        """Let the reader thread read again, once what waits in the output is read here (so that
        an exit or a broken line is noticed as the reader thread would have). Asked while another
        thread reads it: given back when that thread is done."""
        with self.condition:
            if not (self.parked and self.wanted):
                return  # the reader thread has it, or has been given it back
            if self.held_by is not None and self.held_by != threading.get_ident():
                self.give_back_after = True
                return
        self.read_here(0)
        with self.condition:
            self.wanted = False
            self.condition.notify_all()
