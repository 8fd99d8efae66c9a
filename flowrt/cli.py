"""The `flow` command line. Every command's result is data; human text is a rendering of it.

Exit codes (docs/cli.md): 0 ok, 1 faulted / tests failed, 2 refused (does not check, bad input,
bad arguments, unreadable), 3 paused, 4 completed with the entry's own Err, 5 storage failure,
130 halted by an interrupt.

The commands are a click application (`flowrt/commands.py`). A plain `flow check` (files and
directories, with `--json` or `--color` at most) and a plain `flow run` (a file and the run
command's options, each once, written out) are run here without it: importing click and building
the commands was a tenth of `flow check`'s start-up on a small file, and as much of `flow run`'s
on hello world. Anything else (help, a mistake in the arguments, every other command) goes to
click, which answers it as before. `run_program` is the run command itself, for both.

`flow run` starts the sandbox child before it imports the compiler and the run machinery, on a
thread (`Child.start_soon`): the host imports while the child is forked and exec'd, and the
child's interpreter starts and imports its runtime while the host imports, checks and binds,
instead of after the host's imports (the child's start-up was the longest part of a short run).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn

_COLORS = ("auto", "always", "never")


def _click_app():
    from flowrt.commands import main as app

    return app


def __getattr__(name: str):
    # The click application's objects (`check_command`, `COLOR_CHOICES`, ...), for whoever imports them.
    from flowrt import commands

    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'flowrt.cli' has no attribute {name!r}") from None


class _Flow:
    """`main`, the `flow` command. Called as the program, it runs a plain `flow check` or
    `flow run` itself and hands anything else to click; to everything else (`CliRunner().invoke(main, ...)`,
    `main.commands`) it is the click group."""

    def __call__(self, *args, **kwargs):
        if not args and not kwargs and not any(name.endswith("_COMPLETE") for name in os.environ):
            plain = plain_check(sys.argv[1:])
            if plain is not None:
                _run_plain_check(*plain)
            options = plain_run(sys.argv[1:])
            if options is not None:
                _standalone(lambda: run_program(**options))
        return _click_app()(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(_click_app(), name)

    def __repr__(self) -> str:
        return repr(_click_app())


main = _Flow()


def plain_check(args: list[str]) -> tuple[list[str], bool, str] | None:
    """(paths, as_json, color) when `args` are a `check` that click would read the same way
    without saying anything itself, else None (and click reads them)."""
    before = _before_command(args, "check")
    if before is None:
        return None
    color, i = before
    paths: list[str] = []
    as_json = False
    local: str | None = None
    i += 1
    while i < len(args):
        arg = args[i]
        if arg == "--json" and not as_json:
            as_json = True
            i += 1
        elif arg.startswith("-") or not arg:
            given, i = _color_at(args, i)
            if given is None or local is not None:
                return None
            local = given
        else:
            paths.append(arg)
            i += 1
    if not paths:
        return None
    return paths, as_json, local or color or "auto"


def _before_command(args: list[str], command: str) -> tuple[str | None, int] | None:
    """The `--color` given before `command` (if any) and the command's index; None when anything
    else comes before it (click reads that)."""
    color: str | None = None
    i = 0
    while i < len(args) and args[i] != command:
        given, i = _color_at(args, i)
        if given is None or color is not None:
            return None
        color = given
    return color, i


def _color_at(args: list[str], i: int) -> tuple[str | None, int]:
    """The `--color` value given at `args[i]` (`--color X` or `--color=X`) and the next index."""
    arg = args[i]
    if arg == "--color" and i + 1 < len(args) and args[i + 1] in _COLORS:
        return args[i + 1], i + 2
    if arg.startswith("--color=") and arg[len("--color="):] in _COLORS:
        return arg[len("--color="):], i + 1
    return None, i + 1


#: `flow run`'s options that take a value, with their keyword in `run_program`; and its flags.
_RUN_VALUES = {"--entry": "entry", "--input": "input_text", "--runs": "runs_dir", "--store": "runs_dir",
               "--checkpoints": "checkpoints"}
_RUN_FLAGS = {"--allow": "allow", "--redactable": "redactable", "--json": "as_json"}


def plain_run(args: list[str]) -> dict | None:
    """`run_program`'s keywords when `args` are a `run` that click would read the same way
    without saying anything itself, else None (and click reads them). Each option at most once;
    a value that starts with `-` (other than `-` itself) or is empty is left to click."""
    before = _before_command(args, "run")
    if before is None:
        return None
    color, i = before
    options: dict = {}
    file: str | None = None
    local: str | None = None
    i += 1
    while i < len(args):
        arg = args[i]
        name, equals, value = arg.partition("=")
        if arg in _RUN_FLAGS:
            if _RUN_FLAGS[arg] in options:
                return None
            options[_RUN_FLAGS[arg]] = True
            i += 1
        elif name in _RUN_VALUES:
            if not equals:
                if i + 1 >= len(args):
                    return None
                value = args[i + 1]
            if _RUN_VALUES[name] in options or not value or (value.startswith("-") and value != "-"):
                return None
            options[_RUN_VALUES[name]] = value
            i += 1 if equals else 2
        elif arg.startswith("-") or not arg:
            given, i = _color_at(args, i)
            if given is None or local is not None:
                return None
            local = given
        else:
            if file is not None:
                return None
            file = arg
            i += 1
    if file is None:
        return None
    return {"file": file, **options, "color": local or color or "auto"}


def run_program(file: str, entry: str = "main", input_text: str | None = None, runs_dir: str | None = None,
                allow: bool = False, redactable: bool = False, checkpoints: str = "every",
                color: str = "auto", park_after: float | None = None, as_json: bool = False,
                detach: bool = False) -> int:
    """`flow run`: run a program live, recording its history; reports the outcome (as one JSON
    document with `as_json`) and returns the exit code."""
    text = read_input(input_text)
    ask = None if input_text == "-" else ask_on_terminal
    runs = store_location(runs_dir)
    if checkpoints not in ("every", "off") and not checkpoints.isdigit():
        return report_refusal(as_json, "--checkpoints is every, off or a number")
    from flowrt.sandbox_process import Child

    # Started first, on a thread, so that it is forked and exec'd while the host imports the
    # compiler, and its interpreter starts while the host checks and binds (a detached run is
    # driven by a worker: no child here).
    starting = None if detach else Child.start_soon()
    try:
        _import_quietly()
        from flowrt.run import run

        child = None if starting is None else starting.child()
    except BaseException:
        if starting is not None:
            starting.kill()
        raise
    status = None if detach else status_line(color, runs, as_json=as_json)
    try:
        outcome = run(file, entry=entry, input_text=text, runs_dir=runs, allow=allow, ask=ask,
                      checkpoints=checkpoints, inline_limit=0 if redactable else None, child=child,
                      park_after=park_after, detach=detach,
                      on_start=(lambda run_id, start: status.follow(run_id)) if status is not None else None)
    finally:
        if status is not None:
            status.stop()
    return report_outcome(color, outcome, as_json=as_json)


def _import_quietly() -> None:
    """Import the compiler and the run machinery without the collector: their modules, classes
    and functions are never garbage, and the collector walked them ~40 times while they were made
    (5 ms of a hello-world run). Frozen after, so that the run's own collections skip them too.
    Only the first time: a process that has them already (a test, a server) keeps its collector."""
    if "flowrt.run" in sys.modules:
        return
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        import flowrt.run  # noqa: F401
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def store_location(given: str | None) -> str:
    """Where runs are stored (`--runs` / `--store`): as given, else $FLOW_STORE, else $FLOW_RUNS,
    else ./.flow/runs. A runs directory or a postgresql:// URL (`flowrt.store.open_store`)."""
    return given or os.environ.get("FLOW_STORE") or os.environ.get("FLOW_RUNS") or os.path.join(".flow", "runs")


