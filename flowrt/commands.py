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
from flowrt.cli import render_refusal, report_outcome, run_program

# orjson and the diagnostics renderer are imported where they are used: most runs of a command
# need neither (no `--json`, nothing to report), and every import is start-up time.


_RUNS_HELP = ("Where runs are stored: a runs directory, or a postgresql:// URL (default: $FLOW_STORE, "
              "$FLOW_RUNS or ./.flow/runs). --store is the same option.")


def _color_option(func):
    """`--color` is global and also accepted after the command name."""
    return click.option("--color", "color", type=COLOR_CHOICES, default=None,
                        help="Style diagnostic labels, locations and markers: auto, always or never.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


# `flow check` is the compiler's own command (`flowc check`): checking runs nothing.
main.add_command(check_command)


class _ToolsGroup(click.Group):
    """`flow tools FILE` lists a program's Tools; `flow tools import-mcp ...` is a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@main.group("tools", cls=_ToolsGroup)
def tools_group() -> None:
    """A program's Tool declarations (`flow tools FILE`), and declarations written from an MCP
    server (`flow tools import-mcp`)."""


@tools_group.command("list")
@click.argument("file", type=click.Path())
@click.option("--entry", default=None, help="Keep only the declarations a run of this entry can reach.")
@_color_option
@click.pass_context
def tools_command(ctx: click.Context, file: str, entry: str | None, color: str | None) -> None:
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
    document = {"data": DATA_VERSION, "programs": [program]}
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
    ctx.exit(0 if compiled.ok else 2)


@tools_group.command("import-mcp", context_settings={"ignore_unknown_options": True})
@click.argument("server", nargs=-1, type=click.UNPROCESSED)
@click.option("--url", default=None, help="Reach the server over streamable HTTP at this address instead.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The .flow module to write (its name is the module's, as flow.toml keys it).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.pass_context
def tools_import_mcp_command(ctx: click.Context, server: tuple[str, ...], url: str | None, out: str,
                             force: bool) -> None:
    """Write a .flow module declaring an MCP server's tools: `flow tools import-mcp --out time.flow
    -- uvx mcp-server-time` (stdio), or `--url http://127.0.0.1:8000/mcp`."""
    import os

    from flowrt.bindings import BindError
    from flowrt.mcp_import import import_tools, module_text

    if bool(server) == bool(url):
        raise click.UsageError("give the server's command after `--`, or --url, not both")
    if os.path.exists(out) and not force:
        click.echo(f"error: {out} exists (--force replaces it)", err=True)
        ctx.exit(2)
    try:
        tools, shown = import_tools(command=list(server) or None, url=url, cwd=os.getcwd())
    except BindError as problem:
        click.echo(f"error: {problem}", err=True)
        ctx.exit(1)
    text = module_text(tools, shown)
    partial = out + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, out)
    module = os.path.splitext(os.path.basename(out))[0]
    binding = "mcp_url = " + _toml_string(url) if url else "mcp = [" + ", ".join(_toml_string(a) for a in server) + "]"
    click.echo(f"wrote {out}: {len(tools)} tool{'s' if len(tools) != 1 else ''}; bind it in flow.toml:", err=True)
    click.echo(f'[tools]\n{_toml_string(module)} = {{ {binding} }}')
    ctx.exit(0)


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a TOML basic string


@main.command("test")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--steps", type=click.IntRange(1), default=2 ** 26, show_default=True,
              help="The evaluation steps a test may take, across the test and its fakes.")
