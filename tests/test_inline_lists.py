"""`list.map`, `list.filter` and `list.fold` over a lambda written out as a loop in the caller
(flowc/inline_lists.py). Every program is compiled twice, written out and left to the intrinsics
(the inlining switched off), and both are loaded by the sandbox loader and run in this process:
results, faults and evaluation steps must be the same, so a loop that changed meaning fails here
even where the generated text looks right."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowc import inline_lists
from sandbox import runtime as R
from flowdata import values as V
from tests.compiled import compile_program

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
use "std@v1/list"

pub type Shape { Circle { radius: Int }, Rect(Int, Int), Dot }
pub type Point { pub x: Int, pub y: Int }

/// A record per item, built from a captured record and a match.
pub flow points(shapes: List<Shape>, p: Point) -> List<Point> = list.map(shapes, flow(s: Shape) = match s {
    Circle { radius } => Point { x: p.x + radius, ..p },
    Rect(w, h) => Point { x: w, y: h },
    Dot => p,
})

/// A body that may fault part-way through the list.
pub flow quotients(xs: List<Int>, d: Int) -> List<Int> = list.map(xs, flow(x: Int) = 100 / (x - d))

/// Kept when the body is true; the body binds names of its own.
pub flow evens_over(xs: List<Int>, floor: Int) -> List<Int> = list.filter(xs, flow(x: Int) = {
    let half = x / 2
    half * 2 == x && x > floor
})

/// The accumulator is the lambda's first parameter; the body is a match on it.
pub flow signed_sum(xs: List<Int>) -> (Int, Int) = list.fold(xs, (0, 0), flow(acc: (Int, Int), x: Int) = match acc {
    (pos, neg) => if x >= 0 { (pos + x, neg) } else { (pos, neg + x) },
})

/// Lists of lists: a loop inside a loop, and the inner one reads the outer item.
pub flow scaled(rows: List<List<Int>>) -> List<List<Int>> =
    list.map(rows, flow(row: List<Int>) = list.map(row, flow(x: Int) = x * list.length(row)))

/// A lambda made per item captures that item: each closure keeps its own.
pub flow thunks(xs: List<Int>) -> List<Int> =
    list.map(list.map(xs, flow(x: Int) = flow() = x * 2), flow(g: flow() -> Int) = g())

/// The list is an expression; the map's result feeds another call; argument order is kept.
pub flow shifted(n: Int, k: Int) -> (Int, List<Int>) = (100 / k, list.map(list.range(0, n), flow(i: Int) = i + 100 % (k - 1)))

/// A view: the rest of a list, mapped.
pub flow tail_doubled(xs: List<Int>) -> List<Int> = match xs {
    [] => [],
    [_, ..rest] => list.map(rest, flow(x: Int) = x + x),
}

/// Inside a self-recursive loop: the captured record changes every round, its fields are read
/// again before each round's list loop.
pub flow walk(xs: List<Int>, p: Point, n: Int, acc: Int) -> Int = if n == 0 { acc + p.x + p.y } else {
    let ys = list.map(xs, flow(x: Int) = p.x * x + p.y)
    walk(xs, Point { x: p.x + 1, ..p }, n - 1, acc + list.fold(ys, 0, flow(a: Int, y: Int) = a + y))
}

/// Lists named like the runtime's prefixes (`i_`, `k_`, `m_`): the loop's names stay clear of them.
pub flow prefixed(i: List<Int>, k: List<Int>, m: List<Int>) -> Int =
    list.fold(i, 0, flow(a: Int, x: Int) = a + x) + list.length(list.filter(k, flow(x: Int) = x > 0))
        + list.length(list.map(m, flow(x: Int) = x))

/// Searches stop at the first item that decides: the items after it are not visited (a body
/// that would fault there never runs) and their steps are not counted.
pub flow any_over(xs: List<Int>, d: Int) -> Bool = list.any(xs, flow(x: Int) = 100 / (x - d) > 20)
pub flow all_under(xs: List<Int>, d: Int) -> Bool = list.all(xs, flow(x: Int) = 100 / (x - d) < 20)
pub flow first_of(shapes: List<Shape>, floor: Int) -> Option<Shape> = list.find(shapes, flow(s: Shape) = match s {
    Circle { radius } => radius > floor,
    Rect(w, h) => w * h > floor,
    Dot => false,
})

/// Not written out: the body leaves with `?` (it returns the Err from the lambda, not the caller).
pub flow checked(xs: List<Int>) -> List<Result<Int, Text>> = list.map(xs, flow(x: Int) -> Result<Int, Text> = {
    let y = positive(x)?
    Ok(y * 10)
})

pub flow positive(x: Int) -> Result<Int, Text> = if x > 0 { Ok(x) } else { Err("not positive") }

/// Not written out: the body leaves with `return` and with `guard`.
pub flow clipped(xs: List<Int>) -> List<Int> = list.map(xs, flow(x: Int) -> Int = {
    let y = if x > 10 { return 10 } else { x }
    guard y > -10 else { return -10 }
    y
})

/// Not written out: a named function and a function value.
pub flow by_name(xs: List<Int>) -> List<Result<Int, Text>> = list.map(xs, positive)
pub flow by_value(xs: List<Int>, f: flow(Int) -> Int) -> List<Int> = list.map(xs, f)
"""

