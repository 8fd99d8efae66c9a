"""Compiled pure Flow against the same algorithms hand-written in Python, side by side in one run.

The Flow program is compiled by flowc and loaded exactly as the sandbox loads it for a run
(verified, RestrictedPython-compiled, runtime names injected, steps not counted), but in this
process, so the ratio measures the generated code and its guards, not process start-up. Flow and
Python alternate run by run; medians of the times, and ratio = the median of Flow / Python pair
by pair.

    python scripts/bench/compiled_vs_python.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sandbox import runtime as R  # noqa: E402
from flowdata import values as V  # noqa: E402
from sandbox.loader import settle_heap  # noqa: E402
from tests.compiled import compile_program  # noqa: E402

FLOW = """
use "std@v1/list"

pub type Shape { Circle { radius: Int }, Rect(Int, Int), Dot }
pub type Point { pub x: Int, pub y: Int }

/// Recursion: naive Fibonacci (non-tail calls).
pub flow fib(n: Int) -> Int = if n < 2 { n } else { fib(n - 1) + fib(n - 2) }

/// List processing: sum of squares of the even numbers, by tail recursion over the list.
pub flow squares(xs: List<Int>, acc: Int) -> Int = match xs {
    [] => acc,
    [x, ..rest] => if x % 2 == 0 { squares(rest, acc + x * x) } else { squares(rest, acc) },
}

/// Record-heavy matching: total area of shapes, moving a point along (the loop carries the
/// point as its fields: flowc/loops.py, carry_records).
pub flow area(shapes: List<Shape>, p: Point, acc: Int) -> Int = match shapes {
    [] => acc + p.x + p.y,
    [Circle { radius }, ..rest] => area(rest, Point { x: p.x + 1, ..p }, acc + 3 * radius * radius),
    [Rect(w, h), ..rest] => area(rest, Point { y: p.y + 1, ..p }, acc + w * h),
    [Dot, ..rest] => area(rest, p, acc),
}

/// Records that escape: one point per shape, in a new list (every one is built).
pub flow points(shapes: List<Shape>, p: Point) -> List<Point> = list.map(shapes, flow(s: Shape) = match s {
    Circle { radius } => Point { x: p.x + radius, ..p },
    Rect(w, h) => Point { x: w, y: h },
    Dot => p,
})
"""


def py_fib(n):
    return n if n < 2 else py_fib(n - 1) + py_fib(n - 2)


def py_squares(xs, acc):
    for x in xs:
        if x % 2 == 0:
            acc += x * x
    return acc


def py_area(shapes, p, acc):
    for s in shapes:
        if s[0] == "Circle":
            p = (p[0] + 1, p[1])
            acc += 3 * s[1] * s[1]
        elif s[0] == "Rect":
            p = (p[0], p[1] + 1)
            acc += s[1] * s[2]
    return acc + p[0] + p[1]


def py_points(shapes, p):
    return [(p[0] + s[1], p[1]) if s[0] == "Circle" else (s[1], s[2]) if s[0] == "Rect" else p
            for s in shapes]


class PyPoint(NamedTuple):
    x: int
    y: int


def py_area_records(shapes, p, acc):
    """The same loop as a Python programmer writes it with a record type for the point."""
    for s in shapes:
        if s[0] == "Circle":
            p = PyPoint(p.x + 1, p.y)
            acc += 3 * s[1] * s[1]
        elif s[0] == "Rect":
            p = PyPoint(p.x, p.y + 1)
            acc += s[1] * s[2]
    return acc + p.x + p.y


def py_points_records(shapes, p):
    """The same comprehension as a Python programmer writes it with a record type for the point."""
    return [PyPoint(p.x + s[1], p.y) if s[0] == "Circle" else PyPoint(s[1], s[2]) if s[0] == "Rect" else p
            for s in shapes]


def py_points_flow_records(shapes, p, point_tag):
    """The same comprehension building the records Flow builds (`(tag, *fields)`, made the way
    generated code makes them): what is left between the compiled loop and Python's own."""
    return [(point_tag, p[1] + s[1], p[2]) if s[0] == "Circle" else (point_tag, s[1], s[2]) if s[0] == "Rect"
            else p for s in shapes]


def plain(points) -> list:
    """A list of points as bare tuples of their fields (a Flow record's tag dropped), to check
    that both sides computed the same."""
    return [p[1:] if V.record_type_of(p) is not None else tuple(p) for p in points]


def compile_flow():
    return compile_program({"bench.flow": FLOW}, "bench.flow").load(count_steps=False)


def paired_times(flow_fn, python_fn, runs: int) -> tuple[float, float, float]:
    """Medians of the Flow and Python times, and of their ratio run by run: the two alternate,
    so a spell of load lands on both sides of a pair rather than on one side's whole series."""
    flow_times, python_times = [], []
    for _ in range(runs):
        start = time.perf_counter()
        flow_fn()
        flow_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        python_fn()
        python_times.append(time.perf_counter() - start)
    ratios = [f / p for f, p in zip(flow_times, python_times)]
    return statistics.median(flow_times), statistics.median(python_times), statistics.median(ratios)


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--runs", type=int, default=7)
    args = options.parse_args()
    flow = compile_flow()
    xs = tuple(range(200_000))
    shape_cls = V.enum_type("bench.Shape", (("Circle", "named", ("radius",)), ("Rect", "positional", ()),
                                            ("Dot", "bare", ())))
    shapes = tuple(shape_cls.make("Circle", i % 7) if i % 3 == 0 else shape_cls.make("Rect", i % 5, 2)
                   if i % 3 == 1 else shape_cls.make("Dot") for i in range(100_000))
    point = V.record_type("bench.Point", ("x", "y"))((0, 0))
    settle_heap()  # as the sandbox child does once the program is loaded and its input decoded
    cases = [
        ("recursion: fib(24)", lambda: flow.fib(24), lambda: py_fib(24)),
        ("list: sum of even squares, 200k", lambda: R.rt_bounce(flow.squares(xs, 0)), lambda: py_squares(xs, 0)),
        ("records+match: 100k shapes", lambda: R.rt_bounce(flow.area(shapes, point, 0)),
         lambda: py_area(shapes, (0, 0), 0)),
        # Context, not the goal: the Python point as a NamedTuple instead of a bare tuple.
        ("  (python with a NamedTuple point)", lambda: R.rt_bounce(flow.area(shapes, point, 0)),
         lambda: py_area_records(shapes, PyPoint(0, 0), 0)),
        # Records that escape are built, one per item (a record is the tuple (tag, *fields):
        # flowdata.values.RecordType), and list.map's loop appends by a call where a
        # comprehension has an opcode.
        ("  records built into a list (list.map)", lambda: flow.points(shapes, point),
         lambda: py_points(shapes, (0, 0))),
        # Context: the same comprehension building records, as a NamedTuple, and as the very
        # tuples Flow builds (so the ratio is the loop's own, the records being the same).
        ("  (python with NamedTuple points)", lambda: flow.points(shapes, point),
         lambda: py_points_records(shapes, PyPoint(0, 0))),
        ("  (python building Flow's records)", lambda: flow.points(shapes, point),
         lambda: py_points_flow_records(shapes, point, point[0])),
    ]
    for name, f, p in cases:
        got, want = f(), p()
        assert (plain(got) == plain(want)) if isinstance(want, list) else got == want, name
        tf, tp, ratio = paired_times(f, p, args.runs)
        print(f"{name:36s} flow {tf * 1000:8.1f} ms   python {tp * 1000:8.1f} ms   ratio {ratio:5.2f}x")


if __name__ == "__main__":
    main()
