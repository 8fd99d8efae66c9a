"""A live run's facts without holding them all: Start and the newest facts stay in memory as
dicts, the older ones are left where the store wrote them and read back, verified, when asked for.

A store that appends to a run holds every fact it wrote only until it has `SHELVE_AT` of them in
memory; it then keeps the newest `KEEP` and shelves the rest (`FactShelf.shelve`). Without this a
host's memory grew with every live run's history (a run of 50,000 calls: +138 MB), and so did
the cyclic collector's full pauses (a fact holding a dict is never untracked: 61 ms a pause at
that size). Reading a shelved fact costs a read and a verification (each line's hash, the chain
between the lines read), which the hot path never pays: a call writes facts and reads only the
last one. The loader is the store's own (`loader.load(first, stop, shelf)` -> the facts of
indexes [first, stop), verified); for the run directory it is `HistoryLines`.
"""

from __future__ import annotations

import os
from array import array
from itertools import accumulate
from typing import Iterator, Protocol

import orjson

from flowrt.store.chain import fact_position
from flowrt.store.durable import _strerror
from flowrt.store.errors import StorageError
from flowrt.store.layout import HISTORY
from flowrt.store.reading import _HistoryReader

#: A store shelves its older facts once it holds this many (Start aside) ...
SHELVE_AT = 1024
#: ... keeping the newest this many in memory: what a host reads back soon after writing it
#: (the last Checkpoint, the Call a Reply answers) is nearly always among them.
KEEP = 128
#: Facts read back from storage at a time when iterating.
LOAD_STEP = 4096
#: Bytes of history.jsonl split into lines at a time when shelved facts' lines are noted.
NOTE_WINDOW = 4 << 20


class Loader(Protocol):
    def load(self, first: int, stop: int, shelf: "FactShelf") -> list[dict]: ...


