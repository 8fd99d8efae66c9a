"""The `flow` command line's commands, as a click application (`flowrt/cli.py` is the entry point).

Every command's result is data; human text is a rendering of it. Exit codes (docs/cli.md): 0 ok,
1 faulted / tests failed, 2 refused (does not check, bad input, bad arguments, unreadable),
3 paused, 4 completed with the entry's own Err, 5 storage failure, 130 halted by an interrupt.
"""

from __future__ import annotations

import sys

import click

from flowc.cli import COLOR_CHOICES, check_command
from flowrt.cli import ask_on_terminal as _ask_on_terminal
from flowrt.cli import render_refusal, report_outcome, report_refusal, run_program

# orjson and the diagnostics renderer are imported where they are used: most runs of a command
# need neither (no `--json`, nothing to report), and every import is start-up time.


_RUNS_HELP = ("Where runs are stored: a runs directory, or a postgresql:// URL (default: $FLOW_STORE, "
              "$FLOW_RUNS or ./.flow/runs). --store is the same option.")


def _color_option(func):
    """`--color` is global and also accepted after the command name."""
    return click.option("--color", "color", type=COLOR_CHOICES, default=None,
                        help="Style diagnostic labels, locations and markers: auto, always or never.")(func)


class _FlowGroup(click.Group):
    """The `flow` group: under `--json`, a mistake in the arguments (click's usage error, exit 2)
    is a document too, as every refusal is (docs/cli.md, "Results as data")."""

    def main(self, args=None, *rest, standalone_mode: bool = True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        options = argv[:argv.index("--")] if "--" in argv else argv
        if not standalone_mode or "--json" not in options:
            return super().main(args, *rest, standalone_mode=standalone_mode, **extra)
        try:
            code = super().main(args, *rest, standalone_mode=False, **extra)
        except click.ClickException as problem:
            report_refusal(True, problem.format_message(), problem.exit_code)
            sys.exit(problem.exit_code)
        except click.Abort:
            sys.stderr.write("Aborted!\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_FlowGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--color", "color", type=COLOR_CHOICES, default="auto", show_default=True,
              help="Style diagnostic labels, locations and markers: auto, always or never.")
@click.version_option(package_name="flow-lang", prog_name="flow")
@click.pass_context
def main(ctx: click.Context, color: str) -> None:
    """Flow: typed, durable orchestration."""
    ctx.ensure_object(dict)
    ctx.obj["color"] = color


def _color(ctx: click.Context, local: str | None) -> str:
    return local or (ctx.obj or {}).get("color", "auto")


def _json_option(what: str):
    """`--json`: the command's result as one JSON document (docs/cli.md, "Results as data")."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as one JSON document.")


def _refuse(ctx: click.Context, as_json: bool, message: str, code: int = 2, **fields) -> None:
    ctx.exit(report_refusal(as_json, message, code, **fields))


def _done(ctx: click.Context, as_json: bool, code: int, text: str, diagnostics=(), **fields) -> None:
    """A command's result: `fields` as its document, or `text` on stdout."""
    if as_json:
        from flowrt.results import document, write

        write(document(code, diagnostics=diagnostics, **fields))
    else:
        sys.stdout.write(text)
    ctx.exit(code)


# `flow check` is the compiler's own command (`flowc check`): checking runs nothing.
main.add_command(check_command)


class _ToolsGroup(click.Group):
    """`flow tools FILE` lists a program's Tools; `flow tools import-mcp ...` is a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in ("-h", "--help"):
            # Options may come before the subcommand (`flow tools --json import-mcp ...`).
            first = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
            if first is not None and args[first] in self.commands:
                args = [args[first], *args[:first], *args[first + 1:]]
            else:
                args = ["list", *args]
        return super().parse_args(ctx, args)


@main.group("tools", cls=_ToolsGroup)
def tools_group() -> None:
    """A program's Tool declarations (`flow tools FILE`), and declarations written from an MCP
    server (`flow tools import-mcp`)."""


@tools_group.command("list")
@click.argument("file", type=click.Path())
@click.option("--entry", default=None, help="Keep only the declarations a run of this entry can reach.")
@click.option("--json", "as_json", is_flag=True, help="Print the declarations as one JSON document on one line.")
@_color_option
@click.pass_context
def tools_command(ctx: click.Context, file: str, entry: str | None, as_json: bool, color: str | None) -> None:
    """List the Tool declarations of a program as JSON (identity, fingerprint, types)."""
    import orjson

    import flowc
    from flowc.typeterms import DATA_VERSION
    from flowc.files import read_text

    compiled = flowc.compile(file, read_text, generate=False)
    program: dict = {"root": file, "diagnostics": [d.to_json() for d in compiled.diagnostics], "tools": [],
                     "types": {}}
    if compiled.ok:
        if entry is not None:
            fn = compiled.entry(entry)
            descriptions = list(compiled.reachable_tools(fn.identity).values()) if fn is not None else []
        else:
            descriptions = list(compiled.tools.values())
        for d in descriptions:
            program["types"].update(d.get("types", {}))
            program["tools"].append({k: d[k] for k in ("tool", "fingerprint", "signature", "generic", "params",
                                                        "ok", "err")})
        program["types"] = dict(sorted(program["types"].items()))
    code = 0 if compiled.ok else 2
    # Beside the declarations, what every `--json` document has (docs/cli.md, "Results as data").
    document = {"data": DATA_VERSION, "programs": [program], "exitCode": code, "message": None,
                "diagnostics": program["diagnostics"]}
    if as_json:
        from flowrt.results import write

        write(document)  # one line, as every --json document; without it, indented for reading
    else:
        sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
    ctx.exit(code)


@tools_group.command("import-mcp", context_settings={"ignore_unknown_options": True})
@click.argument("server", nargs=-1, type=click.UNPROCESSED)
@click.option("--url", default=None, help="Reach the server over streamable HTTP at this address instead.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The .flow module to write (its name is the module's, as flow.toml keys it).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@_json_option("what was written")
@click.pass_context
def tools_import_mcp_command(ctx: click.Context, server: tuple[str, ...], url: str | None, out: str,
                             force: bool, as_json: bool) -> None:
    """Write a .flow module declaring an MCP server's tools: `flow tools import-mcp --out time.flow
    -- uvx mcp-server-time` (stdio), or `--url http://127.0.0.1:8000/mcp`."""
    import os

    from flowrt.bindings import BindError
    from flowrt.mcp_import import import_tools, module_text

    if bool(server) == bool(url):
        raise click.UsageError("give the server's command after `--`, or --url, not both")
    if os.path.exists(out) and not force:
        _refuse(ctx, as_json, f"error: {out} exists (--force replaces it)", out=out)
    try:
        tools, shown = import_tools(command=list(server) or None, url=url, cwd=os.getcwd())
    except BindError as problem:
        _refuse(ctx, as_json, f"error: {problem}", 1, out=out)
    text = module_text(tools, shown)
    partial = out + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, out)
    module = os.path.splitext(os.path.basename(out))[0]
    binding = "mcp_url = " + _toml_string(url) if url else "mcp = [" + ", ".join(_toml_string(a) for a in server) + "]"
    line = f"{_toml_string(module)} = {{ {binding} }}"
    if not as_json:
        click.echo(f"wrote {out}: {len(tools)} tool{'s' if len(tools) != 1 else ''}; bind it in flow.toml:", err=True)
    _done(ctx, as_json, 0, f"[tools]\n{line}\n", out=out, module=module, tools=len(tools), binding=line)


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a TOML basic string