@_color_option
@click.pass_context
def test_command(ctx: click.Context, paths: tuple[str, ...], as_json: bool, steps: int, color: str | None) -> None:
    """Run @test functions with @fake Tools on a virtual clock."""
    import orjson

    from flowrt.test_cmd import render as render_tests
    from flowrt.test_cmd import run_tests

    report = run_tests(list(paths), steps)
    if report.diagnostics:
        _render_refusal(ctx, color, report.diagnostics, report.sources)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n")
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
@_color_option
@click.pass_context
def history_command(ctx: click.Context, run_id: str, runs_dir: str | None, kind: str | None, search: str | None,
                    fact: int | None, summary: bool, source: str | None, show_rounds: bool, as_json: bool,
                    color: str | None) -> None:
    """Show a run's recorded history (facts keep their numbers)."""
    import orjson

    from flowrt.inspect_cmd import carried_tasks, history_view, recorded_source, render_history
    from flowrt.store import KINDS

    if kind is not None and kind.lower() not in {k.lower() for k in KINDS}:
        # As MCP's history refuses it: a kind that no fact has would only ever show nothing.
        sys.stderr.write(f"--kind is one of {', '.join(KINDS)}\n")
        ctx.exit(2)
    store = _open_run(ctx, runs_dir, run_id, for_append=False)
    try:
        if source is not None:
            text = recorded_source(store, source)
            if text is None:
                sys.stderr.write(f"run {run_id} recorded no module `{source}`\n")
                ctx.exit(2)
            sys.stdout.write(text)
            ctx.exit(0)
        view = history_view(store, kind=kind, search=search, fact=fact)
        if show_rounds:
            from flowrt.replay import Refused, RoundsRefused, rounds as replay_rounds

            try:
                view["rounds"], verdict = replay_rounds(_runs_dir(runs_dir), run_id)
            except RoundsRefused as refused:
                # No verdict is not Matched: the rounds of a re-run that never ran are unknown.
                sys.stderr.write(f"no rounds: {refused}\n")
                ctx.exit(2)
            except Refused:
                sys.stderr.write("no rounds: the recorded program does not check with this compiler "
                                 f"(flow replay {run_id} shows why)\n")
                ctx.exit(2)
            view["replay"] = verdict.to_json()
            view["carried"] = carried_tasks(view["rounds"])
        if as_json:
            sys.stdout.buffer.write(orjson.dumps(view, option=orjson.OPT_SORT_KEYS) + b"\n")
        else:
            sys.stdout.write(render_history(view, summary=summary))
    finally:
        store.close()
    ctx.exit(0)


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
        sys.stderr.write(f"{problem}\n")
        ctx.exit(2)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(page, option=orjson.OPT_SORT_KEYS) + b"\n")
    else:
        sys.stdout.write(render_runs(page))
    root_problems = [p for p in page["problems"] if p.get("component") in (None, "root", ".")
                     and p.get("status") not in ("not-created",)]
    ctx.exit(2 if root_problems else 0)


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


@main.command("redact")
@click.argument("run_id")
@click.option("--fact", "fact", type=int, required=True, help="The fact whose stored value becomes a hole.")
@click.option("--field", default=None, help="Only this value field (input, arguments, outcome, found).")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@_color_option
@click.pass_context
def redact_command(ctx: click.Context, run_id: str, fact: int, field: str | None, runs_dir: str | None,
                   color: str | None) -> None:
    """Replace a stored value with a hole that keeps its hash."""
    from flowrt.store import RedactRefused

    store = _open_run(ctx, runs_dir, run_id, for_append=True)
    try:
        holes = store.redact(fact, field)
    except (RedactRefused, KeyError, ValueError) as problem:
        sys.stderr.write(f"{problem}\n")
        ctx.exit(2)
    finally:
        store.close()
    for hole in holes:
        sys.stdout.write(f"fact {hole['fact']}: {hole['field']} is now a hole ({hole['ref']})\n")
    ctx.exit(0)


@main.command("archive")
@click.argument("run_id")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@_color_option
@click.pass_context
def archive_command(ctx: click.Context, run_id: str, runs_dir: str | None, color: str | None) -> None:
    """Move the facts before the latest checkpoint aside (resume and replay never read them)."""
    from flowrt.store import StorageError

    store = _open_run(ctx, runs_dir, run_id, for_append=True)
    try:
        moved = store.archive()
    except StorageError as problem:
        sys.stderr.write(f"storage failure: {problem}\n")
        ctx.exit(5)
    finally:
        store.close()
    sys.stdout.write(f"archived {moved} facts of run {run_id}\n" if moved else
                     f"run {run_id} has no checkpoint with facts before it to archive\n")
    ctx.exit(0)


