"""`flow test -k EXPRESSION` and `flow test --junit-xml FILE` through the real entry point: which
tests run, the deselected count, the XML a CI reads (parsed back), and the expression's grammar
(a property: the parsed predicate agrees with the expression tree it was printed from)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from flowrt.test_select import SelectionError, compile_selection

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
@tool pub flow audit(text: Text) -> Unit

@test flow adds_one() -> Result<Unit, Text> = if 1 + 1 == 2 { Ok(()) } else { Err("arithmetic") }

@test flow adds_two() -> Result<Unit, Text> = Err("expected 4, found 5")

@test flow subtracts() -> Result<Unit, Text> = if 3 - 1 == 2 { Ok(()) } else { Err("no") }

@test flow reaches_audit() -> Result<Unit, Text> = {
    audit("x")
    Ok(())
}
"""


def flow(*args: str, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "sums_test.flow").write_text(PROGRAM)
    return tmp_path


@pytest.mark.parametrize("expression, expected", [
    ("adds", {"adds_one", "adds_two"}),
    ("ADDS and not two", {"adds_one"}),
    ("subtracts or reaches", {"subtracts", "reaches_audit"}),
    ("not (adds or audit)", {"subtracts"}),
    ("nothing_by_this_name", set()),
])
def test_k_runs_only_the_matching_tests(program, expression, expected):
    done = flow("test", str(program), "-k", expression, "--json")
    report = json.loads(done.stdout)
    assert {t["name"] for t in report["tests"]} == expected
    assert report["deselected"] == 4 - len(expected)
    failing = expected & {"adds_two", "reaches_audit"}
    assert done.returncode == (1 if failing else 0), done.stderr


def test_the_summary_counts_the_deselected(program):
    done = flow("test", str(program), "-k", "subtracts")
    assert done.returncode == 0
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("PASS subtracts ") and lines[1:] == ["1 passed, 0 failed, 3 deselected"]


def test_k_selects_saved_histories_by_their_directory():
    done = flow("test", "examples", "-k", "history", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert [t["name"] for t in report["tests"]] == \
        ["history examples/support/histories/run-20261129-204400-b53d35"]
    done = flow("test", "examples/support", "-k", "not history", "--json")
    assert all(not t["name"].startswith("history ") for t in json.loads(done.stdout)["tests"])


@pytest.mark.parametrize("expression", ["(adds", "adds and", "or adds", "adds )", "not"])
def test_an_expression_that_does_not_parse_is_refused_before_anything_runs(program, expression, tmp_path):
    xml = tmp_path / "out.xml"
    done = flow("test", str(program), "-k", expression, "--junit-xml", str(xml))
    assert done.returncode == 2
    assert done.stderr.startswith("error: -k ")
    assert done.stdout == "" and not xml.exists()


def test_junit_xml_records_every_test_its_outcome_and_its_failure_text(program, tmp_path):
    xml = tmp_path / "reports" / "flow.xml"
    done = flow("test", str(program), "--junit-xml", str(xml))
    assert done.returncode == 1
    suite = ET.parse(xml).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"adds_one", "adds_two", "subtracts", "reaches_audit"}
    assert cases["adds_one"].find("failure") is None and float(cases["adds_one"].get("time")) >= 0
    failure = cases["adds_two"].find("failure")
    assert failure.get("message") == "expected 4, found 5" and failure.get("type") == "failed"
    assert failure.text.endswith("sums_test.flow:6: expected 4, found 5")
    assert cases["adds_two"].get("classname").endswith("sums_test")
    assert cases["adds_two"].get("line") == "6"
    assert cases["reaches_audit"].find("failure").get("type") == "not-started"
    # The human report is printed as without the option.
    assert done.stdout.strip().splitlines()[-1] == "2 passed, 2 failed"


def test_junit_xml_with_k_lists_only_the_selected(program, tmp_path):
    xml = tmp_path / "flow.xml"
    done = flow("test", str(program), "-k", "one or subtracts", "--junit-xml", str(xml))
    assert done.returncode == 0
    names = [c.get("name") for c in ET.parse(xml).getroot().iter("testcase")]
    assert names == ["adds_one", "subtracts"]


def test_a_program_that_does_not_check_is_an_error_in_the_xml(tmp_path):
    (tmp_path / "bad_test.flow").write_text('@test flow t() -> Result<Unit, Text> = Ok(1)\n')
    xml = tmp_path / "flow.xml"
    done = flow("test", str(tmp_path), "--junit-xml", str(xml))
    assert done.returncode == 2
    suite = ET.parse(xml).getroot().find("testsuite")
    assert suite.get("errors") == "1"
    error = suite.find("testcase").find("error")
    assert error.get("type") == "type-mismatch" and "bad_test.flow:1" in error.text


