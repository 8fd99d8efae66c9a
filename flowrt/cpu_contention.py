"""Whether the machine has a CPU to spare for the host and its child, as the host's thread feels
it: `Contention.observe()` once per wait on the child.

Host and child poll for each other's answer before they sleep (`flowdata.framing.Spin`), which
pays only while each has a CPU of its own. With one more runnable process than CPUs (a CPU hog
beside a run on two cores), a poll holds a CPU the peer is queued for, and the scheduler, which
favours whoever slept, then lets the peer wait behind the hog for a slice: measured, a recorded
call cost 3-4x its quiet cost polling, and about its quiet cost sleeping on every wait.

The signal is the host thread's involuntary context switches (`getrusage(RUSAGE_THREAD)`,
`ru_nivcsw`, one system call, 0.4-0.9 µs, so read every `SAMPLE_EVERY` waits: ~1% of a quiet
call's 32 µs read every wait, a quarter of that so). With a CPU idle, a child woken by the host's write
starts on the idle CPU, and the host's yields in its poll return at once: over 2,000 quiet
calls the host's thread counted ~10, polling or sleeping. With no CPU idle, the woken child is
queued on the host's own CPU and preempts it, a yield hands the CPU to someone else, or a hog
takes it: ~1 a call, polling or sleeping. So the count tells contention apart whichever way the
waits went, and sleeping on it does not make it go away (which a signal from the poll itself,
such as its share of the CPU, would: it is not measured when nobody polls).

Contended means at least `CONTENDED_MARKS` of the last `WINDOW` readings saw a switch since
the reading before: a lone switch (an interrupt's kernel thread, a timer) changes nothing, and
the verdict follows the machine within `CONTENDED_MARKS` readings (12 waits) one way and a
window's (64 waits, a few ms) the other. Where the count cannot be read (not
Linux), the machine is never taken for contended and the polls' own measures stay in charge.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

#: Waits per reading of the counter (the verdict holds in between).
SAMPLE_EVERY = 4
#: How many readings the verdict looks back over.
WINDOW = 16
#: How many of them must have seen an involuntary switch for the machine to count as contended.
CONTENDED_MARKS = 3
_MASK = (1 << WINDOW) - 1


def involuntary_switches() -> int:
    """The calling thread's involuntary context switches so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def _never() -> int:
    return 0


class Contention:
    """The verdict over the last `WINDOW` readings, one every `every` waits. `read` returns a
    counter that grows by the calling thread's involuntary context switches (the default; a
    test passes its own)."""

    __slots__ = ("_read", "_every", "_due", "_last", "_marks", "contended")

    def __init__(self, read: Callable[[], int] | None = None, every: int = SAMPLE_EVERY) -> None:
        if read is None:
            read = involuntary_switches if hasattr(resource, "RUSAGE_THREAD") else _never
        self._read = read
        self._every = every
        self._due = 1  # waits until the next reading
        self._last: int | None = None  # read at the first wait, in the thread that waits
        self._marks = 0  # bit i: the i-th last wait saw a switch
        #: the verdict at the last `observe`
        self.contended = False

    def observe(self) -> bool:
        """Note one wait; whether the machine is contended now."""
        self._due -= 1
        if self._due:
            return self.contended
        self._due = self._every
        count = self._read()
        last, self._last = self._last, count
        if last is None:
            return self.contended
        self._marks = ((self._marks << 1) | (count != last)) & _MASK
        self.contended = self._marks.bit_count() >= CONTENDED_MARKS
        return self.contended
