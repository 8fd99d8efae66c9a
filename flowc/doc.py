"""`flow doc`: Markdown pages for every module a program forms, std's included.

Each module is named by its path at the version it resolved to (`planner`, `std@v1/list`). A page
lists the module's types, with the doc comments of their fields, constructors and named
payloads' fields in the order they are written, and its functions, with their type parameters'
requirements and the local and anonymous functions written in them.
"""

from __future__ import annotations

from flowc import syntax as S
from flowc.fmt import _Printer


def module_doc(module: S.Module, source: str) -> str | None:
    """A `///` block at the very top of a file, followed by a blank line, documents the module."""
    lines = source.split("\n")
    docs: list[str] = []
    index = 0
    while index < len(lines) and lines[index].strip().startswith("///"):
        body = lines[index].strip()[3:]
        docs.append(body[1:] if body.startswith(" ") else body)
        index += 1
    if docs and (index >= len(lines) or not lines[index].strip()):
        return "\n".join(docs)
    return None


def page(identity: str, module: S.Module, source: str) -> str:
    # Signatures are printed without comments: the docs are shown beside them, once.
    printer = _Printer(source, S.Module(module.items, (), module.span))
    out = [f"# Module `{identity}`", ""]
    doc = module_doc(module, source)
    if doc:
        out += [doc, ""]
    uses = [item for item in module.items if isinstance(item, S.Use)]
    if uses:
        out += ["Uses: " + ", ".join(f"`{u.path}`" + (f" as `{u.alias}`" if u.alias else "") for u in uses), ""]
    types = [item for item in module.items if isinstance(item, S.TypeDecl)]
    functions = [item for item in module.items if isinstance(item, S.FnDecl)]
    if types:
        out += ["## Types", ""]
        for t in types:
            out += _type(printer, t)
    if functions:
        out += ["## Functions", ""]
        for f in functions:
            out += _function(printer, f)
    return "\n".join(out).rstrip() + "\n"


def _signature(printer: _Printer, item) -> str:
    if isinstance(item, S.TypeDecl):
        return printer.type_decl(item)
    return printer.attrs(item.attrs) + ("pub " if item.pub else "") + printer.fn_head(item)


def _type(printer: _Printer, t: S.TypeDecl) -> list[str]:
    visibility = "" if t.pub else " (private)"
    out = [f"### `{t.name}`{visibility}", ""]
    if t.doc:
        out += [t.doc, ""]
    out += ["```flow", _signature(printer, t), "```", ""]
    if t.kind == "record" and t.fields:
        out.append("Fields:")
        for f in t.fields:
            out.append(f"- `{printer.field(f)}`" + (f": {_one_line(f.doc)}" if f.doc else ""))
        out.append("")
    if t.kind == "enum":
        out.append("Constructors:")
        for c in t.ctors:
            out.append(f"- `{printer.ctor(c)}`" + (f": {_one_line(c.doc)}" if c.doc else ""))
            for f in c.fields:
                if f.doc:
                    out.append(f"  - `{f.name}`: {_one_line(f.doc)}")
        out.append("")
    return out


def _function(printer: _Printer, f: S.FnDecl) -> list[str]:
    kind = "Tool" if f.attr("tool") else ("test" if f.attr("test") else ("fake" if f.attr("fake") else ""))
    label = f" ({kind})" if kind else ""
    out = [f"### `{f.name}`{label}" + ("" if f.pub else " (private)"), ""]
    out += ["```flow", _signature(printer, f), "```", ""]
    if f.doc:
        out += [f.doc, ""]
    required = [p for p in f.type_params if p.bounds]
    if required:
        out += ["Type parameters: " + ", ".join(f"`{p.name}` requires " + " + ".join(f"`{b}`" for b in p.bounds)
                                             for p in required), ""]
    inner = list(_inner_functions(f.body)) if f.body is not None else []
    if inner:
        out.append("Functions written in it:")
        for node in inner:
            if isinstance(node, S.FnDecl):
                out.append(f"- local `{printer.fn_head(node)}` (line {node.span.line})")
            else:
                out.append(f"- anonymous `{printer.lambda_head(node)}` (line {node.span.line})")
        out.append("")
    return out


def _inner_functions(body):
    """Local and anonymous functions inside a body, in source order."""
    found = [node for node in S.walk(body) if isinstance(node, (S.FnDecl, S.Lambda))]
    return sorted(found, key=lambda n: (n.span.line, n.span.column))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def page_filename(identity: str) -> str:
    return identity + ".md"


def pages(program) -> dict[str, str]:
    """Every module's page, by module identity."""
    return {m.identity: page(m.identity, m.parsed.module, m.source) for m in program.modules}


def index(program) -> str:
    lines = ["# Modules", ""]
    for m in program.modules:
        doc = module_doc(m.parsed.module, m.source)
        first = _one_line(doc).split(". ")[0] if doc else ""
        lines.append(f"- [`{m.identity}`]({page_filename(m.identity)})" + (f": {first}" if first else ""))
    return "\n".join(lines) + "\n"


def to_html(markdown: str, title: str) -> str:
    """A page as HTML, its ```flow blocks highlighted by Flow's Pygments lexer."""
    from markdown_it import MarkdownIt
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    from flowc.highlight import FlowLexer

    formatter = HtmlFormatter(nowrap=True)

    def highlight_code(code: str, language: str, _attrs) -> str:
        if language == "flow":
            return highlight(code, FlowLexer(), formatter)
        return ""

    body = MarkdownIt("commonmark", {"highlight": highlight_code}).render(
        markdown.replace(".md)", ".html)"))
    style = HtmlFormatter().get_style_defs("pre")
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{style}</style></head>\n<body>\n{body}</body></html>\n")
