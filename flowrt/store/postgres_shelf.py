"""Reading a PostgreSQL run's shelved facts back (`flowrt.store.shelf`): by number, from
flow_facts (or flow_archived_facts, where an archive has moved them since), verified as the run
directory's are."""

from __future__ import annotations

import psycopg

from flowrt.store.shelf import FactShelf, lead_of, read_back

_FACTS = "flow_facts"


class ShelvedRows:
    """The loader of an appending PostgresRunLog's shelf: a pooled connection of its store reads
    the rows (every shelved fact is committed: a log shelves only facts its appends wrote)."""

    __slots__ = ("store", "run_id")

    def __init__(self, store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def load(self, first: int, stop: int, shelf: FactShelf) -> list[dict]:
        from flowrt.store.postgres import _failed

        first_n = shelf.second_n + lead_of(first) - 1
        last_n = shelf.second_n + stop - 2
        try:
            with self.store.connection() as conn:
                # (or where an archive has moved them since they were read: every shelved fact
                # comes after the archived facts the shelf's reader knew of)
                rows = conn.execute("SELECT n, line FROM flow_facts WHERE run = %(run)s AND n BETWEEN %(first)s AND "
                                    "%(last)s UNION ALL SELECT n, line FROM flow_archived_facts WHERE run = %(run)s "
                                    "AND n BETWEEN %(first)s AND %(last)s ORDER BY n",
                                    {"run": self.run_id, "first": first_n, "last": last_n}).fetchall()
        except psycopg.Error as problem:
            raise _failed(problem, "cannot read the run", first_n) from problem
        return read_back(b"".join(bytes(row[1]) + b"\n" for row in rows), first, stop, shelf, _FACTS)
