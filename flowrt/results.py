"""Results as data: the one JSON document each command prints under `--json` (docs/cli.md,
"Results as data"), and what the MCP server answers with for run and resume.

Every document has `exitCode` (the command's exit code, the same as without `--json`), `message`
(the reason in words when there is one, else null) and `diagnostics` (each as
`Diagnostic.to_json()`), so a refusal is data like any result; a run's id is `run` wherever a
document names one (as `flow history`, `flow runs` and MCP already call it). Documents are written
as canonical JSON on one line: keys sorted, integers of any size exact.
"""

from __future__ import annotations

import sys
from typing import Any

from flowdata import canonical

#: what each exit code of a run, resume or fork says of how it ended
ENDINGS = {0: "completed", 1: "faulted", 2: "refused", 3: "paused", 4: "completed", 5: "storage-failure",
           130: "halted"}

#: The most digits an Int in `output` may have: what common JSON readers take (CPython's json and
#: pydantic's, which the MCP SDK reads every message with, stop at 4,300 digits).
READABLE_INT_DIGITS = 4300


def document(exit_code: int, *, message: str | None = None, diagnostics=(), **fields: Any) -> dict:
    """A command's result: its own `fields` and the three every document has."""
    return {**fields, "exitCode": exit_code, "message": message,
            "diagnostics": [d.to_json() if hasattr(d, "to_json") else d for d in diagnostics]}


def write(doc: dict) -> None:
    """Print one document on standard output, one line."""
    sys.stdout.buffer.write(canonical.dumps(doc) + b"\n")
    sys.stdout.flush()


def outcome_document(outcome) -> dict[str, Any]:
    """A `RunOutcome` (a run, resume or fork) as data: `{exitCode, ending, run, output,
    outputJson, pending, fault, refusal, message, diagnostics}`. `outputJson` is the output's
    canonical JSON text, exact whatever it holds; `output` is the same as JSON data, or null (and
    `message` says why) when it holds an Int longer than a client's JSON reader takes, which would
    make the whole document unreadable to it. `refusal` is a supplied reply's refusal
    (flowrt/reply_check.py), else null."""
    from flowdata.codec import parse_json

    text = outcome.output.decode("utf-8") if isinstance(outcome.output, bytes) else outcome.output
    # The runtime's own reader: Ints of any size up to the Int limit (orjson stops at 64 bits,
    # the stdlib's json at CPython's 4,300 digits).
    output = parse_json(text) if text is not None else None
    message = outcome.message
    if _has_unreadable_int(output):
        output = None
        message = (f"the output holds an Int of more than {READABLE_INT_DIGITS} digits, which common JSON readers "
                   "refuse; outputJson has it exactly")
    return document(outcome.exit_code, message=message, diagnostics=outcome.diagnostics,
                    ending=ENDINGS.get(outcome.exit_code, "faulted"), run=outcome.run_id, output=output,
                    outputJson=text, pending=list(outcome.pending), fault=outcome.fault,
                    refusal=getattr(outcome, "refusal", None))


def _has_unreadable_int(value: Any) -> bool:
    """Whether `value` (JSON data) holds an Int of more than READABLE_INT_DIGITS digits (by
    comparison: str() of a long int is refused past CPython's limit, and slow)."""
    bound = 10 ** READABLE_INT_DIGITS
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is int:
            if abs(item) >= bound:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
