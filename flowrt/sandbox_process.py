"""The host side of the sandbox: talk to, time out and kill the child process.

`Child.start()` launches the child through `flowrt.sandbox_launch` (its command line,
environment, working directory, process group, resource limits, network namespace, parent-death
signal, the seccomp filter it locks itself down with: see there) and then talks to it:

- fd 0 and 1 of the child are the two ends of the framed channel (`flowdata.framing`): `send`,
  `post`/`feed` (queued, written while `recv` waits), `recv`, `peek`; fd 2 is a pipe the host
  drains into a bounded tail (`policy.STDERR_TAIL_BYTES`);
- a wall-clock deadline (`Limits.wall_seconds`, or FLOW_SANDBOX_WALL_SECONDS): the longest the
  host waits for the child's next message before it kills it (`ChildDeadline`);
- the child's own lockdown once it has loaded (`sandbox.lockdown`), which it reports first;
  `child.layers` says which layers were applied and why any is missing;
- `kill()`/`close()` take the child's whole process group.

Every way the child can end surfaces as `ChildDied` (exit, signal, closed pipe, a limit hit);
waiting longer than the caller allows surfaces as `ChildTimeout`. Timeouts are enforced from
outside, because code inside the child could catch anything raised inside it. The child's exit is
observed without reaping it (`waitid(WNOWAIT)`) so that its pid, which is also its process
group id, cannot be reused before the group has been killed.
"""

from __future__ import annotations

import collections
import fcntl
import os
import select
import shutil
import signal as signals
import subprocess
import threading
import time
from typing import Callable

from flowdata import framing as channel
from flowdata.policy import LIMITS, STDERR_TAIL_BYTES, Limits
from flowrt import child_reaper, child_template, run_hub
from flowrt import sandbox_launch as launch
from flowrt.cpu_contention import Contention
from flowrt.halts import DeadlineHalt, TemplateLostHalt
# The layers FLOW_SANDBOX_WITHOUT may name, which callers compare with `Child.layers`.
from flowrt.sandbox_launch import LAYER_NAMES  # noqa: F401

POLL_TICK = 0.05  # seconds between liveness checks while waiting on the pipe
EXIT_GRACE = 2.0  # seconds a child that closed its pipe gets to exit by itself
# Bytes asked of one read. A read allocates its buffer first; at 128 KiB and above malloc maps
# fresh pages for it and unmaps them after, which costs more than the read itself.
READ_CHUNK = 1 << 16
PIPE_SIZE = 1 << 20  # bytes each pipe holds (F_SETPIPE_SZ): a streamed record rarely waits on it
PIPE_CHUNK = 1 << 16  # bytes offered to the pipe in one write (a slice of the outbox: see READ_CHUNK)
OUTBOX_LOW = 1 << 18  # bytes of posted output below which the feeder is asked for more
F_SETPIPE_SZ = 1031
# Seconds `recv` waits on the child before it calls `before_sleep` (the run syncs a written
# Reply then): a child that answers sooner sends the next Call, whose sync covers the Reply, so
# a fan-out whose replies arrive together pays one sync per Call frame rather than one per reply.
IDLE_BEFORE_SLEEP = 0.002
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR


class ChildError(Exception):
    """Base class of the host's view of child failures."""


class ChildDied(ChildError):
    """The child exited, was killed, or closed its end of the pipe."""

    def __init__(self, returncode: int | None, signal: int | None, stderr_tail: str,
                 reason: str = "ended", explanation: str = "", template_lost: bool = False):
        self.returncode = returncode
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.reason = reason
        self.explanation = explanation
        #: it was forked from the child template, and died because the template ended
        self.template_lost = template_lost
        #: the halt its run takes, not a Faulted End (its template ended; `lane_child.LaneLost`)
        self.halt: type[DeadlineHalt] | None = TemplateLostHalt if template_lost else None
        if signal is not None:
            status = f"was killed by {_signal_name(signal)}"
        else:
            status = f"exited with code {returncode}"
        message = f"sandbox child {reason} and {status}"
        if explanation:
            message += f": {explanation}"
        last = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
        if last:
            message += f" (last stderr line: {last[0]})"
        super().__init__(message)


