"""The history store: one directory per run, holding its facts, values, sources and host records.

The on-disk format is specified in `docs/trace.md`; this module is its only writer. In short:

    <root>/<run id>/history.jsonl   one canonical-JSON fact per line, hash-chained
    <root>/<run id>/values/<hex>    value fields over `inline_limit` bytes, by SHA-256 of their JSON
    <root>/<run id>/sources/<hex>   module sources, by SHA-256 of their UTF-8 text
    <root>/<run id>/host.jsonl      the host's own records (truncations, holes, pauses, halts, ...)

The store is generic over fact fields. It interprets only what integrity needs: `n`, `kind`,
`prev`, `hash`; Start's `data` (the data version) and `run` (the run id); and the value fields of
each kind (`VALUE_FIELDS`), which it may move to `values/`. Appends are durable before `append`
returns (write + fsync), a torn last line is truncation, and every other kind of damage is a
`StorageError`, never a partial result.

Errors:
- `StorageError(message, fact_n)`: the record is damaged or could not be written (CLI exit 5).
- `Hole(fact_n, field, hash)`: a value that was made a hole; its hash is all that is left.
- `RunNotFound`, `RunExists`, `RunBusy`: the caller named a run that is absent, present, or
  already open for appending in another process (refusals, CLI exit 2).
- `RedactRefused`: redaction asked for a value that is stored inline (see `RunStore.redact`).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import gc
import hashlib
import json
import math
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import orjson

from sandbox.bigint import MAX_INT_DIGITS, IntOverLimit, int_text, text_int

__all__ = [
    "DATA_VERSION",
    "KINDS",
    "VALUE_FIELDS",
    "INLINE_LIMIT",
    "StorageError",
    "Hole",
    "RunNotFound",
    "RunExists",
    "RunBusy",
    "RedactRefused",
    "TornTail",
    "RunStore",
    "canonical_bytes",
    "loads_canonical",
    "fact_hash",
    "valid_run_id",
    "scan_runs",
]

DATA_VERSION = "flow-data/1"
KINDS = ("Start", "Call", "Reply", "Choice", "Stop", "Checkpoint", "End")
# The fields of each kind that hold Flow values: the only fields the store may move to values/.
VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "Start": ("input",),
    "Call": ("arguments",),
    "Reply": ("outcome",),
    "Choice": (),
    "Stop": ("found",),
    "Checkpoint": ("arguments",),
    "End": ("outcome",),
}
_VALUE_REFS = {kind: tuple((f, f + "_ref") for f in fields) for kind, fields in VALUE_FIELDS.items()}
INLINE_LIMIT = 1024  # a value whose canonical JSON is longer than this many bytes goes to values/
_VERIFY_STEP = 4096  # facts a deferred verification checks at a time
_WINDOW = 4 << 20  # bytes of history split into lines at a time
#: The reserved space past the facts (see `RunStore._reserve`): at least this much, and at most ...
_RESERVE_MIN = 64 << 10
_RESERVE_MAX = 1 << 20
#: ... and never more than this many bytes written and not yet synced in it, so that what a
#: machine crash can leave torn in reserved space lies within the last _TEAR_WINDOW bytes.
_TEAR_WINDOW = 1 << 20
HISTORY = "history.jsonl"
ARCHIVE = "archive"
ANCHOR = "archive/anchor.json"
HOST = "host.jsonl"
VALUES = "values"
SOURCES = "sources"

_OPT = orjson.OPT_SORT_KEYS
_OPT_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}\Z")
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_RESERVED = ("n", "kind", "prev", "hash")
_RESERVED_SET = frozenset(_RESERVED)
STORE_RECORDS = frozenset({"hole", "truncated", "store", "durable"})  # host records only the store writes
_ENDINGS = {"Completed": "completed", "Faulted": "faulted"}


# ---------------------------------------------------------------------------------------------
# Errors


class StorageError(Exception):
    """The store could not read or write the record faithfully: damage, or a failed write.

    `fact_n` is the number of the fact concerned (the first damaged one when reading, the one
    that could not be written when appending), or None when no single fact is concerned;
    `component` names the file (`history.jsonl`, `host.jsonl`, `values/<hex>`, ...)."""

    def __init__(self, message: str, fact_n: int | None = None, *, component: str | None = None):
        self.message = message
        self.fact_n = fact_n
        self.component = component
        where = []
        if component:
            where.append(component)
        if fact_n is not None:
            where.append(f"fact {fact_n}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class Hole(Exception):
    """The value of `field` in fact `fact_n` is a hole: only its `hash` is kept."""

    def __init__(self, fact_n: int, field: str, hash: str):
        self.fact_n = fact_n
        self.field = field
        self.hash = hash
        super().__init__(f"fact {fact_n}: {field} is a hole ({hash})")


class RunNotFound(LookupError):
    """No run directory with that id under the root."""


class RunExists(Exception):
    """`RunStore.create` was given an id whose directory already exists."""


#: How long opening for appending waits for the lock before the run counts as busy: a reader
#: probing whether the run has an appender (`flowrt.run_state.appender_holds`) holds a shared
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


class RunBusy(Exception):
    """Another open store holds the run for appending (an advisory lock on history.jsonl)."""


class RedactRefused(ValueError):
    """Redaction was asked for a value that cannot become a hole (stored inline, or absent)."""


@dataclass(frozen=True, slots=True)
class TornTail:
    """An unfinished last line: `length` bytes starting at byte `offset` of history.jsonl."""

    offset: int
    length: int


# ---------------------------------------------------------------------------------------------
# Canonical JSON


def canonical_bytes(obj: Any) -> bytes:
    """Canonical JSON: UTF-8, keys sorted, no insignificant whitespace (orjson's layout).

    Integers outside 64 bits and nesting deeper than orjson allows are written by a slower
    encoder that produces the same bytes orjson would."""
    try:
        return orjson.dumps(obj, option=_OPT)
    except orjson.JSONEncodeError:
        parts: list[str] = []
        _slow_encode(obj, parts)
        try:
            return "".join(parts).encode("utf-8")
        except UnicodeEncodeError as problem:
            raise TypeError(f"text is not valid UTF-8: {problem}") from None


def _slow_encode(obj: Any, out: list[str]) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(int_text(int(obj)))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise TypeError("a non-finite number is not JSON")
        out.append(orjson.dumps(obj).decode())
    elif isinstance(obj, str):
        out.append(json.dumps(obj, ensure_ascii=False))
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for index, item in enumerate(obj):
            if index:
                out.append(",")
            _slow_encode(item, out)
        out.append("]")
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise TypeError("Dict key must be str")
        out.append("{")
        for index, key in enumerate(sorted(obj)):
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _slow_encode(obj[key], out)
        out.append("}")
    else:
        raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


class _NotJSON(ValueError):
    pass


class _NotCanonical(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_canonical(data: bytes) -> Any:
    """Parse bytes that must be canonical JSON. Raises ValueError (`_NotJSON` when they do not
    parse at all, `_NotCanonical` when they parse but are not in canonical form)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = _NotJSON
    if obj is not _NotJSON:
        try:
            if orjson.dumps(obj, option=_OPT) == data:
                return obj
        except orjson.JSONEncodeError:
            pass
    # Slow path: orjson reads integers beyond 64 bits as floats, so re-read exactly (and without
    # CPython's 4,300-digit guard; no value the store writes holds an Int over the limit).
    try:
        exact = json.loads(data.decode("utf-8"), parse_constant=_reject_constant, parse_int=text_int)
    except IntOverLimit:
        raise _NotCanonical(f"an integer over the limit of {MAX_INT_DIGITS} digits") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _NotJSON("not JSON") from None
    try:
        again = canonical_bytes(exact)
    except (TypeError, RecursionError):
        raise _NotCanonical("not canonical JSON") from None
    if again != data:
        raise _NotCanonical("not canonical JSON")
    return exact


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fact_hash(fact_without_hash: dict) -> str:
    """`"sha256:<hex>"` of the canonical JSON of a fact without its `hash` field."""
    if "hash" in fact_without_hash:
        raise ValueError("fact_hash takes the fact without its hash field")
    return "sha256:" + _sha256_hex(canonical_bytes(fact_without_hash))


def valid_run_id(run_id: object) -> bool:
    """A run id: 1 to 128 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit."""
    return isinstance(run_id, str) and _RUN_ID_RE.match(run_id) is not None


def _ending_of(outcome: Any) -> str | None:
    if isinstance(outcome, dict) and len(outcome) == 1:
        (key,) = outcome
        return _ENDINGS.get(key)
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------------------------------
# Verification of history bytes (shared by RunStore.open and scan_runs)


def _check_fact(obj: Any, n: int, prev: str | None, ended: bool, run_id: str | None) -> str | None:
    """Why `obj` is not a valid fact number `n` after a fact whose hash is `prev`; None if it is."""
    if not isinstance(obj, dict):
        return "the line is not a JSON object"
    for key in _RESERVED:
        if key not in obj:
            return f"the fact has no `{key}`"
    if type(obj["n"]) is not int or obj["n"] != n:
        return f"`n` is {obj['n']!r}, expected {n}"
    kind = obj["kind"]
    if kind not in VALUE_FIELDS:
        return f"unknown kind {kind!r}"
    if (n == 1) != (kind == "Start"):
        return "Start must be fact 1 and only fact 1" if n != 1 else "the first fact is not a Start"
    if ended:
        return "a fact after End"
    if obj["prev"] != prev:
        return "`prev` does not match the previous fact's hash (broken chain)"
    claimed = obj["hash"]
    if not isinstance(claimed, str) or not _HASH_RE.match(claimed):
        return "`hash` is not sha256:<64 lowercase hex>"
    rest = dict(obj)
    del rest["hash"]
    if "sha256:" + _sha256_hex(canonical_bytes(rest)) != claimed:
        return "the fact's content does not match its hash"
    for field in VALUE_FIELDS[kind]:
        ref = obj.get(field + "_ref")
        if ref is not None:
            if field in obj:
                return f"both `{field}` and `{field}_ref`"
            if not isinstance(ref, str) or not _HASH_RE.match(ref):
                return f"`{field}_ref` is not sha256:<64 lowercase hex>"
        elif field + "_ref" in obj:
            return f"`{field}_ref` is null"
    if kind == "Start":
        if obj.get("data") != DATA_VERSION:
            return f"unknown data version {obj.get('data')!r} (this reader knows {DATA_VERSION})"
        if run_id is not None and obj.get("run") != run_id:
            return f"Start names run {obj.get('run')!r}, not {run_id!r}"
    if kind == "End" and "ending" in obj:
        ending = obj["ending"]
        if ending not in ("completed", "faulted"):
            return f"`ending` is {ending!r}"
        if "outcome" in obj and _ending_of(obj["outcome"]) != ending:
            return "`ending` disagrees with `outcome`"
    return None


@dataclass(slots=True)
class _Parsed:
    facts: list[dict]
    valid_len: int  # bytes of the validated prefix
    torn: TornTail | None
    error: StorageError | None


def _read_anchor(run_path: str) -> dict | None:
    """Where archived facts end: `{"through": m, "head": hash of fact m}`, or None. History then
    holds Start, and the facts from m + 1 on (`flow archive`)."""
    try:
        data = _read_file(os.path.join(run_path, ANCHOR))
    except FileNotFoundError:
        return None
    except OSError as problem:
        raise StorageError(f"cannot read: {_strerror(problem)}", component=ANCHOR) from problem
    try:
        anchor = loads_canonical(data.rstrip(b"\n"))
    except (_NotJSON, _NotCanonical):
        raise StorageError("the archive anchor is not canonical JSON", component=ANCHOR) from None
    if not isinstance(anchor, dict) or type(anchor.get("through")) is not int or anchor["through"] < 1 \
            or not isinstance(anchor.get("head"), str) or not _HASH_RE.match(anchor["head"]):
        raise StorageError("the archive anchor is not {through, head}", component=ANCHOR)
    return anchor


def fact_position(facts: list[dict], n: int) -> int | None:
    """The index of fact `n` in a verified list (which may skip archived facts), or None."""
    if not facts or n < 1:
        return None
    if n == 1:
        return 0
    if len(facts) < 2:
        return None
    index = n - facts[1]["n"] + 1
    return index if 1 <= index < len(facts) and facts[index]["n"] == n else None


class _SlowWay(Exception):
    """A line the quick check does not accept: the slow one decides."""


def _parse_history(data: bytes, run_id: str | None, anchor: dict | None = None,
                   durable: dict | None = None) -> _Parsed:
    """Validate `data` line by line. Stops at the first damage (reported in `error`) or at a
    torn last line (reported in `torn`): the facts before it are the validated prefix.
    `durable`: the latest `durable` host record, if any (no tear may start at or before its fact)."""
    reader = _HistoryReader(data, run_id, anchor, durable)
    reader.read()
    return _Parsed(reader.facts, reader.pos, reader.torn, reader.error)


class _HistoryReader:
    """Validates history bytes line by line, as many lines at a time as asked (`read`), so that
    a reader can start using the first facts while the rest is still being checked.

    A torn last line is what an interrupted append can leave: bytes after the last newline, or a
    last line that does not parse and holds a NUL byte (a region the file system extended but
    never wrote reads back as zeros; canonical JSON never contains a raw NUL). A last line that
    ends in a newline and does not parse but has no NUL is damage, not a tear: otherwise one
    flipped byte in the previous line's newline would silently drop two durable facts.

    Each line is first checked the quick way, which makes every check `_check_fact` makes in
    fewer steps: a line is canonical when orjson writes what it read back byte for byte, and the
    hash input is the line without its `"hash":"...",` member (the line is canonical and `kind`,
    `n` and `prev` follow `hash`, so that is exactly the fact without `hash`, encoded
    canonically), found by its bytes when they occur once. A line the quick way does not accept
    (a big integer, which orjson reads as a float; damage) is checked again by
    `loads_canonical` and `_check_fact`, which decide and say why.

    `durable` is the latest `durable` host record: a store that closed the run, or opened it for
    appending, had made its first `facts` facts durable, the last one `head`. No torn tail can
    start among them, so there damage is damage; and the history must still hold them, that
    last one unchanged."""

    __slots__ = ("data", "size", "run_id", "anchor", "facts", "pos", "prev", "ended", "torn", "error", "done",
                 "lines", "index", "referring", "durable", "durable_head")

    def __init__(self, data: bytes, run_id: str | None, anchor: dict | None, durable: dict | None = None) -> None:
        self.data = data
        self.size = _written_end(data)  # the NUL bytes after the last line are reserved space
        self.run_id = run_id
        self.anchor = anchor
        self.facts: list[dict] = []
        self.pos = 0  # bytes validated
        self.prev: str | None = None
        self.ended = False
        self.torn: TornTail | None = None
        self.error: StorageError | None = None
        self.done = False
        self.lines: list[bytes] = []  # the complete lines of the current window
        self.index = 0  # of those, the ones validated
        #: the facts that may hold a reference to a value file (every other one holds none)
        self.referring: list[int] = []
        self.durable = durable["facts"] if durable else 0
        self.durable_head = durable["head"] if durable else None

    def read(self, count: int | None = None) -> bool:
        """Validate up to `count` more lines (all when None); True once the reader is done (the
        end, a torn tail, or damage: `error`)."""
        while not self.done and (count is None or count > 0):
            if self.index >= len(self.lines) and not self._next_window():
                break
            take = len(self.lines) - self.index if count is None else min(count, len(self.lines) - self.index)
            self._check(take)
            if count is not None:
                count -= take
        if self.done and self.error is None and self.durable:
            self._check_durable()
        return self.done

    def _check_durable(self) -> None:
        """Read to the end: the facts that were durable must all be here."""
        durable, facts = self.durable, self.facts
        self.durable = 0  # checked once
        last = facts[-1]["n"] if facts else 0
        if last < durable:
            self.error = StorageError(f"the history ends at fact {last}, but it held {durable} facts when "
                                      "they were durable (facts were lost)", last + 1, component=HISTORY)
            return
        position = fact_position(facts, durable)
        if position is None:  # archived: the anchor, checked against its successor, covers it
            return
        if facts[position]["hash"] != self.durable_head:
            self.error = StorageError("the fact does not have the hash it had when it was durable",
                                      durable, component=HISTORY)

    def _next_window(self) -> bool:
        """Split the next stretch of complete lines at once (in C, which beats finding each
        newline in Python), a few MiB at a time so that the lines never double a long history in
        memory. False when there is none: the end, or a torn last line."""
        data, pos, size = self.data, self.pos, self.size
        if pos >= size:
            self.done = True
            return False
        stop = data.rfind(b"\n", pos, min(size, pos + _WINDOW)) + 1
        if stop <= pos:  # no newline in the window: a line longer than it, or none at all
            stop = data.find(b"\n", pos, size) + 1
            if stop == 0:
                n = self.facts[-1]["n"] + 1 if self.facts else 1
                if n <= self.durable:  # a durable fact: not a tear
                    self.error = StorageError("the line has no newline, but the fact was durable",
                                              n, component=HISTORY)
                else:
                    self.torn = TornTail(pos, size - pos)  # bytes after the last newline
                self.done = True
                return False
        self.lines = data[pos:stop].split(b"\n")
        self.lines.pop()  # after the last newline
        self.index = 0
        return True

    def _check(self, take: int) -> None:
        """Validate the next `take` lines of the window. The cyclic garbage collector is held
        off while facts are built: they are JSON data, without cycles, and a collection every
        700 new dicts would scan all the facts read so far, again and again."""
        size = self.size
        lines = self.lines
        first = self.index
        last = first + take
        pos = self.pos
        facts = self.facts
        append = facts.append
        referring = self.referring
        prev, ended, run_id, anchor = self.prev, self.ended, self.run_id, self.anchor
        loads, dumps, sha256, value_refs = orjson.loads, orjson.dumps, hashlib.sha256, _VALUE_REFS
        hash_re = _HASH_RE.match
        n = facts[-1]["n"] if facts else 0
        index = first
        collecting = gc.isenabled()
        gc.disable()
        try:
            while index < last:
                line = lines[index]
                n += 1
                try:
                    quick = loads(line)
                    if dumps(quick, option=_OPT) != line:
                        raise _SlowWay
                    if n == 2 and anchor is not None and quick["n"] == anchor["through"] + 1 \
                            and anchor["through"] > 1:
                        n, prev = anchor["through"] + 1, anchor["head"]
                    number = quick["n"]
                    kind = quick["kind"]
                    claimed = quick["hash"]
                    if type(number) is not int or number != n or ended or quick["prev"] != prev \
                            or (n == 1) != (kind == "Start") or type(claimed) is not str:
                        raise _SlowWay
                    parts = line.split(b'"hash":"' + claimed.encode() + b'",')
                    if len(parts) == 2:
                        digest = "sha256:" + sha256(parts[0] + parts[1]).hexdigest()
                    else:
                        rest = dict(quick)
                        del rest["hash"]
                        digest = "sha256:" + sha256(dumps(rest, option=_OPT)).hexdigest()
                    if claimed != digest:  # (so the claimed hash has its form too)
                        raise _SlowWay
                    if b'_ref":' in line:  # a member holding a reference, at some depth
                        referring.append(len(facts))
                        for field, ref_name in value_refs[kind]:
                            if ref_name in quick:
                                ref = quick[ref_name]
                                if field in quick or type(ref) is not str or not hash_re(ref):
                                    raise _SlowWay
                    if kind == "Start":
                        if quick.get("data") != DATA_VERSION or (run_id is not None and quick.get("run") != run_id):
                            raise _SlowWay
                    elif kind == "End" and "ending" in quick:
                        ending = quick["ending"]
                        if ending not in ("completed", "faulted") or \
                                ("outcome" in quick and _ending_of(quick["outcome"]) != ending):
                            raise _SlowWay
                    elif kind not in value_refs:
                        raise _SlowWay
                    append(quick)
                    prev = claimed
                    ended = kind == "End"
                    index += 1
                    continue
                except (_SlowWay, orjson.JSONDecodeError, KeyError, TypeError):
                    pass
                # Not the quick way: the slow way decides, and says why.
                pos += sum(map(len, lines[first:index])) + index - first  # where this line starts
                first = index
                newline = pos + len(line)
                n = facts[-1]["n"] + 1 if facts else 1
                prev = facts[-1]["hash"] if facts else None
                try:
                    obj = loads_canonical(line)
                except _NotJSON:
                    if b"\0" in line and n > self.durable and (newline + 1 == size or size - pos <= _TEAR_WINDOW):
                        self.torn = TornTail(pos, size - pos)
                    else:
                        self.error = StorageError("the line is not JSON", n, component=HISTORY)
                    self.done = True
                    break
                except _NotCanonical:
                    self.error = StorageError("the line is not canonical JSON", n, component=HISTORY)
                    self.done = True
                    break
                if anchor is not None and len(facts) == 1 and isinstance(obj, dict) \
                        and obj.get("n") == anchor["through"] + 1 and anchor["through"] > 1:
                    # The facts between Start and this one were archived: the chain goes on
                    # from the anchor.
                    n, prev = anchor["through"] + 1, anchor["head"]
                problem = _check_fact(obj, n, prev, ended, run_id)
                if problem is not None:
                    self.error = StorageError(problem, n, component=HISTORY)
                    self.done = True
                    break
                n = obj["n"]
                referring.append(len(facts))
                append(obj)
                prev = obj["hash"]
                ended = obj["kind"] == "End"
                pos = newline + 1
                index += 1
                first = index
            pos += sum(map(len, lines[first:index])) + index - first  # past the lines taken
        finally:
            if collecting:
                gc.enable()
            self.pos, self.prev, self.ended, self.index = pos, prev, ended, index
            if self.done:
                self.lines = []


def _written_end(data: bytes) -> int:
    """Where the written bytes of a history end: before the NUL bytes that close it, if any.

    A store appending durably keeps space reserved past its facts (`RunStore._reserve`), which
    reads as NUL bytes until facts are written over it; it is cut off when the store closes,
    so only a live run, or one whose host died, has it. Canonical JSON never holds a raw NUL."""
    end = len(data)
    if not end or data[end - 1]:
        return end
    step = 4096
    while True:
        tail = data[max(0, end - step):end]
        kept = len(tail.rstrip(b"\0"))
        if kept or len(tail) == end:
            return end - len(tail) + kept
        step *= 4


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


# ---------------------------------------------------------------------------------------------
# Low-level file helpers


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    written = os.pwrite(fd, data, offset)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    offset += written
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:  # pragma: no cover - os.pwrite raises rather than return 0 on files
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]
        offset += written


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - os.write raises rather than return 0 on files
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


