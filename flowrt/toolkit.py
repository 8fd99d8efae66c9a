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

    # Leader/follower: one thread at a time reads stdin (the leader). The leader that reads a call
    # hands reading to another thread (one waiting, or a new one) and then runs the call itself,
    # so the call starts on the thread that read it, without waiting for a wake-up: handing each
    # call to a waiting worker put its wake-up on the critical path, most of a ~30-40 µs round
    # trip against ~10 µs for answering on the reading thread (docs/impl.md, "A Tool process's
    # round trip"). The next leader's wake-up happens while the call runs. So calls still run at once (a slow one never holds up the next line, and a
    # cancel is read while calls run), a thread whose call ended waits to lead again rather than
    # exiting, and there are never more threads than calls in flight plus the one reading.
    # Not ThreadPoolExecutor: it bounds its threads, so calls past the bound would wait behind
    # slow ones, and its threads are joined at exit, so a handler that never returns would keep
    # the process from ending when the host closes its input. These threads are daemons, and the
    # main thread only waits for the input to end (or for reading to fail), then returns.
    source = sys.stdin.buffer
    promote: queue.SimpleQueue = queue.SimpleQueue()  # one item: one waiting thread leads
    idle = [0]  # threads waiting on `promote` (guarded by `lock`)
    ended = threading.Event()
    failure: list[BaseException] = []  # what ended reading, re-raised on the main thread

    def next_call() -> tuple[dict, dict] | None:
        """Read lines, serving those that are not calls, until a call (None at end of input)."""
        while True:
            line = source.readline()
            if not line:
                return None
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
                return message, arguments if isinstance(arguments, dict) else {}
            elif op == "cancel":
                cancelled.add(message.get("id"))

    def hand_over() -> None:
        with lock:
            waiting = idle[0] > 0
            if waiting:
                idle[0] -= 1
        if waiting:
            promote.put(None)
        else:
            threading.Thread(target=lead, daemon=True).start()

    def lead() -> None:
        while True:
            try:
                call = next_call()
            except BaseException as problem:  # e.g. describe's SystemExit: the process must end
                failure.append(problem)
                call = None
            if call is None:
                ended.set()
                return
            hand_over()
            answer(*call)
            with lock:
                idle[0] += 1
            promote.get()

    threading.Thread(target=lead, daemon=True).start()
    ended.wait()
    if failure:
        raise failure[0]


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
