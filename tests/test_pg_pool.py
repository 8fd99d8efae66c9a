"""The PostgreSQL store's pool (flowrt/store/postgres_pool.py): a connection given back a moment
ago is handed out without a round trip to check it; one idle longer is checked, and a broken one
is replaced rather than handed out."""

from __future__ import annotations

import psycopg_pool

from flowrt.store import postgres_pool
from flowrt.store.postgres import PostgresStore


def counting_checks(monkeypatch) -> list:
    checked = []
    real = psycopg_pool.ConnectionPool.check_connection

    def check(conn):
        checked.append(conn)
        real(conn)

    monkeypatch.setattr(psycopg_pool.ConnectionPool, "check_connection", staticmethod(check))
    return checked


def test_a_connection_given_back_a_moment_ago_is_not_checked_again(pg_url, monkeypatch):
    checked = counting_checks(monkeypatch)
    store = PostgresStore(pg_url)
    try:
        for _ in range(50):
            with store.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        # Given back on this thread, each connection is in the pool again before the next is
        # asked for: the pool never had cause to open a second (a `reset` hook gave them back on
        # a worker thread, and a quick `getconn` then found the pool empty and grew it), and the
        # one it has was checked once, on its first way out.
        assert store.pool().get_stats()["pool_size"] == 1
        assert len(checked) <= 1
        monkeypatch.setattr(postgres_pool, "CHECK_AFTER_IDLE", 0.0)
        for _ in range(3):
            with store.connection() as conn:
                conn.execute("SELECT 1")
        assert len(checked) >= 3
    finally:
        store.close()


def test_a_connection_broken_while_idle_is_replaced_when_checked(pg_url, monkeypatch):
    monkeypatch.setattr(postgres_pool, "CHECK_AFTER_IDLE", 0.0)
    store = PostgresStore(pg_url)
    try:
        with store.connection() as conn:
            backend = conn.info.backend_pid
        with store.connection() as other:  # the same one, given back: end its backend under it
            assert other.info.backend_pid == backend
        import psycopg

        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        with store.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,) and conn.info.backend_pid != backend
    finally:
        store.close()
