"""The runtime representation of Flow values (flowdata/values.py).

Each test's docstring states the property it checks.
"""

import json
import os
import random
import subprocess
import sys
import decimal as pydecimal
import gc

from flowdata.flowdecimal import FlowDecimal as Decimal  # the Python value of a Flow Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from flowdata import values as V
from flowdata.values import (
    Duration, FlowDict, FlowSet, Instant, MISSING, NONE, Token, decimal_text, duration_text,
    enum_type, instant_text, order_key, parse_decimal, parse_duration, parse_instant,
    record_text, record_type, some, value_json,
)

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# Duration, Instant, Token


def test_duration_value_semantics():
    """Durations compare and hash by nanoseconds, are immutable, and never equal an Instant."""
    a, b = Duration(5), Duration(5)
    assert a == b and hash(a) == hash(b) and not (a != b)
    assert Duration(-1) < Duration(0) <= Duration(0) < Duration(1) and Duration(2) > Duration(1) >= Duration(1)
    assert Duration(5) != Instant(5)
    assert sorted([Duration(3), Duration(-2), Duration(0)]) == [Duration(-2), Duration(0), Duration(3)]
    with pytest.raises(AttributeError):
        a.nanos = 6
    with pytest.raises(TypeError):
        Duration(1.5)
    with pytest.raises(TypeError):
        Duration(True)
    assert repr(Duration(250)) == "Duration(250)"
    assert not hasattr(a, "__dict__")


def test_instant_value_semantics():
    """Instants compare by nanoseconds, are immutable, and know the years 0001 to 9999."""
    assert Instant(0) == Instant(0) and Instant(-1) < Instant(0)
    assert hash(Instant(7)) == hash(Instant(7))
    with pytest.raises(AttributeError):
        Instant(0).nanos = 1
    assert Instant(V.INSTANT_MIN_NANOS).in_range() and Instant(V.INSTANT_MAX_NANOS).in_range()
    assert not Instant(V.INSTANT_MAX_NANOS + 1).in_range()
    assert not Instant(V.INSTANT_MIN_NANOS - 1).in_range()


def test_token():
    """Host tokens are equal when identity and token are; they are immutable."""
    assert Token("m.Page", "a") == Token("m.Page", "a")
    assert Token("m.Page", "a") != Token("m.Page", "b")
    assert hash(Token("m.Page", "a")) == hash(Token("m.Page", "a"))
    with pytest.raises(AttributeError):
        Token("m.Page", "a").token = "b"


@pytest.mark.parametrize("nanos, text", [
    (0, "PT0S"), (250_000_000, "PT0.25S"), (3_600_000_000_000, "PT3600S"), (-5_000_000_000, "-PT5S"),
    (1, "PT0.000000001S"), (-1, "-PT0.000000001S"), (1_500_000_000, "PT1.5S"),
    (86_400 * 10**9, "PT86400S"), (123_456_789_012, "PT123.456789012S"),
])
def test_duration_text(nanos, text):
    """Durations are written as PT<seconds>S, fraction only when non-zero, no trailing zeros."""
    assert duration_text(Duration(nanos)) == text
    assert parse_duration(text) == Duration(nanos)


@pytest.mark.parametrize("text, nanos", [
    ("PT1H30M", 5_400 * 10**9), ("P1D", 86_400 * 10**9), ("P1DT1H1M1.5S", 90_061_500_000_000),
    ("+PT5S", 5 * 10**9), ("PT0.250S", 250_000_000), ("-P1D", -86_400 * 10**9), ("PT90M", 5_400 * 10**9),
])
def test_duration_parse_lenient(text, nanos):
    """Other ISO 8601 day/time durations are accepted (a day is 24 hours)."""
    assert parse_duration(text) == Duration(nanos)


