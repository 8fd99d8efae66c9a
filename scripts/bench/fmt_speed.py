"""How `flow fmt`'s time grows with the module: formats generated modules of 100 KB to 2 MB and
prints the time per byte, for the whole of `format_source` and for its printer alone (given the
parsed tree), and the ratio of the biggest module's time per byte to the
smallest's (1.0 is linear; the quadratic formatter this replaced had 195 s for 1.15 MB).

    python scripts/bench/fmt_speed.py [--sizes 100,250,500,1000,2000] [--runs 3]

The modules are scripts/bench/gen_program.py's declarations plus, per unit, one function with
`//` comments between statements and at the ends of lines, a `guard ... else` and a `++` chain
too long for one line: every comment is looked up, and the layout breaks lines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gen_program import UNIT  # noqa: E402

from flowc.fmt import _Printer, format_source  # noqa: E402
from flowc.frontend import with_big_stack  # noqa: E402
from flowc.parse import parse  # noqa: E402

COMMENTED = '''// Unit {i}: comments between statements and after them.
flow commented{i}(xs: List<Text>, label: Text) -> Result<Text, Text> = {{
    // The first statement.
    let joined = label ++ ": " ++ label ++ " and the label once more " ++ label ++ " and a last time, " ++ label
    guard joined != "" && label != "nothing at all" && label != "not this one either" else {{ return Err("empty ${{label}}") }}
    let n = count{i}([1, 2, 3], 0)  // trailing
    // Before the end.
    Ok(joined)
}}

'''


def module(size: int) -> str:
    out: list[str] = []
    total = 0
    i = 0
    while total < size:
        chunk = UNIT.format(i=i) + COMMENTED.format(i=i)
        out.append(chunk)
        total += len(chunk.encode())
        i += 1
    return "".join(out)


def best_of(runs: int, work) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        with_big_stack(work)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,250,500,1000,2000", help="module sizes in KB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    print(f"{'size':>9} {'fmt s':>8} {'parse s':>8} {'print s':>8} {'fmt us/KB':>10} {'print us/KB':>12}")
    for kb in (int(s) for s in args.sizes.split(",")):
        text = module(kb * 1000)
        size = len(text.encode())
        formatted = format_source(text, "bench.flow").text
        assert formatted is not None and format_source(formatted, "bench.flow").text == formatted
        whole = best_of(args.runs, lambda: format_source(text, "bench.flow"))
        parsing = best_of(args.runs, lambda: parse(text, "bench.flow"))
        tree = parse(text, "bench.flow").module
        printing = best_of(args.runs, lambda: _Printer(text, tree).module())
        per_kb = whole / size * 1e9
        printer_per_kb = printing / size * 1e9
        rows.append((size, per_kb, printer_per_kb))
        print(f"{size / 1000:>7.0f}KB {whole:>8.2f} {parsing:>8.2f} {printing:>8.2f} {per_kb:>10.1f} "
              f"{printer_per_kb:>12.1f}")
    (small, small_fmt, small_printer), (big, big_fmt, big_printer) = rows[0], rows[-1]
    print(f"time per byte, {big / 1000:.0f} KB over {small / 1000:.0f} KB: "
          f"fmt {big_fmt / small_fmt:.2f}, printer {big_printer / small_printer:.2f}")


if __name__ == "__main__":
    main()
