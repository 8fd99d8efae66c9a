"""`flow fmt`: over every program of the test corpus, formatting keeps the program identity and
every comment, and formatting twice changes nothing; the CLI's files, directories, stdin, --check
and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flowc import syntax as S
from flowc.fmt import format_source
from flowc.parse import parse
from tests.casefiles import CASES, all_cases, load_case

ROOT = Path(__file__).resolve().parents[1]


def corpus() -> list[tuple[str, str]]:
    out = []
    for path in sorted(ROOT.glob("examples/*/*.flow")) + sorted(ROOT.glob("flowc/std/v1/*.flow")) \
            + sorted(ROOT.glob("tests/programs/**/*.flow")):
        if path.is_file():
            out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in all_cases():
        for name, text in load_case(path).files.items():
            out.append((f"{path.relative_to(CASES)}:{name}", text))
    return [(name, text) for name, text in out if parse(text, name).ok]


CORPUS = corpus()


@pytest.mark.parametrize("name,text", CORPUS, ids=[c[0] for c in CORPUS])
def test_formatting_keeps_identity_and_comments_and_is_idempotent(name, text):
    first = format_source(text, name).text
    assert first is not None
    before, after = parse(text, name), parse(first, name)
    assert after.ok, after.diagnostics
    assert S.dump(before.module) == S.dump(after.module)
    assert [c.text for c in before.module.comments] == [c.text for c in after.module.comments]
    assert format_source(first, name).text == first


def test_the_corpus_is_large():
    assert len(CORPUS) > 200


def flow(*args: str, stdin: str | None = None, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], input=stdin, cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=60)


def test_stdin_to_stdout():
    done = flow("fmt", stdin="pub flow   f( x :Int )->Int=x+1\n")
    assert done.returncode == 0
    assert done.stdout == "pub flow f(x: Int) -> Int = x + 1\n"


def test_check_names_files_and_rewriting_fixes_them(tmp_path):
    (tmp_path / "a.flow").write_text("pub flow   f() -> Int = 1\n")
    (tmp_path / "b.flow").write_text("pub flow g() -> Int = 2\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.flow").write_text("pub flow   h() -> Int = 3\n")
    done = flow("fmt", "--check", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout.strip() == str(tmp_path / "a.flow")
    assert (tmp_path / "a.flow").read_text() == "pub flow   f() -> Int = 1\n"
    assert flow("fmt", str(tmp_path)).returncode == 0
    assert (tmp_path / "a.flow").read_text() == "pub flow f() -> Int = 1\n"
    assert flow("fmt", "--check", str(tmp_path)).returncode == 0


def test_a_file_that_does_not_parse_exits_2_and_the_others_are_still_formatted(tmp_path):
    (tmp_path / "bad.flow").write_text("flow f( -> Int = 1\n")
    (tmp_path / "good.flow").write_text("pub flow   g() -> Int = 2\n")
    done = flow("fmt", str(tmp_path))
    assert done.returncode == 2
    assert (tmp_path / "good.flow").read_text() == "pub flow g() -> Int = 2\n"
