"""`flow worker`: a host that drives the runs of a store that need one, until it is stopped.

It looks at the store's runs (`Store.scan`, every `poll` seconds and whenever a run it drives
lets go) and drives, `concurrency` at a time, each run that is due:

- **crashed**: no host holds it and none recorded a decision at its last fact (its host died, or
  a storage failure stopped it), or a worker stopping halted it (`halted`, reason
  `worker-stop`). It is resumed exactly as `flow resume RUN` resumes it (`resume_claimed`): open
  calls settled as after a crash (the host's clock sent again, a sleep for what remains of it;
  the rest answered Unknown).
- **sleeping** with its earliest deadline passed (a `sleeping` host decision, flowrt/timers.py):
  woken the same way; its sleeps are sent again for what remains (nothing, by now).

Paused runs (they wait for a reply only a person or `flow resume --reply` gives), runs halted by
anyone but a worker, and ended runs are left alone. A run it drives that comes to wait only on
timers due more than `park_after` seconds away is let go of as sleeping, so a waiting run holds
no slot; the worker wakes it at its deadline. SIGTERM or SIGINT stops the worker cleanly: each
run it drives is let go of (sleeping, when it waits only on timers; else halted with reason
`worker-stop`, which the next worker recovers), and it exits 0 (SIGTERM) or 130 (SIGINT).

- **queued** (a `queued` host decision: `flow run --detach`, `flow resume --detach`): driven
  from where its record stands, the reply `flow resume --detach` admitted already in it.

The worker keeps the flow.toml Tool processes its runs start (`ToolProcesses`): each is lent to
one run at a time and handed to the next run that binds the same command, unless it died, broke
the protocol, stalled or had a call out when its run let go (docs/cli.md, "Tool processes a
worker keeps"; `reuse = false` on a Tool's entry opts out).

Two workers on one store never drive one run at once: a run is driven only once it is
*claimed* (`claim_due`, the one place the stores differ), and what is due is decided again from
the claimed record, since another host may have driven it between the look and the claim. On
the run directory the claim is the appender's lock (one appender per run, held until the run is
let go of, dropped by the kernel if the process dies), taken on the runs a scan found. On
PostgreSQL it is the run's lease, taken by `FOR UPDATE SKIP LOCKED` on the runs the database
says want a host (flowrt/store/postgres_queue.py: queued, crashed with their lease run out,
halted by a stopping worker, sleeping past their deadline, all on the database's clock); the
lease is renewed while the run is driven and fences every write, so a worker whose lease ran
out appends nothing more and stops driving the run at its next write. A database that goes
away is a storage failure of the runs being driven (each stops; a worker takes it again once
its lease runs out), and the worker keeps looking until the database is back.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass, field

from flowrt import timers
from flowrt.run_state import appender_holds, host_decision
from flowrt.store import HISTORY, RunBusy, RunLog, RunNotFound, Store, StorageError, open_store
from flowrt.store import postgres_queue
from flowrt.store.durable import _strerror
from flowrt.store.format import HOST_HALTS, SHARED_CHILD_LOST, TEMPLATE_LOST, WORKER_STOP
from flowrt.spare_child import SpareChild
from flowrt.worker_look import DirectoryRuns
from flowrt.tool_processes import ToolProcesses

#: how long a stopping worker waits for its runs to let go before it exits anyway (each is then
#: left as a crashed run, which the next worker recovers)
STOP_GRACE_SECONDS = 20.0

#: how long a run whose drive hit a storage failure on PostgreSQL is passed over (the database
#: may be back by then; its lease has run out or been given back)
STORAGE_RETRY_SECONDS = 5.0


class _Stop(threading.Event):
    """The halt event a worker hands each run it drives; its `reason` goes into the `halted`
    record (`flowrt.halts.HaltRequested`)."""

    reason = WORKER_STOP

    def lease_lost(self) -> None:
        self.reason = "lease-lost"
        self.set()


def is_database(store: Store) -> bool:
    return getattr(store, "root", None) is None and hasattr(store, "lease_seconds")


def claim(store: Store, run_id: str) -> RunLog | None:
    """Take run `run_id` for driving, or None when another host has it. The one place a store's
    way of claiming shows: on the run directory, opening for appending takes the appender's lock
    (`RunBusy` when another process holds it). The lock is probed first without taking it, so a
    run another host is driving costs no wait for the lock."""
    root = getattr(store, "root", None)
    if root is not None and appender_holds(os.path.join(root, run_id, HISTORY)):
        return None
    try:
        return store.open(run_id, for_append=True)
    except RunBusy:
        return None


def why_due(log: RunLog, at_ns: int) -> str | None:
    """Why a claimed run is due now (`crashed`, `worker-stop`, `template`, `sleeping`), or None. Read from
    the claimed record itself: what the scan saw may have changed before the claim."""
    if log.ended:
        return None
    decision = host_decision(log.host_records(), log.head)
    if decision is None:
        return "crashed"
    return _due_by_decision(decision, at_ns)


def _due_by_decision(decision: dict, at_ns: int) -> str | None:
    kind = decision.get("kind")
    if kind == "halted" and decision.get("reason") in HOST_HALTS:
        return decision["reason"]
    if kind == "queued":
        return "queued"
    if kind == "sleeping":
        until = timers.decision_until(decision)
        if until is not None and until <= at_ns:
            return "sleeping"
    return None


@dataclass
class _Look:
    """What one look over the store found: runs that may be due (to claim), and the earliest
    deadline of a sleeping run not yet due."""

    due: list[tuple[str, str | None]] = field(default_factory=list)  # (run id, its last fact's hash)
    next_wake: int | None = None


class Worker:
    def __init__(self, runs: str, *, concurrency: int = 4, manifest: str | None = None, allow: bool = False,
                 park_after: float = 5.0, poll: float = 2.0, out=None) -> None:
        self.runs = runs
        self.store = open_store(runs)
        self.database = is_database(self.store)
        self.concurrency = concurrency
        self.manifest = manifest
        self.allow = allow
        self.park_after = park_after
        self.poll = poll
        self.out = out or sys.stdout
        self.lock = threading.Lock()
        self.active: dict[str, tuple[threading.Thread, _Stop]] = {}
        #: runs a drive left where it found them (refused, a storage failure), by the head it
        #: had then: not tried again until their history moves on (or, for a storage failure
        #: on PostgreSQL, until the time kept with it)
        self.stuck: dict[str, tuple[str | None, int | None]] = {}
        self.changed = threading.Event()  # a drive ended, or a stop was asked for
        self.stopping: int | None = None  # the signal that asked the worker to stop
        #: flow.toml's Tool processes, each lent to one run at a time and kept for the next
        #: (flowrt/tool_processes.py): a short run's cost is mostly a process's start
        self.processes = ToolProcesses(idle_per_command=concurrency)
        #: sandbox children started ahead of the runs they will drive (flowrt/spare_child.py)
        self.children = SpareChild(keep=concurrency)
        #: a runs directory's rows, read again only where its files changed (flowrt/worker_look.py)
        self.directory_runs = None if self.database else DirectoryRuns(self.store.root)

    # -- the loop

    def serve(self, *, once: bool = False) -> int:
        """Drive due runs until stopped (SIGTERM: exit 0, SIGINT: 130) or, with `once`, until
        nothing is due and nothing is being driven."""
        previous = self._install_signals()
        sys.stderr.write(f"flow worker: driving the runs of {_shown(self.runs)} ({self.concurrency} at a time)\n")
        sys.stderr.flush()
        try:
            while self.stopping is None:
                self.changed.clear()
                try:
                    look = self.look()
                    started = self.start_due(look.due)
                except StorageError as problem:
                    sys.stderr.write(f"storage failure: {problem}\n")
                    sys.stderr.flush()
                    if once or not self.database:
                        return 5
                    # The database away: each run being driven stops by itself; look again later.
                    self.changed.wait(self.poll)
                    continue
                with self.lock:
                    busy = bool(self.active)
                if once and not busy and not started:
                    return 0
                wait = self.poll
                if look.next_wake is not None:
                    wait = min(wait, max(0.0, (look.next_wake - timers.now_ns()) / 1e9))
                self.changed.wait(wait)
            return self.let_go()
        finally:
            self.processes.close()
            self.children.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def look(self) -> _Look:
        """One pass over the store's runs (page by page): those that may be due, by what the
        scan shows (a run with no decision at its last fact may also be one another host is
        driving: the claim tells). On PostgreSQL the claim itself finds them: the look only
        asks when the next sleeping run is due."""
        if self.database:
            seconds = postgres_queue.seconds_to_next_ready(self.store)
            return _Look(next_wake=None if seconds is None else timers.now_ns() + int(seconds * 1e9))
        found = _Look()
        now = timers.now_ns()
        try:
            rows = self.directory_runs.rows()
        except FileNotFoundError:
            return found  # no run was ever made here
        except OSError as problem:
            raise StorageError(f"the runs root: {_strerror(problem)}") from None
        for row in rows:
            if row.get("record") != "incomplete" or row.get("problem") is not None:
                continue
            run_id = row["run"]
            head = (row.get("lastFact") or {}).get("hash")
            if run_id in self.stuck and self.stuck[run_id][0] == head:
                continue
            decision = row.get("hostDecision")
            if decision is None or _due_by_decision(decision, now) is not None:
                found.due.append((run_id, head))
            elif decision.get("kind") == "sleeping":
                until = timers.decision_until(decision)
                if until is not None and (found.next_wake is None or until < found.next_wake):
                    found.next_wake = until
        return found

    def free_slots(self) -> int:
        with self.lock:
            return 0 if self.stopping is not None else self.concurrency - len(self.active)

    def claim_due(self, candidates: list[tuple[str, str | None]]):
        """Claim due runs while there are free slots: yields (the claimed run, why it is due).
        The one place the stores differ."""
        if self.database:
            yield from self._claim_from_database()
            return
        for run_id, seen_head in candidates:
            if self.free_slots() <= 0:
                return
            with self.lock:
                if run_id in self.active:
                    continue
            try:
                log = claim(self.store, run_id)
            except StorageError as problem:  # damaged since the scan read it: not this worker's to mend
                self.stuck[run_id] = (seen_head, None)
                self.say(f"{run_id}: storage failure: {problem}")
                continue
            except (RunNotFound, ValueError):  # removed since the scan
                continue
            if log is None:
                continue
            why = self._judge(log, seen_head, timers.now_ns())
            if why is not None:
                yield log, why

    def _claim_from_database(self):
        free = self.free_slots()
        if free <= 0:
            return
        now = timers.now_ns()
        skip = [(run_id, head) for run_id, (head, until) in self.stuck.items() if until is None or until > now]
        claims, db_now = postgres_queue.claim_ready(self.store, limit=free, skip=skip)
        for index, taken in enumerate(claims):
            try:
                log = self.store.open(taken.run, for_append=True, lease=taken.lease)
            except StorageError as problem:  # damaged: not this worker's to mend
                self.stuck[taken.run] = (postgres_queue.give_back(self.store, taken), None)
                self.say(f"{taken.run}: storage failure: {problem}")
                continue
            except (RunNotFound, ValueError):
                continue
            why = self._judge(log, log.head, db_now)
            if why is not None:
                yield log, why

    def _judge(self, log: RunLog, seen_head: str | None, at_ns: int) -> str | None:
        """Why a claimed run is due (None: it is let go of again, and on PostgreSQL its
        readiness is corrected from its record)."""
        try:
            why = why_due(log, at_ns)
            if why is None and self.database:
                postgres_queue.correct_readiness(log, log.ended, host_decision(log.host_records(), log.head))
        except StorageError as problem:
            log.close()
            self.stuck[log.run_id] = (seen_head, None)
            self.say(f"{log.run_id}: storage failure: {problem}")
            return None
        if why is None:
            log.close()  # driven by another host since the look: nothing to do now
        return why

    def start_due(self, candidates: list[tuple[str, str | None]]) -> int:
        """Claim and start driving as many due runs as there are free slots; how many started."""
        started = 0
        for log, why in self.claim_due(candidates):
            run_id = log.run_id
            stop = _Stop()
            thread = threading.Thread(target=self.drive, args=(log, why, stop), name=f"drive {run_id}",
                                      daemon=True)
            with self.lock:
                self.active[run_id] = (thread, stop)
            thread.start()
            started += 1
        return started

    def drive(self, log: RunLog, why: str, stop: _Stop) -> None:
        """Resume one claimed run as `flow resume` would (the same code path), then let it go."""
        from flowrt.replay import resume_claimed

        run_id = log.run_id
        head = log.head
        # A lease found lost mid-drive (another host has the run now): stop driving at once, as
        # a halt does (the halt's own record is refused by the fence: a storage failure), rather
        # than at the next write, which a long call could put off for as long as it takes.
        log.when_lease_lost(stop.lease_lost)
        try:
            outcome = resume_claimed(log, self.runs, allow=self.allow, halt=stop, park_after=self.park_after,
                                     manifest=self.manifest, processes=self.processes, child=self.children.take_soon())
            if outcome.exit_code == 5 and self.database:
                self.stuck[run_id] = (head, timers.now_ns() + int(max(STORAGE_RETRY_SECONDS, self.poll) * 1e9))
            elif outcome.exit_code in (2, 5):
                self.stuck[run_id] = (head, None)
            self.say(f"{run_id}: {_woke_because(why)}: {_ending(outcome)}"
                     + (f" ({outcome.message})" if outcome.message and outcome.exit_code not in (3, 130) else ""))
        except BaseException as problem:  # a bug in driving one run must not stop the others
            self.stuck[run_id] = (head, None)
            self.say(f"{run_id}: {_woke_because(why)}: failed: {type(problem).__name__}: {problem}")
        finally:
            log.close()
            self.children.refill()
            with self.lock:
                self.active.pop(run_id, None)
            self.changed.set()

    # -- stopping

    def _install_signals(self) -> dict:
        previous = {}
        if threading.current_thread() is not threading.main_thread():
            return previous  # embedded in a thread: the embedder stops it with `stop`
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: object) -> None:
        """SIGTERM or SIGINT. A handler runs on the main thread between two bytecodes, which
        may be inside `changed.wait` holding the event's lock: `changed.set()` here would wait
        for that lock forever (seen: a worker stopped by SIGTERM that never ended). So the event
        is set (by `stop`) from a thread of its own, once the main thread has let go of the lock."""
        threading.Thread(target=self.stop, args=(signum,), name="flow worker stop", daemon=True).start()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the worker to stop: it lets go of its runs and `serve` returns."""
        if self.stopping is None:
            self.stopping = signum
        self.changed.set()

    def let_go(self) -> int:
        """Let go of every run being driven (each notices within a poll tick), waiting a bounded
        time for them."""
        with self.lock:
            active = list(self.active.items())
        for _, (_, stop) in active:
            stop.set()
        deadline = timers.now_ns() + int(STOP_GRACE_SECONDS * 1e9)
        for run_id, (thread, _) in active:
            thread.join(max(0.0, (deadline - timers.now_ns()) / 1e9))
            if thread.is_alive():
                self.say(f"{run_id}: did not let go within {STOP_GRACE_SECONDS:g} s; left for the next worker")
        return 130 if self.stopping == signal.SIGINT else 0

    def say(self, line: str) -> None:
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()


def _shown(location: str) -> str:
    """A store's location as a log line may show it: a URL's password masked."""
    import urllib.parse

    import re

    password = urllib.parse.urlsplit(location).password
    shown = location if password is None else location.replace(f":{password}@", ":***@", 1)
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", shown)


def _woke_because(why: str) -> str:
    return {"crashed": "recovered (crashed)", WORKER_STOP: "recovered (a worker stopped)",
            TEMPLATE_LOST: "recovered (its child template ended)",
            SHARED_CHILD_LOST: "recovered (the child it shared with other runs ended)",
            "sleeping": "woke (timer due)", "queued": "drove (queued)"}.get(why, why)


def _ending(outcome) -> str:
    code = outcome.exit_code
    if code == 3 and outcome.sleeping_until is not None:
        return f"sleeping until {timers.deadline_text(outcome.sleeping_until)}"
    return {0: "completed", 1: "faulted", 2: "refused", 3: "paused", 4: "completed with Err",
            5: "storage failure", 130: "let go (halted)"}.get(code, f"exit {code}")
