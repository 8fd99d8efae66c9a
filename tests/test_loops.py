"""The loop rewrites of flowc/loops.py: a list walked by index, and rounds started with plain
assignments. Each program is compiled, loaded by the sandbox loader and run in this process; its
results are compared with the same function written in Python, so a rewrite that changed meaning
fails here even where the generated text still looks plausible."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import runtime as R
from flowdata import values as V
from tests.compiled import compile_program

PROGRAM = """
use "std@v1/list"

pub type Shape { Circle { radius: Int }, Rect(Int, Int), Dot }

/// Walked by index: the rest only goes back into the loop.
pub flow total(xs: List<Int>, acc: Int) -> Int = match xs {
    [] => acc,
    [x, ..rest] => total(rest, acc + x),
}

/// Two items a round, and a guard that binds the rest in its condition.
pub flow pairs(xs: List<Int>, acc: Int) -> Int = match xs {
    [a, b, ..rest] if a < b => pairs(rest, acc + b - a),
    [_, _, ..rest] => pairs(rest, acc),
    [x] => acc + 100 * x,
    [] => acc,
}

/// The empty case last, and a round that does not advance on one arm.
pub flow skip_zeros(xs: List<Int>, seen: Int) -> Int = match xs {
    [0, ..rest] => skip_zeros(rest, seen),
    [x, ..rest] => if x < 0 { skip_zeros(rest, seen) } else { skip_zeros(rest, seen + 1) },
    [] => seen,
}

/// A round that hands the list back unchanged: the loop may not end with the list, so each
/// round still counts a step.
pub flow spin(xs: List<Int>, n: Int) -> Int = match xs {
    [] => n,
    [x, ..rest] => if n > 0 { spin(xs, n - 1) } else { spin(rest, x) },
}

/// The rest escapes (returned, so it must stay a real list): no rewrite, same answer.
pub flow drop_until(xs: List<Int>, stop: Int) -> List<Int> = match xs {
    [] => [],
    [x, ..rest] => if x == stop { rest } else { drop_until(rest, stop) },
}

/// A swap: the rounds read each other's old values in a cycle.
pub flow swaps(a: Int, b: Int, n: Int) -> (Int, Int) = if n == 0 { (a, b) } else { swaps(b, a, n - 1) }

/// Euclid: the new `b` reads the old `a`, and `%` may fault, so order is kept.
pub flow gcd(a: Int, b: Int) -> Int = if b == 0 { a } else { gcd(b, a % b) }

/// Faults in argument order: the first argument's fault is the one reported.
pub flow first_fault(n: Int, d: Int) -> Int = if n == 0 { d } else { first_fault(n / d, n % d) }

/// Records and enums inside the walked list.
pub flow area(shapes: List<Shape>, acc: Int) -> Int = match shapes {
    [] => acc,
    [Circle { radius }, ..rest] => area(rest, acc + 3 * radius * radius),
    [Rect(w, h), ..rest] => area(rest, acc + w * h),
    [Dot, ..rest] => area(rest, acc),
}

/// Two lists walked together.
pub flow dot(xs: List<Int>, ys: List<Int>, acc: Int) -> Int = match xs {
    [] => acc,
    [x, ..xr] => match ys {
        [] => acc,
        [y, ..yr] => dot(xr, yr, acc + x * y),
    },
}

pub type Point { pub x: Int, pub y: Int }
pub type Stats { pub count: Int, pub low: Int, pub high: Int }

/// A record carried by the loop: read field by field, handed on unchanged or as a literal
/// (an update, a full literal, fields in another order); kept as its fields.
pub flow walk(moves: List<Int>, p: Point) -> Int = match moves {
    [] => p.x * 1000 + p.y,
    [0, ..rest] => walk(rest, p),
    [1, ..rest] => walk(rest, Point { x: p.x + 1, ..p }),
    [2, ..rest] => walk(rest, Point { y: p.x, x: p.y }),
    [m, ..rest] => walk(rest, Point { x: p.x - m, y: p.y + p.x }),
}

/// Field values that may fault, computed in the literal's order with the other arguments'.
pub flow scan(xs: List<Int>, s: Stats) -> Stats = match xs {
    [] => s,
    [x, ..rest] => scan(rest, Stats { count: s.count + 1, low: if x < s.low { x } else { s.low },
                                      high: s.high / (x - 3) }),
}

