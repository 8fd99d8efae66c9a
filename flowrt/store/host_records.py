"""Reading host.jsonl: the host's own records, chained as facts are (docs/trace.md section 7)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from flowrt.store.canonical import _NotCanonical, _NotJSON, canonical_bytes, loads_canonical
from flowrt.store.chain import _sha256_hex, fact_position
from flowrt.store.durable import _read_file, _strerror
from flowrt.store.errors import StorageError, TornTail
from flowrt.store.format import _HASH_RE, STORE_RECORDS
from flowrt.store.layout import HOST

#: At most this many bytes of `times` records are written to host.jsonl without an fsync: a
#: machine crash can leave those in any state, so a reader takes damage within this many bytes of
#: the end, followed only by damage and `times` records, for a torn tail (docs/trace.md section 10).
TIMES_WINDOW = 64 << 10


@dataclass(slots=True)
class _Host:
    """host.jsonl as read: its records (without `prev` and `hash`; `times` records only as
    `times`), the bytes of its complete
    lines, a torn last line, the hash of the last record (what the next one chains to), and the
    latest `durable` record (the facts a store had made durable when it last closed the run or
    opened it for appending)."""

    records: list[dict]
    valid_len: int
    torn: TornTail | None
    head: str | None
    durable: dict | None
    #: fact n -> Unix milliseconds at which storage accepted it, from the `times` records
    times: dict[int, int]
    lines: int  # complete lines read (for numbering the lines of a read that goes on from here)
    #: whether the last complete line is a `times` record (which a store may have left unsynced)
    times_last: bool = False


def check_host_record(record: object) -> None:
    """ValueError unless `record` is one a host may write: a dict with a text `kind` that is
    not one of the store's own, without the keys the store adds (`prev`, `hash`, `batch`)."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise ValueError("a host record is a dict with a text `kind`")
    if record["kind"] in STORE_RECORDS:
        raise ValueError(f"host records of kind {record['kind']!r} are written by the store")
    if "prev" in record or "hash" in record or "batch" in record:
        raise ValueError("`prev`, `hash` and `batch` of a host record are the store's (its chain)")


def _whole_record(data: bytes) -> bool:
    """Whether `data` is a whole host record. A lost write of the last record can leave zeros in
    it, but never a whole record before them unless it was written in the same unsynced write:
    otherwise a record, a NUL and more is two records joined by a damaged newline (damage)."""
    try:
        return isinstance(loads_canonical(data), dict)
    except ValueError:
        return False


#: How a record begins that may be torn by a crash: a `times` record (written unsynced), and a
#: record of a batch (written with others in one write); canonical JSON sorts keys.
_UNSYNCED_HEADS = (b'{"at":[', b'{"batch":')


def _unsynced_tail(data: bytes, pos: int) -> bool:
    """Whether the bytes from `pos` (a line that does not parse and holds a NUL) can be what a
    machine crash left of the last unsynced write: within TIMES_WINDOW of the end, and every line
    from there on damaged (a NUL), a whole `times` record (written without fsync), or a record
    whose `batch` says its write began at or before `pos` (written with the lines before it, in
    one write and one fsync). A record synced on its own after the damage means the damage was
    on disk already: damage, not a tear."""
    size = len(data)
    if size - pos > TIMES_WINDOW:
        return False
    newline = data.find(b"\n", pos)
    first = data[pos:newline if newline >= 0 else size]
    before = first[:first.index(b"\0")]
    if _whole_record(before) and not _unsynced_with(before, pos, pos):
        return False  # a synced record, then a damaged newline: damage
    if not any(before.startswith(head) or head.startswith(before) for head in _UNSYNCED_HEADS):
        # What the zeros left of it was neither a `times` record nor part of a batch (canonical
        # JSON puts `at`, or `batch`, first): a record synced alone, whose bytes a crash keeps.
        return False
    start = newline + 1
    while newline >= 0:
        newline = data.find(b"\n", start)
        if newline < 0:
            break  # (after the last newline: a write cut short, whatever it holds)
        line = data[start:newline]
        if b"\0" not in line and not _unsynced_with(line, start, pos):
            return False
        start = newline + 1
    return True


def _unsynced_with(line: bytes, start: int, pos: int) -> bool:
    """Whether the record `line` (at offset `start`) may have been written unsynced, or in
    the same write as the bytes at `pos`: a `times` record, or one whose `batch` reaches `pos`."""
    try:
        obj = loads_canonical(line)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    batch = obj.get("batch")
    return obj.get("kind") == "times" or (type(batch) is int and 0 <= batch and start - batch <= pos)


def _take_times(obj: dict, times: dict[int, int], line_no: int) -> None:
    first, at = obj.get("from"), obj.get("at")
    # (checked and taken in C: a run's host.jsonl holds a time per fact, read at every open)
    if type(first) is not int or first < 1 or type(at) is not list or not at \
            or set(map(type, at)) != {int} or min(at) < 0 or max(at) >= 1 << 63:
        raise StorageError(f"line {line_no}: a times record lacks from or at", component=HOST)
    times.update(zip(range(first, first + len(at)), at))


