"""One thread driving many runs: a host's background runs as greenlets over one `poll`.

A run's driver is written as blocking code: it waits on its child's pipe (`Child.recv`,
`Child.send`) and on its reply queue (`Driver.next_reply`). Given a thread each, many runs
under one GIL hand the lock to another run's thread at each of the ~5 system calls a recorded
call makes, and each handoff is a futex wake and a context switch (docs/impl.md, "One thread
driving many runs": 20 pipe round trips at once cost ~19 µs each from 20 threads, ~5.5 µs from
one thread polling all of them). Here every background run of a host is a greenlet on the hub's
one thread; where a run would block, it asks the hub instead (`poll`, `HubQueue.get`), and the
hub's own `poll` over every waiting run's descriptors (and a wake-up pipe for replies delivered
from other threads) resumes whichever run can go on. Code that does not know about the hub (the
store's writes and syncs, a compile) runs as it would on a thread of its own, holding the hub
for its duration; everything a run waits on for long goes through the two calls above.

A Tool call is served on the hub's thread only by a Python callable proven quick
(flowrt/quick_calls.py): one that blocked would stop every run, so the others go to the binding's
worker threads, as concurrent calls do. A run bound to a Tool process (or a server) leaves the
hub once bound (`on_own_thread`, from flowrt/run.py `run`).
"""

from __future__ import annotations

import atexit
import collections
import os
import queue
import select
import threading
import time
from typing import Any, Callable

import greenlet

from flowrt.store import durable
from flowrt.store.locate import is_database_url
from flowrt.sync_process import SyncProcess

#: threads that wait on the disk for the hub's runs (`RunHub.blocking`): the syncs of that many
#: runs overlap, as they would from threads of their own
HELPERS = 32
#: whether a hub driving several runs has their histories synced by a process of its own
#: (flowrt/sync_process.py) rather than by its helper threads
SYNC_PROCESS = True
_FDATASYNC = getattr(os, "fdatasync", None)


class _RunGreenlet(greenlet.greenlet):
    """A run's greenlet; `hub` tells code deep in a driver that it runs in one."""

    hub: "RunHub"


def current() -> "RunHub | None":
    """The hub driving the calling code, or None on an ordinary thread."""
    return getattr(greenlet.getcurrent(), "hub", None)


def poll(poller: Any, fds: list[tuple[int, int]], timeout_ms: float | None) -> list[tuple[int, int]]:
    """`poller.poll(timeout_ms)` over `fds` (what `poller` has registered), through the hub when
    the caller runs in one: other runs go on meanwhile."""
    hub = current()
    if hub is None:
        return poller.poll(timeout_ms)
    return hub.wait_fds(fds, timeout_ms)


class Task:
    """A run going on in the hub: `is_alive` and `join` as a thread's."""

    __slots__ = ("function", "finished")

    def __init__(self, function: Callable[[], None]) -> None:
        self.function = function
        self.finished = threading.Event()

    def is_alive(self) -> bool:
        return not self.finished.is_set()

    def join(self, timeout: float | None = None) -> None:
        self.finished.wait(timeout)


class _Wait:
    """What one suspended run waits for: descriptors, a queue, a deadline."""

    __slots__ = ("glet", "fds", "events", "deadline", "queue")

    def __init__(self, glet: _RunGreenlet, fds: list[tuple[int, int]], deadline: float | None,
                 waits_on: "HubQueue | None") -> None:
        self.glet = glet
        self.fds = fds
        self.events: list[tuple[int, int]] = []
        self.deadline = deadline
        self.queue = waits_on


