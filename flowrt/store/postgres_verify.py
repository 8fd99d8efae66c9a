"""Verifying a PostgreSQL run's rows, with the run directory's own checks: the fact lines are
read by `reading._HistoryReader` and the host record lines by `host_records._parse_host`, as if
they were history.jsonl and host.jsonl. What rows add: the row keyed n must hold fact n, the
run's head must be its last fact (so a lost last fact is damage), host records are numbered
without gaps, and a row that does not parse is damage (a commit is whole: there is no torn tail)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Callable

from flowrt.store.canonical import loads_canonical
from flowrt.store.errors import StorageError
from flowrt.store.format import _HASH_RE
from flowrt.store.host_records import _Host, _parse_host, holes_and_limit
from flowrt.store.reading import _HistoryReader
from flowrt.store.refs import index_refs
from flowrt.store.shelf import FactShelf

FACTS = "flow_facts"
HOST = "flow_host"


@dataclass(slots=True)
class Verified:
    facts: list[dict]
    holes: dict[tuple[int, str], str]
    refs: dict[str, set[tuple[int, str]]]  # value hex -> {(fact n, field)}
    host_head: str | None
    recorded_limit: int | None
    archived_checkpoints: int
    times: dict[int, int]  # fact n -> Unix ms it was accepted, from the `times` host records


def verify_rows(run_id: str, run: tuple, rows: list, host_rows: list, present: set[str]) -> Verified:
    """Verify a run read in one snapshot: `run` is its (last_n, head, anchor) row, `rows` its
    (n, line) fact rows in order, `host_rows` its (i, line) host record rows, `present` the hex of
    its stored values. StorageError for any damage."""
    pages = RowPages(lambda after, limit: rows if after == 0 else [],
                     sum(len(line) + 1 for _, line in rows), page=len(rows) + 1)
    reading = start_reading(run_id, run, host_rows, pages)
    reading.reader.read()
    return finish_reading(reading, reading.reader.facts, present)


class RowPages:
    """A run's fact rows read a page at a time, as the bytes history.jsonl would hold (each row's
    line and a newline), for `reading._HistoryReader`: what it asks of them (`len`, slices,
    `find`, `rfind`, forward only: bytes before the last search's start are let go).

    `fetch(after, limit)` returns up to `limit` rows (n, line) with n > `after`, in order, and
    none once there are none; `size` is their bytes in all, as counted when the run was opened.
    Fewer or more bytes than that is a StorageError: the rows changed under the reader (an
    archive moved them). `keys` are the rows' numbers, in order, for the check that row n holds
    fact n."""

    __slots__ = ("_fetch", "_size", "_page", "_after", "_base", "_buf", "_ended", "keys")

    PAGE = 8192

    def __init__(self, fetch: Callable[[int, int], list], size: int, page: int | None = None) -> None:
        self._fetch = fetch
        self._size = size
        self._page = page or self.PAGE
        self._after = 0
        self._base = 0  # the offset of _buf's first byte
        self._buf = bytearray()
        self._ended = False
        self.keys = array("q")

    def __len__(self) -> int:
        return self._size

    def refetch(self, fetch: Callable[[int, int], list]) -> None:
        """Read the pages from here on with `fetch` (the open's snapshot has ended)."""
        self._fetch = fetch

    def written_end(self) -> int:
        """Where the written bytes end: at the last row's newline (a row holds no reserved space)."""
        return self._size

    def _have(self, stop: int) -> None:
        """Rows fetched until the bytes before `stop` are here (and to the last, when `stop` is
        the end: a row more than counted is found too)."""
        buf = self._buf
        to_end = stop >= self._size
        while (to_end or self._base + len(buf) < stop) and not self._ended:
            rows = self._fetch(self._after, self._page)
            if not rows:
                self._ended = True
                break
            buf += b"\n".join([row[1] for row in rows])
            buf += b"\n"
            self.keys.extend([row[0] for row in rows])
            self._after = rows[-1][0]
        end = self._base + len(buf)
        if end < stop or end > self._size or (self._ended and end != self._size):
            raise StorageError(f"the run's rows hold {'fewer' if end < self._size else 'more'} bytes than "
                               "when it was opened (rows lost or changed under the reader)",
                               component=FACTS)

    def _let_go(self, start: int) -> None:
        cut = start - self._base
        if cut > 0:
            del self._buf[:cut]
            self._base = start

    def _bounds(self, start: int, end: int | None) -> tuple[int, int]:
        if start < self._base:
            raise ValueError("RowPages reads forward only")
        return start, self._size if end is None else min(end, self._size)

    def __getitem__(self, key: slice) -> bytes:
        start, stop = self._bounds(key.start or 0, key.stop)
        if stop <= start:
            return b""
        self._have(stop)
        return bytes(self._buf[start - self._base:stop - self._base])

    def rfind(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        start, end = self._bounds(start, end)
        self._let_go(start)
        self._have(end)
        found = self._buf.rfind(sub, 0, end - self._base)
        return -1 if found < 0 else self._base + found

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """As `bytes.find`, fetching a page more at a time until found or `end` is reached."""
        start, end = self._bounds(start, end)
        self._let_go(start)
        search = start
        while True:
            held_end = min(end, self._base + len(self._buf))
            found = self._buf.find(sub, search - self._base, held_end - self._base)
            if found >= 0:
                return self._base + found
            if held_end >= end:
                return -1
            search = max(start, held_end - len(sub) + 1)
            self._have(min(end, held_end + 1))


@dataclass(slots=True)
class Reading:
    """A run's rows being verified: the reader and what the end of the verification checks."""
    run_id: str
    last_n: int
    head: str | None
    anchor: dict | None
    host: _Host
    pages: RowPages
    reader: Any  # reading._HistoryReader
    keyed: int = 0  # facts whose row numbers were checked
    #: the first row found to hold another fact than its number says, raised once the reader is
    #: done (after the reader's own damage, as a whole read would)
    mismatch: StorageError | None = None


def start_reading(run_id: str, run: tuple, host_rows: list, pages: RowPages) -> Reading:
    """The reader of a run's rows (`run` its (last_n, head, anchor) row, `host_rows` its (i, line)
    host record rows, `pages` its fact rows), nothing verified yet."""
    last_n, head, anchor_bytes = run
    anchor = parse_anchor(anchor_bytes)
    host = parse_host_rows(host_rows)
    return Reading(run_id, last_n, head, anchor, host, pages, _HistoryReader(pages, run_id, anchor, host.durable))


def check_keys(reading: Reading) -> None:
    """Row n holds fact n, for the facts verified since the last check (those the reader still
    holds: a caller checks before it lets any go); the first that does not is kept in
    `mismatch`."""
    reader, keys = reading.reader, reading.pages.keys
    facts, shelved = reader.facts, reader.shelved
    if reading.mismatch is None:
        for index in range(reading.keyed, shelved + len(facts)):
            fact = facts[index - shelved]
            if fact["n"] != keys[index]:
                reading.mismatch = StorageError(f"the row keyed {keys[index]} holds fact {fact['n']}", fact["n"],
                                                component=FACTS)
                break
    reading.keyed = shelved + len(facts)


def finish_reading(reading: Reading, facts: Any, present: set[str]) -> Verified:
    """The checks once the reader is done; `facts` is every fact (a list, or the store's shelf
    that reads back the facts let go)."""
    reader = reading.reader
    if reader.error is not None:  # named by the table, not the file the reader was written for
        raise StorageError(reader.error.message, reader.error.fact_n, component=FACTS)
    if reader.torn is not None:
        raise StorageError("the fact's row is not a whole fact", len(facts) + 1, component=FACTS)
    if not len(facts):
        raise StorageError("the run has no Start (it never started)", component=FACTS)
    check_keys(reading)
    if reading.mismatch is not None:
        raise reading.mismatch
    last = facts[-1]
    if last["n"] != reading.last_n or last["hash"] != reading.head:
        raise StorageError(f"the run's head is fact {reading.last_n} ({reading.head}), but its facts end at fact "
                           f"{last['n']} (facts were lost or changed)", last["n"], component=FACTS)
    anchor = reading.anchor
    archived = int(anchor.get("checkpoints", 0)) if anchor is not None and len(facts) > 1 and facts[1]["n"] != 2 else 0
    holes, recorded_limit = holes_and_limit(reading.host.records, facts, HOST)
    refs: dict[str, set[tuple[int, str]]] = {}
    picked = facts.picked if isinstance(facts, FactShelf) else lambda indexes: (facts[i] for i in indexes)
    for fact in picked(reader.referring):  # (a shelf reads those it let go back a step at a time)
        index_refs(refs, fact)
    for hex_, users in refs.items():
        live = [user for user in users if user not in holes]
        if live and hex_ not in present:
            raise StorageError("the value is missing and is not a recorded hole", min(live)[0],
                               component=f"flow_values/{hex_}")
    return Verified(reader.facts, holes, refs, reading.host.head, recorded_limit, archived, dict(reading.host.times))


def parse_anchor(data: bytes | None) -> dict | None:
    """The archive anchor of `flow_runs.anchor`, checked as archive/anchor.json is."""
    if data is None:
        return None
    try:
        anchor = loads_canonical(bytes(data))
    except ValueError:
        raise StorageError("the archive anchor is not canonical JSON", component="flow_runs.anchor") from None
    if not isinstance(anchor, dict) or type(anchor.get("through")) is not int or anchor["through"] < 1 \
            or not isinstance(anchor.get("head"), str) or not _HASH_RE.match(anchor["head"]):
        raise StorageError("the archive anchor is not {through, head}", component="flow_runs.anchor")
    return anchor


def parse_host_rows(rows: list) -> _Host:
    """The host records of `rows` ((i, line) in order), verified as host.jsonl's lines are."""
    for expected, (i, _) in enumerate(rows, 1):
        if i != expected:
            raise StorageError(f"host record {expected} is missing", component=HOST)
    host = _parse_host(b"".join(bytes(line) + b"\n" for _, line in rows))
    if host.torn is not None:
        raise StorageError("a host record's row is not a whole record", component=HOST)
    return host
