"""`flow check` through the real `flow` entry point: exit codes, output, colour, JSON, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from flowrt.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "examples"
ESC = "\x1b["


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_bundled_examples_check():
    result = run("check", str(ROOT / "examples"))
    assert result.exit_code == 0, result.output
    assert "ok:" in result.output


@pytest.mark.skipif(not SHARED.exists(), reason="shared examples not beside the repository")
@pytest.mark.parametrize("example", ["support", "payments"])
def test_shared_examples_check_with_no_diagnostics(example):
    result = run("check", "--json", str(SHARED / example))
    data = orjson.loads(result.stdout)
    assert data["diagnostics"] == []
    assert result.exit_code == 0


def test_a_wrong_program_exits_2_and_shows_the_caret(tmp_path):
    path = write(tmp_path, "bad.flow", 'flow f() -> Int = "text"\n')
    result = run("--color", "never", "check", path)
    assert result.exit_code == 2
    assert "error[type-mismatch]" in result.output
    assert '1 | flow f() -> Int = "text"' in result.output
    assert "^^^^^^" in result.output
    assert ESC not in result.output


def test_every_error_in_a_file_is_reported(tmp_path):
    source = "flow a() -> Int = \"x\"\nflow b() -> Text = 1\nflow c() -> Bool = missing\n"
    result = run("check", "--json", write(tmp_path, "many.flow", source))
    codes = [d["code"] for d in orjson.loads(result.stdout)["diagnostics"]]
    assert codes == ["type-mismatch", "type-mismatch", "name-undefined"]


def test_a_parse_error_does_not_hide_other_modules_errors(tmp_path):
    write(tmp_path, "other.flow", "pub flow g() -> Int = \"not an int\"\n")
    root = write(tmp_path, "main.flow", 'use "./other"\nflow f( -> Int = 1\n')
    result = run("check", "--json", root)
    codes = sorted(d["code"] for d in orjson.loads(result.stdout)["diagnostics"])
    assert codes == ["syntax-error", "type-mismatch"]


def test_json_output_is_data_and_never_styled(tmp_path):
    path = write(tmp_path, "bad.flow", "flow f() -> Int = nope\n")
    result = run("--color", "always", "check", "--json", path)
    assert ESC not in result.stdout
    data = orjson.loads(result.stdout)
    [d] = data["diagnostics"]
    assert d["code"] == "name-undefined"
    assert d["location"] == {"file": path, "line": 1, "column": 19, "end_line": 1, "end_column": 23}
    assert data["ok"] is False


def test_color_always_styles_labels_only(tmp_path):
    message_escape = "flow f() -> Int = \"\x1b[31mred\"\n"
    path = write(tmp_path, "c.flow", message_escape)
    result = run("check", "--color", "always", path)
    assert ESC + "1;31m" in result.output  # the label
    assert "\x1b[31mred" in result.output  # the source's own escape kept byte for byte


def test_color_auto_is_plain_when_not_a_terminal(tmp_path):
    path = write(tmp_path, "c.flow", "flow f() -> Int = nope\n")
    result = run("check", path)
    assert ESC not in result.output


def test_checkpoint_places_are_listed_and_marked(tmp_path):
    source = """
pub flow main(n: Int) -> Int = count(n, 0)
flow count(n: Int, acc: Int) -> Int = if n == 0 { acc } else { count(n - 1, acc + n) }
flow apply(fs: List<flow(Int) -> Int>, n: Int) -> Int = if n == 0 { 0 } else { apply(fs, n - 1) }
flow fn_arg(f: flow(Int) -> Int, n: Int) -> Int = if n == 0 { f(0) } else { fn_arg(f, n - 1) }
"""
    result = run("check", "--json", write(tmp_path, "loop.flow", source))
    places = orjson.loads(result.stdout)["checkpoints"]
    shown = [(p["line"], p["calls"].rsplit(".", 1)[-1], p["marked"]) for p in places]
    assert shown == [(2, "count", False), (3, "count", False), (4, "apply", True)]


def test_invalid_utf8_is_a_diagnostic(tmp_path):
    path = write(tmp_path, "bad.flow", b"flow f() -> Int = \xff\n")
    result = run("check", "--json", path)
    assert result.exit_code == 2
    assert [d["code"] for d in orjson.loads(result.stdout)["diagnostics"]] == ["file-not-utf8"]


def test_unreadable_and_missing_files_are_diagnostics(tmp_path):
    result = run("check", "--json", str(tmp_path / "absent.flow"))
    assert result.exit_code == 2
    assert [d["code"] for d in orjson.loads(result.stdout)["diagnostics"]] == ["file-unreadable"]
    if os.geteuid() != 0:  # root reads anything
        path = write(tmp_path, "locked.flow", "flow f() -> Int = 1\n")
        os.chmod(path, 0)
        result = run("check", "--json", path)
        assert result.exit_code == 2


def test_a_ten_megabyte_line(tmp_path):
    path = write(tmp_path, "big.flow", 'pub flow main() -> Text = "' + "a" * 10_000_000 + '"\n')
    result = run("check", path)
    assert result.exit_code == 0


def test_ten_thousand_levels_of_nesting(tmp_path):
    brackets = write(tmp_path, "deep.flow", "pub flow main() -> Int = " + "(" * 10_000 + "1" + ")" * 10_000 + "\n")
    result = run("check", "--json", brackets)
    assert [d["code"] for d in orjson.loads(result.stdout)["diagnostics"]] == ["nesting-too-deep"]
    for text in ("- " * 10_000 + "1", "1 + " * 10_000 + "1", "!" * 10_000 + "(1 == 1)"):
        path = write(tmp_path, "chain.flow", "pub flow main() -> Bool = 1 == " + text + "\n")
        result = run("check", "--json", path)
        assert result.exit_code in (0, 2)
        assert all(d["code"] in ("type-mismatch", "nesting-too-deep", "operator-mismatch")
                   for d in orjson.loads(result.stdout)["diagnostics"])


def test_directory_search_skips_dot_entries_and_symlinks(tmp_path):
    (tmp_path / ".hidden").mkdir()
    write(tmp_path / ".hidden", "bad.flow", "flow f() -> Int = nope\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    write(outside, "bad.flow", "flow f() -> Int = nope\n")
    (tmp_path / "link").symlink_to(outside, target_is_directory=True)
    write(tmp_path, "good.flow", "pub flow main() -> Int = 1\n")
    result = run("check", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "1 program checked" in result.output


def test_the_installed_command_runs():
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "check", str(ROOT / "examples" / "payments")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_an_unterminated_text_is_reported_quickly_and_the_rest_still_checks(tmp_path):
    """A text literal may not span lines; an unclosed one must not send the lexer backtracking."""
    body = 'pub flow main() -> Text = {\n    let a = "abc' + "x" * 50_000 + '\n    a\n}\nflow g() -> Int = "two"\n'
    result = run("check", "--json", write(tmp_path, "open.flow", body))
    codes = [(d["code"], d["location"]["line"]) for d in orjson.loads(result.stdout)["diagnostics"]]
    assert codes == [("text-unterminated", 2), ("type-mismatch", 5)]
