"""Binding: each Tool a run can reach gets its implementation (a Python callable, a command
speaking the JSON-lines protocol, an MCP server, a model endpoint, a pending question, or the
host's own std Tools), approved where it runs a command or sends prompts away. Any failure is a
refusal before the run's Start (`bind`, the one entry)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from flowc.compiled import Compiled
from flowc.diagnostics import Location, M
from flowc.diagnostics.places import toml_error_location, toml_key_location
from flowrt import bindings as B
from flowrt.refusal import _text_or_empty, refuse


@dataclass
class RunHost:
    """What the host's `std@v1/runner` needs to know of a run to start nested ones beside it:
    where its runs are stored, and how durably (its bindings and approval are bind's own); and
    the Tool processes a long-lived host keeps across runs (flowrt/tool_processes.py), if any."""

    runs_dir: str = ".flow/runs"
    durability: str = "fsync"
    processes: object = None  # a ToolProcesses, or None: each run starts its own


def bind(compiled: Compiled, path: str, tools: dict[str, dict], python_tools: dict, *, allow: bool, ask,
         host: RunHost | None = None, manifest_dir: str | None = None, approvals: list | None = None) -> dict:
    """Each Tool's implementation. A command flow.toml names runs only when approved
    (flowrt/approvals.py); each approval is added to `approvals` as its host record."""
    from flowrt.approvals import Approvals

    manifest_dir = manifest_dir or B.manifest_dir(path)
    approval = Approvals(manifest_dir, host.runs_dir if host is not None else None)
    manifest_path = os.path.join(manifest_dir, "flow.toml")
    manifest_text = _text_or_empty(manifest_path)
    sources = {manifest_path: manifest_text} if manifest_text else None

    def entry_at(key: str | None) -> Location | None:
        """The line of flow.toml's `[tools]` entry `key` (its table's header, failing that)."""
        return toml_key_location(manifest_path, manifest_text, "tools", key)

    try:
        manifest = B.read_manifest(manifest_path)
    except B.BindError as problem:
        if problem.syntax is not None:
            where = toml_error_location(manifest_path, problem.syntax, manifest_text)
        else:
            where = entry_at(problem.key)
        raise refuse(M.binding_failed(problem=problem), where, sources) from None
    # Before anything is started (a command, a server), so a refusal here leaves nothing running.
    for identity in tools:
        if identity in python_tools:
            problem = signature_mismatch(python_tools[identity], tools[identity])
            if problem is not None:
                raise refuse(M.binding_failed(problem=B.BindError(problem)), None, sources)
    out: dict[str, B.Implementation] = {}
    commands: dict[tuple[str, ...], B.CommandTools] = {}
    servers: dict = {}  # an MCP server's command or URL -> its McpTools (one session per server)
    models: dict[str, B.Implementation] = {}
    python = B.PythonTools(python_tools) if python_tools else None
    clock = B.ClockTools()
    pending = B.PendingTools()
    runner = None
    for identity in tools:
        if python is not None and identity in python_tools:
            out[identity] = python
            continue
        if identity.startswith("std@v1/clock."):
            out[identity] = clock
            continue
        if identity.startswith("std@v1/runner."):
            if runner is None:
                from flowrt.nested import RunnerTools

                runner = RunnerTools(host or RunHost(), python_tools=python_tools, allow=allow,
                                     manifest_dir=manifest_dir)
            out[identity] = runner
            continue
        entry = B.manifest_entry_for(manifest, identity)
        if entry is None:
            raise refuse(M.binding_missing(identity=identity), entry_at(None), sources)
        if entry.pending:
            out[identity] = pending
            continue
        if entry.mcp:
            out[identity] = _bind_mcp(entry, identity, tools[identity], servers, commands, approval, allow=allow,
                                      ask=ask, approvals=approvals, manifest_dir=manifest_dir,
                                      where=entry_at(entry.key), sources=sources)
            continue
        if entry.model is not None:
            from flowrt import model_tools

            consent = model_tools.consent(entry) if entry.key not in models else None
            if consent is not None:
                decision = approval.decide(consent, allow=allow, ask=ask)
                if decision.decision != "approved":
                    for c in [*commands.values(), *models.values()]:
                        c.close()
                    raise refuse(M.binding_not_approved(shown=" ".join(consent),
                                                        nobody_to_ask=decision.how == "nobody-to-ask"),
                                 entry_at(entry.key), sources)
                if approvals is not None:
                    approvals.append(decision.host_record())
            try:
                out[identity] = model_tools.bind(models, manifest_path, entry, identity, tools[identity])
            except B.BindError as problem:
                for c in [*commands.values(), *models.values()]:
                    c.close()
                raise refuse(M.binding_failed(problem=problem), entry_at(entry.key), sources) from None
            continue
        assert entry.command is not None
        shown = entry.shown or " ".join(entry.command)
        if entry.command not in commands:
            decision = approval.decide(entry.command, allow=allow, ask=ask)
            if decision.decision != "approved":
                for c in [*commands.values(), *servers.values()]:
                    c.close()
                raise refuse(M.binding_not_approved(shown=shown, nobody_to_ask=decision.how == "nobody-to-ask"),
                             entry_at(entry.key), sources)
            if approvals is not None:
                approvals.append(decision.host_record())
            keeper = host.processes if host is not None and entry.reuse else None
            try:
                if keeper is not None:
                    implementation = keeper.checkout(list(entry.command), manifest_dir, shown)
                else:
                    implementation = B.CommandTools(list(entry.command), manifest_dir, shown)
                    implementation.start()
            except B.BindError as problem:
                for c in [*commands.values(), *servers.values()]:
                    c.close()
                raise refuse(M.binding_failed(problem=problem), entry_at(entry.key), sources) from None
            commands[entry.command] = implementation
        implementation = commands[entry.command]
        described = implementation.describe() or {}
        want = tools[identity]["fingerprint"]
        if described.get(identity) != want:
            for c in [*commands.values(), *servers.values()]:
                c.close()
            found = described.get(identity)
            raise refuse(M.binding_mismatch(shown=shown, identity=identity, found=found, declared=want),
                         entry_at(entry.key), sources)
        out[identity] = implementation
    return out


def close_bound(implementations: dict) -> None:
    """Let go of a run's implementations (a kept Tool process goes back to its keeper)."""
    for implementation in set(implementations.values()):
        implementation.close()


