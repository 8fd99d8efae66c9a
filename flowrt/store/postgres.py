"""The PostgreSQL store: the store interface (`flowrt.store.interface`) on a database many hosts
share (psycopg 3, connections from a psycopg_pool pool).

A run is a row of `flow_runs` and its facts are rows of `flow_facts` keyed (run, n), each holding
the same canonical line as the run directory's history.jsonl, so hashes, verification and every
result are the run directory's (`chain`, `reading` and `host_records` check the bytes for both).
Values and sources are rows by hash; host records are rows chained as host.jsonl's lines are.
The tables are postgres_schema's (docs/trace.md, section 14).

Writing: each append (or `append_many`) is one statement, so one transaction: it moves the
run's head only if this appender's lease still holds (`postgres_lease.FENCE`), and inserts the
facts, their values and the `times` of the facts not yet timed only if it did, all or nothing,
durable at commit (`synchronous_commit` on), sent over libpq directly (postgres_wire). A fact appended with `sync=False` (a Reply) is
written at once, in its own statement, and committed without waiting for the flush: it is in the
database (other readers see it, and it outlives the host) before the program sees it, as the
history seed orders, and the next synchronous commit (the next Call's, or `sync()`'s) flushes the
log past it: a recorded call is two statements and one WAL flush. Only the lease holder appends:
opening for appending takes the lease (RunBusy while another holds it), a thread renews it, and
an append after it was lost inserts nothing (held facts included) and raises
StorageError("lease lost"). A database that goes away makes every call a StorageError.

Reading: `open` reads the run in one snapshot (postgres_read: its fact rows a page at a time, as
they are verified, and with `defer` the rest after the open) and verifies it as the run
directory's open does (chain, hashes, canonical form, host records' chain, values present or
holes); the row's head must be the last fact's (a lost fact is damage). Commits are atomic, so
there is never a torn tail: every unreadable row is damage.

Over 800 lines, on purpose: `PostgresRunLog` keeps one run's state (the verified facts, the lease
and its renewer, the held connection, facts written and not yet flushed, the host records'
chain, a deferred verification under way), and what is here is the code that reads and changes
that state together: an append that fails forgets what it wrote, a lost lease fences every write
after it, a deferred open ends in the same state an eager one starts in. What needs none of it
is in the other modules: reading rows `postgres_read`, verifying them `postgres_verify`, the
lease `postgres_lease`, the wire `postgres_wire`, archive `postgres_archive`, shelved rows
`postgres_shelf`, images `postgres_image`, discovery `postgres_scan`."""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any, Iterable, Sequence

import psycopg
import psycopg_pool

from flowrt.store import postgres_lease as leases
from flowrt.store.canonical import loads_canonical
from flowrt.store import shelf as shelving
from flowrt.store.chain import _sha256_hex, build_fact, chain_record
from flowrt.store.deferred import HostRecordsKept, OpenCallsKept, ShelvingRead, VerifiedAsAsked, release
from flowrt.store.errors import Hole, RunBusy, RunExists, RunNotFound, StorageError, TornTail
from flowrt.store.format import _HASH_RE, DATA_VERSION, INLINE_LIMIT, TIMES_EVERY_MS, valid_run_id
from flowrt.store.host_records import check_host_record
from flowrt.store.interface import RunImage, RunLog, Store
from flowrt.store.known_times import KnownTimes
from flowrt.store.postgres_pool import CONNECT_SECONDS, STATEMENT_SECONDS, new_pool
from flowrt.store.postgres_queue import KEEP, ready_after
from flowrt.store.postgres_schema import _reason, check_schema
from flowrt.store.postgres_shelf import ShelvedRows
from flowrt.store.postgres_sql import APPEND_STATEMENT, HOST_RECORD, HOST_RECORD_ALONE
from flowrt.store.postgres_read import read_run
from flowrt.store.postgres_verify import Reading, check_keys, finish_reading, parse_host_rows, verify_rows
from flowrt.store.refs import index_refs, verify_referenced

ANSWER_SECONDS = STATEMENT_SECONDS + 30  # ... and on waiting for its answer (a server gone silent)

_HISTORY = "flow_facts"
_HOST = "flow_host"

def _failed(problem: BaseException, what: str, fact_n: int | None = None) -> StorageError:
    return StorageError(f"{what}: the database failed: {_reason(problem)}", fact_n, component="postgresql")


