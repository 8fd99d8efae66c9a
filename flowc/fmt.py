"""`flow fmt`: one canonical layout for Flow source (docs/fmt.md).

The formatter prints the parsed tree again. Literals are copied from the source as written (so
`1_000`, `90s` and a text's escapes stay as the author wrote them), comments are kept, and the
result parses to the same tree: the program identity never changes (a property test checks this
over the whole test corpus). Layout: four-space indents; a construct that fits in 100 columns
stays on one line, otherwise it breaks one element per line with trailing commas; `match` arms
and blocks with statements always take one line each.

Comments between declarations, statements, match arms, fields and constructors keep their place.
A declaration with a comment in a position the printer has no slot for (inside an expression) is
kept exactly as written, so no comment is ever lost or moved.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowc import syntax as S
from flowc.diagnostics import Diagnostic
from flowc.parse import parse

WIDTH = 100
INDENT = "    "

_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "++": 4, "*": 5, "/": 5, "%": 5}


@dataclass(frozen=True)
class Formatted:
    text: str | None  # None when the source does not parse
    diagnostics: tuple[Diagnostic, ...]


def format_source(source: str, file: str = "<input>") -> Formatted:
    parsed = parse(source, file)
    if not parsed.ok:
        return Formatted(None, parsed.diagnostics)
    from flowc.frontend import with_big_stack

    # The printer recurses over the tree, as deep as the parser's bounds let it be (a chain of
    # 1,000 operators): on the thread the checker uses, not the caller's stack.
    return Formatted(with_big_stack(lambda: _Printer(source, parsed.module).module()), ())


class _Printer:
    def __init__(self, source: str, module: S.Module) -> None:
        self.lines = source.split("\n")
        self.module_node = module
        self.comments = sorted(module.comments, key=lambda c: (c.span.line, c.span.column))
        self.used: set[int] = set()

    # ---- source access

    def slice(self, span: S.Span) -> str:
        if span.line == span.end_line:
            return self.lines[span.line - 1][span.column - 1:span.end_column - 1]
        parts = [self.lines[span.line - 1][span.column - 1:]]
        parts.extend(self.lines[span.line:span.end_line - 1])
        parts.append(self.lines[span.end_line - 1][:span.end_column - 1])
        return "\n".join(parts)

    def comments_between(self, after_line: int, before: S.Span) -> list[S.Comment]:
        """Unused comments on lines after `after_line` that end before `before` starts."""
        out = []
        for i, c in enumerate(self.comments):
            if i in self.used:
                continue
            if c.span.line > after_line and (c.span.line, c.span.column) < (before.line, before.column):
                out.append(c)
                self.used.add(i)
        return out

    def trailing(self, span: S.Span) -> str:
        """A comment on the last line of `span`, after it."""
        for i, c in enumerate(self.comments):
            if i not in self.used and c.span.line == span.end_line and c.span.column >= span.end_column:
                self.used.add(i)
                return "  " + c.text
        return ""

    def has_inner_comment(self, span: S.Span) -> bool:
        for i, c in enumerate(self.comments):
            if i in self.used:
                continue
            if (span.line, span.column) < (c.span.line, c.span.column) < (span.end_line, span.end_column):
                return True
        return False

    # ---- module and declarations

    def module(self) -> str:
        out: list[str] = []
        previous: S.Item | None = None
        last_line = 0
        for item in self.module_node.items:
            leading = self.comments_between(last_line, item.span)
            if previous is not None:
                both_uses = isinstance(previous, S.Use) and isinstance(item, S.Use)
                if not both_uses or leading:
                    out.append("")
            elif out:
                out.append("")
            out.extend(c.text for c in leading)
            before = set(self.used)
            text = self.item(item)
            if self.has_inner_comment(item.span):
                # A comment the layout had no place for: keep the declaration as written.
                self.used = before
                text = "\n".join(line.rstrip() for line in self.slice(_line_span(item.span, self.lines)).split("\n"))
                for i, c in enumerate(self.comments):
                    if item.span.line <= c.span.line <= item.span.end_line:
                        self.used.add(i)
                out.append(text)
            else:
                out.append(text + self.trailing(item.span))
            previous = item
            last_line = item.span.end_line
        rest = [c.text for i, c in enumerate(self.comments) if i not in self.used]
        if rest:
            if out:
                out.append("")
            out.extend(rest)
        return "\n".join(out).rstrip() + "\n" if out else ""

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
            parts = [self.field(f) for f in d.fields]
            members = d.fields
        else:
            parts = [self.ctor(c) for c in d.ctors]
            members = d.ctors
        if not parts:
            return head + " {}"
        flat = head + " { " + ", ".join(parts) + " }"
        has_docs = any(m.doc for m in members)
        if len(flat) <= WIDTH and "\n" not in flat and not has_docs:
            return flat
        lines = [head + " {"]
        last = d.name_span.end_line
        for member, text in zip(members, parts):
            for c in self.comments_between(last, member.span):
                lines.append(INDENT + c.text)
            lines.append(INDENT + text.replace("\n", "\n" + INDENT) + "," + self.trailing(member.span))
            last = member.span.end_line
        lines.append("}")
        return "\n".join(lines)

    def field(self, f: S.FieldDecl) -> str:
        return f"{'pub ' if f.pub else ''}{f.name}: {self.type(f.type)}"

    def ctor(self, c: S.CtorDecl) -> str:
        if c.form == "bare":
            return c.name
        if c.form == "positional":
            return f"{c.name}(" + ", ".join(self.type(a) for a in c.args) + ")"
        return f"{c.name} {{ " + ", ".join(f"{f.name}: {self.type(f.type)}" for f in c.fields) + " }"

    def fn_head(self, d: S.FnDecl) -> str:
        params = ", ".join(f"{p.name}: {self.type(p.type)}" for p in d.params)
        effect = f" !{d.effect}" if d.effect else ""
        return f"flow {d.name}{self.type_params(d.type_params)}({params}) -> {self.type(d.ret)}{effect}"

    def fn_decl(self, d: S.FnDecl, indent: str) -> str:
        head = indent + f"{self.attrs(d.attrs)}{'pub ' if d.pub else ''}" + self.fn_head(d)
        if d.body is None:
            return head
        body = d.body
        if isinstance(body, S.Block):
            return head + " = " + self.block(body, indent)
        flat = self.flat(body)
        if flat is not None and len(head) + 3 + len(flat) <= WIDTH:
            return head + " = " + flat
        return head + " =\n" + indent + INDENT + self.expr(body, indent + INDENT)

    # ---- types

    def type(self, t: S.TypeExpr | None) -> str:
        if t is None:
            return "_"
        if isinstance(t, S.TNamed):
            name = f"{t.qualifier}.{t.name}" if t.qualifier else t.name
            return name + ("<" + ", ".join(self.type(a) for a in t.args) + ">" if t.args else "")
        if isinstance(t, S.TTuple):
            return "(" + ", ".join(self.type(i) for i in t.items) + ")"
        ret = self.type(t.ret)
        if isinstance(t.ret, S.TFn) and t.ret.effect is None and t.effect is not None:
            ret = f"({ret})"
        return "flow(" + ", ".join(self.type(p) for p in t.params) + f") -> {ret}" + \
            (f" !{t.effect}" if t.effect else "")

    # ---- blocks and statements

    def block(self, b: S.Block, indent: str) -> str:
        if not b.stmts:
            return "{}"
        if len(b.stmts) == 1 and isinstance(b.stmts[0], S.ExprStmt) and not self.has_inner_comment(b.span):
            flat = self.flat(b.stmts[0].expr)
            if flat is not None and len(indent) + len(flat) + 4 <= WIDTH and "\n" not in flat:
                return "{ " + flat + " }"
        inner = indent + INDENT
        lines = ["{"]
        last = b.span.line
        for stmt in b.stmts:
            for c in self.comments_between(last, stmt.span):
                lines.append(inner + c.text)
            lines.append(inner + self.stmt(stmt, inner) + self.trailing(stmt.span))
            last = stmt.span.end_line
        for c in self.comments_between(last, S.Span(b.span.end_line, b.span.end_column, b.span.end_line,
                                                     b.span.end_column)):
            lines.append(inner + c.text)
        lines.append(indent + "}")
        return "\n".join(lines)

    def stmt(self, s: S.Stmt, indent: str) -> str:
        if isinstance(s, S.Let):
            annotation = f": {self.type(s.type)}" if s.type is not None else ""
            return f"let {self.pattern(s.pattern)}{annotation} = " + self.expr(s.value, indent)
        if isinstance(s, S.Guard):
            return f"guard {self.head(s.cond, indent)} else " + self.block(s.else_, indent)
        if isinstance(s, S.FnDecl):
            return self.fn_decl(s, indent)[len(indent):]
        text = self.expr(s.expr, indent)
        # A statement line starting with `-` would continue the line before: keep it apart.
        return f"({text})" if text.startswith("-") else text

    def head(self, e: S.Expr, indent: str) -> str:
        """An expression in the head of `if`, `match` or `guard`: a record literal needs parens."""
        text = self.expr(e, indent)
        return f"({text})" if _has_bare_record(e) else text

    # ---- expressions

    def flat(self, e: S.Expr) -> str | None:
        """The one-line form, or None when the expression must take several lines."""
        try:
            text = self._flat(e)
        except _Multiline:
            return None
        return text if "\n" not in text else None

    def expr(self, e: S.Expr, indent: str) -> str:
        flat = self.flat(e)
        if flat is not None and len(indent) + len(flat) <= WIDTH:
            return flat
        return self.broken(e, indent)

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

    def lambda_head(self, e: S.Lambda) -> str:
        params = ", ".join(p.name + (f": {self.type(p.type)}" if p.type is not None else "") for p in e.params)
        ret = f" -> {self.type(e.ret)}" if e.ret is not None else ""
        effect = f" !{e.effect}" if e.effect else ""
        return f"flow({params}){ret}{effect}"

    def broken(self, e: S.Expr, indent: str) -> str:
        inner = indent + INDENT
        if isinstance(e, S.Match):
            lines = [f"match {self.head(e.scrutinee, indent)} {{"]
            last = e.scrutinee.span.end_line
            for arm in e.arms:
                for c in self.comments_between(last, arm.span):
                    lines.append(inner + c.text)
                guard = f" if {self.expr(arm.guard, inner)}" if arm.guard is not None else ""
                body = self.arm_body(arm.body, inner)
                lines.append(inner + f"{self.pattern(arm.pattern)}{guard} => {body}," + self.trailing(arm.span))
                last = arm.span.end_line
            lines.append(indent + "}")
            return "\n".join(lines)
        if isinstance(e, S.Block):
            return self.block(e, indent)
        if isinstance(e, S.If):
            text = f"if {self.head(e.cond, indent)} " + self.block(e.then, indent)
            if e.else_ is not None:
                other = self.broken(e.else_, indent) if isinstance(e.else_, S.If) else self.block(e.else_, indent)
                text += " else " + other
            return text
        if isinstance(e, S.Call):
            return self.postfix_operand_broken(e.fn, indent) + self.broken_list("(", ")", e.args, indent)
        if isinstance(e, S.ListLit):
            return self.broken_list("[", "]", e.items, indent)
        if isinstance(e, S.TupleLit):
            return self.broken_list("(", ")", e.items, indent)
        if isinstance(e, S.RecordLit):
            name = f"{e.ctor.qualifier}.{e.ctor.name}" if e.ctor.qualifier else e.ctor.name
            lines = [name + " {"]
            for f in e.fields:
                lines.append(inner + (f.name if f.value is None else f"{f.name}: {self.expr(f.value, inner)}") + ",")
            if e.base is not None:
                lines.append(inner + ".." + self.expr(e.base, inner) + ",")
            lines.append(indent + "}")
            return "\n".join(lines)
        if isinstance(e, S.Lambda):
            return self.lambda_head(e) + " = " + self.expr(e.body, indent)
        if isinstance(e, S.Return):
            return "return " + self.expr(e.value, indent)
        if isinstance(e, S.Binary):
            return self.binary(e, lambda x: self.expr(x, indent))
        if isinstance(e, S.Member):
            return self.postfix_operand_broken(e.obj, indent) + "." + e.name
        if isinstance(e, S.Try):
            return self.postfix_operand_broken(e.expr, indent) + "?"
        if isinstance(e, S.Unary):
            operand = self.expr(e.operand, indent)
            if isinstance(e.operand, (S.Binary, S.Lambda, S.Return)):
                operand = f"({operand})"
            return e.op + operand
        return self._flat(e)

    def arm_body(self, body: S.Expr, indent: str) -> str:
        return self.expr(body, indent)

    def postfix_operand_broken(self, e: S.Expr, indent: str) -> str:
        text = self.expr(e, indent)
        if isinstance(e, (S.Binary, S.Unary, S.Lambda, S.Return, S.If, S.Match)):
            return f"({text})"
        return text

    def broken_list(self, open_: str, close: str, items, indent: str) -> str:
        if not items:
            return open_ + close
        inner = indent + INDENT
        lines = [open_]
        for item in items:
            lines.append(inner + self.expr(item, inner) + ",")
        lines.append(indent + close)
        return "\n".join(lines)

    # ---- patterns

    def pattern(self, p: S.Pattern) -> str:
        if isinstance(p, S.PWild):
            return "_"
        if isinstance(p, S.PBind):
            return p.name
        if isinstance(p, S.PLit):
            return self.slice(p.span)
        if isinstance(p, S.PTuple):
            return "(" + ", ".join(self.pattern(i) for i in p.items) + ")"
        if isinstance(p, S.PList):
            parts = [self.pattern(i) for i in p.items]
            if p.rest is not None:
                parts.append(".." + p.rest)
            return "[" + ", ".join(parts) + "]"
        if isinstance(p, S.POr):
            return " | ".join(self.pattern(a) for a in p.alternatives)
        name = f"{p.qualifier}.{p.name}" if p.qualifier else p.name
        if p.form == "bare":
            return name
        if p.form == "positional":
            return name + "(" + ", ".join(self.pattern(a) for a in p.args) + ")"
        parts = [f.name if f.pattern is None else f"{f.name}: {self.pattern(f.pattern)}" for f in p.fields]
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


def _line_span(span: S.Span, lines: list[str]) -> S.Span:
    """The whole lines a span covers."""
    return S.Span(span.line, 1, span.end_line, len(lines[span.end_line - 1]) + 1)