@main.command("test")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--steps", type=click.IntRange(1), default=2 ** 26, show_default=True,
              help="The evaluation steps a test may take, across the test and its fakes.")
@click.option("-k", "keyword", default="", metavar="EXPRESSION",
              help="Run only the tests whose names match: words (substrings, any case) with and, or, not, ().")
@click.option("--junit-xml", "junit_xml", type=click.Path(dir_okay=False), default=None,
              help="Also write the results as JUnit XML to this file.")
@_color_option
@click.pass_context
def test_command(ctx: click.Context, paths: tuple[str, ...], as_json: bool, steps: int, keyword: str,
                 junit_xml: str | None, color: str | None) -> None:
    """Run @test functions with @fake Tools on a virtual clock."""
    import orjson

    from flowrt.test_cmd import render as render_tests
    from flowrt.test_cmd import run_tests
    from flowrt.test_select import SelectionError, compile_selection

    try:
        select = compile_selection(keyword)
    except SelectionError as problem:
        click.echo(f"error: {problem}", err=True)
        ctx.exit(2)
    report = run_tests(list(paths), steps, select)
    if junit_xml is not None:
        from flowrt.junit import write_junit

        try:
            write_junit(report, junit_xml)
        except OSError as problem:
            click.echo(f"error: cannot write --junit-xml {junit_xml}: {problem.strerror or problem}", err=True)
            ctx.exit(2)
    if report.diagnostics:
        _render_refusal(ctx, color, report.diagnostics, report.sources)
    if as_json:
        document = {**report.to_json(), "exitCode": report.exit_code(), "message": None}
        sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_SORT_KEYS) + b"\n")
    else:
        sys.stdout.write(render_tests(report))
    ctx.exit(report.exit_code())


