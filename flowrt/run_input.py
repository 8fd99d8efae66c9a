"""A run's input: the JSON text given for the entry's parameters, decoded and checked against
their types before anything is recorded (execution seed, Entry). Anything that does not decode
refuses the run (exit 2) with a diagnostic, at a line and column where the JSON itself is at
fault."""

from __future__ import annotations

from typing import Any

from flowc.compiled import Function
from flowc.diagnostics import M
from flowc.diagnostics.places import json_error_location
from flowdata import codec
from flowrt.refusal import INPUT, refuse


def decode_input(fn: Function, input_text: str) -> dict[str, Any]:
    """The input as canonical JSON values per parameter; refuses anything that does not decode."""
    try:
        data = codec.parse_json(input_text)
    except Exception as problem:
        text = input_text if isinstance(input_text, str) else None
        where = json_error_location(INPUT, text) if text is not None else None
        raise refuse(M.input_invalid_json(problem=problem), where, {INPUT: text} if where else None) from None
    # The input parsed: what is wrong is in its data, which has no line to point at.
    if not isinstance(data, dict):
        raise refuse(M.input_invalid_not_object(), None)
    names = [p.name for p in fn.params]
    for key in sorted(data):
        if key not in names:
            raise refuse(M.input_invalid_unknown_parameter(entry=fn.name, key=key, names=names), None)
    out: dict[str, Any] = {}
    defs = fn.defs
    for p in fn.params:
        if p.name not in data:
            raise refuse(M.input_invalid_missing(name=p.name), None)
        term = p.type
        try:
            value = codec.decode(data[p.name], term, defs)
        except codec.DecodeError as problem:
            raise refuse(M.input_invalid_value(name=p.name, problem=problem), None) from None
        out[p.name] = codec.encode(value, term, defs)
    return out
