"""When a run's facts were accepted, as a store holds them for a live run: one array of Unix
milliseconds from the first fact timed on, 8 bytes a fact (-1 where a time is not known), where a
dict of fact number to time held ~100 bytes a fact for as long as the run was live."""

from __future__ import annotations

from array import array
from typing import Mapping, Sequence

_UNKNOWN = -1


class KnownTimes:
    """Fact n -> Unix ms, for the facts whose time is known. `put` a stretch of consecutive
    facts' times, `update` from a mapping; `as_dict()` is what `RunLog.fact_times` returns. A
    time put again for the same fact replaces the one before, as a dict's would."""

    __slots__ = ("first", "at")

    def __init__(self, times: Mapping[int, int] | None = None) -> None:
        self.first = 0  # the fact number of at[0]
        self.at = array("q")
        if times:
            self.update(times)

    def put(self, first: int, times: Sequence[int]) -> None:
        if not times:
            return
        at = self.at
        if not at:
            self.first = first
        start = first - self.first
        if start < 0:  # before the first one known: the array starts earlier
            self.at = at = array("q", [_UNKNOWN]) * -start + at
            self.first, start = first, 0
        if start > len(at):
            at.extend(array("q", [_UNKNOWN]) * (start - len(at)))
        overlap = min(len(times), len(at) - start)
        if overlap > 0:
            at[start:start + overlap] = array("q", times[:overlap])
        at.extend(times[max(overlap, 0):])

    def update(self, times: Mapping[int, int]) -> None:
        stretch: list[int] = []
        first = previous = None
        for n in sorted(times):
            if previous is not None and n != previous + 1:
                self.put(first, stretch)
                stretch = []
            if not stretch:
                first = n
            stretch.append(times[n])
            previous = n
        if stretch:
            self.put(first, stretch)

    def as_dict(self) -> dict[int, int]:
        first = self.first
        return {first + offset: ms for offset, ms in enumerate(self.at) if ms != _UNKNOWN}
