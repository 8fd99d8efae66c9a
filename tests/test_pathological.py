"""Pathological shapes through the real `flow` entry point: deep nesting of every kind gets
`nesting-too-deep`, long flat lists check, neither with a traceback; and what checks at the
nesting bounds also runs ("what checks, runs": the generated Python compiles).

The timeouts are hang guards, not time limits: the figures are scripts/reliability/check_fuzz.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from flowc.diagnostics.codes import REGISTRY
from flowc.frontend import check_program
from flowc.parse import MAX_CHAIN, MAX_NESTING
from tests.shapes import DEEP, FLAT

ROOT = Path(__file__).resolve().parents[1]
GUARD = 120  # seconds: a hang guard only

#: Shapes with no well-typed program at any length (a chain of `.s` on an Option, `f()()` on an
#: Int, `?` on an Int, nested quotes inside an interpolation): they check with a type or syntax
#: error below the bound, and get `nesting-too-deep` past it.
_NEVER_WELL_TYPED = {"member-chain", "call-chain", "try-chain", "deep-interpolation"}


def flow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=GUARD, env={**os.environ, "NO_COLOR": "1"})


def check_file(tmp_path: Path, text: str) -> tuple[int, list[dict], str]:
    path = tmp_path / "main.flow"
    path.write_text(text, encoding="utf-8")
    done = flow(tmp_path, "check", "--json", str(path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 2), done.stderr[-3000:]
    report = orjson.loads(done.stdout)
    for diagnostic in report["diagnostics"]:
        assert diagnostic["code"] in REGISTRY
    return done.returncode, report["diagnostics"], done.stderr


@pytest.mark.parametrize("shape", sorted(set(DEEP) - {"deep-interpolation"}))
@pytest.mark.parametrize("depth", [20_000, 100_000])
def test_deep_nesting_gets_a_diagnostic_with_a_place(tmp_path, shape, depth):
    code, diagnostics, _ = check_file(tmp_path, DEEP[shape](depth))
    assert code == 2
    deep = [d for d in diagnostics if d["code"] == "nesting-too-deep"]
    assert deep, diagnostics
    assert deep[0]["location"]["file"].endswith("main.flow") and deep[0]["location"]["line"] >= 1


def test_the_issues_list_of_lists(tmp_path):
    """`List<List<...>>` 100,000 deep was a RecursionError; 20,000 deep ran past 120 s at 4.3 GB."""
    for depth in (100_000, 20_000):
        text = f"pub flow main(x: {'List<' * depth}Int{'>' * depth}) -> Int = 1\n"
        code, diagnostics, _ = check_file(tmp_path, text)
        assert code == 2 and [d["code"] for d in diagnostics] == ["nesting-too-deep"]
        location = diagnostics[0]["location"]
        # At the `<` that is the bound's plus one, counting the `(` of `main(` that holds them all.
        assert (location["line"], location["column"]) == (1, 18 + 5 * (MAX_NESTING - 1) + 4)


@pytest.mark.parametrize("shape", sorted(FLAT))
def test_twenty_thousand_of_a_flat_shape_check(tmp_path, shape):
    code, diagnostics, _ = check_file(tmp_path, FLAT[shape](20_000))
    assert code == 0, diagnostics
    assert all(d["severity"] == "warning" for d in diagnostics)


def test_the_other_declarations_still_check_beside_one_too_deep(tmp_path):
    text = DEEP["deep-type"](500) + "flow g() -> Int = nope\n"
    _, diagnostics, _ = check_file(tmp_path, text)
    assert {d["code"] for d in diagnostics} == {"nesting-too-deep", "name-undefined"}


def _checks(text: str) -> bool:
    def read(path: str) -> str:
        if path == "main.flow":
            return text
        raise FileNotFoundError(2, "No such file or directory", path)

    return not any(d.code == "nesting-too-deep" for d in check_program("main.flow", read).diagnostics)


def _deepest_that_checks(shape) -> int:
    low, high = 1, 4 * MAX_CHAIN
    assert _checks(shape(low))
    while low < high:
        middle = (low + high + 1) // 2
        if _checks(shape(middle)):
            low = middle
        else:
            high = middle - 1
    return low


@pytest.mark.parametrize("shape", sorted(set(DEEP) - _NEVER_WELL_TYPED))
def test_what_checks_at_the_bound_runs(tmp_path, shape):
    """The deepest program of each shape that is not refused as too deep also runs: the bounds
    are set below what generated Python (CPython's parser and compiler, libcst) can take."""
    depth = _deepest_that_checks(DEEP[shape])
    assert depth < 4 * MAX_CHAIN  # the shape is bounded
    path = tmp_path / "main.flow"
    path.write_text(DEEP[shape](depth), encoding="utf-8")
    done = flow(tmp_path, "run", str(path), "--runs", str(tmp_path / "runs"))
    assert done.returncode == 0, (depth, done.stderr[-3000:])


@pytest.mark.parametrize("shape", ["match-arms", "text-arms", "or-pattern", "record-literal-pattern"])
def test_long_flat_shapes_run(tmp_path, shape):
    path = tmp_path / "main.flow"
    path.write_text(FLAT[shape](3_000), encoding="utf-8")
    done = flow(tmp_path, "run", str(path), "--runs", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("shape, size", [("add-chain", 1_000), ("member-chain", 999), ("and-chain", 1_000),
                                         ("deep-not", 250), ("deep-if", 64), ("match-arms", 20_000)])
def test_fmt_lays_out_what_parses_at_the_bounds(tmp_path, shape, size):
    """`flow fmt` walks the tree as the checker does: at the bounds it lays out, never a RecursionError."""
    path = tmp_path / "main.flow"
    path.write_text(DEEP.get(shape, FLAT.get(shape))(size), encoding="utf-8")
    done = flow(tmp_path, "fmt", str(path))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    again = flow(tmp_path, "fmt", "--check", str(path))
    assert again.returncode == 0, again.stderr[-3000:]  # what it wrote is its own layout


def test_a_match_too_costly_to_decide_is_refused_in_bounded_time(tmp_path):
    """Exhaustiveness is NP-hard: a match over 30 Bools whose 180 arms each fix three of them is a
    propositional formula. The checker gives up with `match-too-complex`, not after hours."""
    import random

    pick = random.Random(30)
    arms = []
    for _ in range(180):
        columns = ["_"] * 30
        for v in pick.sample(range(30), 3):
            columns[v] = pick.choice(["true", "false"])
        arms.append("(" + ", ".join(columns) + ") => 1")
    text = ("flow f(t: (" + ", ".join(["Bool"] * 30) + ")) -> Int = match t {\n    " + ",\n    ".join(arms)
            + ",\n}\npub flow main() -> Int = 1\n")
    code, diagnostics, _ = check_file(tmp_path, text)
    assert code == 2 and [d["code"] for d in diagnostics] == ["match-too-complex"]
    assert diagnostics[0]["location"]["line"] == 1
