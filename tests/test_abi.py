"""The ABI's value layer (flowdata/codec.py, flowrt/schemas.py): encoding, decoding, JSON Schema, outcomes.

Golden tables fix the encoding of every kind of type and the path and message of decoding
failures; property tests draw random types (with random records and enums, possibly recursive)
and random values of them.
"""

import functools
import re
import string
import decimal as pydecimal

from flowdata.flowdecimal import FlowDecimal as Decimal  # the Python value of a Flow Decimal

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from flowdata import canonical, codec
from flowdata import values as V
from flowdata.codec import DecodeError, EncodeError, NotAnOutcome, TermError
from flowrt import schemas
from flowdata.values import (
    NONE, Duration, FlowDict, FlowSet, Instant, Token, enum_type, record_type, some,
)

try:
    import jsonschema
except ImportError:  # pragma: no cover - jsonschema is optional
    jsonschema = None

J = V.JSON_VALUE


def jv(obj):
    """A json.Value built by hand from plain JSON data (independently of codec.decode)."""
    if obj is None:
        return J.make("Null")
    if isinstance(obj, bool):
        return J.make("Bool", obj)
    if isinstance(obj, (int, Decimal)):
        return J.make("Number", Decimal(obj))
    if isinstance(obj, str):
        return J.make("String", obj)
    if isinstance(obj, list):
        return J.make("Array", tuple(jv(x) for x in obj))
    return J.make("Object", FlowDict((k, jv(v)) for k, v in obj.items()))


# ---------------------------------------------------------------------------------------------
# Declarations used by the golden tables


def field(name, t, doc=None):
    return {"name": name, "type": t, "doc": doc}


def ctor(name, payload=None, doc=None):
    return {"name": name, "doc": doc, "payload": payload}


DEFS = {
    "geo.Point": {"name": "Point", "identity": "geo.Point", "args": [], "doc": "A point.",
                  "kind": {"record": {"fields": [field("x", "Int", "across"), field("y", "Int")]}}},
    "geo.Shape": {"name": "Shape", "identity": "geo.Shape", "args": [], "doc": None,
                  "kind": {"enum": {"ctors": [
                      ctor("Circle", {"named": [field("radius", "Decimal")]}, "round"),
                      ctor("Square", {"positional": ["Decimal"]}),
                      ctor("Pair", {"positional": ["Int", "Text"]}),
                      ctor("Empty"),
                  ]}}},
    "web.Page": {"name": "Page", "identity": "web.Page", "args": [], "doc": None, "kind": {"host": {}}},
    "support.Ticket": {"name": "Ticket", "identity": "support.Ticket", "args": [], "doc": None,
                       "kind": {"record": {"fields": [field("title", "Text"), field("notes", {"List": "Text"}),
                                                     field("due", {"Option": "Instant"})]}}},
    "Result<Text, json.Value>": {"name": "Result", "identity": "std@v1/prelude.Result", "args": ["Text", "json.Value"],
                                 "doc": None, "kind": {"enum": {"ctors": [
                                     ctor("Ok", {"positional": ["Text"]}), ctor("Err", {"positional": ["json.Value"]})]}}},
    "t.Tree": {"name": "Tree", "identity": "t.Tree", "args": [], "doc": None,
               "kind": {"enum": {"ctors": [ctor("Leaf", {"positional": ["Int"]}),
                                           ctor("Node", {"positional": [{"Named": "t.Tree"}, {"Named": "t.Tree"}]})]}}},
    "planner.Error": {"name": "Error", "identity": "planner.Error", "args": [], "doc": None,
                      "kind": {"enum": {"ctors": [ctor("Busy"), ctor("Refused", {"positional": ["Text"]})]}}},
}

Point = record_type("geo.Point", ("x", "y"))
Shape = enum_type("geo.Shape", (("Circle", "named", ("radius",)), ("Square", "positional", ()),
                                ("Pair", "positional", ()), ("Empty", "bare", ())))
Ticket = record_type("support.Ticket", ("title", "notes", "due"))
Tree = enum_type("t.Tree", (("Leaf", "positional", ()), ("Node", "positional", ())))
PErr = enum_type("planner.Error", (("Busy", "bare", ()), ("Refused", "positional", ())))
N = lambda key: {"Named": key}  # noqa: E731

