"""The host-record mark: what `flow archive` verified of host.jsonl, so that later opens verify
only what follows it (docs/trace.md section 10, "Archive: the host-record mark").

A run's host.jsonl holds a `times` record for about every 50 ms of appends, so it grows with the
run as the history does; archive moves facts aside, but host records stay where they are (their
chain runs through them). Verifying that chain on every open made a resume after 100,000 archived
facts cost more than one after 1,000. At archive, the store verifies host.jsonl up to its end and
writes archive/host-mark.json: `{"head", "last", "lines", "offset", "records", "spans"}`: the
byte offset of the end of the last line it covers, the hash of that line's record and where that
line begins, the number of lines, where the lines that are not `times` records are (`[start,
end]` byte offsets), and the SHA-256 of the number of lines and those lines. An open then reads
those lines alone and checks them against `records`, checks that the line at `last` is the record
whose hash is `head`, and reads and verifies the chain from `offset` on: what it reads no longer
grows with the `times` records before the mark. So every record that says anything (pauses,
halts, holes, durable marks, the inline limit) is still verified on every open; only the `times`
records before the mark are not, until the times are read (`RunLog.fact_times`, which reads
host.jsonl whole) or the run is exported.
"""

from __future__ import annotations

import hashlib
import os
import re

from flowrt.store.canonical import _NotCanonical, _NotJSON, canonical_bytes, loads_canonical
from flowrt.store.durable import _fsync_dir, _read_canonical_file, _strerror, _write_all
from flowrt.store.errors import StorageError, TornTail
from flowrt.store.format import _HASH_RE
from flowrt.store.host_records import _Host, _parse_host, read_host
from flowrt.store.layout import HOST, HOST_MARK


#: A `times` record's line: canonical JSON sorts its keys, so it begins with `at` (a list) and ends
#: with `kind` and `prev`; a string cannot hold the closing quotes unescaped, and a nested object
#: would end with a second brace, so no other record has this shape.
_TIMES_LINE = re.compile(rb'\{"at":\[.*,"kind":"times","prev":"sha256:[0-9a-f]{64}"\}\Z', re.S)


def _record_spans(data: bytes) -> tuple[list[list[int]], int]:
    """Where the lines of `data` (whole lines only) that are not `times` records are, and the
    number of lines."""
    spans: list[list[int]] = []
    lines = 0
    pos = 0
    match = _TIMES_LINE.match
    while True:
        newline = data.find(b"\n", pos)
        if newline < 0:
            return spans, lines
        lines += 1
        if match(data, pos, newline) is None:
            if spans and spans[-1][1] == pos:
                spans[-1][1] = newline + 1  # (adjacent records: one read)
            else:
                spans.append([pos, newline + 1])
        pos = newline + 1


def _record_hash(line: bytes) -> str | None:
    """The hash of the chained record on `line` (without its newline) when its content matches
    it; None otherwise."""
    try:
        obj = loads_canonical(line)
    except (_NotJSON, _NotCanonical):
        return None
    if not isinstance(obj, dict) or "prev" not in obj:
        return None
    claimed = obj.pop("hash", None)
    if not isinstance(claimed, str) or "sha256:" + hashlib.sha256(canonical_bytes(obj)).hexdigest() != claimed:
        return None
    return claimed


def _records_digest(lines: int, records: list[bytes]) -> str:
    """What the mark's `records` is: the SHA-256 of the number of lines (so that it too is
    verified) and the records' lines."""
    return "sha256:" + hashlib.sha256(b"%d\n" % lines + b"".join(records)).hexdigest()


def write_host_mark(run_path: str, data: bytes, host: _Host) -> None:
    """Record the mark for `data`, host.jsonl's first `host.valid_len` bytes as verified (`host`:
    `_parse_host` of them), durable when this returns. Nothing when its last record is not chained
    (a run from before host records were: it is read whole)."""
    covered = data[:host.valid_len]
    last = covered.rfind(b"\n", 0, len(covered) - 1) + 1
    if not covered or _record_hash(covered[last:-1]) != host.head:
        return
    spans, lines = _record_spans(covered)
    mark = {"head": host.head, "last": last, "lines": lines, "offset": len(covered),
            "records": _records_digest(lines, [covered[a:b] for a, b in spans]),
            "spans": spans}
    path = os.path.join(run_path, HOST_MARK)
    temporary = path + ".new"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, canonical_bytes(mark) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        # (renamed into place: a second archive replaces the mark, and a crash meanwhile must
        # leave the old one or the new one, never half of one, which would read as damage)
        os.replace(temporary, path)
        _fsync_dir(os.path.dirname(path))
    except OSError as problem:
        raise StorageError(f"cannot write the host-record mark: {_strerror(problem)}",
                           component=HOST_MARK) from problem


