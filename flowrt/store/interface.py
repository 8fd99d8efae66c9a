"""The store interface: what the host asks of any place that keeps runs' records.

`Store` is a runs root (make a run, open one, discover runs, archive, redact, copy a run as
bytes); `RunLog` is one run's record opened for reading or for appending. The run directory
(`flowrt.store.directory`) is the first implementation; the PostgreSQL store
(`flowrt.store.postgres`) keeps the same facts, with the same canonical bytes and hashes
(`flowrt.store.chain` builds and checks them for any store), behind the same methods.

The contract every implementation keeps (docs/trace.md sections 9 and 10 say it for the run
directory, in bytes):

- Ordering. Facts are numbered 1, 2, ... with no gap; fact 1 is Start and only fact 1; nothing
  follows End; each fact's `prev` is the hash of the fact before it (Start's is null). Appends
  to one run are serialized: concurrent `append`s from threads of one process chain one after
  the other, and only one `RunLog` (in any process, on any host) appends to a run at a time:
  opening a run for appending while another holds it raises `RunBusy`.
- Durability. `append` / `append_many` return once their facts are durable (with
  `durability="fsync"`): a crash, of the process or of the machine, keeps them. `sync=False`
  makes a fact one of this RunLog's facts at once but durable only with the next synced write
  or `sync()`; if that fails, every fact that was not durable is removed and `StorageError`
  raised. The fact is written at once all the same (other readers see it and it outlives the
  process; only a machine or server crash can take it): the history seed orders a Reply
  written before the program sees it, so a store never holds one back in memory. So the
  caller syncs before any consequence of it leaves the process, and within a bounded time when
  nothing else does (the host: the next Call, or ~2 ms after the child goes quiet). A host record (`host_record`) names the head, so the facts before it
  are made durable first. `append_many` is all or nothing.
- Failure. A write that fails raises `StorageError` and leaves the record as it was before the
  write (no partial fact is ever visible). Nothing ever cuts a fact that was durable.
- Reading. Opening verifies the whole record, changing nothing when read-only: the chain, each
  fact's hash, the canonical form of every fact, the host records' own chain, and that every
  value stored by reference is present or a recorded hole. Any damage raises `StorageError`
  (with the first damaged fact's number, when one is concerned), never a partial result. The one
  exception is an unfinished last write (a torn tail), which is not damage: a reader ignores it
  (`torn_tail`), and an open for appending removes it and records that it did.
- Values and sources are kept by hash and checked against it when read; a redacted value is a
  `Hole` whose hash is all that is left. Facts, and so the chain, never change.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from flowrt.store.errors import TornTail
from flowrt.store.format import INLINE_LIMIT
from flowrt.store.open_calls import open_calls_among


class RunLog(abc.ABC):
    """One run's stored record. Get one from `Store.create` or `Store.open`.

    Attributes every implementation sets: `run_id`; `for_append` (False once closed);
    `durability` (`"fsync"`: appends are durable when they return; `"none"`: for tests and
    throwaway runs); `inline_limit` (values whose canonical JSON is longer go by reference);
    `archived_checkpoints` (Checkpoint facts archived, which number the `cN:` ids after them)."""

    run_id: str
    for_append: bool
    durability: str
    inline_limit: int
    archived_checkpoints: int

    # -- reading ----------------------------------------------------------------------------

    @abc.abstractmethod
    def verify(self) -> None:
        """Finish a deferred verification (nothing to do otherwise); raises what `open` would."""

    @property
    @abc.abstractmethod
    def deferred(self) -> bool:
        """Whether verification is still going on (a deferred open not yet read to the end)."""

    @abc.abstractmethod
    def facts(self) -> list[dict]:
        """Every verified fact, in order, as stored (a value kept by reference as
        `<field>_ref`; archived facts left out). Do not mutate them."""

    @abc.abstractmethod
    def fact(self, n: int) -> dict:
        """Fact number `n`; IndexError when there is none (or it was archived)."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """How many facts `facts()` holds."""

    @abc.abstractmethod
    def verified_facts(self) -> Sequence[dict]:
        """The facts verified so far, as a sequence that grows while a deferred verification
        goes on or the run is appended to (a live run's older facts are read back from the
        store as they are indexed: `flowrt.store.shelf`). Do not mutate it."""

    @abc.abstractmethod
    def fact_at(self, index: int) -> dict | None:
        """The fact at `index` of the facts (0 is Start), verifying as far as that; None past
        the last fact."""

    @abc.abstractmethod
    def facts_from(self, index: int, count: int) -> list[dict]:
        """Up to `count` facts from `index` on, verifying as far as that; [] past the end."""

    @abc.abstractmethod
    def release_before(self, index: int) -> None:
        """The caller is done with the verified facts of indexes below `index` (Start aside):
        the store may leave them to the record, read back and verified if they are asked for
        again. A reader that goes through a long history in order (replay) then holds only what
        lies ahead of it. Nothing for an appender (it leaves its older facts on its own)."""

    @abc.abstractmethod
    def latest_checkpoint(self) -> int | None:
        """The index (in `facts()`) of the latest Checkpoint, or None."""

    def open_calls(self) -> dict[str, dict]:
        """The open calls (`flowrt.store.open_calls`): call id -> its Call fact, in the order of
        the Calls. Here from every fact; the run directory and PostgreSQL keep them
        (`flowrt.store.deferred.OpenCallsKept`)."""
        return open_calls_among(self.facts())

    @property
    @abc.abstractmethod
    def head(self) -> str | None:
        """The hash of the last fact."""

    @property
    @abc.abstractmethod
    def ended(self) -> bool:
        """Whether the last fact is End."""

    @property
    @abc.abstractmethod
    def torn_tail(self) -> TornTail | None:
        """The unfinished last write a read-only open ignored, or None."""

    @abc.abstractmethod
    def value(self, fact: dict | int, field: str) -> Any:
        """The value of `field` in a fact (the fact or its number): inline, or loaded by its
        hash and checked against it. Raises Hole for a hole, StorageError for a missing or
        damaged value, KeyError when the fact has no such field."""

    @abc.abstractmethod
    def holes(self) -> dict[tuple[int, str], str]:
        """Every recorded hole: (fact n, field) -> the value's hash."""

    @abc.abstractmethod
    def is_hole(self, fact: dict | int, field: str) -> bool:
        """Whether `field` of the fact is a recorded hole."""

    @abc.abstractmethod
    def source(self, hash: str) -> str:
        """A stored module source, checked against its hash (`"sha256:<hex>"`); ValueError for
        a hash not of that form, StorageError when it is missing or damaged."""

    @abc.abstractmethod
    def verify_files(self) -> None:
        """Check every value a fact refers to (unless a hole) and every module source Start
        names against its hash; StorageError for the first missing or damaged one."""

    @abc.abstractmethod
    def host_records(self) -> list[dict]:
        """Every host record, in order, without its chain fields (`prev`, `hash`); the times
        of facts are `fact_times`, not listed here."""

    def fact_times(self) -> dict[int, int]:
        """When storage accepted each fact: fact n -> Unix time in milliseconds (UTC), for the
        facts whose time is known. Times are host records (DESIGN.md section 4): never facts,
        never in the chain of facts, never seen by the program; a machine crash may lose the
        times of the last facts (never a fact). A store that keeps no times returns {} (this
        default); one that does records each fact's time when it writes the fact, without an
        extra sync."""
        return {}

    def refresh(self) -> list[dict] | None:
        """Read on (a read-only RunLog, for following a run that another RunLog, in any
        process, appends to): verify the facts appended since the RunLog was opened or last
        refreshed, add them to `facts()` (with their host records and times) and return them;
        [] when there are none. Damage raises StorageError, as `open` would. None when the store
        cannot read on from where it was (this default, or a record cut under it): the caller
        opens the run again and checks that what it had seen is still a prefix."""
        return None

    # -- probes of a run another host may be appending to (flowrt.run_state) ------------------

    @abc.abstractmethod
    def appender_active(self) -> bool | None:
        """Whether another RunLog (of any process, on any host) holds this run for appending
        right now: its lock (a run directory) or a lease that has not run out (a database).
        None when that cannot be found out. Probes only: never disturbs the holder."""

    @abc.abstractmethod
    def stored_head(self) -> tuple[str | None, bool] | None:
        """What the stored record ends with now: (the last fact's hash, whether an unfinished
        write follows it), read afresh; None when it cannot be read. Compared with `head` and
        `torn_tail`, it tells whether the record changed since this RunLog read it."""

    def when_lease_lost(self, callback) -> None:
        """Call `callback()` (once, on another thread) if this appender learns that it may no
        longer append before it next tries: a database lease found lost by its renewal. A store
        whose hold cannot be lost while its process lives (a run directory's lock) never does."""

    # -- appending (a RunLog opened for appending) -------------------------------------------

    @abc.abstractmethod
    def append(self, kind: str, fields: dict, *, sync: bool = True) -> dict:
        """Write fact `kind` with `fields` as the next fact; returns it as stored. The store
        sets `n`, `kind`, `prev` and `hash` (and End's `ending`), and moves a value over the
        inline limit to a reference. ValueError / TypeError for a fact it must not write
        (unknown kind, Start, after End, a reserved field), before anything is written."""

    @abc.abstractmethod
    def append_many(self, items: Sequence[tuple[str, dict]], *, sync: bool = True) -> list[dict]:
        """Write several facts at once (group commit): all or none."""

    @abc.abstractmethod
    def sync(self, *, times: bool = True) -> None:
        """Make every fact written so far durable; on failure the facts that were not durable
        are removed and StorageError is raised. With `times` (the default) the times of the
        facts written are recorded too (a follower sees them); without, they wait for the
        store's next `times` record (at most every TIMES_EVERY_MS of appends, or a sync with
        them): a host waiting on a reply that comes within microseconds need not write one."""

    @property
    @abc.abstractmethod
    def synced(self) -> bool:
        """Whether every fact written is durable."""

    @abc.abstractmethod
    def put_source(self, text: str) -> str:
        """Store a module source once, by hash, durably; returns `"sha256:<hex>"`."""

    @abc.abstractmethod
    def host_record(self, record: dict) -> dict:
        """Append a host record (a dict with a text `kind`, not one of `STORE_RECORDS`),
        chained to the one before it, durably, after making the facts durable."""

    def host_record_soon(self, record: dict) -> None:
        """Append a host record whose loss in a crash costs nothing (a report: the sandbox's
        layers) with the store's next durable write of host records, at the latest as it closes,
        so that it costs no sync of its own where the store can do that. (This default writes it
        now, as `host_record`.)"""
        self.host_record(record)

    def host_records_many(self, records: Sequence[dict]) -> list[dict]:
        """Append several host records, in order, as `host_record` each, with one write and one
        sync where the store can (a run's start writes several): durable, chained, after making
        the facts durable. Returns them. (This default writes them one at a time.)"""
        return [self.host_record(record) for record in records]

    @abc.abstractmethod
    def archive(self) -> int:
        """Move the facts between Start and the latest checkpoint aside (the chain stays
        verifiable from an anchor); returns how many moved. Crash-safe."""

    @abc.abstractmethod
    def redact(self, n: int, field: str | None = None) -> list[dict]:
        """Make the value of `field` of fact `n` (every value field when None) a hole: record
        it, then delete the value unless an unredacted fact still refers to the same content.
        RedactRefused for an inline value (part of the fact's hash). Returns the hole records
        written."""

    @abc.abstractmethod
    def close(self) -> None:
        """Sync what can be, release the run (its lock or lease) and what it holds. Idempotent;
        a closed RunLog no longer appends."""

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RunImage:
    """A run's stored record as bytes, for copying it between stores (`flow export`): every
    implementation keeps the same bytes, so a copy has the same hashes and verifies the same.

    `facts`: the kept facts' canonical lines (no newline), Start first; `archived`: the archived
    facts' lines, in order; `anchor`: the archive anchor's canonical JSON, or None; `host`: the
    host records' lines, chained; `values` and `sources`: hex of SHA-256 -> bytes."""

    facts: list[bytes]
    archived: list[bytes] = field(default_factory=list)
    anchor: bytes | None = None
    host: list[bytes] = field(default_factory=list)
    values: dict[str, bytes] = field(default_factory=dict)
    sources: dict[str, bytes] = field(default_factory=dict)