def _parse_host(data: bytes, *, head: str | None = None, chained: bool = False, line_no: int = 0,
                durable: dict | None = None, with_times: bool = True) -> _Host:
    """Host records: canonical JSON objects with a text `kind`, one a line, chained as facts are
    (`prev`, `hash`); a torn last line is ignored (and reported). Raises StorageError for any
    other damage. Records written before host records were chained (no `prev` nor `hash`) are
    read as they are, but only as a prefix: the first chained record's `prev` is the SHA-256 of
    that prefix, and every record after it is chained.
    (`head`, `chained`, `line_no`, `durable`: where an earlier read of the bytes before `data`
    left off, for reading on from there.)"""
    records: list[dict] = []
    times: dict[int, int] = {}
    times_last = False
    pos = 0
    size = len(data)
    while pos < size:
        newline = data.find(b"\n", pos)
        if newline < 0:
            break
        line_no += 1
        try:
            obj = loads_canonical(data[pos:newline])
        except _NotJSON:
            line = data[pos:newline]
            if b"\0" in line and ((newline + 1 == size and not _whole_record(line[:line.index(b"\0")]))
                                  or _unsynced_tail(data, pos)):
                line_no -= 1  # (the torn line is not one of the records read)
                break
            raise StorageError(f"line {line_no} is not JSON", component=HOST) from None
        except _NotCanonical:
            raise StorageError(f"line {line_no} is not canonical JSON", component=HOST) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            raise StorageError(f"line {line_no} is not a record with a kind", component=HOST)
        if "hash" in obj or "prev" in obj or chained:
            expected = head if chained or pos == 0 else "sha256:" + _sha256_hex(data[:pos])
            if obj.get("prev", False) != expected:
                raise StorageError(f"line {line_no}: `prev` does not match the previous record "
                                   "(broken chain)", component=HOST)
            claimed = obj.pop("hash", None)
            if not isinstance(claimed, str) or "sha256:" + _sha256_hex(canonical_bytes(obj)) != claimed:
                raise StorageError(f"line {line_no}: the record's content does not match its hash",
                                   component=HOST)
            del obj["prev"]
            obj.pop("batch", None)  # (the store's: where the write that held it began)
            head, chained = claimed, True
        if obj["kind"] == "durable":
            if type(obj.get("facts")) is not int or obj["facts"] < 1 or not isinstance(obj.get("head"), str) \
                    or not _HASH_RE.match(obj["head"]):
                raise StorageError(f"line {line_no}: a durable record lacks facts or head", component=HOST)
            durable = obj
        elif obj["kind"] == "times":
            # (read into `times`, not listed: one a sync would swamp the records that say things;
            # a caller that wants the records only skips them: their hashes are checked anyway)
            if with_times:
                _take_times(obj, times, line_no)
            pos = newline + 1
            times_last = True
            continue
        times_last = False
        records.append(obj)
        pos = newline + 1
    if not chained and pos:
        head = "sha256:" + _sha256_hex(data[:pos])
    return _Host(records, pos, TornTail(pos, size - pos) if pos < size else None, head, durable, times, line_no, times_last)



def read_host(run_path: str, *, with_times: bool = True, parse: bool = True) -> tuple[bytes, _Host | None]:
    """host.jsonl of the run directory at `run_path`, as bytes and as read (empty when absent);
    without `with_times`, the `times` records are chained and hashed but not read into times;
    without `parse`, only the bytes (and None)."""
    try:
        data = _read_file(os.path.join(run_path, HOST))
    except FileNotFoundError:
        data = b""
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
    return data, _parse_host(data, with_times=with_times) if parse else None


def holes_and_limit(records: list[dict], facts: list[dict], component: str) -> tuple[dict[tuple[int, str], str], int | None]:
    """What a run's host records say of its facts, for any store: its holes ((fact n, field) ->
    hash), each checked against the fact it names, and the inline limit recorded at its
    creation (None when it used the default). StorageError for a hole record that does not fit."""
    holes: dict[tuple[int, str], str] = {}
    recorded_limit = None
    for record in records:
        if record["kind"] == "store" and type(record.get("inlineLimit")) is int:
            recorded_limit = record["inlineLimit"]
        elif record["kind"] == "hole":
            n, field, ref = record.get("fact"), record.get("field"), record.get("ref")
            if type(n) is not int or not isinstance(field, str) or not isinstance(ref, str):
                raise StorageError("a hole record lacks fact, field or ref", component=component)
            position = fact_position(facts, n)
            if position is not None:
                if facts[position].get(field + "_ref") != ref:
                    raise StorageError(f"a hole record names {field} of fact {n}, which does "
                                       f"not refer to {ref}", n, component=component)
                holes[(n, field)] = ref
    return holes, recorded_limit