@main.command("fork")
@click.argument("run_id")
@click.option("--checkpoint", "checkpoint", type=int, required=True, help="The fact number of the checkpoint.")
@click.option("--input", "input_text", default=None, help="Replace some of the checkpoint's arguments (a JSON object).")
@click.option("--program", "program_file", default=None, type=click.Path(), help="Continue on a newer program.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL", help=_RUNS_HELP)
@click.option("--allow", is_flag=True, help="Approve running the implementations flow.toml names.")
@_color_option
@click.pass_context
def fork_command(ctx: click.Context, run_id: str, checkpoint: int, input_text: str | None, program_file: str | None,
                 runs_dir: str | None, allow: bool, color: str | None) -> None:
    """Start a new run from a checkpoint of another (the parent is not changed)."""
    from flowrt.replay import fork

    outcome = fork(_runs_dir(runs_dir), run_id, checkpoint, input_text=input_text, program_file=program_file,
                   allow=allow, ask=_ask_on_terminal)
    if outcome.run_id:
        sys.stderr.write(f"fork: run {outcome.run_id} from checkpoint {checkpoint} of {run_id}\n")
    _report_outcome(ctx, color, outcome)


@main.command("fmt")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--check", is_flag=True, help="Write nothing; name each file that is not in canonical form.")
@_color_option
@click.pass_context
def fmt_command(ctx: click.Context, paths: tuple[str, ...], check: bool, color: str | None) -> None:
    """Lay out Flow source canonically: files in place, directories searched, stdin to stdout."""
    from flowc.fmt import format_source
    from flowc.files import find_flow_files, read_text

    if not paths:
        result = format_source(sys.stdin.read(), "<stdin>")
        if result.text is None:
            _render_refusal(ctx, color, list(result.diagnostics), {})
            ctx.exit(2)
        sys.stdout.write(result.text)
        ctx.exit(0)
    files: list[str] = []
    status = 0
    for path in paths:
        import os

        if os.path.isdir(path):
            found, problems = find_flow_files(path)
            files.extend(found)
            for problem in problems:
                sys.stderr.write(f"cannot read directory {problem.path}: {problem.reason}\n")
                status = 2
        else:
            files.append(path)
    unformatted = 0
    for file in files:
        try:
            source = read_text(file)
        except (OSError, UnicodeDecodeError) as problem:
            sys.stderr.write(f"cannot read {file}: {problem}\n")
            status = 2
            continue
        result = format_source(source, file)
        if result.text is None:
            _render_refusal(ctx, color, list(result.diagnostics), {file: source})
            status = 2
            continue
        if result.text == source:
            continue
        if check:
            sys.stdout.write(f"{file}\n")
            unformatted += 1
            continue
        try:
            with open(file, "w", encoding="utf-8") as handle:
                handle.write(result.text)
        except OSError as problem:
            sys.stderr.write(f"cannot write {file}: {problem}\n")
            status = 2
    ctx.exit(status or (1 if unformatted else 0))


@main.command("doc")
@click.argument("file", type=click.Path())
@click.option("--out", "out_dir", default=None, type=click.Path(), help="Write one Markdown page per module here.")
@click.option("--html", "as_html", is_flag=True, help="With --out, write HTML pages with highlighted Flow code.")
@_color_option
@click.pass_context
def doc_command(ctx: click.Context, file: str, out_dir: str | None, as_html: bool, color: str | None) -> None:
    """Document every module a program forms (std included), as Markdown."""
    import os

    import flowc
    from flowc.doc import index, page_filename, pages, to_html
    from flowc.files import read_text

    checked = flowc.check_program(file, read_text)
    errors = [d for d in checked.diagnostics if d.severity == "error"]
    if errors:
        _render_refusal(ctx, color, errors, checked.sources())
        ctx.exit(2)
    documents = pages(checked.program)
    if out_dir is None:
        for identity in sorted(documents):
            sys.stdout.write(documents[identity] + "\n")
        ctx.exit(0)
    status = 0
    by_file: dict[str, list[str]] = {}
    for identity in documents:
        by_file.setdefault(os.path.normcase(page_filename(identity)), []).append(identity)
    for name, identities in sorted(by_file.items()):
        if len(identities) > 1:
            sys.stderr.write(f"modules {', '.join(sorted(identities))} have the same path: none of their pages "
                             "is written\n")
            status = 2
            continue
        path = os.path.join(out_dir, name)
        text = documents[identities[0]]
        if as_html:
            path = path[:-3] + ".html"
            text = to_html(text, identities[0])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    index_text = index(checked.program)
    with open(os.path.join(out_dir, "index.html" if as_html else "index.md"), "w", encoding="utf-8") as handle:
        handle.write(to_html(index_text, "Modules") if as_html else index_text)
    sys.stdout.write(f"wrote {len(documents)} pages and an index to {out_dir}\n")
    ctx.exit(status)


