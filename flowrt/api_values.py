"""Flow values as an application sees them through the Python API (docs/api.md §Values).

`from_json` turns a value's canonical JSON data into plain Python by its type term: Int → `int`,
Decimal → `decimal.Decimal`, Text → `str`, Bool → `bool`, Bytes → `bytes`, Unit → `None`,
Duration and Instant → their canonical texts (`"PT0.25S"`, `"2026-01-01T00:00:00Z"`: Python's
timedelta and datetime stop at microseconds, Flow's at nanoseconds), List → `list`, Tuple →
`tuple`, Set → `list` (in canonical order), Dict → `dict` when its keys are Text, Int, Bool or
Decimal, else a `list` of `(key, value)` tuples, records → `dict` by field name, enums →
`Variant(tag, payload)`, Option → `None` or the value (`Variant("Some", v)` where the value could
itself read as `None`: Unit, json.Value; an Option inside an Option as `Variant("None")` or
`Variant("Some", v)`), json.Value → JSON data, a host type → its token text.

`to_json` goes the other way, for an input or a supplied reply (which is then decoded against the
declared types, refusing what does not fit): `Variant` → the enum's encoding, `decimal.Decimal` →
its text (Flow's Decimal), `float` → a JSON number, `bytes` → base64, tuples and sets → arrays, a
dict → an object, or `[key, value]` pairs for a Dict whose keys are not Text. Given the type (a
reply's), it writes what only the type can say: an empty Dict with Int keys, a tagged Option.
"""

from __future__ import annotations

import base64
import decimal
from dataclasses import dataclass
from typing import Any

from flowdata.codec import _split, _Types
from flowdata.flowdecimal import FlowDecimal

#: the key types whose Python values are hashable and compare as Flow compares them
_DICT_KEYS = ("Text", "Int", "Bool", "Decimal")


@dataclass(frozen=True)
class Variant:
    """A value of a Flow enum: its constructor's name, and its payload (None for a constructor
    without one; the value for one positional payload; a tuple for several; a dict by field
    name for a named payload). `Variant("Approve")`, `Variant("Search", "safari cookie")`."""

    tag: str
    payload: Any = None


def from_json(data: Any, term: Any, defs: dict | None = None) -> Any:
    """The plain Python form of `data`, the canonical JSON data of a value of type `term`."""
    return _Reader(_Types(defs or {})).read(data, term)


class _Reader:
    def __init__(self, types: _Types) -> None:
        self.types = types

    def read(self, data: Any, term: Any) -> Any:
        if type(term) is str:
            return self.builtin(data, term)
        kind, arg = _split(term)
        if kind == "List":
            return [self.read(x, arg) for x in data]
        if kind == "Set":
            return [self.read(x, arg) for x in data]
        if kind == "Tuple":
            return tuple(self.read(x, t) for x, t in zip(data, arg))
        if kind == "Dict":
            key, value = arg
            if key == "Text":
                return {k: self.read(v, value) for k, v in data.items()}
            pairs = [(self.read(k, key), self.read(v, value)) for k, v in data]
            return dict(pairs) if key in _DICT_KEYS else pairs
        if kind == "Option":
            return self.option(data, arg)
        if kind == "Named":
            return self.named(data, arg)
        return _plain(data)  # a type parameter: any data, as it came

    def builtin(self, data: Any, term: str) -> Any:
        if term == "Decimal":
            return decimal.Decimal(data)
        if term == "Bytes":
            return base64.b64decode(data)
        if term == "json.Value":
            return _plain(data)
        return data  # Int, Bool, Text, Unit (None), and the canonical texts of Duration and Instant

    def option(self, data: Any, inner: Any, tagged: bool = False) -> Any:
        # As the codec reads them: an Option inside an Option is tagged ("None", {"Some": v}),
        # and so is a Some whose value could itself be null; tagged on the wire, tagged here.
        if tagged:
            if data == "None":
                return Variant("None")
            return Variant("Some", self.read(data["Some"], inner))
        if data is None:
            return None
        inner_inner = self.types.option_inner(inner)
        if inner_inner is not None:
            return self.option(data, inner_inner, True)
        if self.types.nullable(inner):
            return Variant("Some", self.read(data["Some"], inner))
        return self.read(data, inner)

    def named(self, data: Any, key: str) -> Any:
        info: Any = self.types.named(key)  # (its attributes are set per kind: see flowdata.codec._Types)
        if info.kind == "option":
            return self.option(data, info.inner)
        if info.kind == "json":
            return _plain(data)
        if info.kind == "record":
            return {name: self.read(data[name], t) for name, t in info.fields}
        if info.kind == "host":
            return data
        if isinstance(data, str):
            return Variant(data)
        (tag, body), = data.items()
        form, payload = info.ctors[tag]
        if form == "named":
            return Variant(tag, {name: self.read(body[name], t) for name, t in payload})
        if len(payload) == 1:
            return Variant(tag, self.read(body, payload[0]))
        return Variant(tag, tuple(self.read(x, t) for x, t in zip(body, payload)))


