"""`flow mcp`: the Model Context Protocol server (the execution seed's "CLI and MCP surface").

It offers check, run, resume, replay, history and runs as tools, with the meaning the commands of
the same names have: each tool calls the function its command calls and returns that function's
result as data (never styled). Requests are answered concurrently: each tool's work runs on a
worker thread, so a long run holds up no other request. A client that cancels a run or resume
halts the run as an interrupt does (a `halted` host record, no End; `flow resume` continues it),
and the cancelled call is answered by nothing (the SDK drops it).

The server never asks for approval: a run or resume that needs an implementation flow.toml names
is refused unless the server was started with `--allow`. It uses one runs directory, chosen when
it starts (`--runs`, `$FLOW_RUNS` or `./.flow/runs`).

It serves the files under one root (`--root DIR`, default its working directory): `check` and
`run` refuse a path that is not under it (links followed), relative paths are taken from it, and
no module or pinned directory outside it is read (`flowc.disk.DiskChecks(jail=root)`).

For a run request with a progress token, one progress notification says that storage accepted
Start, before the program is driven: progress 1, a message naming the run, and in `_meta` the
request id (as the client typed it), the run id, the fact number and its hash. It carries no Flow
value. If it cannot be sent, the run is halted, as a failed transport asks (the Start stays). Then
(and for a resume with a progress token) one notification per fact accepted, as the run goes
(`flowrt.mcp_feed`), the last ones before the request is answered.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import anyio
import anyio.to_thread
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from flowdata.canonical import dumps as canonical_json
# A run's or resume's result is the document `flow run --json` prints.
from flowrt.mcp_feed import Feed
from flowrt.reply_check import with_expected_replies
from flowrt.results import outcome_document as outcome_json
from flowrt.store import KINDS, VALUE_FIELDS, RunNotFound, RunLog, is_database_url, open_store, StorageError

PAGE_DEFAULT, PAGE_MAX = 50, 200
TEXT_LIMIT = 1024  # code points of a fact's summary
VALUE_LIMIT = 4096  # bytes of a fact's value JSON; larger values are omitted
SOURCE_CHUNK = 4096  # code points of recorded source per page

INSTRUCTIONS = """Flow programs are typed, durable orchestrations. `check` checks programs; `run` runs one
and records its history; `resume` continues a paused, halted or crashed run (answering an open call
with `call` and `reply`); `replay` re-runs a run against its history, calling nothing; `history` pages
through a run's recorded facts and sources; `runs` lists stored runs. Results are JSON data."""


