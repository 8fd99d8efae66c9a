"""Checking a supplied reply before it is admitted (DESIGN.md §3): a person is not a process.

A reply that comes from an implementation and does not decode against the call's declared types
is admitted as BadReply: the process said something its Tool cannot say. A reply a person types
(`flow resume --reply`, the MCP `resume` tool) is checked first instead: one that admission would
turn into BadReply is refused (exit 2, nothing recorded, the call stays open) with the path that
failed, what was expected there, the JSON Schema of the expected outcome and an example that
fits, so the person can answer again. The verdict is admission's own (`flowrt.admission.admitter`): a
reply is refused exactly when admitting it would record a BadReply it does not itself carry.

`expected_reply` is what `flow history` shows for a pending call: the exact `flow resume` command
answering it with an example that fits, and the schema of the reply.

Both read the recorded program (from the history's stored sources, never the working files): the
Tool's declaration there, at the type arguments the Call fact recorded for a generic Tool.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from flowdata import canonical, codec
from flowrt.store import Hole, RunLog

__all__ = ["ReplyRefusal", "CallNotFound", "call_types", "check_reply", "expected_reply", "with_expected_replies", "resume_command"]


@dataclass(frozen=True)
class ReplyRefusal:
    """Why a supplied reply was refused: the call, the path in the reply that failed and what
    was expected there, the JSON Schema of the outcome the call takes, and an outcome that fits
    (None when none could be made, e.g. for a host type's token)."""

    run: str
    call: str
    tool: str
    path: str
    problem: str
    schema: dict
    example: Any

    @property
    def text(self) -> str:
        return f"the reply to {self.call} ({self.tool}) does not fit: {self.path}: {self.problem}"

    @property
    def command(self) -> str:
        return resume_command(self.run, self.call, self.example)

    def to_json(self) -> dict:
        return {"run": self.run, "call": self.call, "tool": self.tool, "path": self.path, "problem": self.problem,
                "schema": self.schema, "example": self.example, "command": self.command}

    def diagnostic(self):
        """The refusal as a diagnostic (`reply-invalid`), as every refusal is data."""
        from flowc.diagnostics import messages as M

        return M.reply_invalid(call=self.call, tool=self.tool, path=self.path, problem=self.problem,
                               schema=compact(self.schema), command=self.command).at(None)


def check_reply(store: RunLog, call_id: str, outcome_json: Any) -> ReplyRefusal | None:
    """None when `outcome_json` (JSON data, an outcome `{"Ok": v}` / `{"Err": problem}`) would be
    admitted for the open call `call_id` as it is; else why not. A reply that is not an outcome at
    all, or is over the reply limit, is refused here too (admission would make it BadReply)."""
    from flowrt.admission import admitter

    typed, tool = _typed(store, call_id)
    admitted = admitter(typed)(outcome_json)
    if not _bad_reply(admitted) or admitted == outcome_json:  # (a BadReply given as such is admitted as it is)
        return None
    path, problem = _where(typed, outcome_json, admitted["Err"]["BadReply"])
    return ReplyRefusal(store.run_id, call_id, tool, path, problem, typed.outcome_schema,
                        _example_outcome(typed))


def expected_reply(store: RunLog, call_id: str, *, runs: str | None = None, tools: dict | None = None,
                   open_call_facts: Mapping[str, dict] | None = None) -> dict:
    """What answers the open call `call_id`: `{command, example, schema, okSchema}`, the exact
    `flow resume` command (with an example reply that fits), the example outcome (null when none
    could be made), the JSON Schema of the outcome the call takes and that of its `Ok` value.
    `runs`: the runs directory the command must name (`--runs`), when it is not the default;
    `tools`: the recorded program's Tool descriptions, when the caller has them already;
    `open_call_facts`: the open calls' Call facts (`RunLog.open_calls`), likewise."""
    from flowrt.schemas import schema

    typed, _tool = _typed(store, call_id, tools, open_call_facts)
    example = _example_outcome(typed)
    return {"command": resume_command(store.run_id, call_id, example, runs), "example": example,
            "schema": typed.outcome_schema, "okSchema": schema(typed.ok, typed.defs)}


def with_expected_replies(store: RunLog, open_calls: list[dict], *, runs: str | None = None,
                          open_call_facts: Mapping[str, dict] | None = None) -> list[dict]:
    """`open_calls` (flowrt/run_state.py's `open`) with what answers each pending one: `next`
    the exact command, `reply` as `expected_reply` says. A call whose Tool cannot be found in the
    recorded program (it does not check with this compiler) keeps the general command.
    `open_call_facts`: their Call facts (`RunLog.open_calls`), when the caller went through the
    facts already (`flow history`: a read-only store would go through every fact again)."""
    from flowrt.refusal import Refused
    from flowrt.store import StorageError

    shown = []
    tools: dict | None = None
    for entry in open_calls:
        if entry.get("status") == "pending":
            try:
                if tools is None:  # the program is formed once for all the calls
                    tools = _recorded_tools(store)
                reply = expected_reply(store, entry["call"], runs=runs, tools=tools, open_call_facts=open_call_facts)
            except (Refused, CallNotFound, StorageError):
                reply = None
            if reply is not None:
                entry = {**entry, "next": [reply["command"]], "reply": reply}
        shown.append(entry)
    return shown


def resume_command(run_id: str, call_id: str, example: Any, runs: str | None = None) -> str:
    """`flow resume RUN --call ID --reply '...' [--runs DIR]`, quoted for a POSIX shell."""
    reply = canonical.dumps(example).decode("utf-8") if example is not None else "JSON"
    where = f" --runs {shlex.quote(runs)}" if runs is not None else ""
    return f"flow resume {shlex.quote(run_id)} --call {shlex.quote(call_id)} --reply {shlex.quote(reply)}{where}"


def compact(schema: dict) -> str:
    """A schema on one line, without the dialect (the same for every one)."""
    return canonical.dumps({k: v for k, v in schema.items() if k != "$schema"}).decode("utf-8")


# ---- the call's types --------------------------------------------------------------------------


class CallNotFound(LookupError):
    """No Call fact (nor a task parked in a checkpoint) has this id."""


def _recorded_tools(store: RunLog) -> dict:
    """The Tool descriptions of the program the history recorded (from its stored sources)."""
    from flowrt.replay import recorded_program

    compiled, _start = recorded_program(store)
    return compiled.tools


def call_types(store: RunLog, call_id: str, tools: dict | None = None):
    """(the Tool, its types at the call's recorded type arguments: a `flowrt.tool_types.Typed`)
    of call `call_id`, for a caller that writes a reply by the call's types (the Python API).
    CallNotFound when the run has no such call."""
    typed, tool = _typed(store, call_id, tools)
    return tool, typed


def _typed(store: RunLog, call_id: str, tools: dict | None = None, open_call_facts: Mapping[str, dict] | None = None):
    """The Tool of the call, at its recorded type arguments (`flowrt.tool_types.Typed`), and its
    identity."""
    from flowrt.tool_types import Typed

    tool, types = _recorded_call(store, call_id, open_call_facts)
    description = (tools if tools is not None else _recorded_tools(store)).get(tool)
    if description is None:
        raise CallNotFound(f"the recorded program declares no Tool {tool}")
    return Typed(description, types), tool


def _recorded_call(store: RunLog, call_id: str, open_call_facts: Mapping[str, dict] | None = None) -> tuple[str, list | None]:
    """The Tool and type arguments of the call: from its Call fact, or, when the history holds
    none (its early facts archived, or a fork that starts at a checkpoint), from the task parked on
    it in the latest checkpoint that has one."""
    # (kept by the store: an appender found them as it opened)
    open_call = (store.open_calls() if open_call_facts is None else open_call_facts).get(call_id)
    if open_call is not None:
        return open_call["tool"], open_call.get("types")
    facts = store.facts()
    for fact in facts:
        if fact["kind"] == "Call" and fact["call"] == call_id:
            return fact["tool"], fact.get("types")
    for fact in reversed(facts):
        if fact["kind"] != "Checkpoint":
            continue
        try:
            arguments = store.value(fact, "arguments")
        except Hole:
            continue
        for value in arguments.values() if isinstance(arguments, dict) else ():
            if isinstance(value, dict) and value.get("call") == call_id and isinstance(value.get("tool"), str):
                return value["tool"], value.get("types")
    raise CallNotFound(f"run {store.run_id} records no call {call_id}")


def _bad_reply(outcome: Any) -> bool:
    return isinstance(outcome, dict) and isinstance(outcome.get("Err"), dict) and "BadReply" in outcome["Err"]


def _where(typed, outcome: Any, said: str) -> tuple[str, str]:
    """The path and the problem of a reply admission refused (its BadReply text says both, as
    `PATH: problem`, when the value did not decode; else the whole reply is at fault)."""
    payload_term = None
    if isinstance(outcome, dict) and len(outcome) == 1:
        (tag, payload), = outcome.items()
        if tag == "Ok":
            payload_term, prefix = typed.ok, "$.Ok"
        elif tag == "Err" and isinstance(payload, dict) and set(payload) == {"Failed"} and typed.err is not None:
            payload_term, prefix, payload = typed.err, "$.Err.Failed", payload["Failed"]
    if payload_term is not None:
        try:
            codec.decode(payload, payload_term, typed.defs)
        except codec.DecodeError as problem:
            return prefix + problem.path[1:], problem.message
    path, colon, rest = said.partition(": ")
    if colon and path.startswith("$"):
        return path, rest
    return "$", said


# ---- an example that fits ----------------------------------------------------------------------


def _example_outcome(typed) -> dict | None:
    value = _example_value(typed.ok, typed.defs)
    return None if value is _NONE else {"Ok": value}


_NONE = object()
_DEPTH = 12


def _example_value(term: Any, defs: dict | None = None) -> Any:
    """A small JSON value of type `term` that the codec decodes (checked), or `_NONE` when none
    could be made (a host type's token cannot be made up; a type whose every value is deep)."""
    from flowrt.schemas import BASE64_PATTERN, DECIMAL_PATTERN, DURATION_PATTERN, INSTANT_PATTERN, schema

    try:
        whole = schema(term, defs)
    except (ValueError, KeyError, TypeError):
        return _NONE
    strings = {DECIMAL_PATTERN: "1.5", DURATION_PATTERN: "PT1H", INSTANT_PATTERN: "2026-01-01T00:00:00Z",
               BASE64_PATTERN: ""}
    definitions = whole.get("$defs", {})

    def make(s: Any, depth: int) -> Any:
        if depth > _DEPTH or not isinstance(s, dict):
            return _NONE
        if "$ref" in s:
            key = _unref(s["$ref"])
            return make(definitions.get(key), depth + 1) if key in definitions else _NONE
        if "const" in s:
            return s["const"]
        for alternatives in ("oneOf", "anyOf"):
            if alternatives in s:
                # The first alternative that ends (a recursive type's base case, at worst).
                for alternative in s[alternatives]:
                    made = make(alternative, depth + 1)
                    if made is not _NONE:
                        return made
                return _NONE
        kind = s.get("type")
        if kind is None:
            return None if s == {} or "$comment" in s else _NONE  # json.Value, a type parameter
        if kind == "null":
            return None
        if kind == "boolean":
            return True
        if kind == "integer":
            return 1
        if kind == "string":
            if "pattern" in s:
                return strings.get(s["pattern"], _NONE)
            return "text" if "title" not in s else _NONE  # a titled string is a host type's token
        if kind == "array":
            if "prefixItems" in s:
                items = [make(p, depth + 1) for p in s["prefixItems"]]
                return _NONE if any(i is _NONE for i in items) else items
            item = make(s.get("items"), depth + 1)
            return [] if item is _NONE else [item]
        if kind == "object":
            if "properties" in s:
                made = {name: make(sub, depth + 1) for name, sub in s["properties"].items()}
                return _NONE if any(v is _NONE for v in made.values()) else made
            value = make(s.get("additionalProperties"), depth + 1)
            return {} if value is _NONE else {"key": value}
        return _NONE

    value = make(whole, 0)
    if value is _NONE:
        return _NONE
    try:
        codec.decode(value, term, defs)
    except (codec.DecodeError, ValueError):
        return _NONE
    return value


def _unref(ref: str) -> str:
    from urllib.parse import unquote

    pointer = unquote(ref[len("#/$defs/"):])
    return pointer.replace("~1", "/").replace("~0", "~")
