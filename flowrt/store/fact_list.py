"""A run's facts as a store holds them in memory: the facts read when it opened, as dicts, and
the facts written since, as their canonical lines, parsed again when asked for.

Why not dicts throughout: a dict that holds a dict (a Call's arguments, a Reply's outcome, a
Checkpoint's function) is never untracked by CPython's cyclic collector, so every fact a live
run wrote was walked by each full collection for as long as the run lasted. With 20 runs of
3,000 calls in one host that was 4 µs of the host's CPU per call and a 61 ms pause per full
collection, both growing with the history (docs/impl.md, session 14). A line is bytes: the
collector never looks at it, and it is a third of the dict's memory. The newest fact, which
every append reads, is kept as the dict it was built as.
"""

from __future__ import annotations

from typing import Iterator

from flowdata.canonical import loads_canonical


class FactList:
    """The facts of a history in order (index 0 is Start, or the first fact held after an
    archive), read as a list of dicts: `len`, indexing, slices, iteration, `del` of a tail.
    Facts read are kept as given (`append`, `extend`); facts written (`add`) as their lines.
    A dict handed out for a line is parsed anew: do not mutate facts."""

    __slots__ = ("_items", "_last", "_last_at")

    def __init__(self, facts: list | None = None) -> None:
        # Shared, not copied: a store verifying on demand appends to the list it was given.
        self._items: list = [] if facts is None else facts
        self._last: dict | None = None
        self._last_at = -1  # the length at which `_last` is the newest fact

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __getitem__(self, index):
        items = self._items
        if type(index) is slice:
            return [item if type(item) is dict else _parsed(item) for item in items[index]]
        if index == -1 and self._last_at == len(items):
            return self._last
        item = items[index]
        return item if type(item) is dict else _parsed(item)

    def __iter__(self) -> Iterator[dict]:
        for item in self._items:
            yield item if type(item) is dict else _parsed(item)

    def __reversed__(self) -> Iterator[dict]:
        for item in reversed(self._items):
            yield item if type(item) is dict else _parsed(item)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, FactList)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __delitem__(self, index) -> None:
        del self._items[index]
        self._last_at = -1

    def append(self, fact: dict) -> None:
        """A fact read (kept as this dict)."""
        self._items.append(fact)
        self._last, self._last_at = fact, len(self._items)

    def extend(self, facts: list[dict]) -> None:
        """Facts read (kept as these dicts)."""
        if facts:
            self._items.extend(facts)
            self._last, self._last_at = facts[-1], len(self._items)

    def add(self, fact: dict, line: bytes) -> None:
        """A fact written, and its canonical line as written (with or without its newline)."""
        # Held without its newline, and so as a copy: the bytes orjson returns keep the room it
        # allocated to write them (~1 KiB for a line of 250 bytes).
        self._items.append(line[:-1] if line[-1:] == b"\n" else line)
        self._last, self._last_at = fact, len(self._items)

    def last_of_kind(self, kind: str) -> int | None:
        """The index of the last fact of `kind`, or None. A line holds the bytes `"kind":"K"` if
        its fact is of kind K (and may hold them in a value: then the fact says)."""
        mark = f'"kind":"{kind}"'.encode()
        items = self._items
        for index in range(len(items) - 1, -1, -1):
            item = items[index]
            if type(item) is dict:
                if item["kind"] == kind:
                    return index
            elif mark in item and _parsed(item)["kind"] == kind:
                return index
        return None


def _parsed(line: bytes) -> dict:
    # (`line` without its newline.) The exact reading: a line the store wrote is canonical, and orjson alone would read an
    # integer beyond 64 bits as a float.
    return loads_canonical(line)
