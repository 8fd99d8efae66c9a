"""The store implementations the contract suite (tests/test_store_contract.py) runs against.

A backend gives the suite a `Store` and the means to damage a run's record the way its medium
can be damaged (a byte changed on disk, a row changed in a database), since damage is what no
method of the interface can do. To run the suite against another implementation, write a class
with the same methods and add it to BACKENDS. Each is made with the test's `tmp_path` and its
pytest `request` (for fixtures such as tests/pg_cluster.py's `pg_url`: a PostgreSQL that cannot
start fails the tests, never skips them)."""

from __future__ import annotations

import os

import orjson

from flowrt.store import DirectoryStore, Store, canonical_bytes, fact_hash


class DirectoryBackend:
    """The run directory: one directory per run under a temporary root."""

    name = "directory"

    def __init__(self, tmp_path, request=None) -> None:
        self.root = str(tmp_path / "runs")
        self.store: Store = DirectoryStore(self.root)

    def close(self) -> None:
        pass

    # -- damage -------------------------------------------------------------------------------

    def _path(self, run_id: str, *parts: str) -> str:
        return os.path.join(self.root, run_id, *parts)

    def _lines(self, run_id: str) -> list[bytes]:
        with open(self._path(run_id, "history.jsonl"), "rb") as handle:
            return handle.read().rstrip(b"\0").split(b"\n")[:-1]

    def _rewrite(self, run_id: str, lines: list[bytes]) -> None:
        with open(self._path(run_id, "history.jsonl"), "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))

    def _index(self, lines: list[bytes], n: int) -> int:
        return next(i for i, line in enumerate(lines) if orjson.loads(line)["n"] == n)

    def alter_fact(self, run_id: str, n: int, field: str, value) -> None:
        """Change one field of fact `n` and keep its hash: content that no longer matches it."""
        lines = self._lines(run_id)
        index = self._index(lines, n)
        fact = orjson.loads(lines[index])
        fact[field] = value
        lines[index] = canonical_bytes(fact)
        self._rewrite(run_id, lines)

    def break_chain(self, run_id: str, n: int) -> None:
        """Give fact `n` another `prev`, its hash recomputed: a fact that is whole in itself but
        does not follow the one before it."""
        lines = self._lines(run_id)
        index = self._index(lines, n)
        fact = orjson.loads(lines[index])
        del fact["hash"]
        fact["prev"] = "sha256:" + "0" * 64
        fact["hash"] = fact_hash(fact)
        lines[index] = canonical_bytes(fact)
        self._rewrite(run_id, lines)

    def damage_value(self, run_id: str, ref: str) -> None:
        path = self._path(run_id, "values", ref[len("sha256:"):])
        with open(path, "rb") as handle:
            data = bytearray(handle.read())
        data[len(data) // 2] ^= 1
        with open(path, "wb") as handle:
            handle.write(bytes(data))

    def lose_value(self, run_id: str, ref: str) -> None:
        os.unlink(self._path(run_id, "values", ref[len("sha256:"):]))

    def damage_source(self, run_id: str, ref: str) -> None:
        with open(self._path(run_id, "sources", ref[len("sha256:"):]), "wb") as handle:
            handle.write(b"tampered")

    def damage_host_record(self, run_id: str, index: int) -> None:
        """Change a field of host record `index` (0 is the first) and keep its hash."""
        path = self._path(run_id, "host.jsonl")
        with open(path, "rb") as handle:
            lines = handle.read().split(b"\n")[:-1]
        record = orjson.loads(lines[index])
        record["kind"] = record["kind"] + "-altered"
        lines[index] = canonical_bytes(record)
        with open(path, "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))

    def interrupt_append(self, run_id: str) -> bool:
        """Leave what an append interrupted by a crash can leave (here: part of a line after the
        last fact). False for a store where an interrupted append leaves nothing."""
        with open(self._path(run_id, "history.jsonl"), "ab") as handle:
            handle.write(b'{"call":"root#9","kind":"Ca')
        return True


class PostgresBackend:
    """The PostgreSQL store, in a fresh schema of the session's cluster; damage is done to rows."""

    name = "postgres"

    def __init__(self, tmp_path, request) -> None:
        from flowrt.store.postgres import PostgresStore

        self.url = request.getfixturevalue("pg_url")
        self.store = PostgresStore(self.url)

    def close(self) -> None:
        self.store.close()

    def _sql(self, query: str, args: tuple):
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(query, args)
            assert cur.rowcount >= 1, (query, args)
            return cur.fetchall() if cur.description else None

    def _fact(self, run_id: str, n: int) -> dict:
        (line,) = self._sql("SELECT line FROM flow_facts WHERE run = %s AND n = %s", (run_id, n))[0]
        return orjson.loads(bytes(line))

    def _put_fact(self, run_id: str, n: int, fact: dict) -> None:
        self._sql("UPDATE flow_facts SET line = %s WHERE run = %s AND n = %s", (canonical_bytes(fact), run_id, n))

    def alter_fact(self, run_id: str, n: int, field: str, value) -> None:
        fact = self._fact(run_id, n)
        fact[field] = value
        self._put_fact(run_id, n, fact)

    def break_chain(self, run_id: str, n: int) -> None:
        fact = self._fact(run_id, n)
        del fact["hash"]
        fact["prev"] = "sha256:" + "0" * 64
        fact["hash"] = fact_hash(fact)
        self._put_fact(run_id, n, fact)

    def damage_value(self, run_id: str, ref: str) -> None:
        self._sql("UPDATE flow_values SET data = overlay(data placing '\\x00'::bytea from 2 for 1) "
                  "WHERE run = %s AND hex = %s", (run_id, ref[len("sha256:"):]))

    def lose_value(self, run_id: str, ref: str) -> None:
        self._sql("DELETE FROM flow_values WHERE run = %s AND hex = %s", (run_id, ref[len("sha256:"):]))

    def damage_source(self, run_id: str, ref: str) -> None:
        self._sql("UPDATE flow_sources SET data = 'tampered' WHERE run = %s AND hex = %s",
                  (run_id, ref[len("sha256:"):]))

    def damage_host_record(self, run_id: str, index: int) -> None:
        (line,) = self._sql("SELECT line FROM flow_host WHERE run = %s AND i = %s", (run_id, index + 1))[0]
        record = orjson.loads(bytes(line))
        record["kind"] = record["kind"] + "-altered"
        self._sql("UPDATE flow_host SET line = %s WHERE run = %s AND i = %s",
                  (canonical_bytes(record), run_id, index + 1))

    def interrupt_append(self, run_id: str) -> bool:
        return False  # a commit is whole or absent: an interrupted append leaves nothing


BACKENDS = {"directory": DirectoryBackend, "postgres": PostgresBackend}
