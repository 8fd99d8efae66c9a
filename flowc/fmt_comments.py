"""The comments `flow fmt` still has to place, found by position in logarithmic time.

The printer asks, for every declaration, statement, arm and member, "which comments come before
this?", "is there one after it on its line?" and "is one left inside it?". Scanning every comment
on every question made formatting quadratic (195 s for a 1.15 MB module); here the comments are
sorted once by position, a question is a binary search, and comments already placed are skipped
through a union-find over their indexes ("the first unplaced comment at or after index i"), so
placed comments are passed over in amortized constant time.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from flowc import syntax as S


class Comments:
    def __init__(self, comments: tuple[S.Comment, ...]) -> None:
        self.items = sorted(comments, key=lambda c: (c.span.line, c.span.column))
        self.keys = [(c.span.line, c.span.column) for c in self.items]
        # _next[i] leads to the first unplaced index >= i; len(items) is the sentinel "none left".
        self._next = list(range(len(self.items) + 1))
        self._undo: list[tuple[int, int]] | None = None  # (index, old value) since begin()

    def begin(self) -> None:
        """Start recording placements, so that `undo` can take them back (a declaration the
        printer gives up on, to keep it as written, must not have placed comments it drops)."""
        self._undo = []

    def undo(self) -> None:
        assert self._undo is not None
        for i, old in reversed(self._undo):
            self._next[i] = old
        self._undo = None

    def _set(self, i: int, value: int) -> None:
        if self._undo is not None:
            self._undo.append((i, self._next[i]))
        self._next[i] = value

    def _first_unplaced(self, i: int) -> int:
        root = i
        while self._next[root] != root:
            root = self._next[root]
        while self._next[i] != root:  # path compression
            following = self._next[i]
            self._set(i, root)
            i = following
        return root

    def _place(self, i: int) -> None:
        self._set(i, i + 1)

    def take_between(self, after_line: int, before: S.Span) -> list[S.Comment]:
        """Unplaced comments on lines after `after_line` that start before `before` starts, now placed."""
        out = []
        end = (before.line, before.column)
        i = self._first_unplaced(bisect_right(self.keys, (after_line, float("inf"))))
        while i < len(self.items) and self.keys[i] < end:
            out.append(self.items[i])
            self._place(i)
            i = self._first_unplaced(i + 1)
        return out

    def take_trailing(self, span: S.Span, before: S.Span | None = None) -> S.Comment | None:
        """The unplaced comment on the last line of `span`, after it (and before `before`), now
        placed."""
        i = self._first_unplaced(bisect_left(self.keys, (span.end_line, span.end_column)))
        limit = (before.line, before.column) if before is not None else (span.end_line + 1, 0)
        if i < len(self.items) and self.keys[i][0] == span.end_line and self.keys[i] < limit:
            self._place(i)
            return self.items[i]
        return None

    def any_inside(self, span: S.Span) -> bool:
        """Is an unplaced comment strictly inside `span`?"""
        i = self._first_unplaced(bisect_right(self.keys, (span.line, span.column)))
        return i < len(self.items) and self.keys[i] < (span.end_line, span.end_column)

    def take_range(self, span: S.Span) -> None:
        """Place every comment that starts inside `span` (a declaration kept as written holds them)."""
        end = (span.end_line, span.end_column)
        i = self._first_unplaced(bisect_left(self.keys, (span.line, span.column)))
        while i < len(self.items) and self.keys[i] < end:
            self._place(i)
            i = self._first_unplaced(i + 1)

    def take_rest(self) -> list[S.Comment]:
        out = []
        i = self._first_unplaced(0)
        while i < len(self.items):
            out.append(self.items[i])
            self._place(i)
            i = self._first_unplaced(i + 1)
        return out
