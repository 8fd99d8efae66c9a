"""`flow fmt` and `flow doc`: the commands about Flow source itself (the layout, and the pages
of a program's modules), added to the `flow` command line (`flowrt.commands`) when imported."""

from __future__ import annotations

import sys

import click

from flowrt.commands import _color_option, _done, _json_option, _render_refusal, main


@main.command("fmt")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--check", is_flag=True, help="Write nothing; name each file that is not in canonical form.")
@_json_option("each file's result")
@_color_option
@click.pass_context
def fmt_command(ctx: click.Context, paths: tuple[str, ...], check: bool, as_json: bool, color: str | None) -> None:
    """Lay out Flow source canonically: files in place, directories searched, stdin to stdout."""
    import os

    from flowc.fmt import format_source
    from flowc.files import find_flow_files, read_text

    if not paths:
        result = format_source(sys.stdin.read(), "<stdin>")
        code = 2 if result.text is None else 0
        if result.text is None and not as_json:
            _render_refusal(ctx, color, list(result.diagnostics), {})
        _done(ctx, as_json, code, result.text or "", diagnostics=list(result.diagnostics) if code else (),
              output=result.text, files=[])
    #: per file: `formatted` (written), `unchanged`, `unformatted` (--check: it would be), or
    #: `refused` (it does not parse, or cannot be read or written: `message` says why)
    rows: list[dict] = []
    diagnostics: list = []
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found, problems = find_flow_files(path)
            files.extend(found)
            for problem in problems:
                rows.append({"file": problem.path, "status": "refused",
                             "message": f"cannot read directory {problem.path}: {problem.reason}"})
        else:
            files.append(path)
    for file in files:
        try:
            source = read_text(file)
        except (OSError, UnicodeDecodeError) as problem:
            rows.append({"file": file, "status": "refused", "message": f"cannot read {file}: {problem}"})
            continue
        result = format_source(source, file)
        if result.text is None:
            if not as_json:
                _render_refusal(ctx, color, list(result.diagnostics), {file: source})
            diagnostics.extend(result.diagnostics)
            rows.append({"file": file, "status": "refused", "message": "it does not parse"})
            continue
        if result.text == source:
            rows.append({"file": file, "status": "unchanged", "message": None})
            continue
        if check:
            rows.append({"file": file, "status": "unformatted", "message": None})
            continue
        try:
            with open(file, "w", encoding="utf-8") as handle:
                handle.write(result.text)
        except OSError as problem:
            rows.append({"file": file, "status": "refused", "message": f"cannot write {file}: {problem}"})
            continue
        rows.append({"file": file, "status": "formatted", "message": None})
    refused = [r for r in rows if r["status"] == "refused"]
    code = 2 if refused else (1 if any(r["status"] == "unformatted" for r in rows) else 0)
    if not as_json:
        for row in refused:
            if row["message"] != "it does not parse":
                sys.stderr.write(row["message"] + "\n")
    _done(ctx, as_json, code, "".join(f"{r['file']}\n" for r in rows if r["status"] == "unformatted"),
          diagnostics=diagnostics, files=rows)


@main.command("doc")
@click.argument("file", type=click.Path())
@click.option("--out", "out_dir", default=None, type=click.Path(), help="Write one Markdown page per module here.")
@click.option("--html", "as_html", is_flag=True, help="With --out, write HTML pages with highlighted Flow code.")
@_json_option("the pages (their text, or the files written)")
@_color_option
@click.pass_context
def doc_command(ctx: click.Context, file: str, out_dir: str | None, as_html: bool, as_json: bool,
                color: str | None) -> None:
    """Document every module a program forms (std included), as Markdown."""
    import os

    import flowc
    from flowc.doc import index, page_filename, pages, to_html
    from flowc.files import read_text

    checked = flowc.check_program(file, read_text)
    errors = [d for d in checked.diagnostics if d.severity == "error"]
    if errors:
        if not as_json:
            _render_refusal(ctx, color, errors, checked.sources())
        _done(ctx, as_json, 2, "", diagnostics=errors, pages=[], out=out_dir, index=None)
    documents = pages(checked.program)
    if out_dir is None:
        _done(ctx, as_json, 0, "".join(documents[identity] + "\n" for identity in sorted(documents)),
              pages=[{"module": identity, "file": None, "text": documents[identity]} for identity in sorted(documents)],
              out=None, index=None)
    status = 0
    written: list[dict] = []
    unwritten: list[str] = []
    by_file: dict[str, list[str]] = {}
    for identity in documents:
        by_file.setdefault(os.path.normcase(page_filename(identity)), []).append(identity)
    for name, identities in sorted(by_file.items()):
        if len(identities) > 1:
            unwritten.append(f"modules {', '.join(sorted(identities))} have the same path: none of their pages "
                             "is written")
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
        written.append({"module": identities[0], "file": path, "text": None})
    index_text = index(checked.program)
    index_path = os.path.join(out_dir, "index.html" if as_html else "index.md")
    with open(index_path, "w", encoding="utf-8") as handle:
        handle.write(to_html(index_text, "Modules") if as_html else index_text)
    if not as_json:
        for line in unwritten:
            sys.stderr.write(line + "\n")
    _done(ctx, as_json, status, f"wrote {len(documents)} pages and an index to {out_dir}\n",
          message="; ".join(unwritten) or None, pages=written, out=out_dir, index=index_path)