def signature_mismatch(fn, description: dict) -> str | None:
    """Why the Python callable `fn` cannot be called with Tool `description`'s arguments (passed
    as keyword arguments, with `call` added where `fn` asks for it), or None. Checked when the
    run is bound, so a mismatch refuses the run before Start instead of failing each call as
    Unknown(TypeError). A callable without a signature (some builtins) is taken on trust."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    declared = [p["name"] for p in description.get("params", [])]
    kinds = inspect.Parameter
    by_keyword = {name for name, p in parameters.items() if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}
    takes_any = any(p.kind is kinds.VAR_KEYWORD for p in parameters.values())
    missing = [name for name in declared if name not in by_keyword and not takes_any]
    # `call` is the host's to give (flowrt.ToolCall) unless the Tool has an argument of that name.
    given = set(declared) | ({"call"} if "call" not in declared else set())
    extra = [name for name, p in parameters.items()
             if name not in given and p.default is kinds.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
    if not missing and not extra:
        return None
    what = []
    if missing:
        what.append("it takes no parameter " + ", ".join(f"`{n}`" for n in missing))
    if extra:
        what.append("it needs " + ", ".join(f"`{n}`" for n in extra) + ", which the Tool does not give")
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return (f"the Python callable {name}{_shown_signature(fn)} bound to {description['tool']} does not match its "
            f"declaration `{description.get('signature', description['tool'])}`: {'; '.join(what)} (its arguments "
            "are passed by keyword; take **kwargs to accept any)")


def _shown_signature(fn) -> str:
    import inspect

    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return ""


def _bind_mcp(entry, identity: str, description: dict, servers: dict, commands: dict, approval, *, allow: bool, ask,
              approvals: list | None, manifest_dir: str, where, sources):
    """The McpTools serving `identity` (flowrt/mcp_tools.py): one session per server, opened
    on first use; a stdio server's command is approved as any command is. Its tool must take
    what the declaration gives (the binding's fingerprint check, against the inputSchema)."""
    from flowrt.mcp_tools import McpTools

    def refused(message):
        for c in [*commands.values(), *servers.values()]:
            c.close()
        return refuse(message, where, sources)

    key = entry.command if entry.command is not None else entry.mcp_url
    server = servers.get(key)
    if server is None:
        if entry.command is not None:
            shown = " ".join(entry.command)
            decision = approval.decide(entry.command, allow=allow, ask=ask)
            if decision.decision != "approved":
                raise refused(M.binding_not_approved(shown=shown, nobody_to_ask=decision.how == "nobody-to-ask"))
            if approvals is not None:
                approvals.append(decision.host_record())
            server = McpTools(command=list(entry.command), cwd=manifest_dir)
        else:
            server = McpTools(url=entry.mcp_url)
        try:
            server.start()
        except B.BindError as problem:
            raise refused(M.binding_failed(problem=problem)) from None
        servers[key] = server
    problem = server.bind_tool(identity, description)
    if problem is not None:
        raise refused(M.binding_failed(problem=B.BindError(problem)))
    return server
