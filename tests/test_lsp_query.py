"""flowc.query, what `flow lsp` answers from: over the examples and std, every place either names
nothing or a symbol whose reference holds the place and whose declaration is in the program; and
completion takes any text of a line without failing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowc
from flowc.files import read_text
from flowc.query import Index, source_path

ROOT = Path(__file__).resolve().parent.parent
ROOTS = [ROOT / "examples" / "support" / "main.flow", ROOT / "examples" / "research" / "main.flow",
         ROOT / "examples" / "shipping" / "main.flow", ROOT / "examples" / "pipeline" / "main.flow"]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _index(root: Path) -> Index:
    checked = flowc.check_program(str(root), read_text)
    assert checked.ok, [d.message for d in checked.diagnostics]
    return Index(checked)


INDEXES = {root: _index(root) for root in ROOTS}


@pytest.mark.parametrize("root", ROOTS, ids=[str(r.relative_to(ROOT)) for r in ROOTS])
def test_every_identifier_of_every_module_is_understood(root: Path):
    index = INDEXES[root]
    named = 0
    for module in index.checked.program.modules:
        lines = module.source.splitlines()
        for number, text in enumerate(lines, start=1):
            if text.lstrip().startswith("//"):
                continue
            for match in _IDENTIFIER.finditer(text):
                column = match.start() + 1
                symbol = index.at(module.file, number, column)
                if symbol is None:
                    continue
                named += 1
                span = symbol.span
                assert (span.line, span.column) <= (number, column) <= (span.end_line, span.end_column)
                assert symbol.detail
                if symbol.definition is not None:
                    files = {m.file for m in index.checked.program.modules}
                    assert symbol.definition.file in files, symbol
                    assert Path(source_path(symbol.definition.file)).is_file()
    assert named > 50


def test_a_use_of_std_is_defined_in_the_shipped_file():
    index = INDEXES[ROOTS[0]]
    main = next(m for m in index.checked.program.modules if m.identity == "main")
    line = next(i for i, text in enumerate(main.source.splitlines(), start=1) if "task.race(" in text)
    column = main.source.splitlines()[line - 1].index("race") + 1
    symbol = index.at(main.file, line, column)
    assert symbol.kind == "function" and symbol.detail.startswith("flow task.race<")
    assert symbol.definition.file == "std@v1/task.flow"
    shipped = Path(source_path(symbol.definition.file))
    assert shipped.parent == Path(flowc.__file__).parent / "std" / "v1"
    assert "race" in shipped.read_text().splitlines()[symbol.definition.line - 1]


@settings(max_examples=200, deadline=None)
@given(line=st.integers(min_value=-3, max_value=200), column=st.integers(min_value=-3, max_value=200),
       text=st.text(max_size=60))
def test_completion_and_lookup_take_any_place_and_text(line: int, column: int, text: str):
    index = INDEXES[ROOTS[0]]
    main = next(m for m in index.checked.program.modules if m.identity == "main")
    found = index.completions(main.file, line, column, text)
    assert all(item.label for item in found.items)
    index.at(main.file, line, column)
    assert index.at("not-a-module.flow", line, column) is None


SCOPED = '''pub type Pair { left: Int, right: Text }

pub flow main(start: Int) -> Int = {
    let pair = Pair { left: start, right: "r" }
    let total = match Some(start) {
        Some(first) => first + pair.left,
        None => start,
    }
    let after = total
    after
}
'''


def _scoped_index(tmp_path: Path) -> tuple[Index, str]:
    path = tmp_path / "main.flow"
    path.write_text(SCOPED)
    checked = flowc.check_program(str(path), read_text)
    assert checked.ok, [d.message for d in checked.diagnostics]
    return Index(checked), str(path)


def _labels(index: Index, file: str, needle: str, offset: int = 0, kinds=("local",)) -> set[str]:
    text = SCOPED
    at = text.index(needle) + offset
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    line_text = text.splitlines()[line - 1]
    return {c.label for c in index.completions(file, line, column, line_text).items if c.kind in kinds}


def test_completion_offers_the_names_in_scope_only(tmp_path: Path):
    index, file = _scoped_index(tmp_path)
    assert _labels(index, file, "first + pair", 0) == {"start", "pair", "first"}
    assert _labels(index, file, "None => start", 8) == {"start", "pair"}
    assert _labels(index, file, "after\n}", 0) == {"start", "pair", "total", "after"}


def test_completion_of_fields_follows_the_local_type(tmp_path: Path):
    index, file = _scoped_index(tmp_path)
    assert _labels(index, file, "pair.left", 5, kinds=("field",)) == {"left", "right"}


def test_the_caret_right_after_a_name_names_it(tmp_path: Path):
    index, file = _scoped_index(tmp_path)
    text = SCOPED
    at = text.index("first + pair")
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    on = index.at(file, line, column)
    assert on.kind == "local" and on.name == "first"
    right_after = index.at(file, line, column + len("first"))
    assert right_after == on  # the space after `first` belongs to no name
    plus = index.at(file, line, column + len("first "))
    assert plus is None  # the operator is no name, though `first` ends a character before it
    dot = index.at(file, line, column + len("first + pair"))
    assert dot.kind == "field" and dot.name == "left"  # the dot is part of the field read
    comma = index.at(file, line, column + len("first + pair.left"))
    assert comma == dot  # the comma is no name: the read that ends before it is meant
