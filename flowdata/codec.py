"""The type-directed codec of the ABI: values by type term to JSON data and back, and outcomes.

Values are the Python representations of `flowdata.values`. A *type term* is what `flow tools`
prints: a built-in by name (`"Int"`, `"Decimal"`, `"Bool"`, `"Text"`, `"Bytes"`, `"Duration"`,
`"Instant"`, `"Unit"`, `"Never"`, `"json.Value"`), `{"List": t}`, `{"Set": t}`, `{"Option": t}`,
`{"Dict": [k, v]}`, `{"Tuple": [t, ...]}`, `{"Param": "T"}` or `{"Named": key}`, where `defs[key]`
describes a declared type (`{"name", "identity", "args", "doc", "kind"}`, kind being
`{"record": {"fields": [...]}}`, `{"enum": {"ctors": [...]}}` or `{"host": {}}`). The field and
payload terms inside `defs` are concrete: a declaration appears once per list of type arguments.

Algorithm. `encode` walks the value and its term together and builds plain JSON data (dict, list,
str, int, bool, None, and `Decimal` for the numbers of a json.Value that are not integers);
`canonical` writes it with the one canonical writer, `flowdata.canonical.dumps` (which also
writes Decimals, Ints beyond 64 bits and deep nesting). Sets and non-Text dicts are sorted by the
canonical bytes of their elements and keys, so one value has exactly one text.
`decode` walks JSON data and the term together; a failure raises `DecodeError(path, message)`
with a JSONPath-like `path` (`$.notes[2]`). Paths are built only on failure: each container
catches the failure of a child and adds its own step while the exception unwinds.
`parse_json` uses the standard library's C scanner (not orjson: orjson silently turns integers
beyond 64 bits and exact decimals into floats, and keeps the last of duplicate keys), with
decimals kept exact, big integers exact, NaN and Infinity refused and duplicate keys refused.
The JSON Schema of a type term is the host's (`flowrt.schemas`): the child never needs it.

Over 800 lines, on purpose for now: the encoder and the decoder of each kind of term mirror each
other case by case and are read side by side; a split into encode/decode modules is the next
step once the Decimal codec's pending change (a 64-bit exponent) has landed.
"""
from __future__ import annotations

import json as _stdjson
import re
from decimal import Decimal as _PyDecimal

from flowdata import values as V
from flowdata.bigint import checked, over_limit, text_int
from flowdata.canonical import IntText, NotJSON, dumps as canonical_json
from flowdata.flowdecimal import FlowDecimal
from flowdata.values import (
    ListView, JSON_VALUE, NONE, OPTION_ID, JSON_VALUE_ID, RESULT_ID, TOOL_PROBLEM_ID, FlowDict, FlowSet,
    Duration, Instant, Token, decimal_text, duration_text, instant_text, bytes_text, int_text,
    order_key,
)

__all__ = [
    "DecodeError", "EncodeError", "TermError", "NotAnOutcome", "BUILTIN_TYPES",
    "encode", "canonical", "parse_json", "parse_int", "decode", "decode_text",
    "decode_outcome", "encode_outcome", "decode_arguments", "encode_arguments", "path_step",
]

BUILTIN_TYPES = ("Int", "Decimal", "Bool", "Text", "Bytes", "Duration", "Instant", "Unit",
                 "Never", "json.Value")


class DecodeError(ValueError):
    """A JSON value that does not fit the expected type: where (`path`, like `$.notes[2]`) and why."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class EncodeError(ValueError):
    """A Python value that is not a value of the given type (a bug in the caller)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class TermError(ValueError):
    """A malformed type term, or a `{"Named": key}` whose key `defs` lacks (a bug in the caller)."""


class NotAnOutcome(ValueError):
    """A reply that is not an outcome at all: neither `{"Ok": v}` nor `{"Err": problem}`."""


class _Fail(Exception):
    """Internal: a failure deep in a value; `segs` collects path steps, innermost first."""

    def __init__(self, message: str, seg: str | None = None):
        self.message = message
        self.segs = [] if seg is None else [seg]


def _path(segs, prefix="$") -> str:
    return prefix + "".join(reversed(segs))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")


def path_step(key: str) -> str:
    """The path step for an object member: `.name`, or `["odd key"]`."""
    return "." + key if _IDENT.match(key) else "[" + V.json_string(key) + "]"


# ---------------------------------------------------------------------------------------------
# Types: terms and declarations


def _split(term):
    if type(term) is str:
        return term, None
    if type(term) is dict and len(term) == 1:
        for k, a in term.items():
            return k, a
    raise TermError(f"not a type term: {term!r}")


class _Named:
    __slots__ = ("kind", "name", "identity", "cls", "fields", "names", "ctors", "tags", "inner", "doc", "defn")


