"""A real PostgreSQL for the tests: a throwaway cluster in a temporary directory, listening only
on a Unix socket there (`listen_addresses=''`), started once per test session.

`Cluster` is also what scripts/bench/pg_calls.py starts. The fixtures:

- `pg_cluster`: the session's cluster (its `url` names its database `flow`);
- `pg_url`: a fresh schema of that database, its URL selecting it (`search_path`), so that every
  test gets empty tables without the cost of a database per test.

When the cluster cannot start, the tests that need it fail with the reason: never a skip, so a
machine without PostgreSQL cannot pass them by accident."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest

START_SECONDS = 60  # pg_ctl's own bound on waiting for the server


def _bindir() -> str:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        raise RuntimeError("pg_config is not on PATH: PostgreSQL (server) is not installed")
    out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
    bindir = out.stdout.strip()
    if out.returncode != 0 or not os.path.isfile(os.path.join(bindir, "initdb")):
        raise RuntimeError(f"pg_config --bindir gave {bindir!r}, which holds no initdb")
    return bindir


class Cluster:
    """initdb + pg_ctl start in `tempfile.mkdtemp()`, as the `postgres` user when run as root
    (the server refuses to run as root). `stop()` stops it and removes the directory."""

    def __init__(self, *, fsync: bool = False, database: str = "flow") -> None:
        self.bindir = _bindir()
        self.dir = tempfile.mkdtemp(prefix="flow-pg-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.started = False
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise RuntimeError("running as root without runuser: cannot start PostgreSQL as postgres")
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = [runuser, "-u", "postgres", "--"]
        try:
            self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                      "--locale=C", "--no-sync")
            # Durability off by default: the tests check logic, not the disk, on a shared machine;
            # the benchmark starts its cluster with fsync on.
            options = f"-c listen_addresses='' -k {self.dir} -c fsync={'on' if fsync else 'off'}" \
                      " -c max_connections=200"
            self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w",
                      "-t", str(START_SECONDS), "start", timeout=START_SECONDS + 30)
            self.started = True
            self._run("createdb", "-h", self.dir, "-U", "postgres", database)
        except BaseException:
            self.stop()
            raise
        self.url = self.url_for(database)

    def url_for(self, database: str, schema: str | None = None) -> str:
        query = {"host": self.dir, "user": "postgres"}
        if schema is not None:
            query["options"] = f"-csearch_path={schema}"
        return f"postgresql:///{database}?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)

    def _run(self, program: str, *args: str, timeout: float = 120) -> None:
        command = self.as_user + [os.path.join(self.bindir, program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            log = ""
            if os.path.exists(self.log):
                with open(self.log, errors="replace") as handle:
                    log = handle.read()[-2000:]
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()[-2000:]}\n{log}")

    def stop_server(self) -> None:
        """Stop the server now (fast shutdown: connections are cut), keeping its data."""
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "60", "stop")

    def start_server(self) -> None:
        options = f"-c listen_addresses='' -k {self.dir} -c fsync=off"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", str(START_SECONDS),
                  "start", timeout=START_SECONDS + 30)

    def stop(self) -> None:
        if self.started:
            try:
                self.stop_server()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)


_schemas = itertools.count(1)


def started_cluster(**options):
    """A cluster for as long as the generator runs (a fixture's body: `yield from`); one that
    cannot start fails the test, never skips it."""
    try:
        cluster = Cluster(**options)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as problem:
        pytest.fail(f"PostgreSQL could not be started for the tests: {problem}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def pg_cluster():
    yield from started_cluster()


@pytest.fixture
def own_cluster():
    """A cluster of the test's own, for a test that stops it (the session's serves the rest)."""
    yield from started_cluster()


@pytest.fixture
def pg_url(pg_cluster):
    """The URL of a new, empty schema, its tables made by `flow store init`'s code."""
    import psycopg

    schema = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = pg_cluster.url_for("flow", schema)
    from flowrt.store.postgres_schema import init_schema

    init_schema(url)
    return url


def tables_at(cluster: Cluster, schema: str, version: int) -> str:
    """The URL of a fresh `schema` whose tables are as `flow store init` of layout `version`
    made them (the migrations up to it, each recorded), for a test of what a later one does."""
    import psycopg

    from flowrt.store.postgres_schema import MIGRATIONS

    url = cluster.url_for("flow", schema)
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE flow_schema (version integer NOT NULL, "
                     "applied timestamptz NOT NULL DEFAULT clock_timestamp())")
        for step in range(version):
            conn.execute(MIGRATIONS[step])
            conn.execute("INSERT INTO flow_schema (version) VALUES (%s)", (step + 1,))
    return url