class FactShelf:
    """The verified facts of a run, in order, as a read-only sequence (index 0 is Start):
    `kept` holds the facts from index `base` on, `start` is Start, and the facts of indexes
    [1, base) are shelved, read back by `loader` when asked for. A fact is a dict as stored; do
    not mutate it. Facts shelved are contiguous in number (only an archive makes a gap, between
    Start and the fact after it), so a fact's index follows from its number without reading it."""

    __slots__ = ("kept", "base", "start", "second_n", "checkpoint", "checkpoints", "loader", "ahead", "ahead_from")

    def __init__(self, facts: list[dict], loader: Loader | None = None) -> None:
        #: the newest facts (every fact while nothing is shelved); a store appends to it directly
        self.kept = facts
        self.base = 0
        self.start: dict | None = None
        #: the number of the fact at index 1, once that fact leaves `kept`
        self.second_n: int | None = None
        #: the index of the latest Checkpoint among the shelved facts, and how many they hold
        self.checkpoint: int | None = None
        self.checkpoints = 0
        self.loader = loader
        #: shelved facts read back by a walk through them in order (`__getitem__`), from index
        #: `ahead_from` on: the next ones it asks for are read with them rather than one each
        self.ahead: list[dict] = []
        self.ahead_from = 1

    def __len__(self) -> int:
        return self.base + len(self.kept)

    def __bool__(self) -> bool:
        return bool(self.kept) or self.base > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, FactShelf)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<FactShelf of {len(self)} facts, {self.base} shelved>"

    def __getitem__(self, index):
        if type(index) is slice:
            start, stop, step = index.indices(self.base + len(self.kept))
            if step != 1:
                return list(self)[index]
            return self.between(start, stop)
        base = self.base
        if index < 0:
            index += base + len(self.kept)
            if index < 0:
                raise IndexError("fact index out of range")
        if index >= base:
            return self.kept[index - base]
        if index == 0:
            return self.start
        offset = index - self.ahead_from
        ahead = self.ahead
        if 0 <= offset < len(ahead):
            return ahead[offset]
        if offset != len(ahead):
            # Not the fact after the last one read back: a lookup (the Call a Reply answers)
            # reads its own line; if the next one asked for is the fact after it, a walk.
            self.ahead, self.ahead_from = [], index + 1
            return self.loader.load(index, index + 1, self)[0]
        self.ahead_from, self.ahead = index, self.loader.load(index, min(base, index + LOAD_STEP), self)
        return self.ahead[0]

    def between(self, first: int, stop: int) -> list[dict]:
        """The facts of indexes [first, stop), reading the shelved ones back."""
        base = self.base
        if stop <= first:
            return []
        if first >= base:
            return self.kept[first - base:stop - base]
        out: list[dict] = []
        if first == 0:
            out.append(self.start)
            first = 1
        if first < min(stop, base):
            out.extend(self.loader.load(first, min(stop, base), self))
        if stop > base:
            out.extend(self.kept[:stop - base])
        return out

    def picked(self, indexes: list[int]) -> Iterator[dict]:
        """The facts at `indexes` (ascending), the shelved ones read back `LOAD_STEP` at a time
        rather than one read each."""
        base = self.base
        loaded: list[dict] = []
        loaded_from = 0
        for index in indexes:
            if index >= base:
                yield self.kept[index - base]
            elif index == 0:
                yield self.start
            else:
                if not loaded_from <= index < loaded_from + len(loaded):
                    loaded_from, loaded = index, self.loader.load(index, min(base, index + LOAD_STEP), self)
                yield loaded[index - loaded_from]

    def __iter__(self) -> Iterator[dict]:
        base = self.base
        if base:
            yield self.start
            for first in range(1, base, LOAD_STEP):
                yield from self.loader.load(first, min(base, first + LOAD_STEP), self)
        yield from list(self.kept)

    def __reversed__(self) -> Iterator[dict]:
        kept = self.kept  # (by index, no copy: a reader looking for a recent fact stops soon)
        for index in range(len(kept) - 1, -1, -1):
            yield kept[index]
        base = self.base
        if base:
            for stop in range(base, 1, -LOAD_STEP):
                yield from reversed(self.loader.load(max(1, stop - LOAD_STEP), stop, self))
            yield self.start

    def index_of(self, n: int) -> int | None:
        """The index of fact `n`, or None when there is none (or it was archived)."""
        if type(n) is not int:
            return None
        if not self.base:
            return fact_position(self.kept, n)
        if n == 1:
            return 0
        index = n - self.second_n + 1
        if index < 1 or index >= len(self):
            return None
        if index < self.base:
            return index  # (shelved facts are contiguous in number)
        return index if self.kept[index - self.base]["n"] == n else None

    def latest_checkpoint(self) -> int | None:
        """The index of the latest Checkpoint, or None."""
        kept = self.kept
        for offset in range(len(kept) - 1, -1, -1):
            if kept[offset]["kind"] == "Checkpoint":
                return self.base + offset
        return self.checkpoint

    def checkpoints_through(self, index: int) -> int:
        """How many Checkpoints the facts of indexes [1, index] hold: those shelved were counted
        as they were shelved, so a resume numbering its checkpoint reads none of them back."""
        base = self.base
        if not base:
            return sum(1 for fact in self.kept[1:index + 1] if fact["kind"] == "Checkpoint")
        if index >= base:
            return self.checkpoints + sum(1 for fact in self.kept[:index + 1 - base] if fact["kind"] == "Checkpoint")
        if not self.checkpoints:
            return 0
        if index >= self.checkpoint:  # (the latest shelved one: every shelved Checkpoint is by then)
            return self.checkpoints
        return sum(1 for fact in self.between(1, index + 1) if fact["kind"] == "Checkpoint")

    def shelve(self, count: int) -> None:
        """Leave the oldest `count` kept facts to storage (Start stays): the store has made sure
        its loader can read them back, and that none of them can still be cut by a failed sync."""
        kept = self.kept
        if count < 1 or count >= len(kept):
            raise ValueError("shelve leaves at least one fact kept")
        if not self.base:
            self.start = kept[0]
            self.second_n = kept[1]["n"]
        found = 0
        for offset in range(count - 1, -1, -1):
            if kept[offset]["kind"] == "Checkpoint":
                if not found:
                    self.checkpoint = self.base + offset
                found += 1
        self.checkpoints += found
        del kept[:count]
        self.base += count

    def cut(self, count: int) -> None:
        """Remove the facts from index `count` on (a failed sync's): never shelved ones."""
        if count < self.base or (count == self.base and self.base):
            raise AssertionError("a shelved fact cannot be cut, nor every kept one")
        del self.kept[count - self.base:]