class _Types:
    """Declarations of one `defs`, analysed on first use."""

    def __init__(self, defs):
        self.defs = defs if defs is not None else {}
        self.cache: dict = {}

    def named(self, key) -> _Named:
        info = self.cache.get(key)
        if info is not None:
            return info
        try:
            d = self.defs[key]
        except (KeyError, TypeError):
            raise TermError(f"no declaration for {{\"Named\": {key!r}}} in defs") from None
        try:
            info = self._analyse(d)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, TermError):
                raise
            raise TermError(f"malformed declaration {key!r}: {e!r}") from None
        self.cache[key] = info
        return info

    def _analyse(self, d) -> _Named:
        info = _Named()
        info.name = d.get("name") or d["identity"].rsplit(".", 1)[-1]
        info.identity = d["identity"]
        info.doc = d.get("doc")
        info.defn = d
        kind = d["kind"]
        (k, body), = kind.items()
        if info.identity == JSON_VALUE_ID:
            info.kind = "json"
        elif info.identity == OPTION_ID and k == "enum":
            info.kind = "option"
            some = [c for c in body["ctors"] if c["name"] == "Some"][0]
            info.inner = some["payload"]["positional"][0]
        elif k == "record":
            info.kind = "record"
            info.fields = tuple((f["name"], f["type"]) for f in body["fields"])
            info.names = frozenset(n for n, _ in info.fields)
            info.cls = V.record_type(info.identity, tuple(n for n, _ in info.fields))
        elif k == "enum":
            info.kind = "enum"
            ctors = {}
            spec = []
            for c in body["ctors"]:
                p = c.get("payload")
                if p is None:
                    ctors[c["name"]] = ("bare", None)
                    spec.append((c["name"], "bare", ()))
                elif "positional" in p:
                    ctors[c["name"]] = ("positional", tuple(p["positional"]))
                    spec.append((c["name"], "positional", ()))
                else:
                    fs = tuple((f["name"], f["type"]) for f in p["named"])
                    ctors[c["name"]] = ("named", fs)
                    spec.append((c["name"], "named", tuple(n for n, _ in fs)))
            info.ctors = ctors
            info.tags = tuple(n for n, _, _ in spec)
            info.cls = V.enum_type(info.identity, tuple(spec))
        elif k == "host":
            info.kind = "host"
        else:
            raise TermError(f"unknown declaration kind {k!r}")
        return info

    def option_inner(self, term):
        """The payload term when `term` is an Option, else None."""
        if type(term) is dict and len(term) == 1:
            if "Option" in term:
                return term["Option"]
            if "Named" in term:
                info = self.named(term["Named"])
                if info.kind == "option":
                    return info.inner
        return None

    def nullable(self, term) -> bool:
        """Whether some value of `term` encodes as `null` (Unit, json.Value, Option)."""
        if term == "Unit" or term == "json.Value":
            return True
        if type(term) is dict and len(term) == 1:
            if "Option" in term:
                return True
            if "Named" in term:
                return self.named(term["Named"]).kind in ("option", "json")
        return False


# ---------------------------------------------------------------------------------------------
# Encoding


def encode(value, term, defs=None):
    """The JSON data (dict, list, str, int, bool, None, Decimal) encoding `value` of type `term`."""
    try:
        return _Encoder(_Types(defs)).enc(value, term)
    except _Fail as f:
        raise EncodeError(_path(f.segs), f.message) from None
    except RecursionError:
        raise EncodeError("$", "nested too deeply") from None


def encoder(term, defs=None):
    """`encode` for one type, made once and used often (the sandbox encodes every Tool argument
    and checkpoint argument with one): `encoder(term, defs)(value) == encode(value, term, defs)`."""
    if type(term) is str and term in _ENC_PRIM:
        prim = _ENC_PRIM[term]

        def encode_prim(value):
            try:
                return prim(value)
            except _Fail as f:
                raise EncodeError(_path(f.segs), f.message) from None

        return encode_prim
    enc = _Encoder(_Types(defs)).enc

    def encode_term(value):
        try:
            return enc(value, term)
        except _Fail as f:
            raise EncodeError(_path(f.segs), f.message) from None
        except RecursionError:
            raise EncodeError("$", "nested too deeply") from None

    return encode_term


def canonical(value, term, defs=None) -> bytes:
    """The canonical JSON text (UTF-8 bytes) of `value` of type `term`."""
    data = encode(value, term, defs)
    try:
        return canonical_json(data)
    except NotJSON as problem:  # what encode builds is JSON data: only too deep a value is not
        raise EncodeError("$", str(problem)) from None


def _describe(v) -> str:
    kind = V.record_type_of(v)
    return f"a {kind.__name__} record" if kind is not None else type(v).__name__


