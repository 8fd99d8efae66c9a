"""MCP servers as Tool implementations (DESIGN.md §3): `{ mcp = [...] }` (stdio) and
`{ mcp_url = "..." }` (streamable HTTP) in flow.toml, through the official `mcp` SDK's client.

One session per server per run host, calls multiplexed on it. The SDK is asyncio; the host is
threads: the session lives on an event loop of its own thread, and each call is a coroutine
submitted there (`run_coroutine_threadsafe`) whose outcome is delivered from that loop. Every wait
is bounded: opening the session (START_SECONDS), a call (CALL_SECONDS), closing (CLOSE_SECONDS).

A Flow Tool `module.name` is the server's tool `name` (or the one whose name `flow_name` turns into
`name`, as `flow tools import-mcp` writes it). What a reply becomes (docs/cli.md, "MCP servers"):
`structuredContent` is the Ok value, unwrapped from `{"result": v}` when the tool's outputSchema is
the SDK's wrapping of a non-object return; without it the text content is the value, parsed as
JSON unless the declared type is Text. `isError` (or a JSON-RPC error answering the call) is
`Failed(text)` where the declared error type is Text or json.Value, else BadReply. A server that
cannot be reached before the call is sent is NotRun; a transport that breaks, or a call that
passes CALL_SECONDS, with the call out is Unknown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
from decimal import Decimal, InvalidOperation
from typing import Any

from flowrt.bindings import BindError, Deliver, Implementation

START_SECONDS = 30
CALL_SECONDS = 600
CLOSE_SECONDS = 5


WORDS = frozenset({"use", "as", "pub", "type", "flow", "let", "guard", "else", "if", "match", "return",
                   "true", "false", "tool", "test", "fake"})


def flow_name(name: str) -> str:
    """The Flow name `flow tools import-mcp` declares an MCP tool or parameter under: characters a
    Flow name cannot hold become `_`, it starts lower-case (with `t_` before a digit), and a
    keyword gets a trailing `_`. The binding maps the names back the same way."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not text or text[0].isdigit():
        text = "t_" + text
    text = text[0].lower() + text[1:]
    return text + "_" if text in WORDS else text


def _find(wanted: str, names) -> str | None:
    """The one of `names` that is `wanted`, or that `flow_name` makes `wanted`."""
    if wanted in names:
        return wanted
    matches = [n for n in names if flow_name(n) == wanted]
    return matches[0] if len(matches) == 1 else None


