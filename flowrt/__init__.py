"""Flow's trusted host: run, resume and inspect Flow programs, and the Python embedding API.

    import flowrt

    host = flowrt.Host({"planner.next": lambda ticket, notes: {"Search": "safari cookie"}})
    outcome = host.run("support/main.flow", {"ticket": "Login fails"})
    print(outcome.exit_code, outcome.output)

A Tool implementation is a Python callable taking the Tool's arguments as keyword arguments (JSON
values, as the Tool protocol carries them). It returns the Ok value (or an outcome dict, or
`flowrt.PENDING` to leave the call open), or returns or raises `flowrt.failed(e)`,
`flowrt.not_run(text)` or `flowrt.unknown(text)`. `async def` implementations are awaited. Calls
run concurrently. A callable that declares a `call` parameter also gets a `flowrt.ToolCall`: the
run and call id (an idempotency key), and for a generic Tool the concrete type arguments (terms
and JSON Schemas) and the JSON Schema of the outcome it must return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Host", "PENDING", "Problem", "ToolCall", "failed", "not_run", "ok", "unknown"]

_FROM_BINDINGS = {"PENDING", "Problem", "failed", "not_run", "ok", "unknown"}


def __getattr__(name: str):
    # Loaded on first use: the CLI imports flowrt's submodules and should not pay for these.
    if name in _FROM_BINDINGS:
        from flowrt import bindings

        return getattr(bindings, name)
    if name == "ToolCall":
        from flowrt.tool_types import ToolCall

        return ToolCall
    raise AttributeError(f"module 'flowrt' has no attribute {name!r}")


class Host:
    """An embedding host: Python callables bound to Tool identities (`module.tool`)."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | None = None, *, runs_dir: str = ".flow/runs",
                 durability: str = "fsync", telemetry: Any = None) -> None:
        """`telemetry`: an OpenTelemetry TracerProvider (or Tracer) for a span per run and per Tool
        call (docs/telemetry.md); None follows FLOW_OTEL / OTEL_* in the environment; False: none."""
        self.tools = dict(tools or {})
        self.runs_dir = runs_dir
        self.durability = durability
        self.telemetry = telemetry

    def run(self, path: str, input: Mapping[str, Any] | str | None = None, *, entry: str = "main",
            allow: bool = False):
        """Run a program live; returns a `flowrt.run.RunOutcome` (exit_code, run_id, output...)."""
        import json

        from flowrt.run import run

        text = input if isinstance(input, str) else json.dumps(dict(input or {}))
        return run(path, entry=entry, input_text=text, runs_dir=self.runs_dir, python_tools=self.tools,
                   allow=allow, durability=self.durability, telemetry=self.telemetry)
