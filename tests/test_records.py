"""`flowc.records.record` makes classes that behave as the dataclasses they replaced, and
`syntax.dump` writes the same text by its fast path and by its explicit-stack path."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

from flowc import syntax as S
from flowc.parse import parse
from flowc.records import maker, record


def _declare(decorate, mutable_decorate):
    class Span:
        line: int
        column: int

        def __repr__(self) -> str:
            return f"{self.line}:{self.column}"

    class Node:
        """A node with defaults."""

        name: str
        args: tuple = ()
        span: Span | None = None

        def first(self):
            return self.args[0] if self.args else None

    class One:
        id: int

    class Empty:
        pass

    class Checked:
        code: str
        notes: tuple = ()

        def __post_init__(self) -> None:
            if not isinstance(self.notes, tuple):
                object.__setattr__(self, "notes", tuple(self.notes))

    class Mutable:
        kind: str
        items: list = field(default_factory=list)
        used: bool = False

    classes = [decorate(c) for c in (Span, Node, One, Empty, Checked)] + [mutable_decorate(Mutable)]
    for c in classes:
        c.__qualname__ = c.__name__
    return classes


RECORDS = _declare(record, record(frozen=False))
DATACLASSES = _declare(dataclass(frozen=True, slots=True), dataclass(slots=True))
# Pickle finds classes by module and name.
for _made in RECORDS:
    globals()[_made.__name__] = _made


def _samples(classes):
    span, node, one, empty, checked, mutable = classes
    return [span(1, 2), node("x"), node("x", (1, "a"), span(3, 4)), one(7), empty(), checked("c", ["n"]),
            mutable("k"), mutable("k", [1], True)]


def test_signatures_fields_and_match_args_are_the_dataclasses():
    for made, reference in zip(RECORDS, DATACLASSES):
        assert inspect.signature(made) == inspect.signature(reference)
        assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(reference)]
        assert made.__match_args__ == reference.__match_args__
        assert made.__slots__ == reference.__slots__
        assert dataclasses.is_dataclass(made)


def test_equality_hash_and_repr_are_the_dataclasses():
    for made, reference in zip(_samples(RECORDS), _samples(DATACLASSES)):
        assert repr(made) == repr(reference)
        assert made == copy.copy(made) and not made != copy.copy(made)
        assert made != "something else"
        if type(reference).__hash__ is None:
            assert type(made).__hash__ is None
        else:
            assert hash(made) == hash(reference)
    span, node = RECORDS[0], RECORDS[1]
    assert node("x", (1,)) != node("x", (2,))
    assert node("x", span=span(1, 1)) == node("x", (), span(1, 1))


def test_frozen_records_refuse_assignment_like_dataclasses():
    node = RECORDS[1]("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.name = "y"
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.other = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        del node.name
    mutable = RECORDS[5]("k")
    mutable.used = True
    assert mutable.used


def test_a_maker_makes_what_the_class_makes():
    span, node, one, empty, checked, mutable = RECORDS
    for cls, args in ((span, (1, 2)), (node, ("x",)), (node, ("x", (1,), span(3, 4))), (one, (7,)), (empty, ())):
        made = maker(cls)(*args)
        assert type(made) is cls and made == cls(*args) and hash(made) == hash(cls(*args))
        assert pickle.loads(pickle.dumps(made)) == made
    assert maker(node)(name="x", span=span(1, 1)) == node("x", (), span(1, 1))
    made = maker(node)("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "y"
    with pytest.raises(TypeError):
        maker(checked)  # its __post_init__ would not run
    with pytest.raises(TypeError):
        maker(mutable)  # nor its default factory


def test_defaults_factories_post_init_and_methods():
    span, node, one, empty, checked, mutable = RECORDS
    assert node("x").args == () and node("x").span is None
    assert node("x", (5,)).first() == 5
    assert checked("c", ["a", "b"]).notes == ("a", "b")
    first, second = mutable("a"), mutable("b")
    first.items.append(1)
    assert second.items == []  # a fresh list for each record
    assert repr(span(1, 2)) == "1:2"  # a method the class defines is kept
    assert node.__doc__ == "A node with defaults."


def test_replace_asdict_pickle_and_copy():
    span, node = RECORDS[0], RECORDS[1]
    value = node("x", (1,), span(2, 3))
    assert dataclasses.replace(value, name="y") == node("y", (1,), span(2, 3))
    assert dataclasses.asdict(value) == {"name": "x", "args": (1,), "span": {"line": 2, "column": 3}}
    for sample in _samples(RECORDS):
        assert pickle.loads(pickle.dumps(sample)) == sample
        assert copy.deepcopy(sample) == sample


def test_a_non_default_field_after_a_default_is_refused():
    with pytest.raises(TypeError):
        @record
        class Wrong:
            a: int = 1
            b: int


# ---- syntax.dump --------------------------------------------------------------------------------


def _deep_chain(length: int) -> S.Expr:
    span = S.Span(1, 1, 1, 2)
    expr: S.Expr = S.Var("x", span)
    for i in range(length):
        expr = S.Binary("+", expr, S.Lit("int", str(i), span), span)
    return expr


SOURCE = '''
/// A record.
pub type Box<T: Ord> { pub label: Text, items: List<T> }

pub type Shape { Circle { radius: Int }, Square(Int), Empty }

@tool pub flow fetch(url: Text) -> Result<Text, Text>

pub flow area(s: Shape) -> Int =
    match s {
        Circle { radius } => 6 * radius * radius,
        Square(side) if side > 0 => side * side,
        Square(_) | Empty => 0,
    }

pub flow describe(b: Box<Int>, quoted: Text) -> Text = {
    let total = list.length(b.items)
    guard total >= 0 else { return "negative \\"${quoted}\\" \\\\ " }
    if total > 1 { "many ${b.label}" } else { "one" }
}
'''


def test_dump_takes_the_same_path_text_either_way():
    tree = parse(SOURCE, "main.flow").module
    assert S.dump(tree) == S._dump_deep(tree)
    for value in (None, True, False, 7, 'a"b\\c', (), (1, "x", None, (True,)), S.Attr("fake", ("a", "b"), S.NO_SPAN)):
        assert S.dump(value) == S._dump_deep(value)


def test_dump_of_a_tree_deeper_than_its_recursion_is_the_same():
    chain = _deep_chain(S._RECURSE * 4)
    assert S.dump(chain) == S._dump_deep(chain)
    assert S.dump((chain, [chain][0])) == S._dump_deep((chain, chain))


def test_dump_leaves_out_spans_comments_and_docs():
    with_layout = parse("/// doc\npub flow f() -> Int =   1 // note\n", "a.flow").module
    without = parse("pub flow f() -> Int = 1\n", "b.flow").module
    assert S.dump(with_layout) == S.dump(without)


# ---- the interpreters records run on (they use two private names of `dataclasses`) ------------


def test_an_interpreter_outside_the_supported_range_is_refused_by_name():
    from flowc.records import SUPPORTED_PYTHON, UnsupportedInterpreter, check_interpreter

    first, last = SUPPORTED_PYTHON
    check_interpreter((*first, 0), "cpython")
    check_interpreter((*last, 9), "cpython")
    for version, implementation, named in (((last[0], last[1] + 1, 0), "cpython", f"cpython {last[0]}.{last[1] + 1}"),
                                           ((first[0], first[1] - 1, 0), "cpython", f"{first[0]}.{first[1] - 1}"),
                                           ((*first, 0), "pypy", "pypy")):
        with pytest.raises(UnsupportedInterpreter, match=named):
            check_interpreter(version, implementation)


def test_an_interpreter_without_the_private_names_is_refused():
    from types import SimpleNamespace

    from flowc.records import UnsupportedInterpreter, check_interpreter

    with pytest.raises(UnsupportedInterpreter, match=r"dataclasses\._FIELD\b"):
        check_interpreter(module=SimpleNamespace(_HAS_DEFAULT_FACTORY=object()))
    with pytest.raises(UnsupportedInterpreter, match="_FIELD, dataclasses._HAS_DEFAULT_FACTORY"):
        check_interpreter(module=SimpleNamespace())


def test_importing_records_fails_loudly_where_dataclasses_lacks_them():
    """The check runs at import: simulate an interpreter whose `dataclasses` moved `_FIELD`."""
    import subprocess
    import sys

    code = "import dataclasses\ndel dataclasses._FIELD\nimport flowc.records\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "UnsupportedInterpreter: flowc needs dataclasses._FIELD" in done.stderr
    assert f"cpython {sys.version_info[0]}.{sys.version_info[1]}" in done.stderr