class HubQueue:
    """A driver's reply queue in the hub: `put` from any thread, `get` in the run's greenlet
    (the interface of the `queue.SimpleQueue` it stands in for)."""

    __slots__ = ("_hub", "_items", "waiter")

    def __init__(self, hub: "RunHub") -> None:
        self._hub = hub
        self._items: collections.deque = collections.deque()
        self.waiter: _Wait | None = None

    def put(self, item: Any) -> None:
        self._items.append(item)
        if self.waiter is not None:
            self._hub.notify(self)

    def put_here(self, item: Any) -> None:
        """`put` from the hub's own thread: its waiting run is resumed directly, with no wake-up
        through the pipe."""
        self._items.append(item)
        if self.waiter is not None:
            self._hub._resume(self.waiter)

    def get_nowait(self) -> Any:
        try:
            return self._items.popleft()
        except IndexError:
            raise queue.Empty from None

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        items = self._items
        if block and not items:
            # Woken with nothing here (a notice meant for an earlier wait on this queue), it
            # waits again, for what is left of its time.
            deadline = None if timeout is None else time.monotonic() + timeout
            while not items:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._hub.wait_queue(self, left)
        try:
            return items.popleft()
        except IndexError:
            raise queue.Empty from None

    def empty(self) -> bool:
        return not self._items