# An append changes the file's size, which fdatasync flushes too (it skips only metadata a
# read does not need, such as the modification time): as durable as fsync here, and cheaper.
def _sync_appended(fd: int) -> None:
    getattr(os, "fdatasync", os.fsync)(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _strerror(problem: OSError) -> str:
    return problem.strerror or str(problem)


# ---------------------------------------------------------------------------------------------
# The store


class RunStore:
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
        self.inline_limit = INLINE_LIMIT if inline_limit is None else inline_limit
        self.torn_tail: TornTail | None = None
        self._facts: list[dict] = []
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
        start_fact, start_line = store._build("Start", fields, 1, None, False, blobs, allow_start=True)
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
            if inline_limit != INLINE_LIMIT:
                store._write_host({"kind": "store", "inlineLimit": inline_limit})
            for text in source_texts:
                store._put_source(text, sync_dir=False)
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
            store._commit([start_fact], [start_line], blobs)
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

    def verify(self) -> None:
        """Finish a deferred verification (nothing to do otherwise); raises what `open` would."""
        if self._failure is not None:
            raise self._failure
        if self._reader is not None:
            self._read_more(None)

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

    @property
    def deferred(self) -> bool:
        """Whether verification is still going on (a deferred open not yet read to the end)."""
        return self._reader is not None

    def verified_facts(self) -> list[dict]:
        """The facts verified so far, as a list that grows while a deferred verification goes on
        (`fact_at` and `facts_from` make it grow). Do not mutate it."""
        return self._facts

    def fact_at(self, index: int) -> dict | None:
        """The fact at `index` of the verified facts (0 is Start), verifying as far as that;
        None past the last fact (then everything has been verified)."""
        facts = self._facts
        while index >= len(facts):
            if self._reader is None:
                if self._failure is not None:
                    raise self._failure
                return None
            self._read_more(max(_VERIFY_STEP, index + 1 - len(facts)))
        return facts[index]

    def facts_from(self, index: int, count: int) -> list[dict]:
        """Up to `count` facts from `index` on, verifying as far as that; [] past the end."""
        facts = self._facts
        while len(facts) < index + count and self._reader is not None:
            self._read_more(max(_VERIFY_STEP, index + count - len(facts)))
        if self._failure is not None:
            raise self._failure
        return facts[index:index + count]

    def latest_checkpoint(self) -> int | None:
        """The index of the latest Checkpoint among the facts, or None. A deferred store finds it
        without verifying everything when there is none: every line whose fact is a Checkpoint
        holds the bytes `"kind":"Checkpoint"`, so when no unverified line does, there is none
        (and otherwise everything is verified and the facts say where)."""
        reader = self._reader
        if reader is not None and reader.data.find(b'"kind":"Checkpoint"', reader.pos) >= 0:
            self.verify()
        facts = self._facts
        return max((i for i, f in enumerate(facts) if f["kind"] == "Checkpoint"), default=None)

    def _load(self, explicit_limit: int | None, defer: bool = False) -> None:
        # 1. Verify everything, changing nothing.
        history_path = os.path.join(self.path, HISTORY)
        try:
            if self.for_append:
                self._fd = os.open(history_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                if not _lock_for_append(self._fd):
                    raise RunBusy(f"run {self.run_id} is open for appending elsewhere")
            data = _read_file(history_path)
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
        reader = _HistoryReader(data, self.run_id, anchor, host[1].durable if host else None)
        if host_problem is not None:
            reader.read()
            if reader.error is not None:
                raise reader.error from None
            raise host_problem
        if defer and not reader.read(2):
            # The rest is verified as it is asked for (`fact_at`, `facts_from`) or wholly by the
            # first method that needs every fact; whatever `open` would have raised is raised
            # then, in the order `open` would have found it.
            self._reader = reader
            self._pending = (anchor, host, explicit_limit)
            self._facts = reader.facts
            # Holes as recorded, so that reading a value meets its hole before verification ends
            # (which then checks each record against its fact).
            for record in host[1].records:
                if record["kind"] == "hole" and type(record.get("fact")) is int:
                    self._holes[(record["fact"], record.get("field"))] = record.get("ref")
            if anchor is not None and reader.facts[1]["n"] != 2:
                self.archived_checkpoints = int(anchor.get("checkpoints", 0))
            return
        reader.read()
        self._verified(reader, anchor, host, explicit_limit)

    def _read_host(self) -> tuple[bytes, _Host]:
        host_path = os.path.join(self.path, HOST)
        try:
            host_data = _read_file(host_path)
        except FileNotFoundError:
            host_data = b""
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
        return host_data, _parse_host(host_data)

    def _verified(self, reader: "_HistoryReader", anchor: dict | None, host: tuple[bytes, _Host],
                  explicit_limit: int | None) -> None:
        """The history has been read whole: everything after it that `open` checks and repairs."""
        if reader.error is not None:
            raise reader.error
        parsed = _Parsed(reader.facts, reader.pos, reader.torn, None)
        data = reader.data
        if anchor is not None and len(parsed.facts) > 1 and parsed.facts[1]["n"] != 2:
            self.archived_checkpoints = int(anchor.get("checkpoints", 0))
        if not parsed.facts:
            raise StorageError("the run has no Start (it never started)", component=HISTORY)
        host_data, parsed_host = host
        records, host_len, host_torn = parsed_host.records, parsed_host.valid_len, parsed_host.torn
        self._host_head = parsed_host.head
        durable = parsed_host.durable
        self._durable_mark = (durable["facts"], durable["head"]) if durable else None
        holes: dict[tuple[int, str], str] = {}
        recorded_limit = None
        for record in records:
            if record["kind"] == "store" and type(record.get("inlineLimit")) is int:
                recorded_limit = record["inlineLimit"]
            elif record["kind"] == "hole":
                n, field, ref = record.get("fact"), record.get("field"), record.get("ref")
                if type(n) is not int or not isinstance(field, str) or not isinstance(ref, str):
                    raise StorageError("a hole record lacks fact, field or ref", component=HOST)
                position = fact_position(parsed.facts, n)
                if position is not None:
                    if parsed.facts[position].get(field + "_ref") != ref:
                        raise StorageError(f"a hole record names {field} of fact {n}, which does "
                                           f"not refer to {ref}", n, component=HOST)
                    holes[(n, field)] = ref
        if explicit_limit is None and recorded_limit is not None and recorded_limit >= 0:
            self.inline_limit = recorded_limit
        self._holes = holes
        self._facts = parsed.facts
        self._size = parsed.valid_len
        self._host_size = host_len
        refs = _VALUE_REFS
        for index in reader.referring:
            fact = parsed.facts[index]
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
                              "sha256": _sha256_hex(host_data[host_torn.offset:])})
        if parsed.torn is not None:
            try:
                os.ftruncate(self._fd, parsed.valid_len)
                if self._fsync:
                    os.fsync(self._fd)
            except OSError as problem:
                raise StorageError(f"cannot remove the torn last line: {_strerror(problem)}",
                                   len(parsed.facts) + 1, component=HISTORY) from problem
            self._write_host({
                "kind": "truncated", "component": HISTORY, "at": _now(),
                "offset": parsed.torn.offset, "bytes": parsed.torn.length,
                "sha256": _sha256_hex(data[parsed.torn.offset:parsed.torn.offset + parsed.torn.length]),
                "facts": len(parsed.facts), "head": self.head,
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
                self.sync()
            except StorageError:
                pass
        self._release_reserved()
        self._mark_durable()
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
                _sync_appended(self._fd)
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
        try:
            os.ftruncate(self._fd, self._size)
            self._reserved_end = self._size
            if self._fsync:
                _sync_appended(self._fd)
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
    def _fsync(self) -> bool:
        return self.durability == "fsync"

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

    def fact(self, n: int) -> dict:
        position = fact_position(self._facts, n) if type(n) is int else None
        if position is None and (self._reader is not None or self._failure is not None):
            self.verify()
            position = fact_position(self._facts, n) if type(n) is int else None
        if position is None:
            raise IndexError(f"no fact {n!r} in the history (it has {len(self._facts)}, "
                             "some perhaps archived)")
        return self._facts[position]

    def holes(self) -> dict[tuple[int, str], str]:
        """Every recorded hole: (fact n, field) -> the value's hash."""
        self.verify()
        return dict(self._holes)

    def is_hole(self, fact: dict | int, field: str) -> bool:
        self.verify()
        n = fact if isinstance(fact, int) else fact["n"]
        return (n, field) in self._holes

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
        hex_ = ref[len("sha256:"):]
        component = f"{VALUES}/{hex_}"
        try:
            data = _read_file(os.path.join(self.path, VALUES, hex_))
        except FileNotFoundError:
            raise StorageError(f"the value of {field} is missing and is not a recorded hole", n,
                               component=component) from None
        except OSError as problem:
            raise StorageError(f"cannot read the value of {field}: {_strerror(problem)}", n,
                               component=component) from problem
        if _sha256_hex(data) != hex_:
            raise StorageError(f"the value of {field} does not match its hash", n, component=component)
        try:
            return loads_canonical(data)
        except ValueError:
            raise StorageError(f"the value of {field} is not canonical JSON", n,
                               component=component) from None

    def verify_files(self) -> None:
        """Check every value file a fact refers to (unless a recorded hole) and every module
        source Start names against its hash, as reading them would; raises StorageError for the
        first that is missing or damaged. For a caller that will read none of them but must not
        report a damaged record as sound (resume of a run that has ended)."""
        self.verify()
        for hex_, users in sorted(self._refs.items()):
            live = sorted(user for user in users if user not in self._holes)
            if live:
                self.value(*live[0])
        modules = self._facts[0].get("modules") if self._facts and self._facts[0]["n"] == 1 else None
        for module in modules if isinstance(modules, list) else ():
            hash_ = module.get("hash") if isinstance(module, dict) else None
            if not isinstance(hash_, str) or not _HASH_RE.match(hash_):
                raise StorageError("Start names a module source that is not sha256:<hex>", 1, component=HISTORY)
            self.source(hash_)

    def source(self, hash: str) -> str:
        """A stored module source, checked against its hash."""
        if not isinstance(hash, str) or not _HASH_RE.match(hash):
            raise ValueError(f"not a source hash: {hash!r}")
        hex_ = hash[len("sha256:"):]
        component = f"{SOURCES}/{hex_}"
        try:
            data = _read_file(os.path.join(self.path, SOURCES, hex_))
        except FileNotFoundError:
            raise StorageError("the source is missing", component=component) from None
        except OSError as problem:
            raise StorageError(f"cannot read the source: {_strerror(problem)}",
                               component=component) from problem
        if _sha256_hex(data) != hex_:
            raise StorageError("the source does not match its hash", component=component)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:  # pragma: no cover - the hash matched text we encoded
            raise StorageError("the source is not UTF-8", component=component) from None

    def host_records(self) -> list[dict]:
        """Every complete host record, in order (a torn last line is left out)."""
        host_path = os.path.join(self.path, HOST)
        try:
            data = _read_file(host_path)
        except FileNotFoundError:
            return []
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=HOST) from problem
        return _parse_host(data).records

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
            facts = self._facts
            if facts:
                last = facts[-1]
                prev, ended = last["hash"], last["kind"] == "End"
            else:  # pragma: no cover - a store always holds its Start
                prev, ended = None, False
            blobs: dict[str, bytes] = {}
            fact, line = self._build(kind, fields, facts[-1]["n"] + 1, prev, ended, blobs)
            self._commit([fact], [line], blobs, sync)
            return fact

    def sync(self) -> None:
        """Make every fact written so far durable (nothing to do when they are). On failure the
        facts that were not durable are cut from the history and StorageError is raised."""
        if self._unsynced_from is not None:
            with self._lock:
                if self._unsynced_from is not None and self._fd is not None:
                    self._sync_history(self._facts[-1]["n"])

    @property
    def synced(self) -> bool:
        """Whether every fact written is durable."""
        return self._unsynced_from is None

    def append_many(self, items: Sequence[tuple[str, dict]], *, sync: bool = True) -> list[dict]:
        """Write several facts with one write and one fsync (group commit): all or none.
        `sync` as for `append`."""
        self._require_writable()
        with self._lock:
            if self._fd is None:
                raise ValueError(f"run {self.run_id} is not open for appending")
            last = self._facts[-1]
            n = last["n"]
            prev = last["hash"]
            ended = last["kind"] == "End"
            blobs: dict[str, bytes] = {}
            facts: list[dict] = []
            lines: list[bytes] = []
            for kind, fields in items:
                n += 1
                fact, line = self._build(kind, fields, n, prev, ended, blobs)
                facts.append(fact)
                lines.append(line)
                prev = fact["hash"]
                ended = kind == "End"
            if not facts:
                return []
            self._commit(facts, lines, blobs, sync)
            return facts

    def _build(self, kind: str, fields: dict, n: int, prev: str | None, ended: bool,
               blobs: dict[str, bytes], *, allow_start: bool = False) -> tuple[dict, bytes]:
        """The fact and its line; large values added to `blobs`. Raises before any I/O."""
        if kind not in VALUE_FIELDS:
            raise ValueError(f"unknown fact kind {kind!r}")
        if kind == "Start" and not allow_start:
            raise ValueError("Start is written by RunStore.create")
        if ended:
            raise ValueError("the history already has its End")
        if not isinstance(fields, dict):
            raise TypeError("fields is a dict")
        if "n" in fields or "kind" in fields or "prev" in fields or "hash" in fields:
            raise ValueError(f"{sorted(_RESERVED_SET.intersection(fields))} are set by the store")
        for field, ref_name in _VALUE_REFS[kind]:
            if ref_name in fields:
                raise ValueError(f"pass `{field}` itself; the store decides whether to refer to it")
        fact: dict[str, Any] = dict(fields)  # non-text field names fail in canonical_bytes
        if kind == "End" and "outcome" in fields:
            ending = _ending_of(fields["outcome"])
            given = fact.get("ending")
            if given is not None and given != ending:
                raise ValueError(f"`ending` {given!r} disagrees with the outcome")
            if ending is not None:
                fact["ending"] = ending
        fact["n"] = n
        fact["kind"] = kind
        fact["prev"] = prev
        try:
            hash_input = orjson.dumps(fact, option=_OPT)
        except orjson.JSONEncodeError:
            hash_input = canonical_bytes(fact)
        if len(hash_input) > self.inline_limit:
            # Some value may be over the limit: measure each one (a value's JSON is part of the
            # fact's, so a fact within the limit has no value over it).
            moved = False
            for field, ref_name in _VALUE_REFS[kind]:
                if field not in fact:
                    continue
                encoded = canonical_bytes(fact[field])
                if len(encoded) > self.inline_limit:
                    hex_ = hashlib.sha256(encoded).hexdigest()
                    blobs[hex_] = encoded
                    del fact[field]
                    fact[ref_name] = "sha256:" + hex_
                    moved = True
            if moved:
                hash_input = canonical_bytes(fact)
        fact["hash"] = "sha256:" + hashlib.sha256(hash_input).hexdigest()
        try:
            return fact, orjson.dumps(fact, option=_OPT_LINE)
        except orjson.JSONEncodeError:
            return fact, canonical_bytes(fact) + b"\n"

    def _commit(self, facts: list[dict], lines: list[bytes], blobs: dict[str, bytes],
                sync: bool = True) -> None:
        first = facts[0]["n"]
        if blobs:
            self._write_blobs(blobs, first)
        self._write_history(lines[0] if len(lines) == 1 else b"".join(lines), first)
        self._facts.extend(facts)
        if blobs:  # a value went by reference
            for fact in facts:
                self._index_refs(fact)
        if sync:
            self._sync_history(first)

    def _index_refs(self, fact: dict) -> None:
        for field in VALUE_FIELDS[fact["kind"]]:
            ref = fact.get(field + "_ref")
            if ref is not None:
                self._refs.setdefault(ref[len("sha256:"):], set()).add((fact["n"], field))

    def _write_blobs(self, blobs: dict[str, bytes], fact_n: int) -> None:
        wrote = False
        directory = os.path.join(self.path, VALUES)
        for hex_, data in blobs.items():
            if hex_ in self._known_blobs:
                continue
            path = os.path.join(directory, hex_)
            try:
                if _sha256_hex(_read_file(path)) == hex_:
                    self._known_blobs.add(hex_)
                    continue
            except OSError:
                pass
            self._write_blob_file(directory, hex_, data, fact_n)
            self._known_blobs.add(hex_)
            wrote = True
        if wrote and self._fsync:
            try:
                _fsync_dir(directory)
            except OSError as problem:
                raise StorageError(f"cannot sync values/: {_strerror(problem)}", fact_n,
                                   component=VALUES) from problem

    def _write_blob_file(self, directory: str, hex_: str, data: bytes, fact_n: int | None) -> None:
        tmp = os.path.join(directory, f".tmp-{hex_}-{os.getpid()}")
        fd = None
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            _write_all(fd, data)
            if self._fsync:
                os.fsync(fd)
            os.close(fd)
            fd = None
            os.replace(tmp, os.path.join(directory, hex_))
        except BaseException as problem:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if isinstance(problem, OSError):
                component = f"{os.path.basename(directory)}/{hex_}"
                raise StorageError(f"cannot write: {_strerror(problem)}", fact_n,
                                   component=component) from problem
            raise

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
        if unsynced is not None and end - unsynced[1] > _TEAR_WINDOW:
            self._sync_history(fact_n)  # keep what may tear within the window
        try:
            if self._fsync and (end > self._reserved_end or len(data) > _TEAR_WINDOW):
                self._reserve(start, end)
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
        _RESERVE_MIN up to _RESERVE_MAX at a time) and is cut off when the store closes.

        What this changes after a machine crash: facts written over reserved space and not yet
        synced may reach the disk in any order of pages, so zeros may stand in any of them, not
        only at the end. At most _TEAR_WINDOW bytes are ever unsynced there, and the reader takes
        an unparsable line holding a NUL within that many bytes of the end as the start of a torn
        tail (docs/trace.md, sections 9 and 10). A write larger than the window is appended past
        the end of the file instead, as without reserved space.

        Reserving is an optimisation: if it fails (a full disk), the facts are appended as they
        would be without it."""
        fd = self._fd
        if end - start > _TEAR_WINDOW:
            if self._reserved_end > start:
                os.ftruncate(fd, start)  # a failure here is the write's own failure
                self._reserved_end = start
            return
        room = min(max(end >> 3, _RESERVE_MIN), _RESERVE_MAX)
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
            _sync_appended(self._fd)
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
                del self._facts[count:]
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
            return self._put_source(text, sync_dir=True)

    def _put_source(self, text: str, *, sync_dir: bool) -> str:
        if not isinstance(text, str):
            raise TypeError("a source is text")
        data = text.encode("utf-8")
        hex_ = _sha256_hex(data)
        directory = os.path.join(self.path, SOURCES)
        path = os.path.join(directory, hex_)
        try:
            if _sha256_hex(_read_file(path)) == hex_:
                return "sha256:" + hex_
        except OSError:
            pass
        self._write_blob_file(directory, hex_, data, None)
        if sync_dir and self._fsync:
            try:
                _fsync_dir(directory)
            except OSError as problem:
                raise StorageError(f"cannot sync sources/: {_strerror(problem)}",
                                   component=SOURCES) from problem
        return "sha256:" + hex_

    # -- host records ---------------------------------------------------------------------------

    def host_record(self, record: dict) -> dict:
        """Append a host record (a JSON object with a text `kind`) to host.jsonl, durably."""
        self._require_writable()
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            raise ValueError("a host record is a dict with a text `kind`")
        if record["kind"] in STORE_RECORDS:
            raise ValueError(f"host records of kind {record['kind']!r} are written by the store")
        if "prev" in record or "hash" in record:
            raise ValueError("`prev` and `hash` of a host record are the store's (its chain)")
        self.sync()  # a record names the head: the facts up to it are durable first
        with self._lock:
            self._write_host(record)
        return record

    def _open_host(self) -> None:
        if self._host_fd is None:
            path = os.path.join(self.path, HOST)
            existed = os.path.exists(path)
            try:
                self._host_fd = os.open(
                    path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                if not existed and self._fsync:
                    _fsync_dir(self.path)
            except OSError as problem:
                raise StorageError(f"cannot open: {_strerror(problem)}", component=HOST) from problem

    def _write_host(self, record: dict) -> None:
        chained = dict(record, prev=self._host_head)
        digest = "sha256:" + _sha256_hex(canonical_bytes(chained))
        chained["hash"] = digest
        line = canonical_bytes(chained) + b"\n"
        self._open_host()
        fd = self._host_fd
        start = self._host_size
        try:
            if self._host_dirty:
                os.ftruncate(fd, start)
                self._host_dirty = False
            _write_all(fd, line)
            if self._fsync:
                os.fsync(fd)
        except BaseException as problem:
            try:
                os.ftruncate(fd, start)
            except OSError:
                self._host_dirty = True
            if isinstance(problem, OSError):
                raise StorageError(f"cannot append a host record: {_strerror(problem)}",
                                   component=HOST) from problem
            raise
        self._host_size = start + len(line)
        self._host_head = digest

    # -- holes ----------------------------------------------------------------------------------

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
            latest = max((i for i, f in enumerate(facts) if f["kind"] == "Checkpoint"), default=None)
            if latest is None or latest <= 1:
                return 0
            moved = facts[1:latest]
            archive_dir = os.path.join(self.path, ARCHIVE)
            os.makedirs(archive_dir, mode=0o700, exist_ok=True)
            name = f"facts-{moved[0]['n']}-{moved[-1]['n']}.jsonl"
            try:
                self._write_durably(os.path.join(archive_dir, name),
                                    b"".join(canonical_bytes(f) + b"\n" for f in moved))
                checkpoints = self.archived_checkpoints + sum(1 for f in moved if f["kind"] == "Checkpoint")
                anchor = {"checkpoints": checkpoints, "head": moved[-1]["hash"], "through": moved[-1]["n"]}
                self._write_durably(os.path.join(self.path, ANCHOR), canonical_bytes(anchor) + b"\n")
                kept = [facts[0]] + facts[latest:]
                history = os.path.join(self.path, HISTORY)
                data = b"".join(canonical_bytes(f) + b"\n" for f in kept)
                self._write_durably(history + ".new", data)
                os.replace(history + ".new", history)
                _fsync_dir(self.path)
            except OSError as problem:
                raise StorageError(f"cannot archive: {_strerror(problem)}", component=ARCHIVE) from problem
            # Append to the new file from now on (the old descriptor names the replaced one).
            old = self._fd
            self._fd = os.open(history, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            if not _lock_for_append(self._fd):  # only a reader's probe can hold the new file
                raise StorageError("cannot archive: the new history stayed locked", component=HISTORY)
            if old is not None:
                os.close(old)
            self._facts = kept
            self._size = self._reserved_end = len(data)
            self.archived_checkpoints = checkpoints
            return len(moved)

    def _write_durably(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(os.path.dirname(path))

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
        kind_fields = VALUE_FIELDS[fact["kind"]]
        if field is None:
            fields = [f for f in kind_fields if f in fact or f + "_ref" in fact]
            if not fields:
                raise RedactRefused(f"fact {n} ({fact['kind']}) holds no value")
        else:
            if field not in kind_fields:
                raise RedactRefused(f"{field!r} is not a value field of {fact['kind']}")
            fields = [field]
        for f in fields:
            if f in fact:
                raise RedactRefused(
                    f"fact {n}: {f} is stored inline (its JSON is at most the inline limit), so "
                    "it is part of the fact's hash and cannot become a hole without breaking the "
                    "chain; create runs with inline_limit=0 to make every value redactable")
            if f + "_ref" not in fact:
                raise RedactRefused(f"fact {n} has no {f}")
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


# ---------------------------------------------------------------------------------------------
# Stored-run discovery


COMPONENT_LIMIT = 4 * 1024 * 1024  # bytes of one component a page may read ...
PROBE = 1  # ... plus one byte, to tell "exactly 4 MiB" from "more"
PAGE_LIMIT = 16 * 1024 * 1024  # bytes a page may read in all
ENTRY_LIMIT = 10_000  # non-dot root entries examined before interpreting names


class _Budget:
    def __init__(self, total: int):
        self.left = total


def _bounded_read(path: str, budget: _Budget) -> tuple[bytes | None, str | None, OSError | None]:
    """Read at most min(4 MiB + 1, budget) bytes. Returns (data, limit reason, error)."""
    cap = min(COMPONENT_LIMIT + PROBE, budget.left)
    chunks: list[bytes] = []
    got = 0
    try:
        # O_NONBLOCK: a FIFO in place of a component must not hang discovery.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as problem:
        return None, None, problem
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        while got < cap:
            chunk = os.read(fd, min(cap - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        # Stopped by the page ceiling rather than the component bound: more bytes exist?
        more = got >= cap and os.fstat(fd).st_size > got
    except OSError as problem:
        budget.left -= got  # partial bytes retained before a read error count
        return None, None, problem
    finally:
        os.close(fd)
    budget.left -= got
    if got >= COMPONENT_LIMIT + PROBE:
        return None, "larger than the 4 MiB component read bound", None
    if more:
        return None, "the 16 MiB page read ceiling was reached", None
    return b"".join(chunks), None, None


def _display_name(name: str) -> str:
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _row(name: str) -> dict:
    return {
        "run": _display_name(name),
        "historyPresent": False,
        "record": "not-started",
        "truncated": False,
        "ending": None,
        "entry": None,
        "program": None,
        "lastFact": None,
        "hostDecision": None,
        "problem": None,
    }


def _problem(component: str, status: str, message: str, fact: int | None = None) -> dict:
    return {"component": component, "status": status, "message": message, "fact": fact}


def _component_size(path: str) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _inspect(root: str, name: str, budget: _Budget, first: bool) -> dict | None:
    """One discovery row, or None when the page ceiling leaves no room to examine this run."""
    row = _row(name)
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except OSError as problem:
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", _strerror(problem))
        return row
    if not stat.S_ISDIR(st.st_mode):
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", "not a run directory")
        return row
    if not valid_run_id(name):
        row["record"] = "unreadable"
        row["problem"] = _problem("run", "unreadable", "the directory name is not a run id")
        return row
    history_path = os.path.join(path, HISTORY)
    host_path = os.path.join(path, HOST)
    row["historyPresent"] = os.path.lexists(history_path)
    if not row["historyPresent"]:
        return row
    need = (min(_component_size(history_path), COMPONENT_LIMIT + PROBE)
            + min(_component_size(host_path), COMPONENT_LIMIT + PROBE))
    if need > budget.left and not first:
        return None
    data, limited, error = _bounded_read(history_path, budget)
    if error is not None:
        row["record"] = "unreadable"
        row["truncated"] = None
        row["problem"] = _problem(HISTORY, "unreadable", _strerror(error))
        return row
    if limited is not None:
        row["record"] = "inspection-limited"
        row["truncated"] = None
        row["problem"] = _problem(HISTORY, "inspection-limited", limited)
        return row
    try:
        anchor = _read_anchor(os.path.join(root, name))
    except StorageError:
        anchor = None
    # host.jsonl is read before the history is judged: its `durable` record decides where a torn
    # tail may start (docs/trace.md section 10); its own problems are reported below.
    host_data, host_limited, host_error = _bounded_read(host_path, budget)
    host = None
    if host_data is not None and host_error is None and host_limited is None:
        try:
            host = _parse_host(host_data)
        except StorageError as problem:
            host_error = problem
    parsed = _parse_history(data, name, anchor, host.durable if host else None)
    facts = parsed.facts
    row["truncated"] = parsed.torn is not None
    if facts:
        start = facts[0]
        entry = start.get("entry")
        if isinstance(entry, dict):
            module, function = entry.get("module"), entry.get("function")
            row["entry"] = {"module": module if isinstance(module, str) else None,
                            "function": function if isinstance(function, str) else None}
        program = start.get("program")
        row["program"] = program if isinstance(program, str) else None
        last = facts[-1]
        row["lastFact"] = {"n": last["n"], "hash": last["hash"]}
        if last["kind"] == "End":
            ending = last.get("ending")
            row["ending"] = ending if ending is not None else _ending_of(last.get("outcome"))
    if parsed.error is not None:
        row["record"] = "unreadable"
        row["truncated"] = None  # the tail was not reached
        err = parsed.error
        row["problem"] = _problem(HISTORY, "unreadable", err.message, err.fact_n)
        return row
    if not facts:
        row["record"] = "not-started"
        return row
    row["record"] = "complete" if facts[-1]["kind"] == "End" else "incomplete"
    if isinstance(host_error, StorageError):
        row["record"] = "unreadable"
        row["problem"] = _problem(HOST, "unreadable", host_error.message)
        return row
    if host_error is not None:
        if isinstance(host_error, FileNotFoundError):
            return row
        row["record"] = "unreadable"
        row["problem"] = _problem(HOST, "unreadable", _strerror(host_error))
        return row
    if host_limited is not None:
        row["record"] = "inspection-limited"
        row["problem"] = _problem(HOST, "inspection-limited", host_limited)
        return row
    records = host.records
    head = facts[-1]["hash"]
    for record in records:
        if record["kind"] in ("paused", "halted") and record.get("head") == head:
            row["hostDecision"] = record
    return row


def scan_runs(root: str, *, limit: int = 50, after: str | None = None) -> dict:
    """Stored-run discovery (the execution seed's rows): a page of runs under `root`, by id.

    Returns `{"runs": [row...], "nextAfter": id | None, "problems": [problem...]}`. Reads only
    history.jsonl and host.jsonl of each run (never a value or source file), within the read
    bounds, and never creates or changes anything. Invalid arguments raise ValueError."""
    if type(limit) is not int or not 1 <= limit <= 200:
        raise ValueError("limit is an integer from 1 to 200")
    if after is not None and (not isinstance(after, str) or not after or "/" in after
                              or "\0" in after):
        raise ValueError("after is a run id")
    root = os.fspath(root)
    result: dict[str, Any] = {"runs": [], "nextAfter": None, "problems": []}
    try:
        st = os.stat(root)
    except FileNotFoundError:
        result["problems"].append(_problem("root", "not-created", "the runs directory does not exist"))
        return result
    except OSError as problem:
        result["problems"].append(_problem("root", "unreadable", _strerror(problem)))
        return result
    if not stat.S_ISDIR(st.st_mode):
        result["problems"].append(_problem("root", "unreadable", "not a directory"))
        return result
    names: list[str] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                names.append(entry.name)
                if len(names) > ENTRY_LIMIT:
                    result["problems"].append(_problem(
                        "root", "inspection-limited",
                        f"more than {ENTRY_LIMIT} entries; discovery examines at most {ENTRY_LIMIT}"))
                    return result
    except OSError as problem:
        result["problems"].append(_problem("root", "unreadable", _strerror(problem)))
        return result
    names.sort(key=os.fsencode)
    if after is not None:
        floor = os.fsencode(after)
        names = [name for name in names if os.fsencode(name) > floor]
    budget = _Budget(PAGE_LIMIT)
    examined = 0
    for name in names:
        if len(result["runs"]) >= limit:
            break
        row = _inspect(root, name, budget, first=not result["runs"])
        if row is None:
            break
        result["runs"].append(row)
        examined += 1
    if examined < len(names) and result["runs"]:
        result["nextAfter"] = result["runs"][-1]["run"]
    return result
