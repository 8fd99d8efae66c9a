"""The run directory: the first implementation of the store interface (`flowrt.store.interface`).

The on-disk format is specified in `docs/trace.md`; this package is its only writer. In short:

    <root>/<run id>/history.jsonl   one canonical-JSON fact per line, hash-chained
    <root>/<run id>/values/<hex>    value fields over `inline_limit` bytes, by SHA-256 of their JSON
    <root>/<run id>/sources/<hex>   module sources, by SHA-256 of their UTF-8 text
    <root>/<run id>/host.jsonl      the host's own records (truncations, holes, pauses, halts, times, ...)

The store is generic over fact fields. It interprets only what integrity needs: `n`, `kind`,
`prev`, `hash`; Start's `data` (the data version) and `run` (the run id); and the value fields of
each kind (`VALUE_FIELDS`), which it may move to `values/`. Appends are durable before `append`
returns (write + fsync), a torn last line is truncation, and every other kind of damage is a
`StorageError`, never a partial result.

Over 800 lines, on purpose: this module keeps one run's state (the verified facts, the open
history file with its reserved space and unsynced facts, the host records' chain, the advisory
lock, a deferred verification under way), and what is left here is the code that reads and
changes that state together, under that lock: an append cuts facts back when its sync fails (and
the times noted for them), an open repairs a torn tail and marks what is durable, archive swaps
the locked descriptor, a read-only store reads on from where its verified state ends (`refresh`).
Everything that needs none of it is in the other modules: reading is `reading`, the chain
`chain`, value and source files `blobs`, host records `host_records`, file syncs `durable`,
archive and redaction `archive`, discovery `discovery`.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Any, Iterable, Sequence

from flowrt.store import durable
from flowrt.store.archive import _read_anchor, redaction_fields, write_archive
from flowrt.store.blobs import put_source, read_source, read_value, write_values
from flowrt.store.chain import _sha256_hex, build_fact, chain_record
from flowrt.store.deferred import HostRecordsKept, OpenCallsKept, ShelvingRead, VerifiedAsAsked, release
from flowrt.store.discovery import scan_runs
from flowrt.store.durable import _fsync_dir, _pwrite_all, _strerror, _write_all
from flowrt.store.errors import Hole, RunBusy, RunExists, RunNotFound, StorageError, TornTail
from flowrt.store.format import (
    _VALUE_REFS,
    DATA_VERSION,
    INLINE_LIMIT,
    TIMES_EVERY_MS,
    _now,
    valid_run_id,
)
from flowrt.store.host_records import (
    TIMES_WINDOW,
    _Host,
    _parse_host,
    check_host_record,
    holes_and_limit,
    read_host,
)
from flowrt.store.host_mark import read_host_from_mark, write_host_mark
from flowrt.store.interface import RunLog, Store
from flowrt.store.known_times import KnownTimes
from flowrt.store.layout import HISTORY, HOST, SOURCES, VALUES
from flowrt.store.probe import appender_holds, history_tail
from flowrt.store.reading import _HistoryReader, _Parsed
from flowrt.store.refs import index_refs, verify_referenced
from flowrt.store import shelf as shelving
from flowrt.store.shelf import FactShelf, HistoryLines

#: How long opening for appending waits for the lock before the run counts as busy: a reader
#: probing whether the run has an appender (`flowrt.store.probe.appender_holds`) holds a shared
#: lock for microseconds, and that must never make a resume fail.
APPEND_LOCK_SECONDS = 0.2


def _lock_for_append(fd: int) -> bool:
    """Take the appender's exclusive lock on `fd`, retrying without blocking for up to
    APPEND_LOCK_SECONDS; False when another appender (or a probe that long) holds it."""
    deadline = time.monotonic() + APPEND_LOCK_SECONDS
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)




#: A file modified less than this long ago may have been modified again within the same tick of
#: the file system's clock: `refresh` reads it again even when its size and time look the same.
RECENT_NS = 100_000_000


def _stat_run(path: str) -> tuple[int, int, int, int, int]:
    """(size, modification time) of history.jsonl and of host.jsonl (0, 0 when absent), and
    history.jsonl's inode (`archive` replaces the file)."""
    try:
        history = os.stat(os.path.join(path, HISTORY))
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HISTORY) from problem
    try:
        host = os.stat(os.path.join(path, HOST))
        return history.st_size, history.st_mtime_ns, host.st_size, host.st_mtime_ns, history.st_ino
    except FileNotFoundError:
        return history.st_size, history.st_mtime_ns, 0, 0, history.st_ino
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem


