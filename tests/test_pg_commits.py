"""What a recorded call costs the PostgreSQL server, counted (never timed): one WAL flush per call, because
the Reply, written at once before the program sees it (history seed 003), commits without
waiting for the flush, and the Call's synchronous commit after it flushes the log past both;
`sync()` with nothing unflushed writes nothing but the times. The flushes are counted on a cluster of this module's own
with fsync on (the session's has fsync off, which counts none)."""

from __future__ import annotations

import itertools
import time

import psycopg
import pytest

from flowrt.store.postgres import PostgresStore
from tests.pg_cluster import started_cluster

START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {}, "modules": []}
_runs = itertools.count(1)


def call(i: int) -> dict:
    return {"call": f"c{i}", "tool": "t.echo", "fingerprint": "sha256:" + "cd" * 32, "arguments": {"n": i}}


def reply(i: int) -> dict:
    return {"call": f"c{i}", "outcome": {"Ok": i}}


def stored_kinds(url: str, run: str) -> list[str]:
    """The run's facts as another connection reads them: what is written, not what is held."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT convert_from(line, 'UTF8')::json->>'kind' FROM flow_facts "
                            "WHERE run = %s ORDER BY n", (run,)).fetchall()
    return [kind for (kind,) in rows]


def test_an_unsynced_reply_is_written_at_once_and_flushed_by_the_next_synchronous_commit(pg_url):
    """The Reply is in the database as soon as it is appended (another connection reads it), and
    the log is not yet flushed past it: `synced` is False until the next Call or sync()."""
    store = PostgresStore(pg_url, lease_seconds=600)
    run = f"commits-{next(_runs)}"
    log = store.create(run, START)
    try:
        log.append("Call", call(1))
        reply_fact = log.append("Reply", reply(1), sync=False)
        assert not log.synced and log.head == reply_fact["hash"] and log.facts()[-1] == reply_fact
        assert stored_kinds(pg_url, run) == ["Start", "Call", "Reply"]  # written, not yet flushed
        log.append("Call", call(2))
        assert log.synced and stored_kinds(pg_url, run) == ["Start", "Call", "Reply", "Call"]
        log.sync()  # nothing unflushed
        log.append("Reply", reply(2), sync=False)
        assert not log.synced and stored_kinds(pg_url, run) == ["Start", "Call", "Reply", "Call", "Reply"]
        log.sync()
        assert log.synced and stored_kinds(pg_url, run) == ["Start", "Call", "Reply", "Call", "Reply"]
    finally:
        log.close()
    reread = store.open(run, for_append=False)
    assert [f["kind"] for f in reread.facts()] == ["Start", "Call", "Reply", "Call", "Reply"]
    assert reread.facts() == log.facts()  # the same bytes, the same chain
    store.close()


def test_an_unsynced_value_by_reference_is_readable_and_written_with_its_fact(pg_url):
    store = PostgresStore(pg_url, lease_seconds=600)
    run = f"held-value-{next(_runs)}"
    log = store.create(run, START)
    big = {"Ok": "x" * 5000}
    try:
        log.append("Call", call(1))
        held = log.append("Reply", {"call": "c1", "outcome": big}, sync=False)
        assert "outcome_ref" in held and log.value(held, "outcome") == big
        log.append("End", {"outcome": {"Completed": 1}})
    finally:
        log.close()
    reread = store.open(run, for_append=False)
    reread.verify_files()
    assert reread.value(3, "outcome") == big
    store.close()


def test_an_unsynced_reply_is_fenced(pg_url):
    """A lease lost before the Reply is appended: its statement inserts nothing, raises "lease
    lost", and the RunLog forgets it (it is no fact of the run); the host writes nothing more."""
    from flowrt.store import StorageError

    store = PostgresStore(pg_url, lease_seconds=600)
    run = f"fenced-{next(_runs)}"
    log = store.create(run, START)
    log.append("Call", call(1))
    with psycopg.connect(pg_url, autocommit=True) as conn:  # another host takes the run over
        conn.execute("UPDATE flow_runs SET epoch = epoch + 1, owner = 'other' WHERE run = %s", (run,))
    with pytest.raises(StorageError, match="lease lost"):
        log.append("Reply", reply(1), sync=False)
    with pytest.raises(StorageError, match="lease lost"):
        log.append("Call", call(2))
    assert [f["kind"] for f in log.facts()] == ["Start", "Call"] and log.synced
    assert stored_kinds(pg_url, run) == ["Start", "Call"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT last_n FROM flow_runs WHERE run = %s", (run,)).fetchone()[0] == 2
    log.close()
    store.close()


def test_a_failed_unsynced_write_leaves_the_record_as_it_was(pg_url):
    """The database refuses the Reply's statement: nothing of it is written, the Reply is
    forgotten, and the run goes on from the facts before."""
    from flowrt.store import StorageError

    store = PostgresStore(pg_url, lease_seconds=600)
    run = f"refused-{next(_runs)}"
    log = store.create(run, START)
    try:
        log.append("Call", call(1))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE flow_facts ADD CONSTRAINT no_third CHECK (n <> 3) NOT VALID")
        try:
            with pytest.raises(StorageError, match="cannot append"):
                log.append("Reply", reply(1), sync=False)
        finally:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("ALTER TABLE flow_facts DROP CONSTRAINT no_third")
        assert [f["kind"] for f in log.facts()] == ["Start", "Call"] and 3 not in log.fact_times()
        log.append("Reply", reply(1))
    finally:
        log.close()
    assert [f["kind"] for f in store.open(run, for_append=False).facts()] == ["Start", "Call", "Reply"]
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
    yield from started_cluster(fsync=True)


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


def commits(url: str) -> int:
    """The database's committed transactions so far, settled as `wal_flushes` settles (this
    function's own reads are commits too: at most 21)."""
    def read() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                                ).fetchone()[0]

    last = read()
    for _ in range(20):
        time.sleep(1.0)
        now = read()
        if now - last <= 1:  # only the read before this one
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
        committed = commits(url)
        for i in range(1, calls + 1):
            log.append("Call", call(i))
            log.sync()
            log.append("Reply", reply(i), sync=False)
    finally:
        log.close()
        store.close()
    flushes = wal_flushes(url) - before
    # Two commits per call, the Reply's and the Call's, and a few of the server's own (this
    # test's reads, autovacuum): the host's sync before it waits finds nothing unflushed after
    # the Call's synchronous commit, so it commits nothing (it was a third commit once).
    committed = commits(url) - committed
    assert 2 * calls <= committed < calls * 2.5, f"{committed} commits for {calls} recorded calls"
    # One flush per Call, and a few more: the server's WAL writer flushes asynchronous commits
    # every wal_writer_delay, and closing the run commits synchronously. Two per call was the cost
    # once (a synced append that did not mark the run flushed).
    assert calls <= flushes < calls * 1.25, f"{flushes} WAL flushes for {calls} recorded calls"