def status_line(color: str, runs_dir: str, *, as_json: bool = False):
    """The live status line of a run on stderr (`flowrt.status_line`), or None where none is
    wanted (not a terminal, or plain output asked for)."""
    if as_json or color == "never" or not sys.stderr.isatty():
        return None  # (before the import: a run on a pipe pays nothing for the line it never draws)
    from flowrt import status_line as status

    if not status.wanted(sys.stderr, color=color, as_json=as_json):
        return None
    return status.StatusLine(sys.stderr, runs_dir)


def read_input(value: str | None) -> str:
    """The text of `--input`: `{}` when not given, standard input for `-`."""
    if value is None:
        return "{}"
    if value == "-":
        return sys.stdin.read()
    return value


def ask_on_terminal(command: str) -> bool:
    """Ask for consent to run a manifest command, only when a person can answer."""
    if not sys.stdin.isatty():
        return False
    import click

    answer = click.prompt(f"flow.toml asks to run `{command}`. Run it? [y/N]", default="n", show_default=False,
                          err=True)
    return answer.strip().lower() in ("y", "yes")


def render_refusal(color: str, diagnostics, sources) -> None:
    from flowc.diagnostics.render import render, use_color

    styled = use_color(color, sys.stderr)
    sys.stderr.write(render(diagnostics, sources, color=styled))


