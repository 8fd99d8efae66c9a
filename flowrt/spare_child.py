"""A sandbox child started ahead of the run that will use it (`SpareChild.take`, the one entry):
a host that drives run after run (an application's `flowrt.Host`, a worker, `flow mcp`) hands
each run a child that has already started its interpreter and imported its runtime, and starts
the next one in the background when a run ends.

A child's start is most of what a short run waits for: the fork, the network namespace made
between fork and exec, the exec, and the interpreter's start and imports take 20-40 ms on a quiet
machine, and the host's own work for a cached program overlaps only part of it (docs/impl.md,
"What a host keeps from one run to the next"). A spare is exactly a child `Child.start` would
have made: it has not been spoken to, so it holds nothing of any run. It is made with the
settings the launch reads when it starts (`sandbox_launch.settings`: the limits,
`FLOW_SANDBOX_WITHOUT`, `FLOW_SANDBOX_WALL_SECONDS`); one made under settings that have changed
since is killed and not used.

A host starts a spare when a run ends (`refill`), once it has run two (a host that runs once
starts none), keeps at most `keep` (one; a worker one per run it drives at once), and kills them
at `close()`; a spare left when the process exits dies with it (its start
thread's parent-death signal). While it waits it is not counted among the children the host
drives (`sandbox_launch.others_live`): it neither makes the host think it drives several runs nor
waits on anything."""

from __future__ import annotations

import threading

from flowdata.policy import LIMITS, Limits
from flowrt import sandbox_launch as launch
from flowrt.kept_child import KeptChildren
from flowrt.lane_child import SharedChildren

class SpareChild:
    """Sandbox children started ahead of their runs, at most `keep` (a worker keeps one per run
    it drives at once); thread-safe (runs start on threads of their own)."""

    def __init__(self, keep: int = 1, limits: Limits = LIMITS) -> None:
        self.keep = keep
        self.limits = limits
        self._lock = threading.Lock()
        self._spares: list = []  # (StartingChild, the settings it was started with)
        self._taken = 0
        self._starting = 0  # spares being started, not yet in _spares
        self._closed = False
        #: children handed out that were spares (tests, benchmarks)
        self.used = 0
        #: children kept after their runs for the next run of the same program
        self.kept = KeptChildren(limits)
        #: children serving runs of one program at once, a lane each (FLOW_SANDBOX_LANES)
        self.lanes = SharedChildren()

    def take(self):
        """A started child no one has spoken to, which the caller owns (kills or closes): a
        spare if there is a fit one, else a new one started now (what `Child.start()` raises, it
        raises)."""
        return self.take_soon().started()

    def _arrived(self, spare):
        from flowrt.sandbox_process import Child

        child = self._fit(spare)
        if child is not None:
            with self._lock:
                self.used += 1
            return child
        return Child.start(limits=self.limits)

    def take_soon(self) -> "ChildToCome":
        """`take()`, with the wait for the spare's start put off until the run first needs its
        child (`ChildToCome.started`, which `flowrt.run.Driver.run` calls): the host checks the
        program, opens the history and writes Start while the spare is still being forked. A
        host running run after run back to back otherwise waited ~3.5 ms a run for a spare
        asked for when the run before ended (docs/impl.md, "Session 11")."""
        with self._lock:
            spare = self._spares.pop(0) if self._spares else None
            self._taken += 1
        return ChildToCome(self, spare)

    def refill(self) -> None:
        """A run taken from here has ended: start a spare in the background for a later run,
        unless `keep` wait or are starting already. Only once two runs were taken (a host that
        runs once starts none), and after a run rather than beside it: a child's start is CPU
        the runs going on would otherwise share (a spare started as a run began took a third of
        a 2,000-call run's CPU on 2 cores)."""
        with self._lock:
            # spares being started count against the places: a burst of runs ending at once
            # starts `keep` of them, not one each
            start = self._taken > 1 and not self._closed and len(self._spares) + self._starting < self.keep
            if start:
                self._starting += 1
        if start:
            self._start_spare()

    def close(self) -> None:
        """Kill the spares and the kept children, and start or keep no more; the children
        already taken are their runs'."""
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        for starting, _ in spares:
            starting.kill()
        self.kept.close()
        self.lanes.close()

    def _give_back(self, spare) -> None:
        """A spare promised to a run that took a kept child instead: a spare again (or killed,
        when there is no room)."""
        with self._lock:
            if not self._closed and len(self._spares) < self.keep:
                self._spares.append(spare)
                return
        spare[0].kill()

    def _start_spare(self) -> None:
        from flowrt.sandbox_process import Child

        # Read before the start: settings changed meanwhile make the spare look stale (killed,
        # not used), never a stale spare look current.
        settings = launch.settings(self.limits)
        try:
            starting = Child.start_soon(limits=self.limits, spare=True)
        except BaseException:
            with self._lock:
                self._starting -= 1
            raise
        with self._lock:
            self._starting -= 1
            if not self._closed:
                self._spares.append((starting, settings))
                return
        starting.kill()  # the host closed meanwhile

    def _fit(self, spare):
        """The spare's child if it started, still runs and was made under today's settings; a
        spare that is not fit is killed."""
        if spare is None:
            return None
        starting, settings = spare
        try:
            child = starting.child()
        except Exception:  # noqa: BLE001 - a failed start: the caller starts one and sees why
            return None
        if settings != launch.settings(self.limits) or child._exited():
            child.kill()
            return None
        launch.in_use(child)
        return child


class ChildToCome:
    """The child `SpareChild.take_soon` promised a run: the spare, once its start is waited for,
    if it is fit, else one started then. Passed as a run's `child`; the run's driver calls
    `started()` before it speaks to it, and a run refused before that calls `kill()`."""

    def __init__(self, spares: SpareChild, spare) -> None:
        self._spares = spares
        self._spare = spare
        self._child = None
        self._killed = False

    def started(self, program: str | None = None):
        """The child (waiting for the spare's start, or starting one now); what starting one
        raises, it raises. `program`: the identity of the program a live run will load, which
        takes a child kept after a run of it if there is one (flowrt/kept_child.py), and may
        give its child back for the next such run."""
        if self._child is None:
            if self._killed:
                raise RuntimeError("the run's sandbox child was let go before it was used")
            kept = self._spares.kept.take(program) if program is not None else None
            spare, self._spare = self._spare, None
            if kept is None and program is not None:
                lane = self._in_a_lane(program, spare)
                if lane is not None:
                    self._child = lane
                    return lane
            if kept is not None:
                if spare is not None:
                    self._spares._give_back(spare)
                self._child = kept
            else:
                self._child = self._spares._arrived(spare)
            if program is not None:
                self._child.kept_by = self._spares.kept
        return self._child

    def _in_a_lane(self, program: str, spare):
        """A lane for the live run of `program` in a child shared with other runs of it
        (flowrt/lane_child.py), or None; the spare is given back unless a new shared child was
        made of it."""
        spares = self._spares
        made = []

        def child_for():
            made.append(True)
            return spares._arrived(spare)

        lane = spares.lanes.take(program, spares.limits, child_for)
        if lane is not None and not made and spare is not None:
            spares._give_back(spare)
        return lane

    def kill(self) -> None:
        """Let go of the child unused: the spare is killed once started, a child already handed
        over is killed."""
        self._killed = True
        if self._child is not None:
            self._child.kill()
        elif self._spare is not None:
            spare, self._spare = self._spare, None
            spare[0].kill()