GOLDEN = [
    # (term, value, canonical text)
    ("Int", 42, "42"),
    ("Int", -7, "-7"),
    ("Int", 2**64, "18446744073709551616"),
    ("Int", -(2**200), str(-(2**200))),
    ("Decimal", Decimal("1.50"), '"1.5"'),
    ("Decimal", Decimal("1E+2"), '"100"'),
    ("Decimal", Decimal("-0.001"), '"-0.001"'),
    ("Decimal", Decimal("-0.0"), '"0"'),
    ("Decimal", Decimal("1E+100"), '"1E+100"'),
    ("Bool", True, "true"),
    ("Text", 'a"b\\\n\x01é😀', '"a\\"b\\\\\\n\\u0001é😀"'),
    ("Bytes", b"\x00\xffhi", '"AP9oaQ=="'),
    ("Bytes", b"", '""'),
    ("Unit", None, "null"),
    ("Duration", Duration(250_000_000), '"PT0.25S"'),
    ("Duration", Duration(3_600 * 10**9), '"PT3600S"'),
    ("Duration", Duration(-5 * 10**9), '"-PT5S"'),
    ("Duration", Duration(0), '"PT0S"'),
    ("Instant", Instant(1_767_225_600 * 10**9), '"2026-01-01T00:00:00Z"'),
    ("Instant", Instant(1_767_225_600 * 10**9 + 500_000_000), '"2026-01-01T00:00:00.5Z"'),
    ({"List": "Int"}, (1, 2, 3), "[1,2,3]"),
    ({"List": "Int"}, (), "[]"),
    ({"Tuple": ["Int", "Text", "Bool"]}, (1, "a", False), '[1,"a",false]'),
    ({"Set": "Int"}, FlowSet([9, 10, 100]), "[10,100,9]"),
    ({"Set": "Text"}, FlowSet(["b", "a", "é"]), '["a","b","é"]'),
    ({"Dict": ["Text", "Int"]}, FlowDict([("b", 1), ("a", 2)]), '{"a":2,"b":1}'),
    ({"Dict": ["Text", "Int"]}, FlowDict(), "{}"),
    ({"Dict": ["Int", "Text"]}, FlowDict([(10, "x"), (9, "y")]), '[[10,"x"],[9,"y"]]'),
    ({"Dict": ["Int", "Text"]}, FlowDict(), "[]"),
    ({"Dict": [N("geo.Point"), "Bool"]}, FlowDict([(Point.of(2, 1), True), (Point.of(1, 2), False)]),
     '[[{"x":1,"y":2},false],[{"x":2,"y":1},true]]'),
    ({"Option": "Int"}, NONE, "null"),
    ({"Option": "Int"}, some(3), "3"),
    ({"Option": {"Option": "Int"}}, NONE, "null"),
    ({"Option": {"Option": "Int"}}, some(NONE), '"None"'),
    ({"Option": {"Option": "Int"}}, some(some(3)), '{"Some":3}'),
    ({"Option": {"Option": {"Option": "Int"}}}, some(some(NONE)), '{"Some":null}'),
    ({"Option": {"Option": {"Option": "Int"}}}, some(some(some(4))), '{"Some":4}'),
    ({"Option": "Unit"}, some(None), '{"Some":null}'),
    ({"Option": "json.Value"}, some(jv(None)), '{"Some":null}'),
    ({"Option": "json.Value"}, some(jv([1])), '{"Some":[1]}'),
    ({"List": {"Option": "Int"}}, (NONE, some(1)), "[null,1]"),
    (N("geo.Point"), Point.of(1, -2), '{"x":1,"y":-2}'),
    (N("geo.Shape"), Shape.make("Circle", Decimal("1.50")), '{"Circle":{"radius":"1.5"}}'),
    (N("geo.Shape"), Shape.make("Square", Decimal(2)), '{"Square":"2"}'),
    (N("geo.Shape"), Shape.make("Pair", 1, "a"), '{"Pair":[1,"a"]}'),
    (N("geo.Shape"), Shape.make("Empty"), '"Empty"'),
    (N("web.Page"), Token("web.Page", "page-17"), '"page-17"'),
    (N("Result<Text, json.Value>"), V.ok("Safari 17.4"), '{"Ok":"Safari 17.4"}'),
    (N("Result<Text, json.Value>"), V.err(jv({"code": 3})), '{"Err":{"code":3}}'),
    (N("t.Tree"), Tree.make("Node", Tree.make("Leaf", 1), Tree.make("Leaf", 2)),
     '{"Node":[{"Leaf":1},{"Leaf":2}]}'),
    (N("support.Ticket"), Ticket.of("Login fails", ("a",), NONE), '{"due":null,"notes":["a"],"title":"Login fails"}'),
    ("json.Value", jv({"b": [1, Decimal("1.50"), None, True, "s"], "a": {}}), '{"a":{},"b":[1,1.5,null,true,"s"]}'),
    ("json.Value", jv(Decimal("1E+100")), "1E+100"),
    ("json.Value", jv(Decimal("-0.0")), "0"),
    ("json.Value", jv(10**30), "1" + "0" * 30),
]


@pytest.mark.parametrize("term, value, text", GOLDEN, ids=[f"{i}:{t[2][:30]}" for i, t in enumerate(GOLDEN)])
def test_golden_encoding(term, value, text):
    """Each kind of value has exactly this canonical text, and decodes back from it."""
    got = codec.canonical(value, term, DEFS)
    assert got == text.encode("utf-8")
    back = codec.decode_text(got, term, DEFS)
    assert back == value
    assert codec.canonical(back, term, DEFS) == got


def test_encode_gives_plain_json_data():
    """encode gives plain JSON data; json.Value numbers that are not integers stay exact Decimals."""
    assert codec.encode(Point.of(1, 2), N("geo.Point"), DEFS) == {"x": 1, "y": 2}
    assert codec.encode(Decimal("2.50"), "Decimal") == "2.5"
    assert codec.encode(jv([Decimal("1.0"), Decimal("0.5")]), "json.Value") == [1, Decimal("0.5")]
    assert type(codec.encode(jv(Decimal("2.0")), "json.Value")) is int


def test_big_ints():
    """Ints of any size up to 100,000 digits encode and decode; longer ones are refused."""
    n = 7 * 10**5000 + 1
    text = codec.canonical(n, "Int")
    assert text == str(7 * 10**5000 + 1 if False else "7" + "0" * 4999 + "1").encode()
    assert codec.decode_text(text, "Int") == n
    assert codec.decode_text(text, "json.Value") == J.make("Number", Decimal(n))
    with pytest.raises(DecodeError, match="100000 digits"):
        codec.decode_text("9" * 100_001, "Int")
    assert codec.decode_text("9" * 100_000, "Int") == 10**100_000 - 1


