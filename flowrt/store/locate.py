"""Which store a location names: a `postgresql://` (or `postgres://`) URL is a database store;
anything else is a runs directory on this machine's file system."""

from __future__ import annotations

import os

from flowrt.store.interface import Store

DATABASE_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(location: str) -> bool:
    return location.startswith(DATABASE_SCHEMES)


def open_store(location: str | os.PathLike | Store) -> Store:
    """The store at `location` (a `Store` is returned as it is)."""
    if isinstance(location, Store):
        return location
    location = os.fspath(location)
    if is_database_url(location):
        try:
            from flowrt.store.postgres import PostgresStore
        except ImportError as problem:
            raise ValueError(f"{location.split('://')[0]} stores need the PostgreSQL store: {problem}") from problem
        return PostgresStore.at(location)
    from flowrt.store.directory import DirectoryStore

    return DirectoryStore(location)