class McpTools(Implementation):
    """The tools of one MCP server, over one client session held open for the run host."""

    def __init__(self, *, command: list[str] | None = None, url: str | None = None, cwd: str | None = None,
                 shown: str | None = None) -> None:
        assert (command is None) != (url is None)
        self.command = command
        self.url = url
        self.cwd = cwd
        self.shown = shown or (" ".join(command) if command else url)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp client", daemon=True)
        self.session: Any = None
        self.server_tools: dict[str, Any] = {}  # MCP tool name -> mcp.types.Tool
        self.declared: dict[str, dict] = {}  # Flow identity -> its `flow tools` description
        self.names: dict[str, str] = {}  # Flow identity -> MCP tool name
        self.renamed: dict[str, dict[str, str]] = {}  # Flow identity -> its parameters' property names
        self.lock = threading.Lock()
        self.calls: dict[str, concurrent.futures.Future] = {}
        #: why calls are no longer sent (the session ended); None while it serves
        self.gone: str | None = None
        self.closing: asyncio.Event | None = None
        self.ended: concurrent.futures.Future | None = None

    # ---- the session -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the session and list the server's tools, within START_SECONDS."""
        self.thread.start()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self.ended = asyncio.run_coroutine_threadsafe(self._hold(ready), self.loop)
        try:
            ready.result(timeout=START_SECONDS)
        except concurrent.futures.TimeoutError:
            self.close()
            raise BindError(f"the MCP server `{self.shown}` did not answer within {START_SECONDS} s") from None
        except BaseException as problem:  # noqa: BLE001 - any failure to start is the binding's refusal
            self.close()
            raise BindError(f"cannot start the MCP server `{self.shown}`: {_describe(problem)}") from None

    async def _hold(self, ready: concurrent.futures.Future) -> None:
        """The session's task: open the transport and the session, list the tools, then hold
        both open until `close` (the SDK's contexts must be left on the task that entered them)."""
        import contextlib

        from mcp.client.session import ClientSession

        self.closing = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.command is not None:
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    params = StdioServerParameters(command=self.command[0], args=self.command[1:], cwd=self.cwd,
                                                   env=dict(os.environ))
                    errlog = stack.enter_context(open(os.devnull, "w"))
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                else:
                    from mcp.client.streamable_http import streamable_http_client

                    streams = await stack.enter_async_context(streamable_http_client(self.url))
                    read, write = streams[0], streams[1]  # some SDK versions add a session-id getter
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
                self.server_tools = {t.name: t for t in listed.tools}
                self.session = session
                ready.set_result(None)
                await self.closing.wait()
        except BaseException as problem:  # noqa: BLE001 - reported to whoever waits
            if not ready.done():
                ready.set_exception(problem)
            with self.lock:
                if self.gone is None:
                    self.gone = f"the MCP server `{self.shown}` ended ({_describe(problem)})"
            if not isinstance(problem, Exception):
                raise
        finally:
            with self.lock:
                if self.gone is None:
                    self.gone = f"the MCP server `{self.shown}` was closed"

    # ---- binding -----------------------------------------------------------------------------

    def bind_tool(self, identity: str, description: dict) -> str | None:
        """Take `identity` (its `flow tools` description) as one of the server's tools: None,
        or why the server's tool does not fit the declaration (the binding is then refused)."""
        wanted = identity.rsplit(".", 1)[1]
        name = _find(wanted, self.server_tools)
        if name is None:
            return (f"the MCP server `{self.shown}` has no tool `{wanted}` (it has "
                    f"{', '.join(sorted(self.server_tools)) or 'none'})")
        schema = self.server_tools[name].input_schema or {}
        properties = schema.get("properties") or {}
        # A parameter is the property of its name, or the one import-mcp renamed to it.
        renamed = {p["name"]: _find(p["name"], properties) or p["name"] for p in description.get("params", [])}
        description = {**description, "params": [{**p, "name": renamed[p["name"]]}
                                                  for p in description.get("params", [])]}
        problem = schema_mismatch(description, schema)
        if problem is not None:
            return f"the MCP tool `{name}` of `{self.shown}` does not take what `{identity}` declares: {problem}"
        self.declared[identity] = description
        self.names[identity] = name
        self.renamed[identity] = renamed
        return None

    # ---- calls -------------------------------------------------------------------------------

    def call(self, run, call_id, tool, arguments, types, deliver: Deliver) -> None:
        with self.lock:
            gone = self.gone
        if gone is not None or self.session is None:
            deliver(call_id, {"Err": {"NotRun": f"not sent: {gone or 'the MCP session is not open'}"}})
            return
        description = self.declared[tool]
        renamed = self.renamed[tool]
        sent = to_mcp_arguments({renamed.get(k, k): v for k, v in arguments.items()}, description)
        future = asyncio.run_coroutine_threadsafe(self._call(self.names[tool], sent), self.loop)
        with self.lock:
            self.calls[call_id] = future

        def done(f: concurrent.futures.Future) -> None:
            with self.lock:
                mine = self.calls.pop(call_id, None) is not None
            if not mine or f.cancelled():
                return  # cancelled by the host: nobody waits for it any more
            deliver(call_id, self._outcome(description, self.names[tool], f))

        future.add_done_callback(done)

    async def _call(self, name: str, arguments: dict) -> Any:
        return await asyncio.wait_for(self.session.call_tool(name, arguments), CALL_SECONDS)

    def _outcome(self, description: dict, name: str, future: concurrent.futures.Future) -> dict:
        from mcp.shared.exceptions import MCPError

        try:
            result = future.result()
        except (asyncio.TimeoutError, concurrent.futures.TimeoutError):
            return {"Err": {"Unknown": f"the MCP tool `{name}` did not answer within {CALL_SECONDS} s"}}
        except MCPError as problem:
            if problem.code == _CONNECTION_CLOSED:
                with self.lock:  # later calls are never sent (NotRun), not lost in a closed session
                    if self.gone is None:
                        self.gone = f"the connection to the MCP server `{self.shown}` had closed"
                return {"Err": {"Unknown": f"the connection to `{self.shown}` closed with the call out"}}
            return error_outcome(description, f"{problem.error.message}")
        except Exception as problem:  # the transport broke with the call out
            return {"Err": {"Unknown": f"the MCP session with `{self.shown}` failed with the call out: "
                                       f"{_describe(problem)}"}}
        return reply_outcome(description, self.server_tools[name], result)

    def cancel(self, call_id: str) -> None:
        with self.lock:
            future = self.calls.pop(call_id, None)
        if future is not None:
            future.cancel()  # the SDK tells the server the request is cancelled

    def close(self) -> None:
        with self.lock:
            if self.gone is None:
                self.gone = f"the MCP server `{self.shown}` was closed"
        if self.thread.is_alive():
            if self.closing is not None:
                self.loop.call_soon_threadsafe(self.closing.set)
            if self.ended is not None:
                try:
                    self.ended.result(timeout=CLOSE_SECONDS)
                except BaseException:  # noqa: BLE001 - closing reports nothing; the process ends anyway
                    pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CLOSE_SECONDS)

    def label(self) -> str:
        return "mcp " + self.shown