def build_server(runs_dir: str, *, allow: bool = False, driving: "Driving | None" = None,
                 root: str | None = None) -> MCPServer:
    """The server, its tools bound to `runs_dir`, the approval policy `allow` and the files under
    `root` (default: the working directory); the runs it drives are kept in `driving`."""
    server = MCPServer("flow", instructions=INSTRUCTIONS, log_level="WARNING")
    driving = driving if driving is not None else Driving()
    _drive = driving.drive
    served = os.path.realpath(root if root is not None else os.getcwd())
    # Runs are stored by path: relative to the working directory the server started in, not to `root`.
    if not is_database_url(runs_dir):
        runs_dir = os.path.abspath(runs_dir)

    def under_root(path: str) -> str:
        return served_path(served, path)

    async def check(paths: list[str]) -> dict[str, Any]:
        """Check Flow programs (files, or directories searched for .flow files): every diagnostic,
        and the places a checkpoint can be taken. `ok` is false when any error was found."""
        from flowc.check_cmd import run_check

        if not paths:
            raise ToolError("give at least one path")
        inside = [under_root(path) for path in paths]
        report = await anyio.to_thread.run_sync(lambda: run_check(inside, jail=served))
        return report.to_json()

    async def run(file: str, ctx: Context, entry: str = "main",
                  input: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the `pub flow` `entry` of the program `file` live with `input` (an object keyed by
        parameter name), recording its history in the server's runs directory. Returns the exit
        code and ending, the run id, the entry's result (`output`), pending calls when it paused,
        the fault, or the diagnostics of a refusal. Cancelling the call halts the run."""
        from flowrt.run import run as run_program

        text = orjson.dumps(input if input is not None else {}).decode()
        program = under_root(file)
        announce = _announcer(ctx)
        feed = Feed(ctx.request_context, runs_dir)

        def started(halt: threading.Event, run_id: str, start: dict) -> None:
            driving.name(halt, run_id)
            announce(halt, run_id, start)
            feed.halt = halt
            feed.begin(run_id, since=start["n"])

        return await feed.around(_drive(
            lambda halt: run_program(program, entry=entry, input_text=text, runs_dir=runs_dir, allow=allow,
                                     ask=None, halt=halt, jail=served, processes=driving.processes,
                                     child=driving.children.take_soon(),
                                     on_start=lambda run_id, start: started(halt, run_id, start))))

    async def resume(run: str, ctx: Context, call: str | None = None, reply: dict[str, Any] | None = None,
                     resend: list[str] | None = None, admit_bad_reply: bool = False) -> dict[str, Any]:
        """Continue a paused, halted or crashed run from its history. `call` and `reply` (an
        outcome: {"Ok": value} or {"Err": problem}) answer an open call; a reply that does not
        decode as the call's declared types is refused (exitCode 2, nothing recorded, the call
        stays open; `refusal` has the path, the JSON Schema and an example that fits) unless
        `admit_bad_reply` admits it as BadReply. `resend` names calls that were out at a crash to
        send again under the same ids. Cancelling the call halts the run."""
        from flowrt.replay import resume as resume_run

        if (call is None) != (reply is None):
            raise ToolError("call and reply go together")
        reply_text = None if reply is None else orjson.dumps(reply).decode()
        await driving.settled(run)  # a run being halted (its call cancelled) is let go first
        feed = Feed(ctx.request_context, runs_dir)
        if feed.wanted:
            await anyio.to_thread.run_sync(lambda: feed.begin(run))

        def work(halt: threading.Event):
            feed.halt = halt
            return resume_run(runs_dir, run, call=call, reply_text=reply_text, resend=set(resend or ()),
                              allow=allow, ask=None, halt=halt, admit_bad_reply=admit_bad_reply,
                              processes=driving.processes, child=driving.children.take_soon())

        return await feed.around(_drive(work, run))

    async def replay(run: str, from_latest_checkpoint: bool = False) -> dict[str, Any]:
        """Re-run a recorded run against its history, calling nothing: Matched, Incomplete, or
        Diverged at a fact. From Start, checking every Checkpoint on the way, unless
        `from_latest_checkpoint` (quicker; the facts before it are trusted). The verdict's `from`
        is the fact the re-run started at. A damaged history is a storage failure, never a verdict."""
        from flowrt.replay import replay as replay_run

        result = await anyio.to_thread.run_sync(
            lambda: replay_run(runs_dir, run, from_start=not from_latest_checkpoint))
        verdict = result.verdict.to_json() if result.verdict is not None else None
        return {"exitCode": result.exit_code, "run": run, "verdict": verdict, "message": result.message,
                "diagnostics": [d.to_json() for d in result.diagnostics]}

    async def history(run: str, kind: str | None = None, offset: int = 0, limit: int = PAGE_DEFAULT,
                      source: str | None = None, source_offset: int = 0) -> dict[str, Any]:
        """A page of a run's verified history: its identity, state, truncation, recorded
        sources, and the facts (of `kind` only, when given) from `offset`, `limit` of them (1 to
        200), numbered as recorded. `source` (a module of the recorded sources) adds up to 4096
        code points of its recorded text from `source_offset`. Facts are shown bounded: a summary
        of at most 1024 code points, and values only when their JSON is at most 4096 bytes."""
        if kind is not None and kind not in KINDS:
            raise ToolError(f"kind is one of {', '.join(KINDS)}")
        _check_page(offset, limit)
        if type(source_offset) is not int or source_offset < 0:
            raise ToolError("source_offset is a number >= 0")
        return await anyio.to_thread.run_sync(
            lambda: history_page(runs_dir, run, kind=kind, offset=offset, limit=limit, source=source,
                                 source_offset=source_offset))

    async def runs(limit: int = PAGE_DEFAULT, after: str | None = None) -> dict[str, Any]:
        """A page of the stored runs in the server's runs directory, by id (metadata only: no
        value or source is read). `limit` is 1 to 200; `after` starts after that run id;
        `nextAfter` is the cursor for the next page (null at the end)."""
        _check_limit(limit)
        try:
            return await anyio.to_thread.run_sync(lambda: open_store(runs_dir).scan(limit=limit, after=after))
        except StorageError as problem:  # a database store that cannot be read
            raise ToolError(f"storage failure: {problem}") from None
        except ValueError as problem:
            raise ToolError(str(problem)) from None

    for tool in (check, run, resume, replay, history, runs):
        server.add_tool(tool, structured_output=True)
    return server


def served_path(served: str, path: object) -> str:
    """`path` (relative ones from the served root) when it is under the served root with its
    links followed; else a tool error that names only the path asked for."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ToolError("a path is a non-empty text without NUL characters")
    joined = os.path.join(served, path)
    real = os.path.realpath(joined)
    if os.path.commonpath([real, served]) != served:
        raise ToolError(f"`{path}` is outside the served root {served} (flow mcp --root); it is not read")
    # A relative path keeps its spelling in diagnostics when it is read from where it was meant.
    if not os.path.isabs(path) and os.path.realpath(os.getcwd()) == served:
        return path
    return joined


