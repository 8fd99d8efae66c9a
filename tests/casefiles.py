"""Data-driven compiler cases: one file holds the program and the diagnostics it must produce.

Format (see tests/cases/README.md):

    // A description line or two.
    [file main.flow]
    flow f() -> Int = "text"        // E: type-mismatch
    [file other.flow]
    pub flow g() -> Int = 1

    [diagnostics]
    main.flow:1:23: error[type-mismatch]: expected `Int`, found `Text`

Without a `[file NAME]` header the whole text is `main.flow`. The first file is the program's
root. `// E: code` (error) or `// W: code` (warning) at the end of a line expects a diagnostic
starting on that line; several codes are separated by commas. `// E@N: code` expects one on line N
of the same file (for lines that cannot carry a comment, such as an unterminated text literal).

A final `[diagnostics]` section pins the words: one line per diagnostic, in the order the compiler
reports them, `file:line:column: severity[code]: message`, then its notes and help each on an
indented line (`  note: ...`, `  help: ...`; a newline inside one is written `\n`). A case with no
diagnostics has no section. A case passes when the set of (file, line, severity, code) reported
equals the set its marks expect and the reported diagnostics, written this way, equal the section.

`pytest tests/test_cases.py --update-cases` (or `FLOW_UPDATE_CASES=1`) rewrites the marks and the
section from what the compiler says; review the diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flowc.frontend import Checked, check_program

CASES = Path(__file__).with_name("cases")
_MARK = re.compile(r"\s*// ([EW])(?:@(\d+))?: ([a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)\s*$")
_HEADER = re.compile(r"^\[file ([^\]]+)\]\s*$")
SECTION = "[diagnostics]"


@dataclass(frozen=True)
class Case:
    path: Path
    files: dict[str, str]  # name -> source (marks left in: they are comments)
    root: str
    expected: frozenset[tuple[str, int, str, str]]
    messages: tuple[str, ...]  # the [diagnostics] section's lines


def load_case(path: Path) -> Case:
    text = path.read_text(encoding="utf-8")
    messages: tuple[str, ...] = ()
    marker = "\n" + SECTION + "\n"
    if marker in text:
        # the text before the section keeps its final newline: it is part of the last file
        text, section = text.split(marker, 1)
        text += "\n"
        messages = tuple(line for line in section.split("\n") if line)
    files: dict[str, list[str]] = {}
    current = None
    for line in text.split("\n"):
        header = _HEADER.match(line)
        if header:
            current = header.group(1)
            files[current] = []
            continue
        if current is None:
            current = "main.flow"
            files[current] = []
        files[current].append(line)
    sources = {name: "\n".join(lines) for name, lines in files.items()}
    expected: set[tuple[str, int, str, str]] = set()
    for name, source in sources.items():
        for number, line in enumerate(source.split("\n"), start=1):
            mark = _find_mark(line)
            if mark is None:
                continue
            kind, at, codes = mark
            severity = "error" if kind == "E" else "warning"
            for code in codes:
                expected.add((name, int(at) if at else number, severity, code))
    root = next(iter(sources))
    return Case(path, sources, root, frozenset(expected), messages)


def _find_mark(line: str):
    index = line.rfind("// ")
    while index != -1:
        match = _MARK.match(line[index:])
        if match and (match.start() == 0):
            return match.group(1), match.group(2), [c.strip() for c in match.group(3).split(",")]
        index = line.rfind("// ", 0, index)
    return None


def run_case(case: Case) -> tuple[Checked, frozenset[tuple[str, int, str, str]]]:
    def read(path: str) -> str:
        name = path[2:] if path.startswith("./") else path
        if name in case.files:
            return case.files[name]
        raise FileNotFoundError(2, "No such file or directory", path)

    checked = check_program(case.root, read, disk=None)
    got = frozenset((d.location.file if d.location else "", d.location.line if d.location else 0,
                     d.severity, d.code) for d in checked.diagnostics)
    return checked, got


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def message_lines(diagnostics) -> tuple[str, ...]:
    """The diagnostics as a case's `[diagnostics]` section writes them, in the order given."""
    lines: list[str] = []
    for d in diagnostics:
        loc = d.location
        where = f"{loc.file}:{loc.line}:{loc.column}" if loc is not None else "-"
        lines.append(f"{where}: {d.severity}[{d.code}]: {_escape(d.message)}")
        lines.extend(f"  note: {_escape(note)}" for note in d.notes)
        if d.help is not None:
            lines.append(f"  help: {_escape(d.help)}")
    return tuple(lines)


def rewrite_marks(case: Case, got: frozenset[tuple[str, int, str, str]], messages: tuple[str, ...] = ()) -> str:
    """The case file's text with its marks and its `[diagnostics]` section replaced by what the
    compiler reported. Lines that are not marks (descriptions before the first `[file]`, headers)
    are kept; when the marks already say what was reported they are left exactly as written
    (an `// E@N:` mark included)."""
    raw = case.path.read_text(encoding="utf-8")
    marker = "\n" + SECTION + "\n"
    body = raw.split(marker, 1)[0] + "\n" if marker in raw else raw
    if got != case.expected:
        body = _rewrite_mark_lines(body, got)
    if messages:
        body += SECTION + "\n" + "\n".join(messages) + "\n"
    return body


def _rewrite_mark_lines(body: str, got: frozenset[tuple[str, int, str, str]]) -> str:
    by_line: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for file, line, severity, code in sorted(got):
        by_line.setdefault((file, line), []).append(("E" if severity == "error" else "W", code))
    has_headers = any(_HEADER.match(line) for line in body.split("\n"))
    current = None if has_headers else "main.flow"
    number = 0
    out: list[str] = []
    for line in body.split("\n"):
        header = _HEADER.match(line)
        if header:
            current, number = header.group(1), 0
            out.append(line)
            continue
        if current is None:  # a description before the first [file]
            out.append(line)
            continue
        number += 1
        mark = _find_mark(line)
        if mark is not None:
            line = line[: line.rfind("// " + mark[0])].rstrip()
        marks = by_line.get((current, number), [])
        if marks:
            errors = [c for k, c in marks if k == "E"]
            warnings = [c for k, c in marks if k == "W"]
            suffix = []
            if errors:
                suffix.append("// E: " + ", ".join(errors))
            if warnings:
                suffix.append("// W: " + ", ".join(warnings))
            line = (line + "   " if line.strip() else line) + "   ".join(suffix)
        out.append(line)
    return "\n".join(out)


def all_cases() -> list[Path]:
    return sorted(CASES.rglob("*.flow"))
