"""The pytest plugin (flowrt/pytest_plugin.py) through pytester: @test functions and saved
histories as items, `-k`, `--junitxml`, the failure text (Flow location, source line, expected
beside found), and what is collected when (never on a plain `pytest` that walks testpaths)."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "examples"

PROGRAM = """
@tool pub flow audit(text: Text) -> Unit

@test flow adds_one() -> Result<Unit, Text> = if 1 + 1 == 2 { Ok(()) } else { Err("arithmetic") }

@test flow adds_two() -> Result<Unit, Text> = Err("expected 4, found 5")

@test flow divides() -> Result<Unit, Text> = {
    let zero = 0
    guard 1 / zero == 1 else { return Err("no") }
    Ok(())
}

@test flow reaches_audit() -> Result<Unit, Text> = {
    audit("x")
    Ok(())
}
"""


@pytest.fixture
def flow_dir(pytester: pytest.Pytester) -> Path:
    folder = pytester.path / "flowtests"
    folder.mkdir()
    (folder / "sums_test.flow").write_text(PROGRAM)
    # Not a test file by name: never collected.
    (folder / "helpers.flow").write_text("@test flow not_collected() -> Result<Unit, Text> = Err(\"x\")\n")
    return folder


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In a process of its own: pytester's in-process runs forget the modules each run imported,
    # and libcst's native parser (a PyO3 module) cannot be imported twice in one interpreter.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)


def test_each_test_is_an_item_with_its_outcome(pytester, flow_dir):
    result = run(pytester, "flowtests", "-v")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*sums_test.flow::adds_one PASSED*", "*sums_test.flow::adds_two FAILED*"])
    assert "not_collected" not in result.stdout.str()


def test_the_failure_text_has_the_location_and_expected_beside_found(pytester, flow_dir):
    result = run(pytester, "flowtests", "-k", "adds_two or divides or audit")
    text = result.stdout.str()
    result.stdout.fnmatch_lines([
        "flowtests/sums_test.flow:6: adds_two failed",
        "     6 | @test flow adds_two() -> Result<Unit, Text> = Err(\"expected 4, found 5\")",
        "  expected: Ok(())",
        "  found:    Err(\"expected 4, found 5\")",
    ])
    # A fault points at the expression that faulted, not at the test's first line.
    result.stdout.fnmatch_lines(["flowtests/sums_test.flow:10: divides failed",
                                 "*10 |     guard 1 / zero == 1*",
                                 "  found:    fault?division-by-zero?*"])
    assert "found:    not started: no fake stands in for sums_test.audit" in text
    result.assert_outcomes(failed=3, deselected=1)


def test_k_deselects_and_the_rest_do_not_run(pytester, flow_dir):
    result = run(pytester, "flowtests", "-k", "adds and not two")
    result.assert_outcomes(passed=1, deselected=3)


def test_junit_xml_through_pytest(pytester, flow_dir):
    result = run(pytester, "flowtests", "--junitxml", "report.xml")
    result.assert_outcomes(passed=1, failed=3)
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("4", "3")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"adds_one", "adds_two", "divides", "reaches_audit"}
    assert cases["adds_one"].find("failure") is None
    failure = cases["adds_two"].find("failure")
    assert "expected: Ok(())" in failure.text and "sums_test.flow:6" in failure.text
    assert cases["adds_two"].get("classname") == "flowtests.sums_test.flow"


def test_nothing_is_collected_unless_a_path_is_given_or_configured(pytester, flow_dir):
    # No argument: pytest walks the invocation directory, as a plain `pytest` walks testpaths.
    result = run(pytester)
    result.assert_outcomes()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    pytester.makeini("[pytest]\nflow_paths = flowtests\n")
    run(pytester).assert_outcomes(passed=1, failed=3)
    # With flow_paths set, a path given on the command line outside it is not collected as Flow.
    other = pytester.path / "other"
    other.mkdir()
    (other / "more_test.flow").write_text('@test flow t() -> Result<Unit, Text> = Ok(())\n')
    assert run(pytester, "other").ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_the_plugin_can_be_turned_off(pytester, flow_dir):
    assert run(pytester, "-p", "no:flow", "flowtests").ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_file_that_does_not_check_is_a_collection_error_with_its_diagnostic(pytester):
    (pytester.path / "bad_test.flow").write_text('@test flow t() -> Result<Unit, Text> = Ok(1)\n')
    result = run(pytester, "bad_test.flow")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting bad_test.flow*", "*type-mismatch*"])


def test_the_step_bound_is_an_option(pytester):
    (pytester.path / "spin_test.flow").write_text(
        "@test flow spins() -> Result<Unit, Text> = if spin(0) > 0 { Ok(()) } else { Err(\"no\") }\n\n"
        "flow spin(n: Int) -> Int = spin(n + 1)\n")
    result = run(pytester, "spin_test.flow", "--flow-steps", "20000")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*found:    fault?step-bound?: the test reached the step bound of 20000*"])


def test_a_saved_history_is_an_item_that_fails_when_the_program_changes(pytester):
    folder = pytester.path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    result = run(pytester, "support/histories", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*history.jsonl::history run-20261129-204400-b53d35 PASSED*"])
    main = folder / "main.flow"
    main.write_text(main.read_text().replace("Ok(Done(summary)) => Resolved(summary)",
                                             'Ok(Done(summary)) => Resolved("done: " ++ summary)'))
    result = run(pytester, "support", "-k", "history")
    result.assert_outcomes(failed=1, deselected=2)
    text = result.stdout.str()
    # The recorded End beside the End the changed program reaches instead.
    expected = next(line for line in text.splitlines() if line.startswith("  expected: fact "))
    found = next(line for line in text.splitlines() if line.startswith("  found:    "))
    assert expected.startswith('  expected: fact 17: {"kind":"End","outcome":{"Completed":{"Resolved":"SameSite')
    assert found.startswith('  found:    {"kind":"End","outcome":{"Completed":{"Resolved":"done: SameSite')
    assert "  (Diverged: the program ends otherwise than fact 17 records)" in text


@pytest.mark.skipif(not SHARED.exists(), reason="shared examples not beside the repository")
def test_the_shared_examples_pass(pytester):
    # A copy, so that nothing (a cache, a benchmark folder) is written beside the shared examples.
    shutil.copytree(SHARED, pytester.path / "examples")
    result = run(pytester, "examples")
    result.assert_outcomes(passed=3)


def test_the_bundled_examples_pass(pytester):
    shutil.copytree(ROOT / "examples", pytester.path / "examples", ignore=shutil.ignore_patterns(".flow"))
    result = run(pytester, "examples")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 5


def test_this_repository_collects_flow_tests_only_under_examples():
    import subprocess
    import sys

    def collected(path: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", path],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        return [line for line in done.stdout.splitlines() if ".flow::" in line or ".jsonl::" in line]

    # tests/programs holds *_test.flow fixtures that tests/test_flow_test.py runs itself.
    assert collected("tests/programs") == []
    assert collected("examples/payments") == ["examples/payments/payments_test.flow::retries_an_unknown_outcome"]