@pytest.mark.parametrize("text", [
    "", "P", "PT", "5s", "PT5", "P1Y", "P1M", "P1W", "PT1.5H", "PT0.0000000001S", "PT-5S", "pt5s",
    "P1DT", "PT5S ", " PT5S", "PT1M1H", "PT٣S", "PT1,5S", "--PT5S", "PT.5S", "PT5.S",
])
def test_duration_parse_refuses(text):
    """Texts that are not ISO 8601 day/time durations are refused."""
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("nanos, text", [
    (0, "1970-01-01T00:00:00Z"), (500_000_000, "1970-01-01T00:00:00.5Z"),
    (1_767_225_600 * 10**9, "2026-01-01T00:00:00Z"), (-1, "1969-12-31T23:59:59.999999999Z"),
    (V.INSTANT_MIN_NANOS, "0001-01-01T00:00:00Z"), (V.INSTANT_MAX_NANOS, "9999-12-31T23:59:59.999999999Z"),
    (951_782_400 * 10**9 + 123_000, "2000-02-29T00:00:00.000123Z"),
])
def test_instant_text(nanos, text):
    """Instants are RFC 3339 in UTC, fraction only when non-zero, no trailing zeros."""
    assert instant_text(Instant(nanos)) == text
    assert parse_instant(text) == Instant(nanos)


@pytest.mark.parametrize("text, canonical", [
    ("2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00Z"),
    ("2025-12-31T19:30:00-04:30", "2026-01-01T00:00:00Z"),
    ("2026-01-01t00:00:00.500z", "2026-01-01T00:00:00.5Z"),
])
def test_instant_parse_offsets(text, canonical):
    """Offsets are converted to UTC; lower-case t and z are accepted."""
    assert instant_text(parse_instant(text)) == canonical


@pytest.mark.parametrize("text", [
    "", "2026-01-01", "2026-01-01T00:00:00", "2026-01-01 00:00:00Z", "2026-13-01T00:00:00Z",
    "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z",
    "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567891Z", "2026-01-01T00:00:00+24:00",
    "0000-01-01T00:00:00Z", "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01",
    "2026-01-01T00:00:00+0100", "２026-01-01T00:00:00Z", "2026-01-01T00:00:00ZZ",
])
def test_instant_parse_refuses(text):
    """Malformed, impossible and out-of-range date-times are refused."""
    with pytest.raises(ValueError):
        parse_instant(text)


@pytest.mark.parametrize("d, text", [
    ("1.5", "1.5"), ("1.50", "1.5"), ("100", "100"), ("1E+2", "100"), ("-0.001", "-0.001"),
    ("-0", "0"), ("-0.000", "0"), ("0E+10", "0"), ("123.4500", "123.45"), ("1E+100", "1E+100"),
    ("1E+40", "1" + "0" * 40), ("1E+41", "1E+41"), ("15E+40", "15" + "0" * 40),
    ("1E-40", "0." + "0" * 39 + "1"), ("1E-41", "1E-41"), ("1.5E-41", "1.5E-41"),
    ("-12.5E-50", "-1.25E-49"), ("0.1", "0.1"), ("12345678901234567890.123456789", "12345678901234567890.123456789"),
    ("1E+999999999999999999", "1E+999999999999999999"),
])
def test_decimal_text(d, text):
    """Decimal text: no exponent, no trailing zeros, no -0; scientific beyond 40 padding zeros."""
    assert decimal_text(Decimal(d)) == text
    assert parse_decimal(text) == Decimal(d)


@pytest.mark.parametrize("text", ["", "abc", "NaN", "Infinity", "-inf", "1_000", " 1", "1 ", "1e", ".", "--1",
                                  "1e99999999999999999999", "٣", "0x10"])
def test_parse_decimal_refuses(text):
    """Only finite decimal numbers in ASCII without spaces or underscores are accepted."""
    with pytest.raises(ValueError):
        parse_decimal(text)


@given(st.decimals(allow_nan=False, allow_infinity=False).map(Decimal))
def test_decimal_text_round_trips(d):
    """Every finite Decimal's canonical text parses back to an equal Decimal."""
    t = decimal_text(d)
    assert parse_decimal(t) == d
    assert decimal_text(parse_decimal(t)) == t


# ---------------------------------------------------------------------------------------------
# FlowSet and FlowDict


