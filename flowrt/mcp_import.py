"""`flow tools import-mcp`: a `.flow` module declaring an MCP server's tools, their types derived
from the tools' JSON Schemas (DESIGN.md §3).

inputSchema properties are the parameters (in the schema's order; not required, or nullable:
`Option`); outputSchema is the Ok type (the SDK's `{"result": v}` wrapping of a non-object return
is unwrapped, as `flowrt.mcp_tools` unwraps the reply); a tool without one answers its text
content, declared `Text`. Every Tool is `Result<Ok, Text>`: the error is the server's text.
Schemas map as: object with properties -> a record type (named by its title, else by the tool
and the field), string enum whose constants are Flow constructor names -> an enum type, string
-> Text, integer -> Int, number -> Decimal, boolean -> Bool, array -> List, object with only
`additionalProperties` -> Dict<Text, V>, `anyOf` of a type and null -> Option, `$ref` -> its
`$defs` entry; anything else (and a record whose property names Flow cannot spell) -> json.Value.
"""

from __future__ import annotations

import re
from typing import Any

from flowrt.mcp_tools import WORDS as _WORDS
from flowrt.mcp_tools import _wraps_result, flow_name
_BUILTIN_TYPES = frozenset({"Int", "Decimal", "Bool", "Text", "Bytes", "Duration", "Instant", "Unit", "Never",
                            "List", "Set", "Option", "Dict", "Result", "Tuple", "Some", "None", "Ok", "Err"})
_IDENT = re.compile(r"[a-z_][A-Za-z0-9_]*\Z")
_CTOR = re.compile(r"[A-Z][A-Za-z0-9_]*\Z")


class _Module:
    def __init__(self) -> None:
        self.types: dict[str, str] = {}  # type name -> its declaration text
        self.uses_json = False
        self.titled: dict[str, str] = {}  # a schema's title -> its record type (one $defs entry, one type)

    def type_name(self, wanted: str) -> str:
        base = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", wanted)) or "Value"
        if base[0].isdigit() or base in _BUILTIN_TYPES:
            base = "T" + base
        name, n = base, 2
        while name in self.types:
            name, n = f"{base}{n}", n + 1
        return name

    def json_value(self) -> str:
        self.uses_json = True
        return "json.Value"

    def term(self, schema: Any, defs: dict, hint: str, depth: int = 0) -> tuple[str, bool]:
        """(the Flow type of `schema`, whether null is one of its values)."""
        if not isinstance(schema, dict) or depth > 32:
            return self.json_value(), False
        if "$ref" in schema:
            ref = schema["$ref"]
            name = ref.rsplit("/", 1)[-1]
            if ref.startswith("#/$defs/") and name in defs:
                return self.term({"title": name, **defs[name]}, defs, name, depth + 1)
            return self.json_value(), False
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list):
                rest = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
                if len(rest) == 1:
                    inner, _ = self.term(rest[0], defs, hint, depth + 1)
                    return inner, len(rest) < len(options)
                return self.json_value(), False
        kind = schema.get("type")
        nullable = False
        if isinstance(kind, list):
            nullable = "null" in kind
            kinds = [k for k in kind if k != "null"]
            if len(kinds) != 1:
                return self.json_value(), nullable
            kind = kinds[0]
        if kind == "string":
            constants = schema.get("enum")
            if isinstance(constants, list) and constants and all(isinstance(c, str) and _CTOR.match(c)
                                                                  for c in constants):
                name = self.type_name(schema.get("title") or hint)
                self.types[name] = f"pub type {name} {{ {', '.join(constants)} }}"
                return name, nullable
            return "Text", nullable
        if kind in ("integer", "number", "boolean"):
            return {"integer": "Int", "number": "Decimal", "boolean": "Bool"}[kind], nullable
        if kind == "array":
            items = schema.get("items")
            inner = self.term(items, defs, hint + " item", depth + 1)[0] if isinstance(items, dict) else self.json_value()
            return f"List<{inner}>", nullable
        if kind == "object":
            properties = schema.get("properties")
            if isinstance(properties, dict) and properties:
                return self.record(schema, properties, defs, hint, depth), nullable
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"Dict<Text, {self.term(extra, defs, hint + ' value', depth + 1)[0]}>", nullable
        return self.json_value(), nullable

    def record(self, schema: dict, properties: dict, defs: dict, hint: str, depth: int) -> str:
        if not all(_IDENT.match(p) and p not in _WORDS for p in properties):
            return self.json_value()  # a property Flow cannot name: the value as it comes
        title = schema.get("title")
        if title in self.titled:
            return self.titled[title]
        name = self.type_name(title or hint)
        if title:
            self.titled[title] = name
        self.types[name] = ""  # reserve the name before the fields (a field may be a record too)
        required = set(schema.get("required") or [])
        fields = []
        for prop, sub in properties.items():
            term, nullable = self.term(sub, defs, f"{name} {prop}", depth + 1)
            if prop not in required or nullable:
                term = f"Option<{term}>"
            fields.append(f"pub {prop}: {term}")
        self.types[name] = f"pub type {name} {{ {', '.join(fields)} }}"
        return name


def _doc(text: str | None, indent: str = "") -> list[str]:
    lines = [line.rstrip() for line in (text or "").strip().splitlines()]
    return [f"{indent}/// {line}".rstrip() for line in lines if line.strip() or lines]


def module_text(tools: list[Any], shown: str) -> str:
    """The `.flow` module for `tools` (`mcp.types.Tool`s) of the server shown as `shown`."""
    module = _Module()
    declarations: list[str] = []
    for tool in sorted(tools, key=lambda t: t.name):
        name = flow_name(tool.name)
        schema = tool.input_schema or {}
        defs = schema.get("$defs") or {}
        required = set(schema.get("required") or [])
        params = []
        for prop, sub in (schema.get("properties") or {}).items():
            term, nullable = module.term(sub, defs, f"{name} {prop}")
            if prop not in required or nullable:
                term = f"Option<{term}>"
            params.append(f"{flow_name(prop)}: {term}")
        output = tool.output_schema
        if output is None:
            ok = "Text"
        elif _wraps_result(output):
            ok, nullable = module.term(output["properties"]["result"], output.get("$defs") or {}, f"{name} result")
            ok = f"Option<{ok}>" if nullable else ok
        else:
            ok = module.term(output, output.get("$defs") or {}, f"{name} result")[0]
        text = _doc(tool.description)
        if tool.name != name:
            text.append(f"/// (the MCP tool `{tool.name}`)")
        text.append(f"@tool pub flow {name}({', '.join(params)}) -> Result<{ok}, Text>")
        declarations.append("\n".join(text))
    head = [f"/// The tools of the MCP server `{shown}`, as `flow tools import-mcp` declared them from",
            "/// their JSON Schemas. Edit freely: the binding checks the parameters against the server.", ""]
    if module.uses_json:
        head += ['use "std@v1/json"', ""]
    return "\n".join(head + [t + "\n" for t in module.types.values()] + [d + "\n" for d in declarations]).rstrip("\n") + "\n"


def import_tools(*, command: list[str] | None, url: str | None, cwd: str) -> tuple[list[Any], str]:
    """The server's tools (`mcp.types.Tool`) and how to name it, through one session."""
    from flowrt.mcp_tools import McpTools

    server = McpTools(command=command, url=url, cwd=cwd)
    server.start()
    try:
        return list(server.server_tools.values()), server.shown
    finally:
        server.close()