def test_an_unwritable_junit_path_is_refused(program, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = flow("test", str(program), "--junit-xml", str(blocker / "x.xml"))
    assert done.returncode == 2 and "--junit-xml" in done.stderr


# ---- the expression grammar --------------------------------------------------------------------

WORDS = st.sampled_from(["a", "b", "ab", "c_d", "x/y", "B"])


def trees():
    return st.recursive(WORDS.map(lambda w: ("word", w)),
                        lambda inner: st.one_of(st.tuples(st.just("not"), inner),
                                                st.tuples(st.sampled_from(["and", "or"]), inner, inner)),
                        max_leaves=8)


def printed(tree) -> str:
    if tree[0] == "word":
        return tree[1]
    if tree[0] == "not":
        return f"not ({printed(tree[1])})"
    return f"({printed(tree[1])}) {tree[0]} ({printed(tree[2])})"


def meaning(tree, name: str) -> bool:
    if tree[0] == "word":
        return tree[1].lower() in name.lower()
    if tree[0] == "not":
        return not meaning(tree[1], name)
    left, right = meaning(tree[1], name), meaning(tree[2], name)
    return left and right if tree[0] == "and" else left or right


@given(trees(), st.text(alphabet="abcdxy_/B", max_size=6))
def test_a_printed_expression_parses_back_to_its_meaning(tree, name):
    assert compile_selection(printed(tree))(name) == meaning(tree, name)


@given(st.text(alphabet="ab() ", max_size=12).map(lambda t: t.replace("a", " and ").replace("b", "x")))
def test_any_text_parses_or_is_refused_with_a_selection_error(text):
    try:
        compile_selection(text)
    except SelectionError as problem:
        assert str(problem).startswith("-k ")


def test_precedence_is_not_over_and_over_or():
    select = compile_selection("a or b and not c")
    assert select("a") and select("b") and not select("bc") and select("abc")


# ---- the XML encoding --------------------------------------------------------------------------

XML_CHARS = re.compile("[\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def expected_in_xml(text: str) -> str:
    """What a reader of the XML gets back: every character XML can carry, the others as #xNN."""
    return "".join(c if XML_CHARS.fullmatch(c) else f"#x{ord(c):02X}" for c in text)


@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40), st.sampled_from(["passed", "failed",
                                                                                        "not-started"])),
                max_size=5))
@settings(deadline=None)  # the first example imports the writer
def test_any_names_and_messages_survive_the_xml(rows):
    from flowrt.junit import junit_tree
    from flowrt.test_cmd import TestReport

    report = TestReport(results=[{"name": name, "file": "a/b_test.flow", "line": 3, "outcome": outcome,
                                  "message": message, "seconds": 0.5} for name, message, outcome in rows])
    text = ET.tostring(junit_tree(report).getroot(), encoding="unicode")
    cases = ET.fromstring(text).find("testsuite").findall("testcase")
    assert len(cases) == len(rows)
    for case, (name, message, outcome) in zip(cases, rows):
        # XML normalises line ends in text but keeps attributes' through character references.
        assert case.get("name") == expected_in_xml(name)
        failure = case.find("failure")
        assert (failure is None) == (outcome == "passed")
        if failure is not None:
            assert failure.get("message") == expected_in_xml(message)
            assert failure.text.replace("\r\n", "\n") == \
                expected_in_xml(f"a/b_test.flow:3: {message}").replace("\r\n", "\n").replace("\r", "\n")


def test_a_diverged_history_reports_what_the_program_did_instead(tmp_path):
    import shutil

    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    main = folder / "main.flow"
    main.write_text(main.read_text().replace("Ok(Done(summary)) => Resolved(summary)",
                                             'Ok(Done(summary)) => Resolved("done: " ++ summary)'))
    xml = tmp_path / "flow.xml"
    done = flow("test", str(folder / "histories"), "--json", "--junit-xml", str(xml))
    assert done.returncode == 1
    [row] = json.loads(done.stdout)["tests"]
    assert row["verdict"]["verdict"] == "Diverged" and row["found"]["kind"] == "End"
    assert row["found"]["outcome"]["Completed"]["Resolved"].startswith("done: ")
    failure = ET.parse(xml).getroot().find("testsuite/testcase/failure")
    assert failure.get("message").startswith("Diverged at fact ")
