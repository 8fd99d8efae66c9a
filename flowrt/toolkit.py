"""Write a Tool implementation in Python: `serve({"planner.next": next_step}, declared_in="main.flow")`.

It speaks the JSON-lines Tool protocol (DESIGN.md §3) on stdin and stdout: answers `describe`
with each Tool's identity, fingerprint and signature (computed from the Flow declarations, so an
implementation and its declaration cannot drift apart silently), serves calls concurrently (one
thread per call, answers in any order), and drops calls the host cancels. A handler takes the
arguments as keyword arguments (JSON values) and returns the Ok value, an outcome dict, `PENDING`,
or a `Problem` (returned or raised: `failed(e)`, `not_run(text)`, `unknown(text)`). A handler
that declares a `call` parameter is also handed a `flowrt.ToolCall` made from the call message:
run and call id, and for a generic Tool each type argument's term and JSON Schema and the schema
of the outcome to answer (the message's `types` and `schema`).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Callable

from flowdata.canonical import dumps as canonical_json
from flowrt.bindings import PENDING, Problem, _as_outcome, accepts_call
from flowrt.tool_types import ToolCall
from flowdata.bigint import text_int


def describe(declared_in: str, tools: list[str]) -> list[dict]:
    import flowc
    from flowc.files import read_text

    compiled = flowc.compile(declared_in, read_text, generate=False)
    if not compiled.ok:
        raise SystemExit(f"{declared_in} does not check")
    out = []
    for identity in tools:
        d = compiled.tools.get(identity)
        if d is None:
            raise SystemExit(f"{declared_in} declares no Tool {identity}")
        out.append({"tool": d["tool"], "fingerprint": d["fingerprint"], "signature": d["signature"]})
    return out


def serve(handlers: dict[str, Callable], *, declared_in: str) -> None:
    lock = threading.Lock()
    cancelled: set[str] = set()
    # Bytes, not the text streams: the protocol is UTF-8 whatever the locale says (an MCP client
    # or a service manager may start the process with none).
    out = sys.stdout.buffer

    def send(message: dict) -> None:
        # the canonical writer, not json.dumps: an Int of any size up to the limit (json.dumps stops at
        # CPython's 4,300 digits). What it cannot write is answered, so the call never hangs.
        try:
            line = canonical_json(message)
        except (ValueError, TypeError) as problem:
            line = canonical_json({"id": message.get("id"), "outcome": {"Err": {"BadReply": (
                f"the implementation's answer cannot be written as JSON: {problem}")}}})
        with lock:
            out.write(line + b"\n")
            out.flush()

    takes_call = {tool: accepts_call(handler) for tool, handler in handlers.items()}

    def answer(message: dict, arguments: dict) -> None:
        call_id, tool = message["id"], message.get("tool")
        handler = handlers.get(tool)
        if handler is None:
            outcome = {"Err": {"NotRun": f"this implementation does not serve {tool}"}}
        else:
            if takes_call[tool] and "call" not in arguments:
                arguments = {**arguments, "call": tool_call(message)}
            try:
                outcome = _as_outcome(handler(**arguments))
            except Problem as problem:
                outcome = problem.outcome()
            except Exception as problem:  # effects unknown
                outcome = {"Err": {"Unknown": f"{type(problem).__name__}: {problem}"}}
        if call_id in cancelled:
            return
        if outcome is PENDING:
            send({"id": call_id, "pending": True})
        else:
            send({"id": call_id, "outcome": outcome})

    # Each call runs on a thread of its own, so a slow one never holds up the next; a thread that
    # finished its call waits for another rather than exiting (starting a thread per call cost
    # ~30 us more per call than handing the call to one waiting). Not ThreadPoolExecutor: it bounds
    # its threads, so calls past the bound would wait behind slow ones, and its threads are
    # joined at exit, so a handler that never returns would keep the process from ending when
    # the host closes its input; these threads are daemons, as the thread per call was.
    calls: queue.SimpleQueue = queue.SimpleQueue()
    idle = [0]  # threads waiting on `calls` (guarded by `lock`)

    def worker(message: dict, arguments: dict) -> None:
        while True:
            answer(message, arguments)
            with lock:
                idle[0] += 1
            message, arguments = calls.get()

    def dispatch(message: dict, arguments: dict) -> None:
        with lock:
            waiting = idle[0] > 0
            if waiting:
                idle[0] -= 1
        if waiting:
            calls.put((message, arguments))
        else:
            threading.Thread(target=worker, args=(message, arguments), daemon=True).start()

    for line in sys.stdin.buffer:
        try:
            message = json.loads(line, parse_int=text_int)
        except ValueError:  # not UTF-8 or not JSON: the host never sends it
            continue
        if not isinstance(message, dict):
            continue
        op = message.get("op")
        if op == "describe":
            send({"op": "described", "tools": describe(declared_in, sorted(handlers))})
        elif op == "call" and isinstance(message.get("id"), str):
            arguments = message.get("arguments")
            dispatch(message, arguments if isinstance(arguments, dict) else {})
        elif op == "cancel":
            cancelled.add(message.get("id"))


def tool_call(message: dict) -> ToolCall:
    """The `ToolCall` a call message describes (its `types` and `schema` only for a generic Tool)."""
    types = message.get("types") if isinstance(message.get("types"), dict) else {}
    terms, defs, schemas = {}, {}, {}
    for name, argument in types.items():
        if isinstance(argument, dict):
            terms[name] = argument.get("term")
            defs.update(argument.get("defs") or {})
            schemas[name] = argument.get("schema")
    schema = message.get("schema")
    return ToolCall(str(message.get("run", "")), message["id"], str(message.get("tool")), terms, defs, schemas,
                    schema if isinstance(schema, dict) else None)
