"""flowc.fmt_comments answers the printer's questions about comments as a scan over every comment
would (the formatter's old, quadratic way), for any comments and any sequence of questions, and
`undo` takes back exactly what was placed since `begin`."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowc import syntax as S
from flowc.fmt_comments import Comments

positions = st.tuples(st.integers(1, 8), st.integers(1, 12))


def span(a: tuple[int, int], b: tuple[int, int]) -> S.Span:
    (line, column), (end_line, end_column) = sorted([a, b])
    return S.Span(line, column, end_line, end_column)


class Scan:
    """The reference: every question looks at every comment."""

    def __init__(self, comments: list[S.Comment]) -> None:
        self.items = sorted(comments, key=lambda c: (c.span.line, c.span.column))
        self.placed: set[int] = set()

    def open(self):
        return [(i, c) for i, c in enumerate(self.items) if i not in self.placed]

    def take_between(self, after_line: int, before: S.Span):
        out = [(i, c) for i, c in self.open()
               if c.span.line > after_line and (c.span.line, c.span.column) < (before.line, before.column)]
        self.placed.update(i for i, _ in out)
        return [c for _, c in out]

    def take_trailing(self, s: S.Span, before: S.Span | None):
        limit = (before.line, before.column) if before is not None else (s.end_line + 1, 0)
        for i, c in self.open():
            key = (c.span.line, c.span.column)
            if c.span.line == s.end_line and key >= (s.end_line, s.end_column) and key < limit:
                self.placed.add(i)
                return c
        return None

    def any_inside(self, s: S.Span) -> bool:
        return any((s.line, s.column) < (c.span.line, c.span.column) < (s.end_line, s.end_column)
                   for _, c in self.open())

    def take_range(self, s: S.Span) -> None:
        self.placed.update(i for i, c in self.open()
                           if (s.line, s.column) <= (c.span.line, c.span.column) < (s.end_line, s.end_column))

    def take_rest(self):
        out = self.open()
        self.placed.update(i for i, _ in out)
        return [c for _, c in out]


questions = st.lists(st.one_of(
    st.tuples(st.just("between"), st.integers(0, 8), positions),
    st.tuples(st.just("trailing"), positions, positions, st.one_of(st.none(), positions)),
    st.tuples(st.just("inside"), positions, positions),
    st.tuples(st.just("range"), positions, positions),
    st.tuples(st.just("begin")),
    st.tuples(st.just("undo")),
), max_size=30)


@given(st.lists(positions, unique=True, max_size=20), questions)
def test_the_index_answers_as_a_scan_does(places, asked):
    comments = [S.Comment(f"// {n}", S.Span(line, column, line, column + 4)) for n, (line, column) in enumerate(places)]
    fast, slow = Comments(tuple(comments)), Scan(comments)
    saved: set[int] | None = None
    for question in asked:
        kind = question[0]
        if kind == "begin":
            fast.begin()
            saved = set(slow.placed)
        elif kind == "undo":
            if saved is not None:
                fast.undo()
                slow.placed, saved = saved, None
        elif kind == "between":
            before = S.Span(*question[2], *question[2])
            assert fast.take_between(question[1], before) == slow.take_between(question[1], before)
        elif kind == "trailing":
            s = span(question[1], question[2])
            before = S.Span(*question[3], *question[3]) if question[3] is not None else None
            assert fast.take_trailing(s, before) == slow.take_trailing(s, before)
        elif kind == "inside":
            s = span(question[1], question[2])
            assert fast.any_inside(s) == slow.any_inside(s)
        else:
            s = span(question[1], question[2])
            fast.take_range(s)
            slow.take_range(s)
    assert fast.take_rest() == slow.take_rest()