_CONNECTION_CLOSED = -32000


def _describe(problem: BaseException) -> str:
    """A failure as one line; an exception group (anyio's task groups) by its first leaf."""
    while isinstance(problem, BaseExceptionGroup) and problem.exceptions:
        problem = problem.exceptions[0]
    text = str(problem) or type(problem).__name__
    return text if len(text) < 400 else text[:400] + "..."


# ---- outcomes ----------------------------------------------------------------------------------


def error_outcome(description: dict, text: str) -> dict:
    """The server said the call failed, with `text`: Failed where the declared error type holds
    a text (Text, json.Value), else BadReply (a Tool without Result, or a typed error)."""
    err = description.get("err")
    if err == "Text" or err == "json.Value":
        return {"Err": {"Failed": text}}
    return {"Err": {"BadReply": f"the MCP tool answered an error: {text}"}}


def reply_outcome(description: dict, tool: Any, result: Any) -> dict:
    from flowdata import codec

    text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    if result.is_error:
        return error_outcome(description, text or "the MCP tool answered isError with no text")
    ok, defs = description.get("ok"), description.get("types", {})
    if result.structured_content is not None:
        value: Any = result.structured_content
        if _wraps_result(tool.output_schema) and not _has_field(ok, defs, "result") and isinstance(value, dict):
            value = value.get("result")
    elif ok == "Text":
        value = text
    elif ok == "Unit" and not text:
        value = None
    else:
        try:
            value = codec.parse_json(text.encode("utf-8"))
        except codec.DecodeError as problem:
            return {"Err": {"BadReply": f"the MCP tool's text is not JSON ({problem.message}): {text[:200]!r}"}}
    return {"Ok": from_mcp(value, ok, defs)}


def _wraps_result(schema: dict | None) -> bool:
    """Whether an outputSchema is the SDK's wrapping of a non-object return: `{"result": ...}`."""
    return (isinstance(schema, dict) and set((schema.get("properties") or {})) == {"result"}
            and schema.get("required") == ["result"])


def _has_field(term: Any, defs: dict, field: str) -> bool:
    if isinstance(term, dict) and "Named" in term:
        kind = defs.get(term["Named"], {}).get("kind", {})
        return any(f["name"] == field for f in kind.get("record", {}).get("fields", []))
    return term in ("json.Value",) or (isinstance(term, dict) and "Dict" in term)