def _plain(data: Any) -> Any:
    """JSON data with Flow's exact decimals as `decimal.Decimal`."""
    if isinstance(data, FlowDecimal):
        return decimal.Decimal(str(data))
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data


def to_json(value: Any, term: Any = None, defs: dict | None = None) -> Any:
    """JSON data for a Python value given as an input or a reply; TypeError for what has none.
    With its type `term`, the value is written as that type encodes (an empty Dict with Int keys
    is `[]`, an Option inside an Option tagged); what does not have the shape of `term` is
    written untyped, for the decoder to refuse with its path."""
    if term is not None:
        return _Writer(_Types(defs or {})).write(value, term)
    return _untyped(value)


class _Writer:
    def __init__(self, types: _Types) -> None:
        self.types = types

    def write(self, value: Any, term: Any) -> Any:
        if type(term) is str:
            return _untyped(value)  # scalars (Decimal as its text, Bytes as base64) and json.Value
        kind, arg = _split(term)
        if kind in ("List", "Set") and isinstance(value, (list, tuple, set, frozenset)):
            return [self.write(x, arg) for x in value]
        if kind == "Tuple" and isinstance(value, (list, tuple)) and len(value) == len(arg):
            return [self.write(x, t) for x, t in zip(value, arg)]
        if kind == "Dict":
            key, item = arg
            pairs = list(value.items()) if isinstance(value, dict) else value if isinstance(value, list) else None
            if pairs is not None and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
                if key == "Text":
                    return {k: self.write(v, item) for k, v in pairs}
                return [[self.write(k, key), self.write(v, item)] for k, v in pairs]
        if kind == "Option":
            return self.option(value, arg)
        if kind == "Named":
            return self.named(value, arg)
        return _untyped(value)

    def option(self, value: Any, inner: Any, tagged: bool = False) -> Any:
        if tagged:
            if isinstance(value, Variant) and value.tag == "None":
                return "None"
            if isinstance(value, Variant) and value.tag == "Some":
                return {"Some": self.write(value.payload, inner)}
            return _untyped(value)
        if value is None:
            return None
        inner_inner = self.types.option_inner(inner)
        if inner_inner is not None:
            return self.option(value, inner_inner, True)
        if self.types.nullable(inner):
            if isinstance(value, Variant) and value.tag == "Some":
                return {"Some": self.write(value.payload, inner)}
            return _untyped(value)
        return self.write(value, inner)

    def named(self, value: Any, key: str) -> Any:
        info: Any = self.types.named(key)  # (its attributes are set per kind: see flowdata.codec._Types)
        if info.kind == "option":
            return self.option(value, info.inner)
        if info.kind == "record" and isinstance(value, dict):
            fields = dict(info.fields)
            return {k: self.write(v, fields[k]) if k in fields else _untyped(v) for k, v in value.items()}
        if info.kind == "enum" and isinstance(value, Variant) and value.tag in info.ctors:
            form, payload = info.ctors[value.tag]
            if form == "bare":
                return value.tag
            if form == "named" and isinstance(value.payload, dict):
                fields = dict(payload)
                return {value.tag: {k: self.write(v, fields[k]) if k in fields else _untyped(v)
                                    for k, v in value.payload.items()}}
            if form == "positional" and len(payload) == 1:
                return {value.tag: self.write(value.payload, payload[0])}
            if form == "positional" and isinstance(value.payload, tuple) and len(value.payload) == len(payload):
                return {value.tag: [self.write(v, t) for v, t in zip(value.payload, payload)]}
        return _untyped(value)


def _untyped(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Variant):
        if value.payload is None:
            return value.tag
        if isinstance(value.payload, tuple):
            return {value.tag: [_untyped(v) for v in value.payload]}
        return {value.tag: _untyped(value.payload)}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return decimal.Decimal(repr(value))
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return [_untyped(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_untyped(v) for v in value]  # the decoder puts a Set in its canonical order
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _untyped(v) for k, v in value.items()}
        return [[_untyped(k), _untyped(v)] for k, v in value.items()]
    raise TypeError(f"{type(value).__name__} is not a value a reply can carry")
