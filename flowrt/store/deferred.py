"""What a RunLog that verifies as it is asked (an open with `defer=True`) does alike on every
store: serve the facts verified so far, verify more when a fact past them is asked for, and raise
what the verification found once it is asked for what lies past the damage (docs/trace.md §10).
And what an open for appending does alike, as it verifies a step at a time: let go of the
facts it has passed (`ShelvingRead`)."""

from __future__ import annotations

from itertools import islice
from typing import Callable

from flowrt.store import reading
from flowrt.store import shelf as shelving
from flowrt.store.open_calls import OpenCalls


class VerifiedAsAsked:
    """`verify`, `fact_at`, `facts_from`, `fact` and `is_hole` over what the store gives: `_facts`
    (its FactShelf of verified facts), `_holes` (the recorded holes), `_failure` (the StorageError
    the verification found, or None), `deferred` (whether it goes on) and `_read_more(count)`
    (verify up to `count` more facts, all when None; once it reaches the end it runs the end's
    checks, sets `_failure` if they fail and raises)."""

    def verify(self) -> None:
        """Finish a deferred verification (nothing to do otherwise); raises what `open` would."""
        if self._failure is not None:
            raise self._failure
        if self.deferred:
            self._read_more(None)

    def fact_at(self, index: int) -> dict | None:
        """The fact at `index` of the verified facts (0 is Start), verifying as far as that;
        None past the last fact (then everything has been verified)."""
        facts = self._facts
        while index >= len(facts):
            if not self.deferred:
                if self._failure is not None:
                    raise self._failure
                return None
            self._read_more(max(reading._VERIFY_STEP, index + 1 - len(facts)))
        return facts[index]

    def facts_from(self, index: int, count: int) -> list[dict]:
        """Up to `count` facts from `index` on, verifying as far as that; [] past the end."""
        facts = self._facts
        while len(facts) < index + count and self.deferred:
            self._read_more(max(reading._VERIFY_STEP, index + count - len(facts)))
        if self._failure is not None:
            raise self._failure
        return facts[index:index + count]

    def fact(self, n: int) -> dict:
        position = self._facts.index_of(n)
        if position is None and (self.deferred or self._failure is not None):
            self.verify()
            position = self._facts.index_of(n)
        if position is None:
            raise IndexError(f"no fact {n!r} in the history (it has {len(self._facts)}, some perhaps archived)")
        return self._facts[position]

    def is_hole(self, fact: dict | int, field: str) -> bool:
        """Whether `field` of the fact is a recorded hole. Without verifying on: a deferred open
        knows its holes as recorded from the start (as `value` meets them), and the end of its
        verification checks each against its fact."""
        n = fact if isinstance(fact, int) else fact["n"]
        return (n, field) in self._holes


def release(shelf: "shelving.FactShelf", reader: "reading._HistoryReader | None", index: int,
            leave: Callable[[int], bool]) -> None:
    """`RunLog.release_before(index)` of a read-only store, alike on both: the verified facts
    below `index` (Start aside, the newest kept) leave `shelf`, once `leave(count)` has readied
    its loader for them (False: they stay held, as sound as before, only the memory is not
    given back); `reader`, a deferred open's, is told (`let_go`). Under the store's lock."""
    count = min(index, len(shelf)) - shelf.base
    if count < 2 or count >= len(shelf.kept) or not leave(count):
        return
    if reader is not None:
        let_go(reader, shelf.kept, count)
    shelf.shelve(count)


def let_go(reader: "reading._HistoryReader", kept: list[dict], count: int) -> None:
    """The reader's first `count` facts (`kept[:count]`) are about to be taken off its front by
    their store (`release_before`): counted in `shelved`, and the hash of the durable fact noted
    if it is among them (the reader checks it at the end)."""
    if reader.durable:  # not yet checked: the fact it names may be among these
        for fact in kept[:count]:
            if fact["n"] == reader.durable:
                reader.durable_seen = fact["hash"]
    reader.shelved += count


class ShelvingRead:
    """An appender's open going through a run's facts a step at a time (`read`): the open calls
    found on the way (`calls`, so that a resume need not read them all back), and the facts
    passed left to the store (`shelf`, whose loader reads them back) but for the newest
    `shelving.KEEP`, as an appender leaves its own once it has `SHELVE_AT` of them. A resume of
    a long run never archived then holds what an appender does, not the run (300,000 facts:
    +358 MB before). `leave(count)` readies the store's loader for the reader's first `count`
    facts before they go; False leaves them held, and every later one (the store stops shelving)."""

    def __init__(self, reader: "reading._HistoryReader", leave: Callable[[int], bool]) -> None:
        self.reader = reader
        self.shelf = shelving.FactShelf(reader.facts)
        self.calls = OpenCalls()
        self._leave: Callable[[int], bool] | None = leave
        self._fed = 0  # facts of `reader.facts` given to `calls`

    def read(self) -> bool:
        """Verify the next step of facts and let go of those passed; True once the reader is
        done (the end, a torn tail, or damage: the reader's `error`)."""
        reader = self.reader
        done = reader.read(shelving.SHELVE_AT)
        kept = reader.facts
        take = self.calls.take
        for index in range(self._fed, len(kept)):
            take(kept[index])
        self._fed = len(kept)
        count = len(kept) - shelving.KEEP
        if not done and count >= shelving.SHELVE_AT and self._leave is not None:
            if not self._leave(count):
                self._leave = None
                return done
            let_go(reader, kept, count)
            self.shelf.shelve(count)
            self._fed -= count
        return done


class OpenCallsKept:
    """`RunLog.open_calls` kept by the store: `_open_calls` (OpenCalls as of the fact of index
    `_open_calls_upto`, or None) over `_facts`, under `_lock`. An open for appending finds them
    on its way (`ShelvingRead`); otherwise the first question goes through the facts once (a
    view of a run asks it for each pending call: the reply's types, the expected reply). The
    facts appended since (or read on, `refresh`) are taken as they are asked for; a store that
    cuts facts taken, or renumbers its facts' indexes (an archive), sets `_open_calls` to None."""

    _open_calls: OpenCalls | None = None
    _open_calls_upto = 0

    def open_calls(self) -> dict[str, dict]:
        if self._open_calls is None:
            self.verify()  # (a deferred open: every fact, before they are gone through)
        with self._lock:
            calls, facts = self._open_calls, self._facts
            if calls is None:
                calls, self._open_calls_upto = OpenCalls(), 0
            take, start, upto = calls.take, self._open_calls_upto, len(facts)
            # (the shelf walked, not copied, the first time: its shelved facts a step at a time)
            for fact in facts.between(start, upto) if start else islice(facts, upto):
                take(fact)
            self._open_calls, self._open_calls_upto = calls, upto
            return dict(calls.calls)


class HostRecordsKept:
    """`RunLog.host_records` kept by an appender from what its open read (`_host_listed`) until
    it writes a host record (`_host_listed = None`): a resume asks for them several times before
    it writes, each ask otherwise a read and verification of every record. Only an appender writes
    a run's host records (the run directory's lock, PostgreSQL's lease), so nothing changes them
    under it. `_read_host_records` is the store's own read."""

    _host_listed: list[dict] | None = None

    def host_records(self) -> list[dict]:
        listed = self._host_listed
        if listed is not None:
            return [dict(record) for record in listed]  # (copies: a caller may change them)
        return self._read_host_records()