class RunHub:
    """The thread and its `poll`. Started by the first `spawn`; its thread ends once it has no
    run left, and the next `spawn` starts another."""

    def __init__(self, name: str = "flow runs") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._spawned: collections.deque[Task] = collections.deque()
        self._notified: collections.deque[HubQueue] = collections.deque()
        self._wake_pending = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)
        self._by_fd: dict[int, _Wait] = {}
        self._timed: list[_Wait] = []
        self._ready: collections.deque[_RunGreenlet] = collections.deque()
        self._tasks = 0
        self._main: greenlet.greenlet | None = None
        self._work: queue.SimpleQueue = queue.SimpleQueue()  # for the helper threads (`blocking`)
        self._helper_count = 0
        self._idle_helpers = 0  # (read without the lock: a helper more or less is started)
        self._syncer: SyncProcess | None = None
        self._syncer_failed = False  # it could not be started: the helper threads sync
        #: what is to be done once every run waits, before the hub polls (`before_poll`)
        self._before_poll: list[Callable[[], None]] = []

    # -- from any thread -------------------------------------------------------------------

    def spawn(self, function: Callable[[], None]) -> Task:
        """Run `function` as a run of this hub; it returns a `Task` at once."""
        task = Task(function)
        with self._lock:
            self._spawned.append(task)
            self._tasks += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
                return task
        self._wake()
        return task

    def notify(self, waited: HubQueue) -> None:
        self._notified.append(waited)
        self._wake()

    def _wake(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already

    # -- from a run's greenlet ---------------------------------------------------------------

    def wait_fds(self, fds: list[tuple[int, int]], timeout_ms: float | None) -> list[tuple[int, int]]:
        deadline = None if timeout_ms is None or timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        wait = _Wait(greenlet.getcurrent(), fds, deadline, None)  # type: ignore[arg-type]
        register = self._poller.register
        by_fd = self._by_fd
        for fd, events in fds:
            register(fd, events)
            by_fd[fd] = wait
        if deadline is not None:
            self._timed.append(wait)
        self._main.switch()  # type: ignore[union-attr]
        return wait.events

    def wait_queue(self, waited: HubQueue, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = _Wait(greenlet.getcurrent(), [], deadline, waited)  # type: ignore[arg-type]
        waited.waiter = wait
        if deadline is not None:
            self._timed.append(wait)
        if not waited.empty():  # a put between the caller's look and now
            waited.waiter = None
            if deadline is not None:
                self._timed.remove(wait)
            return
        self._main.switch()  # type: ignore[union-attr]

    def queue(self) -> HubQueue:
        return HubQueue(self)

    def before_poll(self, hook: Callable[[], None]) -> None:
        """`hook()` once, on the hub's thread, when every run waits and before the hub polls
        (a shared child's replies written together, flowrt/lane_child.py); it must not raise."""
        self._before_poll.append(hook)

    def blocking(self, call: Callable[[Any], Any], argument: Any) -> Any:
        """`call(argument)` on one of the hub's helper threads (a sync of a run's history), its
        result returned (or exception raised) here once it ends; the hub's other runs go on
        meanwhile. Helpers are started as needed, up to `HELPERS` (then calls queue for them),
        and wait for work on a C queue: a handoff costs no Python lock or future. With one run
        in the hub nothing could go on meanwhile, and the call is made here, as a run on a thread
        of its own makes it (the handoff would cost that run ~30% a call with fsync)."""
        if self._tasks <= 1:
            return call(argument)
        done = self.queue()
        self._work.put((call, argument, done))
        if self._idle_helpers == 0 and self._helper_count < HELPERS:
            with self._lock:
                if self._helper_count < HELPERS:
                    self._helper_count += 1
                    threading.Thread(target=self._help, name=self.name + " sync", daemon=True).start()
        return _unboxed(done.get())

    def sync(self, call: Callable[[int], None], fd: int) -> None:
        """`call(fd)`, a sync of a run's history, made durable before this returns while the
        hub's other runs go on: by the hub's sync process when it drives several runs and
        `call` is `os.fdatasync`, otherwise as `blocking` makes it. A sync the process could
        not make (it went away) is made by `blocking`; its errno is raised as the OSError the
        sync here would have raised."""
        if self._tasks <= 1 or call is not _FDATASYNC or not SYNC_PROCESS:
            return self.blocking(call, fd)
        syncer = self._syncer if self._syncer is not None else self._start_syncer()
        if syncer is None:
            return self.blocking(call, fd)
        done = self.queue()
        if not syncer.send(fd, done.put_here):  # (answered on the hub's thread)
            self._forget_syncer_if_gone()
            return self.blocking(call, fd)
        code = done.get()
        if code is None:
            return self.blocking(call, fd)
        if code:
            raise OSError(code, os.strerror(code))

    def _start_syncer(self) -> "SyncProcess | None":
        if self._syncer_failed:
            return None
        try:
            syncer = SyncProcess()
        except OSError:
            self._syncer_failed = True
            return None
        self._syncer = syncer
        self._poller.register(syncer.fileno, select.POLLIN)
        atexit.register(syncer.close)  # (its workers end once the socket closes; reaped here)
        return syncer

    def _forget_syncer_if_gone(self) -> None:
        syncer = self._syncer
        if syncer is not None and not syncer.alive:
            self._syncer = None  # (a later sync starts another)
            try:
                self._poller.unregister(syncer.fileno)
            except (KeyError, ValueError):
                pass

    def on_own_thread(self, function: Callable[[], Any]) -> Any:
        """`function()` on a new thread of its own (a run the hub does not drive well), its
        result returned (or exception raised) here once it ends; the hub goes on meanwhile.
        Code on that thread is not in the hub: its waits are the ordinary ones."""
        done = self.queue()
        threading.Thread(target=lambda: done.put(_boxed(function)), name="flow run", daemon=True).start()
        return _unboxed(done.get())

    def _help(self) -> None:
        work = self._work
        while True:
            self._idle_helpers += 1
            call, argument, done = work.get()
            self._idle_helpers -= 1
            done.put(_boxed(call, argument))

    # -- the hub's thread --------------------------------------------------------------------

    def _serve(self) -> None:
        self._main = greenlet.getcurrent()
        ready = self._ready
        while True:
            with self._lock:
                while self._spawned:
                    task = self._spawned.popleft()
                    glet = _RunGreenlet(self._runner(task))
                    glet.hub = self
                    ready.append(glet)
            while ready:
                ready.popleft().switch()
            if self._before_poll:
                hooks, self._before_poll = self._before_poll, []
                for hook in hooks:
                    hook()
                if ready:
                    continue
            with self._lock:
                if not self._tasks:
                    self._thread = None
                    return
                if self._spawned:
                    continue
            self._wait_for_events()

    def _runner(self, task: Task) -> Callable[[], None]:
        def run() -> None:
            try:
                task.function()
            except BaseException:  # noqa: BLE001 - the function boxes its own outcome; the hub goes on
                pass
            finally:
                with self._lock:
                    self._tasks -= 1
                task.finished.set()
        return run

    def _wait_for_events(self) -> None:
        timed = self._timed
        timeout_ms = -1
        if timed:
            soonest = min(w.deadline for w in timed)  # type: ignore[type-var]
            timeout_ms = max(0, int((soonest - time.monotonic()) * 1000 + 0.999))
        events = self._poller.poll(timeout_ms)
        by_fd = self._by_fd
        woken: dict[_Wait, None] = {}  # in the order they woke
        syncer = self._syncer
        for fd, event in events:
            if fd == self._wake_r:
                self._take_notices(woken)
                continue
            if syncer is not None and fd == syncer.fileno:
                syncer.take_answers()  # (each answered run resumed)
                self._forget_syncer_if_gone()
                continue
            wait = by_fd.get(fd)
            if wait is None:
                continue
            woken[wait] = None
            wait.events.append((fd, event))
        if timed:
            now = time.monotonic()
            for wait in timed:
                if wait.deadline <= now:  # type: ignore[operator]
                    woken[wait] = None
        for wait in woken:
            self._resume(wait)

    def _take_notices(self, woken: dict[_Wait, None]) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        # Cleared after the pipe is read, before what was notified is: a notice the hub has not
        # taken either finds the flag clear (and writes) or was queued before the drain below.
        # (Cleared before the read, a write made between the two would be read and lost, the
        # flag left set, and every later notice would skip its write: the hub asleep for good.)
        self._wake_pending = False
        notified = self._notified
        while notified:
            waited = notified.popleft()
            wait = waited.waiter
            if wait is not None:
                woken[wait] = None

    def _resume(self, wait: _Wait) -> None:
        unregister = self._poller.unregister
        by_fd = self._by_fd
        for fd, _ in wait.fds:
            if by_fd.get(fd) is wait:
                del by_fd[fd]
                unregister(fd)
        if wait.deadline is not None:
            self._timed.remove(wait)
        if wait.queue is not None:
            wait.queue.waiter = None
        self._ready.append(wait.glet)


def _boxed(function: Callable[..., Any], *arguments: Any) -> tuple[bool, Any]:
    """`function(*arguments)` on a thread of the hub's, as (True, its result) or (False, what
    it raised), for the run that asked to have returned or raised (`_unboxed`)."""
    try:
        return True, function(*arguments)
    except BaseException as problem:  # noqa: BLE001 - raised in the run that asked
        return False, problem


def _unboxed(boxed: tuple[bool, Any]) -> Any:
    ok, value = boxed
    if ok:
        return value
    raise value


def _sync_waiter(call: Callable[[int], None], fd: int) -> None:
    hub = current()
    if hub is None:
        call(fd)
    else:
        hub.sync(call, fd)


durable.sync_waiter = _sync_waiter


def in_background(location: Any, work: Callable[[], None]) -> "Task | threading.Thread":
    """Start `work` (driving one run of the store at `location`) in the background: in this
    process's hub for a runs directory. A database store's statements wait inside psycopg, which
    would hold the hub's one thread for each of them, so those runs keep a thread each."""
    if isinstance(location, (str, os.PathLike)):
        in_hub = not is_database_url(os.fspath(location))
    else:
        in_hub = getattr(location, "root", None) is not None  # a directory store has a root
    if in_hub:
        return shared().spawn(work)
    thread = threading.Thread(target=work, name="flow run", daemon=True)
    thread.start()
    return thread


_shared: RunHub | None = None
_shared_lock = threading.Lock()


def shared() -> RunHub:
    """This process's hub, made at first use (its thread runs only while it has runs)."""
    global _shared
    hub = _shared
    if hub is None:
        with _shared_lock:
            if _shared is None:
                _shared = RunHub()
            hub = _shared
    return hub


def _forget_in_child() -> None:
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()  # the parent's thread is not in the child


os.register_at_fork(after_in_child=_forget_in_child)
