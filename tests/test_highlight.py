"""The Pygments lexer reads every example and test program without an error token, and is found
through its entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from pygments.lexers import get_lexer_by_name
from pygments.token import Error

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = [p for p in sorted((ROOT / "examples").rglob("*.flow")) + sorted((ROOT / "tests" / "programs").rglob("*.flow"))
            + sorted((ROOT / "flowc" / "std" / "v1").glob("*.flow"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_error_tokens(path):
    lexer = get_lexer_by_name("flow")
    bad = [value for token, value in lexer.get_tokens(path.read_text()) if token in Error]
    assert not bad, bad[:5]


def test_interpolation_and_names_are_told_apart():
    lexer = get_lexer_by_name("flow")
    tokens = list(lexer.get_tokens('pub flow f(x: Int) -> Text !tool = "a ${planner.Step} b"\n'))
    kinds = {value: str(token) for token, value in tokens}
    assert kinds["flow"] == "Token.Keyword" and kinds["!tool"] == "Token.Keyword.Pseudo"
    assert kinds["${"] == "Token.Literal.String.Interpol" and kinds["Step"] == "Token.Name.Class"
