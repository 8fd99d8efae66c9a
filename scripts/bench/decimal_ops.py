"""Decimal arithmetic per operation: Flow's FlowDecimal against Python's C `decimal`, side by side.

Each operation runs the way compiled Flow code runs it (flowc/lower.py): `a + b`, `a - b`,
`a * b`, `a < b`, `a == b` and `-a` are Python operators on FlowDecimal; `/` and `%` are
`rt_ddiv` / `rt_dmod` (sandbox/runtime.py); text is `decimal_text` (`decimal.to_text`,
interpolation, encoding) and `parse_decimal` (literals, `decimal.parse`, decoding). The C side is
what the runtime did before FlowDecimal: the same operators on `decimal.Decimal` under an exact
context (`prec=MAX_PREC`), `/` through a 34-digit half-even context behind the same zero check, and
the C module's own `str()` and `Decimal(text)` for text (stricter than the old Python
`decimal_text`, which rebuilt the canonical form from `as_tuple()`).

A timing is one pass over a few thousand operand pairs (varied values, so no result is cached),
less the same loop doing nothing, divided by the count: net ns per operation. Rounds alternate
Flow and C; the figure is the median over rounds. Value sets:

- money: up to 9 digits with 0-2 fractional digits, written as texts, so normalization gives the
  operands different exponents (12.50 is 125E-1) as everyday amounts do;
- 30 digits: coefficients of 1-30 digits, exponents -20 to 5;
- exp 1e6: up to 15 digits at exponents near +-10^6 (operands of a pair within 20 of each other).

    python scripts/bench/decimal_ops.py [--rounds 7] [--pairs 2000] [--sets money,30digits,exp1e6]
"""

from __future__ import annotations

import argparse
import decimal
import gc
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from flowdata.flowdecimal import FlowDecimal, decimal_text, parse_decimal  # noqa: E402
from sandbox.runtime import rt_ddiv, rt_dmod  # noqa: E402

EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                        rounding=decimal.ROUND_HALF_EVEN,
                        traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow,
                               decimal.Underflow])
DIVISION = decimal.Context(prec=34, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                           rounding=decimal.ROUND_HALF_EVEN,
                           traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow,
                                  decimal.Underflow])


def c_ddiv(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return DIVISION.divide(a, b)


def c_dmod(a, b):
    if b == 0:
        raise ZeroDivisionError("remainder of a division by zero")
    return EXACT.remainder(a, b)


# name -> (loop body over `a, b`, what it needs: "pairs" of numbers or "texts")
OPERATIONS = {
    "a + b": "a + b",
    "a - b": "a - b",
    "a * b": "a * b",
    "a / b": "div(a, b)",
    "a % b": "mod(a, b)",
    "a < b": "a < b",
    "a == b": "a == b",
    "-a": "-a",
    "to text": "text(a)",
    "parse": "parse(b)",
}


def _loop(body: str | None):
    src = "def run(pairs, div, mod, text, parse):\n    for a, b in pairs:\n        " + (body or "pass") + "\n"
    scope: dict = {}
    exec(compile(src, f"<bench {body}>", "exec"), scope)
    return scope["run"]


def _texts(kind: str, rng: random.Random, n: int) -> list[tuple[str, str]]:
    def money() -> str:
        units = rng.randrange(0, 10 ** rng.randint(1, 7))
        frac = rng.choice(["", f".{rng.randrange(10)}", f".{rng.randrange(100):02d}"])
        text = ("-" if rng.random() < 0.2 else "") + str(units) + frac
        return text if text.strip("-0.") else money()  # no zero divisors

    def digits30(exp_lo: int = -20, exp_hi: int = 5) -> str:
        c = rng.randrange(1, 10 ** rng.randint(1, 30))
        return f"{'-' if rng.random() < 0.3 else ''}{c}E{rng.randint(exp_lo, exp_hi)}"

    pairs = []
    for _ in range(n):
        if kind == "money":
            pairs.append((money(), money()))
        elif kind == "30digits":
            pairs.append((digits30(), digits30()))
        elif kind == "exp1e6":
            base = rng.choice([-1, 1]) * 10 ** 6
            a = f"{rng.randrange(1, 10 ** 15)}E{base + rng.randint(0, 20)}"
            b = f"{'-' if rng.random() < 0.3 else ''}{rng.randrange(1, 10 ** 15)}E{base + rng.randint(0, 20)}"
            pairs.append((a, b))
        else:
            raise SystemExit(f"unknown value set {kind!r}")
    return pairs


def _time(run, operands, side) -> float:
    t0 = time.perf_counter_ns()
    run(operands, *side)
    return time.perf_counter_ns() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--sets", default="money,30digits,exp1e6")
    ap.add_argument("--ops", default=",".join(OPERATIONS), help="comma-separated names from the table")
    args = ap.parse_args()
    rng = random.Random(19)
    empty = _loop(None)
    flow_side = (rt_ddiv, rt_dmod, decimal_text, parse_decimal)
    c_side = (c_ddiv, c_dmod, str, decimal.Decimal)
    decimal.setcontext(EXACT)  # the old child's context for + - * and comparisons
    print(f"{'set':<9} {'operation':<9} {'Flow ns':>9} {'C ns':>8} {'ratio':>6}")
    for kind in args.sets.split(","):
        texts = _texts(kind, rng, args.pairs)
        flow_pairs = [(parse_decimal(a), parse_decimal(b)) for a, b in texts]
        c_pairs = [(decimal.Decimal(a), decimal.Decimal(b)) for a, b in texts]
        # Parsing reads the texts; the first item is a number of the other side, unused.
        flow_texts = [(a, b) for (a, _), (_, b) in zip(flow_pairs, texts)]
        c_texts = [(a, b) for (a, _), (_, b) in zip(c_pairs, texts)]
        gc.freeze()  # as the child does before a run (sandbox/loader.py settle_heap)
        for name in args.ops.split(","):
            run = _loop(OPERATIONS[name])
            fo, co = (flow_texts, c_texts) if name == "parse" else (flow_pairs, c_pairs)
            flow_ns, c_ns = [], []
            for _ in range(args.rounds):
                base = _time(empty, fo, flow_side)
                flow_ns.append((_time(run, fo, flow_side) - base) / len(fo))
                base = _time(empty, co, c_side)
                c_ns.append((_time(run, co, c_side) - base) / len(co))
            f, c = statistics.median(flow_ns), statistics.median(c_ns)
            print(f"{kind:<9} {name:<9} {f:>9.0f} {c:>8.0f} {f / c:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