/// The record escapes into a list each round: kept whole.
pub flow trail(n: Int, p: Point, seen: List<Point>) -> List<Point> =
    if n == 0 { seen } else { trail(n - 1, Point { x: p.x + 1, ..p }, list.concat([seen, [p]])) }

/// A match on the record's fields is a read of each: kept as its fields.
pub flow settle(n: Int, p: Point) -> Int = match p {
    Point { x: 0, y } => y + n,
    Point { x, y } => settle(n + 1, Point { x: x - 1, y: y + x }),
}
"""


@pytest.fixture(scope="module")
def compiled():
    program = compile_program({"loops.flow": PROGRAM}, "loops.flow")
    return program.load(), program.source


def call(ns, name, *args):
    return R.rt_bounce(getattr(ns, name)(*args))


def test_the_rewrites_apply_where_they_should(compiled):
    _, source = compiled
    body = {name: source.split(f"def {name}(")[1].split("\ndef ")[0] for name in
            ("total", "pairs", "skip_zeros", "drop_until", "swaps", "gcd", "area", "dot")}
    assert "rt_cursor(xs)" in body["total"] and "rt_rest" not in body["total"]
    assert "rt_cursor(xs)" in body["pairs"] and "xs_at + 2" in body["pairs"]
    assert "rt_cursor(xs)" in body["skip_zeros"]
    assert "rt_cursor" not in body["drop_until"] and "rt_rest" in body["drop_until"]
    assert "rt_cursor(shapes)" in body["area"]
    spin = source.split("def spin(")[1].split("\ndef ")[0]
    assert "rt_cursor(xs)" in spin and spin.index("rt_step()") > spin.index("while True")
    # A cursor that only ever moves to the next item is iterated (iterate_lists); one that
    # skips two, or stays, keeps its index.
    assert "for x in rt_items_from(xs_items, xs_at):" in body["total"] and "while True" not in body["total"]
    assert body["total"].index("rt_step()") < body["total"].index("for x in")
    assert "while True" in body["pairs"] and "rt_items_from" not in body["pairs"]
    assert "while True" in spin and "rt_items_from" not in spin
    assert "rt_cursor(xs)" in body["dot"] and "rt_cursor(ys)" in body["dot"]
    records = {name: source.split(f"def {name}(")[1].split("\ndef ")[0] for name in ("walk", "scan", "trail", "settle")}
    assert "p_x = p[1]" in records["walk"] and "(Point, " not in records["walk"]
    assert "(Point, " not in records["settle"]
    assert "(Stats, " in records["scan"]  # returned: the record must exist, so it stays whole
    assert "(Point, " in records["trail"]  # escapes into the list: kept whole
    # no round starts with a tuple assignment (RestrictedPython would guard it with a call)
    for name, text in {**body, **records}.items():
        assert not re.search(r"^\s+\w+, .* = \(", text, re.MULTILINE), name


def lists(min_size=0):
    return st.lists(st.integers(-5, 5), min_size=min_size, max_size=80)


def as_view(xs: list[int], skip: int):
    """The same list reached through a view (how a rest of a long list arrives)."""
    base = tuple([7] * skip + xs)
    return V.rest_of(base, skip)


@settings(max_examples=150, deadline=None)
@given(lists(), st.integers(0, 40))
def test_walked_lists_mean_what_they_meant(compiled, xs, skip):
    ns, _ = compiled
    for value in (tuple(xs), as_view(xs, skip)):
        assert call(ns, "total", value, 0) == sum(xs)
        expected, rest = 0, list(xs)
        while len(rest) >= 2:
            a, b = rest[0], rest[1]
            expected += (b - a) if a < b else 0
            rest = rest[2:]
        if rest:
            expected += 100 * rest[0]
        assert call(ns, "pairs", value, 0) == expected
        assert call(ns, "skip_zeros", value, 0) == sum(1 for x in xs if x > 0)
        # spin counts n down to zero on each item, then takes the item as the next n
        assert call(ns, "spin", value, 3) == (xs[-1] if xs else 3)
        stop = xs[len(xs) // 2] if xs else 0
        dropped = xs[xs.index(stop) + 1:] if stop in xs else []
        assert tuple(call(ns, "drop_until", value, stop)) == tuple(dropped)


@settings(max_examples=60, deadline=None)
@given(lists(), lists())
def test_two_lists_walked_together(compiled, xs, ys):
    ns, _ = compiled
    assert call(ns, "dot", tuple(xs), tuple(ys), 0) == sum(x * y for x, y in zip(xs, ys))


def test_rounds_that_read_each_other(compiled):
    ns, _ = compiled
    assert call(ns, "swaps", 1, 2, 3) == (2, 1)
    assert call(ns, "swaps", 1, 2, 4) == (1, 2)
    assert call(ns, "gcd", 1071, 462) == 21


def test_faults_keep_argument_order(compiled):
    ns, _ = compiled
    with pytest.raises(R.Fault) as fault:
        call(ns, "first_fault", 5, 0)
    assert fault.value.message == "division by zero"  # `n / d` is computed before `n % d`


def test_records_and_enums_in_a_walked_list(compiled):
    ns, _ = compiled
    shape = V.enum_type("loops.Shape", (("Circle", "named", ("radius",)), ("Rect", "positional", ()),
                                        ("Dot", "bare", ())))
    shapes = tuple(shape.make("Circle", i % 4) if i % 3 == 0 else shape.make("Rect", i % 5, 2)
                   if i % 3 == 1 else shape.make("Dot") for i in range(100))
    expected = sum(3 * (i % 4) ** 2 if i % 3 == 0 else (i % 5) * 2 if i % 3 == 1 else 0 for i in range(100))
    assert call(ns, "area", shapes, 0) == expected
    assert call(ns, "area", V.rest_of(shapes, 40), 0) == expected - sum(
        3 * (i % 4) ** 2 if i % 3 == 0 else (i % 5) * 2 if i % 3 == 1 else 0 for i in range(40))


POINT = V.record_type("loops.Point", ("x", "y"))
STATS = V.record_type("loops.Stats", ("count", "low", "high"))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60), st.integers(-9, 9), st.integers(-9, 9))
def test_a_record_carried_as_its_fields_means_what_it_meant(compiled, moves, x, y):
    ns, _ = compiled
    px, py = x, y
    for m in moves:
        if m == 1:
            px += 1
        elif m == 2:
            px, py = py, px
        elif m != 0:
            px, py = px - m, py + px
    assert call(ns, "walk", tuple(moves), POINT((x, y))) == px * 1000 + py
    trail = call(ns, "trail", len(moves), POINT((x, y)), ())
    assert trail == tuple(POINT((x + i, y)) for i in range(len(moves)))
    assert all(V.record_type_of(p) is POINT for p in trail)
    sx, sy, n = x, y, 0
    while sx != 0:
        n, sx, sy = n + 1, sx - 1, sy + sx
        if n > 30:
            break
    if n <= 30:
        assert call(ns, "settle", 0, POINT((x, y))) == sy + n


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 8), max_size=30))
def test_a_carried_record_faults_where_it_did_and_comes_back_whole(compiled, xs):
    ns, _ = compiled
    count, low, high = 0, 100, 1000
    fault = None
    for x in xs:
        if x - 3 == 0:
            fault = "division by zero"
            break
        count, low, high = count + 1, min(x, low), R.rt_idiv(high, x - 3)
    if fault:
        with pytest.raises(R.Fault) as raised:
            call(ns, "scan", tuple(xs), STATS((0, 100, 1000)))
        assert raised.value.message == fault
    else:
        result = call(ns, "scan", tuple(xs), STATS((0, 100, 1000)))
        assert V.record_type_of(result) is STATS and result[1:] == (count, low, high)


def test_a_run_does_not_count_steps_and_a_test_does():
    """`rt_step()` heads every function and round in the generated source; the loader takes it out
    for a run (it does nothing there) and keeps it for `flow test`, which bounds steps."""
    program = compile_program({"loops.flow": PROGRAM}, "loops.flow")
    run = program.load(count_steps=False)
    counted = program.load()
    assert "rt_step" not in run.gcd.__code__.co_names and "rt_step" in counted.gcd.__code__.co_names
    assert R.rt_bounce(run.gcd(1071, 462)) == R.rt_bounce(counted.gcd(1071, 462)) == 21
    steps = []
    injected = program.injected()
    injected["rt_step"] = lambda: steps.append(1)
    R.rt_bounce(program.load(injected=injected).gcd(1071, 462))
    assert len(steps) == 4  # the call and three rounds
