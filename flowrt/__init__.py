"""Flow's trusted host: run, resume and inspect Flow programs, and the Python embedding API.

    import flowrt

    host = flowrt.Host({"planner.next": lambda ticket, notes: {"Search": "safari cookie"}})
    result = host.run("support/main.flow", {"ticket": "Login fails"})
    print(result.status, result.output)

`flowrt.Host` (threads) and `flowrt.AsyncHost` (asyncio) run, start (detached), resume, replay,
fork, halt, watch and inspect runs; results are frozen dataclasses (`RunResult`, ...), and the one
exception is `flowrt.Refused` (docs/api.md).

A Tool implementation is a Python callable taking the Tool's arguments as keyword arguments (JSON
values, as the Tool protocol carries them). It returns the Ok value (or an outcome dict, or
`flowrt.PENDING` to leave the call open), or returns or raises `flowrt.failed(e)`,
`flowrt.not_run(text)` or `flowrt.unknown(text)`. `async def` implementations are awaited (on
the application's loop under `AsyncHost`). Calls run concurrently. A callable that declares a
`call` parameter also gets a `flowrt.ToolCall`: the run and call id (an idempotency key), and for
a generic Tool the concrete type arguments (terms and JSON Schemas) and the JSON Schema of the
outcome it must return. Its parameters must match the Tool's declaration (or take `**kwargs`):
a mismatch refuses the run before its Start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "AsyncHost", "AsyncRunHandle", "CallFact", "CheckpointFact", "ChoiceFact", "EndFact", "Fact", "Fault",
    "HistoryPage", "HoleValue", "Host", "PENDING", "PendingCall", "Problem", "Refused", "ReplayResult",
    "ReplyFact", "RunHandle", "RunInfo", "RunResult", "RunsPage", "StartFact", "StopFact", "ToolCall", "Variant",
    "failed", "not_run", "ok", "unknown",
]

if TYPE_CHECKING:
    from flowrt.api import Host, RunHandle
    from flowrt.api_async import AsyncHost, AsyncRunHandle
    from flowrt.api_results import (
        CallFact, CheckpointFact, ChoiceFact, EndFact, Fact, Fault, HistoryPage, HoleValue, PendingCall, Refused,
        ReplayResult, ReplyFact, RunInfo, RunResult, RunsPage, StartFact, StopFact,
    )
    from flowrt.api_values import Variant
    from flowrt.bindings import PENDING, Problem, failed, not_run, ok, unknown
    from flowrt.tool_types import ToolCall

_FROM = {
    "flowrt.bindings": {"PENDING", "Problem", "failed", "not_run", "ok", "unknown"},
    "flowrt.api": {"Host", "RunHandle"},
    "flowrt.api_async": {"AsyncHost", "AsyncRunHandle"},
    "flowrt.api_results": {"CallFact", "CheckpointFact", "ChoiceFact", "EndFact", "Fact", "Fault", "HistoryPage",
                           "HoleValue", "PendingCall", "Refused", "ReplayResult", "ReplyFact", "RunInfo", "RunResult",
                           "RunsPage", "StartFact", "StopFact"},
    "flowrt.api_values": {"Variant"},
    "flowrt.tool_types": {"ToolCall"},
}


def __getattr__(name: str) -> Any:
    # Loaded on first use: the CLI imports flowrt's submodules and should not pay for these.
    import importlib

    for module, names in _FROM.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'flowrt' has no attribute {name!r}")
