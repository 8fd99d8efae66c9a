"""Inputs for fuzzing `flow check`: programs drawn from the grammar, example programs mutated, and
random sequences of Flow tokens (hypothesis strategies).

tests/test_fuzz_check.py checks them in-process; scripts/reliability/check_fuzz.py runs them
through `flow check` with a time and memory guard and reports the worst per input size.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "examples"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/examples")


def _example_files() -> list[Path]:
    folders = [ROOT / "examples", ROOT / "tests" / "cases" / "examples", SHARED]
    return [p for folder in folders if folder.is_dir() for p in sorted(folder.rglob("*.flow")) if p.is_file()]


EXAMPLES = _example_files()
SOURCES = [p.read_text(encoding="utf-8") for p in EXAMPLES]

TOKENS = [
    "use", "as", "pub", "type", "flow", "let", "guard", "else", "if", "match", "return", "true", "false",
    "_", "x", "xs", "Ok", "Err", "Some", "None", "Int", "Text", "List", "planner.Step", "task.race",
    "(", ")", "[", "]", "{", "}", "<", ">", ",", ":", ".", "..", "=", "=>", "->", "!", "!tool", "?", "|",
    "||", "&&", "==", "!=", "<=", "+", "-", "*", "/", "%", "++", "@tool", "@test", "@fake(a.b)",
    "1", "1_000", "3.14", "5s", "250ms", '"text"', '"a ${x} b"', '"\\q"', '"unterminated', "//c\n",
    "///doc\n", "\n", " ", "\t", "\u00e9", "\x00",
]


@st.composite
def mutated(draw) -> str:
    """An example program with one to four mutations: a character dropped, a line duplicated,
    dropped or swapped with the next, a token inserted."""
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


def tokens() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join)


#: Terminals drawn from small pools, so that names meet (a program from the grammar then refers to
#: its own declarations and the prelude's types often enough to get past name resolution).
_NAMES = ["x", "y", "xs", "f", "main", "n", "_"]
_UPPERS = ["Int", "Text", "Bool", "List", "Option", "Result", "Some", "None", "Ok", "Err", "T", "R", "E"]


@lru_cache(maxsize=1)
def _grammar_strategy() -> st.SearchStrategy[str]:
    import lark
    from hypothesis.extra.lark import from_lark

    from flowc.parse import GRAMMAR_PATH

    grammar = lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                        start="module")
    explicit = {
        "_NL_LPAR": st.just("\n("),
        "NAME": st.sampled_from(_NAMES).filter(lambda name: name != "_"),
        "UPPER": st.sampled_from(_UPPERS),
        "QUPPER": st.sampled_from(["task.Race", "shop.Error"]),
        "INT": st.sampled_from(["0", "1", "42", "1_000"]),
        "DECIMAL": st.sampled_from(["0.5", "3.14"]),
        "DURATION": st.sampled_from(["5s", "250ms"]),
        "TEXT": st.sampled_from(['"a"', '""', '"x = ${x}"']),
    }
    # Every token is followed by a space: the grammar ignores whitespace, so lark's strategy may
    # join a keyword and a name into one name; a space keeps the tokens drawn the tokens read.
    for terminal in grammar.terminals:
        if terminal.name not in explicit and terminal.pattern.type == "str":
            explicit[terminal.name] = st.just(terminal.pattern.value)
    explicit = {name: value.map(lambda text: text + " ") for name, value in explicit.items()}
    explicit["COMMENT"] = st.sampled_from(["// c\n", "/// doc\n"])
    return from_lark(grammar, start="module", explicit=explicit)


def grammar_programs() -> st.SearchStrategy[str]:
    """Modules drawn from Flow's grammar (flowc/grammar/flow.lark)."""
    return st.deferred(lambda: _grammar_strategy())
