"""JSON Schema (2020-12) of a type term's encoding (docs/abi.md, "Schemas"), for the host's
tools and documentation: it describes what `flowdata.codec` writes and reads, and lives on the
host's side because the sandbox child never needs it.
"""

from __future__ import annotations

from urllib.parse import quote as _quote

# The codec's own view of type terms (private there: one reading of `defs`, shared by the two).
from flowdata.codec import BUILTIN_TYPES, TermError, _Named, _split, _Types

__all__ = ["SCHEMA_DIALECT", "DECIMAL_PATTERN", "DURATION_PATTERN", "INSTANT_PATTERN", "BASE64_PATTERN",
           "schema", "outcome_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DECIMAL_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
DURATION_PATTERN = (r"^[+-]?P(?=[0-9]|T[0-9])([0-9]+D)?"
                    r"(T(?=[0-9])([0-9]+H)?([0-9]+M)?([0-9]+(\.[0-9]{1,9})?S)?)?$")
INSTANT_PATTERN = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
                   r"([Zz]|[+-][0-9]{2}:[0-9]{2})$")
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

_PRIM_SCHEMA = {
    "Int": {"type": "integer"},
    "Decimal": {"type": "string", "pattern": DECIMAL_PATTERN},
    "Bool": {"type": "boolean"},
    "Text": {"type": "string"},
    "Bytes": {"type": "string", "contentEncoding": "base64", "pattern": BASE64_PATTERN},
    "Unit": {"type": "null"},
    "Duration": {"type": "string", "format": "duration", "pattern": DURATION_PATTERN},
    "Instant": {"type": "string", "format": "date-time", "pattern": INSTANT_PATTERN},
    "Never": {"not": {}},
    "json.Value": {},
}


def _ref(key: str) -> str:
    pointer = str(key).replace("~", "~0").replace("/", "~1")
    return "#/$defs/" + _quote(pointer, safe="!$&'()*+,;=:@-._~")


def _some_object(s):
    return {"type": "object", "properties": {"Some": s}, "required": ["Some"],
            "additionalProperties": False}


def _with_doc(s: dict, doc) -> dict:
    if doc:
        s = dict(s)
        s["description"] = doc
    return s


class _SchemaBuilder:
    def __init__(self, types: _Types):
        self.types = types
        self.defs: dict = {}

    def term(self, term) -> dict:
        if type(term) is str:
            s = _PRIM_SCHEMA.get(term)
            if s is None:
                raise TermError(f"unknown built-in type {term!r}")
            return dict(s)
        k, a = _split(term)
        if k == "List":
            return {"type": "array", "items": self.term(a)}
        if k == "Set":
            return {"type": "array", "items": self.term(a), "uniqueItems": True}
        if k == "Option":
            return self.option(a, False)
        if k == "Tuple":
            return {"type": "array", "prefixItems": [self.term(t) for t in a], "items": False,
                    "minItems": len(a), "maxItems": len(a)}
        if k == "Dict":
            kt, vt = a
            if kt == "Text":
                return {"type": "object", "additionalProperties": self.term(vt)}
            return {"type": "array", "items": {
                "type": "array", "prefixItems": [self.term(kt), self.term(vt)], "items": False,
                "minItems": 2, "maxItems": 2}}
        if k == "Named":
            info = self.types.named(a)
            if info.kind == "option":
                return self.option(info.inner, False)
            if info.kind == "json":
                return {}
            if a not in self.defs:
                self.defs[a] = None  # being built: recursive references stop here
                self.defs[a] = self.declaration(info)
            return {"$ref": _ref(a)}
        if k == "Param":
            return {"$comment": f"type parameter {a}: any data"}
        raise TermError(f"unknown type term {term!r}")

    def option(self, inner, tagged) -> dict:
        if tagged:
            return {"anyOf": [{"const": "None"}, _some_object(self.term(inner))]}
        ii = self.types.option_inner(inner)
        if ii is not None:
            return {"anyOf": [{"type": "null"}, self.option(ii, True)]}
        if self.types.nullable(inner):
            return {"anyOf": [{"type": "null"}, _some_object(self.term(inner))]}
        return {"anyOf": [{"type": "null"}, self.term(inner)]}

    def fields(self, fields) -> dict:
        return {
            "type": "object",
            "properties": {f["name"]: _with_doc(self.term(f["type"]), f.get("doc")) for f in fields},
            "required": [f["name"] for f in fields],
            "additionalProperties": False,
        }

    def declaration(self, info: _Named) -> dict:
        d = info.defn
        (k, body), = d["kind"].items()
        head = {"title": info.name}
        if info.doc:
            head["description"] = info.doc
        if info.kind == "record":
            return {**head, **self.fields(body["fields"])}
        if info.kind == "host":
            return {**head, "type": "string"}
        shapes = []
        for c in body["ctors"]:
            name, p = c["name"], c.get("payload")
            if p is None:
                s = {"const": name}
            else:
                if "positional" in p:
                    ts = p["positional"]
                    inner = self.term(ts[0]) if len(ts) == 1 else self.term({"Tuple": ts})
                else:
                    inner = self.fields(p["named"])
                s = {"type": "object", "properties": {name: inner}, "required": [name],
                     "additionalProperties": False}
            shapes.append(_with_doc(s, c.get("doc")))
        return {**head, "oneOf": shapes}


def schema(term, defs=None) -> dict:
    """A JSON Schema (2020-12) for the encoding of `term`: declared types under `$defs` by their
    defs key, referenced as `{"$ref": "#/$defs/<key>"}`. A type parameter allows any data."""
    b = _SchemaBuilder(_Types(defs))
    body = b.term(term)
    out = {"$schema": SCHEMA_DIALECT}
    out.update(body)
    if b.defs:
        out["$defs"] = {k: b.defs[k] for k in sorted(b.defs)}
    return out


def outcome_schema(ok_term, err_term, defs=None) -> dict:
    """A JSON Schema (2020-12) for a Tool's reply, the outcome `{"Ok": v}` or `{"Err": problem}`
    (docs/abi.md §6): what an implementation must answer. `err_term` None: a Tool declared
    without Result, whose problems cannot be `Failed`."""
    b = _SchemaBuilder(_Types(defs))
    problems = [{"type": "object", "properties": {kind: {"type": "string"}}, "required": [kind],
                 "additionalProperties": False} for kind in ("NotRun", "Unknown", "BadReply")]
    if err_term is not None:
        problems.insert(0, {"type": "object", "properties": {"Failed": b.term(err_term)}, "required": ["Failed"],
                            "additionalProperties": False})
    out = {"$schema": SCHEMA_DIALECT, "oneOf": [
        {"type": "object", "properties": {"Ok": b.term(ok_term)}, "required": ["Ok"], "additionalProperties": False},
        {"type": "object", "properties": {"Err": {"oneOf": problems}}, "required": ["Err"],
         "additionalProperties": False}]}
    if b.defs:
        out["$defs"] = {k: b.defs[k] for k in sorted(b.defs)}
    return out
