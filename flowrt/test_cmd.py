"""`flow test PATH...`: run @test functions against @fake Tools in the sandbox, on a virtual clock.

Every `.flow` file given, or found in a directory given (searched as `flow fmt` searches), is
checked as a program root; the @test functions of its root module run, all in one sandbox process
per program. A test that can reach a Tool no fake stands in for (other than std's clock, which
the virtual clock answers) does not start, and is reported as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import flowc
from flowc.compiled import Compiled
from flowc.diagnostics import Diagnostic, Location, error
from flowc.files import program_roots, read_text

CLOCK_TOOLS = {"std@v1/clock.now", "std@v1/clock.sleep"}


@dataclass
class TestReport:
    results: list[dict] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    refused: bool = False
    #: tests `-k` left out: neither run nor counted
    deselected: int = 0

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r["outcome"] == "passed")

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed

    def exit_code(self) -> int:
        if self.refused:
            return 2
        return 0 if self.failed == 0 else 1

    def to_json(self) -> dict:
        return {"passed": self.passed, "failed": self.failed, "deselected": self.deselected, "tests": self.results,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


STEP_BOUND = 2 ** 26


def select_all(name: str) -> bool:
    return True


def run_tests(paths: list[str], steps: int = STEP_BOUND,
              select: Callable[[str], bool] = select_all) -> TestReport:
    """`select` (`flowrt.test_select.compile_selection`) names the tests that run, by name; a
    history's name is `history <its directory>`."""
    report = TestReport()
    roots, problems = program_roots([p for p in paths if os.path.isdir(p) or os.path.exists(p)])
    for problem in problems:
        report.refused = True
        report.diagnostics.append(error("file-unreadable", f"cannot read directory `{problem.path}`: "
                                        f"{problem.reason}", Location(problem.path, 1, 1, 1, 2)))
    for path in paths:
        if not os.path.exists(path):
            report.refused = True
            report.diagnostics.append(error("file-unreadable", f"cannot read `{path}`: no such file or directory",
                                            Location(path, 1, 1, 1, 2)))
    for path in paths:
        if os.path.isdir(path):
            for history in find_histories(path):
                replay_history(history, report, select)
        elif os.path.basename(path) == "history.jsonl":
            replay_history(os.path.dirname(path) or ".", report, select)
    cache: dict = {}
    for root in roots:
        compiled = flowc.compile(root, read_text, parse_cache=cache)
        report.sources.update(compiled.sources())
        if not compiled.ok:
            report.refused = True
            report.diagnostics.extend(d for d in compiled.diagnostics if d not in report.diagnostics)
            continue
        run_program(compiled, report, steps, select)
    return report


def run_program(compiled: Compiled, report: TestReport, steps: int = STEP_BOUND,
                select: Callable[[str], bool] = select_all) -> None:
    """The selected @test functions of a checked program's root module, in one sandbox child."""
    tests = [fn for fn in compiled.tests() if select(fn.name)]
    report.deselected += len(compiled.tests()) - len(tests)
    if not tests:
        return
    fakes = {tool: {"key": fn.key, "counted": fn.fake_counted, "typed": fn.runtime_typed} for tool, fn in compiled.fakes().items()}
    entries = []
    for fn in tests:
        reachable = set(compiled.reachable_tools(fn.identity))
        unfaked = sorted(reachable - set(fakes) - CLOCK_TOOLS)
        entries.append({"key": fn.key, "name": fn.name, "file": fn.file, "line": fn.line, "unfaked": unfaked})
    generated = compiled.generated
    load = {"op": "test",
            "modules": [{"key": m.key, "filename": m.filename, "source": m.source, "flow_file": m.flow_file,
                         "line_map": [list(x) for x in m.line_map]} for m in generated.modules],
            "tests": entries, "fakes": fakes, "steps": steps}
    from flowrt.sandbox_process import Child, ChildDied

    child = Child.start()
    try:
        child.send(load)
        message = child.recv(None)
        if message.get("op") == "refused":
            report.refused = True
            report.results.extend({"name": e["name"], "file": e["file"], "line": e["line"], "outcome": "failed",
                                   "message": message.get("message")} for e in entries)
            return
        report.results.extend(message["results"])
    except ChildDied as died:
        report.results.extend({"name": e["name"], "file": e["file"], "line": e["line"], "outcome": "failed",
                               "message": f"the sandbox died: {died}"} for e in entries)
    finally:
        child.kill()