class ChildDeadline(ChildError):
    """The child computed longer than its wall-clock deadline without a message; it was killed.
    A host limit, not an outcome of the program: the run is halted (resumable), not faulted."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(
            f"sandbox child sent nothing for {seconds:g} s (its wall-clock deadline, "
            "Limits.wall_seconds or FLOW_SANDBOX_WALL_SECONDS) and was killed"
        )


class ChildTimeout(ChildError):
    """The child did not answer (or accept a message) within the time allowed."""

    def __init__(self, timeout: float, doing: str):
        self.timeout = timeout
        super().__init__(
            f"sandbox child did not {doing} within {timeout:g} s; it is still running: call "
            "kill() (the host enforces time limits from outside)"
        )


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _widen_pipe(fd: int) -> None:
    """Let the pipe hold PIPE_SIZE bytes where the system allows (the default is 64 KiB):
    either side can then run further ahead before it has to wait for the other."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass


class _StderrTail(threading.Thread):
    """Drains the child's stderr, keeping the last `limit` bytes."""

    def __init__(self, fd: int, limit: int):
        super().__init__(name=f"sandbox-stderr-{fd}", daemon=True)
        self.fd = fd
        self.limit = limit
        self.total = 0
        self._buffer = bytearray()
        self._lock = threading.Lock()

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.total += len(chunk)
                self._buffer += chunk
                if len(self._buffer) > self.limit:
                    del self._buffer[: len(self._buffer) - self.limit]

    def text(self) -> str:
        with self._lock:
            return self._buffer.decode("utf-8", "replace")

    def clear(self) -> None:
        with self._lock:
            self._buffer.clear()


class _StartThread(threading.Thread):
    """The thread a child is forked on, alive until the child is reaped (`StartingChild`)."""


class StartingChild:
    """A child being started on a thread of its own (`Child.start_soon`, and `Child.start` from
    any thread but the main one).

    `subprocess.Popen` returns only once the child has exec'd, and between its fork and exec the
    child makes its network namespace: 7-11 ms in which the host could only wait (docs/impl.md,
    start-up). The thread waits for that instead, while the caller imports and checks.

    The thread lives until the child is reaped: the parent-death signal (`PR_SET_PDEATHSIG`)
    follows the thread that forked, not the process, so a thread that ended as soon as the child
    had started would kill it. It is a daemon thread: a host that exits takes it, and so the
    child, with it."""

    def __init__(self, cls: type, main_module: str, limits: Limits, spare: bool = False, *,
                 fork: Callable[[], "Child"] | None = None):
        # From the calling thread (the main one), which alone may set the SIGTERM handler that
        # kills the children: the starting thread cannot.
        launch._take_responsibility()
        self._started = threading.Event()
        self._reaped = threading.Event()
        self._child: Child | None = None
        self._error: BaseException | None = None
        self._thread = _StartThread(target=self._start, args=(cls, main_module, limits, spare, fork),
                                    name="sandbox-start", daemon=True)
        self._thread.start()

    def _start(self, cls: type, main_module: str, limits: Limits, spare: bool,
               fork: Callable[[], "Child"] | None) -> None:
        try:
            # (`fork`: `Child.start`'s, which found no template to fork the child)
            child = cls.start(main_module, limits) if fork is None else fork()
            if spare:
                launch.set_aside(child)
            child._on_reaped = self._reaped.set
            self._child = child
        except BaseException as problem:  # noqa: BLE001 - handed to whoever waits for the child
            self._error = problem
            return
        finally:
            self._started.set()
        self._reaped.wait()  # bounded by the child's life: set when it is reaped (see the class)

    def child(self) -> Child:
        """The started child; raises what starting it raised. Waits for as long as a fork and
        exec take (Popen either returns or raises)."""
        self._started.wait()
        if self._error is not None:
            raise self._error
        assert self._child is not None
        return self._child

    def kill(self) -> None:
        """Kill the child once it has started (a start that failed left nothing to kill)."""
        self._started.wait()
        if self._child is not None:
            self._child.kill()


