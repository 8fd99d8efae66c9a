"""The `flowc` command: the compiler alone (`flowc check`, `flowc build`), which runs nothing.

`check_command` is also `flow check` (flowrt/commands.py adds it to the `flow` group): checking
is the compiler's work over files, so the host's CLI takes it from here, not the other way round.
"""

from __future__ import annotations

import click

COLOR_CHOICES = click.Choice(["auto", "always", "never"])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--color", "color", type=COLOR_CHOICES, default="auto")
@click.pass_context
def main(ctx: click.Context, color: str) -> None:
    """flowc: the Flow compiler."""
    ctx.ensure_object(dict)
    ctx.obj["color"] = color


@main.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the diagnostics and checkpoint places as JSON.")
@click.option("--color", "color", type=COLOR_CHOICES, default=None,
              help="Style diagnostic labels, locations and markers: auto, always or never.")
@click.pass_context
def check_command(ctx: click.Context, paths: tuple[str, ...], as_json: bool, color: str | None) -> None:
    """Check Flow programs (files, or directories searched for .flow files)."""
    from flowc.check_cmd import check_and_print

    ctx.exit(check_and_print(list(paths), as_json, color or (ctx.obj or {}).get("color", "auto")))


@main.command("build")
@click.argument("file", type=click.Path())
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(), help="Directory for the generated modules.")
@click.option("--color", "color", type=COLOR_CHOICES, default=None,
              help="Style diagnostic labels, locations and markers.")
@click.pass_context
def build_command(ctx: click.Context, file: str, out_dir: str, color: str | None) -> None:
    """Compile a program to Python modules and a manifest."""
    import os
    import sys

    import orjson

    from flowc.diagnostics.render import render, use_color
    from flowc.emit import generate, module_digest
    from flowc.frontend import check_program
    from flowc.files import read_text

    checked = check_program(file, read_text)
    if not checked.ok:
        sys.stderr.write(render(checked.diagnostics, checked.sources(),
                                color=use_color(color or ctx.obj.get("color", "auto"), sys.stderr)))
        ctx.exit(2)
    generated = generate(checked)
    os.makedirs(out_dir, exist_ok=True)
    modules = []
    for module in generated.modules:
        with open(os.path.join(out_dir, module.filename), "w", encoding="utf-8") as handle:
            handle.write(module.source)
        modules.append({"module": module.identity, "file": module.filename, "flow_file": module.flow_file,
                        "sha256": module_digest(module), "line_map": [list(x) for x in module.line_map]})
    manifest = {"program": generated.program, "std": "std@v1", "root": checked.program.root, "modules": modules}
    with open(os.path.join(out_dir, "manifest.json"), "wb") as handle:
        handle.write(orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.write(f"wrote {len(modules)} modules to {out_dir}\n")