def report_refusal(as_json: bool, message: str, code: int = 2, **fields) -> int:
    """A refusal that is a message, not a diagnostic: on stderr, or as the command's document."""
    if as_json:
        from flowrt.results import document, write

        write(document(code, message=message, **fields))
    else:
        sys.stderr.write(message + "\n")
    return code


def report_outcome(color: str, outcome, *, as_json: bool = False, **fields) -> int:
    """Say what a run (or resume, or fork) came to; returns its exit code. With `as_json`, one
    document (flowrt/results.py, with `fields` added) and nothing else; else the output on stdout
    and the rest on stderr, the run's id included once it has one, so stdout stays the output."""
    if as_json:
        from flowrt.results import outcome_document, write

        write({**outcome_document(outcome), **fields})
        return outcome.exit_code
    if outcome.diagnostics:
        render_refusal(color, outcome.diagnostics, outcome.sources)
    if outcome.output is not None:
        sys.stdout.buffer.write(outcome.output + b"\n")
        sys.stdout.flush()
    if outcome.queued:
        # The id alone on stdout, for `RUN=$(flow run --detach ...)`.
        sys.stdout.write(f"{outcome.run_id}\n")
        sys.stderr.write(f"queued: run {outcome.run_id} (a flow worker on this store drives it)\n")
    if outcome.exit_code == 3 and outcome.sleeping_until is not None:
        from flowrt.timers import deadline_text

        sys.stdout.write(f"sleeping: run {outcome.run_id} until {deadline_text(outcome.sleeping_until)}\n")
        for call in outcome.timers or {}:
            sys.stdout.write(f"  timer {call} due {deadline_text(outcome.timers[call])}\n")
        for call in outcome.pending:
            sys.stdout.write(f"  pending call {call}\n")
        sys.stdout.write(f"wake with: flow resume {outcome.run_id} (a flow worker on these runs wakes it when due)\n")
    elif outcome.exit_code == 3 and outcome.pending:
        sys.stdout.write(f"paused: run {outcome.run_id}\n")
        for call in outcome.pending:
            sys.stdout.write(f"  pending call {call}\n")
        sys.stdout.write(f"resume with: flow resume {outcome.run_id} --call ID --reply JSON "
                         f"(flow history {outcome.run_id} shows what each call takes)\n")
    if outcome.fault is not None:
        fault = outcome.fault
        where = fault.get("location")
        place = f"{where['file']}:{where['line']}:{where['column']}: " if where else ""
        sys.stderr.write(f"{place}fault[{fault.get('kind')}]: {fault.get('message')} (run {outcome.run_id})\n")
    if outcome.message:
        sys.stderr.write(outcome.message + "\n")
    if outcome.exit_code in (0, 4) and outcome.run_id:
        sys.stderr.write(f"run {outcome.run_id} completed\n")
    return outcome.exit_code


def _run_plain_check(paths: list[str], as_json: bool, color: str) -> NoReturn:
    """What click's `main` does around the `check` command, in standalone mode."""

    def check() -> int:
        from flowc.check_cmd import check_and_print

        return check_and_print(paths, as_json, color)

    _standalone(check)


def _standalone(command: Callable[[], int]) -> NoReturn:
    """What click's `main` does around a command, in standalone mode."""
    try:
        try:
            code = command()
        except (EOFError, KeyboardInterrupt):
            sys.stderr.write("\n")
            sys.stderr.flush()
            sys.stderr.write("Aborted!\n")
            sys.stderr.flush()
            sys.exit(1)
    except OSError as problem:
        import errno

        if problem.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    # The command is done and closed what it opened (the run store, the child, Tool processes):
    # what is left is the interpreter's own shutdown, whose garbage collections walked every
    # object the compiler and the run had made (a tenth of a hello-world run). Frozen objects are
    # left to the operating system; nothing of ours needs a finalizer at exit.
    import gc

    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
