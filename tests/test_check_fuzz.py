"""The fuzzing figure's machinery (scripts/reliability/check_fuzz.py, small): each input is a real
`flow check --json` in a forked process, with its exit, diagnostics, time and peak memory; a
traceback or a wrong verdict is counted, never hidden."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_fuzz", ROOT / "scripts" / "reliability" / "check_fuzz.py")
check_fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_fuzz)

from tests.shapes import DEEP, FLAT  # noqa: E402


def test_each_input_is_checked_and_judged():
    inputs = [
        {"family": "mutated", "text": "pub flow main() -> Int = 1\n"},
        {"family": "mutated", "text": "pub flow main() -> Int = nope\n"},
        {"family": "shapes", "label": "deep-type 100000", "text": DEEP["deep-type"](100_000),
         "expect": "nesting-too-deep"},
        {"family": "shapes", "label": "match-arms 2000", "text": FLAT["match-arms"](2_000), "expect": "ok"},
        # A verdict that is wrong on purpose: this one checks, so "nesting-too-deep" is not met.
        {"family": "shapes", "label": "deep-type 3", "text": DEEP["deep-type"](3), "expect": "nesting-too-deep"},
    ]
    results = check_fuzz._check_all(inputs, budget=120)
    registry = check_fuzz._from_registry()
    assert [r["exit"] for r in results] == [0, 2, 2, 0, 0]
    assert results[1]["codes"] == ["name-undefined"] and results[2]["codes"] == ["nesting-too-deep"]
    assert [check_fuzz._verdict(r, registry) for r in results] == [None, None, None, None, "wrong"]
    assert all(r["peak_kb"] > 1024 and r["seconds"] > 0 and not r["hung"] for r in results)
    row = check_fuzz._row("shapes", results, registry)
    assert (row["tried"], row["failures"]) == (5, 1) and "deep-type 3" in row["detail"]


def test_a_hang_is_a_failure_not_a_wait(tmp_path):
    """The forked check is killed past the timeout: a `flow check` that waits forever on its
    input (a FIFO nobody writes) is reported as hung."""
    import json
    import os

    fifo = tmp_path / "in00000.flow"
    os.mkfifo(fifo)
    (tmp_path / "inputs.json").write_text(json.dumps([fifo.name]))
    result = check_fuzz._fork_check(fifo, tmp_path, timeout=2)
    assert result["hung"] and check_fuzz._verdict(result, set()) == "hang"
