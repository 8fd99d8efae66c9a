"""Reading host.jsonl: the host's own records, chained as facts are (docs/trace.md section 7)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from flowrt.store.canonical import _NotCanonical, _NotJSON, canonical_bytes, loads_canonical
from flowrt.store.chain import _sha256_hex, fact_position
from flowrt.store.durable import _read_file, _strerror
from flowrt.store.errors import StorageError, TornTail
from flowrt.store.format import _HASH_RE
from flowrt.store.layout import HOST


@dataclass(slots=True)
class _Host:
    """host.jsonl as read: its records (without `prev` and `hash`), the bytes of its complete
    lines, a torn last line, the hash of the last record (what the next one chains to), and the
    latest `durable` record (the facts a store had made durable when it last closed the run or
    opened it for appending)."""

    records: list[dict]
    valid_len: int
    torn: TornTail | None
    head: str | None
    durable: dict | None


def _whole_record(data: bytes) -> bool:
    """Whether `data` is a whole host record. A lost write of the last record can leave zeros in
    it, but never a whole record before them: each record is written and synced alone, so a
    record, a NUL and more is two records joined by a damaged newline (damage, not a tear)."""
    try:
        return isinstance(loads_canonical(data), dict)
    except ValueError:
        return False


def _parse_host(data: bytes) -> _Host:
    """Host records: canonical JSON objects with a text `kind`, one a line, chained as facts are
    (`prev`, `hash`); a torn last line is ignored (and reported). Raises StorageError for any
    other damage. Records written before host records were chained (no `prev` nor `hash`) are
    read as they are, but only as a prefix: the first chained record's `prev` is the SHA-256 of
    that prefix, and every record after it is chained."""
    records: list[dict] = []
    pos = 0
    size = len(data)
    line_no = 0
    head: str | None = None
    chained = False
    durable = None
    while pos < size:
        newline = data.find(b"\n", pos)
        if newline < 0:
            break
        line_no += 1
        try:
            obj = loads_canonical(data[pos:newline])
        except _NotJSON:
            line = data[pos:newline]
            if newline + 1 == size and b"\0" in line and not _whole_record(line[:line.index(b"\0")]):
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
            head, chained = claimed, True
        if obj["kind"] == "durable":
            if type(obj.get("facts")) is not int or obj["facts"] < 1 or not isinstance(obj.get("head"), str) \
                    or not _HASH_RE.match(obj["head"]):
                raise StorageError(f"line {line_no}: a durable record lacks facts or head", component=HOST)
            durable = obj
        records.append(obj)
        pos = newline + 1
    if not chained and pos:
        head = "sha256:" + _sha256_hex(data[:pos])
    return _Host(records, pos, TornTail(pos, size - pos) if pos < size else None, head, durable)



def read_host(run_path: str) -> tuple[bytes, _Host]:
    """host.jsonl of the run directory at `run_path`, as bytes and as read (empty when absent)."""
    try:
        data = _read_file(os.path.join(run_path, HOST))
    except FileNotFoundError:
        data = b""
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
    return data, _parse_host(data)


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