def find_histories(directory: str) -> list[str]:
    """Run directories (holding a history.jsonl) under `directory`, searched as `flow fmt` searches:
    no entry whose name starts with `.`, no symbolic link."""
    found: list[str] = []
    for current, folders, files in os.walk(directory, followlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith(".")
                            and not os.path.islink(os.path.join(current, f)))
        if "history.jsonl" in files:
            found.append(current)
            folders[:] = []
    return sorted(found)


def history_name(run_dir: str) -> str:
    return f"history {os.path.relpath(run_dir)}"


def replay_history(run_dir: str, report: TestReport, select: Callable[[str], bool] = select_all) -> None:
    """A saved history is a regression test: replayed against the current program, which is the
    root file its entry module names, in the history's directory or the nearest one above."""
    from flowrt.replay import replay
    from flowrt.store import StorageError, open_store

    runs_dir, run_id = os.path.split(os.path.abspath(run_dir))
    name = history_name(run_dir)
    if not select(name):
        report.deselected += 1
        return
    try:
        store = open_store(runs_dir).open(run_id, for_append=False)
        entry = store.facts()[0]["entry"]
        store.close()
    except (StorageError, Exception) as problem:
        report.refused = True
        report.diagnostics.append(error("file-unreadable", f"cannot read the history in `{run_dir}`: {problem}",
                                        Location(os.path.join(run_dir, "history.jsonl"), 1, 1, 1, 2)))
        return
    root_file = None
    folder = os.path.abspath(run_dir)
    while True:
        candidate = os.path.join(folder, entry["module"] + ".flow")
        if os.path.isfile(candidate):
            root_file = candidate
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if root_file is None:
        report.refused = True
        report.diagnostics.append(error("file-unreadable", f"the current program of the history in `{run_dir}` "
                                        f"(`{entry['module']}.flow`) is not in its directory or any above it",
                                        Location(os.path.join(run_dir, "history.jsonl"), 1, 1, 1, 2)))
        return
    compiled = flowc.compile(os.path.relpath(root_file), read_text)
    if not compiled.ok:
        report.refused = True
        report.diagnostics.extend(compiled.diagnostics)
        report.sources.update(compiled.sources())
        return
    started = __import__("time").perf_counter()
    # From Start: a change to the program before the latest checkpoint must fail the test too.
    result = replay(runs_dir, run_id, current=compiled, from_start=True)
    seconds = round(__import__("time").perf_counter() - started, 6)
    entry_row = {"name": name, "file": os.path.relpath(root_file), "line": 1, "seconds": seconds}
    if result.verdict is not None and result.verdict.kind == "Matched":
        entry_row["outcome"] = "passed"
    elif result.verdict is not None:
        v = result.verdict
        entry_row.update(outcome="failed", message=f"{v.kind}" + (f" at fact {v.fact}" if v.fact else "")
                         + f": {v.reason}", verdict=v.to_json())
        if v.found is not None:
            entry_row["found"] = v.found
    else:
        report.refused = result.exit_code in (2, 5)
        entry_row.update(outcome="failed", message=result.message or "the history could not be replayed")
    report.results.append(entry_row)


def render(report: TestReport) -> str:
    lines = []
    for r in report.results:
        took = f" ({r['seconds'] * 1000:.0f} ms)" if "seconds" in r else ""
        if r["outcome"] == "passed":
            lines.append(f"PASS {r['name']}{took}")
        else:
            where = r.get("location") or {"file": r["file"], "line": r["line"]}
            label = "NOT STARTED" if r["outcome"] == "not-started" else "FAIL"
            lines.append(f"{label} {r['name']}{took}")
            lines.append(f"  {where['file']}:{where['line']}: {r.get('message')}")
    lines.append(f"{report.passed} passed, {report.failed} failed"
                 + (f", {report.deselected} deselected" if report.deselected else ""))
    return "\n".join(lines) + "\n"
