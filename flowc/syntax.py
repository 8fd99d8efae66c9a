"""The parsed tree of a Flow module.

Every node is a frozen, slotted dataclass with tuple children and a `span`. The tree is exactly what
the grammar (`grammar/flow.lark`) says, with no resolution or typing: names are strings, qualified
names keep their qualifier. Later stages build their own trees instead of annotating this one.

`dump(node)` writes a canonical, layout-free text of a tree; program identity hashes it, so two
sources that differ only in comments or layout have the same identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

from flowc.records import record


@record
class Span:
    line: int
    column: int
    end_line: int
    end_column: int

    def __repr__(self) -> str:  # compact in test failures
        return f"{self.line}:{self.column}-{self.end_line}:{self.end_column}"


NO_SPAN = Span(1, 1, 1, 1)


# ---- types -------------------------------------------------------------------------------------


@record
class TNamed:
    """`Int`, `List<T>`, `planner.Step`, `json.Value`, a type parameter `T`."""

    name: str
    qualifier: str | None
    args: tuple["TypeExpr", ...]
    span: Span


@record
class TFn:
    """`flow(Int, Text) -> Bool !tool`; `effect` is None (pure), "tool", or an effect variable."""

    params: tuple["TypeExpr", ...]
    ret: "TypeExpr"
    effect: str | None
    span: Span


@record
class TTuple:
    """`(A, B)`; `()` is Unit."""

    items: tuple["TypeExpr", ...]
    span: Span


TypeExpr = Union[TNamed, TFn, TTuple]


# ---- patterns ----------------------------------------------------------------------------------


@record
class PWild:
    span: Span


@record
class PBind:
    name: str
    span: Span


@record
class PLit:
    lit: "Lit"
    span: Span


@record
class PField:
    """`name: pattern` in a named pattern; `pattern` None is the shorthand `name`."""

    name: str
    pattern: "Pattern | None"
    span: Span


@record
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


@record
class PTuple:
    items: tuple["Pattern", ...]
    span: Span


@record
class PList:
    """`[a, b]`, `[x, ..rest]`, `[x, ..]`; `rest` is None (no rest), "" (`..`) or the bound name."""

    items: tuple["Pattern", ...]
    rest: str | None
    span: Span


@record
class POr:
    alternatives: tuple["Pattern", ...]
    span: Span


Pattern = Union[PWild, PBind, PLit, PCtor, PTuple, PList, POr]


# ---- expressions -------------------------------------------------------------------------------


@record
class Lit:
    """A literal. `kind` is int, decimal, text, bool, unit or duration; `value` is its text form
    (int: decimal digits without `_`; decimal: as written without `_`; text: the decoded string;
    bool: "true"/"false"; unit: ""; duration: nanoseconds as decimal digits)."""

    kind: str
    value: str
    span: Span


@record
class Interp:
    """Text with `${expr}` parts: a tuple of decoded strings and expressions, in order."""

    parts: tuple["str | Expr", ...]
    span: Span


@record
class Var:
    name: str
    span: Span


@record
class CtorRef:
    """A constructor (or record type) named in an expression: `Search`, `planner.Search`."""

    name: str
    qualifier: str | None
    span: Span


@record
class Member:
    """`obj.name`: a record field, a tuple index (`t.0`) or, when `obj` names a module, a module member."""

    obj: "Expr"
    name: str
    span: Span


@record
class Call:
    fn: "Expr"
    args: tuple["Expr", ...]
    span: Span


@record
class Binary:
    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@record
class Unary:
    op: str
    operand: "Expr"
    span: Span


@record
class Try:
    """Postfix `?` on a Result."""

    expr: "Expr"
    span: Span


@record
class ListLit:
    items: tuple["Expr", ...]
    span: Span


@record
class TupleLit:
    items: tuple["Expr", ...]
    span: Span


@record
class FieldInit:
    """`name: value`, or the shorthand `name` (value None)."""

    name: str
    value: "Expr | None"
    span: Span


@record
class RecordLit:
    """`Type { f: v, g }`, `Ctor { f: v }`, `Type { f: v, ..base }`."""

    ctor: CtorRef
    fields: tuple[FieldInit, ...]
    base: "Expr | None"
    span: Span


@record
class Param:
    name: str
    type: "TypeExpr | None"
    span: Span


@record
class Lambda:
    params: tuple[Param, ...]
    ret: "TypeExpr | None"
    effect: str | None
    body: "Expr"
    span: Span


@record
class If:
    cond: "Expr"
    then: "Block"
    else_: "Block | If | None"
    span: Span


@record
class Arm:
    pattern: Pattern
    guard: "Expr | None"
    body: "Expr"
    span: Span


@record
class Match:
    scrutinee: "Expr"
    arms: tuple[Arm, ...]
    span: Span


@record
class Return:
    value: "Expr"
    span: Span


@record
class Let:
    pattern: Pattern
    type: "TypeExpr | None"
    value: "Expr"
    span: Span


@record
class Guard:
    cond: "Expr"
    else_: "Block"
    span: Span


@record
class ExprStmt:
    expr: "Expr"
    span: Span


@record
class Block:
    """`{ stmt* }`. Its value is its last statement when that is an expression, else Unit."""

    stmts: tuple["Stmt", ...]
    span: Span


Expr = Union[
    Lit, Interp, Var, CtorRef, Member, Call, Binary, Unary, Try, ListLit, TupleLit, RecordLit,
    Lambda, If, Match, Return, Block,
]


# ---- declarations ------------------------------------------------------------------------------


@record
class Attr:
    """`@tool`, `@test`, `@intrinsic`, `@fake(module.decl)` (`target` is the dotted path)."""

    name: str
    target: tuple[str, ...] | None
    span: Span


@record
class TypeParam:
    name: str
    bounds: tuple[str, ...]
    span: Span


@record
class FieldDecl:
    name: str
    type: TypeExpr
    pub: bool
    doc: str | None
    span: Span


@record
class CtorDecl:
    """An enum constructor; `form` is "bare", "positional" (`args`) or "named" (`fields`)."""

    name: str
    form: str
    args: tuple[TypeExpr, ...]
    fields: tuple[FieldDecl, ...]
    doc: str | None
    span: Span


@record
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


@record
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


@record
class Use:
    path: str
    alias: str | None
    span: Span


@record
class Comment:
    """A `//` or `///` comment, kept for the formatter; never part of program identity."""

    text: str
    span: Span


Stmt = Union[Let, Guard, ExprStmt, FnDecl]
Item = Union[Use, TypeDecl, FnDecl]


@record
class Module:
    items: tuple[Item, ...]
    comments: tuple[Comment, ...]
    span: Span


Node = Union[Expr, Pattern, TypeExpr, Stmt, Item, Module, Arm, Param, FieldInit, PField, Attr,
             TypeParam, FieldDecl, CtorDecl]

_NOT_IDENTITY = frozenset({"span", "name_span", "comments", "doc"})
_NOT_CHILDREN = frozenset({"span", "name_span"})


def walk(root: object, into: Callable[[object], bool] | None = None):
    """Every syntax node in `root` (a node or a tuple of them), itself included, depth first with
    an explicit stack (a tree may nest deeper than Python recursion goes). A node for which
    `into(node)` is false is yielded, but nothing inside it is."""
    stack: list[object] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__"):
            yield item
            if into is None or into(item):
                for name in item.__dataclass_fields__:  # type: ignore[attr-defined]
                    if name not in _NOT_CHILDREN:
                        stack.append(getattr(item, name))


def dump(node: object) -> str:
    """A canonical text of a tree without spans, comments or doc comments.

    Program identity hashes it for every module on every check, so it is written by a function
    made per node class (a recursion over named fields, without a per-field `getattr`); a subtree
    deeper than `_RECURSE` is handed to `_dump_deep`, whose explicit stack cannot exhaust Python's.
    """
    return _writer(type(node))(node, 0)


_RECURSE = 64

#: The writer of each type met so far: `writer(value, depth) -> text`.
_WRITERS: dict[type, Callable[[object, int], str]] = {}


def _writer(cls: type) -> Callable[[object, int], str]:
    writer = _WRITERS.get(cls)
    if writer is None:
        if issubclass(cls, tuple):
            writer = _dump_tuple
        elif hasattr(cls, "__dataclass_fields__"):
            writer = _node_writer(cls)
        else:
            writer = _dump_scalar
        _WRITERS[cls] = writer
    return writer


def _dump_scalar(value: object, depth: int) -> str:
    return _scalar(value)


def _dump_tuple(value: tuple, depth: int) -> str:
    if depth > _RECURSE:
        return _dump_deep(value)
    depth += 1
    get = _WRITERS.get
    return "(" + "".join([" " + (get(type(c)) or _writer(type(c)))(c, depth) for c in value]) + ")"


def _node_writer(cls: type) -> Callable[[object, int], str]:
    names = [name for name in cls.__dataclass_fields__ if name not in _NOT_IDENTITY]  # type: ignore[attr-defined]
    if not names:
        text = cls.__name__ + "{}"
        return lambda value, depth: text
    lines = [
        "def write(v, d):",
        f"    if d > {_RECURSE}: return deep(v)",
        "    d += 1",
    ]
    for index, name in enumerate(names):
        # Names, operators and literal texts are most of a tree's values: written here, not by a call.
        lines.append(f"    x = v.{name}")
        lines.append("    if x.__class__ is str:")
        lines.append(f"        a{index} = quote(x) if '\\\\' in x or '\"' in x else '\"' + x + '\"'")
        lines.append(f"    else: a{index} = (get(type(x)) or writer(type(x)))(x, d)")
    body = "".join(f" {name}={{a{index}}}" for index, name in enumerate(names))
    lines.append(f"    return f'{cls.__name__}{{{{{body}}}}}'")
    namespace = {"get": _WRITERS.get, "writer": _writer, "deep": _dump_deep, "quote": _scalar}
    exec("\n".join(lines) + "\n", namespace)
    return namespace["write"]  # type: ignore[return-value]


class _Text(str):
    """Text `_dump_deep` writes as it is (a string of the tree is quoted)."""

    __slots__ = ()


_OPEN_TUPLE, _CLOSE_TUPLE, _SPACE, _CLOSE_NODE = _Text("("), _Text(")"), _Text(" "), _Text("}")


def _dump_deep(node: object) -> str:
    """`dump` with an explicit stack, for subtrees too deep to recurse into."""
    out: list[str] = []
    stack: list[object] = [node]
    while stack:
        item = stack.pop()
        if type(item) is _Text:
            out.append(item)
        elif isinstance(item, tuple):
            stack.append(_CLOSE_TUPLE)
            for child in reversed(item):
                stack.append(child)
                stack.append(_SPACE)
            out.append(_OPEN_TUPLE)
        elif hasattr(item, "__dataclass_fields__"):
            out.append(type(item).__name__ + "{")
            stack.append(_CLOSE_NODE)
            for name in reversed(tuple(item.__dataclass_fields__)):  # type: ignore[attr-defined]
                if name in _NOT_IDENTITY:
                    continue
                stack.append(getattr(item, name))
                stack.append(_Text(f" {name}="))
        else:
            out.append(_scalar(item))
    return "".join(out)


def _scalar(value: object) -> str:
    if value is None:
        return "~"
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def _dump_text(value: str, depth: int) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_WRITERS[str] = _dump_text
_WRITERS[tuple] = _dump_tuple