@main.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@_color_option
def completion_command(shell: str, color: str | None) -> None:
    """Print a completion script for SHELL (it describes the current commands and options,
    `--color` included). For bash: `eval "$(flow completion bash)"`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)(main, {}, "flow", "_FLOW_COMPLETE")
    sys.stdout.write(completer.source())


def _open_run(ctx: click.Context, runs_dir: str | None, run_id: str, *, for_append: bool):
    """A stored run, verified; a damaged one exits 5 (storage failure), a missing one 2."""
    from flowrt.store import StorageError, open_store

    try:
        return open_store(_runs_dir(runs_dir)).open(run_id, for_append=for_append)
    except StorageError as problem:
        sys.stderr.write(f"storage failure: {problem}\n")
        ctx.exit(5)
    except Exception as problem:
        sys.stderr.write(f"{problem}\n")
        ctx.exit(2)


def _runs_dir(runs_dir: str | None) -> str:
    from flowrt.cli import store_location

    return store_location(runs_dir)


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
    import orjson

    from flowrt.replay import replay

    result = replay(_runs_dir(runs_dir), run_id, from_start=from_start)
    if result.diagnostics:
        _render_refusal(ctx, color, result.diagnostics, result.sources)
    if result.verdict is not None:
        v = result.verdict
        if as_json:
            sys.stdout.buffer.write(orjson.dumps(v.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n")
        elif v.kind == "Diverged":
            sys.stdout.write(f"Diverged at fact {v.fact}: {v.reason}\n")
        elif v.kind == "Incomplete":
            sys.stdout.write(f"Incomplete: {v.reason}\n")
        else:
            sys.stdout.write("Matched\n")
        if v.start != 1 and not as_json:
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
@click.option("--detach", is_flag=True,
              help="Admit the reply (if any) and queue the run for a worker (flow worker) instead of driving it here.")
@_color_option
@click.pass_context
def resume_command(ctx: click.Context, run_id: str, call: str | None, reply: str | None, resend: tuple[str, ...],
                   runs_dir: str | None, allow: bool, park_after: float | None, detach: bool, color: str | None) -> None:
    """Continue a paused, sleeping, halted or crashed run from its history."""
    from flowrt.replay import resume

    if (call is None) != (reply is None):
        sys.stderr.write("--call and --reply go together\n")
        ctx.exit(2)
    if detach and (resend or park_after is not None):
        sys.stderr.write("--detach queues the run: --resend and --park-after are the worker's to decide\n")
        ctx.exit(2)
    text = sys.stdin.read() if reply == "-" else reply
    if detach:
        from flowrt.detach import queue_continuation

        _report_outcome(ctx, color, queue_continuation(_runs_dir(runs_dir), run_id, call=call, reply_text=text))
    ask = None if reply == "-" else _ask_on_terminal
    outcome = resume(_runs_dir(runs_dir), run_id, call=call, reply_text=text, resend=set(resend), allow=allow,
                     ask=ask, park_after=park_after)
    _report_outcome(ctx, color, outcome)


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
@_color_option
@click.pass_context
def run_command(ctx: click.Context, file: str, entry: str, input_text: str | None, runs_dir: str | None,
                allow: bool, redactable: bool, checkpoints: str, park_after: float | None, detach: bool,
                color: str | None) -> None:
    """Run a program live, recording its history."""
    # Without click too: `flowrt.cli` runs a plain `flow run` itself.
    if detach and park_after is not None:
        sys.stderr.write("--detach queues the run: --park-after is the worker's to decide\n")
        ctx.exit(2)
    ctx.exit(run_program(file, entry, input_text, runs_dir, allow, redactable, checkpoints, _color(ctx, color),
                         park_after=park_after, detach=detach))


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


def _report_outcome(ctx: click.Context, color: str | None, outcome) -> None:
    ctx.exit(report_outcome(_color(ctx, color), outcome))



def _add_store_commands() -> None:
    from flowrt.store_cmd import export_command, store_group

    main.add_command(store_group)
    main.add_command(export_command)


_add_store_commands()
