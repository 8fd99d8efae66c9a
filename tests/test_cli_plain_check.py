"""A plain `flow check` runs without click (`flowrt/cli.py`); it must say exactly what the click
command says: the same output on both streams and the same exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowrt.cli import plain_check

ROOT = Path(__file__).resolve().parents[1]

#: The click application alone, under the name click gives `python -m flowrt.cli`.
CLICK_ONLY = "from flowrt.commands import main; main(prog_name='python -m flowrt.cli')"


def flow(args: list[str], *, click_only: bool, cwd: Path) -> tuple[int, str, str]:
    command = [sys.executable, "-c", CLICK_ONLY] if click_only else [sys.executable, "-m", "flowrt.cli"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    done = subprocess.run(command + args, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("programs")
    (folder / "good.flow").write_text(
        "pub flow count(xs: List<Int>, n: Int) -> Int =\n"
        "    match xs {\n        [] => n,\n        [_, ..rest] => count(rest, n + 1),\n    }\n", encoding="utf-8")
    (folder / "bad.flow").write_text('flow f() -> Int = "text"\nflow g() -> Int = { let x = 1\n 2 }\n',
                                     encoding="utf-8")
    (folder / "warn.flow").write_text("pub flow f() -> Int = { let unused = 1\n 2 }\n", encoding="utf-8")
    (folder / "both").mkdir()
    (folder / "both" / "a.flow").write_text('use "./b"\npub flow main() -> Int = b.one()\n', encoding="utf-8")
    (folder / "both" / "b.flow").write_text("pub flow one() -> Int = 1\n", encoding="utf-8")
    return folder


CASES = [
    ["check", "good.flow"],
    ["check", "bad.flow"],
    ["check", "warn.flow"],
    ["check", "good.flow", "bad.flow", "warn.flow"],
    ["check", "both"],
    ["check", "--json", "good.flow", "bad.flow"],
    ["check", "good.flow", "--json"],
    ["check", "--color", "always", "bad.flow"],
    ["check", "--color=never", "bad.flow"],
    ["--color", "always", "check", "bad.flow"],
    ["--color=always", "check", "--color", "never", "bad.flow"],
    ["check", "missing.flow"],
    [],
    ["check"],
    ["check", "--help"],
    ["check", "--color", "purple", "good.flow"],
    ["check", "--json", "--json", "good.flow"],
    ["--color", "never", "--color", "always", "check", "bad.flow"],
    ["check", "--", "good.flow"],
    ["chek", "good.flow"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a) or "(none)")
def test_the_entry_point_says_what_click_says(programs, args):
    assert flow(args, click_only=False, cwd=programs) == flow(args, click_only=True, cwd=programs)


def test_only_plain_arguments_are_read_without_click():
    assert plain_check(["check", "a.flow"]) == (["a.flow"], False, "auto")
    assert plain_check(["check", "a.flow", "--json", "dir"]) == (["a.flow", "dir"], True, "auto")
    assert plain_check(["--color", "never", "check", "a.flow"]) == (["a.flow"], False, "never")
    assert plain_check(["--color=never", "check", "--color", "always", "a"]) == (["a"], False, "always")
    for args in (["check"], [], ["run", "a.flow"], ["check", "-h"], ["check", "--", "a"], ["check", "-"],
                 ["check", ""], ["check", "--json", "--json", "a"], ["check", "--color", "red", "a"],
                 ["check", "--color", "auto", "--color", "never", "a"], ["--version"], ["--color", "check", "a"]):
        assert plain_check(args) is None, args
