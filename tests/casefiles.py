"""Data-driven compiler cases: one file holds the program and the diagnostics it must produce.

Format (see tests/cases/README.md):

    // A description line or two.
    [file main.flow]
    flow f() -> Int = "text"        // E: type-mismatch
    [file other.flow]
    pub flow g() -> Int = 1

Without a `[file NAME]` header the whole text is `main.flow`. The first file is the program's
root. `// E: code` (error) or `// W: code` (warning) at the end of a line expects a diagnostic
starting on that line; several codes are separated by commas. `// E@N: code` expects one on line N
of the same file (for lines that cannot carry a comment, such as an unterminated text literal).
A case passes when the set of (file, line, severity, code) reported equals the set expected.

`FLOW_UPDATE_CASES=1 pytest tests/test_cases.py` rewrites the marks from what the compiler says;
review the diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flowc.frontend import Checked, check_program

CASES = Path(__file__).with_name("cases")
_MARK = re.compile(r"\s*// ([EW])(?:@(\d+))?: ([a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)\s*$")
_HEADER = re.compile(r"^\[file ([^\]]+)\]\s*$")


@dataclass(frozen=True)
class Case:
    path: Path
    files: dict[str, str]  # name -> source (marks left in: they are comments)
    root: str
    expected: frozenset[tuple[str, int, str, str]]


def load_case(path: Path) -> Case:
    text = path.read_text(encoding="utf-8")
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
    return Case(path, sources, root, frozenset(expected))


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


def rewrite_marks(case: Case, got: frozenset[tuple[str, int, str, str]]) -> str:
    """The case file's text with its marks replaced by what the compiler reported."""
    by_line: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for file, line, severity, code in sorted(got):
        by_line.setdefault((file, line), []).append(("E" if severity == "error" else "W", code))
    out: list[str] = []
    raw = case.path.read_text(encoding="utf-8")
    has_headers = any(_HEADER.match(l) for l in raw.split("\n"))
    for name, source in case.files.items():
        if has_headers:
            out.append(f"[file {name}]")
        for number, line in enumerate(source.split("\n"), start=1):
            mark = _find_mark(line)
            if mark is not None:
                line = line[: line.rfind("// " + mark[0])].rstrip()
            marks = by_line.get((name, number), [])
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
