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
        for _ in range(5):
            with store.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        # each connection is checked on its first way out only (never given back before then);
        # the pool, given each one back on this thread, had no cause to open a second
        assert len(checked) == len({id(conn) for conn in checked}) and len(checked) <= 1
        assert store.pool().get_stats().get("connections_num", 1) <= 1
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
