"""`flow check PATH...`: check programs and report diagnostics and checkpoint places as data.

Each file given, and each `.flow` file found in a directory given, is checked as the root of a
program. Modules shared between programs are parsed once and their diagnostics reported once.
"""

from __future__ import annotations

import sys
from dataclasses import field

from flowc.diagnostics import Diagnostic, Location, M, sort_key
from flowc.frontend import check_program, program_identity
from flowc.program import Program
from flowc.records import record
from flowc.files import program_roots, read_text


@record
class PlaceView:
    file: str
    line: int
    column: int
    end_line: int
    end_column: int
    caller: str
    callee: str
    marked: bool

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "column": self.column, "end_line": self.end_line,
                "end_column": self.end_column, "function": self.caller, "calls": self.callee,
                "marked": self.marked}


@record(frozen=False)
class CheckReport:
    roots: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    places: list[PlaceView] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    #: each root's program; its identity is computed only when asked for (`--json` shows it)
    programs: dict[str, Program] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    @property
    def identities(self) -> dict[str, str]:
        return {root: program_identity(program) for root, program in self.programs.items()}

    def to_json(self) -> dict:
        identities = self.identities
        return {
            "ok": self.ok,
            "programs": [{"root": r, "identity": identities.get(r)} for r in self.roots],
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "checkpoints": [p.to_json() for p in self.places],
        }


def run_check(paths: list[str], jail: str | None = None) -> CheckReport:
    """Check each program `paths` name; with `jail` (`flow mcp --root`), no file outside it is read."""
    from flowc.disk import DiskChecks

    disk = DiskChecks(jail)
    report = CheckReport()
    roots, problems = program_roots(paths)
    for problem in problems:
        report.diagnostics.append(M.file_unreadable_directory(path=problem.path, reason=problem.reason).at(
            Location(problem.path, 1, 1, 1, 2)))
    cache: dict = {}
    texts: dict[str, str] = {}

    def read(path: str) -> str:
        if path not in texts:
            texts[path] = read_text(path)
        return texts[path]

    seen: set = set(report.diagnostics)
    seen_places: set = set()
    for root in roots:
        checked = check_program(root, read, cache, disk=disk)
        report.roots.append(root)
        report.programs[root] = checked.program
        report.sources.update(checked.sources())
        for d in checked.diagnostics:
            if d not in seen:
                seen.add(d)
                report.diagnostics.append(d)
        for p in checked.places:
            if p.file.startswith("std@"):
                continue
            view = PlaceView(p.file, p.span.line, p.span.column, p.span.end_line, p.span.end_column,
                             p.caller, p.callee, p.marked)
            if view not in seen_places:
                seen_places.add(view)
                report.places.append(view)
    report.diagnostics.sort(key=sort_key)
    report.places.sort(key=lambda p: (p.file, p.line, p.column))
    return report


def check_and_print(paths: list[str], as_json: bool, color: str) -> int:
    """`flow check`: check, write the report (`color`: auto, always or never) and return the exit
    code. Both the click command and the entry point's own reading of a plain `flow check` run it."""
    report = run_check(paths)
    if as_json:
        import orjson

        # What every `--json` document has (docs/cli.md, "Results as data") beside the report.
        document = {**report.to_json(), "exitCode": 0 if report.ok else 2, "message": None}
        sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_SORT_KEYS) + b"\n")
    else:
        if report.diagnostics:
            from flowc.diagnostics.render import render, use_color

            sys.stderr.write(render(report.diagnostics, report.sources, color=use_color(color, sys.stderr)))
        if report.ok:
            count = len(report.roots)
            sys.stdout.write(render_places(report))
            sys.stdout.write(f"ok: {count} program{'s' if count != 1 else ''} checked\n")
    return 0 if report.ok else 2


def render_places(report: CheckReport) -> str:
    if not report.places:
        return ""
    lines = ["checkpoint places:"]
    for p in report.places:
        mark = "  (marked: an argument may hold a function; decided as the run goes)" if p.marked else ""
        callee = p.callee.rsplit(".", 1)[-1]
        caller = p.caller.rsplit(".", 1)[-1]
        lines.append(f"  {p.file}:{p.line}:{p.column}: tail call to `{callee}` in `{caller}`{mark}")
    return "\n".join(lines) + "\n"
