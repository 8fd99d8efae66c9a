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
    changed = INSERT.rows_changed(conn, dict(i=i, flag=flag, name=name, blob=blob, tags=tags, items=items))
    assert changed == len(pairs)
    stored = conn.execute("SELECT i, flag, name, blob, tag, item FROM wire ORDER BY ctid").fetchall()
    assert stored == [(i, flag, name, blob, tag, item) for tag, item in pairs]
    assert INSERT.rows_changed(conn, dict(i=i, flag=flag, name=name, blob=blob, tags=None, items=None)) == 0


def test_an_error_is_psycopgs_and_the_connection_goes_on(conn):
    conn.execute("CREATE UNIQUE INDEX ON wire (i)")
    args = dict(i=7, flag=True, name="a", blob=b"b", tags=["t"], items=[b"x"])
    assert INSERT.rows_changed(conn, args) == 1
    with pytest.raises(psycopg.errors.UniqueViolation, match="duplicate key"):
        INSERT.rows_changed(conn, args)
    assert INSERT.rows_changed(conn, dict(args, i=8)) == 1
    assert conn.execute("SELECT count(*) FROM wire").fetchone() == (2,)


def test_each_connection_has_it_prepared_once(pg_url, conn):
    args = dict(i=1, flag=False, name="n", blob=None, tags=["t"], items=[b"x"])
    with psycopg.connect(pg_url, autocommit=True) as other:
        for connection in (conn, other, conn, other):
            assert INSERT.rows_changed(connection, args) == 1
        for connection in (conn, other):
            named = connection.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_wire_insert'")
            assert named.fetchone() == (1,)
    with psycopg.connect(pg_url, autocommit=True) as anew:  # a new connection, perhaps at a freed one's address
        assert INSERT.rows_changed(anew, args) == 1
    assert conn.execute("SELECT count(*) FROM wire").fetchone() == (5,)


class Interrupted(Exception):
    pass


def test_a_signal_interrupts_the_wait_and_closes_the_connection(conn):
    sleep = PreparedStatement("test_wire_sleep", "SELECT pg_sleep(%(seconds)b)", dict(seconds=INT8))

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            sleep.rows_changed(conn, {"seconds": 5})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert conn.closed  # its answer would come out of order: the connection is given up


def test_a_parameter_without_a_type_is_refused():
    with pytest.raises(ValueError, match="typed"):
        PreparedStatement("test_wire_bad", "SELECT %(a)b, %(b)s", dict(a=INT8))


def test_a_connection_the_server_cut_is_an_operational_error(pg_url, conn):
    args = dict(i=1, flag=False, name="n", blob=None, tags=["t"], items=[b"x"])
    assert INSERT.rows_changed(conn, args) == 1
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 10000)", (conn.pgconn.backend_pid,))  # gone when it returns
    with pytest.raises(psycopg.OperationalError):
        INSERT.rows_changed(conn, args)
    assert conn.closed
