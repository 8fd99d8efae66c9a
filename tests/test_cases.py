"""Every case file under tests/cases checks with exactly the diagnostics its marks expect."""

from __future__ import annotations

import os

import pytest

from flowc.diagnostics.codes import REGISTRY
from tests.casefiles import CASES, all_cases, load_case, rewrite_marks, run_case

UPDATE = os.environ.get("FLOW_UPDATE_CASES") == "1"


@pytest.mark.parametrize("path", all_cases(), ids=lambda p: str(p.relative_to(CASES)))
def test_case(path):
    case = load_case(path)
    checked, got = run_case(case)
    if UPDATE and got != case.expected:
        path.write_text(rewrite_marks(case, got), encoding="utf-8")
        return
    missing = sorted(case.expected - got)
    unexpected = sorted(got - case.expected)
    details = "\n".join(f"  {d.location.file if d.location else ''}:{d.location.line if d.location else 0} "
                        f"{d.severity}[{d.code}] {d.message}" for d in checked.diagnostics)
    assert not missing and not unexpected, (
        f"\nexpected but not reported: {missing}\nreported but not expected: {unexpected}\n"
        f"all diagnostics:\n{details}")


def test_enough_cases():
    assert len(all_cases()) >= 150


def test_every_code_has_a_case():
    covered = set()
    for path in all_cases():
        covered |= {code for _, _, _, code in load_case(path).expected}
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"codes without a case: {missing}"