def test_flowset_basics():
    """A FlowSet holds unique elements in order_key order and never changes."""
    s = FlowSet.from_iterable([3, 1, 2, 3, 1])
    assert list(s) == [1, 2, 3] and len(s) == 3
    assert 2 in s and 5 not in s and "x" not in s
    assert list(s.with_(0)) == [0, 1, 2, 3] and list(s) == [1, 2, 3]
    assert s.with_(2) is s
    assert list(s.without(2)) == [1, 3] and s.without(9) is s
    t = FlowSet([2, 3, 4])
    assert list(s.union(t)) == [1, 2, 3, 4]
    assert list(s.intersection(t)) == [2, 3]
    assert list(s.difference(t)) == [1]
    assert FlowSet([1, 2]).issubset(s) and not t.issubset(s)
    assert s == FlowSet([1, 2, 3]) and hash(s) == hash(FlowSet([3, 2, 1]))
    assert s != t and V.EMPTY_SET == FlowSet() and not V.EMPTY_SET
    assert s.to_tuple() == (1, 2, 3)
    assert repr(FlowSet(["b", "a"])) == "FlowSet(['a', 'b'])"


def test_flowset_decimal_equality():
    """Decimals equal by value are one element (1.5 == 1.50)."""
    s = FlowSet([Decimal("1.50"), Decimal("1.5"), Decimal("-0"), Decimal("0")])
    assert len(s) == 2
    assert Decimal("1.500") in s


def test_flowdict_basics():
    """A FlowDict maps unique keys in order_key order; later pairs win; get gives MISSING."""
    d = FlowDict.from_pairs([("b", 1), ("a", 2), ("b", 3)])
    assert d.keys() == ("a", "b") and d.values() == (2, 3) and d.items() == (("a", 2), ("b", 3))
    assert d.get("b") == 3 and d.get("z") is MISSING and d.get("z", 0) == 0 and d.get(5) is MISSING
    assert "a" in d and "z" not in d and len(d) == 2 and list(d) == ["a", "b"]
    d2 = d.set("c", 9).set("a", 0)
    assert d2.items() == (("a", 0), ("b", 3), ("c", 9)) and d.items() == (("a", 2), ("b", 3))
    assert d2.remove("b").keys() == ("a", "c") and d.remove("zz") is d
    assert d == FlowDict([("a", 2), ("b", 3)]) and hash(d) == hash(FlowDict([("b", 3), ("a", 2)]))
    assert d != d2 and not V.EMPTY_DICT and bool(d)
    assert repr(MISSING) == "MISSING" and not MISSING


def test_flowdict_int_keys_numeric_order():
    """Int keys are ordered numerically, not by text."""
    d = FlowDict([(10, "a"), (9, "b"), (-1, "c"), (100, "d")])
    assert d.keys() == (-1, 9, 10, 100)


@given(st.lists(st.one_of(st.text(max_size=4), st.just("é"), st.just("😀")), max_size=12), st.randoms())
def test_flowset_order_is_independent_of_insertion_order(xs, rnd):
    """Building a set from the same elements in any order gives the same iteration order."""
    shuffled = list(xs)
    rnd.shuffle(shuffled)
    assert list(FlowSet(xs)) == list(FlowSet(shuffled)) == sorted(set(xs))


@given(st.lists(st.tuples(st.integers(-5, 5), st.integers()), max_size=12), st.randoms())
def test_flowdict_from_pairs_later_wins(pairs, rnd):
    """from_pairs equals inserting the pairs one by one; the last value for a key wins."""
    d = FlowDict.from_pairs(pairs)
    expected = {}
    for k, v in pairs:
        expected[k] = v
    assert d.items() == tuple(sorted(expected.items()))
    e = V.EMPTY_DICT
    for k, v in pairs:
        e = e.set(k, v)
    assert e == d


# ---------------------------------------------------------------------------------------------
# Records and enums


def test_record_type():
    """A record is the plain tuple (tag, *fields), fields in declaration order."""
    Point = record_type("geo.Point", ("x", "y"))
    assert record_type("geo.Point", ("x", "y")) is Point
    p = Point((1, 2))
    assert p == Point.of(1, 2) == (Point.tag, 1, 2) and p[1] == 1 and type(p) is tuple
    assert hash(p) == hash(Point.of(1, 2)) and p != Point.of(2, 1)
    assert Point.flow_identity == "geo.Point" and Point.flow_fields == ("x", "y") and Point.flow_kind == "record"
    assert Point.flow_index == {"x": 1, "y": 2}
    assert record_text(p) == "Point(x=1, y=2)" and Point.__name__ == "Point"
    assert V.record_type_of(p) is Point and V.record_type_of((1, 2)) is None and V.record_type_of(()) is None
    # Another record type with the same values is another value.
    assert p != record_type("geo.Vector", ("x", "y")).of(1, 2)
    Empty = record_type("geo.Empty", ())
    assert Empty.of() == Empty(()) == (Empty.tag,) and record_text(Empty.of()) == "Empty()"


