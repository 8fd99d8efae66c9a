"""What a recorded call costs the PostgreSQL server, counted (never timed): one WAL flush per
call, because a synced append's commit covers the unsynced Reply before it, and `sync()` with
nothing left unsynced writes nothing. The flushes are counted on a cluster of this module's own
with fsync on (the session's has fsync off, which counts none)."""

from __future__ import annotations

import itertools
import subprocess
import time

import psycopg
import pytest

from flowrt.store.postgres import PostgresStore
from tests.pg_cluster import Cluster

START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {}, "modules": []}
_runs = itertools.count(1)


def call(i: int) -> dict:
    return {"call": f"c{i}", "tool": "t.echo", "fingerprint": "sha256:" + "cd" * 32, "arguments": {"n": i}}


def reply(i: int) -> dict:
    return {"call": f"c{i}", "outcome": {"Ok": i}}


def lease_until(url: str, run: str):
    """The lease's end: a sync() that must make something durable renews the lease (a synchronous
    commit of its own), and moves it."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT lease_until FROM flow_runs WHERE run = %s", (run,)).fetchone()[0]


def test_a_synced_append_makes_the_unsynced_reply_before_it_durable(pg_url):
    store = PostgresStore(pg_url, lease_seconds=600)  # no renewal touches the row during the test
    run = f"commits-{next(_runs)}"
    log = store.create(run, START)
    try:
        log.append("Call", call(1))
        log.append("Reply", reply(1), sync=False)
        assert not log.synced
        log.append("Call", call(2))
        assert log.synced  # the Call's synchronous commit flushed the log past the Reply's
        before = lease_until(pg_url, run)
        log.sync()
        assert lease_until(pg_url, run) == before  # nothing to make durable: no synchronous commit
        log.append("Reply", reply(2), sync=False)
        log.sync()  # this one has a Reply to make durable: a synchronous commit of its own
        assert log.synced and lease_until(pg_url, run) > before
    finally:
        log.close()
    reread = store.open(run, for_append=False)
    assert [f["kind"] for f in reread.facts()] == ["Start", "Call", "Reply", "Call", "Reply"]
    store.close()


def test_a_synced_append_carries_the_times_of_the_facts_before_it(pg_url):
    """The Call's own time, and the unsynced Reply's before it, are committed with the Call (one
    statement): another reader sees them without any sync() or close, and the host records'
    chain stays whole."""
    store = PostgresStore(pg_url, lease_seconds=600)
    run = f"times-{next(_runs)}"
    log = store.create(run, START)
    try:
        log.append("Call", call(1))
        log.append("Reply", reply(1), sync=False)
        log.append("Call", call(2))
        written = log.fact_times()
        seen = store.open(run, for_append=False)  # verifies the facts and the host records' chain
        assert [f["kind"] for f in seen.facts()] == ["Start", "Call", "Reply", "Call"]
        assert {n: seen.fact_times()[n] for n in (2, 3, 4)} == {n: written[n] for n in (2, 3, 4)}
        log.append("Reply", reply(2), sync=False)
        assert 5 not in store.open(run, for_append=False).fact_times()  # an unsynced fact's time waits
        log.sync()
        assert 5 in store.open(run, for_append=False).fact_times()
    finally:
        log.close()
    store.close()


@pytest.fixture(scope="module")
def flushing_cluster():
    try:
        cluster = Cluster(fsync=True)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as problem:
        pytest.fail(f"PostgreSQL could not be started for the test: {problem}", pytrace=False)
    yield cluster
    cluster.stop()


def wal_flushes(url: str) -> int:
    """The cluster's WAL flushes so far, once the backends' reports have settled: a backend
    reports its counters at most once a second, and at exit (so close the store first)."""
    def read() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0]

    last = read()
    for _ in range(20):  # bounded: 20 s at most
        time.sleep(1.0)
        now = read()
        if now == last:
            return now
        last = now
    return last


def test_a_recorded_call_costs_one_wal_flush(flushing_cluster):
    """The host's order for each call: the Call synced (durable before it is sent), a sync
    before waiting for the reply, the Reply unsynced (its consequence is inside the child)."""
    from flowrt.store.postgres_schema import init_schema

    url = flushing_cluster.url
    init_schema(url)
    store = PostgresStore(url, lease_seconds=600)
    log = store.create("flushes", START)
    calls = 200
    try:
        before = wal_flushes(url)
        for i in range(1, calls + 1):
            log.append("Call", call(i))
            log.sync()
            log.append("Reply", reply(i), sync=False)
    finally:
        log.close()
        store.close()
    flushes = wal_flushes(url) - before
    # One flush per Call, and a few more: the server's WAL writer flushes asynchronous commits
    # every wal_writer_delay, and closing the run commits synchronously. Two per call was the cost
    # before.
    assert calls <= flushes < calls * 1.25, f"{flushes} WAL flushes for {calls} recorded calls"
