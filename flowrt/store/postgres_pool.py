"""The PostgreSQL store's connection pool (`new_pool`, the one entry): psycopg_pool's, each
connection set up for the store (autocommit, synchronous commits, a statement timeout), and
checked before it is handed out only when it has been idle a while.

psycopg_pool's `check_connection` costs a round trip on every `getconn`; a run's open, reads and
host records take a dozen connections, so on a worker that was ~6% of a run (py-spy). A
connection that was given back less than `CHECK_AFTER_IDLE` seconds ago was working then: it is
handed out unchecked. The moment is taken in `putconn`, not in psycopg_pool's `reset` hook: with a
`reset` the pool gives every connection back on a worker thread, so a `getconn` right after a
`putconn` found the pool empty and opened another connection (and paid a thread hand-off). If the
database went away within that window, the first statement on it fails, which is a storage
failure as any other (the run stops, and resumes later); a broken connection is never given back
to the pool (psycopg_pool discards it)."""

from __future__ import annotations

import time
import weakref

import psycopg
import psycopg_pool

CONNECT_SECONDS = 10.0  # bound on waiting for a connection (the database away: StorageError)
#: connections a process may hold: each RunLog open for appending holds one until it closes (a
#: host driving many runs at once, as the MCP server may, needs one each), and the rest serve reads
POOL_SIZE = 32
STATEMENT_SECONDS = 60  # bound on any one statement (a lock held elsewhere must not hang a host)
#: a connection given back this recently is handed out without a round trip to check it
CHECK_AFTER_IDLE = 2.0

_returned: "weakref.WeakKeyDictionary[psycopg.Connection, float]" = weakref.WeakKeyDictionary()


def _configure(conn: psycopg.Connection) -> None:
    conn.autocommit = True
    conn.execute("SET synchronous_commit = on")
    conn.execute(f"SET statement_timeout = '{STATEMENT_SECONDS}s'")


def _check_if_idle(conn: psycopg.Connection) -> None:
    given_back = _returned.get(conn)
    if given_back is None or time.monotonic() - given_back >= CHECK_AFTER_IDLE:
        psycopg_pool.ConnectionPool.check_connection(conn)


class _StampingPool(psycopg_pool.ConnectionPool):
    def putconn(self, conn: psycopg.Connection) -> None:
        _returned[conn] = time.monotonic()
        super().putconn(conn)


def new_pool(url: str) -> psycopg_pool.ConnectionPool:
    """A pool for `url`, not yet opened."""
    return _StampingPool(
        url, min_size=1, max_size=POOL_SIZE, open=False, timeout=CONNECT_SECONDS,
        configure=_configure, check=_check_if_idle,
        kwargs={"connect_timeout": int(CONNECT_SECONDS)}, name="flow")