@main.command("history")
@click.argument("run_id")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--kind", default=None, help="Show only facts of this kind (Call, Reply, Choice, Stop, Checkpoint, ...).")
@click.option("--search", default=None, help="Show only facts whose summary contains this text.")
@click.option("--fact", "fact", type=int, default=None, help="Show only the fact with this number.")
@click.option("--summary", is_flag=True, help="Show the run's state and the next commands only.")
@click.option("--source", "source", default=None, help="Print a module's recorded source.")
@click.option("--rounds", "show_rounds", is_flag=True,
              help="Re-run the program (calling nothing) and show its rounds: the checkpoint places it passes.")
@click.option("--json", "as_json", is_flag=True, help="Print the view as JSON.")
@click.option("--html", "html_out", default=None, type=click.Path(dir_okay=False),
              help="Write a picture of the run to this file: one self-contained HTML page.")
@click.option("--follow", is_flag=True,
              help="Print each fact as it lands (--json: one object a line) until the run ends, pauses or halts; "
                   "with --html, write the page again as facts land, until End.")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0), default=None,
              help="With --follow: stop after this many seconds (exit 3) if the run has not ended, paused or halted.")
@_color_option
@click.pass_context
def history_command(ctx: click.Context, run_id: str, runs_dir: str | None, kind: str | None, search: str | None,
                    fact: int | None, summary: bool, source: str | None, show_rounds: bool, as_json: bool,
                    html_out: str | None, follow: bool, timeout: float | None, color: str | None) -> None:
    """Show a run's recorded history (facts keep their numbers)."""

    if html_out is not None:
        others = [name for name, given in (("--kind", kind), ("--search", search), ("--fact", fact),
                                           ("--summary", summary), ("--source", source), ("--rounds", show_rounds),
                                           ("--json", as_json)) if given not in (None, False)]
        if others:
            sys.stderr.write(f"--html draws the whole run: it does not go with {', '.join(others)}\n")
            ctx.exit(2)
        _history_picture(ctx, runs_dir, run_id, html_out, follow)

    from flowrt.inspect_cmd import carried_tasks, history_view, recorded_source, render_history
    from flowrt.store import KINDS

    if kind is not None and kind.lower() not in {k.lower() for k in KINDS}:
        # As MCP's history refuses it: a kind that no fact has would only ever show nothing.
        _refuse(ctx, as_json, f"--kind is one of {', '.join(KINDS)}", run=run_id)
    if follow:
        if search is not None or fact is not None or summary or source is not None or show_rounds:
            _refuse(ctx, as_json, "--follow goes with --kind, --json and --timeout only", run=run_id)
        from flowrt.follow_cmd import follow_history

        ctx.exit(follow_history(_runs_dir(runs_dir), run_id, kind=kind, as_json=as_json, timeout=timeout))
    if timeout is not None:
        _refuse(ctx, as_json, "--timeout goes with --follow", run=run_id)
    from flowrt.store import StorageError

    # Deferred: the view verifies the history as it goes through it, and lets go of what it has
    # passed (flowrt/inspect_cmd.py `history_view`).
    store = _open_run(ctx, runs_dir, run_id, for_append=False, as_json=as_json, defer=True)
    try:
        try:
            if source is not None:
                store.verify()
                text = recorded_source(store, source)
            else:
                view = history_view(store, kind=kind, search=search, fact=fact, runs=runs_dir)
        except StorageError as problem:
            _refuse(ctx, as_json, f"storage failure: {problem}", 5, run=run_id)
        if source is not None:
            if text is None:
                _refuse(ctx, as_json, f"run {run_id} recorded no module `{source}`", run=run_id)
            _done(ctx, as_json, 0, text, run=run_id, module=source, source=text)
        if show_rounds:
            from flowrt.replay import Refused, RoundsRefused, rounds as replay_rounds

            try:
                view["rounds"], verdict = replay_rounds(_runs_dir(runs_dir), run_id)
            except RoundsRefused as refused:
                # No verdict is not Matched: the rounds of a re-run that never ran are unknown.
                _refuse(ctx, as_json, f"no rounds: {refused}", run=run_id)
            except Refused as refused:
                _refuse(ctx, as_json, "no rounds: the recorded program does not check with this compiler "
                        f"(flow replay {run_id} shows why)", run=run_id,
                        diagnostics=[d.to_json() for d in refused.diagnostics])
            view["replay"] = verdict.to_json()
            view["carried"] = carried_tasks(view["rounds"])
        if as_json:
            from flowrt.results import write

            write({**view, "exitCode": 0, "message": None, "diagnostics": []})
        else:
            sys.stdout.write(render_history(view, summary=summary))
    finally:
        store.close()
    ctx.exit(0)