class HistoryLines:
    """Where the lines of a run directory's shelved facts are in history.jsonl, and their
    reading back: `starts[i - 1]` is the byte offset of the line of the fact at index i, and
    `kept_at` where the first kept fact's line begins. Every fact's line follows the one before
    it in the file, from Start's at offset 0."""

    __slots__ = ("path", "starts", "kept_at")

    def __init__(self, run_path: str) -> None:
        self.path = os.path.join(run_path, HISTORY)
        self.starts = array("q")
        self.kept_at = 0

    def note(self, count: int, first_index: int, written_end: int) -> None:
        """Find the lines of the next `count` facts (the first at index `first_index`), from
        `kept_at` on, before they are shelved: the kept facts' lines are the bytes from there to
        `written_end`, split in C a window at a time. A window is a guess at where those lines
        end (doubled for a line longer than it), at most NOTE_WINDOW: the first shelving after an
        open of a long run notes every fact it read, and split whole (300,000 lines, the 85 MB
        they are in and a bytes object each) it took a resume to +530 MB."""
        at = self.kept_at
        found: list[int] = []
        left = count
        window = min(NOTE_WINDOW, max(1 << 16, count * 512))
        try:
            with open(self.path, "rb", buffering=0) as handle:
                fd = handle.fileno()
                while left:
                    want = min(written_end - at, window)
                    data = os.pread(fd, want, at) if want > 0 else b""
                    if not data or len(data) != want:
                        raise StorageError("the history is shorter than the facts written", component=HISTORY)
                    lines = data.split(b"\n", left)
                    complete = min(len(lines) - 1, left)  # (each piece but the last ended in a newline)
                    if not complete:
                        if want == written_end - at:
                            raise StorageError("the history is shorter than the facts written", component=HISTORY)
                        window *= 2  # a line longer than the window
                        continue
                    del lines[complete:]
                    # each line's start, then where the next begins: at, at + len + 1, ...
                    starts = list(accumulate(map((1).__add__, map(len, lines)), initial=at))
                    at = starts.pop()
                    found.extend(starts)
                    left -= complete
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=HISTORY) from problem
        self.kept_at = at
        # (Start's line, at index 0, is never read back)
        self.starts.extend(found[1:] if first_index == 0 else found)

    def load(self, first: int, stop: int, shelf: FactShelf) -> list[dict]:
        """The facts of indexes [first, stop) (all shelved, first >= 1), read back and verified
        (`read_back`)."""
        lead = lead_of(first)
        starts = self.starts
        begin = starts[lead - 1]
        end = starts[stop - 1] if stop - 1 < len(starts) else self.kept_at
        try:
            with open(self.path, "rb", buffering=0) as handle:
                data = os.pread(handle.fileno(), end - begin, begin)
        except OSError as problem:
            raise StorageError(f"cannot read: {_strerror(problem)}", component=HISTORY) from problem
        return read_back(data, first, stop, shelf, HISTORY)


def lead_of(first: int) -> int:
    """The index a read of shelved facts from `first` on begins at: the fact before it too
    (unless that is Start), so that the chain into `first` is checked."""
    return first - 1 if first > 1 else first


def read_back(data: bytes, first: int, stop: int, shelf: FactShelf, component: str) -> list[dict]:
    """The shelved facts of indexes [first, stop) from `data`, the lines of the facts of indexes
    [lead_of(first), stop): each line's hash and number checked, the chain between them, into
    the first kept fact, and (fact 2) from Start. StorageError when they are not what was
    written: the record changed under the run."""
    lead = lead_of(first)
    first_n = shelf.second_n + lead - 1
    facts = verified_lines(data, first_n, component)
    if len(facts) != stop - lead or (first_n == 2 and facts[0]["prev"] != shelf.start["hash"]):
        raise StorageError("the history changed under the run", first_n, component=component)
    follows = shelf.kept[0] if stop == shelf.base and shelf.kept else None
    if follows is not None and follows["prev"] != facts[-1]["hash"]:
        raise StorageError("the history changed under the run", follows["n"] - 1, component=component)
    return facts[first - lead:]


def verified_lines(data: bytes, first_n: int, component: str = HISTORY) -> list[dict]:
    """The facts of `data`, complete lines of facts numbered from `first_n` on, each checked as
    an open checks it (canonical, its hash, its number) and chained to the one before it, from
    what the first line claims to follow. StorageError for anything else."""
    try:
        claimed_prev = orjson.loads(data[:data.index(b"\n")])["prev"]
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise StorageError("the history changed under the run", first_n, component=component) from None
    reader = _HistoryReader(data, None, None)
    reader.facts = [{"n": first_n - 1, "hash": claimed_prev, "kind": ""}]
    reader.prev = claimed_prev
    reader.read()
    if reader.error is not None:
        raise StorageError(reader.error.message, reader.error.fact_n, component=component)
    if reader.torn is not None:
        raise StorageError("the history changed under the run", first_n, component=component)
    return reader.facts[1:]