def test_nested_too_deeply_is_a_decode_error():
    """Absurdly deep JSON is refused as a DecodeError, not a crash."""
    with pytest.raises(DecodeError):
        codec.decode_text("[" * 200_000 + "]" * 200_000, "json.Value")
    deep = "[" * 5000 + "]" * 5000
    term = {"List": "Int"}
    for _ in range(3000):
        term = {"List": term}
    with pytest.raises(DecodeError):
        codec.decode_text(deep, term)


# ---------------------------------------------------------------------------------------------
# Decoding failures

FAILURES = [
    # (term, JSON text, path, message fragment)
    ("Int", "1.0", "$", "expected an integer, found the number 1"),
    ("Int", "1e2", "$", "expected an integer"),
    ("Int", "true", "$", "expected an integer, found true"),
    ("Int", '"1"', "$", 'found the string "1"'),
    ("Int", "null", "$", "found null"),
    ("Decimal", "1.5", "$", 'expected a Decimal as a string like "1.5"'),
    ("Decimal", '"abc"', "$", "not a decimal number"),
    ("Decimal", '"NaN"', "$", "not a decimal number"),
    ("Decimal", '"1 000"', "$", "not a decimal number"),
    ("Bool", '"true"', "$", "expected true or false"),
    ("Text", "1", "$", "expected a string"),
    ("Text", '"\\ud800"', "$", "lone surrogate"),
    ("Bytes", '"AP8"', "$", "not base64"),
    ("Bytes", '"A*8="', "$", "not base64"),
    ("Unit", "0", "$", "expected null"),
    ("Duration", '"5s"', "$", "not an ISO 8601 duration"),
    ("Duration", "5", "$", "expected a duration string"),
    ("Instant", '"2026-13-01T00:00:00Z"', "$", "not an RFC 3339 date-time"),
    ("Instant", '"2026-01-01T00:00:00"', "$", "not an RFC 3339 date-time"),
    ("Never", "null", "$", "no value has type Never"),
    ({"Param": "T"}, "1", "$", "must be concrete"),
    ({"List": "Text"}, '["a", 1]', "$[1]", "expected a string, found the integer 1"),
    ({"List": "Text"}, '{"a": 1}', "$", "expected an array, found an object"),
    ({"Tuple": ["Int", "Text"]}, "[1]", "$", "expected an array of 2 items, found 1 items"),
    ({"Tuple": ["Int", "Text"]}, "[1, 2]", "$[1]", "expected a string"),
    ({"Set": "Int"}, "[3, 1, 3]", "$[2]", "duplicate set element (equal to the element at index 0)"),
    ({"Set": "Decimal"}, '["1.5", "1.50"]', "$[1]", "duplicate set element"),
    ({"Dict": ["Int", "Text"]}, '[[1, "a"], [1, "b"]]', "$[1][0]", "duplicate key"),
    ({"Dict": ["Int", "Text"]}, "[[1]]", "$[0]", "expected a [key, value] pair, found 1 items"),
    ({"Dict": ["Int", "Text"]}, '[["1", "a"]]', "$[0][0]", "expected an integer"),
    ({"Dict": ["Int", "Text"]}, '{"1": "a"}', "$", "expected an array of [key, value] pairs"),
    ({"Dict": ["Text", "Int"]}, '{"a b": "x"}', '$["a b"]', "expected an integer"),
    ({"Dict": ["Text", "Int"]}, '{"ok": "x"}', "$.ok", "expected an integer"),
    ({"Dict": ["Text", "Int"]}, "[]", "$", "expected an object"),
    ({"Option": "Int"}, '"x"', "$", "expected an integer"),
    ({"Option": {"Option": "Int"}}, "3", "$", 'expected "None" or {"Some": ...}'),
    ({"Option": {"Option": "Int"}}, '{"Some": "x"}', "$.Some", "expected an integer"),
    ({"Option": "Unit"}, "{}", "$", 'expected null or {"Some": ...}'),
    (N("geo.Point"), '{"x": 1}', "$", 'missing field "y" of Point'),
    (N("geo.Point"), '{"x": 1, "y": 2, "z": 3}', "$.z", 'Point has no field "z" (its fields: x, y)'),
    (N("geo.Point"), '{"x": 1, "y": null}', "$.y", "expected an integer, found null"),
    (N("geo.Point"), "[1, 2]", "$", "expected an object (Point)"),
    (N("support.Ticket"), '{"title": "t", "notes": ["a", "b", 3], "due": null}', "$.notes[2]", "expected a string"),
    (N("support.Ticket"), '{"title": "t", "notes": []}', "$", 'missing field "due"'),
    (N("support.Ticket"), '{"title": "t", "notes": [], "due": "soon"}', "$.due", "not an RFC 3339 date-time"),
    (N("geo.Shape"), '"Triangle"', "$", 'Shape has no constructor "Triangle" (its constructors: Circle, Square, Pair, Empty)'),
    (N("geo.Shape"), '{"Triangle": 1}', "$", "has no constructor"),
    (N("geo.Shape"), '"Square"', "$", 'Square of Shape carries a payload'),
    (N("geo.Shape"), '{"Empty": null}', "$", "Empty of Shape takes no payload"),
    (N("geo.Shape"), '{"Square": "1", "Empty": null}', "$", "exactly one constructor, found 2 members"),
    (N("geo.Shape"), '{"Pair": [1]}', "$.Pair", "expected an array of 2 items (Pair's payload), found 1 items"),
    (N("geo.Shape"), '{"Pair": [1, 2]}', "$.Pair[1]", "expected a string"),
    (N("geo.Shape"), '{"Square": 2}', "$.Square", 'expected a Decimal as a string'),
    (N("geo.Shape"), '{"Circle": {"radius": "x"}}', "$.Circle.radius", "not a decimal number"),
    (N("geo.Shape"), '{"Circle": {"radius": "1", "r": 1}}', "$.Circle.r", 'Shape.Circle has no field "r"'),
    (N("geo.Shape"), '{"Circle": {}}', "$.Circle", 'missing field "radius"'),
    (N("geo.Shape"), "1", "$", "expected a Shape"),
    (N("web.Page"), "1", "$", "expected a Page token (a string)"),
    (N("t.Tree"), '{"Node": [{"Leaf": 1}, {"Node": [{"Leaf": 2}, {"Leaf": "x"}]}]}', "$.Node[1].Node[1].Leaf",
     "expected an integer"),
    ("json.Value", '{"a": [1, "\\udc00"]}', "$.a[1]", "lone surrogate"),
    ("Int", "NaN", "$", "not JSON"),
    ("Int", "[1,]", "$", "not JSON"),
    ("Int", "", "$", "not JSON"),
    ("Int", "1 2", "$", "not JSON"),
    ("json.Value", '{"a": 1, "a": 2}', "$", 'duplicate object key "a"'),
    ("json.Value", "Infinity", "$", "not JSON"),
    ("json.Value", b"\xff", "$", "not UTF-8"),
    ("json.Value", b"\xef\xbb\xbf1", "$", "not JSON"),
]


