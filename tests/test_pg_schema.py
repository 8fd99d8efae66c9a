"""The PostgreSQL store's tables from version 2 on: version 3 has no foreign keys to flow_runs
(they cost every inserted row a query and a row lock), so the store deletes a run's rows itself.
The migration from version 2 keeps every run, and a run written under version 2 goes on under 3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from flowrt.store import StorageError
from flowrt.store.postgres import PostgresStore
from tests.pg_cluster import tables_at
from flowrt.store.postgres_schema import RUN_TABLES, SCHEMA_VERSION, delete_run

ROOT = Path(__file__).resolve().parents[1]
ORDERS = ROOT / "examples" / "orders"
ORDER = json.dumps({"order": {"id": "o-1", "item": "kettle", "quantity": 1, "cents": 2599}})
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {"doc": "x" * 3000}, "modules": []}


def flow(*args: str, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=180)


def rows(url: str, query: str, args: tuple = ()) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def foreign_keys(url: str) -> list:
    return rows(url, "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                     "AND connamespace = current_schema()::regnamespace ORDER BY 1")


def test_fresh_tables_have_no_foreign_keys(pg_url):
    assert SCHEMA_VERSION == 3
    assert rows(pg_url, "SELECT version FROM flow_schema ORDER BY version") == [(1,), (2,), (3,)]
    assert foreign_keys(pg_url) == []


def test_version_2_tables_migrate_keeping_their_runs_which_go_on(pg_cluster, tmp_path):
    url = tables_at(pg_cluster, "migrate_v2", 2)
    assert foreign_keys(url) == sorted([(t,) for t in RUN_TABLES])
    # A version-2 flow's run, written by this code into version-2 tables (the rows are the
    # same; only the constraints differ), and then the tables migrated under it.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO flow_schema (version) VALUES (3)")  # let this code write once
    store = PostgresStore(url)
    log = store.create("old", START, sources=["module text"])
    log.append("Call", {"call": "root#1", "tool": "t", "arguments": {"big": "y" * 2000}})
    log.close()
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM flow_schema WHERE version = 3")
    refused = flow("runs", "--store", url, cwd=tmp_path)
    assert refused.returncode == 5 and "flow store init" in refused.stderr
    done = flow("store", "init", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert rows(url, "SELECT version FROM flow_schema ORDER BY version") == [(1,), (2,), (3,)]
    assert foreign_keys(url) == []
    again = PostgresStore(url)
    try:
        log = again.open("old", for_append=True)
        log.verify_files()
        log.append("Reply", {"call": "root#1", "outcome": {"Ok": "z" * 2000}})
        log.close()
        assert [f["kind"] for f in again.open("old", for_append=False).facts()] == ["Start", "Call", "Reply"]
    finally:
        again.close()
    ran = flow("run", "--store", url, str(ORDERS / "main.flow"), "--allow", "--input", ORDER, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


def test_an_image_that_does_not_verify_leaves_no_row_behind(pg_url):
    """write_image's clean-up, with no cascade to do it: every table of the run is emptied."""
    store = PostgresStore(pg_url)
    try:
        log = store.create("good", START, sources=["module text"], inline_limit=16)
        log.append("Call", {"call": "root#1", "tool": "t", "arguments": {"big": "y" * 2000}})
        log.host_record({"kind": "halted", "head": log.head})
        log.close()
        image = store.read_image("good")
        assert image.values and image.sources and image.host
        hex_ = next(iter(image.values))
        image.values[hex_] = image.values[hex_] + b" "  # no longer the value its hash names
        with pytest.raises(StorageError):
            store.write_image("bad", image)
        for table in (*RUN_TABLES, "flow_runs"):
            assert rows(pg_url, f"SELECT count(*) FROM {table} WHERE run = 'bad'") == [(0,)], table
        assert rows(pg_url, "SELECT count(*) FROM flow_facts WHERE run = 'good'") == [(2,)]
    finally:
        store.close()


def test_delete_run_deletes_every_row_of_that_run_only(pg_url):
    store = PostgresStore(pg_url)
    try:
        for run in ("a", "b"):
            log = store.create(run, START, sources=["module text"], inline_limit=16)
            log.append("Call", {"call": "root#1", "tool": "t", "arguments": {"big": "y" * 2000}})
            log.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("INSERT INTO flow_archived_facts (run, n, line) VALUES ('a', 0, 'x')")
            delete_run(conn, "a")
        for table in (*RUN_TABLES, "flow_runs"):
            counts = dict(rows(pg_url, f"SELECT run, count(*) FROM {table} GROUP BY run"))
            assert "a" not in counts, table
            assert table == "flow_archived_facts" or counts.get("b", 0) > 0, table
    finally:
        store.close()