def serve(runs_dir: str, *, allow: bool = False, root: str | None = None) -> None:
    """Serve on standard input and output until the client closes them (or an interrupt); then
    halt every run still driven, as an interrupt would, so each records its halt."""
    driving = Driving()
    try:
        build_server(runs_dir, allow=allow, driving=driving, root=root).run("stdio")
    finally:
        driving.halt_all(timeout=30)
        driving.processes.close()
        driving.children.close()


# ---- driving runs ------------------------------------------------------------------------------


class Driving:
    """The runs and resumes the server is driving, each with its halt event."""

    def __init__(self) -> None:
        from flowrt.spare_child import SpareChild
        from flowrt.tool_processes import ToolProcesses

        self.lock = threading.Lock()
        self.active: dict[threading.Event, threading.Event] = {}  # halt -> done
        self.runs: dict[threading.Event, str] = {}  # halt -> the run id, once known
        #: the flow.toml Tool processes kept from one run to the next, as a worker keeps them
        #: (flowrt/tool_processes.py): a client running many short runs starts each command once
        self.processes = ToolProcesses()
        #: the sandbox child started ahead of the next run or resume (flowrt/spare_child.py)
        self.children = SpareChild()

    def name(self, halt: threading.Event, run_id: str) -> None:
        with self.lock:
            if halt in self.active:
                self.runs[halt] = run_id

    async def settled(self, run_id: str, timeout: float = 30) -> None:
        """Wait until no call drives `run_id` (a cancelled one is still writing its halt and
        holds the run's lock until it has)."""
        with self.lock:
            pending = [self.active[halt] for halt, name in self.runs.items() if name == run_id]
        for done in pending:
            await anyio.to_thread.run_sync(done.wait, timeout)

    async def drive(self, work, run_id: str | None = None) -> dict[str, Any]:
        """Run `work(halt)` (a run or a resume) on a worker thread. If the request is cancelled,
        set `halt` and wait for the run to stop (it writes its `halted` record) before letting
        the cancellation go on: the run is halted, not abandoned."""
        halt = threading.Event()
        done = threading.Event()
        box: list = []

        def target() -> None:
            try:
                box.append(work(halt))
            finally:
                self.children.refill()  # the sandbox child of a later run, started now
                with self.lock:
                    self.active.pop(halt, None)
                    self.runs.pop(halt, None)
                done.set()

        with self.lock:
            self.active[halt] = done
            if run_id is not None:
                self.runs[halt] = run_id
        try:
            await anyio.to_thread.run_sync(target, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            halt.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait)
            raise
        return outcome_json(box[0])

    def halt_all(self, timeout: float) -> None:
        with self.lock:
            pending = list(self.active.items())
        for halt, _ in pending:
            halt.set()
        for _, done in pending:
            done.wait(timeout)


def _announcer(ctx: Context):
    """What `on_start` calls on the worker thread: the progress notification of an accepted
    Start, when the request asked for progress (see the module's doc)."""
    context = ctx.request_context
    meta = context.meta or {}
    token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
    request_id = context.request_id

    def announce(halt: threading.Event, run_id: str, start: dict) -> None:
        if token is None:
            return
        from mcp_types import ProgressNotification, ProgressNotificationParams

        notification = ProgressNotification(params=ProgressNotificationParams(
            progress_token=token, progress=1, message=f"run {run_id} started (fact {start['n']} accepted)",
            _meta={"ng.flowla/request": request_id, "ng.flowla/run": run_id,
                   "ng.flowla/fact": str(start["n"]), "ng.flowla/hash": start["hash"]}))
        try:
            anyio.from_thread.run(context.session.send_notification, notification, request_id)
        except Exception:  # noqa: BLE001 - the transport failed: halt, keep the Start
            halt.set()

    return announce


# ---- the history view --------------------------------------------------------------------------


def _check_page(offset: int, limit: int) -> None:
    if type(offset) is not int or offset < 0:
        raise ToolError("offset is a number >= 0")
    _check_limit(limit)