@pytest.mark.parametrize("term, text, path, message", FAILURES,
                         ids=[f"{i}:{t[2]}" for i, t in enumerate(FAILURES)])
def test_decoding_failures(term, text, path, message):
    """Each misfit is refused with the path of the offending value and a message saying why."""
    with pytest.raises(DecodeError) as info:
        codec.decode_text(text, term, DEFS)
    assert info.value.path == path
    assert message in info.value.message
    assert str(info.value) == f"{info.value.path}: {info.value.message}"


@pytest.mark.parametrize("term, text, value", [
    ("Decimal", '"1.50"', Decimal("1.5")),
    ("Decimal", '"+1e2"', Decimal(100)),
    ("Decimal", '".5"', Decimal("0.5")),
    ("Duration", '"PT1H"', Duration(3600 * 10**9)),
    ("Instant", '"2026-01-01T01:00:00+01:00"', Instant(1_767_225_600 * 10**9)),
    ({"Set": "Int"}, "[3, 1, 2]", FlowSet([1, 2, 3])),
    ({"Dict": ["Int", "Int"]}, "[[2, 0], [1, 0]]", FlowDict([(1, 0), (2, 0)])),
    (N("geo.Point"), ' { "y" : 2 ,\n "x" : 1 } ', Point.of(1, 2)),
    ("json.Value", "1.0", jv(1)),
    ("json.Value", "0.1000000000000000000000000000001", jv(Decimal("0.1000000000000000000000000000001"))),
    ("json.Value", "1e400", jv(Decimal("1e400"))),
    ("json.Value", "18446744073709551616", jv(2**64)),
])
def test_non_canonical_input_is_accepted(term, text, value):
    """Any JSON layout and any non-canonical text that means the value is accepted, exactly."""
    assert codec.decode_text(text, term, DEFS) == value


def test_decode_python_data():
    """decode also takes JSON data built in Python: tuples as arrays, floats as exact numbers where allowed."""
    assert codec.decode((1, 2), {"List": "Int"}) == (1, 2)
    assert codec.decode(0.1, "json.Value") == jv(Decimal("0.1"))
    with pytest.raises(DecodeError):
        codec.decode(1.0, "Int")
    with pytest.raises(DecodeError):
        codec.decode(float("nan"), "json.Value")
    with pytest.raises(DecodeError):
        codec.decode(True, "Int")


def test_term_errors():
    """Malformed terms and unknown declarations are the caller's bug: TermError, not DecodeError."""
    for term in ["Float", {"List": "Int", "Set": "Int"}, {"Wat": 1}, ["Int"], {"Named": "nope"}]:
        with pytest.raises(TermError):
            codec.decode(1, term, DEFS)
        with pytest.raises(TermError):
            codec.encode(1, term, DEFS)
        with pytest.raises(TermError):
            schemas.schema(term, DEFS)


@pytest.mark.parametrize("term, value, path", [
    ("Int", True, "$"),
    ("Int", 1.0, "$"),
    ("Decimal", 1.5, "$"),
    ("Decimal", pydecimal.Decimal("NaN"), "$"),
    ("Text", b"x", "$"),
    ({"List": "Int"}, (1, "a"), "$[1]"),
    ({"Option": "Int"}, 3, "$"),
    (N("geo.Point"), (1, 2), "$"),
    (N("geo.Point"), Point.of(1, "a"), "$.y"),
    (N("geo.Shape"), Shape.make("Pair", 1, 2), "$.Pair[1]"),
    (N("geo.Shape"), Shape.make("Circle", 1), "$.Circle.radius"),
    (N("web.Page"), Token("other.Page", "x"), "$"),
    ("Instant", Instant(V.INSTANT_MAX_NANOS + 1), "$"),
    ("Never", None, "$"),
    ({"Param": "T"}, 1, "$"),
    ({"Dict": ["Text", "Int"]}, FlowDict([("a", "b")]), "$.a"),
])
def test_encoding_failures(term, value, path):
    """Encoding a Python value that is not a value of the type is an EncodeError with a path."""
    with pytest.raises(EncodeError) as info:
        codec.encode(value, term, DEFS)
    assert info.value.path == path