class _Encoder:
    def __init__(self, types: _Types):
        self.types = types

    def enc(self, v, term):
        if type(term) is str:
            f = _ENC_PRIM.get(term)
            if f is None:
                raise TermError(f"unknown built-in type {term!r}")
            return f(v)
        k, a = _split(term)
        if k == "List":
            if type(v) is not tuple and type(v) is not list and type(v) is not ListView:
                raise _Fail(f"expected a List (tuple), found {_describe(v)}")
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(self.enc(x, a))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
            return out
        if k == "Option":
            return self.option(v, a, False)
        if k == "Named":
            return self.named(v, a)
        if k == "Tuple":
            if (type(v) is not tuple and type(v) is not list and type(v) is not ListView) or len(v) != len(a):
                raise _Fail(f"expected a tuple of {len(a)}, found {_describe(v)}")
            out = []
            for i, (x, t) in enumerate(zip(v, a)):
                try:
                    out.append(self.enc(x, t))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
            return out
        if k == "Set":
            if type(v) is not FlowSet:
                if isinstance(v, (set, frozenset)):
                    v = FlowSet(v)
                else:
                    raise _Fail(f"expected a Set (FlowSet), found {_describe(v)}")
            encs = []
            for i, x in enumerate(v):
                try:
                    e = self.enc(x, a)
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
                encs.append((canonical_json(e), e))
            encs.sort(key=_first)
            return [e for _, e in encs]
        if k == "Dict":
            kt, vt = a
            if type(v) is not FlowDict:
                if isinstance(v, dict):
                    v = FlowDict(v.items())
                else:
                    raise _Fail(f"expected a Dict (FlowDict), found {_describe(v)}")
            if kt == "Text":
                out = {}
                for key, x in zip(v.keys(), v.values()):
                    if type(key) is not str:
                        raise _Fail(f"expected a Text key, found {_describe(key)}")
                    try:
                        out[key] = self.enc(x, vt)
                    except _Fail as f:
                        f.segs.append(path_step(key))
                        raise
                return out
            pairs = []
            for i, (key, x) in enumerate(zip(v.keys(), v.values())):
                try:
                    ek = self.enc(key, kt)
                except _Fail as f:
                    f.segs.append(f"[{i}][0]")
                    raise
                try:
                    ex = self.enc(x, vt)
                except _Fail as f:
                    f.segs.append(f"[{i}][1]")
                    raise
                pairs.append((canonical_json(ek), [ek, ex]))
            pairs.sort(key=_first)
            return [p for _, p in pairs]
        if k == "Param":
            raise _Fail(f"the type parameter {a} must be concrete here")
        raise TermError(f"unknown type term {term!r}")

    def option(self, v, inner, tagged):
        if not V.is_option(v):
            raise _Fail(f"expected an Option (Some(x) or NONE), found {_describe(v)}")
        if v[0] == "None":
            return "None" if tagged else None
        x = v[1]
        if tagged:
            try:
                return {"Some": self.enc(x, inner)}
            except _Fail as f:
                f.segs.append(".Some")
                raise
        ii = self.types.option_inner(inner)
        if ii is not None:
            return self.option(x, ii, True)
        if self.types.nullable(inner):
            try:
                return {"Some": self.enc(x, inner)}
            except _Fail as f:
                f.segs.append(".Some")
                raise
        return self.enc(x, inner)

    def named(self, v, key):
        info = self.types.named(key)
        kind = info.kind
        if kind == "record":
            record = V.record_type_of(v)
            if record is None or record.flow_identity != info.identity or len(v) != len(info.fields) + 1:
                raise _Fail(f"expected a {info.name} record, found {v!r:.80}")
            out = {}
            for (name, t), x in zip(info.fields, v[1:]):
                try:
                    out[name] = self.enc(x, t)
                except _Fail as f:
                    f.segs.append(path_step(name))
                    raise
            return out
        if kind == "enum":
            if getattr(type(v), "flow_identity", None) != info.identity or not v:
                raise _Fail(f"expected a {info.name} value, found {v!r:.80}")
            tag = v[0]
            ctor = info.ctors.get(tag)
            if ctor is None:
                raise _Fail(f"{info.name} has no constructor {tag!r}")
            form, payload = ctor
            if form == "bare":
                if len(v) != 1:
                    raise _Fail(f"{tag} takes no payload")
                return tag
            if len(v) != len(payload) + 1:
                raise _Fail(f"{tag} takes {len(payload)} values, found {len(v) - 1}")
            if form == "named":
                out = {}
                for (name, t), x in zip(payload, v[1:]):
                    try:
                        out[name] = self.enc(x, t)
                    except _Fail as f:
                        f.segs.append(path_step(name))
                        f.segs.append(path_step(tag))
                        raise
                return {tag: out}
            if len(payload) == 1:
                try:
                    return {tag: self.enc(v[1], payload[0])}
                except _Fail as f:
                    f.segs.append(path_step(tag))
                    raise
            out = []
            for i, (t, x) in enumerate(zip(payload, v[1:])):
                try:
                    out.append(self.enc(x, t))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    f.segs.append(path_step(tag))
                    raise
            return {tag: out}
        if kind == "host":
            if type(v) is not Token or v.identity != info.identity:
                raise _Fail(f"expected a {info.name} token, found {v!r:.80}")
            return v.token
        if kind == "option":
            return self.option(v, info.inner, False)
        return _enc_json(v)


def _first(p):
    return p[0]


def _enc_int(v):
    if type(v) is not int:
        raise _Fail(f"expected an Int (int), found {_describe(v)}")
    # A computed Int over the limit is a `limit` fault where it leaves the evaluator (the child
    # maps IntOverLimit to one), not a value the host cannot write.
    return checked(v, "an Int")