WRITTEN_OUT = ("walk", "prefixed", "points", "quotients", "evens_over", "signed_sum", "scaled", "thunks", "shifted",
               "tail_doubled", "any_over", "all_under", "first_of")


def _compile(inlined: bool):
    saved = inline_lists.INLINED
    try:
        if not inlined:
            inline_lists.INLINED = {}
        return compile_program({"main.flow": PROGRAM}, "main.flow")
    finally:
        inline_lists.INLINED = saved


@pytest.fixture(scope="module")
def both():
    return _compile(True), _compile(False)


def _functions(source: str) -> dict[str, str]:
    parts = source.split("\ndef ")
    return {part.split("(", 1)[0]: part for part in parts[1:]}


def _run(program, name: str, *args):
    """(outcome, steps): the value or the fault's (kind, message), and the steps counted."""
    steps = []
    injected = program.injected()
    injected["rt_step"] = lambda: steps.append(1)
    ns = program.load(injected=injected)
    try:
        outcome = ("value", R.rt_bounce(getattr(ns, name)(*args)))
    except R.Fault as fault:
        outcome = ("fault", fault.kind, fault.message)
    return outcome, len(steps)


def _same(both, name: str, *args):
    inlined, plain = both
    got, expected = _run(inlined, name, *args), _run(plain, name, *args)
    assert got == expected, (name, args)
    return got[0]


CALLS = re.compile(r"i_list_(map|filter|fold|any|all|find)\(")


def test_written_out_where_it_should_be_and_not_elsewhere(both):
    inlined, plain = both
    written, called = _functions(inlined.source), _functions(plain.source)
    for name in WRITTEN_OUT:
        assert not CALLS.search(written[name]) and "for " in written[name], name
        assert CALLS.search(called[name]) and "for " not in called[name], name
    for name in ("checked", "clipped", "by_name", "by_value"):
        assert "i_list_map(" in written[name] and "for " not in written[name], name
    assert written["checked"] == called["checked"] and written["clipped"] == called["clipped"]
    # The captured point's fields are read once, before the loop, not per item.
    loop = written["points"].split("for s in ", 1)
    assert "p_x = p[1]" in loop[0] and "p_y = p[2]" in loop[0] and "p[" not in loop[1]


SHAPES = st.lists(st.one_of(
    st.integers(-50, 50).map(lambda r: ("Circle", r)),
    st.tuples(st.integers(-9, 9), st.integers(-9, 9)).map(lambda wh: ("Rect",) + wh),
    st.just(("Dot",)),
), max_size=30)
INTS = st.lists(st.integers(-20, 20), max_size=30)


@settings(max_examples=60, deadline=None)
@given(shapes=SHAPES, x=st.integers(-5, 5), y=st.integers(-5, 5))
def test_records_built_per_item(both, shapes, x, y):
    shape = V.enum_type("main.Shape", (("Circle", "named", ("radius",)), ("Rect", "positional", ()),
                                       ("Dot", "bare", ())))
    point = V.record_type("main.Point", ("x", "y"))
    values = tuple(shape.make(*s) for s in shapes)
    outcome = _same(both, "points", values, point((x, y)))
    assert outcome[0] == "value"
    built = outcome[1]
    assert all(V.record_type_of(p) is point for p in built)  # records, not bare tuples
    assert [p[1:] for p in built] == [
        (x + s[1], y) if s[0] == "Circle" else (s[1], s[2]) if s[0] == "Rect" else (x, y) for s in shapes]


@settings(max_examples=80, deadline=None)
@given(xs=INTS, d=st.integers(-3, 3), floor=st.integers(-10, 10))
def test_map_filter_fold_mean_what_the_intrinsics_mean(both, xs, d, floor):
    xs = tuple(xs)
    _same(both, "quotients", xs, d)  # faults at the first item equal to d, as the call did
    _same(both, "evens_over", xs, floor)
    assert _same(both, "signed_sum", xs) == ("value", (sum(x for x in xs if x >= 0), sum(x for x in xs if x < 0)))
    _same(both, "tail_doubled", xs)
    _same(both, "thunks", xs)
    _same(both, "checked", xs)
    point = V.record_type("main.Point", ("x", "y"))
    px, n = d, abs(floor) % 4
    expected = sum(sum((px + k) * x + 5 for x in xs) for k in range(n)) + px + n + 5
    assert _same(both, "walk", xs, point((px, 5)), n, 0) == ("value", expected)
    assert _same(both, "prefixed", xs, xs, xs) == ("value", sum(xs) + len([x for x in xs if x > 0]) + len(xs))
    assert _same(both, "clipped", xs) == ("value", tuple(max(-10, min(10, x)) for x in xs))
    _same(both, "by_name", xs)