def test_named_option_and_json_value_declarations():
    """A Named declaration of std's Option or json.Value encodes as the built-in terms do."""
    defs = {
        "Option<Int>": {"name": "Option", "identity": "std@v1/prelude.Option", "args": ["Int"], "doc": None,
                        "kind": {"enum": {"ctors": [ctor("Some", {"positional": ["Int"]}), ctor("None")]}}},
        "json.Value": {"name": "Value", "identity": "std@v1/json.Value", "args": [], "doc": None,
                       "kind": {"enum": {"ctors": []}}},
    }
    assert codec.canonical(some(3), N("Option<Int>"), defs) == b"3"
    assert codec.canonical(NONE, N("Option<Int>"), defs) == b"null"
    assert codec.decode(None, N("Option<Int>"), defs) == NONE
    assert codec.canonical(jv([1]), N("json.Value"), defs) == b"[1]"
    assert schemas.schema(N("Option<Int>"), defs)["anyOf"][0] == {"type": "null"}


# ---------------------------------------------------------------------------------------------
# canonical_json and parse_json


json_data = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.text(),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda sub: st.one_of(st.lists(sub, max_size=4), st.dictionaries(st.text(max_size=5), sub, max_size=4)),
    max_leaves=12,
)


@given(st.text())
def test_json_string_matches_orjson(s):
    """values.json_string (used by value_json in the child) escapes exactly as orjson does."""
    assert V.json_string(s).encode("utf-8") == orjson.dumps(s)


# ---------------------------------------------------------------------------------------------
# Schema


def test_schema_shapes():
    """Schemas reference declarations under $defs, records are closed, enums are oneOf."""
    s = schemas.schema({"List": N("geo.Shape")}, DEFS)
    assert s["$schema"] == schemas.SCHEMA_DIALECT
    assert s["items"] == {"$ref": "#/$defs/geo.Shape"}
    shape = s["$defs"]["geo.Shape"]
    assert shape["title"] == "Shape"
    assert shape["oneOf"][0] == {
        "type": "object", "description": "round", "required": ["Circle"], "additionalProperties": False,
        "properties": {"Circle": {"type": "object", "properties": {"radius": {"type": "string", "pattern": schemas.DECIMAL_PATTERN}},
                                  "required": ["radius"], "additionalProperties": False}}}
    assert shape["oneOf"][3] == {"const": "Empty"}
    p = schemas.schema(N("geo.Point"), DEFS)
    assert p["$ref"] == "#/$defs/geo.Point"
    point = p["$defs"]["geo.Point"]
    assert point["required"] == ["x", "y"] and point["additionalProperties"] is False
    assert point["description"] == "A point." and point["properties"]["x"] == {"type": "integer", "description": "across"}
    assert schemas.schema({"Option": "Int"}) == {"$schema": schemas.SCHEMA_DIALECT, "anyOf": [{"type": "null"}, {"type": "integer"}]}
    assert schemas.schema({"Set": "Text"})["uniqueItems"] is True
    assert schemas.schema({"Dict": ["Text", "Int"]})["additionalProperties"] == {"type": "integer"}
    assert schemas.schema("Bytes")["contentEncoding"] == "base64"
    assert "pattern" in schemas.schema("Duration") and "pattern" in schemas.schema("Instant")
    tree = schemas.schema(N("t.Tree"), DEFS)
    assert list(tree["$defs"]) == ["t.Tree"]
    assert schemas.schema({"Param": "T"})["$comment"].startswith("type parameter T")


@pytest.mark.skipif(jsonschema is None, reason="jsonschema is not installed")
def test_schema_rejects_misfits():
    """The schema refuses what decoding refuses, for the common misfits."""
    def ok(term, obj):
        return jsonschema.Draft202012Validator(schemas.schema(term, DEFS)).is_valid(obj)
    assert ok(N("geo.Point"), {"x": 1, "y": 2})
    assert not ok(N("geo.Point"), {"x": 1})
    assert not ok(N("geo.Point"), {"x": 1, "y": 2, "z": 3})
    assert not ok(N("geo.Shape"), "Square") and ok(N("geo.Shape"), {"Square": "2"})
    assert not ok(N("geo.Shape"), {"Pair": [1]}) and ok(N("geo.Shape"), {"Pair": [1, "a"]})
    assert not ok("Decimal", "abc") and ok("Decimal", "-1.5e3")
    assert not ok("Duration", "5s") and ok("Duration", "PT5S") and not ok("Duration", "PT")
    assert not ok("Instant", "2026-01-01") and ok("Instant", "2026-01-01T00:00:00Z")
    assert not ok("Bytes", "AP8") and ok("Bytes", "AP8=")
    assert not ok({"Option": {"Option": "Int"}}, 3) and ok({"Option": {"Option": "Int"}}, {"Some": 3})
    assert not ok("Never", None)
    odd = {"m/x.T<A~B>": {"name": "T", "identity": "m/x.T", "args": [], "doc": None, "kind": {"host": {}}}}
    s = schemas.schema({"List": N("m/x.T<A~B>")}, odd)
    assert jsonschema.Draft202012Validator(s).is_valid(["tok"])
    assert not jsonschema.Draft202012Validator(s).is_valid([1])