class Child:
    """A running sandbox child. Create with `Child.start()`; use as a context manager."""

    def __init__(self, proc: subprocess.Popen, workdir: str, limits: Limits, argv: list[str],
                 network_isolated: bool, layers: dict | None = None, wall: float | None = None):
        self._proc = proc
        self.pid = proc.pid
        self.workdir = workdir
        self.limits = limits
        self.argv = argv
        self.network_isolated = network_isolated
        #: how its process came to be (`sandbox_launch.Launched.origin`)
        self.origin = launch.STARTED_ORIGIN
        #: layer -> {"applied": bool, "detail": text}: the host's own (process group, network,
        #: parent death, rlimits) now, the child's lockdown once it reports (`lockdown_reported`)
        self.layers: dict = dict(layers or {})
        self.lockdown_reported = False
        self._expect_report = False  # set by start() when the child locks down and reports
        #: seconds the host waits for the child's next message before killing it (None: forever)
        self.wall_seconds = wall
        self._write_fd = proc.stdin.fileno()
        self._read_fd = proc.stdout.fileno()
        os.set_blocking(self._write_fd, False)
        os.set_blocking(self._read_fd, False)
        for fd in (self._write_fd, self._read_fd):
            _widen_pipe(fd)
        self._reader = channel.FrameReader()
        self._inbox: collections.deque[dict] = collections.deque()
        #: bytes posted but not yet taken by the pipe, in order (see `post`)
        self._outbox = bytearray()
        self._feeder = None  # an iterator of more bytes to post once the outbox runs low
        self._hold: Callable[[], bool] | None = None  # ... and whether to leave it for now (`feed`)
        self._held = False  # the last refill left it
        self._out_closed = False  # the child closed its end: what is left will never be read
        self._blocked = False  # the last write found the pipe full
        self._poller = select.poll()  # what `recv` waits on: the reading end, and the writing
        self._poller.register(self._read_fd, _READABLE)
        self._polling_out = False  # ... end too while posted output waits
        self._stderr = _StderrTail(proc.stderr.fileno(), STDERR_TAIL_BYTES)
        self._stderr.start()
        self._died: ChildDied | None = None
        self._closed = False
        self._on_reaped: Callable[[], None] | None = None  # set by `StartingChild`
        self._eof = False
        self._spin = channel.Spin()  # polling before sleeping, as the child's Receiver does
        #: whether the machine has a CPU to spare for polling (flowrt/cpu_contention.py)
        self.contention = Contention()
        self._batch = False  # scheduled as SCHED_BATCH (`launch.schedule_as_batch`)
        #: called when `recv` has waited on the child for IDLE_BEFORE_SLEEP and goes on waiting
        #: (the run makes a written Reply durable then: see flowrt/run.py)
        self.before_sleep: Callable[[], None] | None = None
        #: called after each sleep that ended with nothing to read: it raises to stop waiting
        #: (the run halts: see `flowrt.run.Driver.check_halt`)
        self.check_halt: Callable[[], None] | None = None
        #: where a run that ends cleanly may give this child back for the next run of its
        #: program (flowrt/kept_child.py), and how many runs it served before its current one
        self.kept_by = None
        self.runs = 0
        self.first_origin: str | None = None  # `origin` before it was kept (`flowrt.kept_child`)

    @classmethod
    def start(cls, main_module: str = "sandbox.child", limits: Limits = LIMITS, *,
              argv_tail: list[str] | None = None, lockdown: bool | None = None) -> Child:
        """Launch the child (`flowrt.sandbox_launch.start`: `-m main_module`, or `argv_tail`,
        e.g. [script path, args...]) and take it over. `lockdown` (default: only for `-m`) passes
        the child what it needs to lock itself down (`sandbox.lockdown.parse_argv`), which a test
        script may also use.

        A child forked here has its parent-death signal follow this thread, so from any thread
        but the main one it is forked on a thread of its own that lives as long as the child
        (`StartingChild`); one forked by the template (flowrt/child_template.py) follows the
        template. Forked on a run hub's thread, which ends when it has no run left, a child kept
        for the next run of its program was killed with it, now and then while that run had it
        ("SIGKILL came from outside the host's control")."""
        how = launch.plan(main_module, limits, argv_tail=argv_tail, lockdown=lockdown)
        launched = child_template.start(how) if argv_tail is None else None
        if launched is not None:
            return cls._taken(launched, limits, compile_next=argv_tail is None)

        def fork_here() -> Child:
            return cls._taken(launch.start(main_module, limits, how=how), limits, compile_next=argv_tail is None)

        here = threading.current_thread()
        if here is not threading.main_thread() and not isinstance(here, _StartThread):
            return StartingChild(cls, main_module, limits, fork=fork_here).child()
        return fork_here()

    @classmethod
    def _taken(cls, launched: "launch.Launched", limits: Limits, *, compile_next: bool = True) -> Child:
        """The child `launched`, taken over."""
        child = cls(launched.proc, launched.workdir, limits, launched.argv, launched.network_isolated,
                    launched.layers, launched.wall)
        child.origin = launched.origin
        child._expect_report = launched.lockdown
        launch.own(child)
        if compile_next:
            launch.compile_for_child()  # while the child's interpreter starts; it reads them on its next start
        return child

    @classmethod
    def start_soon(cls, main_module: str = "sandbox.child", limits: Limits = LIMITS, *,
                   spare: bool = False) -> StartingChild:
        """`start()` on a thread of its own, so that the caller goes on while the child is forked
        and exec'd (`StartingChild.child()` waits for it). `spare`: it waits for a run not yet
        begun (flowrt/spare_child.py), and is not counted among the children the host drives."""
        return StartingChild(cls, main_module, limits, spare)

    # -- talking -----------------------------------------------------------------------------

    def send(self, obj: dict, timeout: float | None = None) -> None:
        """Send one message (after anything posted before it). Raises ChildDied if the child is
        gone, ChildTimeout if it does not take the message in time (a partly written frame kills
        the child: the stream is lost)."""
        self._raise_if_dead()
        data = channel.encode(obj)  # refusals (size, non-JSON) before any write
        self._drain_feeder()
        self._outbox += data
        deadline = None if timeout is None else time.monotonic() + timeout
        wall = self.wall_seconds if timeout is None else None
        wall_deadline = None if wall is None else time.monotonic() + wall
        poller = select.poll()
        poller.register(self._write_fd, select.POLLOUT)
        while True:
            try:
                self._write_some()
            except BrokenPipeError:
                self._finish("closed its end of the pipe")
            if not self._outbox:
                return
            if self._exited():
                self._finish("ended while a message was being sent")
            if deadline is not None and time.monotonic() >= deadline:
                if len(self._outbox) < len(data):
                    self.kill()
                raise ChildTimeout(timeout, "accept a message")
            if wall_deadline is not None and time.monotonic() >= wall_deadline:
                self._deadline_passed(wall)
            run_hub.poll(poller, [(self._write_fd, select.POLLOUT)], self._tick(deadline) * 1000)

    def post(self, obj: dict) -> None:
        """Queue one message and write what the pipe takes now; the rest goes out while `recv`
        waits. A host that also reads never deadlocks against a child that is writing (a
        blocking `send` could: both pipes full, each side waiting for the other). While this
        host has other children, or the machine no CPU to spare (`contention`), the frame says
        so (`channel.BUSY`): the child then sleeps rather than polls for the next one. While this
        host drives more runs than there are CPUs, the child's wake-ups wait for a CPU rather than
        preempt the host (`launch.schedule_as_batch`), and the child sleeps on the pipe without
        first looking for the next frame (`channel.CROWDED`)."""
        self.post_bytes(self.framed(obj))

    def framed(self, obj: dict) -> bytes:
        """`obj`'s frame as `post` writes it, its flags (and the child's scheduling) as above."""
        live = launch.live_count()
        crowded = launch.crowded(live)
        if crowded is not self._batch:
            self._batch = crowded
            launch.schedule_as_batch(self.pid, crowded)
        return channel.encode(obj, live > 1 or self.contention.contended, crowded)

    def post_bytes(self, data: bytes) -> None:
        """Queue encoded frames, as `post`, after everything `feed` was given."""
        self._raise_if_dead()
        if self._out_closed:
            return
        self._drain_feeder()
        try:
            if not self._outbox:  # the usual case: straight to the pipe, what it leaves queued
                try:
                    written = os.write(self._write_fd, data)
                except BlockingIOError:
                    written = 0
                if written < len(data):
                    self._outbox += data[written:]
                return
            self._outbox += data
            self._write_some()
        except BrokenPipeError:
            self._close_out()

    def _drain_feeder(self) -> None:
        if self._feeder is not None:
            for chunk in self._feeder:
                self._outbox += chunk
            self._feeder = None

    def feed(self, chunks, hold: Callable[[], bool] | None = None) -> None:
        """Post the encoded frames `chunks` yields, each when the outbox has run low, after
        anything already posted; frames posted later go after all of them. `hold`: while it
        says so, no more is taken from `chunks` (until a post, which takes them all)."""
        self._feeder = iter(chunks)
        self._hold = hold
        self._refill()
        try:
            self._write_some()
        except BrokenPipeError:
            self._close_out()

    def _refill(self) -> None:
        feeder = self._feeder
        hold = self._hold
        self._held = False
        while feeder is not None and len(self._outbox) < OUTBOX_LOW:
            if hold is not None and hold():
                # (asked again only once this side would wait for the child: see `recv`)
                self._held = True
                return
            chunk = next(feeder, None)
            if chunk is None:
                self._feeder = feeder = None
            else:
                self._outbox += chunk

    def _write_some(self) -> None:
        """Write what the pipe takes without blocking (BrokenPipeError when the child is gone)."""
        outbox = self._outbox
        while outbox:
            try:
                written = os.write(self._write_fd, outbox[:PIPE_CHUNK] if len(outbox) > PIPE_CHUNK else outbox)
            except BlockingIOError:
                self._blocked = True  # the pipe is full: try again when poll says it has room
                return
            del outbox[:written]
            if not outbox and self._feeder is not None:
                self._refill()
        self._blocked = False

    def _close_out(self) -> None:
        self._out_closed = True
        self._outbox.clear()
        self._feeder = None

    def _pump(self) -> None:
        if self._outbox or self._feeder is not None:
            self._refill()
            try:
                self._write_some()
            except BrokenPipeError:
                self._close_out()  # the child is gone: its reading end tells how

    def idle(self) -> bool:
        """Whether the child is alive with nothing in flight either way: as a run that has
        just read its End leaves it."""
        return not (self._closed or self._died is not None or self._eof or self._inbox or self._outbox
                    or self._feeder is not None or self._reader.mid_frame or self._exited())

    def clear_stderr(self) -> None:
        """Forget what the child wrote on stderr so far (it is kept for another run)."""
        self._stderr.clear()

    def has_message(self) -> bool:
        """Whether a message has arrived and not been taken (never reads, never blocks)."""
        return bool(self._inbox)

    def peek(self) -> dict | None:
        """The next message if one has arrived (never blocks), without taking it."""
        if not self._inbox and self._died is None and not self._closed:
            try:
                data = os.read(self._read_fd, READ_CHUNK)
            except BlockingIOError:
                return None
            if not data:  # EOF: left for recv to report
                self._eof = True
                return None
            self._take(data)
        return self._inbox[0] if self._inbox else None

    def recv(self, timeout: float | None = None) -> dict:
        """The next message. Raises ChildDied when the child exits or closes its pipe, and
        ChildTimeout when nothing complete arrives within `timeout` seconds (None: wait).
        Posted output is written while waiting."""
        if self._inbox:
            if (self._outbox and not self._blocked) or \
                    (self._feeder is not None and len(self._outbox) < OUTBOX_LOW and not self._held):
                self._pump()
            return self._inbox.popleft()
        self._raise_if_dead()
        deadline = None if timeout is None else time.monotonic() + timeout
        wall = self.wall_seconds if timeout is None else None
        wall_deadline = None if wall is None else time.monotonic() + wall
        poller = self._poller
        writing = self._polling_out
        while True:
            self._pump()
            want = bool(self._outbox) and not self._out_closed
            if want != writing:
                if want:
                    poller.register(self._write_fd, select.POLLOUT)
                else:
                    poller.unregister(self._write_fd)
                self._polling_out = writing = want
            if want or not self._spin_for_message():
                sleeping = self.before_sleep
                events = None
                if sleeping is not None and not want:
                    # A child that answers within IDLE_BEFORE_SLEEP spares the sync: the next
                    # Call's covers what is unsynced; only a longer wait pays for one of its own.
                    events = self._wait(min(IDLE_BEFORE_SLEEP, self._tick(deadline)) * 1000)
                    if not events:
                        sleeping()
                if not events:
                    events = self._wait(self._tick(deadline) * 1000)
                if events:
                    self._spin.woke(time.perf_counter())
                elif self.check_halt is not None:
                    self.check_halt()
            else:
                events = poller.poll(0)
            readable = False
            for fd, _ in events:
                if fd == self._read_fd:
                    readable = True
                else:
                    self._blocked = False
            if readable or self._eof:
                if self._read_available():
                    return self._inbox.popleft()
            if not readable and (not events or self._eof) and self._exited():
                if self._read_available():  # a last message written just before exiting
                    return self._inbox.popleft()
                self._finish("ended")
            if deadline is not None and time.monotonic() >= deadline:
                raise ChildTimeout(timeout, "answer")
            if wall_deadline is not None and time.monotonic() >= wall_deadline:
                self._deadline_passed(wall)

    def _wait(self, timeout_ms: float) -> list:
        """The `poll` of `recv`'s sleep: through the run hub when this run is one of its
        (flowrt/run_hub.py), so that the hub's other runs go on meanwhile."""
        hub = run_hub.current()
        if hub is None:
            return self._poller.poll(timeout_ms)
        fds = [(self._read_fd, _READABLE)]
        if self._polling_out:
            fds.append((self._write_fd, select.POLLOUT))
        return hub.wait_fds(fds, timeout_ms)

    def _spin_for_message(self) -> bool:
        """Poll for up to `channel.SPIN_SECONDS` (when `channel.Spin` says it pays): True once
        the child has written something."""
        spin = self._spin
        # With other children, this host's threads take turns under one GIL: polling here only
        # keeps the one with work to do off it, and the answer waits behind that work anyway.
        # On a machine with no CPU to spare, a poll holds the CPU the child is queued for.
        if launch.others_live() or self.contention.observe() or not spin.wanted():
            return False
        poll = self._poller.poll
        clock = time.perf_counter
        cpu = time.thread_time()
        started = clock()
        until = started + channel.SPIN_SECONDS
        waited = False
        while (now := clock()) < until:
            if poll(0):
                # An answer there at the first look was no poll: it says nothing of whether
                # polling pays (beside a CPU hog, 7 answers in 10 were, and each halved the backoff).
                if waited:
                    spin.hit()
                    spin.ran(now - started, time.thread_time() - cpu)
                return True
            os.sched_yield()  # a child waiting for this CPU takes it now
            waited = True
        spin.missed(started)
        spin.ran(now - started, time.thread_time() - cpu)
        return False

    def _read_available(self) -> bool:
        """Read what the pipe holds; True once a message is queued. EOF ends the child."""
        while True:
            try:
                data = os.read(self._read_fd, READ_CHUNK)
            except BlockingIOError:
                return bool(self._inbox)
            if not data:
                if self._inbox:
                    return True
                reason = "closed its pipe mid-frame" if self._reader.mid_frame else "closed its pipe"
                self._finish(reason)
            self._take(data)
            if self._inbox and len(data) < READ_CHUNK:
                return True  # the pipe held less than we asked for: it is empty now

    def _take(self, data: bytes) -> None:
        try:
            messages = self._reader.feed(data)
        except channel.ChannelError:
            self.kill()  # the stream cannot be resynchronized
            raise
        if self._expect_report and not self.lockdown_reported:
            messages = self._note_report(messages)
        self._inbox.extend(messages)

    def _note_report(self, messages) -> list:
        """Take the child's lockdown report (`{"op": "sandbox", "layers": ...}`, sent once before
        anything else it says after loading) into `layers`; the caller never sees it."""
        kept = []
        for message in messages:
            if not self.lockdown_reported and message.get("op") == "sandbox":
                self.lockdown_reported = True
                for name, layer in message.get("layers", {}).items():
                    known = self.layers.get(name)
                    if known is not None and not known["applied"] and not layer.get("applied"):
                        continue  # the host already knows why (no filter could be built)
                    self.layers[name] = {"applied": bool(layer.get("applied")), "detail": str(layer.get("detail", ""))}
            else:
                kept.append(message)
        return kept

    def missing_layers(self) -> list[str]:
        """The names of the isolation layers not in force for this child (see `layers`)."""
        return sorted(name for name, layer in self.layers.items() if not layer["applied"])

    @staticmethod
    def _tick(deadline: float | None) -> float:
        if deadline is None:
            return POLL_TICK
        return max(0.0, min(POLL_TICK, deadline - time.monotonic()))

    # -- ending ------------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def stderr_tail(self) -> str:
        return self._stderr.text()

    def _exited(self) -> bool:
        """Whether the child has exited, without reaping it (its pid stays reserved)."""
        if self._proc.returncode is not None:
            return True
        if isinstance(self._proc, child_template.ForkedProcess):
            return self._proc.has_exited()
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None and info.si_pid != 0

    def _kill_group(self) -> None:
        """SIGKILL the whole process group (the leader may already be a zombie, its pid still
        reserved)."""
        try:
            os.killpg(self.pid, signals.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _reap(self) -> None:
        """Kill the whole process group, then reap."""
        self._kill_group()
        self._proc.wait()
        self._cleanup()

    def _finish(self, reason: str) -> None:
        """The child is ending (EOF, broken pipe, exit): wait briefly, reap, raise ChildDied."""
        deadline = time.monotonic() + EXIT_GRACE
        while not self._exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        killed_by_host = not self._exited()
        self._reap()
        returncode = self._proc.returncode
        signal = -returncode if returncode is not None and returncode < 0 else None
        if killed_by_host:
            reason += f" but did not exit within {EXIT_GRACE:g} s (the host killed it)"
        lost = isinstance(self._proc, child_template.ForkedProcess) and self._proc.template_lost
        self._died = ChildDied(
            None if signal is not None else returncode, signal, self.stderr_tail(), reason,
            "its child template ended (killed from outside the host), and the children forked from it with it"
            if lost else self._explain(signal, killed_by_host), template_lost=lost,
        )
        raise self._died

    def _explain(self, signal: int | None, killed_by_host: bool) -> str:
        tail = self.stderr_tail()
        limits = self.limits
        if "MemoryError" in tail:
            return (f"it ran out of memory under its address-space limit "
                    f"({limits.address_space_bytes} bytes); raise Limits.address_space_bytes "
                    "if the workflow legitimately needs more")
        if signal == signals.SIGXCPU:
            return (f"its CPU-time limit ({limits.cpu_seconds} s) ran out; raise "
                    "Limits.cpu_seconds if the work is legitimate, otherwise look for a loop "
                    "that never yields")
        if signal == signals.SIGKILL and not killed_by_host:
            return ("SIGKILL came from outside the host's control: the kernel's OOM killer, an "
                    "operator, or the hard CPU limit (cpu_seconds + cpu_grace_seconds)")
        if signal == signals.SIGSYS:
            return ("it made a system call the sandbox forbids (its seccomp filter, "
                    "policy.ALLOWED_SYSCALLS); generated code cannot, so report this as a sandbox bug")
        if signal == signals.SIGXFSZ:
            return "it tried to write a file; the sandbox child writes no files"
        if signal is not None and not killed_by_host:
            return "the sandbox child crashed or was killed from outside; see its stderr"
        return ""

    def _deadline_passed(self, seconds: float) -> None:
        self.kill()
        self._died = ChildDied(None, signals.SIGKILL, self.stderr_tail(), "passed its wall-clock deadline",
                               f"the host killed it after {seconds:g} s without a message")
        raise ChildDeadline(seconds)

    def _raise_if_dead(self) -> None:
        if self._died is not None:
            raise self._died
        if self._closed:
            returncode = self._proc.returncode
            signal = -returncode if returncode is not None and returncode < 0 else None
            raise ChildDied(None if signal else returncode, signal, self.stderr_tail(),
                            "was stopped by the host")

    def kill(self) -> int | None:
        """SIGKILL the child's whole process group and reap it; returns the exit status."""
        if not self._closed:
            self._reap()
        return self._proc.returncode

    def let_go(self) -> None:
        """SIGKILL the child's whole process group now, and reap it on the reaper thread
        (flowrt/child_reaper.py): for a run that has ended, whose caller need not wait for the
        exit. It no longer counts among the children the host drives."""
        if self._closed:
            return
        self._kill_group()
        launch.disown(self)
        child_reaper.let_go(self)

    def close(self, grace: float = 1.0) -> int | None:
        """Close the child's input, give it `grace` seconds to exit, then kill the group."""
        if not self._closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            deadline = time.monotonic() + grace
            while not self._exited() and time.monotonic() < deadline:
                time.sleep(0.01)
            self._reap()
        return self._proc.returncode

    def _cleanup(self) -> None:
        if self._closed:
            return
        self._closed = True
        launch.disown(self)
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.join(timeout=1.0)
        if not self._stderr.is_alive():
            try:
                self._proc.stderr.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self._on_reaped is not None:
            self._on_reaped()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.kill()
            except Exception:  # interpreter shutdown: best effort only
                pass

    def __repr__(self) -> str:
        state = "running" if not self._exited() else f"exited {self._proc.returncode}"
        return f"<Child pid={self.pid} {state} network_isolated={self.network_isolated}>"
