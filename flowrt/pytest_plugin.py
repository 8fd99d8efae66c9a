"""The pytest plugin (entry point `flow` in the `pytest11` group): Flow tests as pytest items.

Each `@test` function of a `*_test.flow` file is an item named after the function, and each saved
history (a run directory's `history.jsonl`) is an item replayed against the current program from
Start, exactly as `flow test` runs them (flowrt/test_cmd.py: the same sandbox child, fakes and
virtual clock). So `-k`, `--junitxml`, `-x`, `--lf` and the rest are pytest's own.

What is collected: `.flow` tests and histories only under the paths of the `flow_paths` ini
option when it is set, else only under paths given on the command line. A plain `pytest` that
walks `testpaths` therefore never collects Flow files (the repository's own suite has `*_test.flow`
fixtures under tests/ that are not meant as tests), and costs nothing: this module imports the
compiler only when it collects a Flow file. `-p no:flow` turns the plugin off.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

STEPS_DEFAULT = 2 ** 26  # flowrt.test_cmd.STEP_BOUND, not imported so that loading the plugin stays cheap


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flow", "Flow tests (*_test.flow files and saved histories)")
    group.addoption("--flow-steps", type=int, default=STEPS_DEFAULT, metavar="N",
                    help="The evaluation steps a Flow test may take, across the test and its fakes.")
    parser.addini("flow_paths", type="paths", default=[],
                  help="Where Flow tests and saved histories are collected; when unset, only under "
                       "paths given on the command line.")


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    name = file_path.name
    if not (name.endswith("_test.flow") or name == "history.jsonl"):
        return None
    if not _under_collected_paths(parent.config, file_path):
        return None
    if name == "history.jsonl":
        return HistoryFile.from_parent(parent, path=file_path)
    return FlowFile.from_parent(parent, path=file_path)


def _under_collected_paths(config: pytest.Config, file_path: Path) -> bool:
    roots = [Path(p) for p in config.getini("flow_paths")]
    if not roots:
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            return False
        base = config.invocation_params.dir
        roots = [base / arg.split("::", 1)[0] for arg in config.args]
    target = file_path.resolve()
    for root in roots:
        root = root.resolve()
        if target == root or root in target.parents:
            return True
    return False


def _display(path: Path) -> str:
    # Relative to the working directory, as `flow test` shows paths (and as the compiler reads them).
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


class FlowCheckError(Exception):
    """A Flow file that does not check: its diagnostics, rendered as `flow check` renders them."""


class FlowFailure(Exception):
    """A Flow test that failed: its `flow test` result row (and for a history, the fact it expected)."""

    def __init__(self, result: dict, expected: str, found: str) -> None:
        super().__init__(result.get("message"))
        self.result = result
        self.expected = expected
        self.found = found


def _check_text(diagnostics, sources) -> str:
    from flowc.diagnostics.render import render

    return render(diagnostics, sources, color=False)


class FlowFile(pytest.File):
    """A `*_test.flow` file: one item per @test of its root module, run together in one sandbox
    child (as `flow test` runs them) when the first of them runs."""

    def collect(self):
        import flowc
        from flowc.files import read_text

        compiled = flowc.compile(_display(self.path), read_text)
        if not compiled.ok:
            raise FlowCheckError(_check_text(compiled.diagnostics, compiled.sources()))
        self.compiled = compiled
        self.results: dict[str, dict] | None = None
        for fn in compiled.tests():
            yield FlowTestItem.from_parent(self, name=fn.name, line=fn.line)

    def repr_failure(self, excinfo):
        if excinfo.errisinstance(FlowCheckError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def results_for(self, name: str) -> dict:
        if self.results is None:
            from flowrt.test_cmd import TestReport, run_program

            # The items of this file that are still to run after -k and the rest deselected some.
            wanted = {item.name for item in self.session.items if item.parent is self}
            report = TestReport()
            run_program(self.compiled, report, self.config.getoption("flow_steps"), lambda n: n in wanted)
            self.results = {r["name"]: r for r in report.results}
        return self.results[name]


class _Item(pytest.Item):
    """A Flow item. It has no fixtures, but says so with an empty `funcargs`: some plugins'
    `pytest_runtest_call` wrappers (pytest-lsp 1.0's) return without yielding for an item that
    lacks the attribute, which fails every such item with StopIteration."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.funcargs: dict = {}


class FlowTestItem(_Item):
    def __init__(self, *, line: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.line = line

    def runtest(self) -> None:
        result = self.parent.results_for(self.name)
        if result["outcome"] == "passed":
            return
        message = result.get("message") or ""
        if result["outcome"] == "not-started":
            found = f"not started: {message}"
        elif message.startswith("fault["):
            found = message
        else:
            found = f"Err({_quoted(message)})"
        raise FlowFailure(result, "Ok(())", found)

    def repr_failure(self, excinfo, style=None):
        if excinfo.errisinstance(FlowFailure):
            sources = getattr(self.parent.compiled, "sources", None)
            return _failure_text(self.name, excinfo.value, sources() if sources else {})
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, self.line - 1, f"flow test {self.name}"


class HistoryFile(pytest.File):
    """A saved run directory: its history is one item, replayed against the current program."""

    def collect(self):
        yield HistoryItem.from_parent(self, name=f"history {self.path.parent.name}")


class HistoryItem(_Item):
    def runtest(self) -> None:
        from flowrt.test_cmd import TestReport, replay_history

        report = TestReport()
        replay_history(_display(self.path.parent), report)
        self.sources = report.sources
        if report.diagnostics:
            raise FlowCheckError(_check_text(report.diagnostics, report.sources))
        result = report.results[0]
        if result["outcome"] == "passed":
            return
        verdict = result.get("verdict") or {}
        why = f"{verdict.get('verdict', 'not replayed')}: {verdict.get('reason') or result.get('message') or ''}"
        found = result.get("found")
        if not verdict.get("fact"):
            raise FlowFailure(result, "the recorded history, to its End", why)
        # The recorded fact in the shape of what the program did instead, when the two compare.
        expected = _recorded_fact(self.path.parent, verdict["fact"], None if found is None else set(found))
        if found is None:
            raise FlowFailure(result, f"fact {verdict['fact']}: {expected}", why)
        from flowdata import canonical

        raise FlowFailure(result, f"fact {verdict['fact']}: {expected}",
                          f"{canonical.dumps(found).decode()}\n  ({why})")

    def repr_failure(self, excinfo, style=None):
        if excinfo.errisinstance(FlowCheckError):
            return str(excinfo.value)
        if excinfo.errisinstance(FlowFailure):
            return _failure_text(self.name, excinfo.value, getattr(self, "sources", {}))
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, self.name


def _recorded_fact(run_dir: Path, n: int, keys: set[str] | None = None) -> str:
    """The fact the replay expected, as its canonical JSON (without the chain's bookkeeping, or
    only its `keys`)."""
    from flowdata import canonical
    from flowrt.store import open_store

    try:
        store = open_store(str(run_dir.parent)).open(run_dir.name, for_append=False)
        try:
            fact = next((f for f in store.facts() if f.get("n") == n), None)
            if fact is None:
                return f"(no fact {n} in the history)"
            shown = {}
            for key in sorted(fact):
                name = key[:-4] if key.endswith("_ref") else key
                if name in ("n", "prev", "hash") or (keys is not None and name not in keys):
                    continue
                # A value kept by reference is shown as the value, as the program would see it.
                shown[name] = store.value(fact, name) if key.endswith("_ref") else fact[key]
        finally:
            store.close()
    except Exception as problem:  # noqa: BLE001 - the failure is reported anyway; this only adds to it
        return f"(unreadable: {problem})"
    return canonical.dumps(shown).decode()


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _failure_text(name: str, failure: FlowFailure, sources: dict[str, str]) -> str:
    """The Flow location, its source line, and what the test expected beside what it found."""
    result = failure.result
    where = dict(result.get("location") or {"file": result["file"], "line": result["line"]})
    if where["file"] not in sources:
        # The sandbox names a fault's file as the program's modules are named, relative to the
        # root module's folder; shown as the rest of the report shows it.
        matches = [f for f in sources if f.endswith(os.sep + where["file"])]
        if len(matches) == 1:
            where["file"] = matches[0]
    lines = [f"{where['file']}:{where['line']}: {name} failed"]
    text = sources.get(where["file"])
    if text is not None:
        source_lines = text.splitlines()
        if 0 < where["line"] <= len(source_lines):
            lines.append(f"  {where['line']:>4} | {source_lines[where['line'] - 1]}")
    lines.append(f"  expected: {failure.expected}")
    lines.append(f"  found:    {failure.found}")
    return "\n".join(lines)
