"""`flow fmt`: one canonical layout for Flow source (docs/fmt.md).

The formatter prints the parsed tree again. Literals are copied from the source as written (so
`1_000`, `90s` and a text's escapes stay as the author wrote them), comments are kept, and the
result parses to the same tree: the program identity never changes (a property test checks this
over the whole test corpus and generated programs). Layout: four-space indents; a construct that
fits in 100 columns where it stands stays on one line, otherwise it breaks one element per line
with trailing commas, or before each operator of a chain; `match` arms and blocks with statements
always take one line each. No line passes 100 columns unless a single token does (docs/fmt.md).
The printer is linear in the module's size: comments are looked up by position (fmt_comments).

Comments between declarations, statements, match arms, fields and constructors keep their place.
A declaration with a comment in a position the printer has no slot for (inside an expression) is
kept exactly as written, so no comment is ever lost or moved.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowc import syntax as S
from flowc.diagnostics import Diagnostic
from flowc.fmt_comments import Comments
from flowc.parse import parse

WIDTH = 100
INDENT = "    "

_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "++": 4, "*": 5, "/": 5, "%": 5}


@dataclass(frozen=True)
class Formatted:
    text: str | None  # None when the source does not parse
    diagnostics: tuple[Diagnostic, ...]
    # The lines of `text` (1-based) copied as written: declarations holding a comment the layout
    # has no slot for. They keep the author's width; every other line keeps WIDTH (docs/fmt.md).
    kept_lines: tuple[int, ...] = ()


def format_source(source: str, file: str = "<input>") -> Formatted:
    parsed = parse(source, file)
    if not parsed.ok:
        return Formatted(None, parsed.diagnostics)
    from flowc.frontend import with_big_stack

    # The printer recurses over the tree, as deep as the parser's bounds let it be (a chain of
    # 1,000 operators): on the thread the checker uses, not the caller's stack.
    printer = _Printer(source, parsed.module)
    text = with_big_stack(printer.module)
    return Formatted(text, (), tuple(printer.kept_lines))


class _Printer:
    """Prints a tree at a column: every method that returns text is told `col`, how many characters
    the line already holds before the text (its indentation included), and `tail`, how many must
    still follow the text's last line (a `,`, ` {`, ` else {`), so a one-line form is chosen only
    where it really fits and a broken form breaks where the line would otherwise overflow."""

    def __init__(self, source: str, module: S.Module) -> None:
        self.lines = source.split("\n")
        self.module_node = module
        self.comments = Comments(module.comments)
        self.kept_lines: list[int] = []

    # ---- source access

    def slice(self, span: S.Span) -> str:
        if span.line == span.end_line:
            return self.lines[span.line - 1][span.column - 1:span.end_column - 1]
        parts = [self.lines[span.line - 1][span.column - 1:]]
        parts.extend(self.lines[span.line:span.end_line - 1])
        parts.append(self.lines[span.end_line - 1][:span.end_column - 1])
        return "\n".join(parts)

    def comments_between(self, after_line: int, before: S.Span) -> list[S.Comment]:
        return self.comments.take_between(after_line, before)

    def trailing(self, span: S.Span, following: S.Span | None = None) -> str:
        """The comment after `span` on its last line, unless what comes next (`following`: the next
        node, or the closing bracket of the last one's container) starts on that line before it:
        then the comment belongs further on."""
        comment = self.comments.take_trailing(span, following)
        return "  " + comment.text if comment is not None else ""

    def has_inner_comment(self, span: S.Span) -> bool:
        return self.comments.any_inside(span)

    # ---- module and declarations

    def module(self) -> str:
        out: list[str] = []
        kept: set[int] = set()  # indexes in `out` of declarations kept as written
        previous: S.Item | None = None
        last_line = 0
        items = self.module_node.items
        for number, item in enumerate(items):
            leading = self.comments_between(last_line, item.span)
            if previous is not None:
                both_uses = isinstance(previous, S.Use) and isinstance(item, S.Use)
                if not both_uses or leading:
                    out.append("")
            elif out:
                out.append("")
            # Blank lines between comments, and between the comments and the declaration, stay
            # (one each): a blank line is what detaches a module's doc from the first declaration.
            for i, c in enumerate(leading):
                if i and c.span.line > leading[i - 1].span.end_line + 1:
                    out.append("")
                out.append(c.text)
            if leading and item.span.line > leading[-1].span.end_line + 1:
                out.append("")
            self.comments.begin()
            text = self.item(item)
            if self.has_inner_comment(item.span):
                # A comment the layout had no place for: keep the declaration as written, its
                # whole lines unless a neighbour shares one, and place exactly the comments in
                # that stretch (not those the attempt placed, which may lie outside it).
                self.comments.undo()
                span = self.kept_span(item, previous, items[number + 1] if number + 1 < len(items) else None)
                self.comments.take_range(span)
                text = "\n".join(line.rstrip() for line in self.slice(span).split("\n"))
                kept.add(len(out))
                out.append(text)
            else:
                out.append(text + self.trailing(item.span, _next_start(items, number + 1, None)))
            previous = item
            last_line = item.span.end_line
        line = 1
        for i, part in enumerate(out):
            count = part.count("\n") + 1
            if i in kept:
                self.kept_lines.extend(range(line, line + count))
            line += count
        rest = [c.text for c in self.comments.take_rest()]
        if rest:
            if out:
                out.append("")
            out.extend(rest)
        return "\n".join(out).rstrip() + "\n" if out else ""

    def kept_span(self, item: S.Item, previous: S.Item | None, following: S.Item | None) -> S.Span:
        span = item.span
        start = span.column if previous is not None and previous.span.end_line == span.line else 1
        if following is not None and following.span.line == span.end_line:
            end = following.span.column
        else:
            end = len(self.lines[span.end_line - 1]) + 1
        return S.Span(span.line, start, span.end_line, end)

    def item(self, item: S.Item) -> str:
        if isinstance(item, S.Use):
            return f"use {self.slice_text_literal(item.span)}" + (f" as {item.alias}" if item.alias else "")
        if isinstance(item, S.TypeDecl):
            return self.type_decl(item)
        return self.fn_decl(item, "")

    def slice_text_literal(self, span: S.Span) -> str:
        text = self.slice(span)
        start = text.index('"')
        end = text.index('"', start + 1)
        return text[start:end + 1]

    def attrs(self, attrs: tuple[S.Attr, ...]) -> str:
        out = []
        for a in attrs:
            out.append(f"@{a.name}" + (f"({'.'.join(a.target)})" if a.target else ""))
        return " ".join(out) + (" " if out else "")

    def type_params(self, params: tuple[S.TypeParam, ...]) -> str:
        if not params:
            return ""
        return "<" + ", ".join(p.name + (": " + " + ".join(p.bounds) if p.bounds else "") for p in params) + ">"

    def type_decl(self, d: S.TypeDecl) -> str:
        head = f"{self.attrs(d.attrs)}{'pub ' if d.pub else ''}type {d.name}{self.type_params(d.params)}"
        if d.kind == "host":
            return head
        if d.kind == "record":
            members = d.fields
            parts = [self.field(f, INDENT, 1) for f in d.fields]
        else:
            members = d.ctors
            parts = [self.ctor(c, INDENT, 1) for c in d.ctors]
        if not parts:
            return head + " {}"
        flat = head + " { " + ", ".join(parts) + " }"
        has_docs = any(m.doc for m in members)
        if _fits(0, flat, 0) and not has_docs:
            return flat
        lines = [head + " {"]
        last = d.name_span.end_line
        for index, (member, text) in enumerate(zip(members, parts)):
            for c in self.comments_between(last, member.span):
                lines.append(INDENT + c.text)
            lines.append(INDENT + text + "," + self.trailing(member.span, _next_start(members, index + 1, _closing(d.span))))
            last = member.span.end_line
        lines.append("}")
        return "\n".join(lines)

    # field, ctor, fn_head and lambda_head give the one-line form without `tail`/`col`: flowc.doc
    # shows declarations' signatures with them.

    def field(self, f: S.FieldDecl, indent: str = "", tail: int | None = None) -> str:
        prefix = f"{'pub ' if f.pub else ''}{f.name}: "
        return prefix + self.type(f.type, indent, len(indent) + len(prefix), tail)

    def ctor(self, c: S.CtorDecl, indent: str = "", tail: int | None = None) -> str:
        if c.form == "bare":
            return c.name
        if c.form == "positional":
            flat = f"{c.name}(" + ", ".join(self.type(a) for a in c.args) + ")"
            if tail is None or _fits(len(indent), flat, tail):
                return flat
            return c.name + self.broken_items("(", ")", c.args, indent, self.type)
        flat = f"{c.name} {{ " + ", ".join(f"{f.name}: {self.type(f.type)}" for f in c.fields) + " }"
        if tail is None or _fits(len(indent), flat, tail):
            return flat
        inner = indent + INDENT
        return f"{c.name} {{\n" + "".join(
            f"{inner}{f.name}: {self.type(f.type, inner, len(inner) + len(f.name) + 2, 1)},\n" for f in c.fields
        ) + indent + "}"

    def fn_head(self, d: S.FnDecl, prefix: str = "", indent: str = "", tail: int | None = None) -> str:
        """`flow name<T>(params) -> R !effect` after `prefix`, its parameters one per line when the
        one-line head does not fit."""
        effect = f" !{d.effect}" if d.effect else ""
        start = f"{prefix}flow {d.name}{self.type_params(d.type_params)}("
        params = ", ".join(f"{p.name}: {self.type(p.type)}" for p in d.params)
        flat = f"{start}{params}) -> {self.type(d.ret)}{effect}"
        if tail is None or _fits(0, flat, tail):
            return flat
        inner = indent + INDENT
        lines = [start]
        for p in d.params:
            lines.append(f"{inner}{p.name}: {self.type(p.type, inner, len(inner) + len(p.name) + 2, 1)},")
        close = f"{indent}) -> "
        lines.append(close + self.type(d.ret, indent, len(close), len(effect) + tail) + effect)
        return "\n".join(lines)

    def fn_decl(self, d: S.FnDecl, indent: str) -> str:
        body = d.body
        tail = 0 if body is None else 4 if isinstance(body, S.Block) else 2  # "", " = {" or " ="
        pub = "pub " if d.pub else ""
        head = self.fn_head(d, indent + self.attrs(d.attrs) + pub, indent, tail)
        if d.attrs and ("\n" in head or not _fits(0, head, tail)):
            # Attributes take a line of their own before the head is broken.
            head = indent + self.attrs(d.attrs).rstrip() + "\n" + self.fn_head(d, indent + pub, indent, tail)
        if body is None:
            return head
        col = _end_col(head, 0) + 3
        if isinstance(body, S.Block):
            return head + " = " + self.block(body, indent, col, 0)
        inner = indent + INDENT
        # Comments between `=` and the body stay there, on their own lines before it.
        comments = "".join(inner + c.text + "\n" for c in self.comments_between(d.ret.span.end_line, body.span))
        flat = self.flat(body)
        if not comments and flat is not None and _fits(col, flat, 0):
            return head + " = " + flat
        if not comments and isinstance(body, S.RecordLit):
            # A record that does not fit on the next line either opens on the head's line.
            inner_flat = flat is not None and _fits(len(inner), flat, 0)
            text = self.broken(body, indent, col, 0)
            if not inner_flat and col + len(text.split("\n", 1)[0]) <= WIDTH:
                return head + " = " + text
        if not comments and isinstance(body, S.Match):
            # A match body opens on the head's line, as a block does, when `match x {` fits there
            # whole.
            text = self.broken(body, indent, col, 0)
            scrutinee = self.flat(body.scrutinee)
            if scrutinee is not None and text.startswith(f"match {scrutinee} ") \
                    and col + len(text.split("\n", 1)[0]) <= WIDTH:
                return head + " = " + text
        return head + " =\n" + comments + inner + self.expr(body, inner, len(inner), 0)

    # ---- types

    def type(self, t: S.TypeExpr | None, indent: str = "", col: int = 0, tail: int | None = None) -> str:
        """A type; with `tail` given, one that breaks its arguments or parameters one per line
        where its one-line form would not fit."""
        if t is None:
            return "_"
        flat = self._type_flat(t)
        if tail is None or _fits(col, flat, tail) or isinstance(t, S.TNamed) and not t.args:
            return flat
        if isinstance(t, S.TNamed):
            name = f"{t.qualifier}.{t.name}" if t.qualifier else t.name
            return name + self.broken_items("<", ">", t.args, indent, self.type)
        if isinstance(t, S.TTuple):
            return self.broken_items("(", ")", t.items, indent, self.type)
        ret = self._type_flat(t.ret)
        if isinstance(t.ret, S.TFn) and t.ret.effect is None and t.effect is not None:
            ret = f"({ret})"
        effect = f" !{t.effect}" if t.effect else ""
        params = self.broken_items("(", ")", t.params, indent, self.type) if t.params else "()"
        return "flow" + params + f" -> {ret}{effect}"

    def _type_flat(self, t: S.TypeExpr | None) -> str:
        if t is None:
            return "_"
        if isinstance(t, S.TNamed):
            name = f"{t.qualifier}.{t.name}" if t.qualifier else t.name
            return name + ("<" + ", ".join(self._type_flat(a) for a in t.args) + ">" if t.args else "")
        if isinstance(t, S.TTuple):
            return "(" + ", ".join(self._type_flat(i) for i in t.items) + ")"
        ret = self._type_flat(t.ret)
        if isinstance(t.ret, S.TFn) and t.ret.effect is None and t.effect is not None:
            ret = f"({ret})"
        return "flow(" + ", ".join(self._type_flat(p) for p in t.params) + f") -> {ret}" + \
            (f" !{t.effect}" if t.effect else "")

    # ---- blocks and statements

    def block(self, b: S.Block, indent: str, col: int, tail: int, force: bool = False) -> str:
        """`{ e }` when the block is one expression that fits (and `force` is off), else one
        statement per line (an empty block forced apart is `{`, then `}` on a line of its own)."""
        if not b.stmts:
            return "{\n" + indent + "}" if force else "{}"
        if not force and len(b.stmts) == 1 and isinstance(b.stmts[0], S.ExprStmt) \
                and not self.has_inner_comment(b.span):
            flat = self.flat(b.stmts[0].expr)
            if flat is not None and _fits(col, flat, tail + 4):
                return "{ " + flat + " }"
        inner = indent + INDENT
        lines = ["{"]
        last = b.span.line
        for index, stmt in enumerate(b.stmts):
            for c in self.comments_between(last, stmt.span):
                lines.append(inner + c.text)
            lines.append(inner + self.stmt(stmt, inner) + self.trailing(stmt.span, _next_start(b.stmts, index + 1, _closing(b.span))))
            last = stmt.span.end_line
        for c in self.comments_between(last, S.Span(b.span.end_line, b.span.end_column, b.span.end_line,
                                                     b.span.end_column)):
            lines.append(inner + c.text)
        lines.append(indent + "}")
        return "\n".join(lines)

    def stmt(self, s: S.Stmt, indent: str) -> str:
        col = len(indent)
        if isinstance(s, S.Let):
            annotation = f": {self.type(s.type)}" if s.type is not None else ""
            prefix = f"let {self.pattern(s.pattern, indent, col + 4, len(annotation) + 3)}{annotation} = "
            return prefix + self.expr(s.value, indent, col + len(prefix), 0)
        if isinstance(s, S.Guard):
            cond = self.head(s.cond, indent, col + 6, 7)
            return f"guard {cond} else " + self.block(s.else_, indent, _end_col(cond, col + 6) + 6, 0)
        if isinstance(s, S.FnDecl):
            return self.fn_decl(s, indent)[len(indent):]
        text = self.expr(s.expr, indent, col, 0)
        # A statement line starting with `-` would continue the line before: keep it apart.
        return f"({text})" if text.startswith("-") else text

    def head(self, e: S.Expr, indent: str, col: int, tail: int) -> str:
        """An expression in the head of `if`, `match` or `guard`: a record literal needs parens."""
        if _has_bare_record(e):
            return "(" + self.expr(e, indent, col + 1, tail + 1) + ")"
        return self.expr(e, indent, col, tail)

    # ---- expressions

    def flat(self, e: S.Expr) -> str | None:
        """The one-line form, or None when the expression must take several lines."""
        try:
            text = self._flat(e)
        except _Multiline:
            return None
        return text if "\n" not in text else None

    def expr(self, e: S.Expr, indent: str, col: int, tail: int) -> str:
        flat = self.flat(e)
        if flat is not None and _fits(col, flat, tail):
            return flat
        return self.broken(e, indent, col, tail)

    def _flat(self, e: S.Expr) -> str:
        if isinstance(e, (S.Lit, S.Interp)):
            return self.slice(e.span)
        if isinstance(e, S.Var):
            return e.name
        if isinstance(e, S.CtorRef):
            return f"{e.qualifier}.{e.name}" if e.qualifier else e.name
        if isinstance(e, S.Member):
            return self.postfix_operand(e.obj) + "." + e.name
        if isinstance(e, S.Call):
            return self.postfix_operand(e.fn) + "(" + ", ".join(self._flat(a) for a in e.args) + ")"
        if isinstance(e, S.Try):
            return self.postfix_operand(e.expr) + "?"
        if isinstance(e, S.Unary):
            operand = self._flat(e.operand)
            if isinstance(e.operand, (S.Binary, S.Lambda, S.Return)):
                operand = f"({operand})"
            return e.op + operand
        if isinstance(e, S.Binary):
            return self.binary(e, self._flat)
        if isinstance(e, S.ListLit):
            return "[" + ", ".join(self._flat(i) for i in e.items) + "]"
        if isinstance(e, S.TupleLit):
            return "(" + ", ".join(self._flat(i) for i in e.items) + ")"
        if isinstance(e, S.RecordLit):
            return self.record(e, self._flat)
        if isinstance(e, S.Lambda):
            return self.lambda_head(e) + " = " + self._flat(e.body)
        if isinstance(e, S.Return):
            return "return " + self._flat(e.value)
        if isinstance(e, S.If):
            if self.has_inner_comment(e.span):
                raise _Multiline()
            text = f"if {self.flat_head(e.cond)} {self.flat_block(e.then)}"
            if e.else_ is not None:
                other = self._flat(e.else_) if isinstance(e.else_, S.If) else self.flat_block(e.else_)
                text += f" else {other}"
            return text
        if isinstance(e, S.Block):
            return self.flat_block(e)
        raise _Multiline()  # match

    def flat_head(self, e: S.Expr) -> str:
        text = self._flat(e)
        return f"({text})" if _has_bare_record(e) else text

    def flat_block(self, b: S.Block) -> str:
        if len(b.stmts) == 1 and isinstance(b.stmts[0], S.ExprStmt) and not self.has_inner_comment(b.span):
            return "{ " + self._flat(b.stmts[0].expr) + " }"
        if not b.stmts:
            return "{}"
        raise _Multiline()

    def postfix_operand(self, e: S.Expr) -> str:
        text = self._flat(e)
        if isinstance(e, (S.Binary, S.Unary, S.Lambda, S.Return, S.If, S.Match)):
            return f"({text})"
        return text

    def binary(self, e: S.Binary, render) -> str:
        power = _PRECEDENCE[e.op]
        left = render(e.left)
        right = render(e.right)
        if _needs_parens(e.left, power, right_side=False):
            left = f"({left})"
        if _needs_parens(e.right, power, right_side=True):
            right = f"({right})"
        return f"{left} {e.op} {right}"

    def record(self, e: S.RecordLit, render) -> str:
        name = f"{e.ctor.qualifier}.{e.ctor.name}" if e.ctor.qualifier else e.ctor.name
        parts = [f.name if f.value is None else f"{f.name}: {render(f.value)}" for f in e.fields]
        if e.base is not None:
            parts.append(".." + render(e.base))
        return name + (" { " + ", ".join(parts) + " }" if parts else " {}")

    def lambda_head(self, e: S.Lambda, indent: str = "", col: int | None = None) -> str:
        """`flow(params) -> R !effect`; with `col` given, its parameters one per line."""
        ret = f" -> {self.type(e.ret)}" if e.ret is not None else ""
        effect = f" !{e.effect}" if e.effect else ""
        params = ", ".join(p.name + (f": {self.type(p.type)}" if p.type is not None else "") for p in e.params)
        flat = f"flow({params}){ret}{effect}"
        if col is None or not e.params:
            return flat
        inner = indent + INDENT
        lines = ["flow("]
        for p in e.params:
            typed = f": {self.type(p.type, inner, len(inner) + len(p.name) + 2, 1)}" if p.type is not None else ""
            lines.append(f"{inner}{p.name}{typed},")
        lines.append(f"{indent}){ret}{effect}")
        return "\n".join(lines)

    def broken(self, e: S.Expr, indent: str, col: int, tail: int) -> str:
        inner = indent + INDENT
        if isinstance(e, S.Match):
            scrutinee = self.head(e.scrutinee, indent, col + 6, 2)
            lines = [f"match {scrutinee} {{"]
            last = e.scrutinee.span.end_line
            for index, arm in enumerate(e.arms):
                for c in self.comments_between(last, arm.span):
                    lines.append(inner + c.text)
                start = inner + self.pattern(arm.pattern, inner, len(inner), 4)
                if arm.guard is not None:
                    start += " if " + self.expr(arm.guard, inner, len(start) + 4, 4)
                start += " => "
                body = self.arm_body(arm.body, inner, _end_col(start, 0))
                if body.startswith("\n"):
                    start = start.rstrip()
                lines.append(f"{start}{body}," + self.trailing(arm.span, _next_start(e.arms, index + 1, _closing(e.span))))
                last = arm.span.end_line
            lines.append(indent + "}")
            return "\n".join(lines)
        if isinstance(e, S.Block):
            return self.block(e, indent, col, tail)
        if isinstance(e, S.If):
            # An `if` that does not fit on its line takes its blocks apart, every one of them.
            cond = self.head(e.cond, indent, col + 3, 2)
            text = f"if {cond} " + self.block(e.then, indent, 0, 0, force=True)
            if e.else_ is not None:
                other = self.broken(e.else_, indent, 0, tail) if isinstance(e.else_, S.If) \
                    else self.block(e.else_, indent, 0, 0, force=True)
                text += " else " + other
            return text
        if isinstance(e, S.Call):
            hugged = self.hugged_call(e, indent, col, tail)
            if hugged is not None:
                return hugged
            fn = self.postfix_operand_broken(e.fn, indent, col, 1)
            return fn + self.broken_items("(", ")", e.args, indent, self.expr)
        if isinstance(e, S.ListLit):
            return self.broken_items("[", "]", e.items, indent, self.expr)
        if isinstance(e, S.TupleLit):
            return self.broken_items("(", ")", e.items, indent, self.expr)
        if isinstance(e, S.RecordLit):
            name = f"{e.ctor.qualifier}.{e.ctor.name}" if e.ctor.qualifier else e.ctor.name
            lines = [name + " {"]
            for f in e.fields:
                if f.value is None:
                    lines.append(inner + f.name + ",")
                else:
                    lines.append(f"{inner}{f.name}: {self.expr(f.value, inner, len(inner) + len(f.name) + 2, 1)},")
            if e.base is not None:
                lines.append(inner + ".." + self.expr(e.base, inner, len(inner) + 2, 1) + ",")
            lines.append(indent + "}")
            return "\n".join(lines)
        if isinstance(e, S.Lambda):
            head = self.lambda_head(e) + " = "
            text = head + self.expr(e.body, indent, col + len(head), tail)
            # The parameters break when the head does not fit, or when a match or a block
            # opening after it does not.
            opens = isinstance(e.body, (S.Match, S.Block)) and col + len(text.split("\n", 1)[0]) > WIDTH
            if e.params and (col + len(head) > WIDTH or opens):
                head = self.lambda_head(e, indent, col) + " = "
                text = head + self.expr(e.body, indent, _end_col(head, col), tail)
            return text
        if isinstance(e, S.Return):
            return "return " + self.expr(e.value, indent, col + 7, tail)
        if isinstance(e, S.Binary):
            return self.broken_binary(e, indent, col, tail)
        if isinstance(e, S.Member):
            return self.postfix_operand_broken(e.obj, indent, col, tail + 1 + len(e.name)) + "." + e.name
        if isinstance(e, S.Try):
            return self.postfix_operand_broken(e.expr, indent, col, tail + 1) + "?"
        if isinstance(e, S.Unary):
            if isinstance(e.operand, (S.Binary, S.Lambda, S.Return)):
                return e.op + "(" + self.expr(e.operand, indent, col + len(e.op) + 1, tail + 1) + ")"
            return e.op + self.expr(e.operand, indent, col + len(e.op), tail)
        return self._flat(e)

    def arm_body(self, body: S.Expr, indent: str, col: int) -> str:
        """After `=>`; on the next line, indented once, when it fits there in one line and not
        here, or when it is a text too long for either (it then passes the width by less)."""
        flat = self.flat(body)
        further = indent + INDENT
        if flat is not None and not _fits(col, flat, 1) and len(further) < col \
                and (_fits(len(further), flat, 1) or isinstance(body, (S.Lit, S.Interp))):
            return "\n" + further + flat
        return self.expr(body, indent, col, 1)

    def hugged_call(self, e: S.Call, indent: str, col: int, tail: int) -> str | None:
        """`f(a, b, flow(x) = match x {` ... `})`, `f(a, Name {` ... `})`, `f([` ... `])`: a call
        whose last argument is a function with a match or block body, a record or a list keeps its
        other arguments on its line when they fit there."""
        if not e.args:
            return None
        final = e.args[-1]
        if not (isinstance(final, S.Lambda) and isinstance(final.body, (S.Match, S.Block))
                or isinstance(final, (S.RecordLit, S.ListLit))):
            return None
        others = [self.flat(a) for a in e.args[:-1]]
        fn = self.flat(e.fn)
        if fn is None or any(o is None for o in others) or self.has_inner_comment(e.span):
            return None
        if isinstance(e.fn, (S.Binary, S.Unary, S.Lambda, S.Return, S.If, S.Match)):
            fn = f"({fn})"
        prefix = fn + "(" + "".join(o + ", " for o in others)
        last = self.expr(e.args[-1], indent, col + len(prefix), tail + 1)
        first_line, _, rest = last.partition("\n")
        close = "]" if isinstance(final, S.ListLit) else "}"
        opening = self.lambda_head(final) + " = " if isinstance(final, S.Lambda) else ""
        if not rest or not first_line.startswith(opening) or not rest.endswith(indent + close) \
                or col + len(prefix) + len(first_line) > WIDTH:
            return None
        return prefix + last + ")"

    def broken_binary(self, e: S.Binary, indent: str, col: int, tail: int) -> str:
        """A chain of one precedence (`a ++ b ++ c`) that does not fit: its first operand where it
        stands, then one `op operand` per line, indented once: a line that starts with an operator
        continues the line before (docs/language.md, 2.7)."""
        power = _PRECEDENCE[e.op]
        rights: list[tuple[str, S.Expr]] = []
        left: S.Expr = e
        while isinstance(left, S.Binary) and _PRECEDENCE[left.op] == power:
            rights.append((left.op, left.right))
            if _needs_parens(left.left, power, right_side=False):
                left = left.left
                break
            left = left.left
        rights.reverse()
        inner = indent + INDENT
        lines = [self.operand(left, _needs_parens(left, power, right_side=False), indent, col, 0)]
        for i, (op, operand) in enumerate(rights):
            last = i == len(rights) - 1
            start = f"{inner}{op} "
            lines.append(start + self.operand(operand, _needs_parens(operand, power, right_side=True), inner,
                                              len(start), tail if last else 0))
        return "\n".join(lines)

    def operand(self, e: S.Expr, parens: bool, indent: str, col: int, tail: int) -> str:
        if parens:
            return "(" + self.expr(e, indent, col + 1, tail + 1) + ")"
        return self.expr(e, indent, col, tail)

    def postfix_operand_broken(self, e: S.Expr, indent: str, col: int, tail: int) -> str:
        parens = isinstance(e, (S.Binary, S.Unary, S.Lambda, S.Return, S.If, S.Match))
        return self.operand(e, parens, indent, col, tail)

    def broken_items(self, open_: str, close: str, items, indent: str, render) -> str:
        """Items one per line, each with a trailing comma; `render(item, indent, col, tail)`. A
        lone text that would not fit on a line of its own either stays inside the brackets."""
        if not items:
            return open_ + close
        inner = indent + INDENT
        if len(items) == 1 and isinstance(items[0], (S.Lit, S.Interp)) \
                and not _fits(len(inner), self.slice(items[0].span), 1):
            return open_ + self.slice(items[0].span) + close
        lines = [open_]
        for item in items:
            lines.append(inner + render(item, inner, len(inner), 1) + ",")
        lines.append(indent + close)
        return "\n".join(lines)

    # ---- patterns

    def pattern(self, p: S.Pattern, indent: str = "", col: int = 0, tail: int | None = None) -> str:
        """A pattern; with `tail` given, one that breaks its items or fields one per line where its
        one-line form would not fit."""
        flat = self._pattern_flat(p)
        if tail is None or _fits(col, flat, tail):
            return flat
        inner = indent + INDENT
        if isinstance(p, S.PTuple):
            return self.broken_items("(", ")", p.items, indent, self.pattern)
        if isinstance(p, S.PList):
            parts = [inner + self.pattern(i, inner, len(inner), 1) + "," for i in p.items]
            if p.rest is not None:
                parts.append(f"{inner}..{p.rest},")
            return "[\n" + "\n".join(parts) + "\n" + indent + "]"
        if isinstance(p, S.PCtor) and p.form == "positional":
            name = f"{p.qualifier}.{p.name}" if p.qualifier else p.name
            return name + self.broken_items("(", ")", p.args, indent, self.pattern)
        if isinstance(p, S.PCtor) and p.form != "bare" and (p.fields or p.rest):
            name = f"{p.qualifier}.{p.name}" if p.qualifier else p.name
            parts = []
            for f in p.fields:
                if f.pattern is None:
                    parts.append(f"{inner}{f.name},")
                else:
                    parts.append(f"{inner}{f.name}: {self.pattern(f.pattern, inner, len(inner) + len(f.name) + 2, 1)},")
            if p.rest:
                parts.append(inner + "..,")
            return name + " {\n" + "\n".join(parts) + "\n" + indent + "}"
        return flat

    def _pattern_flat(self, p: S.Pattern) -> str:
        if isinstance(p, S.PWild):
            return "_"
        if isinstance(p, S.PBind):
            return p.name
        if isinstance(p, S.PLit):
            return self.slice(p.span)
        if isinstance(p, S.PTuple):
            return "(" + ", ".join(self._pattern_flat(i) for i in p.items) + ")"
        if isinstance(p, S.PList):
            parts = [self._pattern_flat(i) for i in p.items]
            if p.rest is not None:
                parts.append(".." + p.rest)
            return "[" + ", ".join(parts) + "]"
        if isinstance(p, S.POr):
            return " | ".join(self._pattern_flat(a) for a in p.alternatives)
        name = f"{p.qualifier}.{p.name}" if p.qualifier else p.name
        if p.form == "bare":
            return name
        if p.form == "positional":
            return name + "(" + ", ".join(self._pattern_flat(a) for a in p.args) + ")"
        parts = [f.name if f.pattern is None else f"{f.name}: {self._pattern_flat(f.pattern)}" for f in p.fields]
        if p.rest:
            parts.append("..")
        return name + (" { " + ", ".join(parts) + " }" if parts else " {}")


class _Multiline(Exception):
    pass


def _needs_parens(child: S.Expr, power: int, right_side: bool) -> bool:
    if isinstance(child, (S.Lambda, S.Return)):
        return True
    if not isinstance(child, S.Binary):
        return False
    child_power = _PRECEDENCE[child.op]
    if child_power < power:
        return True
    if child_power == power and (right_side or power == 3):
        return True
    return False


def _has_bare_record(e: S.Expr) -> bool:
    """Does the expression, written flat, contain a record literal outside any brackets?"""
    stack: list[S.Expr] = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, S.RecordLit):
            return True
        if isinstance(node, S.Binary):
            stack.extend((node.left, node.right))
        elif isinstance(node, (S.Unary,)):
            stack.append(node.operand)
        elif isinstance(node, S.Member):
            stack.append(node.obj)
        elif isinstance(node, S.Call):
            stack.append(node.fn)
        elif isinstance(node, S.Try):
            stack.append(node.expr)
    return False



def _next_start(items, index: int, closing: S.Span | None) -> S.Span | None:
    return items[index].span if index < len(items) else closing


def _closing(span: S.Span) -> S.Span:
    """Where the closing bracket ending `span` starts."""
    return S.Span(span.end_line, span.end_column - 1, span.end_line, span.end_column)


def _fits(col: int, text: str, tail: int) -> bool:
    return "\n" not in text and col + len(text) + tail <= WIDTH


def _end_col(text: str, col: int) -> int:
    """The column after `text`, printed starting at `col`."""
    newline = text.rfind("\n")
    return col + len(text) if newline < 0 else len(text) - newline - 1