@given(st.text(alphabet="0123456789+-.eE x_", max_size=8))
def test_decimal_pattern_agrees_with_parser(text):
    """The schema's Decimal pattern accepts exactly the texts decoding accepts."""
    try:
        V.parse_decimal(text)
        parsed = True
    except ValueError:
        parsed = False
    assert parsed == bool(re.search(schemas.DECIMAL_PATTERN, text))


@given(st.text(alphabet="0123456789PTDHMS.-+Y", max_size=10))
def test_duration_pattern_agrees_with_parser(text):
    """The schema's Duration pattern accepts exactly the texts decoding accepts."""
    try:
        V.parse_duration(text)
        parsed = True
    except ValueError:
        parsed = False
    assert parsed == bool(re.search(schemas.DURATION_PATTERN, text))


@given(st.from_regex(schemas.INSTANT_PATTERN, fullmatch=True).filter(str.isascii))
def test_instant_pattern_covers_parser(text):
    """Whatever decoding accepts as an Instant matches the schema's pattern."""
    try:
        V.parse_instant(text)
    except ValueError:
        return
    assert re.search(schemas.INSTANT_PATTERN, text)


# ---------------------------------------------------------------------------------------------
# Outcomes and arguments

OK_T = {"List": "Text"}
ERR_T = N("planner.Error")


@pytest.mark.parametrize("reply, expected", [
    ({"Ok": ["a"]}, V.ok(("a",))),
    ({"Err": {"Failed": "Busy"}}, V.err(V.failed(PErr.make("Busy")))),
    ({"Err": {"Failed": {"Refused": "no"}}}, V.err(V.failed(PErr.make("Refused", "no")))),
    ({"Err": {"NotRun": "queue full"}}, V.err(V.not_run("queue full"))),
    ({"Err": {"Unknown": "connection reset"}}, V.err(V.unknown("connection reset"))),
    ({"Err": {"BadReply": "garbled"}}, V.err(V.bad_reply("garbled"))),
    ({"Ok": ["a", 2]}, V.err(V.bad_reply("$.Ok[1]: expected a string, found the integer 2"))),
    ({"Ok": "a"}, V.err(V.bad_reply("$.Ok: expected an array, found the string \"a\""))),
    ({"Err": {"Failed": "Sleepy"}},
     V.err(V.bad_reply('$.Err.Failed: Error has no constructor "Sleepy" (its constructors: Busy, Refused)'))),
    ({"Err": {"Failed": {"Refused": 1}}}, V.err(V.bad_reply("$.Err.Failed.Refused: expected a string, found the integer 1"))),
])
def test_decode_outcome(reply, expected):
    """Replies decode to Result<T, ToolProblem<E>>; values that do not decode become BadReply."""
    assert codec.decode_outcome(reply, OK_T, ERR_T, DEFS) == expected


def test_decode_outcome_without_result():
    """A Tool declared without Result has no Failed: such a reply is a BadReply."""
    got = codec.decode_outcome({"Err": {"Failed": "x"}}, "Text", None)
    assert got[0] == "Err" and got[1][0] == "BadReply" and got[1][1].startswith("$.Err.Failed: ")
    assert codec.decode_outcome({"Ok": "x"}, "Text", None) == V.ok("x")
    assert codec.decode_outcome({"Err": {"Unknown": "?"}}, "Text", None) == V.err(V.unknown("?"))


@pytest.mark.parametrize("reply", [
    [], None, "Ok", {}, {"Ok": 1, "Err": 2}, {"Maybe": 1}, {"ok": 1}, {"Err": "x"}, {"Err": {}},
    {"Err": {"NotRun": 1}}, {"Err": {"Oops": "x"}}, {"Err": {"NotRun": "a", "Unknown": "b"}},
])
def test_not_an_outcome(reply):
    """A reply that is not shaped as an outcome at all is refused outright."""
    with pytest.raises(NotAnOutcome):
        codec.decode_outcome(reply, OK_T, ERR_T, DEFS)


@pytest.mark.parametrize("result", [
    V.ok(("a", "b")), V.err(V.failed(PErr.make("Busy"))), V.err(V.not_run("x")),
    V.err(V.unknown("y")), V.err(V.bad_reply("z")),
])
def test_encode_outcome_round_trips(result):
    """encode_outcome writes what decode_outcome reads."""
    obj = codec.encode_outcome(result, OK_T, ERR_T, DEFS)
    assert codec.decode_outcome(obj, OK_T, ERR_T, DEFS) == result
    assert codec.decode_outcome(orjson.loads(canonical.dumps(obj)), OK_T, ERR_T, DEFS) == result


def test_encode_outcome_refusals():
    with pytest.raises(EncodeError):
        codec.encode_outcome(V.err(V.failed("x")), "Text", None)
    with pytest.raises(EncodeError):
        codec.encode_outcome(some(1), "Text", None)
    with pytest.raises(EncodeError) as info:
        codec.encode_outcome(V.ok(1), "Text", None)
    assert info.value.path == "$.Ok"


