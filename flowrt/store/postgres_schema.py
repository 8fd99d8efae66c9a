"""The PostgreSQL store's tables, and their creation and migration (`flow store init URL`).

The tables live in the connection's current schema (`search_path`: a URL may choose one with
`options=-csearch_path=NAME`). `flow_schema` holds the version of the layout; each migration
takes the layout from one version to the next, in one transaction, under an advisory lock, so
that two `flow store init` at once do the work once. A store never runs against a layout newer
than the code knows (an older `flow` beside a newer one): that is refused, before anything is
read or written. docs/trace.md, section 14, describes the tables."""

from __future__ import annotations

import psycopg

from flowrt.store.errors import StorageError

#: the layout this code reads and writes
SCHEMA_VERSION = 3

#: MIGRATIONS[v] takes the layout from version v to v + 1 (0: no tables yet)
MIGRATIONS: dict[int, str] = {
    0: """
    CREATE TABLE flow_runs (
        run text COLLATE "C" PRIMARY KEY,
        last_n bigint NOT NULL,          -- the number of the last fact
        head text NOT NULL,              -- its hash: a lost last fact shows as a mismatch
        anchor bytea,                    -- archive: canonical {checkpoints, head, through}
        epoch bigint NOT NULL DEFAULT 0, -- the lease's fencing epoch, incremented by each taker
        owner text,                      -- the appender holding the lease (NULL: none)
        lease_until timestamptz,         -- by the database's clock, never a host's
        created timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE flow_facts (
        run text COLLATE "C" NOT NULL REFERENCES flow_runs ON DELETE CASCADE,
        n bigint NOT NULL,
        line bytea NOT NULL,             -- the fact's canonical JSON, as history.jsonl's line
        PRIMARY KEY (run, n)
    );
    CREATE TABLE flow_archived_facts (
        run text COLLATE "C" NOT NULL REFERENCES flow_runs ON DELETE CASCADE,
        n bigint NOT NULL,
        line bytea NOT NULL,
        PRIMARY KEY (run, n)
    );
    CREATE TABLE flow_values (
        run text COLLATE "C" NOT NULL REFERENCES flow_runs ON DELETE CASCADE,
        hex text NOT NULL,               -- SHA-256 of data
        data bytea NOT NULL,             -- the value's canonical JSON
        PRIMARY KEY (run, hex)
    );
    CREATE TABLE flow_sources (
        run text COLLATE "C" NOT NULL REFERENCES flow_runs ON DELETE CASCADE,
        hex text NOT NULL,
        data bytea NOT NULL,             -- the module source, UTF-8
        PRIMARY KEY (run, hex)
    );
    CREATE TABLE flow_host (
        run text COLLATE "C" NOT NULL REFERENCES flow_runs ON DELETE CASCADE,
        i bigint NOT NULL,               -- 1, 2, ...: the records' order
        line bytea NOT NULL,             -- canonical JSON, chained (prev, hash) as host.jsonl's
        PRIMARY KEY (run, i)
    );
    CREATE INDEX flow_runs_lease ON flow_runs (lease_until) WHERE owner IS NOT NULL;
    """,
    # Workers (flowrt/worker.py): from when a run wants a host (postgres_queue). A run that
    # ends in End wants none; every other existing run is looked at once by the first worker,
    # which corrects the column from its record.
    1: """
    ALTER TABLE flow_runs ADD COLUMN ready_at timestamptz;
    UPDATE flow_runs r SET ready_at = '-infinity' WHERE NOT EXISTS (
        SELECT 1 FROM flow_facts f WHERE f.run = r.run AND f.n = r.last_n
        AND convert_from(f.line, 'UTF8')::jsonb ->> 'kind' = 'End');
    CREATE INDEX flow_runs_ready ON flow_runs (ready_at) WHERE ready_at IS NOT NULL;
    """,
    # No foreign keys to flow_runs: each checked every inserted row with a query and a row lock
    # (a WAL record) on the run's row, a third of a recorded call's server time, guarding what
    # the store's writes already ensure (every row is inserted from the fenced row of flow_runs
    # that the same statement updated or inserted). Deleting a run deletes its rows explicitly
    # (`delete_run`).
    2: """
    DO $$
    DECLARE fk record;
    BEGIN
        FOR fk IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint
                  WHERE contype = 'f' AND confrelid = 'flow_runs'::regclass LOOP
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tab, fk.conname);
        END LOOP;
    END $$;
    """,
}

#: the tables that hold a run's rows besides flow_runs (`delete_run` deletes from each)
RUN_TABLES = ("flow_facts", "flow_archived_facts", "flow_values", "flow_sources", "flow_host")

_LOCK_KEY = 0x466C6F77  # "Flow": serializes concurrent inits of one database


class SchemaTooNew(StorageError):
    """The database's layout is newer than this code knows."""


def _version(conn: psycopg.Connection) -> int | None:
    found = conn.execute("SELECT to_regclass('flow_schema') IS NOT NULL").fetchone()[0]
    if not found:
        return None
    row = conn.execute("SELECT max(version) FROM flow_schema").fetchone()
    return row[0] if row and row[0] is not None else 0


def _refuse_newer(version: int | None) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaTooNew(f"the database's Flow tables are at version {version}, newer than this "
                           f"flow knows ({SCHEMA_VERSION}): use a newer flow")


def init_schema(url: str) -> dict:
    """Create or migrate the tables at `url` to SCHEMA_VERSION. Idempotent. Returns
    `{"from": version before (None: none), "to": SCHEMA_VERSION}`. SchemaTooNew for a newer
    layout; StorageError when the database cannot be reached."""
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                before = _version(conn)
                _refuse_newer(before)
                if before is None:
                    conn.execute("CREATE TABLE flow_schema (version integer NOT NULL, "
                                 "applied timestamptz NOT NULL DEFAULT clock_timestamp())")
                version = before or 0
                while version < SCHEMA_VERSION:
                    conn.execute(MIGRATIONS[version])
                    version += 1
                    conn.execute("INSERT INTO flow_schema (version) VALUES (%s)", (version,))
    except psycopg.Error as problem:
        raise StorageError(f"cannot initialise the Flow tables: {_reason(problem)}") from problem
    return {"from": before, "to": SCHEMA_VERSION}


def check_schema(conn: psycopg.Connection) -> None:
    """Refuse a database without the tables (not initialised) or with a newer layout."""
    version = _version(conn)
    if version is None or version == 0:
        raise StorageError("the database has no Flow tables: run `flow store init URL` first")
    _refuse_newer(version)
    if version < SCHEMA_VERSION:
        raise StorageError(f"the database's Flow tables are at version {version}, older than this "
                           f"flow's {SCHEMA_VERSION}: run `flow store init URL` to migrate them")


def delete_run(conn: psycopg.Connection, run_id: str) -> None:
    """Delete the run and every row of it, in one transaction (no foreign key cascades)."""
    with conn.transaction():
        for table in (*RUN_TABLES, "flow_runs"):
            conn.execute(f"DELETE FROM {table} WHERE run = %s", (run_id,))


def _reason(problem: BaseException) -> str:
    text = str(problem).strip().splitlines()
    return text[0] if text else type(problem).__name__
