"""`flow test --junit-xml FILE`: a `flow test` report as JUnit XML, for CI without pytest.

The layout is the one pytest's `--junitxml` writes (one `<testsuites>` holding one `<testsuite>`,
a `<testcase classname= name= time= file= line=>` per test, `<failure message=...>` with the
failure text inside), so a CI that reads pytest's reports reads these. A test that did not start
(no fake for a Tool it can reach) is a failure, as `flow test` counts it, with type `not-started`;
a program that does not check, or a history that cannot be read, is an `<error>` testcase named
after its file, so a refused run never looks like a passing one.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

from flowrt.test_cmd import TestReport


def junit_tree(report: TestReport, suite_name: str = "flow test") -> ET.ElementTree:
    suites = ET.Element("testsuites", name=suite_name)
    suite = ET.SubElement(suites, "testsuite", name=suite_name)
    failures = errors = 0
    total = 0.0
    for r in report.results:
        seconds = float(r.get("seconds", 0.0))
        total += seconds
        case = ET.SubElement(suite, "testcase", classname=_xml_text(_classname(r["file"])),
                             name=_xml_text(r["name"]), time=f"{seconds:.6f}", file=_xml_text(r["file"]),
                             line=str(r["line"]))
        if r["outcome"] == "passed":
            continue
        failures += 1
        where = r.get("location") or {"file": r["file"], "line": r["line"]}
        message = r.get("message") or ""
        failure = ET.SubElement(case, "failure", message=_xml_text(message),
                                type="not-started" if r["outcome"] == "not-started" else "failed")
        failure.text = _xml_text(f"{where['file']}:{where['line']}: {message}")
    for d in report.diagnostics:
        if d.severity != "error":
            continue
        errors += 1
        location = d.location
        file = location.file if location is not None else "flow"
        line = location.line if location is not None else 1
        case = ET.SubElement(suite, "testcase", classname=_xml_text(_classname(file)),
                             name=_xml_text(f"check {file}"), time="0.000000", file=_xml_text(file), line=str(line))
        error = ET.SubElement(case, "error", message=_xml_text(d.message), type=d.code)
        error.text = _xml_text(f"{file}:{line}: {d.code}: {d.message}")
    suite.set("tests", str(len(report.results) + errors))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    suite.set("time", f"{total:.6f}")
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_junit(report: TestReport, path: str) -> None:
    """Written to a file beside the target and renamed over it: a CI never reads half a report."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.partial")
    junit_tree(report).write(partial, encoding="utf-8", xml_declaration=True)
    os.replace(partial, path)


#: what XML 1.0 cannot hold at all, even escaped (a Flow Text may hold any of it)
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """`text` with each character XML cannot carry written as `#xNN`, as pytest's junitxml does."""
    return _NOT_XML.sub(lambda m: f"#x{ord(m.group()):02X}", text)


def _classname(file: str) -> str:
    # pytest's classname is the dotted module path: the Flow file's path without `.flow`.
    stem = file[:-5] if file.endswith(".flow") else file
    return stem.replace(os.sep, ".").replace("/", ".").lstrip(".")