class Store(abc.ABC):
    """A runs root: where runs are made, found and opened."""

    @abc.abstractmethod
    def create(self, run_id: str, start_fields: dict, *, sources: Iterable[str] = (),
               durability: str = "fsync", inline_limit: int = INLINE_LIMIT) -> RunLog:
        """Make run `run_id` (RunExists if it exists; ValueError for an invalid id), store
        `sources`, write Start as fact 1 (`data` and `run` filled in), and return it open for
        appending."""

    @abc.abstractmethod
    def open(self, run_id: str, *, for_append: bool, durability: str = "fsync",
             inline_limit: int | None = None, defer: bool = False) -> RunLog:
        """Open and verify run `run_id` (RunNotFound if absent; RunBusy if `for_append` and
        another RunLog appends to it). `defer` (read-only): verify the first facts now and the
        rest as asked for."""

    @abc.abstractmethod
    def scan(self, *, limit: int = 50, after: str | None = None) -> dict:
        """Stored-run discovery: `{"runs": [row...], "nextAfter": id | None, "problems": [...]}`,
        a page of runs by id after `after`, within read bounds, changing nothing (the rows of
        docs/trace.md section 11)."""

    @abc.abstractmethod
    def read_image(self, run_id: str) -> RunImage:
        """Run `run_id`'s record as bytes (RunNotFound if absent), after verifying it as `open`
        does: a damaged record is a StorageError, never copied."""

    @abc.abstractmethod
    def write_image(self, run_id: str, image: RunImage) -> None:
        """Store `image` as run `run_id` (RunExists if there is one; ValueError for an invalid
        id), durably, then verify it as `open` does; a copy that does not verify is removed and
        raises StorageError."""

    def archive(self, run_id: str) -> int:
        """`RunLog.archive` of run `run_id`, opened for appending for it."""
        with self.open(run_id, for_append=True) as run:
            return run.archive()

    def redact(self, run_id: str, n: int, field: str | None = None) -> list[dict]:
        """`RunLog.redact` of run `run_id`, opened for appending for it."""
        with self.open(run_id, for_append=True) as run:
            return run.redact(n, field)
