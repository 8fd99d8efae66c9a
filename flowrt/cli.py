"""The `flow` command line. Every command's result is data; human text is a rendering of it.

Exit codes (docs/cli.md): 0 ok, 1 faulted / tests failed, 2 refused (does not check, bad input,
bad arguments, unreadable), 3 paused, 4 completed with the entry's own Err, 5 storage failure,
130 halted by an interrupt.

The commands are a click application (`flowrt/commands.py`). A plain `flow check` (files and
directories, with `--json` or `--color` at most) is run here without it: importing click and
building the commands was a tenth of `flow check`'s start-up on a small file. Anything else
(help, a mistake in the arguments, every other command) goes to click, which answers it as before.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

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
    """`main`, the `flow` command. Called as the program, it runs a plain `flow check` itself and
    hands anything else to click; to everything else (`CliRunner().invoke(main, ...)`,
    `main.commands`) it is the click group."""

    def __call__(self, *args, **kwargs):
        if not args and not kwargs:
            plain = plain_check(sys.argv[1:])
            if plain is not None and not any(name.endswith("_COMPLETE") for name in os.environ):
                _run_plain_check(*plain)
        return _click_app()(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(_click_app(), name)

    def __repr__(self) -> str:
        return repr(_click_app())


main = _Flow()


def plain_check(args: list[str]) -> tuple[list[str], bool, str] | None:
    """(paths, as_json, color) when `args` are a `check` that click would read the same way
    without saying anything itself, else None (and click reads them)."""
    color: str | None = None
    i = 0
    while i < len(args) and args[i] != "check":
        given, i = _color_at(args, i)
        if given is None or color is not None:
            return None
        color = given
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


def _color_at(args: list[str], i: int) -> tuple[str | None, int]:
    """The `--color` value given at `args[i]` (`--color X` or `--color=X`) and the next index."""
    arg = args[i]
    if arg == "--color" and i + 1 < len(args) and args[i + 1] in _COLORS:
        return args[i + 1], i + 2
    if arg.startswith("--color=") and arg[len("--color="):] in _COLORS:
        return arg[len("--color="):], i + 1
    return None, i + 1


def _run_plain_check(paths: list[str], as_json: bool, color: str) -> NoReturn:
    """What click's `main` does around the `check` command, in standalone mode."""
    try:
        try:
            from flowrt.check_cmd import check_and_print

            code = check_and_print(paths, as_json, color)
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
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