class PostgresStore(Store):
    """Runs in the PostgreSQL database at `url` (`postgresql://...`; `options=-csearch_path=S`
    selects a schema). `lease_seconds`: how long an appender's lease lasts unrenewed (default
    FLOW_LEASE_SECONDS or 30 s); `owner`: this appender's name in leases."""

    _shared: dict[str, "PostgresStore"] = {}
    _shared_lock = threading.Lock()

    def __init__(self, url: str, *, lease_seconds: float | None = None, owner: str | None = None) -> None:
        self.url = url
        self.lease_seconds = leases.lease_seconds() if lease_seconds is None else lease_seconds
        self.owner = owner or leases.new_owner()
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def at(cls, url: str) -> "PostgresStore":
        """The store at `url`, one per URL in a process (they share its connection pool)."""
        with cls._shared_lock:
            store = cls._shared.get(url)
            if store is None:
                store = cls._shared[url] = cls(url)
            return store

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # -- connections ----------------------------------------------------------------------------

    def pool(self) -> psycopg_pool.ConnectionPool:
        """The connection pool, opened (and the tables' version checked) on first use."""
        with self._pool_lock:
            if self._pool is None:
                pool = new_pool(self.url)
                try:
                    pool.open(wait=True, timeout=CONNECT_SECONDS)
                    with pool.connection() as conn:
                        check_schema(conn)
                except (psycopg.Error, psycopg_pool.PoolTimeout) as problem:
                    pool.close(timeout=1)
                    raise StorageError(f"cannot reach the database: {_reason(problem)}",
                                       component="postgresql") from problem
                except BaseException:
                    pool.close(timeout=1)
                    raise
                atexit.register(pool.close, 1)
                self._pool = pool
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close(timeout=5)
                self._pool = None

    def connection(self):
        """A pooled connection (a context manager); StorageError when none can be had."""
        return _Connection(self.pool())

    # -- the interface --------------------------------------------------------------------------

    @staticmethod
    def _check_run_id(run_id: str) -> None:
        if not valid_run_id(run_id):
            raise ValueError(f"invalid run id {run_id!r}: 1-128 of A-Z a-z 0-9 . _ -, "
                             "starting with a letter or digit")

    def create(self, run_id: str, start_fields: dict, *, sources: Iterable[str] = (),
               durability: str = "fsync", inline_limit: int = INLINE_LIMIT) -> "PostgresRunLog":
        self._check_run_id(run_id)
        if not isinstance(start_fields, dict):
            raise TypeError("start_fields is a dict")
        fields = dict(start_fields)
        if fields.setdefault("data", DATA_VERSION) != DATA_VERSION:
            raise ValueError(f"this store writes data version {DATA_VERSION}, not {fields['data']!r}")
        if fields.setdefault("run", run_id) != run_id:
            raise ValueError(f"Start names run {fields['run']!r}, not {run_id!r}")
        texts = [text.encode("utf-8") for text in sources]
        log = PostgresRunLog(self, run_id, for_append=True, durability=durability, inline_limit=inline_limit)
        blobs: dict[str, bytes] = {}
        start, line = build_fact("Start", fields, 1, None, False, blobs, log.inline_limit, allow_start=True)
        host = []
        if inline_limit != INLINE_LIMIT:
            record_line, log._host_head = chain_record({"kind": "store", "inlineLimit": inline_limit}, None)
            host.append(record_line.rstrip(b"\n"))
        conn = log._hold()
        try:
            with conn.transaction():
                if durability == "none":
                    conn.execute("SET LOCAL synchronous_commit = off")
                made = conn.execute(
                    "INSERT INTO flow_runs (run, last_n, head, epoch, owner, lease_until, ready_at) "
                    "VALUES (%s, 1, %s, 1, %s, clock_timestamp() + make_interval(secs => %s), '-infinity') "
                    "ON CONFLICT DO NOTHING RETURNING epoch",
                    (run_id, start["hash"], self.owner, self.lease_seconds)).fetchone()
                if made is None:
                    raise RunExists(f"run {run_id} already exists in {self}")
                conn.execute("INSERT INTO flow_facts (run, n, line) VALUES (%s, 1, %s)", (run_id, line.rstrip(b"\n")))
                for hex_, data in blobs.items():
                    conn.execute("INSERT INTO flow_values (run, hex, data) VALUES (%s, %s, %s)", (run_id, hex_, data))
                for data in texts:
                    conn.execute("INSERT INTO flow_sources (run, hex, data) VALUES (%s, %s, %s) "
                                 "ON CONFLICT DO NOTHING", (run_id, _sha256_hex(data), data))
                for i, record in enumerate(host, 1):
                    conn.execute("INSERT INTO flow_host (run, i, line) VALUES (%s, %s, %s)", (run_id, i, record))
        except BaseException as problem:
            log._release_connection()
            log.for_append = False
            if isinstance(problem, psycopg.Error):
                raise _failed(problem, "cannot create the run") from problem
            raise
        log._host_count = len(host)
        log._facts = shelving.FactShelf([start], ShelvedRows(self, run_id))
        log._known_values.update(blobs)
        log._index_refs(start)
        log._lease = leases.Lease(run_id, self.owner, made[0], self.lease_seconds)
        log._renewer = leases.Renewer(self.pool(), log._lease)
        return log

    def open(self, run_id: str, *, for_append: bool, durability: str = "fsync",
             inline_limit: int | None = None, defer: bool = False,
             lease: leases.Lease | None = None) -> "PostgresRunLog":
        """As the interface says: the rows are read a page at a time as they are verified, and
        with `defer` (read-only) the first facts are verified now and the rest as they are asked
        for, as the run directory's are. `lease`: a lease the caller took already (a worker's
        claim)."""
        self._check_run_id(run_id)
        log = PostgresRunLog(self, run_id, for_append=for_append, durability=durability,
                             inline_limit=inline_limit)
        try:
            log._load(explicit_limit=inline_limit, lease=lease, defer=defer and not for_append)
        except BaseException:
            log.close()
            raise
        return log

    def scan(self, *, limit: int = 50, after: str | None = None) -> dict:
        from flowrt.store.postgres_scan import scan_database

        return scan_database(self, limit=limit, after=after)

    def read_image(self, run_id: str) -> RunImage:
        from flowrt.store.postgres_image import read_database_image

        return read_database_image(self, run_id)

    def write_image(self, run_id: str, image: RunImage) -> None:
        from flowrt.store.postgres_image import write_database_image

        write_database_image(self, run_id, image)