def from_mcp(value: Any, term: Any, defs: dict) -> Any:
    """An MCP JSON value made the ABI's JSON for `term` where they differ: a number where a
    Decimal is declared becomes the Decimal's text. The host decodes the rest as any reply."""
    if term == "Decimal" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return _decimal_text(value)
    return _walk(value, term, defs, from_mcp)


def to_mcp(value: Any, term: Any, defs: dict) -> Any:
    """The ABI's JSON of an argument made what a JSON Schema `number` expects: a Decimal's text
    becomes a number (exact as an int when it is whole)."""
    if term == "Decimal" and isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return value
        return int(number) if number == number.to_integral_value() else float(number)
    return _walk(value, term, defs, to_mcp)


def _walk(value: Any, term: Any, defs: dict, step) -> Any:
    if not isinstance(term, dict) or value is None:
        return value
    if "List" in term and isinstance(value, list):
        return [step(v, term["List"], defs) for v in value]
    if "Option" in term:
        return step(value, term["Option"], defs)
    if "Dict" in term and isinstance(value, dict) and term["Dict"][0] == "Text":
        return {k: step(v, term["Dict"][1], defs) for k, v in value.items()}
    if "Named" in term and isinstance(value, dict):
        fields = defs.get(term["Named"], {}).get("kind", {}).get("record", {}).get("fields")
        if fields is not None:
            types = {f["name"]: f["type"] for f in fields}
            return {k: step(v, types[k], defs) if k in types else v for k, v in value.items()}
    return value


def _decimal_text(number: int | float) -> str:
    text = format(Decimal(repr(number)) if isinstance(number, float) else Decimal(number), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def to_mcp_arguments(arguments: dict, description: dict) -> dict:
    """The call's arguments object for the MCP tool: an Option parameter that is None is left
    out (a JSON Schema optional property is absent, not null)."""
    terms = {p["name"]: p["type"] for p in description.get("params", [])}
    defs = description.get("types", {})
    out = {}
    for name, value in arguments.items():
        term = terms.get(name)
        if value is None and isinstance(term, dict) and "Option" in term:
            continue
        out[name] = to_mcp(value, term, defs)
    return out


# ---- the fingerprint check ---------------------------------------------------------------------

_SCHEMA_TYPES = {"Text": {"string"}, "Int": {"integer"}, "Decimal": {"number", "integer"}, "Bool": {"boolean"}}


def schema_mismatch(description: dict, schema: dict) -> str | None:
    """Why the declared parameters do not fit an MCP tool's inputSchema, or None: each declared
    parameter must be a property, each required property a parameter that is not an Option, and
    a parameter of a scalar, list or record type must be a property of that JSON type."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params = {p["name"]: p["type"] for p in description.get("params", [])}
    extra = sorted(set(params) - set(properties))
    if extra and schema.get("additionalProperties") is not True:
        return f"it has no parameter {', '.join(extra)}"
    missing = sorted(required - set(params))
    if missing:
        return f"it requires {', '.join(missing)}, which the declaration does not have"
    for name, term in sorted(params.items()):
        if name in required and isinstance(term, dict) and "Option" in term:
            return f"`{name}` is required there, but declared as an Option"
        problem = _type_mismatch(term, properties.get(name) or {})
        if problem is not None:
            return f"`{name}`: {problem}"
    return None


def _type_mismatch(term: Any, schema: dict) -> str | None:
    if isinstance(term, dict) and "Option" in term:
        term = term["Option"]
    kinds = schema.get("type")
    if kinds is None:
        return None  # anyOf, $ref, ...: the server validates the value itself
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    expected = _SCHEMA_TYPES.get(term) if isinstance(term, str) else \
        {"array"} if isinstance(term, dict) and ("List" in term or "Set" in term) else \
        {"object"} if isinstance(term, dict) and "Dict" in term else None
    if expected is None or kinds & expected:
        return None
    return f"declared {term if isinstance(term, str) else next(iter(term))}, the server's schema says {'/'.join(sorted(kinds))}"
