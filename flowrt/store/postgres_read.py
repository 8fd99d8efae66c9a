"""Reading a PostgreSQL run for `PostgresRunLog`'s open: the run's row, its host records, the
hashes of its values and its first facts in one `REPEATABLE READ` snapshot, and its fact rows a
page at a time as they are verified (`postgres_verify.RowPages`), never all at once (a replay of
100,000 calls held +668 MB when they were, docs/impl.md session 18). With `defer` the pages after
the first facts are read from the pool's connections as the facts are asked for: the snapshot
counted the rows' bytes and their last number, so rows appended since are not read; rows an
archive moved meanwhile to flow_archived_facts are read there (as a run directory's reader reads
on in the file it opened after an archive replaced it); rows lost are a StorageError, never fewer
facts."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import psycopg

from flowrt.store.errors import RunNotFound
from flowrt.store.postgres_verify import Reading, RowPages, start_reading


@contextlib.contextmanager
def run_snapshot(store: Any, run_id: str) -> Iterator[tuple[psycopg.Connection, tuple]]:
    """A connection in a `REPEATABLE READ READ ONLY` transaction and the run's row (last_n,
    head, anchor) in it; RunNotFound when there is none. psycopg's errors are the caller's."""
    with store.connection() as conn:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            run = conn.execute("SELECT last_n, head, anchor FROM flow_runs WHERE run = %s", (run_id,)).fetchone()
            if run is None:
                raise RunNotFound(f"no run {run_id} in {store}")
            yield conn, run


def read_run(store: Any, run_id: str, *, defer: bool,
             read_all: Callable[[Reading], None] | None = None) -> tuple[Reading, int, set[str], bool]:
    """(the reading, the number of host records, the hex of the stored values, whether the
    reader is done): verified whole, or with `defer` as far as its first facts. `read_all`:
    how the reader is read to its end when not deferred (an appender's, a step at a time)."""
    from flowrt.store.postgres import _failed

    try:
        with run_snapshot(store, run_id) as (conn, run):
            # Every row, not only those up to `last_n`: a row past it is damage, and the
            # reader finds it as it would any other.
            size, last_row = conn.execute(
                "SELECT coalesce(sum(octet_length(line) + 1), 0)::bigint, coalesce(max(n), 0) "
                "FROM flow_facts WHERE run = %s", (run_id,)).fetchone()
            host_rows = conn.execute("SELECT i, line FROM flow_host WHERE run = %s ORDER BY i",
                                     (run_id,)).fetchall()
            present = {row[0] for row in conn.execute("SELECT hex FROM flow_values WHERE run = %s", (run_id,))}
            pages = RowPages(rows_after(store, run_id, conn, last_row), size)
            reading = start_reading(run_id, run, host_rows, pages)
            if read_all is not None and not defer:
                read_all(reading)
                done = True
            else:
                done = reading.reader.read(2 if defer else None)
            if not done:
                # The rest as it is asked for, from the pool: the rows this snapshot held (up
                # to `last_row`) change only by an archive, which moves them (those after the
                # snapshot's anchor) to flow_archived_facts; those appended since are not read.
                moved_after = reading.anchor["through"] if reading.anchor is not None else 1
                pages.refetch(rows_after(store, run_id, None, last_row, moved_after))
    except psycopg.Error as problem:
        raise _failed(problem, "cannot read the run") from problem
    return reading, len(host_rows), present, done


#: a page of a run's rows, and where the next one begins past a gap (an archive's, after Start)
_PAGE = "SELECT n, line FROM flow_facts WHERE run = %(run)s AND n > %(after)s AND n <= %(upto)s"
_NEXT = "SELECT min(n) FROM flow_facts WHERE run = %(run)s AND n > %(after)s AND n <= %(upto)s"
#: ... with the rows an archive has moved since the reader's snapshot (numbers past its anchor's)
_MOVED = "SELECT n, line FROM flow_archived_facts WHERE run = %(run)s AND n > %(after)s AND n <= %(upto)s " \
    "AND n > %(moved)s"


def rows_after(store: Any, run_id: str, conn: psycopg.Connection | None,
               last_n: int, moved_after: int | None = None) -> Callable[[int, int], list]:
    """`RowPages`'s fetch: the run's rows after a number, up to `last_n`, on `conn` (in the
    open's snapshot) or, when None, on a connection of the pool. A page is a range of numbers,
    not a LIMIT: the planner, its statistics stale after a long run's inserts, scanned and sorted
    every row after the page's start for each page (a replay of 100,000 calls spent 2.3 s in
    them); a range scans its own rows. Numbers run on without gaps but for an archive's, after
    Start, which is stepped over. `moved_after`: where the snapshot's archived facts end; the
    rows past it that an archive has moved to flow_archived_facts since are read there."""
    from flowrt.store.postgres import _failed

    if moved_after is None:
        page_sql, next_sql = _PAGE + " ORDER BY n", _NEXT
    else:
        page_sql = f"{_PAGE} UNION ALL {_MOVED} ORDER BY n"
        next_sql = f"SELECT min(n) FROM ({_PAGE} UNION ALL {_MOVED}) AS held"

    def fetch_on(db: psycopg.Connection, after: int, limit: int) -> list:
        while after < last_n:
            bounds = {"run": run_id, "after": after, "upto": min(after + limit, last_n), "moved": moved_after}
            rows = db.execute(page_sql, bounds).fetchall()
            if rows:
                return rows
            following = db.execute(next_sql, dict(bounds, upto=last_n)).fetchone()[0]
            if following is None:
                break
            after = following - 1
        return []

    def fetch(after: int, limit: int) -> list:
        try:
            if conn is not None:
                return fetch_on(conn, after, limit)
            with store.connection() as pooled:
                return fetch_on(pooled, after, limit)
        except psycopg.Error as problem:
            raise _failed(problem, "cannot read the run", after + 1) from problem
    return fetch