@settings(max_examples=80, deadline=None)
@given(xs=INTS, shapes=SHAPES, d=st.integers(-3, 3), floor=st.integers(-10, 30))
def test_searches_stop_where_the_intrinsics_stop(both, xs, shapes, d, floor):
    xs = tuple(xs)
    _same(both, "any_over", xs, d)  # a fault only when the item equal to d comes before a decision
    _same(both, "all_under", xs, d)
    shape = V.enum_type("main.Shape", (("Circle", "named", ("radius",)), ("Rect", "positional", ()),
                                       ("Dot", "bare", ())))
    values = tuple(shape.make(*s) for s in shapes)
    outcome = _same(both, "first_of", values, floor)
    wanted = [v for v, s in zip(values, shapes) if (s[0] == "Circle" and s[1] > floor)
              or (s[0] == "Rect" and s[1] * s[2] > floor)]
    assert outcome == ("value", V.some(wanted[0]) if wanted else V.NONE)


def test_a_search_stops_at_the_deciding_item(both):
    # 100 / (x - 3) faults at 3: after the deciding item 4 (100 > 20) it is never reached.
    (got, steps), (expected, plain_steps) = (_run(program, "any_over", (4, 3, 3), 3) for program in both)
    assert got == expected == ("value", True) and steps == plain_steps
    (got, steps), _ = (_run(program, "any_over", (9, 3), 3) for program in both)
    assert got[0] == "fault" and "division by zero" in got[2]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(INTS, max_size=6))
def test_a_loop_inside_a_loop(both, rows):
    rows = tuple(tuple(r) for r in rows)
    assert _same(both, "scaled", rows) == ("value", tuple(tuple(x * len(r) for x in r) for r in rows))


@pytest.mark.parametrize("n,k,fault", [
    (3, 0, "division by zero"),  # the first element of the pair faults before the map runs
    (3, 1, "remainder of a division by zero"),  # the map's body faults on its first item
    (0, 1, None),  # no item: the body that would fault never runs
    (4, 2, None),
])
def test_argument_order_around_a_written_out_map(both, n, k, fault):
    outcome = _same(both, "shifted", n, k)
    if fault is None:
        assert outcome[0] == "value"
    else:
        assert outcome[0] == "fault" and outcome[2] == fault


def test_a_function_value_is_still_called(both):
    for program in both:
        ns = program.load(count_steps=False)
        assert ns.by_value((1, 2, 3), lambda x: x * 7) == (7, 14, 21)


def test_a_fault_in_a_written_out_body_names_the_lambda_line(tmp_path):
    source = tmp_path / "share.flow"
    source.write_text('use "std@v1/list"\n\npub flow main(xs: List<Int>, d: Int) -> List<Int> =\n'
                      '    list.map(xs, flow(x: Int) =\n        x / d)\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", str(source), "--input",
                           json.dumps({"xs": [1, 2], "d": 0}), "--runs", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "share.flow:5:" in done.stderr and "division-by-zero" in done.stderr
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", str(source), "--input",
                           json.dumps({"xs": [4, 6], "d": 2}), "--runs", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [2, 3]


TOOL_PROGRAM = """
use "std@v1/list"

@tool pub flow lookup(key: Text) -> Int

pub flow looked_up(keys: List<Text>) -> List<Int> !tool = list.map(keys, flow(k: Text) = lookup(k) + 1)
pub flow lengths(keys: List<Text>) -> List<Int> !tool = {
    let first = lookup("first")
    list.map(keys, flow(k: Text) = if k == "" { first } else { 1 })
}
"""


def test_a_lambda_that_calls_tools_keeps_the_call():
    """A Tool call yields to the scheduler from inside the intrinsic's loop (`i_list_map_t`); a
    pure lambda in a Tool-capable function is still written out."""
    functions = _functions(compile_program({"main.flow": TOOL_PROGRAM}, "main.flow").source)
    assert "i_list_map_t(" in functions["looked_up"] and "for " not in functions["looked_up"]
    assert "for k in rt_items_from(" in functions["lengths"] and not CALLS.search(functions["lengths"])
