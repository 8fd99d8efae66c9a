"""The appender's lease on a run in the PostgreSQL store: who may append, and the fencing epoch
that stops anyone else.

A lease is a row's `(owner, epoch, lease_until)` in `flow_runs`. Taking it increments `epoch`
and is possible only when nobody holds it or the holder's time ran out; every write of the
holder names its epoch and the run's time must not have run out (`FENCE`, checked in the
statement that writes), so a host whose lease expired or was taken writes nothing, ever again,
however late its write arrives. Time is the database's (`clock_timestamp()`): a host whose clock
runs behind or ahead cannot stretch a lease. The holder renews it in the background (`Renewer`)
at a third of its length.

This is the seam the workers build on: a worker that claims a run (`FOR UPDATE SKIP LOCKED`)
takes its lease with `take` in the claiming transaction and hands it to
`PostgresStore.open(..., lease=...)`."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass

import psycopg

#: how long a lease lasts unrenewed (FLOW_LEASE_SECONDS overrides): a host that dies holds
#: its runs this long at most
LEASE_SECONDS = 30.0

#: the fence every write of a lease holder passes: its epoch, and time left
FENCE = "run = %(run)s AND epoch = %(epoch)s AND lease_until > clock_timestamp()"


def lease_seconds() -> float:
    text = os.environ.get("FLOW_LEASE_SECONDS")
    if text:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"FLOW_LEASE_SECONDS is {text!r}, not a number of seconds") from None
        if not 0.2 <= value <= 86400:
            raise ValueError("FLOW_LEASE_SECONDS is from 0.2 to 86400")
        return value
    return LEASE_SECONDS


def new_owner() -> str:
    """A name for this appender that no other one has: host, process, and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class Lease:
    run: str
    owner: str
    epoch: int
    seconds: float


def take(conn: psycopg.Connection, run: str, owner: str, seconds: float) -> Lease | None:
    """Take the lease on `run` when nobody holds it or it ran out; None when it is held (or
    there is no such run). Runs in the caller's transaction (commit to make it count)."""
    row = conn.execute(
        "UPDATE flow_runs SET epoch = epoch + 1, owner = %s, "
        "lease_until = clock_timestamp() + make_interval(secs => %s) "
        "WHERE run = %s AND (owner IS NULL OR lease_until <= clock_timestamp()) RETURNING epoch",
        (owner, seconds, run)).fetchone()
    return Lease(run, owner, row[0], seconds) if row else None


def renew(conn: psycopg.Connection, lease: Lease) -> bool:
    """Extend the lease by its length from now; False when it was lost (expired or taken)."""
    cur = conn.execute(
        "UPDATE flow_runs SET lease_until = clock_timestamp() + make_interval(secs => %(secs)s) "
        "WHERE " + FENCE, {"run": lease.run, "epoch": lease.epoch, "secs": lease.seconds})
    return cur.rowcount == 1


def release(conn: psycopg.Connection, lease: Lease) -> None:
    """Give the lease back (a later taker need not wait for it to run out)."""
    conn.execute("UPDATE flow_runs SET owner = NULL, lease_until = NULL "
                 "WHERE run = %s AND epoch = %s", (lease.run, lease.epoch))


def holder(conn: psycopg.Connection, run: str) -> tuple[str, float] | None:
    """(owner, seconds left) of a live lease on `run`, or None."""
    row = conn.execute(
        "SELECT owner, extract(epoch FROM lease_until - clock_timestamp())::float8 FROM flow_runs "
        "WHERE run = %s AND owner IS NOT NULL AND lease_until > clock_timestamp()", (run,)).fetchone()
    return (row[0], row[1]) if row else None


class Renewer:
    """Renews a lease every third of its length on a connection of `pool`, until `stop()` or
    until a renewal finds the lease lost (`lost` then is set and each `on_lost` callback called:
    the holder stops driving then rather than at its next write, which fails on the fence
    anyway). A renewal that fails for want of the database is tried again at the next tick: the
    fence, not this thread, decides."""

    def __init__(self, pool, lease: Lease) -> None:
        self.pool = pool
        self.lease = lease
        self.lost = threading.Event()
        self._callbacks: list = []
        self._callbacks_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"flow-lease-{lease.run}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.lease.seconds / 3
        while not self._stop.wait(period):
            try:
                with self.pool.connection(timeout=period) as conn:
                    if not renew(conn, self.lease):
                        with self._callbacks_lock:
                            self.lost.set()
                            callbacks, self._callbacks = self._callbacks, []
                        for callback in callbacks:
                            callback()
                        return
            except Exception:  # the database is away: the fence decides at the next write
                continue

    def on_lost(self, callback) -> None:
        """Call `callback()` when a renewal finds the lease lost (at once if it has been)."""
        with self._callbacks_lock:
            if not self.lost.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def stop(self) -> None:
        """Stop renewing. Waits a moment for the thread, not for a renewal stuck on a database
        that went away: a renewal after the lease was given back or taken changes nothing."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1)
