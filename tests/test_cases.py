"""Every case file under tests/cases checks with exactly the diagnostics its marks expect."""

from __future__ import annotations

import os

import pytest

from flowc.diagnostics.codes import REGISTRY
from tests.casefiles import CASES, all_cases, load_case, message_lines, rewrite_marks, run_case


@pytest.mark.parametrize("path", all_cases(), ids=lambda p: str(p.relative_to(CASES)))
def test_case(path, request):
    case = load_case(path)
    checked, got = run_case(case)
    messages = message_lines(checked.diagnostics)
    update = request.config.getoption("update_cases") or os.environ.get("FLOW_UPDATE_CASES") == "1"
    if update and (got != case.expected or messages != case.messages):
        path.write_text(rewrite_marks(case, got, messages), encoding="utf-8")
        return
    missing = sorted(case.expected - got)
    unexpected = sorted(got - case.expected)
    details = "\n".join(f"  {d.location.file if d.location else ''}:{d.location.line if d.location else 0} "
                        f"{d.severity}[{d.code}] {d.message}" for d in checked.diagnostics)
    assert not missing and not unexpected, (
        f"\nexpected but not reported: {missing}\nreported but not expected: {unexpected}\n"
        f"all diagnostics:\n{details}")
    assert messages == case.messages, "the [diagnostics] section differs (--update-cases rewrites it)"


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
    "reply-invalid": "tests/test_reply_check.py::test_a_mistyped_enum_reply_is_refused_and_the_run_is_then_answered",
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


def test_rewriting_a_passing_case_changes_nothing():
    """The update flag is a fixed point: a case that passes is rewritten to its own text, so a
    regeneration's diff shows only what the compiler now says differently."""
    for path in all_cases():
        case = load_case(path)
        checked, got = run_case(case)
        assert rewrite_marks(case, got, message_lines(checked.diagnostics)) == path.read_text(encoding="utf-8"), path


def test_the_section_pins_the_words(tmp_path):
    """A case whose code is right but whose message is not fails; the update flag restores it."""
    original = CASES / "codes" / "type-mismatch.flow"
    text = original.read_text(encoding="utf-8")
    assert "[diagnostics]\n" in text and "found `Text`" in text
    broken = tmp_path / "type-mismatch.flow"
    broken.write_text(text.replace("found `Text`", "found `Txet`", 1), encoding="utf-8")
    case = load_case(broken)
    checked, got = run_case(case)
    assert got == case.expected  # the marks still agree: only the words differ
    messages = message_lines(checked.diagnostics)
    assert messages != case.messages
    broken.write_text(rewrite_marks(case, got, messages), encoding="utf-8")
    assert broken.read_text(encoding="utf-8") == text


def test_update_cases_flag_rewrites_a_case_file(tmp_path):
    """`pytest --update-cases` rewrites a stale case in place (run on a copy of one case)."""
    import shutil
    import subprocess
    import sys

    root = CASES.parents[1]
    work = tmp_path / "repo"
    (work / "tests" / "cases" / "codes").mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "pg_cluster.py", "casefiles.py", "test_cases.py"):
        shutil.copy(root / "tests" / name, work / "tests" / name)
    source = (CASES / "codes" / "unused-variable.flow").read_text(encoding="utf-8")
    stale = source.split("\n[diagnostics]\n", 1)[0] + "\n"  # the section is missing
    case_file = work / "tests" / "cases" / "codes" / "unused-variable.flow"
    case_file.write_text(stale, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cases.py::test_case"]
    failed = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1, failed.stdout
    updated = subprocess.run(command + ["--update-cases"], cwd=work, capture_output=True, text=True, timeout=300)
    assert updated.returncode == 0, updated.stdout
    assert case_file.read_text(encoding="utf-8") == source