def test_arguments():
    """Run input and Call arguments are objects keyed by parameter name; every one required."""
    params = [{"name": "ticket", "type": "Text"}, {"name": "max_rounds", "type": "Int"}]
    assert codec.decode_arguments({"ticket": "Login fails", "max_rounds": 10}, params) == ("Login fails", 10)
    assert codec.encode_arguments(("Login fails", 10), params) == {"ticket": "Login fails", "max_rounds": 10}
    assert codec.decode_arguments({}, []) == ()
    with pytest.raises(DecodeError) as info:
        codec.decode_arguments({"ticket": "x", "max_rounds": 1, "verbose": True}, params)
    assert info.value.path == "$.verbose" and "has no parameter" in info.value.message
    with pytest.raises(DecodeError) as info:
        codec.decode_arguments({"ticket": "x"}, params)
    assert info.value.path == "$" and 'missing parameter "max_rounds"' in info.value.message
    with pytest.raises(DecodeError) as info:
        codec.decode_arguments({"ticket": 1, "max_rounds": 1}, [("ticket", "Text"), ("max_rounds", "Int")])
    assert info.value.path == "$.ticket"
    with pytest.raises(DecodeError):
        codec.decode_arguments([], params)


# ---------------------------------------------------------------------------------------------
# Random types and values

BASE_TERMS = ["Int", "Decimal", "Bool", "Text", "Bytes", "Duration", "Instant", "Unit", "json.Value"]
KEY_CHARS = string.ascii_letters + "/<>~ %@."


def compound(sub):
    return st.one_of(
        st.builds(lambda t: {"List": t}, sub),
        st.builds(lambda t: {"Set": t}, sub),
        st.builds(lambda t: {"Option": t}, sub),
        st.builds(lambda k, v: {"Dict": [k, v]}, st.one_of(st.just("Text"), sub), sub),
        st.builds(lambda ts: {"Tuple": ts}, st.lists(sub, min_size=2, max_size=3)),
    )


@functools.lru_cache(maxsize=None)
def _terms_over(named):
    leaves = st.sampled_from(BASE_TERMS + [{"Named": k} for k in named])
    return st.recursive(leaves, compound, max_leaves=4)


def terms_over(named):
    return _terms_over(tuple(named))


@st.composite
def universes(draw):
    """A term and a defs dict of up to 3 declarations: records, enums (possibly recursive), host types."""
    defs = {}
    for i in range(draw(st.integers(0, 3))):
        key = f"m{i}.T{i}" + draw(st.sampled_from(["", "<Int>", "<a/b ~c>"]))
        identity = f"m{i}/mod.T{i}"
        earlier = list(defs)
        kind = draw(st.sampled_from(["record", "enum", "enum", "host"]))
        t_earlier = terms_over(earlier)
        names = draw(st.lists(st.sampled_from(["a", "b", "c", "id", "Some", "x y"]), unique=True, max_size=3))
        if kind == "record":
            body = {"record": {"fields": [field(n, draw(t_earlier)) for n in names]}}
        elif kind == "host":
            body = {"host": {}}
        else:
            t_rec = terms_over(earlier + [key])
            ctors = [ctor("C0", draw(st.sampled_from([None, {"positional": ["Int"]}])))]
            for j in range(draw(st.integers(0, 3))):
                form = draw(st.sampled_from(["bare", "positional", "named"]))
                if form == "bare":
                    ctors.append(ctor(f"K{j}"))
                elif form == "positional":
                    ctors.append(ctor(f"K{j}", {"positional": draw(st.lists(t_rec, min_size=1, max_size=3))}))
                else:
                    ctors.append(ctor(f"K{j}", {"named": [field(n, draw(t_rec)) for n in names]}))
            body = {"enum": {"ctors": ctors}}
        defs[key] = {"name": f"T{i}", "identity": identity, "args": [], "doc": None, "kind": body}
    term = draw(terms_over(list(defs)))
    return term, defs


def json_values(depth=2):
    leaf = st.one_of(
        st.just(J.make("Null")), st.booleans().map(lambda b: J.make("Bool", b)),
        st.one_of(st.integers(), st.decimals(allow_nan=False, allow_infinity=False).map(Decimal)).map(
            lambda n: J.make("Number", Decimal(n))),
        st.text(max_size=4).map(lambda s: J.make("String", s)),
    )
    return st.recursive(leaf, lambda sub: st.one_of(
        st.lists(sub, max_size=3).map(lambda xs: J.make("Array", tuple(xs))),
        st.lists(st.tuples(st.text(max_size=3), sub), max_size=3).map(lambda ps: J.make("Object", FlowDict(ps))),
    ), max_leaves=6)


def decimals():
    return st.one_of(
        st.decimals(allow_nan=False, allow_infinity=False).map(Decimal),
        st.builds(lambda sign, digits, exp: Decimal(pydecimal.Decimal((sign, tuple(digits), exp))),
                  st.integers(0, 1), st.lists(st.integers(0, 9), min_size=1, max_size=6), st.integers(-60, 60)),
    )


_VALUES_CACHE: dict = {}


def values_of(term, defs, depth):
    """A strategy for values of `term` (enum recursion bounded by `depth`); cached by type."""
    key = orjson.dumps([term, defs, depth], option=orjson.OPT_SORT_KEYS)
    got = _VALUES_CACHE.get(key)
    if got is None:
        got = _VALUES_CACHE[key] = _values_of(term, defs, depth)
    return got


