"""The `flowc` command: the compiler alone (check now; `flowc build` comes with code generation)."""

from __future__ import annotations

import click

from flowrt.cli import check_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto")
@click.pass_context
def main(ctx: click.Context, color: str) -> None:
    """flowc: the Flow compiler."""
    ctx.ensure_object(dict)
    ctx.obj["color"] = color


main.add_command(check_command)
