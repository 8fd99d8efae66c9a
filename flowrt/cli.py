"""The `flow` command line. Every command's result is data; human text is a rendering of it.

Exit codes (docs/cli.md): 0 ok, 1 faulted / tests failed, 2 refused (does not check, bad input,
bad arguments, unreadable), 3 paused, 4 completed with the entry's own Err, 5 storage failure,
130 halted by an interrupt.
"""

from __future__ import annotations

import sys

import click
import orjson

from flowc.diagnostics.render import render, use_color

COLOR_CHOICES = click.Choice(["auto", "always", "never"])


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


@main.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the diagnostics and checkpoint places as JSON.")
@_color_option
@click.pass_context
def check_command(ctx: click.Context, paths: tuple[str, ...], as_json: bool, color: str | None) -> None:
    """Check Flow programs (files, or directories searched for .flow files)."""
    from flowrt.check_cmd import render_places, run_check

    report = run_check(list(paths))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n")
    else:
        if report.diagnostics:
            styled = use_color(_color(ctx, color), sys.stderr)
            sys.stderr.write(render(report.diagnostics, report.sources, color=styled))
        if report.ok:
            count = len(report.roots)
            sys.stdout.write(render_places(report))
            sys.stdout.write(f"ok: {count} program{'s' if count != 1 else ''} checked\n")
    ctx.exit(0 if report.ok else 2)


if __name__ == "__main__":  # pragma: no cover
    main()
