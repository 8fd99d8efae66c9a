"""Generate a large, valid Flow module for throughput benchmarks: `python gen_program.py LINES`."""

from __future__ import annotations

import sys

UNIT = '''/// Shape number {i}.
pub type Shape{i} {{ Circle{i} {{ radius: Int }}, Square{i}(Int), Empty{i} }}

pub type Box{i} {{ pub label: Text, pub size: Int, pub tags: List<Text> }}

/// Area of a shape, doubled to stay in Int.
pub flow area{i}(s: Shape{i}) -> Int =
    match s {{
        Circle{i} {{ radius }} => 6 * radius * radius,
        Square{i}(side) if side > 0 => 2 * side * side,
        Square{i}(_) => 0,
        Empty{i} => 0,
    }}

flow describe{i}(b: Box{i}, n: Int) -> Text = {{
    let total = b.size + n * 2 - 1
    guard total >= 0 else {{ return "negative" }}
    let grown = Box{i} {{ size: total, ..b }}
    if grown.size > 100 {{ "big ${{grown.label}}" }} else {{ "small ${{grown.label}}" }}
}}

flow count{i}(xs: List<Int>, acc: Int) -> Int =
    match xs {{
        [] => acc,
        [x, ..rest] => count{i}(rest, acc + x),
    }}

'''


def generate(lines: int) -> str:
    out: list[str] = []
    total = 0
    i = 0
    while total < lines:
        chunk = UNIT.format(i=i)
        out.append(chunk)
        total += chunk.count("\n")
        i += 1
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(generate(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