def _check_limit(limit: int) -> None:
    if type(limit) is not int or not 1 <= limit <= PAGE_MAX:
        raise ToolError(f"limit is a number from 1 to {PAGE_MAX}")


def history_page(runs_dir: str, run_id: str, *, kind: str | None, offset: int, limit: int,
                 source: str | None, source_offset: int) -> dict[str, Any]:
    """The MCP history view (the execution seed's bounds). Reads the verified record and its
    recorded sources only: it evaluates nothing, binds nothing and changes nothing."""
    from flowrt.history_scan import scan_history
    from flowrt.run_state import run_state

    try:
        store = open_store(runs_dir).open(run_id, for_append=False, defer=True)
    except StorageError as problem:
        raise ToolError(f"storage failure: {problem}") from None
    except (RunNotFound, ValueError) as problem:
        raise ToolError(str(problem)) from None
    try:
        # One pass, holding the page only (flowrt/history_scan.py), the whole history verified
        page: list[dict] = []
        total = 0

        def visit(f: dict) -> None:
            nonlocal total
            if kind is None or f["kind"] == kind:
                if offset <= total < offset + limit:
                    page.append(f)
                total += 1

        try:
            scanned = scan_history(store, visit)
        except StorageError as problem:
            raise ToolError(f"storage failure: {problem}") from None
        start = store.fact_at(0)
        modules = start.get("modules", [])
        known = {m["module"]: m for m in modules}
        if source is not None and source not in known:
            raise ToolError(f"run {run_id} recorded no module `{source}`")
        sources = []
        text_of: dict[str, str | None] = {}
        for module in modules:
            try:
                text_of[module["module"]] = text = store.source(module["hash"])
            except StorageError:
                text_of[module["module"]] = text = None
            sources.append({"module": module["module"], "commit": module.get("commit"), "hash": module["hash"],
                            "available": text is not None, "length": len(text) if text is not None else None})
        after = offset + len(page)
        ended = store.ended
        state = run_state(store, open_calls=scanned.open_calls)
        # as `flow history --runs`, from the open calls the pass found
        state["open"] = with_expected_replies(store, state["open"], runs=runs_dir, open_call_facts=scanned.open_calls)
        view: dict[str, Any] = {
            "run": run_id,
            "program": start.get("program"),
            "entry": start.get("entry"),
            # as `flow history` says it (flowrt/run_state.py), its open calls and what fits each
            **{name: state[name] for name in ("state", "reason", "hostDecision", "pending", "open")},
            "ending": scanned.last.get("ending") if ended else None,
            "truncated": store.torn_tail is not None,
            "sources": sources,
            "facts": [_bounded_fact(store, fact) for fact in page],
            "page": {"total": total, "offset": offset, "limit": limit,
                     "nextOffset": after if after < total else None},
        }
        if source is not None:
            text = text_of[source]
            if text is None:
                raise ToolError(f"the recorded source of `{source}` is unavailable")
            end = source_offset + SOURCE_CHUNK
            view["source"] = {"module": source, "offset": source_offset, "text": text[source_offset:end],
                              "nextOffset": end if end < len(text) else None}
        return view
    finally:
        store.close()


def _bounded_fact(store: RunLog, fact: dict) -> dict:
    """A fact's row with its summary bounded and its values shown when small enough: a value is
    omitted whole (`valuesOmitted`) rather than cut, while whether it is available, and its hash
    when stored by reference, stay visible. Each value is read once, for the summary."""
    from flowrt.inspect_cmd import describe_fact

    read: dict[str, Any] = {}
    row = describe_fact(store, fact, width=None, read=read)
    summary = row.get("summary", "")
    row["saysTruncated"] = len(summary) > TEXT_LIMIT
    if row["saysTruncated"]:
        row["summary"] = summary[:TEXT_LIMIT - 1] + "…"
    values: dict[str, Any] = {}
    stored: list[dict] = []
    omitted = False
    for name in VALUE_FIELDS[fact["kind"]]:
        if name not in read:
            continue
        entry: dict[str, Any] = {"field": name, "ref": fact.get(name + "_ref")}
        stored.append(entry)
        if store.is_hole(fact, name):
            entry["available"], entry["hole"] = False, True
            continue
        entry["available"] = True
        if len(canonical_json(read[name])) > VALUE_LIMIT:
            omitted = True
        else:
            values[name] = read[name]
    row["values"] = {} if omitted else values
    row["valuesOmitted"] = omitted
    row["stored"] = stored
    return row
