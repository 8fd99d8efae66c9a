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


#: Codes that a case file cannot produce (they come from reading bytes or from `flow run`), with
#: the test that shows each.
TESTED_ELSEWHERE = {
    "file-not-utf8": "tests/test_cli_check.py::test_invalid_utf8_is_a_diagnostic",
    "entry-not-found": "tests/test_run.py::test_an_unknown_entry_is_refused",
    "input-invalid": "tests/test_run.py::test_input_is_refused_before_any_fact",
    "binding-missing": "tests/test_run.py::test_an_unbound_tool_refuses_the_run",
    "binding-not-approved": "tests/test_run.py::test_manifest_commands_need_approval",
    "binding-failed": "tests/test_run.py::test_an_implementation_that_cannot_start_refuses_the_run",
    "binding-mismatch": "tests/test_run.py::test_an_implementation_with_another_fingerprint_is_refused",
    "nested-refused": "tests/test_nested.py::test_a_refused_resume_is_an_err_with_diagnostics",
    "pin-unverified": "tests/test_paths.py::test_a_pinned_commit_that_does_not_match_is_refused",
    "match-too-complex": "tests/test_pathological.py::test_a_match_too_costly_to_decide_is_refused_in_bounded_time",
}


def test_every_code_has_a_case():
    covered = set()
    for path in all_cases():
        covered |= {code for _, _, _, code in load_case(path).expected}
    missing = sorted(set(REGISTRY) - covered - set(TESTED_ELSEWHERE))
    assert not missing, f"codes without a case: {missing}"
    root = CASES.parents[1]
    for code, test in TESTED_ELSEWHERE.items():
        file, name = test.split("::")
        assert f"def {name}(" in (root / file).read_text(encoding="utf-8"), f"{code}: {test} does not exist"