def _read_mark(run_path: str) -> dict | None:
    mark = _read_canonical_file(os.path.join(run_path, HOST_MARK), HOST_MARK, "the host-record mark")
    if mark is None:
        return None
    if not isinstance(mark, dict) or not _well_formed(mark):
        raise StorageError("the host-record mark is not {head, last, lines, offset, records, spans}",
                           component=HOST_MARK)
    return mark


def _well_formed(mark: dict) -> bool:
    if any(type(mark.get(key)) is not int for key in ("last", "lines", "offset")) \
            or not 0 <= mark["last"] < mark["offset"] or mark["lines"] < 1:
        return False
    if any(not isinstance(mark.get(key), str) or not _HASH_RE.match(mark[key]) for key in ("head", "records")):
        return False
    spans, end = mark.get("spans"), 0
    if type(spans) is not list:
        return False
    for span in spans:
        if type(span) is not list or len(span) != 2 or any(type(x) is not int for x in span) \
                or not end <= span[0] < span[1] <= mark["offset"]:
            return False
        end = span[1]
    return True


def _pread(fd: int, start: int, end: int) -> bytes:
    data = os.pread(fd, end - start, start)
    while len(data) < end - start:
        more = os.pread(fd, end - start - len(data), start + len(data))
        if not more:
            break
        data += more
    return data


def read_host_from_mark(run_path: str, *, with_times: bool = True) -> tuple[bytes, _Host, int]:
    """host.jsonl of the run directory at `run_path` as read (`read_host`), verified from the
    archive's mark on when there is one; the bytes of its torn last line (b"" when none); and
    where the mark is (0 when there is none: every `times` record was read; otherwise those
    before it were not). StorageError when the
    records before the mark, or the line at it, are not what the mark says."""
    mark = _read_mark(run_path)
    if mark is None:
        data, host = read_host(run_path, with_times=with_times)
        return data[host.valid_len:], host, 0
    offset = mark["offset"]
    try:
        fd = os.open(os.path.join(run_path, HOST), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise StorageError("host.jsonl is missing, but the archive marks its records", component=HOST) from None
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
    try:
        last = _pread(fd, mark["last"], offset)
        records = [_pread(fd, start, end) for start, end in mark["spans"]]
        rest = _pread(fd, offset, max(offset, os.fstat(fd).st_size))
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
    finally:
        os.close(fd)
    if len(last) != offset - mark["last"] or not last.endswith(b"\n") or b"\n" in last[:-1]:
        raise StorageError("host.jsonl does not reach the archive's host-record mark (cut, or replaced)",
                           component=HOST_MARK)
    if _record_hash(last[:-1]) != mark["head"]:
        raise StorageError("the host record at the archive's mark is not the one it verified",
                           component=HOST_MARK)
    if _records_digest(mark["lines"], records) != mark["records"]:
        raise StorageError("the host records before the archive's mark are not the ones it verified",
                           component=HOST_MARK)
    # The records before the mark, each whole and canonical (their chain was verified by the
    # archive; these are the bytes it verified), then the rest chained from the mark's head.
    before: list[dict] = []
    durable = None
    for line in b"".join(records).split(b"\n")[:-1]:
        obj = loads_canonical(line)
        for key in ("prev", "hash", "batch"):
            obj.pop(key, None)
        if obj["kind"] == "durable":
            durable = obj
        elif obj["kind"] == "times":
            continue  # (one the pattern does not take: the first line, whose `prev` is null)
        before.append(obj)
    host = _parse_host(rest, head=mark["head"], chained=True, line_no=mark["lines"], durable=durable,
                       with_times=with_times)
    torn = rest[host.valid_len:]
    host.records[:0] = before
    host.valid_len += offset
    if host.torn is not None:
        host.torn = TornTail(host.torn.offset + offset, host.torn.length)
    if host.lines == mark["lines"]:
        host.times_last = _TIMES_LINE.match(last, 0, len(last) - 1) is not None
    return torn, host, offset