def _history_picture(ctx: click.Context, runs_dir: str | None, run_id: str, out: str, follow: bool) -> None:
    from flowrt.run_picture import write_picture
    from flowrt.store import StorageError

    _open_run(ctx, runs_dir, run_id, for_append=False).close()  # a missing run is 2, a damaged one 5
    try:
        status = write_picture(_runs_dir(runs_dir), run_id, out, follow=follow)
    except StorageError as problem:
        sys.stderr.write(f"storage failure: {problem}\n")
        ctx.exit(5)
    except OSError as problem:
        sys.stderr.write(f"cannot write {out}: {problem}\n")
        ctx.exit(2)
    if status == 0:
        sys.stderr.write(f"wrote a picture of run {run_id} to {out}\n")
    ctx.exit(status)


@main.command("runs")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--limit", type=int, default=50, show_default=True, help="Rows per page, 1 to 200.")
@click.option("--after", default=None, help="Start after this run id.")
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON.")
@_color_option
@click.pass_context
def runs_command(ctx: click.Context, runs_dir: str | None, limit: int, after: str | None, as_json: bool,
                 color: str | None) -> None:
    """List stored runs (metadata only; values and sources are never read)."""
    import orjson

    from flowrt.inspect_cmd import render_runs, runs_page

    from flowrt.store import StorageError

    try:
        page = runs_page(_runs_dir(runs_dir), limit=limit, after=after)
    except StorageError as problem:  # a database store that cannot be read
        sys.stderr.write(f"storage failure: {problem}\n")
        ctx.exit(5)
    except ValueError as problem:
        _refuse(ctx, as_json, str(problem))
    root_problems = [p for p in page["problems"] if p.get("component") in (None, "root", ".")
                     and p.get("status") not in ("not-created",)]
    code = 2 if root_problems else 0
    if as_json:
        sys.stdout.buffer.write(orjson.dumps({**page, "exitCode": code, "message": None, "diagnostics": []},
                                             option=orjson.OPT_SORT_KEYS) + b"\n")
    else:
        sys.stdout.write(render_runs(page))
    ctx.exit(code)