class RunStore(VerifiedAsAsked, OpenCallsKept, HostRecordsKept, RunLog):
    """One run's stored record. Make one with `RunStore.create` or `RunStore.open`.

    A store opened for appending (`create`, or `open(..., for_append=True)`) holds an exclusive
    advisory lock on the run until `close()`; a read-only store takes no lock and never writes."""

    # -- construction ---------------------------------------------------------------------------

    def __init__(self, root: str, run_id: str, *, for_append: bool, durability: str,
                 inline_limit: int | None):
        if durability not in ("fsync", "none"):
            raise ValueError('durability is "fsync" or "none"')
        if inline_limit is not None and (type(inline_limit) is not int or inline_limit < 0):
            raise ValueError("inline_limit is a byte count >= 0")
        self.root = os.fspath(root)
        self.run_id = run_id
        self.path = os.path.join(self.root, run_id)
        self.for_append = for_append
        self.durability = durability
        #: whether the store syncs (read on every append: an attribute, not a property of
        #: `durability`, which never changes after this)
        self._fsync = durability == "fsync"
        self.inline_limit = INLINE_LIMIT if inline_limit is None else inline_limit
        self.torn_tail: TornTail | None = None
        self._facts = FactShelf([])
        #: where the shelved facts' lines are (an appender's; None when it does not shelve)
        self._lines: HistoryLines | None = None
        self._size = 0  # bytes of history.jsonl that hold the verified facts
        self._dirty = False  # a failed write may have left bytes past _size
        #: the length of history.jsonl when appending: _size and the reserved space after it
        self._reserved_end = 0
        #: facts written but not yet synced (`append(..., sync=False)`): how many facts and bytes
        #: were durable before them, or None when everything written is durable
        self._unsynced_from: tuple[int, int] | None = None
        self._fd: int | None = None  # history.jsonl, written at _size, locked
        self._host_fd: int | None = None
        self._host_size = 0
        self._host_head: str | None = None  # the hash of the last host record (the chain's end)
        #: (facts, head) of the latest `durable` record: what this run's history held, durably,
        #: when a store last closed it or opened it for appending
        self._durable_mark: tuple[int, str] | None = None
        self._host_dirty = False
        self._soon: list[dict] = []  # host records queued by `host_record_soon`
        #: bytes of host records written to host.jsonl since its last fsync (`times` records only)
        self._host_unsynced = 0
        self._host_lines = 0  # complete lines of host.jsonl read or written
        #: when facts were accepted: Unix milliseconds of facts `_times_from`, ... not yet
        #: recorded, and those recorded or read (fact n -> ms)
        self._times: list[int] = []
        self._times_from = 0
        #: when times were last recorded (from the start: a run's first host records, written
        #: right after Start, then find no unsynced times before them, see `_write_host`)
        self._times_recorded = time.time_ns() // 1_000_000
        self._known_times = KnownTimes()
        #: 0 when host.jsonl's `times` records have all been read into _known_times; otherwise
        #: where the archive's mark is (an open that verified from it on skipped the `times`
        #: records before it, `flowrt.store.host_mark`)
        self._times_marked = 0
        #: what `refresh` last saw of the files (`_stat_run`)
        self._seen: tuple | None = None
        self._holes: dict[tuple[int, str], str] = {}
        #: Checkpoint facts moved to archive/ (their count numbers the `cN:` ids that follow)
        self.archived_checkpoints = 0
        self._refs: dict[str, set[tuple[int, str]]] = {}  # hex -> {(n, field)}
        self._known_blobs: set[str] = set()  # hex of value files written or checked this session
        self._lock = threading.Lock()
        #: while a deferred open is verifying: the reader of the rest, and what `open` read
        self._reader: _HistoryReader | None = None
        self._pending: tuple | None = None
        self._failure: StorageError | None = None  # what the deferred verification found

    @staticmethod
    def _check_run_id(run_id: str) -> None:
        if not valid_run_id(run_id):
            raise ValueError(f"invalid run id {run_id!r}: 1-128 of A-Z a-z 0-9 . _ -, "
                             "starting with a letter or digit")

    @classmethod
    def create(cls, root: str, run_id: str, start_fields: dict, *, sources: Iterable[str] = (),
               durability: str = "fsync", inline_limit: int = INLINE_LIMIT) -> "RunStore":
        """Make the run directory (failing with RunExists if it exists), store `sources`, then
        write Start as fact 1. Start gets `data` = DATA_VERSION and `run` = `run_id` when absent
        (present with another value: ValueError). `inline_limit` other than the default is
        recorded in host.jsonl, so later opens of the run keep it."""
        cls._check_run_id(run_id)
        if not isinstance(start_fields, dict):
            raise TypeError("start_fields is a dict")
        fields = dict(start_fields)
        if fields.setdefault("data", DATA_VERSION) != DATA_VERSION:
            raise ValueError(f"this store writes data version {DATA_VERSION}, not {fields['data']!r}")
        if fields.setdefault("run", run_id) != run_id:
            raise ValueError(f"Start names run {fields['run']!r}, not {run_id!r}")
        source_texts = list(sources)
        store = cls(root, run_id, for_append=True, durability=durability, inline_limit=inline_limit)
        # Validate Start before touching the disk.
        blobs: dict[str, bytes] = {}
        start_fact, start_line = build_fact("Start", fields, 1, None, False, blobs, store.inline_limit, allow_start=True)
        root_path = store.root
        root_created = not os.path.isdir(root_path)
        try:
            os.makedirs(root_path, mode=0o700, exist_ok=True)
            os.mkdir(store.path, 0o700)
        except FileExistsError:
            raise RunExists(f"run {run_id} already exists in {root_path}") from None
        except OSError as problem:
            raise StorageError(f"cannot make the run directory: {_strerror(problem)}",
                               component=store.path) from problem
        try:
            os.mkdir(os.path.join(store.path, VALUES), 0o700)
            os.mkdir(os.path.join(store.path, SOURCES), 0o700)
            fd = os.open(os.path.join(store.path, HISTORY),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            store._fd = fd
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            store._lines = HistoryLines(store.path)
            store._facts = FactShelf([], store._lines)
            # host.jsonl is made now, so that the run directory's sync below covers its name too:
            # the host records a run's start writes then cost one fsync, not two.
            store._open_host(sync_dir=False)
            if inline_limit != INLINE_LIMIT:
                store._write_host({"kind": "store", "inlineLimit": inline_limit})
            for text in source_texts:
                put_source(store.path, text, fsync=store._fsync, sync_dir=False)
            if store._fsync:
                _fsync_dir(os.path.join(store.path, SOURCES))
                _fsync_dir(store.path)
                _fsync_dir(root_path)
                if root_created:
                    _fsync_dir(os.path.dirname(os.path.abspath(root_path)))
        except OSError as problem:
            store.close()
            raise StorageError(f"cannot prepare the run: {_strerror(problem)}",
                               component=store.path) from problem
        try:
            store._commit([start_fact], start_line, blobs)
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, root: str, run_id: str, *, for_append: bool, durability: str = "fsync",
             inline_limit: int | None = None, defer: bool = False) -> "RunStore":
        """Read and verify the whole record (see the module and docs/trace.md).

        A torn last line is truncated away (and a host record `truncated` written) when
        `for_append`, and otherwise reported in `torn_tail` and ignored. Any other damage raises
        StorageError. `inline_limit` None keeps the run's recorded limit (default 1024).

        `defer` (read-only stores): verify the first facts now and the rest as it is asked for,
        so a replay can begin while the rest is checked. `fact_at`, `facts_from` and `fact`
        verify as far as they need to; every other method, and `verify`, first verifies
        everything and raises what `open` would have raised. A caller that reports anything
        calls `verify` first, so damage anywhere is still reported as damage."""
        cls._check_run_id(run_id)
        store = cls(root, run_id, for_append=for_append, durability=durability,
                    inline_limit=inline_limit)
        if not os.path.isdir(store.path):
            raise RunNotFound(f"no run {run_id} in {store.root}")
        try:
            store._load(explicit_limit=inline_limit, defer=defer and not for_append)
        except BaseException:
            store.close()
            raise
        return store

    # -- deferred verification ------------------------------------------------------------------

    def _read_more(self, count: int | None) -> None:
        reader = self._reader
        if not reader.read(count):
            return
        self._reader = None
        anchor, host, explicit_limit = self._pending
        self._pending = None
        try:
            self._verified(reader, anchor, host, explicit_limit)
        except StorageError as problem:
            self._failure = problem
            raise
        finally:
            reader.data.close()

    @property
    def deferred(self) -> bool:
        """Whether verification is still going on (a deferred open not yet read to the end)."""
        return self._reader is not None

    def verified_facts(self) -> FactShelf:
        """The facts verified so far, as a sequence that grows while a deferred verification
        goes on (`fact_at` and `facts_from` make it grow) or the run is appended to. Do not
        mutate it."""
        return self._facts

    def release_before(self, index: int) -> None:
        """The facts of indexes below `index` (Start aside) are left to history.jsonl, read back,
        verified, if asked for again: a reader going through a long history in order (replay)
        holds only what it has not passed yet. Verified facts only (a deferred open's, as far as
        it has read); an appender leaves its own older facts on its own (`_shelve`)."""
        if self.for_append:
            return
        with self._lock:
            release(self._facts, self._reader, index, self._note_lines)

    def _note_lines(self, count: int) -> bool:
        """Ready the loader of a read-only store's facts for the first `count` held (`release`)."""
        shelf, reader = self._facts, self._reader
        if shelf.loader is None:
            self._lines = shelf.loader = HistoryLines(self.path)
        try:
            self._lines.note(count, shelf.base, reader.pos if reader is not None else self._size)
        except StorageError:
            return False
        return True

    def latest_checkpoint(self) -> int | None:
        """The index of the latest Checkpoint among the facts, or None. A deferred store finds it
        without verifying everything when there is none: every line whose fact is a Checkpoint
        holds the bytes `"kind":"Checkpoint"`, so when no unverified line does, there is none
        (and otherwise everything is verified and the facts say where)."""
        reader = self._reader
        if reader is not None and reader.data.find(b'"kind":"Checkpoint"', reader.pos) >= 0:
            self.verify()
        return self._facts.latest_checkpoint()

    def _load(self, explicit_limit: int | None, defer: bool = False) -> None:
        # 1. Verify everything, changing nothing.
        history_path = os.path.join(self.path, HISTORY)
        try:
            if self.for_append:
                self._fd = os.open(history_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                if not _lock_for_append(self._fd):
                    raise RunBusy(f"run {self.run_id} is open for appending elsewhere")
            data = durable.FileBytes.open(history_path, HISTORY)
        except FileNotFoundError:
            raise StorageError("history.jsonl is missing", component=HISTORY) from None
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=HISTORY) from problem
        anchor = _read_anchor(self.path)
        # host.jsonl first: its latest `durable` record says which facts were durable, and no
        # torn tail may start among them. Damage to it is raised after the history's own.
        try:
            host = self._read_host()
            host_problem = None
        except StorageError as problem:
            host, host_problem = None, problem
        try:
            reader = _HistoryReader(data, self.run_id, anchor, host[1].durable if host else None)
            if host_problem is not None:
                reader.read()
                if reader.error is not None:
                    raise reader.error from None
                raise host_problem
            deferred = defer and not reader.read(2)
        except BaseException:
            data.close()
            raise
        if deferred:
            # The rest is verified as it is asked for (`fact_at`, `facts_from`) or wholly by the
            # first method that needs every fact; whatever `open` would have raised is raised
            # then, in the order `open` would have found it.
            self._reader = reader
            self._pending = (anchor, host, explicit_limit)
            self._facts = FactShelf(reader.facts)
            # Holes as recorded, so that reading a value meets its hole before verification ends
            # (which then checks each record against its fact).
            for record in host[1].records:
                if record["kind"] == "hole" and type(record.get("fact")) is int:
                    self._holes[(record["fact"], record.get("field"))] = record.get("ref")
            if anchor is not None and reader.facts[1]["n"] != 2:
                self.archived_checkpoints = int(anchor.get("checkpoints", 0))
            return
        try:
            shelf = None
            if self.for_append:
                shelf = self._read_for_append(reader)
            else:
                reader.read()
            self._verified(reader, anchor, host, explicit_limit, shelf)
        finally:
            data.close()

    def _read_for_append(self, reader: "_HistoryReader") -> FactShelf:
        """Read the history a step at a time, its older facts left to history.jsonl as they are
        passed (`ShelvingRead`; their lines noted first). The store takes the facts only once
        `_verified` has found them sound: a store that holds none writes nothing when a failed
        open closes it."""
        lines = HistoryLines(self.path)

        def leave(count: int) -> bool:
            try:
                lines.note(count, passing.shelf.base, reader.pos)
            except StorageError:
                return False  # (as `_shelve`: the facts stay held, as sound as before)
            return True

        passing = ShelvingRead(reader, leave)
        while not passing.read():
            pass
        shelf = passing.shelf
        if shelf.base:
            self._lines = shelf.loader = lines
        self._open_calls, self._open_calls_upto = passing.calls, len(shelf)
        return shelf

    def _read_host(self) -> tuple[bytes, _Host]:
        """host.jsonl as read, and the bytes of its torn last line (b"" when none)."""
        torn, host, self._times_marked = read_host_from_mark(self.path)
        return torn, host

    def _verified(self, reader: "_HistoryReader", anchor: dict | None, host: tuple[bytes, _Host],
                  explicit_limit: int | None, shelf: FactShelf | None = None) -> None:
        """The history has been read whole: everything after it that `open` checks and repairs
        (`shelf`: the facts as an appender's open left them, `_read_for_append`)."""
        if reader.error is not None:
            raise reader.error
        parsed = _Parsed(reader.facts, reader.pos, reader.torn, None)
        # A deferred open may have left its first facts to the file already (`release_before`),
        # and an appender's open all but its newest (`_read_for_append`): `facts[i]` reads any
        # fact back, `parsed.facts` holds those still in memory.
        facts = shelf if shelf is not None else \
            self._facts if self._facts.kept is reader.facts else FactShelf(reader.facts)
        data = reader.data
        second_n = facts.second_n if facts.base else (facts[1]["n"] if len(facts) > 1 else None)
        if anchor is not None and second_n is not None and second_n != 2:
            self.archived_checkpoints = int(anchor.get("checkpoints", 0))
        if not facts:
            raise StorageError("the run has no Start (it never started)", component=HISTORY)
        host_torn_bytes, parsed_host = host
        records, host_len, host_torn = parsed_host.records, parsed_host.valid_len, parsed_host.torn
        self._host_head = parsed_host.head
        self._host_lines = parsed_host.lines
        if self.for_append:  # (only an appender writes host.jsonl: nothing changes it under this)
            self._host_listed = records
        self._known_times = KnownTimes(parsed_host.times)
        durable = parsed_host.durable
        self._durable_mark = (durable["facts"], durable["head"]) if durable else None
        holes, recorded_limit = holes_and_limit(records, facts, HOST)
        if explicit_limit is None and recorded_limit is not None and recorded_limit >= 0:
            self.inline_limit = recorded_limit
        self._holes = holes
        if self.for_append and self._lines is None:  # (never deferred; `_read_for_append` may have shelved)
            self._lines = facts.loader = HistoryLines(self.path)
        self._facts = facts
        self._size = parsed.valid_len
        self._host_size = host_len
        # A store that closed the run left its last times unsynced: an appender syncs them
        # before its first synced record (`_write_host_many`), so they never lie behind one
        # unsynced. How many bytes they are is not known here, so more than one write may name in
        # its `batch` (which would otherwise reach back over them, or further).
        self._host_unsynced = TIMES_WINDOW + 1 if parsed_host.times_last else 0
        refs = _VALUE_REFS
        for fact in facts.picked(reader.referring):
            for field, ref_name in refs[fact["kind"]]:
                if ref_name in fact:
                    self._refs.setdefault(fact[ref_name][len("sha256:"):], set()).add((fact["n"], field))
        # Every stored value that is not a recorded hole must be present; its content is checked
        # when it is read.
        values_dir = os.path.join(self.path, VALUES)
        for hex_, users in self._refs.items():
            live = [user for user in users if user not in holes]
            if live and not os.path.isfile(os.path.join(values_dir, hex_)):
                raise StorageError("the value file is missing and is not a recorded hole",
                                   min(live)[0], component=f"{VALUES}/{hex_}")
        if not self.for_append:
            self.torn_tail = parsed.torn
            return
        # Reserved space left by a host that died (NUL bytes only) is reserved space again.
        self._reserved_end = len(data) if parsed.torn is None else parsed.valid_len
        # 2. Repairs, before anything is appended: torn tails, an interrupted redaction, and
        # temporary files of interrupted value writes.
        if host_torn is not None:
            self._open_host()
            try:
                os.ftruncate(self._host_fd, host_len)
                if self._fsync:
                    os.fsync(self._host_fd)
            except OSError as problem:
                raise StorageError(f"cannot remove the torn last line: {_strerror(problem)}",
                                   component=HOST) from problem
            self._write_host({"kind": "truncated", "component": HOST, "at": _now(),
                              "offset": host_torn.offset, "bytes": host_torn.length,
                              "sha256": _sha256_hex(host_torn_bytes)})
        if parsed.torn is not None:
            try:
                os.ftruncate(self._fd, parsed.valid_len)
                if self._fsync:
                    os.fsync(self._fd)
            except OSError as problem:
                raise StorageError(f"cannot remove the torn last line: {_strerror(problem)}",
                                   len(facts) + 1, component=HISTORY) from problem
            self._write_host({
                "kind": "truncated", "component": HISTORY, "at": _now(),
                "offset": parsed.torn.offset, "bytes": parsed.torn.length,
                "sha256": _sha256_hex(data[parsed.torn.offset:parsed.torn.offset + parsed.torn.length]),
                "facts": len(facts), "head": self.head,
            })
        # A redaction records its hole, then deletes the value file; a crash between the two
        # leaves the file, which is deleted here once no unredacted fact refers to it.
        removed = False
        for hex_ in {ref[len("sha256:"):] for ref in holes.values()}:
            if os.path.exists(os.path.join(values_dir, hex_)):
                removed |= self._drop_if_unused(hex_)
        if removed and self._fsync:
            _fsync_dir(values_dir)
        for sub in (VALUES, SOURCES):
            directory = os.path.join(self.path, sub)
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for name in names:
                if name.startswith(".tmp-"):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except OSError:
                        pass
        # What was read is on disk once synced: a later crash can tear only what comes after.
        self._mark_durable(sync=True)

    def close(self) -> None:
        """Release the lock and the files. The store can no longer append. Facts written
        without sync are synced first if they can be (a failure here leaves them written, as a
        crash would: the caller has already stopped on its own error)."""
        if self._unsynced_from is not None and self._fd is not None:
            try:
                self._sync_facts()
            except StorageError:
                pass
        self._release_reserved()
        if self._fd is not None and self._unsynced_from is None:
            # Before the durable mark, which then syncs them with it: a closed run's host.jsonl
            # ends with a record that was synced, so damage anywhere before its last line is
            # damage (a reader takes zeros for a lost write only among records written unsynced
            # at the end). Without a new mark to write they stay last, unsynced, as a crash may
            # leave them.
            self._record_times()
        self._mark_durable()
        if self._soon and self.for_append:
            try:
                with self._lock:
                    self._write_host_many([])  # (what `host_record_soon` queued, if no mark took it)
            except StorageError:
                pass  # a report lost, as a crash before the close would lose it
        for attr in ("_fd", "_host_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                setattr(self, attr, None)
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.for_append = False

    def _mark_durable(self, *, sync: bool = False) -> None:
        """Record `{"kind": "durable", "facts": n, "head": h}` when the history changed since it
        was last marked: every fact up to n is durable, so a reader never takes damage among them
        for a torn tail (docs/trace.md section 10), and nothing is ever cut from them. Written by
        `close` (a closed history is marked whole) and by an open for appending (which syncs
        what it read first: `sync`), so that a run that crashes after a resume can lose only
        what the resume wrote. Only when everything written is durable and nothing is left
        half-written; a failure leaves the run unmarked, which reads as a run whose host died."""
        if self._fd is None or not self._fsync or not self._facts or self._unsynced_from is not None \
                or self._dirty:
            return
        mark = (self._facts[-1]["n"], self._facts[-1]["hash"])
        if mark == self._durable_mark:
            return
        try:
            if sync:
                durable._sync_appended(self._fd)
            with self._lock:
                self._write_host({"kind": "durable", "facts": mark[0], "head": mark[1]})
            self._durable_mark = mark
        except (OSError, StorageError):
            pass

    def _release_reserved(self) -> None:
        """Cut the reserved space off, so that a closed history is its lines and nothing else.
        Only when everything written is durable: a cut must not be the one change a crash keeps
        of a file whose last facts it loses. A failure leaves NUL bytes that every reader skips."""
        if self._fd is None or self._reserved_end <= self._size or self._unsynced_from is not None \
                or self._dirty:
            return
        # Not synced: every fact is durable already, and NUL bytes left by a crash before the
        # cut reaches the disk read as reserved space. (On ext4 the close's host.jsonl sync
        # commits the cut anyway; its own fdatasync cost ~0.3 ms a run.)
        try:
            os.ftruncate(self._fd, self._size)
            self._reserved_end = self._size
        except OSError:
            pass

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # -- reading --------------------------------------------------------------------------------

    @property
    def head(self) -> str | None:
        """The hash of the last verified fact."""
        self.verify()
        return self._facts[-1]["hash"] if self._facts else None

    @property
    def ended(self) -> bool:
        self.verify()
        return bool(self._facts) and self._facts[-1]["kind"] == "End"

    @property
    def torn_tail(self) -> TornTail | None:
        self.verify()
        return self._torn_tail

    @torn_tail.setter
    def torn_tail(self, value: TornTail | None) -> None:
        self._torn_tail = value

    def __len__(self) -> int:
        self.verify()
        return len(self._facts)

    def facts(self) -> list[dict]:
        """The verified facts, as stored (large values as `<field>_ref`). Do not mutate them."""
        self.verify()
        return list(self._facts)

    def holes(self) -> dict[tuple[int, str], str]:
        """Every recorded hole: (fact n, field) -> the value's hash."""
        self.verify()
        return dict(self._holes)

    def value(self, fact: dict | int, field: str) -> Any:
        """The value of `field` in a fact (given as the fact or its number): inline, or loaded
        from values/ and checked against its hash. Raises Hole for a hole, StorageError for a
        missing or damaged value file, KeyError when the fact has no such field."""
        stored = self.fact(fact if isinstance(fact, int) else fact["n"])
        if field in stored:
            return stored[field]
        ref = stored.get(field + "_ref")
        if ref is None:
            raise KeyError(f"fact {stored['n']} has no {field}")
        n = stored["n"]
        if (n, field) in self._holes:
            raise Hole(n, field, ref)
        return read_value(self.path, ref, field, n)

    def verify_files(self) -> None:
        """Check every value file a fact refers to (unless a recorded hole) and every module
        source Start names against its hash, as reading them would; raises StorageError for the
        first that is missing or damaged. For a caller that will read none of them but must not
        report a damaged record as sound (resume of a run that has ended)."""
        self.verify()
        verify_referenced(self, self._refs, self._holes, self._facts, HISTORY)

    def source(self, hash: str) -> str:
        """A stored module source, checked against its hash."""
        return read_source(self.path, hash)

    def _read_host_records(self) -> list[dict]:
        """Every complete host record, in order (a torn last line is left out); each read of
        host.jsonl ~10 ms at 100,000 calls (`HostRecordsKept`)."""
        return read_host_from_mark(self.path, with_times=False)[1].records

    def appender_active(self) -> bool | None:
        """Whether another open file description holds the appender's lock (a shared-lock probe)."""
        return appender_holds(os.path.join(self.path, HISTORY))

    def stored_head(self) -> tuple[str | None, bool] | None:
        return history_tail(os.path.join(self.path, HISTORY))
    def refresh(self) -> list[dict] | None:
        """Read on (a read-only RunLog): verify what was appended since the store was opened or
        last refreshed, by any process, and return the new facts (their host records, holes
        and times, are read on too). Two `stat`s when nothing changed; otherwise only the bytes
        after what was read. A file's modification time has a coarse clock, so one modified in
        the last RECENT_NS is read again even if it looks the same. None when the files were
        cut or replaced under it (a failed sync removed facts it saw, an archive): open the run
        again. Damage raises
        StorageError; a torn last line is left for the next refresh."""
        if self.for_append:
            raise ValueError("refresh reads on a read-only RunLog; an appender knows its facts")
        self.verify()
        seen = _stat_run(self.path)
        if seen == self._seen and time.time_ns() - max(seen[1], seen[3]) > RECENT_NS:
            return []
        replaced = self._seen is not None and self._seen[4] != seen[4]
        self._seen = seen
        history_size, host_size = seen[0], seen[2]
        if replaced or history_size < self._size or host_size < self._host_size:
            return None
        try:
            with open(os.path.join(self.path, HISTORY), "rb") as handle:
                handle.seek(self._size)
                tail = handle.read()
            if host_size > self._host_size:
                with open(os.path.join(self.path, HOST), "rb") as handle:
                    handle.seek(self._host_size)
                    host_tail = handle.read()
            else:
                host_tail = b""
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=self.path) from problem
        if host_tail:
            self._read_host_on(host_tail)
        last = self._facts[-1]
        reader = _HistoryReader(tail, self.run_id, None, None)
        reader.facts, reader.prev, reader.ended = [last], last["hash"], last["kind"] == "End"
        reader.read()
        if reader.error is not None:
            raise reader.error
        new = reader.facts[1:]
        self._facts.kept.extend(new)
        for index in reader.referring:
            self._index_refs(reader.facts[index])
        self.torn_tail = None if reader.torn is None else TornTail(self._size + reader.torn.offset,
                                                                   reader.torn.length)
        self._size += reader.pos
        return new

    def _read_host_on(self, data: bytes) -> None:
        """The host records appended after those read: their chain, holes, times and marks."""
        parsed = _parse_host(data, head=self._host_head, chained=self._host_head is not None,
                             line_no=self._host_lines)
        for record in parsed.records:
            if record["kind"] == "hole":
                n, field, ref = record.get("fact"), record.get("field"), record.get("ref")
                position = self._facts.index_of(n)
                if not isinstance(field, str) or not isinstance(ref, str) or \
                        (position is not None and self._facts[position].get(field + "_ref") != ref):
                    raise StorageError("a hole record does not match its fact", n, component=HOST)
                self._holes[(n, field)] = ref
        self._known_times.update(parsed.times)
        if parsed.durable is not None:
            self._durable_mark = (parsed.durable["facts"], parsed.durable["head"])
        self._host_size += parsed.valid_len
        self._host_head = parsed.head
        self._host_lines = parsed.lines

    # -- appending ------------------------------------------------------------------------------

    def _require_writable(self) -> None:
        if not self.for_append or self._fd is None:
            raise ValueError(f"run {self.run_id} is not open for appending")

    def append(self, kind: str, fields: dict, *, sync: bool = True) -> dict:
        """Write one fact durably and return it as stored.

        `sync=False` writes it (visible to readers, and kept if this process dies) without
        waiting for the disk: it becomes durable with the next synced write or `sync()`, and if
        that sync fails it is removed with the rest of what was not durable. For a fact whose
        consequences stay inside the host until then (see docs/trace.md, section 9)."""
        if not self.for_append:
            self._require_writable()
        with self._lock:
            if self._fd is None:
                raise ValueError(f"run {self.run_id} is not open for appending")
            last = self._facts.kept[-1]  # a store always keeps its newest fact
            blobs: dict[str, bytes] = {}
            fact, line = build_fact(kind, fields, last["n"] + 1, last["hash"], last["kind"] == "End", blobs,
                                    self.inline_limit)
            self._commit((fact,), line, blobs, sync)
            return fact

    def sync(self, *, times: bool = True) -> None:
        """Make every fact written so far durable (nothing to do when they are), and record
        their times (unless not `times`). On failure the facts that were not durable are cut
        from the history and StorageError is raised."""
        self._sync_facts()
        if times and self._times and self._fd is not None:
            with self._lock:
                self._record_times()

    def _sync_facts(self) -> None:
        if self._unsynced_from is not None:
            with self._lock:
                if self._unsynced_from is not None and self._fd is not None:
                    self._sync_history(self._facts.kept[-1]["n"])

    @property
    def synced(self) -> bool:
        """Whether every fact written is durable."""
        return self._unsynced_from is None

    def append_many(self, items: Sequence[tuple[str, dict]], *, sync: bool = True) -> list[dict]:
        """Write several facts with one write and one fsync (group commit): all or none.
        `sync` as for `append`."""
        if not self.for_append:
            self._require_writable()
        with self._lock:
            if self._fd is None:
                raise ValueError(f"run {self.run_id} is not open for appending")
            last = self._facts.kept[-1]
            n = last["n"]
            prev = last["hash"]
            ended = last["kind"] == "End"
            blobs: dict[str, bytes] = {}
            facts: list[dict] = []
            lines: list[bytes] = []
            for kind, fields in items:
                n += 1
                fact, line = build_fact(kind, fields, n, prev, ended, blobs, self.inline_limit)
                facts.append(fact)
                lines.append(line)
                prev = fact["hash"]
                ended = kind == "End"
            if not facts:
                return []
            self._commit(facts, lines[0] if len(lines) == 1 else b"".join(lines), blobs, sync)
            return facts

    def _commit(self, facts: Sequence[dict], data: bytes, blobs: dict[str, bytes], sync: bool = True) -> None:
        """Write `facts`, whose lines are `data`, and take them as the history's newest."""
        first = facts[0]["n"]
        if blobs:
            write_values(self.path, blobs, self._known_blobs, first, self._fsync)
        self._write_history(data, first)
        # Accepted now: the time is recorded once these facts are durable (`_record_times`).
        now = time.time_ns() // 1_000_000
        times = self._times
        if not times:
            self._times_from = first
        kept = self._facts.kept
        if len(facts) == 1:
            times.append(now)
            kept.append(facts[0])
        else:
            times.extend([now] * len(facts))
            kept.extend(facts)
        if len(kept) >= shelving.SHELVE_AT and self._lines is not None:
            self._shelve()
        if blobs:  # a value went by reference
            for fact in facts:
                self._index_refs(fact)
        if sync:
            self._sync_history(first)
            if now - self._times_recorded >= TIMES_EVERY_MS:
                self._record_times()

    def _shelve(self) -> None:
        """Leave all but the newest `shelving.KEEP` facts to history.jsonl (`flowrt.store.shelf`): never
        one a failed sync could still cut. A failure to find their lines leaves them held, and
        this store stops shelving (its facts are as sound as before: only its memory grows)."""
        shelf = self._facts
        count = len(shelf.kept) - shelving.KEEP
        if self._unsynced_from is not None:  # (and the last durable one stays: the head after a cut)
            count = min(count, self._unsynced_from[0] - 1 - shelf.base)
        if count < 2:
            return
        try:
            self._lines.note(count, shelf.base, self._size)
        except StorageError:
            self._lines = None
            return
        shelf.shelve(count)

    def _record_times(self) -> None:
        """Record when the facts written since the last such record were accepted, in one
        `times` host record written without fsync: it becomes durable with the next host record
        that is synced (or at close), so a machine crash can lose the times of the last facts,
        never a fact (docs/trace.md section 7). Called once the facts it names are durable, so it
        never names a fact that a failed sync removes. A failure to write it loses those times
        only: they are never worth failing a run for."""
        if not self._times:
            return
        record = {"kind": "times", "from": self._times_from, "at": self._times}
        self._times = []
        self._times_recorded = record["at"][-1]
        try:
            self._write_host(record, sync=False)
        except StorageError:
            return
        first = record["from"]
        self._known_times.put(first, record["at"])

    def fact_times(self) -> dict[int, int]:
        """Fact n -> the Unix time in milliseconds at which this store accepted it, for the facts
        whose time is known (recorded in host.jsonl, or written by this RunLog)."""
        self.verify()
        if self._times_marked:
            # (the times before the archive's mark, read and verified now: the open skipped them)
            whole = read_host(self.path)[1]
            if whole.valid_len < self._times_marked:
                # What the archive synced and verified cannot be a torn tail: damage.
                raise StorageError("a times record before the archive's mark is damaged", component=HOST)
            whole.times.update(self._known_times.as_dict())
            self._known_times = KnownTimes(whole.times)
            self._times_marked = 0
        times = self._known_times.as_dict()
        for offset, ms in enumerate(self._times):
            times[self._times_from + offset] = ms
        return times

    def _index_refs(self, fact: dict) -> None:
        index_refs(self._refs, fact)

    def _write_history(self, data: bytes, fact_n: int) -> None:
        """Write whole lines (or nothing: a failed write is cut back off); not synced here."""
        fd = self._fd
        start = self._size
        if self._dirty:
            try:
                os.ftruncate(fd, start)
                self._dirty = False
                self._reserved_end = start
            except OSError as problem:
                raise StorageError(f"cannot remove an earlier failed write: {_strerror(problem)}",
                                   fact_n, component=HISTORY) from problem
        end = start + len(data)
        unsynced = self._unsynced_from
        if unsynced is not None and end - unsynced[1] > durable._TEAR_WINDOW:
            self._sync_history(fact_n)  # keep what may tear within the window
        try:
            if self._fsync and (end > self._reserved_end or len(data) > durable._TEAR_WINDOW):
                self._reserve(start, end)
            if os.pwrite(fd, data, start) != len(data):  # (all of it, nearly always: one call)
                _pwrite_all(fd, data, start)
        except BaseException as problem:
            # Leave no partial line visible: cut the file back to the last good fact.
            try:
                os.ftruncate(fd, start)
                self._reserved_end = start
                if self._fsync:
                    os.fsync(fd)
            except OSError:
                self._dirty = True
            if isinstance(problem, OSError):
                raise StorageError(f"cannot append: {_strerror(problem)}", fact_n,
                                   component=HISTORY) from problem
            raise
        if self._fsync and self._unsynced_from is None:
            self._unsynced_from = (len(self._facts), start)
        self._size = end
        if end > self._reserved_end:
            self._reserved_end = end

    def _reserve(self, start: int, end: int) -> None:
        """Make room for facts up to `end` (written from `start`) in reserved space: NUL bytes
        written past the facts and made durable with the next sync. A fact written over them
        then changes no metadata, so its `fdatasync` flushes the data alone instead of also
        committing the file system's journal for a new size: about a third cheaper per sync on
        ext4 (scripts/bench/store_append.py). The space grows with the history (from
        durable._RESERVE_MIN up to durable._RESERVE_MAX at a time) and is cut off when the store closes.

        What this changes after a machine crash: facts written over reserved space and not yet
        synced may reach the disk in any order of pages, so zeros may stand in any of them, not
        only at the end. At most durable._TEAR_WINDOW bytes are ever unsynced there, and the reader takes
        an unparsable line holding a NUL within that many bytes of the end as the start of a torn
        tail (docs/trace.md, sections 9 and 10). A write larger than the window is appended past
        the end of the file instead, as without reserved space.

        Reserving is an optimisation: if it fails (a full disk), the facts are appended as they
        would be without it."""
        fd = self._fd
        if end - start > durable._TEAR_WINDOW:
            if self._reserved_end > start:
                os.ftruncate(fd, start)  # a failure here is the write's own failure
                self._reserved_end = start
            return
        room = durable._RESERVE_FIRST if start == 0 else min(max(end >> 3, durable._RESERVE_MIN), durable._RESERVE_MAX)
        new_end = end + room
        at = max(self._reserved_end, start)
        try:
            _pwrite_all(fd, bytes(new_end - at), at)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass  # NULs past the facts are reserved space to any reader
            self._reserved_end = start
            return
        self._reserved_end = new_end

    def _sync_history(self, fact_n: int) -> None:
        """Sync history.jsonl. If the disk fails, cut it back to what was durable before. An
        interrupt (KeyboardInterrupt) leaves the written facts written, still to be synced: the
        write succeeded, and the halt that follows syncs what the run reached."""
        unsynced = self._unsynced_from
        if unsynced is None:
            return
        try:
            durable._sync_appended(self._fd)
        except OSError as problem:
            count, size = unsynced
            try:
                os.ftruncate(self._fd, size)
                self._reserved_end = size
                os.fsync(self._fd)
            except OSError:
                self._dirty = True
            self._size = size
            self._unsynced_from = None
            if len(self._facts) > count:
                first_cut = self._facts[count]["n"]
                self._facts.cut(count)
                if self._open_calls_upto > count:
                    self._open_calls = None  # (it took a fact cut)
                del self._times[max(0, first_cut - self._times_from):]
                for users in self._refs.values():
                    users.difference_update([u for u in users if u[0] >= first_cut])
            raise StorageError(f"cannot append: {_strerror(problem)}", fact_n,
                               component=HISTORY) from problem
        self._unsynced_from = None

    # -- sources --------------------------------------------------------------------------------

    def put_source(self, text: str) -> str:
        """Store a module source (once, by hash) durably; returns `"sha256:<hex>"`."""
        self._require_writable()
        with self._lock:
            return put_source(self.path, text, fsync=self._fsync, sync_dir=True)

    def host_record(self, record: dict) -> dict:
        """Append a host record (a JSON object with a text `kind`) to host.jsonl, durably."""
        return self.host_records_many([record])[0]

    def host_record_soon(self, record: dict) -> None:
        """Queued, and written as the first record of the next unit of synced records (a run's
        `sandbox` report, written after its End, so goes out with the close's `durable` mark:
        one fsync fewer a run)."""
        self._require_writable()
        check_host_record(record)
        with self._lock:
            self._soon.append(record)

    def host_records_many(self, records: Sequence[dict]) -> list[dict]:
        """Append host records to host.jsonl in one write and one fsync (as `host_record` each,
        in order): a run's start writes several. A crash can tear the write anywhere, so each
        record of such a write says how many bytes before it the write began (`batch`, read by
        `host_records._unsynced_tail`, docs/trace.md section 10)."""
        self._require_writable()
        records = list(records)
        for record in records:
            check_host_record(record)
        if not records:
            return []
        self._sync_facts()  # a record names the head: the facts up to it are durable first
        with self._lock:
            self._write_host_many(records)
        return records

    def _open_host(self, *, sync_dir: bool = True) -> None:
        if self._host_fd is None:
            path = os.path.join(self.path, HOST)
            existed = os.path.exists(path)
            try:
                self._host_fd = os.open(
                    path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                if not existed and self._fsync and sync_dir:
                    _fsync_dir(self.path)
            except OSError as problem:
                raise StorageError(f"cannot open: {_strerror(problem)}", component=HOST) from problem

    def _write_host(self, record: dict, *, sync: bool = True) -> None:
        """Append one chained record. `sync=False` (only `times` records) leaves it to the next
        synced record, unless that would leave more than TIMES_WINDOW bytes unsynced. A synced
        record after unsynced `times` records is written and synced with them as one unit (it
        says so in `batch`); only when that unit would exceed TIMES_WINDOW are they synced first.
        So only the last lines of host.jsonl are ever unsynced, and within TIMES_WINDOW of the
        end (docs/trace.md section 10)."""
        if sync:
            self._write_host_many([record])
            return
        line, digest = chain_record(record, self._host_head)
        self._append_host(line, digest, sync=not self._fsync or self._host_unsynced + len(line) > TIMES_WINDOW)

    def _write_host_many(self, records: list[dict]) -> None:
        """Write synced records in as few units (one write, one fsync each) as TIMES_WINDOW
        allows; each unit's records after its first byte carry `batch`: the bytes of the unit
        before them, so a reader knows a damaged line there is part of this unsynced write."""
        unit: list[bytes] = []
        unit_size = self._host_unsynced if self._fsync else 0
        head = self._host_head
        pending = self._soon + list(records)
        self._soon = []
        while pending:
            record = pending[0]
            line, digest = chain_record(record, head)
            if self._fsync and (unit_size or len(pending) > 1 or unit):
                line, digest = chain_record(dict(record, batch=unit_size), head)
            if unit_size and unit_size + len(line) > TIMES_WINDOW:
                # Too much for one tear window: make what is written durable, start anew.
                if unit:
                    self._append_host(b"".join(unit), head, sync=True)
                else:
                    self._sync_host()
                unit, unit_size = [], 0
                continue
            unit.append(line)
            unit_size += len(line)
            head = digest
            pending.pop(0)
        self._append_host(b"".join(unit), head, sync=True)

    def _sync_host(self) -> None:
        self._open_host()
        try:
            os.fsync(self._host_fd)
        except OSError as problem:
            raise StorageError(f"cannot append a host record: {_strerror(problem)}",
                               component=HOST) from problem
        self._host_unsynced = 0

    def _append_host(self, data: bytes, head: str, *, sync: bool) -> None:
        """Write whole lines (cut back off if the write or its sync fails), synced or not."""
        self._host_listed = None  # (read from the file from now on)
        self._open_host()
        fd = self._host_fd
        start = self._host_size
        try:
            if self._host_dirty:
                os.ftruncate(fd, start)
                self._host_dirty = False
            _write_all(fd, data)
            if self._fsync and sync:
                os.fsync(fd)
                self._host_unsynced = 0
            elif self._fsync:
                self._host_unsynced += len(data)
        except BaseException as problem:
            try:
                os.ftruncate(fd, start)
            except OSError:
                self._host_dirty = True
            if isinstance(problem, OSError):
                raise StorageError(f"cannot append a host record: {_strerror(problem)}",
                                   component=HOST) from problem
            raise
        self._host_size = start + len(data)
        self._host_head = head

    # -- archive and redaction ------------------------------------------------------------------

    def archive(self) -> int:
        """Move the facts between Start and the latest checkpoint aside, into archive/: resume and
        replay start at the latest checkpoint and never read them. The chain stays verifiable:
        archive/anchor.json names the last archived fact and its hash, and the archived lines are
        kept, in order, in archive/facts-<first>-<last>.jsonl. Returns how many facts moved.

        Crash-safe: the archived lines and the anchor are durable before history.jsonl is
        replaced (atomically, by rename); a history that still holds the archived facts reads as
        before."""
        self._require_writable()
        self.sync()
        with self._lock:
            facts = self._facts
            latest = facts.latest_checkpoint()
            if latest is None or latest <= 1:
                return 0
            kept, size, checkpoints = write_archive(self.path, facts, latest, self.archived_checkpoints)
            history = os.path.join(self.path, HISTORY)
            # Append to the new file from now on (the old descriptor names the replaced one).
            old = self._fd
            self._fd = os.open(history, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            if not _lock_for_append(self._fd):  # only a reader's probe can hold the new file
                raise StorageError("cannot archive: the new history stayed locked", component=HISTORY)
            if old is not None:
                os.close(old)
            self._lines = HistoryLines(self.path)
            self._facts = FactShelf(kept, self._lines)
            self._open_calls = None  # (its indexes were those of the facts before)
            self._size = self._reserved_end = size
            self.archived_checkpoints = checkpoints
            self._mark_host()
            return latest - 1

    def _mark_host(self) -> None:
        """Verify host.jsonl as written so far and record the mark later opens verify from
        (`flowrt.store.host_mark`); synced first, so that no crash can leave less than it covers."""
        if self._host_dirty or not self._host_size:
            return  # (bytes of a failed write past the records: without a mark, opens read it whole)
        self._sync_host()
        data, _ = read_host(self.path, parse=False)
        host = _parse_host(data[:self._host_size], with_times=False)
        if host.head != self._host_head or host.valid_len != self._host_size:
            raise StorageError("host.jsonl is not what this store wrote", component=HOST)
        write_host_mark(self.path, data, host)

    def redact(self, n: int, field: str | None = None) -> list[dict]:
        """Make the stored value of `field` of fact `n` (every value field of the fact when
        `field` is None) a hole: record `{"kind": "hole", "fact", "field", "ref"}` in host.jsonl,
        then delete the value file unless an unredacted fact still refers to the same content.
        The fact itself, and so the hash chain, does not change.

        Only a value stored by reference (in values/) can become a hole. An inline value is part
        of its fact's hashed line, so removing it would break the chain: that raises
        RedactRefused, and nothing is changed. A host that must be able to redact every value
        creates its runs with `inline_limit=0`. Returns the hole records written (none for
        values that were already holes)."""
        self._require_writable()
        fact = self.fact(n)
        fields = redaction_fields(fact, field)
        written = []
        with self._lock:
            directory = os.path.join(self.path, VALUES)
            removed = False
            for f in fields:
                if (n, f) in self._holes:
                    continue
                ref = fact[f + "_ref"]
                record = {"kind": "hole", "fact": n, "field": f, "ref": ref}
                self._write_host(record)
                self._holes[(n, f)] = ref
                written.append(record)
                removed |= self._drop_if_unused(ref[len("sha256:"):])
            if removed and self._fsync:
                try:
                    _fsync_dir(directory)
                except OSError as problem:
                    raise StorageError(f"cannot sync values/: {_strerror(problem)}",
                                       component=VALUES) from problem
        return written

    def _drop_if_unused(self, hex_: str) -> bool:
        users = self._refs.get(hex_, set())
        if any(user not in self._holes for user in users):
            return False
        self._known_blobs.discard(hex_)
        try:
            os.unlink(os.path.join(self.path, VALUES, hex_))
        except FileNotFoundError:
            return False
        except OSError as problem:
            raise StorageError(f"cannot delete: {_strerror(problem)}",
                               component=f"{VALUES}/{hex_}") from problem
        return True


class DirectoryStore(Store):
    """A runs root on a file system: one directory per run under `root`."""

    def __init__(self, root: str) -> None:
        self.root = os.fspath(root)

    def create(self, run_id: str, start_fields: dict, *, sources: Iterable[str] = (),
               durability: str = "fsync", inline_limit: int = INLINE_LIMIT) -> RunStore:
        return RunStore.create(self.root, run_id, start_fields, sources=sources,
                               durability=durability, inline_limit=inline_limit)

    def open(self, run_id: str, *, for_append: bool, durability: str = "fsync",
             inline_limit: int | None = None, defer: bool = False) -> RunStore:
        return RunStore.open(self.root, run_id, for_append=for_append, durability=durability,
                             inline_limit=inline_limit, defer=defer)

    def scan(self, *, limit: int = 50, after: str | None = None) -> dict:
        return scan_runs(self.root, limit=limit, after=after)

    def read_image(self, run_id: str):
        from flowrt.store.image import read_directory_image

        return read_directory_image(self, run_id)

    def write_image(self, run_id: str, image) -> None:
        from flowrt.store.image import write_directory_image

        write_directory_image(self, run_id, image)

    @staticmethod
    def _check_run_id(run_id: str) -> None:
        RunStore._check_run_id(run_id)