def _flow_decimal(v, fail):
    """`v` as a FlowDecimal: Flow's own, or a finite `decimal.Decimal` a Python caller hands in
    (converted exactly), else `fail`."""
    if type(v) is FlowDecimal:
        return v
    if isinstance(v, _PyDecimal) and v.is_finite():
        return FlowDecimal(v)
    if fail is EncodeError:
        raise EncodeError("$", f"not a finite number: {v!r:.80}")
    raise fail(f"expected a finite Decimal, found {v!r:.80}")


def _enc_decimal(v):
    if type(v) is FlowDecimal:
        return decimal_text(v)
    return decimal_text(_flow_decimal(v, _Fail))


def _enc_bool(v):
    if type(v) is not bool:
        raise _Fail(f"expected a Bool, found {_describe(v)}")
    return v


def _enc_text(v):
    if type(v) is not str:
        raise _Fail(f"expected a Text (str), found {_describe(v)}")
    return v


def _enc_bytes(v):
    if type(v) is not bytes:
        raise _Fail(f"expected Bytes, found {_describe(v)}")
    return bytes_text(v)


def _enc_unit(v):
    if v is not None:
        raise _Fail(f"expected Unit (None), found {_describe(v)}")
    return None


def _enc_duration(v):
    if type(v) is not Duration:
        raise _Fail(f"expected a Duration, found {_describe(v)}")
    return duration_text(v)


def _enc_instant(v):
    if type(v) is not Instant:
        raise _Fail(f"expected an Instant, found {_describe(v)}")
    try:
        return instant_text(v)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _enc_never(v):
    raise _Fail("no value has type Never")


def _enc_json(v):
    if not V.is_json_value(v):
        raise _Fail(f"expected a json.Value, found {v!r:.80}")
    tag = v[0]
    if tag == "Null":
        return None
    x = v[1]
    if tag == "String":
        if type(x) is not str:
            raise _Fail("json.String holds a str")
        return x
    if tag == "Number":
        if type(x) is not FlowDecimal:
            try:
                x = _flow_decimal(x, _Fail)
            except _Fail:
                raise _Fail("json.Number holds a finite Decimal") from None
        if x.exp < 0 or x.exp > V.DECIMAL_PLAIN_LIMIT:
            return x  # written with a point or an exponent
        return x.to_integral("down")
    if tag == "Bool":
        if type(x) is not bool:
            raise _Fail("json.Bool holds a bool")
        return x
    if tag == "Array":
        out = []
        for i, y in enumerate(x):
            try:
                out.append(_enc_json(y))
            except _Fail as f:
                f.segs.append(f"[{i}]")
                raise
        return out
    if tag == "Object":
        if type(x) is not FlowDict:
            raise _Fail("json.Object holds a FlowDict")
        out = {}
        for k, y in zip(x.keys(), x.values()):
            if type(k) is not str:
                raise _Fail("json.Object keys are str")
            try:
                out[k] = _enc_json(y)
            except _Fail as f:
                f.segs.append(path_step(k))
                raise
        return out
    raise _Fail(f"json.Value has no constructor {tag!r}")


_ENC_PRIM = {
    "Int": _enc_int, "Decimal": _enc_decimal, "Bool": _enc_bool, "Text": _enc_text,
    "Bytes": _enc_bytes, "Unit": _enc_unit, "Duration": _enc_duration, "Instant": _enc_instant,
    "Never": _enc_never, "json.Value": _enc_json,
}


# ---------------------------------------------------------------------------------------------
# Parsing JSON text


def parse_int(s: str):
    """The `parse_int` hook for the standard library's `json`: an int of any size up to the Int
    limit (not CPython's 4,300 digits); a longer one is kept unconverted (no cost), and decoding
    it as an Int then says it is over the limit."""
    if len(s) <= 20:
        return int(s)
    try:
        return text_int(s)
    except V.IntOverLimit:
        return IntText(s)


