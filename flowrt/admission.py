"""Admission: a Tool's reply as history records it, decoded against the Tool's declared types at
the call's type arguments, or BadReply (docs/trace.md §4; the execution seed's Reply). Every
reply a run admits goes through one `admitter`, made once per (Tool, type arguments) and kept
with its `Typed`, so that a run's per-call work is the check itself."""

from __future__ import annotations

from typing import Any

from flowdata import canonical, codec
from flowdata.bigint import IntOverLimit
from flowrt.tool_lines import REPLY_LIMIT  # bytes of an outcome's canonical JSON; larger is BadReply
from flowrt.tool_types import Typed


def admit(description: dict, outcome: Any, types: list | None = None) -> dict:
    """The outcome as history records it: decoded against the Tool's declared types (a generic
    Tool's with the call's type arguments `types` put in), or BadReply."""
    return admitter(Typed(description, types))(outcome)


def admitted_by(typed: Typed):
    """The `admitter` of a Tool at one set of type arguments, made once and kept with them."""
    admit_one = typed.admit
    if admit_one is None:
        admit_one = typed.admit = admitter(typed)
    return admit_one


def admitter(typed: Typed):
    """`admit` for one Tool at its call's types, its decoder and encoder made once (a run admits
    every reply)."""
    defs = typed.defs
    decode = codec.outcome_decoder(typed.ok, typed.err, defs)
    encode = codec.outcome_encoder(typed.ok, typed.err if typed.err is not None else "Never", defs)

    def admit_one(outcome: Any) -> dict:
        try:
            size = len(canonical.dumps(outcome))
        except IntOverLimit as problem:
            return {"Err": {"BadReply": f"$: {problem}"}}
        except Exception:
            return {"Err": {"BadReply": "the reply is not JSON data"}}
        if size > REPLY_LIMIT:
            return {"Err": {"BadReply": f"the reply is {size} bytes, over the {REPLY_LIMIT}-byte limit"}}
        try:
            result = decode(outcome)
        except codec.NotAnOutcome as problem:
            return {"Err": {"BadReply": f"not an outcome: {problem}"}}
        return encode(result)

    return admit_one
