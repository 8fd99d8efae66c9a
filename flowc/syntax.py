"""The parsed tree of a Flow module.

Every node is a frozen, slotted dataclass with tuple children and a `span`. The tree is exactly what
the grammar (`grammar/flow.lark`) says, with no resolution or typing: names are strings, qualified
names keep their qualifier. Later stages build their own trees instead of annotating this one.

`dump(node)` writes a canonical, layout-free text of a tree; program identity hashes it, so two
sources that differ only in comments or layout have the same identity.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Union


@dataclass(frozen=True, slots=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int

    def __repr__(self) -> str:  # compact in test failures
        return f"{self.line}:{self.column}-{self.end_line}:{self.end_column}"


NO_SPAN = Span(1, 1, 1, 1)


# ---- types -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TNamed:
    """`Int`, `List<T>`, `planner.Step`, `json.Value`, a type parameter `T`."""

    name: str
    qualifier: str | None
    args: tuple["TypeExpr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TFn:
    """`flow(Int, Text) -> Bool !tool`; `effect` is None (pure), "tool", or an effect variable."""

    params: tuple["TypeExpr", ...]
    ret: "TypeExpr"
    effect: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class TTuple:
    """`(A, B)`; `()` is Unit."""

    items: tuple["TypeExpr", ...]
    span: Span


TypeExpr = Union[TNamed, TFn, TTuple]


# ---- patterns ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PWild:
    span: Span


@dataclass(frozen=True, slots=True)
class PBind:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class PLit:
    lit: "Lit"
    span: Span


@dataclass(frozen=True, slots=True)
class PField:
    """`name: pattern` in a named pattern; `pattern` None is the shorthand `name`."""

    name: str
    pattern: "Pattern | None"
    span: Span


@dataclass(frozen=True, slots=True)
class PCtor:
    """`None`, `Ok(p)`, `main.Resolved(s)`, `Paused { run, .. }`.

    `form` is "bare" (no payload written), "positional" (`args`) or "named" (`fields`, `rest`).
    """

    name: str
    qualifier: str | None
    form: str
    args: tuple["Pattern", ...]
    fields: tuple[PField, ...]
    rest: bool
    span: Span


@dataclass(frozen=True, slots=True)
class PTuple:
    items: tuple["Pattern", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class PList:
    """`[a, b]`, `[x, ..rest]`, `[x, ..]`; `rest` is None (no rest), "" (`..`) or the bound name."""

    items: tuple["Pattern", ...]
    rest: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class POr:
    alternatives: tuple["Pattern", ...]
    span: Span


Pattern = Union[PWild, PBind, PLit, PCtor, PTuple, PList, POr]


# ---- expressions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lit:
    """A literal. `kind` is int, decimal, text, bool, unit or duration; `value` is its text form
    (int: decimal digits without `_`; decimal: as written without `_`; text: the decoded string;
    bool: "true"/"false"; unit: ""; duration: nanoseconds as decimal digits)."""

    kind: str
    value: str
    span: Span


@dataclass(frozen=True, slots=True)
class Interp:
    """Text with `${expr}` parts: a tuple of decoded strings and expressions, in order."""

    parts: tuple["str | Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class CtorRef:
    """A constructor (or record type) named in an expression: `Search`, `planner.Search`."""

    name: str
    qualifier: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class Member:
    """`obj.name`: a record field, a tuple index (`t.0`) or, when `obj` names a module, a module member."""

    obj: "Expr"
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Call:
    fn: "Expr"
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Unary:
    op: str
    operand: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Try:
    """Postfix `?` on a Result."""

    expr: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class ListLit:
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TupleLit:
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class FieldInit:
    """`name: value`, or the shorthand `name` (value None)."""

    name: str
    value: "Expr | None"
    span: Span


@dataclass(frozen=True, slots=True)
class RecordLit:
    """`Type { f: v, g }`, `Ctor { f: v }`, `Type { f: v, ..base }`."""

    ctor: CtorRef
    fields: tuple[FieldInit, ...]
    base: "Expr | None"
    span: Span


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: "TypeExpr | None"
    span: Span


@dataclass(frozen=True, slots=True)
class Lambda:
    params: tuple[Param, ...]
    ret: "TypeExpr | None"
    effect: str | None
    body: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class If:
    cond: "Expr"
    then: "Block"
    else_: "Block | If | None"
    span: Span


@dataclass(frozen=True, slots=True)
class Arm:
    pattern: Pattern
    guard: "Expr | None"
    body: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Match:
    scrutinee: "Expr"
    arms: tuple[Arm, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Return:
    value: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Let:
    pattern: Pattern
    type: "TypeExpr | None"
    value: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Guard:
    cond: "Expr"
    else_: "Block"
    span: Span


@dataclass(frozen=True, slots=True)
class ExprStmt:
    expr: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Block:
    """`{ stmt* }`. Its value is its last statement when that is an expression, else Unit."""

    stmts: tuple["Stmt", ...]
    span: Span


Expr = Union[
    Lit, Interp, Var, CtorRef, Member, Call, Binary, Unary, Try, ListLit, TupleLit, RecordLit,
    Lambda, If, Match, Return, Block,
]


# ---- declarations ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attr:
    """`@tool`, `@test`, `@intrinsic`, `@fake(module.decl)` (`target` is the dotted path)."""

    name: str
    target: tuple[str, ...] | None
    span: Span


@dataclass(frozen=True, slots=True)
class TypeParam:
    name: str
    bounds: tuple[str, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class FieldDecl:
    name: str
    type: TypeExpr
    pub: bool
    doc: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class CtorDecl:
    """An enum constructor; `form` is "bare", "positional" (`args`) or "named" (`fields`)."""

    name: str
    form: str
    args: tuple[TypeExpr, ...]
    fields: tuple[FieldDecl, ...]
    doc: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class TypeDecl:
    """`kind` is "record" (`fields`), "enum" (`ctors`) or "host" (`@tool type`, no body)."""

    name: str
    params: tuple[TypeParam, ...]
    kind: str
    fields: tuple[FieldDecl, ...]
    ctors: tuple[CtorDecl, ...]
    pub: bool
    attrs: tuple[Attr, ...]
    doc: str | None
    span: Span
    name_span: Span


@dataclass(frozen=True, slots=True)
class FnDecl:
    """A named function: top level, or local inside a block. `body` is None for Tools and intrinsics."""

    name: str
    type_params: tuple[TypeParam, ...]
    params: tuple[Param, ...]
    ret: TypeExpr
    effect: str | None
    body: "Expr | None"
    pub: bool
    attrs: tuple[Attr, ...]
    doc: str | None
    span: Span
    name_span: Span

    def attr(self, name: str) -> Attr | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None


@dataclass(frozen=True, slots=True)
class Use:
    path: str
    alias: str | None
    span: Span


@dataclass(frozen=True, slots=True)
class Comment:
    """A `//` or `///` comment, kept for the formatter; never part of program identity."""

    text: str
    span: Span


Stmt = Union[Let, Guard, ExprStmt, FnDecl]
Item = Union[Use, TypeDecl, FnDecl]


@dataclass(frozen=True, slots=True)
class Module:
    items: tuple[Item, ...]
    comments: tuple[Comment, ...]
    span: Span


Node = Union[Expr, Pattern, TypeExpr, Stmt, Item, Module, Arm, Param, FieldInit, PField, Attr,
             TypeParam, FieldDecl, CtorDecl]

_NOT_IDENTITY = frozenset({"span", "name_span", "comments", "doc"})


def dump(node: object) -> str:
    """A canonical text of a tree without spans, comments or doc comments.

    Iterative, so a deeply nested tree cannot exhaust the Python stack.
    """
    out: list[str] = []
    stack: list[object] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, tuple):
            stack.append(_Raw(")"))
            for child in reversed(item):
                stack.append(child)
                stack.append(_Raw(" "))
            out.append("(")
        elif hasattr(item, "__dataclass_fields__"):
            out.append(type(item).__name__ + "{")
            stack.append(_Raw("}"))
            for f in reversed(fields(item)):  # type: ignore[arg-type]
                if f.name in _NOT_IDENTITY:
                    continue
                stack.append(getattr(item, f.name))
                stack.append(_Raw(f" {f.name}="))
        else:
            out.append(_scalar(item))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Raw:
    text: str


def _scalar(value: object) -> str:
    if value is None:
        return "~"
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)