def _parse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _pairs(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate object key {V.json_string(k)}")
            seen.add(k)
    return d


_DECODER = _stdjson.JSONDecoder(object_pairs_hook=_pairs, parse_float=V.parse_decimal,
                                parse_int=parse_int, parse_constant=_parse_constant)


def parse_json(text) -> object:
    """The JSON data in `text` (str, or UTF-8 bytes), exactly: integers of any size as int,
    other numbers as Decimal. Refuses (DecodeError at `$`) anything that is not one JSON
    document: invalid UTF-8, a byte order mark, NaN or Infinity, duplicate object keys."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError("$", f"not UTF-8: {e.reason} at byte {e.start}") from None
    elif type(text) is not str:
        raise TypeError("parse_json takes str or bytes")
    try:
        return _DECODER.decode(text)
    except _stdjson.JSONDecodeError as e:
        raise DecodeError("$", f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise DecodeError("$", "not accepted: JSON nested too deeply") from None
    except ValueError as e:
        raise DecodeError("$", f"not JSON: {e}") from None


# ---------------------------------------------------------------------------------------------
# Decoding


def decode(json_obj, term, defs=None):
    """The value of type `term` that the JSON data `json_obj` encodes, or DecodeError."""
    return _decode(json_obj, term, _Types(defs), "$")


def decoder(term, defs=None):
    """`decode` for one type, made once and used often: `decoder(term, defs)(j) == decode(j, term,
    defs)`, raising the same DecodeError."""
    types = _Types(defs)
    return lambda json_obj: _decode(json_obj, term, types, "$")


def decode_text(text, term, defs=None):
    """`decode(parse_json(text), term, defs)`: JSON text in any layout, decoded against `term`."""
    return decode(parse_json(text), term, defs)


def _decode(json_obj, term, types, prefix):
    try:
        return _Decoder(types).dec(json_obj, term)
    except _Fail as f:
        raise DecodeError(_path(f.segs, prefix), f.message) from None
    except RecursionError:
        raise DecodeError(prefix, "nested too deeply") from None


def _found(j) -> str:
    t = type(j)
    if j is None:
        return "null"
    if t is bool:
        return "true" if j else "false"
    if t is int:
        return f"the integer {j}" if -10**20 < j < 10**20 else "an integer"
    if t is IntText:
        return "an integer"
    if t is float or t is FlowDecimal:
        return f"the number {j}" if len(str(j)) <= 40 else "a number"
    if t is str:
        return f"the string {V.json_string(j)}" if len(j) <= 40 else "a string"
    if t is list or t is tuple:
        return "an array"
    if t is dict:
        return "an object"
    return f"a {t.__name__}"


class _Decoder:
    def __init__(self, types: _Types):
        self.types = types

    def dec(self, j, term):
        if type(term) is str:
            f = _DEC_PRIM.get(term)
            if f is None:
                raise TermError(f"unknown built-in type {term!r}")
            return f(j)
        k, a = _split(term)
        if k == "List":
            if type(j) is not list and type(j) is not tuple:
                raise _Fail(f"expected an array, found {_found(j)}")
            out = []
            for i, x in enumerate(j):
                try:
                    out.append(self.dec(x, a))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
            return tuple(out)
        if k == "Option":
            return self.option(j, a, False)
        if k == "Named":
            return self.named(j, a)
        if k == "Tuple":
            if type(j) is not list and type(j) is not tuple:
                raise _Fail(f"expected an array of {len(a)} items, found {_found(j)}")
            if len(j) != len(a):
                raise _Fail(f"expected an array of {len(a)} items, found {len(j)} items")
            out = []
            for i, (x, t) in enumerate(zip(j, a)):
                try:
                    out.append(self.dec(x, t))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
            return tuple(out)
        if k == "Set":
            if type(j) is not list and type(j) is not tuple:
                raise _Fail(f"expected an array (a set), found {_found(j)}")
            entries = []
            for i, x in enumerate(j):
                try:
                    v = self.dec(x, a)
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
                entries.append((order_key(v), i, v))
            entries.sort(key=_first)
            for n in range(1, len(entries)):
                if entries[n][0] == entries[n - 1][0]:
                    i, first = sorted((entries[n][1], entries[n - 1][1]))
                    raise _Fail(f"duplicate set element (equal to the element at index {i})", f"[{first}]")
            return FlowSet._make(tuple(e[0] for e in entries), tuple(e[2] for e in entries))
        if k == "Dict":
            kt, vt = a
            if kt == "Text":
                if type(j) is not dict:
                    raise _Fail(f"expected an object (a Dict with Text keys), found {_found(j)}")
                for key in j:
                    if type(key) is not str:
                        raise _Fail(f"expected string keys, found {key!r:.40}")
                ks = sorted(j)
                vs = []
                for key in ks:
                    if _SURROGATE.search(key):
                        raise _Fail("a key holds a lone surrogate (not Unicode text)", path_step(key))
                    try:
                        vs.append(self.dec(j[key], vt))
                    except _Fail as f:
                        f.segs.append(path_step(key))
                        raise
                ks = tuple(ks)
                return FlowDict._make(ks, ks, tuple(vs))
            if type(j) is not list and type(j) is not tuple:
                raise _Fail(f"expected an array of [key, value] pairs, found {_found(j)}")
            entries = []
            for i, p in enumerate(j):
                if (type(p) is not list and type(p) is not tuple) or len(p) != 2:
                    raise _Fail(f"expected a [key, value] pair, found {_found(p)}"
                                if type(p) is not list else
                                f"expected a [key, value] pair, found {len(p)} items", f"[{i}]")
                try:
                    kv = self.dec(p[0], kt)
                except _Fail as f:
                    f.segs.append(f"[{i}][0]")
                    raise
                try:
                    vv = self.dec(p[1], vt)
                except _Fail as f:
                    f.segs.append(f"[{i}][1]")
                    raise
                entries.append((order_key(kv), i, kv, vv))
            entries.sort(key=_first)
            for n in range(1, len(entries)):
                if entries[n][0] == entries[n - 1][0]:
                    i, first = sorted((entries[n][1], entries[n - 1][1]))
                    raise _Fail(f"duplicate key (equal to the key at index {i})", f"[{first}][0]")
            return FlowDict._make(tuple(e[0] for e in entries), tuple(e[2] for e in entries),
                                  tuple(e[3] for e in entries))
        if k == "Param":
            raise _Fail(f"cannot decode the type parameter {a}: the type must be concrete")
        raise TermError(f"unknown type term {term!r}")

    def option(self, j, inner, tagged):
        if tagged:
            if j == "None" and type(j) is str:
                return NONE
            if type(j) is dict and len(j) == 1 and "Some" in j:
                try:
                    return V.some(self.dec(j["Some"], inner))
                except _Fail as f:
                    f.segs.append(".Some")
                    raise
            raise _Fail(f'expected "None" or {{"Some": ...}} (an Option inside an Option), found {_found(j)}')
        if j is None:
            return NONE
        ii = self.types.option_inner(inner)
        if ii is not None:
            return V.some(self.option(j, ii, True))
        if self.types.nullable(inner):
            if type(j) is dict and len(j) == 1 and "Some" in j:
                try:
                    return V.some(self.dec(j["Some"], inner))
                except _Fail as f:
                    f.segs.append(".Some")
                    raise
            raise _Fail(f'expected null or {{"Some": ...}}, found {_found(j)}')
        return V.some(self.dec(j, inner))

    def fields(self, j, fields, names, what, noun="field"):
        """Decode the members of object `j` against `fields`; `what` names the record in messages."""
        if type(j) is not dict:
            raise _Fail(f"expected an object ({what}), found {_found(j)}")
        if len(j) != len(fields) or not names.issuperset(j):
            extra = sorted((k for k in j if k not in names), key=str)
            if extra:
                key = extra[0]
                declared = ", ".join(n for n, _ in fields) or "none"
                shown = V.json_string(key) if type(key) is str else repr(key)
                raise _Fail(f"{what} has no {noun} {shown} (its {noun}s: {declared})",
                            path_step(key) if type(key) is str else None)
        out = []
        for name, t in fields:
            try:
                x = j[name]
            except KeyError:
                raise _Fail(f"missing {noun} \"{name}\" of {what}") from None
            try:
                out.append(self.dec(x, t))
            except _Fail as f:
                f.segs.append(path_step(name))
                raise
        return out

    def named(self, j, key):
        info = self.types.named(key)
        kind = info.kind
        if kind == "record":
            return (info.cls.tag, *self.fields(j, info.fields, info.names, info.name))
        if kind == "enum":
            return self.enum(j, info)
        if kind == "host":
            if type(j) is not str:
                raise _Fail(f"expected a {info.name} token (a string), found {_found(j)}")
            if _SURROGATE.search(j):
                raise _Fail("the token holds a lone surrogate (not Unicode text)")
            return Token(info.identity, j)
        if kind == "option":
            return self.option(j, info.inner, False)
        return _dec_json(j)

    def enum(self, j, info):
        def unknown(tag):
            shown = V.json_string(tag) if type(tag) is str else repr(tag)
            return _Fail(f"{info.name} has no constructor {shown}"
                         f" (its constructors: {', '.join(info.tags)})")

        if type(j) is str:
            ctor = info.ctors.get(j)
            if ctor is None:
                raise unknown(j)
            if ctor[0] != "bare":
                raise _Fail(f"{j} of {info.name} carries a payload: write {{{V.json_string(j)}: ...}}")
            return info.cls.flow_bare[j]
        if type(j) is not dict:
            raise _Fail(f"expected a {info.name}: \"Ctor\" or {{\"Ctor\": payload}}, found {_found(j)}")
        if len(j) != 1:
            raise _Fail(f"expected a {info.name}: an object with exactly one constructor, found {len(j)} members")
        for tag, p in j.items():
            pass
        ctor = info.ctors.get(tag)
        if ctor is None:
            raise unknown(tag)
        form, payload = ctor
        cls = info.cls
        if form == "bare":
            raise _Fail(f"{tag} of {info.name} takes no payload: write {V.json_string(tag)}")
        try:
            if form == "named":
                names = frozenset(n for n, _ in payload)
                vals = self.fields(p, payload, names, f"{info.name}.{tag}")
                return tuple.__new__(cls, [tag, *vals])
            if len(payload) == 1:
                return tuple.__new__(cls, (tag, self.dec(p, payload[0])))
            if type(p) is not list and type(p) is not tuple:
                raise _Fail(f"expected an array of {len(payload)} items ({tag}'s payload), found {_found(p)}")
            if len(p) != len(payload):
                raise _Fail(f"expected an array of {len(payload)} items ({tag}'s payload), found {len(p)} items")
            vals = [tag]
            for i, (x, t) in enumerate(zip(p, payload)):
                try:
                    vals.append(self.dec(x, t))
                except _Fail as f:
                    f.segs.append(f"[{i}]")
                    raise
            return tuple.__new__(cls, vals)
        except _Fail as f:
            f.segs.append(path_step(tag))
            raise


def _dec_int(j):
    t = type(j)
    if t is int:
        if over_limit(j):
            raise _Fail(f"integer over the limit of {V.MAX_INT_DIGITS} digits")
        return j
    if t is IntText:
        raise _Fail(f"integer over the limit of {V.MAX_INT_DIGITS} digits")
    if t is float or t is FlowDecimal:
        raise _Fail(f"expected an integer, found {_found(j)}")
    raise _Fail(f"expected an integer, found {_found(j)}")


def _dec_decimal(j):
    if type(j) is not str:
        raise _Fail(f'expected a Decimal as a string like "1.5", found {_found(j)}')
    try:
        return V.parse_decimal(j)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _dec_bool(j):
    if type(j) is not bool:
        raise _Fail(f"expected true or false, found {_found(j)}")
    return j


def _dec_text(j):
    if type(j) is not str:
        raise _Fail(f"expected a string, found {_found(j)}")
    if _SURROGATE.search(j):
        raise _Fail("the string holds a lone surrogate (not Unicode text)")
    return j


def _dec_bytes(j):
    if type(j) is not str:
        raise _Fail(f"expected base64 bytes (a string), found {_found(j)}")
    try:
        return V.parse_bytes(j)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _dec_unit(j):
    if j is not None:
        raise _Fail(f"expected null (Unit), found {_found(j)}")
    return None


def _dec_duration(j):
    if type(j) is not str:
        raise _Fail(f'expected a duration string like "PT1.5S", found {_found(j)}')
    try:
        return V.parse_duration(j)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _dec_instant(j):
    if type(j) is not str:
        raise _Fail(f'expected an RFC 3339 string like "2026-01-01T00:00:00Z", found {_found(j)}')
    try:
        return V.parse_instant(j)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _dec_never(j):
    raise _Fail("no value has type Never")


_J_NULL = JSON_VALUE.flow_bare["Null"]
_new = tuple.__new__


def _dec_json(j):
    t = type(j)
    if j is None:
        return _J_NULL
    if t is str:
        if _SURROGATE.search(j):
            raise _Fail("the string holds a lone surrogate (not Unicode text)")
        return _new(JSON_VALUE, ("String", j))
    if t is bool:
        return _new(JSON_VALUE, ("Bool", j))
    if t is int:
        return _new(JSON_VALUE, ("Number", FlowDecimal(j)))
    if t is dict:
        for key in j:
            if type(key) is not str:
                raise _Fail(f"object keys are strings, found {key!r:.40}")
        ks = sorted(j)
        vs = []
        for key in ks:
            if _SURROGATE.search(key):
                raise _Fail("a key holds a lone surrogate (not Unicode text)", path_step(key))
            try:
                vs.append(_dec_json(j[key]))
            except _Fail as f:
                f.segs.append(path_step(key))
                raise
        ks = tuple(ks)
        return _new(JSON_VALUE, ("Object", FlowDict._make(ks, ks, tuple(vs))))
    if t is list or t is tuple:
        out = []
        for i, x in enumerate(j):
            try:
                out.append(_dec_json(x))
            except _Fail as f:
                f.segs.append(f"[{i}]")
                raise
        return _new(JSON_VALUE, ("Array", tuple(out)))
    if t is float:
        if j != j or j in (float("inf"), float("-inf")):
            raise _Fail("NaN and infinities are not JSON numbers")
        return _new(JSON_VALUE, ("Number", V.parse_decimal(repr(j))))
    if t is FlowDecimal:
        return _new(JSON_VALUE, ("Number", j))
    if t is IntText:
        try:
            return _new(JSON_VALUE, ("Number", V.parse_decimal(j.text)))
        except ValueError as e:
            raise _Fail(str(e)) from None
    if isinstance(j, _PyDecimal):
        if not j.is_finite():
            raise _Fail("NaN and infinities are not JSON numbers")
        try:
            return _new(JSON_VALUE, ("Number", FlowDecimal(j)))
        except ValueError as e:
            raise _Fail(str(e)) from None
    raise _Fail(f"not JSON data: {t.__name__}")


_DEC_PRIM = {
    "Int": _dec_int, "Decimal": _dec_decimal, "Bool": _dec_bool, "Text": _dec_text,
    "Bytes": _dec_bytes, "Unit": _dec_unit, "Duration": _dec_duration, "Instant": _dec_instant,
    "Never": _dec_never, "json.Value": _dec_json,
}


# ---------------------------------------------------------------------------------------------
# Arguments (run input, Call facts) and outcomes (replies)


def _param(p):
    if isinstance(p, dict):
        return p["name"], p["type"]
    name, t = p
    return name, t


def decode_arguments(json_obj, params, defs=None) -> tuple:
    """The argument values (in parameter order) that a JSON object keyed by parameter name
    encodes. `params` is `[{"name", "type"}, ...]` (as `flow tools` lists them) or `(name, term)`
    pairs. Every parameter is required; a member that names no parameter is a DecodeError."""
    ps = [_param(p) for p in params]
    names = frozenset(n for n, _ in ps)
    types = _Types(defs)
    try:
        return tuple(_Decoder(types).fields(json_obj, ps, names, "the input", "parameter"))
    except _Fail as f:
        raise DecodeError(_path(f.segs), f.message) from None
    except RecursionError:
        raise DecodeError("$", "nested too deeply") from None


def encode_arguments(values, params, defs=None) -> dict:
    """The JSON object keyed by parameter name that encodes `values` (in parameter order)."""
    ps = [_param(p) for p in params]
    if len(values) != len(ps):
        raise EncodeError("$", f"expected {len(ps)} arguments, found {len(values)}")
    enc = _Encoder(_Types(defs))
    out = {}
    for (name, t), v in zip(ps, values):
        try:
            out[name] = enc.enc(v, t)
        except _Fail as f:
            f.segs.append(path_step(name))
            raise EncodeError(_path(f.segs), f.message) from None
    return out


_TEXT_PROBLEMS = ("NotRun", "Unknown", "BadReply")


def decode_outcome(json_obj, ok_term, err_term, defs=None):
    """The Result that a Tool reply's outcome encodes: `Ok(v)`, or `Err(problem)` holding a
    ToolProblem (`Failed(e)`, `NotRun(t)`, `Unknown(t)`, `BadReply(t)`).

    An outcome is `{"Ok": v}` or `{"Err": {"Failed": e}}` / `{"Err": {"NotRun": "text"}}` (also
    Unknown, BadReply). Anything else raises NotAnOutcome. A `v` or `e` that does not decode
    against `ok_term` / `err_term` gives `Err(BadReply("<path>: <message>"))` (paths start at the
    outcome: `$.Ok.notes[2]`). `err_term` is None for a Tool declared without Result, whose
    replies cannot be `Failed` (such a reply is a BadReply too).
    """
    return _decode_outcome(json_obj, ok_term, err_term, _Types(defs))


def outcome_decoder(ok_term, err_term, defs=None):
    """`decode_outcome` for one Tool, made once and used for every reply."""
    types = _Types(defs)
    return lambda json_obj: _decode_outcome(json_obj, ok_term, err_term, types)


def _decode_outcome(json_obj, ok_term, err_term, types):
    if type(json_obj) is not dict or len(json_obj) != 1:
        raise NotAnOutcome('an outcome is {"Ok": value} or {"Err": problem}, found '
                           + _found(json_obj) + (f" with {len(json_obj)} members" if type(json_obj) is dict else ""))
    for tag, p in json_obj.items():
        pass
    if tag == "Ok":
        try:
            return V.ok(_decode(p, ok_term, types, "$.Ok"))
        except DecodeError as e:
            return V.err(V.bad_reply(f"{e.path}: {e.message}"))
    if tag != "Err":
        raise NotAnOutcome(f'an outcome is {{"Ok": value}} or {{"Err": problem}}, found {V.json_string(tag)}')
    if type(p) is not dict or len(p) != 1:
        raise NotAnOutcome('an Err outcome holds one problem: {"Failed": e}, {"NotRun": "why"}, '
                           '{"Unknown": "why"} or {"BadReply": "why"}')
    for ptag, pv in p.items():
        pass
    if ptag in _TEXT_PROBLEMS:
        if type(pv) is not str or _SURROGATE.search(pv):
            raise NotAnOutcome(f"{ptag} carries a text (a JSON string)")
        return V.err(V.TOOL_PROBLEM.make(ptag, pv))
    if ptag != "Failed":
        raise NotAnOutcome(f"unknown problem {V.json_string(ptag)}: expected Failed, NotRun, Unknown or BadReply")
    if err_term is None:
        return V.err(V.bad_reply("$.Err.Failed: this tool is not declared with Result, so it has no error to fail with"))
    try:
        return V.err(V.failed(_decode(pv, err_term, types, "$.Err.Failed")))
    except DecodeError as e:
        return V.err(V.bad_reply(f"{e.path}: {e.message}"))


def encode_outcome(result, ok_term, err_term, defs=None):
    """The outcome JSON data of a Result whose Err holds a ToolProblem (see decode_outcome)."""
    return _encode_outcome(result, ok_term, err_term, _Encoder(_Types(defs)))


def outcome_encoder(ok_term, err_term, defs=None):
    """`encode_outcome` for one Tool, made once and used for every reply."""
    enc = _Encoder(_Types(defs))
    return lambda result: _encode_outcome(result, ok_term, err_term, enc)


def _encode_outcome(result, ok_term, err_term, enc):
    if getattr(type(result), "flow_identity", None) != RESULT_ID or len(result) != 2:
        raise EncodeError("$", f"expected a Result, found {result!r:.80}")
    tag, x = result
    if tag == "Ok":
        try:
            return {"Ok": enc.enc(x, ok_term)}
        except _Fail as f:
            raise EncodeError(_path(f.segs, "$.Ok"), f.message) from None
    if getattr(type(x), "flow_identity", None) != TOOL_PROBLEM_ID or len(x) != 2:
        raise EncodeError("$.Err", f"expected a ToolProblem, found {x!r:.80}")
    ptag, pv = x
    if ptag in _TEXT_PROBLEMS:
        if type(pv) is not str:
            raise EncodeError(f"$.Err.{ptag}", "expected a Text")
        return {"Err": {ptag: pv}}
    if err_term is None:
        raise EncodeError("$.Err.Failed", "this tool is not declared with Result: it cannot fail with an error")
    try:
        return {"Err": {"Failed": enc.enc(pv, err_term)}}
    except _Fail as f:
        raise EncodeError(_path(f.segs, "$.Err.Failed"), f.message) from None
