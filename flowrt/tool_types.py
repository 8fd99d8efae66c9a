"""The types a Tool call is made at, on the host's side: a generic Tool's declared result with the
call's concrete type arguments put in for its parameters (what its reply is decoded against), and
what an implementation is told of them (`flowrt.ToolCall`, the call message's `types`/`schema`).

The child sends a generic call's type arguments as `[{"term", "defs"}, ...]` in the order of the
declaration's type parameters; the Call fact records exactly that (docs/trace.md §4), so replay
compares what the program computes with what was recorded. Everything here is derived from the
Tool's description and those arguments, and made once per (Tool, arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from flowdata import canonical


@dataclass(frozen=True)
class ToolCall:
    """What a Python implementation (a callable with a `call` parameter, or a `flowrt.toolkit.serve`
    handler) is told about the call it serves.

    `run` and `call` are the idempotency key (the same when a call is sent again after a crash);
    `types` is each type parameter's concrete type term (empty for a Tool that is not generic),
    `defs` the declarations those terms name (docs/abi.md §5), `schemas` each type argument's JSON
    Schema, and `outcome_schema` the JSON Schema of the whole reply the host will accept."""

    run: str
    call: str
    tool: str
    types: Mapping[str, Any] = field(default_factory=dict)
    defs: Mapping[str, Any] = field(default_factory=dict)
    schemas: Mapping[str, dict] = field(default_factory=dict)
    outcome_schema: dict | None = None


class Typed:
    """One Tool at one set of type arguments: the terms its reply decodes against, and what the
    call message says of them."""

    def __init__(self, description: dict, recorded: list | None) -> None:
        defs = dict(description.get("types", {}))
        names = list(description.get("type_params") or [])
        self.generic = bool(recorded)
        mapping: dict[str, Any] = {}
        if recorded:
            if not isinstance(recorded, list) or len(recorded) != len(names) or \
                    not all(isinstance(a, dict) and "term" in a for a in recorded):
                raise ValueError(f"{description['tool']} takes {len(names)} type argument(s); the call gives "
                                 f"{recorded!r:.200}")
            for name, argument in zip(names, recorded):
                mapping[name] = argument["term"]
                defs.update(argument.get("defs") or {})
        self.types = mapping
        self.defs = defs
        self.ok = substitute(description["ok"], mapping)
        self.err = substitute(description["err"], mapping) if description.get("err") is not None else None
        #: the reply's `admitter` (flowrt/admission.py), made on first use
        self.admit = None

    # Schemas only when an implementation is told of them: most calls never need one.
    @cached_property
    def schemas(self) -> dict[str, dict]:
        from flowrt.schemas import schema

        return {name: schema(term, self.defs) for name, term in self.types.items()}

    @cached_property
    def outcome_schema(self) -> dict:
        from flowrt.schemas import outcome_schema

        return outcome_schema(self.ok, self.err, self.defs)

    def message_fields(self) -> dict:
        """What a generic call's message adds (DESIGN.md §3): per type parameter its term (with
        the declarations it names) and JSON Schema, and the schema of the expected outcome."""
        if not self.generic:
            return {}
        return {"types": {name: {"term": term, "defs": _named_defs(self.schemas[name], self.defs),
                                 "schema": self.schemas[name]} for name, term in self.types.items()},
                "schema": self.outcome_schema}

    def tool_call(self, run: str, call_id: str, tool: str) -> ToolCall:
        return ToolCall(run, call_id, tool, dict(self.types), _reached_defs(self), dict(self.schemas),
                        self.outcome_schema)


class ToolTypes:
    """`Typed` per (Tool, type arguments), made on first use (a run calls the same few often)."""

    def __init__(self, descriptions: Mapping[str, dict]) -> None:
        self.descriptions = descriptions
        self.made: dict[tuple[str, str], Typed] = {}

    def of(self, tool: str, recorded: list | None) -> Typed:
        key = (tool, canonical.dumps(recorded).decode() if recorded else "")
        typed = self.made.get(key)
        if typed is None:
            typed = self.made[key] = Typed(self.descriptions[tool], recorded)
        return typed


def substitute(term: Any, mapping: Mapping[str, Any]) -> Any:
    """`term` with each `{"Param": name}` in `mapping` replaced by its concrete term."""
    if not mapping:
        return term
    if isinstance(term, dict):
        if "Param" in term and len(term) == 1:
            return mapping.get(term["Param"], term)
        return {k: substitute(v, mapping) for k, v in term.items()}
    if isinstance(term, list):
        return [substitute(v, mapping) for v in term]
    return term


def _named_defs(schema_: dict, defs: Mapping[str, Any]) -> dict:
    """The declarations a type argument's schema references (its `$defs` keys), for a handler
    that decodes with `flowdata.codec`."""
    return {key: defs[key] for key in schema_.get("$defs", {}) if key in defs}


def _reached_defs(typed: Typed) -> dict:
    reached: dict = {}
    for s in typed.schemas.values():
        reached.update(_named_defs(s, typed.defs))
    return reached
