"""Checking a supplied reply (the Python API's `resume`, `flow resume --reply`) against the types
its call was declared with, before it is admitted (DESIGN.md §3: a person is not a process, so a
typo is refused and the call stays open, instead of being admitted as BadReply for good).

`check_reply` is the one entry: it answers what admission would do to the reply, without writing
anything. It reads the Call fact for the Tool and its type arguments, and the recorded program
(the sources the history stores) for the Tool's declaration, so it sees exactly the types the
resumed run will decode the reply against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowc.compiled import Compiled
from flowdata import canonical, codec
from flowdata.bigint import IntOverLimit
from flowrt.store import RunLog
from flowrt.tool_lines import REPLY_LIMIT
from flowrt.tool_types import Typed


@dataclass(frozen=True)
class Refusal:
    """Why a supplied reply would not be admitted as given: where in the outcome it failed
    (`path`, like `$.Ok.steps[1]`, or `$` for the whole), what was wrong (`problem`), and the
    JSON Schema of the outcome the call expects (`schema`), so a person can answer again."""

    call: str
    tool: str
    path: str
    problem: str
    schema: dict

    def message(self) -> str:
        return f"the reply to {self.call} ({self.tool}) does not fit its declared type: {self.path}: {self.problem}"


def call_types(store: RunLog, call_id: str, compiled: Compiled | None = None) -> tuple[str, Typed]:
    """(the Tool, its types at the call's type arguments) of call `call_id` of the run, from its
    Call fact and the declaration in the recorded program (or `compiled`, when the caller has
    it already). KeyError when the run has no such call."""
    fact = next((f for f in store.facts() if f["kind"] == "Call" and f["call"] == call_id), None)
    if fact is None:
        raise KeyError(call_id)
    if compiled is None:
        from flowrt.replay import recorded_program

        compiled, _ = recorded_program(store)
    tool = fact["tool"]
    return tool, Typed(compiled.tools[tool], fact.get("types"))


def check_reply(store: RunLog, call_id: str, outcome_json: Any, *, compiled: Compiled | None = None) -> Refusal | None:
    """None when admission would take `outcome_json` (JSON data: `{"Ok": v}` or `{"Err": p}`) as
    the reply to `call_id`, else the Refusal saying why. The same checks, in the same order, as
    `flowrt.run.admitter`: JSON data, the reply limit, an outcome, then decoding against the
    declared types."""
    tool, typed = call_types(store, call_id, compiled)

    def refusal(path: str, problem: str) -> Refusal:
        return Refusal(call_id, tool, path, problem, typed.outcome_schema)

    try:
        size = len(canonical.dumps(outcome_json))
    except IntOverLimit as problem:
        return refusal("$", str(problem))
    except Exception:
        return refusal("$", "the reply is not JSON data")
    if size > REPLY_LIMIT:
        return refusal("$", f"the reply is {size} bytes, over the {REPLY_LIMIT}-byte limit")
    try:
        # Admission turns a value that does not decode into a BadReply; here it is a refusal.
        codec.outcome_decoder(typed.ok, typed.err, typed.defs)(outcome_json)
    except codec.NotAnOutcome as problem:
        return refusal("$", str(problem))
    (tag, body), = outcome_json.items()
    if tag == "Ok":
        where, value, term = "$.Ok", body, typed.ok
    else:
        (problem_kind, value), = body.items()
        if problem_kind != "Failed":
            return None  # NotRun, Unknown and BadReply carry a text, which the decoder has checked
        if typed.err is None:
            return refusal("$.Err.Failed", "this Tool is not declared with Result, so it has no error to fail with")
        where, term = "$.Err.Failed", typed.err
    try:
        codec.decode(value, term, typed.defs)
    except codec.DecodeError as problem:
        return refusal(where + problem.path[1:], problem.message)
    return None