@main.command("mcp")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--allow", is_flag=True,
              help="Approve running the implementations flow.toml names (the server never asks).")
@click.option("--root", "root", default=None, type=click.Path(exists=True, file_okay=False),
              help="Serve only the files under this directory (default: the working directory).")
@_color_option
def mcp_command(runs_dir: str | None, allow: bool, root: str | None, color: str | None) -> None:
    """Serve check, run, resume, replay, history and runs as MCP tools on stdin and stdout."""
    from flowrt.mcp_server import serve

    serve(_runs_dir(runs_dir), allow=allow, root=root)


@main.command("lsp")
@click.option("--stdio", is_flag=True, help="Talk on stdin and stdout (the only way there is; editors pass it).")
def lsp_command(stdio: bool) -> None:
    """A language server for Flow on stdin and stdout: diagnostics, hover, definitions, completion,
    formatting and checkpoint places (docs/cli.md)."""
    from flowrt.lsp import serve

    serve()


@main.command("redact")
@click.argument("run_id")
@click.option("--fact", "fact", type=int, required=True, help="The fact whose stored value becomes a hole.")
@click.option("--field", default=None, help="Only this value field (input, arguments, outcome, found).")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@_json_option("the holes made")
@_color_option
@click.pass_context
def redact_command(ctx: click.Context, run_id: str, fact: int, field: str | None, runs_dir: str | None,
                   as_json: bool, color: str | None) -> None:
    """Replace a stored value with a hole that keeps its hash."""
    from flowrt.store import RedactRefused

    store = _open_run(ctx, runs_dir, run_id, for_append=True, as_json=as_json)
    try:
        holes = store.redact(fact, field)
    except (RedactRefused, KeyError, IndexError, ValueError) as problem:
        _refuse(ctx, as_json, str(problem), run=run_id, holes=[])
    finally:
        store.close()
    text = "".join(f"fact {hole['fact']}: {hole['field']} is now a hole ({hole['ref']})\n" for hole in holes)
    _done(ctx, as_json, 0, text, run=run_id, holes=[dict(hole) for hole in holes])


@main.command("archive")
@click.argument("run_id")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@_json_option("how many facts were archived")
@_color_option
@click.pass_context
def archive_command(ctx: click.Context, run_id: str, runs_dir: str | None, as_json: bool, color: str | None) -> None:
    """Move the facts before the latest checkpoint aside (resume and replay never read them)."""
    from flowrt.store import StorageError

    store = _open_run(ctx, runs_dir, run_id, for_append=True, as_json=as_json)
    try:
        moved = store.archive()
    except StorageError as problem:
        _refuse(ctx, as_json, f"storage failure: {problem}", 5, run=run_id, archived=0)
    finally:
        store.close()
    _done(ctx, as_json, 0, f"archived {moved} facts of run {run_id}\n" if moved else
          f"run {run_id} has no checkpoint with facts before it to archive\n", run=run_id, archived=moved)


