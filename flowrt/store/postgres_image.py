"""A run of the PostgreSQL store as a `RunImage` and back (`flow export`): the rows' bytes,
which are the run directory's lines and files, so a copy keeps every hash."""

from __future__ import annotations

import orjson
import psycopg

from flowrt.store.chain import _sha256_hex
from flowrt.store.errors import RunExists, StorageError
from flowrt.store.interface import RunImage
from flowrt.store.postgres_read import run_snapshot
from flowrt.store.postgres_schema import delete_run


def read_database_image(store, run_id: str) -> RunImage:
    """Run `run_id` as bytes, read in one snapshot and verified from it (facts, host records,
    values present and matching their hashes, the sources Start names)."""
    from flowrt.store.postgres import PostgresRunLog, _failed

    store._check_run_id(run_id)
    try:
        with run_snapshot(store, run_id) as (conn, run):

            def rows(query: str) -> list:
                return [tuple(bytes(c) if isinstance(c, memoryview) else c for c in row)
                        for row in conn.execute(query, (run_id,))]

            facts = rows("SELECT n, line FROM flow_facts WHERE run = %s ORDER BY n")
            archived = rows("SELECT n, line FROM flow_archived_facts WHERE run = %s ORDER BY n")
            host = rows("SELECT i, line FROM flow_host WHERE run = %s ORDER BY i")
            values = dict(rows("SELECT hex, data FROM flow_values WHERE run = %s ORDER BY hex"))
            sources = dict(rows("SELECT hex, data FROM flow_sources WHERE run = %s ORDER BY hex"))
    except psycopg.Error as problem:
        raise _failed(problem, "cannot read the run") from problem
    log = PostgresRunLog(store, run_id, for_append=False, durability="fsync", inline_limit=None)
    log._verify(run, facts, host, set(values), None)
    for hex_, users in sorted(log._refs.items()):
        if any(user not in log._holes for user in users) and _sha256_hex(values[hex_]) != hex_:
            raise StorageError("the value does not match its hash", min(users)[0], component=f"flow_values/{hex_}")
    for hex_, data in sources.items():
        if _sha256_hex(data) != hex_:
            raise StorageError("the source does not match its hash", component=f"flow_sources/{hex_}")
    for module in log._facts[0].get("modules") or () if log._facts[0]["n"] == 1 else ():
        hash_ = module.get("hash") if isinstance(module, dict) else None
        if not isinstance(hash_, str) or hash_[len("sha256:"):] not in sources:
            raise StorageError("a module source Start names is missing", 1, component="flow_sources")
    return RunImage([line for _, line in facts], [line for _, line in archived], run[2] and bytes(run[2]),
                    [line for _, line in host], values, sources)


def write_database_image(store, run_id: str, image: RunImage) -> None:
    """Store `image` as run `run_id` in one transaction (durable at commit), with no lease held,
    then verify it by opening it; a copy that does not verify is deleted."""
    from flowrt.store.postgres import _failed

    store._check_run_id(run_id)
    if not image.facts:
        raise ValueError("an image without facts")
    try:
        last = orjson.loads(image.facts[-1])
        numbers = [orjson.loads(line)["n"] for line in image.facts]
        archived_numbers = [orjson.loads(line)["n"] for line in image.archived]
    except (orjson.JSONDecodeError, KeyError, TypeError) as problem:
        raise StorageError(f"the image's facts are not facts: {problem}") from None
    try:
        with store.connection() as conn:
            with conn.transaction():
                made = conn.execute(
                    # Any run but an ended one is looked at once by a worker (postgres_queue).
                    "INSERT INTO flow_runs (run, last_n, head, anchor, ready_at) VALUES (%s, %s, %s, %s, "
                    "CASE WHEN %s THEN NULL ELSE '-infinity'::timestamptz END) "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    (run_id, last["n"], last["hash"], image.anchor, last["kind"] == "End")).fetchone()
                if made is None:
                    raise RunExists(f"run {run_id} already exists in {store}")
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO flow_facts (run, n, line) VALUES (%s, %s, %s)",
                                    [(run_id, n, line) for n, line in zip(numbers, image.facts)])
                    cur.executemany("INSERT INTO flow_archived_facts (run, n, line) VALUES (%s, %s, %s)",
                                    [(run_id, n, line) for n, line in zip(archived_numbers, image.archived)])
                    cur.executemany("INSERT INTO flow_host (run, i, line) VALUES (%s, %s, %s)",
                                    [(run_id, i, line) for i, line in enumerate(image.host, 1)])
                    cur.executemany("INSERT INTO flow_values (run, hex, data) VALUES (%s, %s, %s)",
                                    [(run_id, h, d) for h, d in image.values.items()])
                    cur.executemany("INSERT INTO flow_sources (run, hex, data) VALUES (%s, %s, %s)",
                                    [(run_id, h, d) for h, d in image.sources.items()])
    except psycopg.Error as problem:
        raise _failed(problem, "cannot write the run") from problem
    try:
        with store.open(run_id, for_append=False) as run:
            run.verify_files()
    except BaseException:
        try:
            with store.connection() as conn:
                delete_run(conn, run_id)
        except (StorageError, psycopg.Error):
            pass
        raise
