"""Whatever text `flow check` is given, only diagnostics come out: never an exception.

Inputs (tests/fuzzgen.py) are modules drawn from the grammar, the example programs mutated
(characters and whole lines deleted, duplicated, swapped, replaced by tokens), random sequences of
Flow tokens, and the pathological shapes of tests/shapes.py at random sizes, alone and inside a
mutated example.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowc.diagnostics.codes import REGISTRY
from flowc.frontend import check_program
from flowc.parse import parse
from tests.fuzzgen import SOURCES, grammar_programs, mutated, tokens
from tests.shapes import SHAPES


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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_give_only_diagnostics(text):
    check_text(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens())
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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(grammar_programs())
def test_programs_from_the_grammar_give_only_diagnostics(text):
    check_text(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SHAPES)), st.integers(1, 3000), st.sampled_from(SOURCES), st.booleans())
def test_pathological_shapes_give_only_diagnostics(shape, size, example, beside):
    """Each shape at any size up to well past the nesting bounds, alone or beside a real program
    (the shape's `main` may then clash with the program's: a diagnostic too)."""
    check_text(SHAPES[shape](size) + ("\n" + example if beside else ""))