@main.command("fork")
@click.argument("run_id")
@click.option("--checkpoint", "checkpoint", type=int, required=True, help="The fact number of the checkpoint.")
@click.option("--input", "input_text", default=None, help="Replace some of the checkpoint's arguments (a JSON object).")
@click.option("--program", "program_file", default=None, type=click.Path(), help="Continue on a newer program.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--allow", is_flag=True, help="Approve running the implementations flow.toml names.")
@_json_option("the new run's outcome")
@_color_option
@click.pass_context
def fork_command(ctx: click.Context, run_id: str, checkpoint: int, input_text: str | None, program_file: str | None,
                 runs_dir: str | None, allow: bool, as_json: bool, color: str | None) -> None:
    """Start a new run from a checkpoint of another (the parent is not changed)."""
    from flowrt.replay import fork

    outcome = fork(_runs_dir(runs_dir), run_id, checkpoint, input_text=input_text, program_file=program_file,
                   allow=allow, ask=_ask_on_terminal)
    if outcome.run_id and not as_json:
        sys.stderr.write(f"fork: run {outcome.run_id} from checkpoint {checkpoint} of {run_id}\n")
    _report_outcome(ctx, color, outcome, as_json, parent={"run": run_id, "checkpoint": checkpoint})


@main.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@_color_option
def completion_command(shell: str, color: str | None) -> None:
    """Print a completion script for SHELL (it describes the current commands and options,
    `--color` included). For bash: `eval "$(flow completion bash)"`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)(main, {}, "flow", "_FLOW_COMPLETE")
    sys.stdout.write(completer.source())


def _open_run(ctx: click.Context, runs_dir: str | None, run_id: str, *, for_append: bool, as_json: bool = False,
              defer: bool = False):
    """A stored run, verified (with `defer`, as far as its first facts: the caller verifies the
    rest before it shows anything); a damaged one exits 5 (storage failure), a missing one 2."""
    from flowrt.store import StorageError, open_store

    try:
        return open_store(_runs_dir(runs_dir)).open(run_id, for_append=for_append, defer=defer)
    except StorageError as problem:
        _refuse(ctx, as_json, f"storage failure: {problem}", 5, run=run_id)
    except Exception as problem:
        _refuse(ctx, as_json, str(problem), run=run_id)


def _runs_dir(runs_dir: str | None) -> str:
    from flowrt.cli import store_location

    return store_location(runs_dir)


@main.command("upgrade-check")
@click.argument("new_file", type=click.Path())
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_color_option
@click.pass_context
def upgrade_check_command(ctx: click.Context, new_file: str, runs_dir: str | None, as_json: bool,
                          color: str | None) -> None:
    """Replay every stored run of a program against a new version of it: which runs it would carry."""
    import orjson

    from flowrt.upgrade_check import render, upgrade_check

    report = upgrade_check(new_file, _runs_dir(runs_dir))
    if report.diagnostics and not as_json:
        _render_refusal(ctx, color, report.diagnostics, report.sources)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n")
    elif report.refusal is not None:
        sys.stderr.write(render(report))
    else:
        sys.stdout.write(render(report))
    ctx.exit(report.exit_code())


@main.command("replay")
@click.argument("run_id")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--from-start/--from-latest-checkpoint", "from_start", default=True,
              help="Re-run from Start, checking every Checkpoint on the way (the default), or only from the "
                   "latest checkpoint, trusting the facts before it (quicker).")
@_color_option
@click.pass_context
def replay_command(ctx: click.Context, run_id: str, runs_dir: str | None, as_json: bool, from_start: bool,
                   color: str | None) -> None:
    """Re-run a recorded run against its history, calling nothing: Matched, Incomplete or Diverged."""

    from flowrt.replay import replay

    result = replay(_runs_dir(runs_dir), run_id, from_start=from_start)
    if as_json:
        from flowrt.results import document, write

        # The verdict's own fields at the top (as before), null when no verdict was reached.
        verdict = result.verdict.to_json() if result.verdict is not None else \
            {"verdict": None, "fact": None, "reason": None, "from": None}
        write(document(result.exit_code, message=result.message, diagnostics=result.diagnostics, run=run_id,
                       **verdict))
        ctx.exit(result.exit_code)
    if result.diagnostics:
        _render_refusal(ctx, color, result.diagnostics, result.sources)
    if result.verdict is not None:
        v = result.verdict
        if v.kind == "Diverged":
            sys.stdout.write(f"Diverged at fact {v.fact}: {v.reason}\n")
        elif v.kind == "Incomplete":
            sys.stdout.write(f"Incomplete: {v.reason}\n")
        else:
            sys.stdout.write("Matched\n")
        if v.start != 1:
            # What the verdict covers: the facts before the checkpoint were trusted, not re-run.
            sys.stderr.write(f"replayed from the checkpoint at fact {v.start}; the facts before it were not "
                             f"checked\n")
    if result.message:
        sys.stderr.write(result.message + "\n")
    ctx.exit(result.exit_code)


_park_after_option = click.option(
    "--park-after", "park_after", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
    help="Let go of the run (exit 3, a `sleeping` host record) when it waits only on clock.sleep timers "
         "(and pending calls) due more than SECONDS from now; `flow resume` or `flow worker` wakes it. "
         "Default: sleep in this process.")


@main.command("resume")
@click.argument("run_id")
@click.option("--call", "call", default=None, help="The open call the reply answers.")
@click.option("--reply", "reply", default=None, help='The outcome, e.g. \'{"Ok": "Safari 17.4"}\', or - for stdin.')
@click.option("--resend", multiple=True, help="Send a call that was out at a crash again, under the same id.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--allow", is_flag=True, help="Approve running the implementations flow.toml names.")
@_park_after_option
@click.option("--admit-bad-reply", "admit_bad_reply", is_flag=True,
              help="Admit a reply that does not decode as the call's types as BadReply, instead of refusing it.")
@click.option("--detach", is_flag=True,
              help="Admit the reply (if any) and queue the run for a worker (flow worker) instead of driving it here.")
@_json_option("the outcome")
@_color_option
@click.pass_context
def resume_command(ctx: click.Context, run_id: str, call: str | None, reply: str | None, resend: tuple[str, ...],
                   runs_dir: str | None, allow: bool, park_after: float | None, admit_bad_reply: bool, detach: bool,
                   as_json: bool, color: str | None) -> None:
    """Continue a paused, sleeping, halted or crashed run from its history."""
    from flowrt.replay import resume

    if (call is None) != (reply is None):
        _refuse(ctx, as_json, "--call and --reply go together", run=run_id)
    if detach and (resend or park_after is not None):
        _refuse(ctx, as_json, "--detach queues the run: --resend and --park-after are the worker's to decide",
                run=run_id)
    text = sys.stdin.read() if reply == "-" else reply
    if detach:
        from flowrt.detach import queue_continuation

        _report_outcome(ctx, color, queue_continuation(_runs_dir(runs_dir), run_id, call=call, reply_text=text,
                                                       admit_bad_reply=admit_bad_reply), as_json)
    ask = None if reply == "-" else _ask_on_terminal
    from flowrt.cli import status_line
    from flowrt.sandbox_process import Child

    # Started first, on a thread: its interpreter starts while the history is read and the
    # recorded program compiled, as `flow run` starts its child before it checks.
    starting = Child.start_soon()
    status = None
    try:
        status = status_line(_color(ctx, color), _runs_dir(runs_dir), as_json=as_json)
        if status is not None:
            status.follow(run_id)
            if ask is not None:
                ask = status.asking(ask)
        child = starting.child()
    except BaseException:
        starting.kill()
        if status is not None:
            status.stop()
        raise
    try:
        outcome = resume(_runs_dir(runs_dir), run_id, call=call, reply_text=text, resend=set(resend), allow=allow,
                         ask=ask, park_after=park_after, admit_bad_reply=admit_bad_reply, child=child)
    finally:
        if status is not None:
            status.stop()
    _report_outcome(ctx, color, outcome, as_json)


def _render_refusal(ctx: click.Context, color: str | None, diagnostics, sources) -> None:
    render_refusal(_color(ctx, color), diagnostics, sources)


@main.command("run")
@click.argument("file", type=click.Path())
@click.option("--entry", default="main", show_default=True, help="The `pub flow` to run.")
@click.option("--input", "input_text", default=None, help="The input: a JSON object keyed by parameter name, or - for stdin.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--allow", is_flag=True, help="Approve running the implementations flow.toml names.")
@click.option("--redactable", is_flag=True, help="Store every value by reference, so any can be redacted later.")
@click.option("--checkpoints", default="every", show_default=True,
              help="Where to take checkpoints: every (each place), off, or N (every Nth place).")
@_park_after_option
@click.option("--detach", is_flag=True,
              help="Check, bind and record the run, then queue it for a worker (flow worker) and print its id.")
@_json_option("the outcome")
@_color_option
@click.pass_context
def run_command(ctx: click.Context, file: str, entry: str, input_text: str | None, runs_dir: str | None,
                allow: bool, redactable: bool, checkpoints: str, park_after: float | None, detach: bool,
                as_json: bool,
                color: str | None) -> None:
    """Run a program live, recording its history."""
    # Without click too: `flowrt.cli` runs a plain `flow run` itself.
    if detach and park_after is not None:
        _refuse(ctx, as_json, "--detach queues the run: --park-after is the worker's to decide")
    ctx.exit(run_program(file, entry, input_text, runs_dir, allow, redactable, checkpoints, _color(ctx, color),
                         park_after=park_after, as_json=as_json, detach=detach))


@main.command("worker")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--concurrency", type=click.IntRange(min=1, max=256), default=4, show_default=True,
              help="How many runs to drive at once.")
@click.option("--tools", "tools", type=click.Path(dir_okay=False), default=None,
              help="The flow.toml to bind every run's Tools from (default: the one beside each run's root file).")
@click.option("--once", is_flag=True, help="Do what is due now (recover crashed runs, wake due timers), then exit.")
@click.option("--allow", is_flag=True, help="Approve running the implementations flow.toml names.")
@click.option("--park-after", "park_after", type=click.FloatRange(min=0), default=5.0, show_default=True,
              metavar="SECONDS", help="Let go of a run that waits only on timers due more than SECONDS from now.")
@click.option("--poll", type=click.FloatRange(min=0.05, max=3600), default=2.0, show_default=True,
              metavar="SECONDS", help="How often to look for runs to recover (crashed) or wake (sleeping).")
@_color_option
@click.pass_context
def worker_command(ctx: click.Context, runs_dir: str | None, concurrency: int, tools: str | None, once: bool,
                   allow: bool, park_after: float, poll: float, color: str | None) -> None:
    """Drive the runs of a store that need a host: queued ones (--detach), crashed ones (recovered; on
    PostgreSQL once their lease ran out), sleeping ones at their deadlines. Runs until SIGTERM or SIGINT (its
    runs are let go of, resumable) or, with --once, until nothing is left to do now."""
    from flowrt.worker import Worker

    worker = Worker(_runs_dir(runs_dir), concurrency=concurrency, manifest=tools, allow=allow,
                    park_after=park_after, poll=poll)
    ctx.exit(worker.serve(once=once))


def _report_outcome(ctx: click.Context, color: str | None, outcome, as_json: bool = False, **fields) -> None:
    ctx.exit(report_outcome(_color(ctx, color), outcome, as_json=as_json, **fields))



def _add_store_commands() -> None:
    from flowrt.store_cmd import export_command, store_group

    main.add_command(store_group)
    main.add_command(export_command)


_add_store_commands()

# `flow fmt` and `flow doc`, the source tools, are a module of their own; importing it adds them.
from flowrt import source_commands  # noqa: E402,F401