def _values_of(term, defs, depth):
    if term == "Int":
        return st.one_of(st.integers(-10, 10), st.integers(), st.integers(-2**200, 2**200))
    if term == "Decimal":
        return decimals()
    if term == "Bool":
        return st.booleans()
    if term == "Text":
        return st.text(max_size=5)
    if term == "Bytes":
        return st.binary(max_size=5)
    if term == "Duration":
        return st.one_of(st.integers(-10**12, 10**12), st.integers(-10**30, 10**30)).map(Duration)
    if term == "Instant":
        return st.integers(V.INSTANT_MIN_NANOS, V.INSTANT_MAX_NANOS).map(Instant)
    if term == "Unit":
        return st.none()
    if term == "json.Value":
        return json_values()
    (k, a), = term.items()
    if k == "List":
        return st.lists(values_of(a, defs, depth), max_size=3).map(tuple)
    if k == "Set":
        return st.lists(values_of(a, defs, depth), max_size=3).map(FlowSet)
    if k == "Option":
        return st.one_of(st.just(NONE), values_of(a, defs, depth).map(some))
    if k == "Dict":
        return st.lists(st.tuples(values_of(a[0], defs, depth), values_of(a[1], defs, depth)),
                        max_size=3).map(FlowDict.from_pairs)
    if k == "Tuple":
        return st.tuples(*[values_of(t, defs, depth) for t in a])
    d = defs[a]
    (kind, body), = d["kind"].items()
    if kind == "host":
        return st.text(max_size=4).map(lambda t: Token(d["identity"], t))
    if kind == "record":
        cls = record_type(d["identity"], tuple(f["name"] for f in body["fields"]))
        return st.tuples(*[values_of(f["type"], defs, depth) for f in body["fields"]]).map(cls)
    spec = []
    for c in body["ctors"]:
        p = c["payload"]
        spec.append((c["name"], "bare" if p is None else "positional" if "positional" in p else "named",
                     tuple(f["name"] for f in p["named"]) if p and "named" in p else ()))
    cls = enum_type(d["identity"], tuple(spec))
    options = []
    ctors = body["ctors"] if depth > 0 else body["ctors"][:1]
    for c in ctors:
        p = c["payload"]
        if p is None:
            options.append(st.just(cls.make(c["name"])))
            continue
        ts = p["positional"] if "positional" in p else [f["type"] for f in p["named"]]
        options.append(st.tuples(*[st.deferred(lambda t=t: values_of(t, defs, depth - 1)) for t in ts]).map(
            lambda vals, name=c["name"]: cls.make(name, *vals)))
    return st.one_of(options)


def has_nontext_dict(term, defs, seen=None):
    seen = set() if seen is None else seen
    if isinstance(term, str):
        return False
    (k, a), = term.items()
    if k == "Dict":
        return a[0] != "Text" or has_nontext_dict(a[1], defs, seen)
    if k == "Tuple":
        return any(has_nontext_dict(t, defs, seen) for t in a)
    if k == "Named":
        if a in seen:
            return False
        seen.add(a)
        (kind, body), = defs[a]["kind"].items()
        if kind == "record":
            return any(has_nontext_dict(f["type"], defs, seen) for f in body["fields"])
        if kind == "enum":
            for c in body["ctors"]:
                p = c["payload"] or {}
                ts = p.get("positional", []) + [f["type"] for f in p.get("named", [])]
                if any(has_nontext_dict(t, defs, seen) for t in ts):
                    return True
        return False
    return has_nontext_dict(a, defs, seen)


PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])


@PROPS
@given(st.data())
def test_random_types_round_trip(data):
    """For random types and values: decode(encode(v)) == v, one canonical text per value, the
    value-directed text agrees, and the schema accepts the encoding."""
    term, defs = data.draw(universes(), label="type")
    v = data.draw(values_of(term, defs, 2), label="value")
    enc = codec.encode(v, term, defs)
    assert codec.decode(enc, term, defs) == v
    text = codec.canonical(v, term, defs)
    back = codec.decode_text(text, term, defs)
    assert back == v
    assert codec.canonical(back, term, defs) == text
    assert canonical.dumps(codec.parse_json(text)) == text
    assert not re.search(rb"\s", re.sub(rb'"(?:[^"\\]|\\.)*"', b"", text))  # no whitespace outside strings
    if not has_nontext_dict(term, defs):
        assert V.value_json(v).encode("utf-8") == text
    if jsonschema is not None:
        validator = jsonschema.Draft202012Validator(schemas.schema(term, defs))
        errors = list(validator.iter_errors(codec.parse_json(text)))
        assert not errors, (errors[0].message, text)


@PROPS
@given(st.data())
def test_random_types_one_text_per_value(data):
    """Two values of one type are equal exactly when their canonical texts are, and exactly
    when their order keys are."""
    term, defs = data.draw(universes(), label="type")
    a = data.draw(values_of(term, defs, 2), label="a")
    b = data.draw(values_of(term, defs, 2), label="b")
    ta, tb = codec.canonical(a, term, defs), codec.canonical(b, term, defs)
    assert (a == b) == (ta == tb)
    assert (a == b) == (V.order_key(a) == V.order_key(b))


@PROPS
@given(st.data())
def test_random_types_reject_mutations(data):
    """A random misfit never decodes silently into a different canonical text: decoding either
    fails with a DecodeError or yields a value whose canonical text re-decodes to itself."""
    term, defs = data.draw(universes(), label="type")
    obj = data.draw(json_data, label="json")
    try:
        v = codec.decode(obj, term, defs)
    except DecodeError as e:
        assert e.path.startswith("$")
        return
    text = codec.canonical(v, term, defs)
    assert codec.decode_text(text, term, defs) == v