def test_a_record_of_atoms_is_left_alone_by_the_collector():
    """A record's tag is not tracked by the cyclic collector, so a record holding only atoms is
    untracked at its first collection, as a tuple of atoms is (docs/impl.md, session 12)."""
    Point = record_type("geo.Point", ("x", "y"))
    assert not gc.is_tracked(Point.tag)  # what lets the collector untrack a record
    # The collection itself in a fresh interpreter: in the suite's process earlier tests leave
    # state (frozen heaps, threads collecting) that can keep one collection from untracking.
    probe = (
        "import gc\n"
        "from flowdata.values import record_type\n"
        "Point = record_type('geo.Point', ('x', 'y'))\n"
        "p = Point.of(1, 2)\n"
        "nested = Point.of((1, 2), 'a')\n"
        "gc.collect()\n"
        "assert not gc.is_tracked(p) and not gc.is_tracked(nested)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_enum_type():
    """An enum value is a tuple (tag, *payload); bare constructors are singletons."""
    Shape = enum_type("geo.Shape", (("Circle", "named", ("radius",)), ("Square", "positional", ()),
                                   ("Empty", "bare", ())))
    assert enum_type("geo.Shape", (("Circle", "named", ("radius",)), ("Square", "positional", ()),
                                   ("Empty", "bare", ()))) is Shape
    c = Shape.make("Circle", Decimal("1.5"))
    assert c == ("Circle", Decimal("1.5")) and c[0] == "Circle" and type(c) is Shape
    assert Shape.make("Empty") is Shape.make("Empty") is Shape.flow_bare["Empty"]
    assert Shape.flow_ctors["Square"] == ("positional", (), 1)
    assert Shape.flow_tags == ("Circle", "Square", "Empty")
    assert repr(c) == "Circle(radius=FlowDecimal('1.5'))" and repr(Shape.make("Square", 2)) == "Square(2)"
    assert repr(Shape.make("Empty")) == "Empty"
    for bad in [("Triangle",), ("Empty", 1), ("Square",), ("Circle", 1, 2)]:
        with pytest.raises(ValueError):
            Shape.make(*bad)
    with pytest.raises(ValueError):
        enum_type("geo.Bad", (("A", "weird", ()),))


def test_prelude_enums():
    """Option, Result, ToolProblem and json.Value are ordinary enums with ready-made helpers."""
    assert NONE == ("None",) and some(3) == ("Some", 3) and type(some(3)) is V.OPTION
    assert V.OPTION.make("None") is NONE
    assert V.ok(1) == ("Ok", 1) and V.err("e") == ("Err", "e") and type(V.ok(1)) is V.RESULT
    assert V.TOOL_PROBLEM.flow_tags == ("Failed", "NotRun", "Unknown", "BadReply")
    assert V.failed(1) == ("Failed", 1) and V.not_run("x")[0] == "NotRun"
    assert V.unknown("x")[0] == "Unknown" and V.bad_reply("x")[0] == "BadReply"
    assert V.JSON_VALUE.flow_tags == ("Null", "Bool", "Number", "String", "Array", "Object")
    assert V.JSON_VALUE.flow_identity == "std@v1/json.Value"
    assert V.is_option(NONE) and not V.is_option(V.ok(1)) and V.is_json_value(V.JSON_VALUE.make("Null"))


# ---------------------------------------------------------------------------------------------
# order_key


ORD_LEAVES = ["Int", "Decimal", "Text", "Bool", "Bytes", "Duration", "Instant", "Unit"]


def ord_terms():
    return st.recursive(
        st.sampled_from(ORD_LEAVES),
        lambda sub: st.one_of(
            st.builds(lambda t: ("List", t), sub),
            st.builds(lambda t: ("Option", t), sub),
            st.builds(lambda ts: ("Tuple", tuple(ts)), st.lists(sub, min_size=2, max_size=3)),
        ),
        max_leaves=4,
    )


def ord_values(term):
    if term == "Int":
        return st.one_of(st.integers(-3, 3), st.integers())
    if term == "Decimal":
        return st.one_of(st.sampled_from([Decimal("1.5"), Decimal("1.50"), Decimal("-0"), Decimal(0)]),
                         st.decimals(allow_nan=False, allow_infinity=False).map(Decimal))
    if term == "Text":
        return st.text(alphabet=st.sampled_from(["a", "b", "é", "😀", "\uffff", "A"]), max_size=3)
    if term == "Bool":
        return st.booleans()
    if term == "Bytes":
        return st.binary(max_size=3)
    if term == "Duration":
        return st.integers(-3, 3).map(Duration)
    if term == "Instant":
        return st.integers(-3, 3).map(Instant)
    if term == "Unit":
        return st.none()
    kind, arg = term
    if kind == "List":
        return st.lists(ord_values(arg), max_size=3).map(tuple)
    if kind == "Option":
        return st.one_of(st.just(NONE), ord_values(arg).map(some))
    return st.tuples(*[ord_values(t) for t in arg])


def flow_cmp(a, b, term):
    """Reference: Flow's order (language.md 5.5), written independently of order_key."""
    def c(x, y):
        return (x > y) - (x < y)
    if term in ("Int", "Decimal", "Bool"):
        return c(a, b)
    if term == "Text":
        return c([ord(ch) for ch in a], [ord(ch) for ch in b])
    if term == "Bytes":
        return c(list(a), list(b))
    if term in ("Duration", "Instant"):
        return c(a.nanos, b.nanos)
    if term == "Unit":
        return 0
    kind, arg = term
    if kind == "Option":
        if a[0] == "None" or b[0] == "None":
            return c(a[0] != "None", b[0] != "None")
        return flow_cmp(a[1], b[1], arg)
    items = [arg] * max(len(a), len(b)) if kind == "List" else list(arg)
    for x, y, t in zip(a, b, items):
        r = flow_cmp(x, y, t)
        if r:
            return r
    return c(len(a), len(b))


@st.composite
def ord_triples(draw):
    term = draw(ord_terms())
    vals = ord_values(term)
    return term, draw(vals), draw(vals), draw(vals)


@settings(max_examples=400)
@given(ord_triples())
def test_order_key_is_flows_order(triple):
    """On Ord types, comparing order keys is Flow's `<`; equal keys exactly when values are equal."""
    term, a, b, c = triple
    ka, kb, kc = order_key(a), order_key(b), order_key(c)
    assert ((ka > kb) - (ka < kb)) == flow_cmp(a, b, term)
    assert (ka == kb) == (a == b)
    # totality and transitivity of the key order
    assert (ka < kb) + (ka == kb) + (ka > kb) == 1
    if ka <= kb and kb <= kc:
        assert ka <= kc


Shape = enum_type("t.Shape", (("Circle", "named", ("radius",)), ("Square", "positional", ()), ("Empty", "bare", ())))
Point = record_type("t.Point", ("x", "y"))


def test_order_key_other_data_by_canonical_text():
    """Records, enums, sets and dicts are ordered by their canonical JSON text."""
    vals = [Point.of(2, "b"), Point.of(10, "a"), Point.of(2, "a")]
    assert sorted(vals, key=order_key) == sorted(vals, key=value_json)
    shapes = [Shape.make("Square", 1), Shape.make("Empty"), Shape.make("Circle", Decimal(2))]
    assert list(FlowSet(shapes)) == [Shape.make("Empty"), Shape.make("Circle", Decimal(2)), Shape.make("Square", 1)]
    sets = [FlowSet([2]), FlowSet([1, 2]), FlowSet()]
    assert [value_json(s) for s in FlowSet(sets)] == ["[1,2]", "[2]", "[]"]
    with pytest.raises(TypeError):
        order_key([1])
    with pytest.raises(TypeError):
        order_key(object())


def test_value_json_examples():
    """value_json writes the canonical JSON text from the value alone."""
    J = V.JSON_VALUE
    cases = [
        (Point.of(1, "x"), '{"x":1,"y":"x"}'),
        (Shape.make("Circle", Decimal("1.50")), '{"Circle":{"radius":"1.5"}}'),
        (Shape.make("Empty"), '"Empty"'),
        (some(NONE), '"None"'), (some(some(3)), '{"Some":3}'), (some(None), '{"Some":null}'),
        (some(J.make("Null")), '{"Some":null}'), (NONE, "null"), (some(3), "3"),
        (FlowDict([("b", 1), ("a", 2)]), '{"a":2,"b":1}'),
        (FlowDict([(10, "x"), (9, "y")]), '[[10,"x"],[9,"y"]]'),
        (FlowSet([10, 9, 100]), "[10,100,9]"),
        (J.make("Object", FlowDict([("n", J.make("Number", Decimal("1.0"))),
                                     ("a", J.make("Array", (J.make("Bool", True), J.make("String", "s"))))])),
         '{"a":[true,"s"],"n":1}'),
        ((Duration(250_000_000), Instant(0), b"\x00\xff", None, True), '["PT0.25S","1970-01-01T00:00:00Z","AP8=",null,true]'),
        (Token("m.Page", "tok"), '"tok"'),
        ("a\"\\\n\x01é", '"a\\"\\\\\\n\\u0001é"'),
        (10**5000, "1" + "0" * 5000),
    ]
    for v, text in cases:
        assert value_json(v) == text


def test_int_text_big():
    """Ints beyond CPython's str() digit limit still have a text, and parse back."""
    n = -(10**6000) + 7
    assert V.text_int(V.int_text(n)) == n
    assert len(V.int_text(n)) == 6001


# ---------------------------------------------------------------------------------------------
# Determinism across processes

_PROBE = r"""
import random
from flowdata import values as V
P = V.record_type("m.P", ("name", "tags"))
E = V.enum_type("m.E", (("A", "positional", ()), ("B", "bare", ())))
rnd = random.Random(7)
words = ["pear", "apple", "é", "😀", "Zed", "", "apple pie", "b"]
items = [P.of(w, V.FlowSet(words[:i])) for i, w in enumerate(words)]
enums = [E.make("A", w) for w in words] + [E.make("B")]
dicts = [V.FlowDict([(w, i) for i, w in enumerate(words[:k])]) for k in range(5)]
out = []
for _ in range(3):
    rnd.shuffle(words); rnd.shuffle(items); rnd.shuffle(enums); rnd.shuffle(dicts)
    out.append([list(V.FlowSet(words)), [V.value_json(x) for x in V.FlowSet(items)],
                [repr(x) for x in V.FlowSet(enums)], [V.value_json(x) for x in V.FlowSet(dicts)],
                V.value_json(V.FlowDict((w, len(w)) for w in words))])
assert out[0] == out[1] == out[2]
print(repr(out[0]))
"""


def test_iteration_order_independent_of_hash_seed():
    """Sets and dicts of text, records, enums and dicts iterate the same way under any hash seed."""
    outputs = set()
    for seed in ("0", "1", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        outputs.add(r.stdout)
    assert len(outputs) == 1


def _imports(path) -> set:
    import ast
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return names


def test_values_module_imports_only_allowed_stdlib():
    """values.py is pure: it imports only decimal, datetime, base64, bisect, re, functools and
    flowdata.bigint, which imports only functools."""
    assert _imports(ROOT / "flowdata" / "values.py") <= {"__future__", "decimal", "datetime", "base64", "bisect",
                                                          "re", "functools", "flowdata.bigint",
                                                          "flowdata.flowdecimal"}
    assert _imports(ROOT / "flowdata" / "bigint.py") <= {"__future__", "functools"}


def test_pickle_free_reduce_of_scalars():
    """Durations, Instants, Tokens, sets and dicts survive copy (used by checkpoints)."""
    import copy
    for v in [Duration(5), Instant(-3), Token("m.T", "x"), FlowSet([1, 2]), FlowDict([("a", 1)])]:
        assert copy.deepcopy(v) == v
    assert json.loads(value_json(FlowSet(["b", "a"]))) == ["a", "b"]
    random.seed(0)
