"""Whatever text `flow check` is given, only diagnostics come out: never an exception.

Inputs are the example programs mutated (characters and whole lines deleted, duplicated, swapped,
replaced by tokens) and random sequences of Flow tokens.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowc.diagnostics.codes import REGISTRY
from flowc.frontend import check_program
from flowc.parse import parse

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [p for p in sorted((ROOT / "examples").rglob("*.flow")) + sorted((ROOT / "tests" / "cases" / "examples").rglob("*.flow"))
            if p.is_file()]
SOURCES = [p.read_text(encoding="utf-8") for p in EXAMPLES]
TOKENS = [
    "use", "as", "pub", "type", "flow", "let", "guard", "else", "if", "match", "return", "true", "false",
    "_", "x", "xs", "Ok", "Err", "Some", "None", "Int", "Text", "List", "planner.Step", "task.race",
    "(", ")", "[", "]", "{", "}", "<", ">", ",", ":", ".", "..", "=", "=>", "->", "!", "!tool", "?", "|",
    "||", "&&", "==", "!=", "<=", "+", "-", "*", "/", "%", "++", "@tool", "@test", "@fake(a.b)",
    "1", "1_000", "3.14", "5s", "250ms", '"text"', '"a ${x} b"', '"\\q"', '"unterminated', "//c\n",
    "///doc\n", "\n", " ", "\t", "\u00e9", "\x00",
]


def check_text(text: str) -> None:
    files = {"main.flow": text}

    def read(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(2, "No such file or directory", path)

    checked = check_program("main.flow", read)
    for d in checked.diagnostics:
        assert d.code in REGISTRY
        assert d.severity in ("error", "warning")


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        kind = draw(st.sampled_from(["drop-char", "dup-line", "drop-line", "swap", "insert-token"]))
        if kind == "drop-char" and text:
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + text[i + 1:]
        elif kind == "dup-line":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == "drop-line":
            i = draw(st.integers(0, len(lines) - 1))
            del lines[i]
            text = "\n".join(lines)
        elif kind == "swap" and len(lines) > 1:
            i = draw(st.integers(0, len(lines) - 2))
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            text = "\n".join(lines)
        else:
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_give_only_diagnostics(text):
    check_text(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_random_tokens_give_only_diagnostics(text):
    check_text(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_random_text_gives_only_diagnostics(text):
    check_text(text)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SOURCES), st.data())
def test_identity_ignores_layout_and_comments(source, data):
    """Re-spacing a program and adding comments leaves its parsed tree (its identity) unchanged."""
    from flowc import syntax as S

    extra = data.draw(st.sampled_from(["  ", "\n", " // a comment\n", "\n/// doc\n"]))
    respaced = source.replace(",", "," + extra.replace("///", "//"), 1)
    a, b = parse(source, "x.flow"), parse(respaced, "x.flow")
    if a.ok and b.ok:
        assert S.dump(a.module) == S.dump(b.module)
