"""Reading and verifying history bytes: the canonical checks of each line, the chain, torn tails,
durable marks, and the reader that verifies as far as asked (a deferred open). Shared by the
run directory's open and by discovery; the checks of one fact are `chain.check_fact`'s."""

from __future__ import annotations

import gc
import hashlib
from dataclasses import dataclass

import orjson

from flowrt.store import durable
from flowrt.store.canonical import _OPT, _NotCanonical, _NotJSON, loads_canonical
from flowrt.store.chain import _check_fact, fact_position
from flowrt.store.errors import StorageError, TornTail
from flowrt.store.format import _HASH_RE, _VALUE_REFS, DATA_VERSION, _ending_of
from flowrt.store.layout import HISTORY

_VERIFY_STEP = 4096  # facts a deferred verification checks at a time
_WINDOW = 4 << 20  # bytes of history split into lines at a time


@dataclass(slots=True)
class _Parsed:
    facts: list[dict]
    valid_len: int  # bytes of the validated prefix
    torn: TornTail | None
    error: StorageError | None


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
    last one unchanged.

    `data` is the history's bytes, or a `durable.FileBytes` that reads them from the file as the
    reader goes (a run directory's open: a long history is never held whole).

    Its owner may take verified facts off the front of `facts` while it reads on (a store that
    leaves them to the file, `flowrt.store.shelf`): it adds their count to `shelved`, and notes
    the hash of the durable fact in `durable_seen` if that fact is among them."""

    __slots__ = ("data", "size", "run_id", "anchor", "facts", "pos", "prev", "ended", "torn", "error", "done",
                 "lines", "index", "referring", "durable", "durable_head", "shelved", "durable_seen")

    def __init__(self, data: "bytes | durable.FileBytes", run_id: str | None, anchor: dict | None, durable: dict | None = None) -> None:
        self.data = data
        # the NUL bytes after the last line are reserved space (rows hold none: `written_end`)
        self.size = data.written_end() if hasattr(data, "written_end") else _written_end(data)
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
        #: facts taken off the front of `facts` by the owner (indexes stay those of all facts)
        self.shelved = 0
        #: the hash of fact `durable`, if the owner took it off `facts` before the end
        self.durable_seen: str | None = None

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
        seen = self.durable_seen
        if seen is None:
            if self.shelved:  # (`facts` no longer starts at Start: fact `durable`, if still here)
                offset = durable - facts[0]["n"]
                position = offset if 0 <= offset < len(facts) and facts[offset]["n"] == durable else None
            else:
                position = fact_position(facts, durable)
            if position is None:  # archived: the anchor, checked against its successor, covers it
                return
            seen = facts[position]["hash"]
        if seen != self.durable_head:
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
        try:
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
            window = data[pos:stop]
        except StorageError as problem:  # (a history read as it goes, `durable.FileBytes`)
            self.error = problem
            self.done = True
            return False
        self.lines = window.split(b"\n")
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
        shelved = self.shelved  # (a fact's index is that many more than its place in `facts`)
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
                        referring.append(shelved + len(facts))
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
                    if b"\0" in line and n > self.durable and (newline + 1 == size or size - pos <= durable._TEAR_WINDOW):
                        self.torn = TornTail(pos, size - pos)
                    else:
                        self.error = StorageError("the line is not JSON", n, component=HISTORY)
                    self.done = True
                    break
                except _NotCanonical:
                    self.error = StorageError("the line is not canonical JSON", n, component=HISTORY)
                    self.done = True
                    break
                if anchor is not None and shelved + len(facts) == 1 and isinstance(obj, dict) \
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
                referring.append(shelved + len(facts))
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

