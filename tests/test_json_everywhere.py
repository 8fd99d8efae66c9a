"""Results as data (docs/cli.md, "Results as data"): `--json` on every command prints one JSON
document with `exitCode`, `message` and `diagnostics` (refusals too), the exit code unchanged;
`flow run` names the run it made on stderr in human mode, so stdout stays the output.

Each case is a command line, through the real `flow` entry point, the exit code it has and the
fields its document must hold."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = {
    "hello.flow": 'pub flow main(name: Text) -> Text = "hello ${name}"\n',
    "err.flow": 'pub flow main() -> Result<Int, Text> = Err("no")\n',
    "fault.flow": "pub flow main(n: Int) -> Int = 10 / n\n",
    "bad.flow": "pub flow main() -> Int = true\n",
    "count.flow": ("@tool pub flow step(n: Int) -> Int\n\n"
                   "pub flow main() -> Int !tool = count(0, 2)\n\n"
                   "flow count(total: Int, left: Int) -> Int !tool =\n"
                   "    if left == 0 { total } else { count(total + step(left), left - 1) }\n"),
    "sub/lib.flow": "/// Doubles.\npub flow double(n: Int) -> Int = n * 2\n",
    "docs.flow": 'use "./sub/lib"\n\n/// Four.\npub flow main() -> Int = lib.double(2)\n',
}
UNFORMATTED = "pub flow main() -> Int =   1\n"
BROKEN = "pub flow main( -> Int = 1\n"


def flow(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=120)


@dataclass
class World:
    """A program directory and a runs directory; each run a case needs is made fresh."""

    home: Path
    runs: Path

    def flow(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return flow(*args, cwd=self.home, stdin=stdin)

    def run(self, file: str, *options: str) -> dict:
        return json.loads(self.flow("run", file, "--runs", str(self.runs), "--json", *options).stdout)

    def paused(self) -> tuple[str, str]:
        """A run of count.flow paused after a checkpoint: (run id, its pending call)."""
        first = self.run("count.flow")
        second = json.loads(self.flow("resume", first["run"], "--runs", str(self.runs), "--call",
                                      first["pending"][0], "--reply", '{"Ok": 5}', "--json").stdout)
        assert second["exitCode"] == 3, second
        return second["run"], second["pending"][0]

    def completed(self, *options: str) -> str:
        done = self.run("hello.flow", "--input", '{"name": "Ann"}', *options)
        assert done["exitCode"] == 0, done
        return done["run"]


@pytest.fixture
def world(tmp_path) -> World:
    home = tmp_path / "home"
    for name, text in PROGRAMS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (home / "flow.toml").write_text('[tools]\n"count" = { pending = true }\n')
    (home / "fmt").mkdir()
    (home / "fmt" / "ugly.flow").write_text(UNFORMATTED)
    (home / "fmt" / "broken.flow").write_text(BROKEN)
    return World(home, tmp_path / "runs")


@dataclass
class Case:
    name: str
    argv: Callable[[World], list[str]]
    exit: int
    fields: dict[str, Any] = field(default_factory=dict)  # a value, or a predicate on the value
    stdin: str | None = None

    def __repr__(self) -> str:
        return self.name


def _runs(w: World) -> list[str]:
    return ["--runs", str(w.runs)]


def _paused_resume(w: World, reply: str) -> list[str]:
    run_id, call = w.paused()
    return ["resume", run_id, *_runs(w), "--call", call, "--reply", reply]


def _fork(w: World, *extra: str) -> list[str]:
    run_id, _call = w.paused()
    return ["fork", run_id, "--checkpoint", "4", *_runs(w), *extra]


def _redact(w: World, fact: str) -> list[str]:
    return ["redact", w.completed("--redactable"), "--fact", fact, *_runs(w)]


def _nonempty(value) -> bool:
    return bool(value)


CASES = [
    # run: the outcome document, whatever the ending
    Case("run completed", lambda w: ["run", "hello.flow", "--input", '{"name": "Ann"}', *_runs(w)], 0,
         {"ending": "completed", "output": "hello Ann", "outputJson": '"hello Ann"', "pending": [],
          "run": _nonempty, "fault": None}),
    Case("run completed with Err", lambda w: ["run", "err.flow", *_runs(w)], 4,
         {"ending": "completed", "output": {"Err": "no"}}),
    Case("run faulted", lambda w: ["run", "fault.flow", "--input", '{"n": 0}', *_runs(w)], 1,
         {"ending": "faulted", "fault": lambda f: f["kind"] == "DivisionByZero" or "zero" in f["message"],
          "run": _nonempty, "output": None}),
    Case("run paused", lambda w: ["run", "count.flow", *_runs(w)], 3,
         {"ending": "paused", "pending": ["root#1"], "run": _nonempty}),
    Case("run refused: bad input", lambda w: ["run", "hello.flow", "--input", '{"name": 3}', *_runs(w)], 2,
         {"ending": "refused", "run": None, "diagnostics": lambda ds: [d["code"] for d in ds] == ["input-invalid"]}),
    Case("run refused: does not check", lambda w: ["run", "bad.flow", *_runs(w)], 2,
         {"diagnostics": lambda ds: ds and all(d["severity"] in ("error", "warning") for d in ds)}),
    Case("run refused: --checkpoints", lambda w: ["run", "hello.flow", "--checkpoints", "sometimes", *_runs(w)], 2,
         {"message": "--checkpoints is every, off or a number"}),
    # resume
    Case("resume completed", lambda w: _paused_resume(w, '{"Ok": 1}'), 0,
         {"ending": "completed", "output": 6, "refusal": None}),
    Case("resume refused: reply does not fit", lambda w: _paused_resume(w, '{"Ok": "one"}'), 2,
         {"ending": "refused", "refusal": lambda r: r["path"] == "$.Ok" and r["example"] == {"Ok": 1},
          "diagnostics": lambda ds: [d["code"] for d in ds] == ["reply-invalid"]}),
    Case("resume refused: not an open call", lambda w: ["resume", w.paused()[0], *_runs(w), "--call", "nope",
                                                        "--reply", '{"Ok": 1}'], 2,
         {"message": lambda m: "is not open" in m}),
    Case("resume refused: --call without --reply", lambda w: ["resume", w.paused()[0], *_runs(w), "--call", "x"], 2,
         {"message": "--call and --reply go together"}),
    Case("resume refused: ended", lambda w: ["resume", w.completed(), *_runs(w)], 2,
         {"message": lambda m: "has ended" in m}),
    # fork
    Case("fork paused", lambda w: _fork(w), 3,
         {"ending": "paused", "pending": ["c1:root#1"], "parent": lambda p: p["checkpoint"] == 4}),
    Case("fork completed with new arguments", lambda w: _fork(w, "--input", '{"left": 0}'), 0,
         {"ending": "completed", "output": 5}),
    Case("fork refused: not a checkpoint", lambda w: ["fork", w.completed(), "--checkpoint", "1", *_runs(w)], 2,
         {"message": lambda m: "is not a checkpoint" in m, "run": None}),
    # archive
    Case("archive", lambda w: ["archive", w.paused()[0], *_runs(w)], 0, {"archived": 2, "run": _nonempty}),
    Case("archive: nothing to archive", lambda w: ["archive", w.completed(), *_runs(w)], 0, {"archived": 0}),
    Case("archive refused: no such run", lambda w: ["archive", "run-nope", *_runs(w)], 2,
         {"run": "run-nope", "message": _nonempty}),
    # redact
    Case("redact", lambda w: _redact(w, "1"), 0,
         {"holes": lambda hs: [(h["fact"], h["field"]) for h in hs] == [(1, "input")]}),
    Case("redact refused: a fact with no value", lambda w: _redact(w, "99"), 2,
         {"holes": [], "message": _nonempty}),
    # history, runs, replay
    Case("history", lambda w: ["history", w.paused()[0], *_runs(w)], 0,
         {"state": "paused", "open": lambda o: o[0]["reply"]["example"] == {"Ok": 1}}),
    Case("history refused: no such run", lambda w: ["history", "run-nope", *_runs(w)], 2, {"message": _nonempty}),
    Case("history refused: kind", lambda w: ["history", "run-nope", "--kind", "Nope", *_runs(w)], 2,
         {"message": lambda m: m.startswith("--kind is one of")}),
    Case("history --source", lambda w: ["history", w.completed(), "--source", "hello", *_runs(w)], 0,
         {"source": PROGRAMS["hello.flow"], "module": "hello"}),
    Case("runs", lambda w: (w.completed(), ["runs", *_runs(w)])[1], 0,
         {"runs": lambda rs: len(rs) == 1}),
    Case("runs refused: limit", lambda w: ["runs", "--limit", "0", *_runs(w)], 2, {"message": _nonempty}),
    Case("replay", lambda w: ["replay", w.completed(), *_runs(w)], 0,
         {"verdict": "Matched", "from": 1, "run": _nonempty}),
    Case("replay incomplete", lambda w: ["replay", w.paused()[0], *_runs(w)], 3, {"verdict": "Incomplete"}),
    Case("replay refused: no such run", lambda w: ["replay", "run-nope", *_runs(w)], 2,
         {"verdict": None, "message": _nonempty}),
    # fmt
    Case("fmt --check", lambda w: ["fmt", "--check", "fmt/ugly.flow"], 1,
         {"files": [{"file": "fmt/ugly.flow", "status": "unformatted", "message": None}]}),
    Case("fmt", lambda w: ["fmt", "fmt/ugly.flow", "hello.flow"], 0,
         {"files": lambda fs: [f["status"] for f in fs] == ["formatted", "unchanged"]}),
    Case("fmt refused: does not parse", lambda w: ["fmt", "fmt"], 2,
         {"files": lambda fs: {f["file"].rsplit("/", 1)[-1]: f["status"] for f in fs}
          == {"broken.flow": "refused", "ugly.flow": "formatted"},
          "diagnostics": _nonempty}),
    Case("fmt stdin", lambda w: ["fmt"], 0, {"output": "pub flow main() -> Int = 1\n"}, stdin=UNFORMATTED),
    Case("fmt stdin refused", lambda w: ["fmt"], 2, {"output": None, "diagnostics": _nonempty}, stdin=BROKEN),
    # doc
    Case("doc", lambda w: ["doc", "docs.flow"], 0,
         {"pages": lambda ps: any(p["module"] == "docs" and "Four." in p["text"] for p in ps), "out": None}),
    Case("doc --out", lambda w: ["doc", "docs.flow", "--out", str(w.home / "site")], 0,
         {"pages": lambda ps: all(Path(p["file"]).is_file() for p in ps) and ps,
          "index": lambda i: Path(i).is_file()}),
    Case("doc refused", lambda w: ["doc", "bad.flow"], 2, {"pages": [], "diagnostics": _nonempty}),
    # a mistake in the arguments is click's usage error, and under --json a document too
    Case("usage refused: a missing option", lambda w: ["redact", "run-x"], 2, {"message": "Missing option '--fact'."}),
    Case("usage refused: no such command", lambda w: ["nope"], 2, {"message": lambda m: "No such command" in m}),
    Case("usage refused: a bad value", lambda w: ["runs", "--limit", "abc"], 2,
         {"message": lambda m: "'abc' is not a valid integer" in m}),
    # the rest
    Case("check", lambda w: ["check", "hello.flow"], 0, {"ok": True}),
    Case("check refused", lambda w: ["check", "bad.flow"], 2, {"ok": False, "diagnostics": _nonempty}),
    Case("tools", lambda w: ["tools", "count.flow"], 0,
         {"programs": lambda ps: [t["tool"] for t in ps[0]["tools"]] == ["count.step"]}),
    Case("tools: does not check", lambda w: ["tools", "bad.flow"], 2, {"diagnostics": _nonempty}),
    Case("test", lambda w: ["test", "hello.flow"], 0, {"passed": 0, "failed": 0}),
    Case("tools import-mcp refused: --out exists",
         lambda w: ["tools", "import-mcp", "--out", "hello.flow", "--", sys.executable, "-c", "pass"], 2,
         {"out": "hello.flow", "message": lambda m: "exists" in m}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_command_prints_one_document(world, case):
    argv = case.argv(world)
    done = world.flow(argv[0], "--json", *argv[1:], stdin=case.stdin)  # before any `--`
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)
    document = json.loads(lines[0])
    assert done.returncode == case.exit, (document, done.stderr)
    assert document["exitCode"] == done.returncode
    assert "message" in document and isinstance(document["diagnostics"], list)
    for name, expected in case.fields.items():
        assert name in document, (name, document)
        if callable(expected):
            assert expected(document[name]), (name, document[name])
        else:
            assert document[name] == expected, (name, document[name])


@pytest.mark.parametrize("case", [c for c in CASES if c.exit != 0 and "refused" in c.name],
                         ids=lambda c: c.name)
def test_a_refusal_has_the_same_exit_code_without_json(world, case):
    done = world.flow(*case.argv(world), stdin=case.stdin)
    assert done.returncode == case.exit, done.stderr
    assert not done.stdout.startswith("{")  # human text, the reason on stderr
    assert done.stderr


def test_every_command_that_has_a_result_takes_json():
    """Every command but the servers (`mcp`, `lsp`, `worker`) and `completion` (a script) has a
    result to print; a group's subcommands each do."""
    import click

    from flowrt.commands import main

    def commands(group, prefix=""):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield prefix + name, command

    for name, command in commands(main):
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert ("--json" in options) == (name not in ("mcp", "lsp", "worker", "completion")), name


def test_flow_run_names_the_run_it_completed_on_stderr(world):
    done = world.flow("run", "hello.flow", "--input", '{"name": "Ann"}', "--runs", str(world.runs))
    assert (done.returncode, done.stdout) == (0, '"hello Ann"\n')
    run_id, = [p.name for p in world.runs.iterdir()]
    assert done.stderr == f"run {run_id} completed\n"
    done = world.flow("run", "err.flow", "--runs", str(world.runs))
    assert done.returncode == 4 and done.stdout == '{"Err":"no"}\n' and "completed" in done.stderr
