"""flowrt/store/postgres_wire.py: the hot statement over libpq directly. Its own binary encoding
of the parameters must give the server what psycopg would (any bytes, text, integer of int8,
NULL), its errors must be psycopg's, and a signal must interrupt its wait."""

from __future__ import annotations

import signal

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrt.store.postgres_wire import BOOL, BYTEA, BYTEA_ARRAY, INT8, TEXT, TEXT_ARRAY, PreparedStatement

INSERT = PreparedStatement("test_wire_insert", (
    "INSERT INTO wire (i, flag, name, blob, tag, item) SELECT %(i)b, %(flag)b, %(name)b, %(blob)b, t.tag, t.item "
    "FROM unnest(%(tags)b::text[], %(items)b::bytea[]) AS t(tag, item)"),
    dict(i=INT8, flag=BOOL, name=TEXT, blob=BYTEA, tags=TEXT_ARRAY, items=BYTEA_ARRAY))

TABLE = "CREATE TABLE wire (i bigint, flag boolean, name text, blob bytea, tag text, item bytea)"


@pytest.fixture
def conn(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as connection:
        connection.execute(TABLE)
        yield connection


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(i=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1), flag=st.none() | st.booleans(),
       name=st.none() | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
       blob=st.none() | st.binary(max_size=300),
       pairs=st.lists(st.tuples(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                        max_size=20), st.binary(max_size=50)), max_size=6))
def test_any_parameters_reach_the_server_as_psycopg_would_send_them(conn, i, flag, name, blob, pairs):
    conn.execute("TRUNCATE wire")
    tags, items = [tag for tag, _ in pairs], [item for _, item in pairs]
    changed = INSERT.rows_changed(conn, dict(i=i, flag=flag, name=name, blob=blob, tags=tags, items=items), 30)
    assert changed == len(pairs)
    stored = conn.execute("SELECT i, flag, name, blob, tag, item FROM wire ORDER BY ctid").fetchall()
    assert stored == [(i, flag, name, blob, tag, item) for tag, item in pairs]
    assert INSERT.rows_changed(conn, dict(i=i, flag=flag, name=name, blob=blob, tags=None, items=None), 30) == 0


def test_an_error_is_psycopgs_and_the_connection_goes_on(conn):
    conn.execute("CREATE UNIQUE INDEX ON wire (i)")
    args = dict(i=7, flag=True, name="a", blob=b"b", tags=["t"], items=[b"x"])
    assert INSERT.rows_changed(conn, args, 30) == 1
    with pytest.raises(psycopg.errors.UniqueViolation, match="duplicate key"):
        INSERT.rows_changed(conn, args, 30)
    assert INSERT.rows_changed(conn, dict(args, i=8), 30) == 1
    assert conn.execute("SELECT count(*) FROM wire").fetchone() == (2,)


def test_each_connection_has_it_prepared_once(pg_url, conn):
    args = dict(i=1, flag=False, name="n", blob=None, tags=["t"], items=[b"x"])
    with psycopg.connect(pg_url, autocommit=True) as other:
        for connection in (conn, other, conn, other):
            assert INSERT.rows_changed(connection, args, 30) == 1
        for connection in (conn, other):
            named = connection.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_wire_insert'")
            assert named.fetchone() == (1,)
    with psycopg.connect(pg_url, autocommit=True) as anew:  # a new connection, perhaps at a freed one's address
        assert INSERT.rows_changed(anew, args, 30) == 1
    assert conn.execute("SELECT count(*) FROM wire").fetchone() == (5,)


class Interrupted(Exception):
    pass


def interrupted_by_a_signal(work) -> Interrupted:
    """Run `work()`, interrupted by a signal 0.3 s in; the interruption it raised."""
    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted) as raised:
            work()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return raised.value


def interrupted(statement: PreparedStatement, conn, seconds: int) -> Interrupted:
    return interrupted_by_a_signal(lambda: statement.rows_changed(conn, {"seconds": seconds}, 30))


SLEEP = PreparedStatement("test_wire_sleep", "SELECT pg_sleep(%(seconds)b)", dict(seconds=INT8))


def test_a_server_that_does_not_answer_in_time_fails_the_statement_and_the_connection(conn):
    with pytest.raises(psycopg.OperationalError, match="did not answer within"):
        SLEEP.rows_changed(conn, {"seconds": 3}, 0.3)
    assert conn.closed


def test_a_signal_interrupts_the_wait_and_the_connection_goes_on(conn):
    """As psycopg's own wait: the interrupt reaches the caller, the answer is read after it."""
    assert interrupted(SLEEP, conn, 1).rows_changed == 1  # what the statement did: its one row
    args = dict(i=1, flag=True, name="after", blob=None, tags=["t"], items=[b"x"])
    assert INSERT.rows_changed(conn, args, 30) == 1


def test_an_interrupted_statement_that_does_not_end_costs_the_connection(conn, monkeypatch):
    from flowrt.store import postgres_wire

    monkeypatch.setattr(postgres_wire, "DRAIN_SECONDS", 0.5)
    assert interrupted(SLEEP, conn, 10).rows_changed is None  # not known
    assert conn.closed  # its answer would come out of order: the connection is given up


def test_a_parameter_without_a_type_is_refused():
    with pytest.raises(ValueError, match="typed"):
        PreparedStatement("test_wire_bad", "SELECT %(a)b, %(b)s", dict(a=INT8))


def test_a_connection_the_server_cut_is_an_operational_error(pg_url, conn):
    args = dict(i=1, flag=False, name="n", blob=None, tags=["t"], items=[b"x"])
    assert INSERT.rows_changed(conn, args, 30) == 1
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 10000)", (conn.pgconn.backend_pid,))  # gone when it returns
    with pytest.raises(psycopg.OperationalError):
        INSERT.rows_changed(conn, args, 30)
    assert conn.closed


def test_an_append_interrupted_in_its_wait_is_known_written_and_the_log_goes_on(pg_url):
    """The run's row locked elsewhere holds the append in its wait; the signal comes; the lock
    goes; the answer read after the interruption tells the log that the facts (and the times
    record) are in the database, so the next host record takes the next number."""
    import threading

    from flowrt.store.postgres import PostgresStore

    start = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
             "input": {}, "modules": []}
    store = PostgresStore(pg_url)
    try:
        log = store.create("r", start)
        blocker = psycopg.connect(pg_url)
        blocker.execute("SELECT 1 FROM flow_runs WHERE run = 'r' FOR UPDATE")
        unlock = threading.Timer(0.8, blocker.commit)
        unlock.start()
        interruption = interrupted_by_a_signal(
            lambda: log.append("Call", {"call": "root#1", "tool": "t", "arguments": {}}))
        unlock.join(30)
        blocker.close()
        assert interruption.rows_changed == 1
        assert [f["kind"] for f in log.facts()] == ["Start", "Call"]
        log.host_record({"kind": "halted", "head": log.head})
        log.close()
        again = store.open("r", for_append=False)
        again.verify_files()
        assert [f["kind"] for f in again.facts()] == ["Start", "Call"]
        assert [r["kind"] for r in again.host_records()] == ["halted"]
        with psycopg.connect(pg_url) as reader:  # the Call's times record, then the halt
            numbered = reader.execute("SELECT i, convert_from(line, 'UTF8')::jsonb ->> 'kind' FROM flow_host "
                                      "WHERE run = 'r' ORDER BY i").fetchall()
        assert numbered == [(1, "times"), (2, "halted")]
    finally:
        store.close()