class _Connection:
    """`with store.connection() as conn:` with the pool's and the database's failures as
    StorageError."""

    def __init__(self, pool: psycopg_pool.ConnectionPool) -> None:
        self._manager = pool.connection(timeout=CONNECT_SECONDS)

    def __enter__(self) -> psycopg.Connection:
        try:
            return self._manager.__enter__()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as problem:
            raise StorageError(f"cannot reach the database: {_reason(problem)}", component="postgresql") from problem

    def __exit__(self, *exc) -> bool:
        try:
            return bool(self._manager.__exit__(*exc))
        except psycopg.Error as problem:  # pragma: no cover - returning a broken connection
            raise _failed(problem, "cannot finish") from problem


class PostgresRunLog(VerifiedAsAsked, OpenCallsKept, HostRecordsKept, RunLog):
    """One run's record in the database, opened for reading or (holding its lease) for appending."""

    def __init__(self, store: PostgresStore, run_id: str, *, for_append: bool, durability: str,
                 inline_limit: int | None) -> None:
        if durability not in ("fsync", "none"):
            raise ValueError('durability is "fsync" or "none"')
        if inline_limit is not None and (type(inline_limit) is not int or inline_limit < 0):
            raise ValueError("inline_limit is a byte count >= 0")
        self.store = store
        self.run_id = run_id
        self.for_append = for_append
        self.durability = durability
        self.inline_limit = INLINE_LIMIT if inline_limit is None else inline_limit
        self.archived_checkpoints = 0
        #: the facts, the older ones of a long live run left to the database (`flowrt.store.shelf`)
        self._facts = shelving.FactShelf([])
        self._holes: dict[tuple[int, str], str] = {}
        self._refs: dict[str, set[tuple[int, str]]] = {}
        self._known_values: set[str] = set()
        self._host_head: str | None = None
        self._host_count = 0
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None  # held while appending
        self._lease: leases.Lease | None = None
        self._renewer: leases.Renewer | None = None
        #: the facts of the append being written (their lines, their new values)
        self._pending: list[dict] = []
        self._pending_lines: list[bytes] = []
        self._pending_blobs: dict[str, bytes] = {}
        #: an asynchronous commit (a fact appended with sync=False) the log was not flushed past yet
        self._unflushed = False
        self._lost: str | None = None  # why this appender may no longer write
        #: when facts were accepted (Unix ms), as the run directory keeps them: recorded in
        #: `times` host records, at most every TIMES_EVERY_MS from the appends, and at every
        #: sync and close; committed without waiting for the flush (never worth a run's wait)
        self._times: list[int] = []
        self._times_from = 0
        self._times_recorded = time.time_ns() // 1_000_000
        self._known_times = KnownTimes()
        #: while a deferred open is verifying: the rows' reading, and (present values, limit)
        self._reading: Reading | None = None
        self._deferred: tuple | None = None
        self._failure: StorageError | None = None  # what the deferred verification found

    # -- the held connection and the lease ----------------------------------------------------

    def _hold(self) -> psycopg.Connection:
        pool = self.store.pool()
        try:
            self._conn = pool.getconn(timeout=CONNECT_SECONDS)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as problem:
            raise StorageError(f"cannot reach the database: {_reason(problem)}", component="postgresql") from problem
        return self._conn

    def _release_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self.store.pool().putconn(conn)
            except Exception:  # pragma: no cover - a pool already closed
                pass

    def when_lease_lost(self, callback) -> None:
        if self._renewer is not None:
            self._renewer.on_lost(callback)

    def _fence_args(self) -> dict:
        return {"run": self.run_id, "epoch": self._lease.epoch}

    def _lease_lost(self, fact_n: int | None) -> StorageError:
        self._lost = "lease lost"
        holder = None
        try:
            with self.store.connection() as conn:
                holder = leases.holder(conn, self.run_id)
        except StorageError:
            pass
        who = f" (now held by {holder[0]})" if holder else " (it ran out)"
        return StorageError(f"lease lost: this host may no longer append to run {self.run_id}{who}",
                            fact_n, component="postgresql")

    # -- opening --------------------------------------------------------------------------------

    def _load(self, explicit_limit: int | None, lease: leases.Lease | None, defer: bool = False) -> None:
        if self.for_append:
            conn = self._hold()
            try:
                with conn.transaction():
                    if lease is None:
                        lease = leases.take(conn, self.run_id, self.store.owner, self.store.lease_seconds)
                    if lease is None:
                        held = leases.holder(conn, self.run_id)
                        if held is None and conn.execute("SELECT 1 FROM flow_runs WHERE run = %s",
                                                         (self.run_id,)).fetchone() is None:
                            raise RunNotFound(f"no run {self.run_id} in {self.store}")
                        raise RunBusy(f"run {self.run_id} is open for appending elsewhere"
                                      + (f" ({held[0]}, lease for {held[1]:.1f} s more)" if held else ""))
            except psycopg.Error as problem:
                raise _failed(problem, "cannot take the run's lease") from problem
            self._lease = lease
            self._renewer = leases.Renewer(self.store.pool(), lease)
        passing: list[ShelvingRead] = []

        def read_shelving(reading: Reading) -> None:
            # (row keys checked before the facts they key leave the reader)
            passing.append(ShelvingRead(reading.reader, lambda count: check_keys(reading) or True))
            while not passing[0].read():
                pass

        reading, host_count, present, done = read_run(self.store, self.run_id, defer=defer,
                                                      read_all=read_shelving if self.for_append else None)
        self._host_count = host_count
        if done:
            facts = reading.reader.facts
            if passing:
                facts = passing[0].shelf
                facts.loader = ShelvedRows(self.store, self.run_id)
            self._verified(reading, facts, present, explicit_limit)
            if passing:
                self._open_calls, self._open_calls_upto = passing[0].calls, len(facts)
            return
        check_keys(reading)
        self._reading = reading
        self._deferred = (present, explicit_limit)
        self._facts = shelving.FactShelf(reading.reader.facts)
        # Holes as recorded, so that reading a value meets its hole before verification ends
        # (which then checks each record against its fact).
        for record in reading.host.records:
            if record["kind"] == "hole" and type(record.get("fact")) is int:
                self._holes[(record["fact"], record.get("field"))] = record.get("ref")

    def _verify(self, run: tuple, rows: list, host_rows: list, present: set[str],
                explicit_limit: int | None) -> None:
        """Verify rows read elsewhere, whole (an image written back: flowrt/store/postgres_image.py)."""
        verified = verify_rows(self.run_id, run, rows, host_rows, present)
        self._host_count = len(host_rows)
        self._take(verified, verified.facts, present, explicit_limit)

    def _verified(self, reading: Reading, facts: Any, present: set[str], explicit_limit: int | None) -> None:
        """The reader is done: the checks of the end, then the verified run is this log's."""
        self._take(finish_reading(reading, facts, present), facts, present, explicit_limit)
        if self.for_append:  # (its lease fences every other writer of its host records)
            self._host_listed = reading.host.records

    def _take(self, verified: Any, facts: Any, present: set[str], explicit_limit: int | None) -> None:
        if explicit_limit is None and verified.recorded_limit is not None and verified.recorded_limit >= 0:
            self.inline_limit = verified.recorded_limit
        if not isinstance(facts, shelving.FactShelf):
            facts = shelving.FactShelf(facts, ShelvedRows(self.store, self.run_id) if self.for_append else None)
        self._facts = facts
        self._holes, self._refs = verified.holes, verified.refs
        self._host_head = verified.host_head
        self.archived_checkpoints = verified.archived_checkpoints
        self._known_values = present
        self._known_times = KnownTimes(verified.times)

    def _index_refs(self, fact: dict) -> None:
        index_refs(self._refs, fact)

    # -- reading --------------------------------------------------------------------------------

    def _read_more(self, count: int | None) -> None:
        reading = self._reading
        done = reading.reader.read(count)
        check_keys(reading)
        if not done:
            return
        self._reading = None
        present, explicit_limit = self._deferred
        try:
            self._verified(reading, self._facts, present, explicit_limit)
        except StorageError as problem:
            self._failure = problem
            raise

    @property
    def deferred(self) -> bool:
        return self._reading is not None

    def facts(self) -> list[dict]:
        self.verify()
        return list(self._facts)

    def __len__(self) -> int:
        self.verify()
        return len(self._facts)

    def verified_facts(self) -> shelving.FactShelf:
        return self._facts

    def release_before(self, index: int) -> None:
        if self.for_append:
            return
        with self._lock:
            release(self._facts, self._reading.reader if self._reading is not None else None, index,
                    self._ready_rows)

    def _ready_rows(self, count: int) -> bool:
        """Ready a read-only log's shelf for its first `count` facts held (`release`): every fact of
        an open run is committed, read back by number; a deferred reading's row keys checked
        before the facts they key leave it."""
        if self._facts.loader is None:
            self._facts.loader = ShelvedRows(self.store, self.run_id)
        if self._reading is not None:
            check_keys(self._reading)
        return True

    def latest_checkpoint(self) -> int | None:
        self.verify()
        return self._facts.latest_checkpoint()

    @property
    def head(self) -> str | None:
        self.verify()
        return self._facts[-1]["hash"] if self._facts else None

    @property
    def ended(self) -> bool:
        self.verify()
        return bool(self._facts) and self._facts[-1]["kind"] == "End"

    @property
    def torn_tail(self) -> TornTail | None:
        self.verify()
        return None  # a commit is whole or absent

    def holes(self) -> dict[tuple[int, str], str]:
        self.verify()
        return dict(self._holes)

    def _blob(self, table: str, hex_: str) -> bytes | None:
        try:
            with self.store.connection() as conn:
                row = conn.execute(f"SELECT data FROM {table} WHERE run = %s AND hex = %s",
                                   (self.run_id, hex_)).fetchone()
        except psycopg.Error as problem:
            raise _failed(problem, f"cannot read {table}") from problem
        return bytes(row[0]) if row else None

    def value(self, fact: dict | int, field: str) -> Any:
        stored = self.fact(fact if isinstance(fact, int) else fact["n"])
        if field in stored:
            return stored[field]
        ref = stored.get(field + "_ref")
        if ref is None:
            raise KeyError(f"fact {stored['n']} has no {field}")
        n = stored["n"]
        if (n, field) in self._holes:
            raise Hole(n, field, ref)
        hex_ = ref[len("sha256:"):]
        component = f"flow_values/{hex_}"
        data = self._pending_blobs.get(hex_) or self._blob("flow_values", hex_)
        if data is None:
            raise StorageError(f"the value of {field} is missing and is not a recorded hole", n, component=component)
        if _sha256_hex(data) != hex_:
            raise StorageError(f"the value of {field} does not match its hash", n, component=component)
        try:
            return loads_canonical(data)
        except ValueError:
            raise StorageError(f"the value of {field} is not canonical JSON", n, component=component) from None

    def source(self, hash: str) -> str:
        if not isinstance(hash, str) or not _HASH_RE.match(hash):
            raise ValueError(f"not a source hash: {hash!r}")
        hex_ = hash[len("sha256:"):]
        component = f"flow_sources/{hex_}"
        data = self._blob("flow_sources", hex_)
        if data is None:
            raise StorageError("the source is missing", component=component)
        if _sha256_hex(data) != hex_:
            raise StorageError("the source does not match its hash", component=component)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:  # pragma: no cover - the hash matched text we encoded
            raise StorageError("the source is not UTF-8", component=component) from None

    def verify_files(self) -> None:
        self.verify()
        verify_referenced(self, self._refs, self._holes, self._facts, _HISTORY)

    def _read_host_records(self) -> list[dict]:
        """Every host record, from its rows (~90 ms at 100,000 calls, `times` rows included:
        `HostRecordsKept`)."""
        try:
            with self.store.connection() as conn:
                rows = conn.execute("SELECT i, line FROM flow_host WHERE run = %s ORDER BY i",
                                    (self.run_id,)).fetchall()
        except psycopg.Error as problem:
            raise _failed(problem, "cannot read the host records") from problem
        return parse_host_rows(rows).records

    def appender_active(self) -> bool | None:
        try:
            with self.store.connection() as conn:
                held = leases.holder(conn, self.run_id)
        except (StorageError, psycopg.Error):
            return None
        if held is None:
            return False
        return not (self._lease is not None and held[0] == self._lease.owner)

    def stored_head(self) -> tuple[str | None, bool] | None:
        try:
            with self.store.connection() as conn:
                row = conn.execute("SELECT head FROM flow_runs WHERE run = %s", (self.run_id,)).fetchone()
        except (StorageError, psycopg.Error):
            return None
        return (row[0], False) if row else None

    # -- appending ------------------------------------------------------------------------------

    def _require_writable(self) -> None:
        if not self.for_append or self._conn is None:
            raise ValueError(f"run {self.run_id} is not open for appending")

    def _local_commit(self, conn: psycopg.Connection) -> None:
        """In a transaction: commit it without waiting for the flush when the run is not durable."""
        if self.durability == "none":
            conn.execute("SET LOCAL synchronous_commit = off")

    def append(self, kind: str, fields: dict, *, sync: bool = True) -> dict:
        return self.append_many([(kind, fields)], sync=sync)[0]

    def append_many(self, items: Sequence[tuple[str, dict]], *, sync: bool = True) -> list[dict]:
        self._require_writable()
        with self._lock:
            if self._conn is None:
                raise ValueError(f"run {self.run_id} is not open for appending")
            kept = self._facts.kept
            last = kept[-1]  # (the newest fact is always kept)
            n, prev, ended = last["n"], last["hash"], last["kind"] == "End"
            blobs: dict[str, bytes] = {}
            facts: list[dict] = []
            lines: list[bytes] = []
            for kind, fields in items:
                n += 1
                fact, line = build_fact(kind, fields, n, prev, ended, blobs, self.inline_limit)
                facts.append(fact)
                lines.append(line[:-1])
                prev, ended = fact["hash"], kind == "End"
            if not facts:
                return []
            if self._lost is not None:
                raise self._lease_lost(facts[0]["n"])
            new = {hex_: data for hex_, data in blobs.items()
                   if hex_ not in self._known_values and hex_ not in self._pending_blobs}
            now = time.time_ns() // 1_000_000
            if not self._times:
                self._times_from = facts[0]["n"]
            self._times.extend([now] * len(facts))
            kept.extend(facts)
            if blobs:
                for fact in facts:
                    self._index_refs(fact)
            self._pending, self._pending_lines, self._pending_blobs = facts, lines, new
            self._write_pending(now, sync and self.durability == "fsync")
            if len(kept) >= shelving.SHELVE_AT:  # (written: only the facts of a failed append are cut)
                self._facts.shelve(len(kept) - shelving.KEEP)
            return facts

    def _write_pending(self, now: int, durable: bool) -> None:
        """Write the append's facts in one fenced statement; the lock is held. Durable: the
        commit waits for the flush and carries the `times` record of every fact not yet timed.
        Not: it does not wait (a Reply: written before the program sees it, flushed by the next
        synchronous commit), and its times ride with the next durable write. On failure the
        facts are forgotten, as the interface says of facts not written."""
        facts, lines, blobs = self._pending, self._pending_lines, self._pending_blobs
        times_line = host_head = None
        if durable:
            # The times are durable exactly when the facts are, and no statement of their own.
            line, host_head = chain_record({"kind": "times", "from": self._times_from, "at": self._times},
                                           self._host_head)
            times_line = line[:-1]
        last, first = facts[-1], facts[0]
        try:
            # The commit waits for the flush unless the run is not durable: set for this
            # statement's own transaction, so it costs no round trip.
            changed = APPEND_STATEMENT.rows_changed(self._conn, dict(
                self._fence_args(), commit="on" if durable else "off", last=last["n"], head=last["hash"],
                ended=last["kind"] == "End", prev_n=first["n"] - 1, hexes=list(blobs) if blobs else None,
                blobs=list(blobs.values()) if blobs else None, lines=lines,
                times_i=self._host_count + 1, times_line=times_line), ANSWER_SECONDS)
            written = changed == len(facts)
        except psycopg.Error as problem:
            self._forget_pending()
            raise _failed(problem, "cannot append", first["n"]) from problem
        except BaseException as interruption:
            # Ctrl-C in the wait: the answer was read after it (postgres_wire), so the log
            # knows whether the facts (and their times record) are in the database.
            if getattr(interruption, "rows_changed", None) == len(facts):
                self._pending_written(blobs, durable, times_line, host_head, now, records_times=False)
            else:
                self._forget_pending()
            raise
        if not written:
            self._forget_pending()
            raise self._lease_lost(first["n"])
        self._pending_written(blobs, durable, times_line, host_head, now)

    def _pending_written(self, blobs: dict, durable: bool, times_line: bytes | None, host_head: str | None,
                         now: int, *, records_times: bool = True) -> None:
        self._pending, self._pending_lines, self._pending_blobs = [], [], {}
        self._known_values.update(blobs)
        # A synchronous commit waits for the log to be flushed up to it, so past every
        # asynchronous commit before it.
        self._unflushed = not durable and self.durability == "fsync"
        if times_line is not None:
            self._host_head, self._host_count = host_head, self._host_count + 1
            self._times_written(now)
        elif records_times and self.durability != "fsync" and now - self._times_recorded >= TIMES_EVERY_MS:
            self._record_times()  # durability "none": no append carries them

    def _forget_pending(self) -> None:
        """The append's facts were not written: they are no longer facts of the run."""
        first = self._pending[0]["n"]
        for fact in self._pending:
            for ref_field in [f for f in fact if f.endswith("_ref")]:
                users = self._refs.get(fact[ref_field][len("sha256:"):])
                if users is not None:
                    users.discard((fact["n"], ref_field[:-len("_ref")]))
        kept = len(self._facts) - len(self._pending)
        self._facts.cut(kept)
        if self._open_calls_upto > kept:
            self._open_calls = None  # (it took a fact cut)
        if self._times:
            del self._times[max(0, first - self._times_from):]
        self._pending, self._pending_lines, self._pending_blobs = [], [], {}

    def _record_times(self, *, durable: bool = False) -> bool:
        """One `times` host record for the facts accepted since the last (the lock is held; the
        facts it names are committed), or none when there are none: whether one was. Durable:
        committed synchronously, which flushes the log past every fact it times, and a failure
        raises; otherwise a failure loses those times only."""
        if not self._times or self._conn is None:
            return False
        try:
            self._write_host([{"kind": "times", "from": self._times_from, "at": self._times}], durable=durable)
        except StorageError:
            if durable:
                raise
            self._times, self._times_recorded = [], self._times[-1]
            return True
        self._times_written(self._times[-1])
        return True

    def _times_written(self, when: int) -> None:
        """The times not yet recorded are in a written `times` record now (at `when`)."""
        self._known_times.put(self._times_from, self._times)
        self._times, self._times_recorded = [], when

    def fact_times(self) -> dict[int, int]:
        """Fact n -> the Unix time in milliseconds at which this store accepted it, where known."""
        times = self._known_times.as_dict()
        for offset, ms in enumerate(self._times):
            times[self._times_from + offset] = ms
        return times

    def sync(self, *, times: bool = True) -> None:
        if self._conn is None:
            return
        with self._lock:
            if not self._unflushed:
                if times:
                    self._record_times()
                return
            try:
                # The times record, committed synchronously, flushes the log past the facts it
                # times; with none to write, renewing the lease (a synchronous commit) does.
                if not self._record_times(durable=True) and not leases.renew(self._conn, self._lease):
                    raise self._lease_lost(None)
            except psycopg.Error as problem:
                raise _failed(problem, "cannot sync") from problem
            self._unflushed = False

    @property
    def synced(self) -> bool:
        return not self._unflushed

    def put_source(self, text: str) -> str:
        self._require_writable()
        if not isinstance(text, str):
            raise TypeError("a source is text")
        data = text.encode("utf-8")
        hex_ = _sha256_hex(data)
        with self._lock:
            try:
                cur = self._conn.execute(
                    "WITH ok AS (SELECT run FROM flow_runs WHERE " + leases.FENCE
                    + " AND set_config('synchronous_commit', %(commit)s, true) IS NOT NULL) "
                    "INSERT INTO flow_sources (run, hex, data) SELECT ok.run, %(hex)s, %(data)s FROM ok "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    dict(self._fence_args(), hex=hex_, data=data, commit="off" if self.durability == "none" else "on"))
                stored = cur.rowcount == 1 or self._blob("flow_sources", hex_) is not None
            except psycopg.Error as problem:
                raise _failed(problem, "cannot store the source") from problem
            if not stored:
                raise self._lease_lost(None)
        return "sha256:" + hex_

    def host_record(self, record: dict) -> dict:
        return self.host_records_many([record])[0]

    def host_records_many(self, records: Sequence[dict]) -> list[dict]:
        """As `host_record` each, in one transaction (one commit, one WAL flush)."""
        self._require_writable()
        records = list(records)
        for record in records:
            check_host_record(record)
        if not records:
            return []
        self.sync()
        with self._lock:
            self._write_host(records)
        return records

    def _write_host(self, records: list[dict], also: tuple[str, dict] | None = None, *,
                    durable: bool = True) -> None:
        """Append host records, fenced, in one transaction (with `also`, a statement of the
        same transaction); the lock is held. `durable=False` commits without waiting for the
        flush (the next synchronous commit makes it durable)."""
        self._host_listed = None  # (read from the rows from now on)
        head, count = self._host_head, self._host_count
        lines = []
        for record in records:
            line, head = chain_record(record, head)
            ready = ready_after(record)
            lines.append((line[:-1], ready is KEEP, None if ready is KEEP else ready))
        commit = "on" if durable and self.durability == "fsync" else "off"
        try:
            if len(lines) == 1 and also is None:
                # One record (a `times`, a timer, a decision): one statement, its own transaction,
                # its commit set inside it (one round trip, where BEGIN, SET LOCAL, the insert and
                # COMMIT were four).
                line, keep, ready = lines[0]
                cur = self._conn.execute(HOST_RECORD_ALONE, dict(
                    self._fence_args(), i=count + 1, line=line, keep=keep, ready=ready, commit=commit))
                if cur.rowcount != 1:
                    raise _Lost
                self._host_head, self._host_count = head, count + 1
                return
            with self._conn.transaction():
                self._conn.execute("SELECT set_config('synchronous_commit', %s, true)", (commit,))
                for i, (line, keep, ready) in enumerate(lines, count + 1):
                    cur = self._conn.execute(HOST_RECORD, dict(self._fence_args(), i=i, line=line, keep=keep,
                                                                ready=ready))
                    if cur.rowcount != 1:
                        raise _Lost
                if also is not None:
                    self._conn.execute(*also)
        except _Lost:
            raise self._lease_lost(None) from None
        except psycopg.Error as problem:
            raise _failed(problem, "cannot append a host record") from problem
        self._host_head, self._host_count = head, count + len(lines)

    def set_ready(self, ready: str | None) -> None:
        """Set from when the run wants a host (postgres_queue), fenced by this appender's lease."""
        self._require_writable()
        with self._lock:
            try:
                cur = self._conn.execute("UPDATE flow_runs SET ready_at = %(ready)s::timestamptz WHERE " + leases.FENCE,
                                         dict(self._fence_args(), ready=ready))
            except psycopg.Error as problem:
                raise _failed(problem, "cannot mark the run") from problem
            if cur.rowcount != 1:
                raise self._lease_lost(None)

    # -- archive and redaction (postgres_archive) ---------------------------------------------

    def archive(self) -> int:
        from flowrt.store.postgres_archive import archive_facts

        self._require_writable()
        self.sync()
        with self._lock:
            return archive_facts(self)

    def redact(self, n: int, field: str | None = None) -> list[dict]:
        from flowrt.store.postgres_archive import redact_values

        self._require_writable()
        with self._lock:
            return redact_values(self, n, field)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self.sync()  # the log flushed past every fact, and the times written
            except StorageError:
                pass
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None
        if self._conn is not None and self._lease is not None and self._lost is None:
            try:
                leases.release(self._conn, self._lease)
            except psycopg.Error:
                pass  # the lease runs out by itself
        if self._conn is not None:
            self._release_connection()
        self.for_append = False

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class _Lost(Exception):
    """A fenced statement changed nothing: the lease is no longer this appender's."""
