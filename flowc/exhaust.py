"""Exhaustiveness and reachability of patterns (Maranget's usefulness algorithm).

The checker translates each pattern to a `Pat` over constructors it has already resolved: enum
constructors by name, `true`/`false`, `()`, one constructor for every tuple and record, `[]` and
`::` (head, tail) for lists, and literals of Int, Decimal, Text and Duration (whose types have
infinitely many constructors, so only a wildcard covers them). A `Signature` function tells, for
a type, its constructors in declaration order with their argument types, or None when the type
has infinitely many.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

from flowc.records import record


@record
class Wild:
    pass


@record
class Con:
    tag: str
    args: tuple["Pat", ...]
    #: how to print it: "positional", "named" (with field names), "tuple", "list", "plain"
    shape: str = "plain"
    names: tuple[str, ...] = ()


@record
class Or:
    alts: tuple["Pat", ...]


Pat = Union[Wild, Con, Or]
WILD = Wild()

#: A constructor of a type: tag, argument types, shape and field names for printing.
Ctor = tuple[str, tuple[Any, ...], str, tuple[str, ...]]
Signature = Callable[[Any], "list[Ctor] | None"]

MAX_WITNESSES = 4


def _expand(row: list[Pat]) -> list[list[Pat]]:
    head = row[0]
    if isinstance(head, Or):
        out: list[list[Pat]] = []
        for alt in head.alts:
            out.extend(_expand([alt] + row[1:]))
        return out
    return [row]


def _specialize(rows: list[list[Pat]], tag: str, arity: int) -> list[list[Pat]]:
    out: list[list[Pat]] = []
    for row in rows:
        for r in (_expand(row) if row[0].__class__ is Or else (row,)):
            head = r[0]
            if head.__class__ is Wild:
                out.append([WILD] * arity + r[1:])
            elif head.__class__ is Con and head.tag == tag:
                out.append(list(head.args) + r[1:])
    return out


def _default(rows: list[list[Pat]]) -> list[list[Pat]]:
    out: list[list[Pat]] = []
    for row in rows:
        for r in (_expand(row) if row[0].__class__ is Or else (row,)):
            if r[0].__class__ is Wild:
                out.append(r[1:])
    return out


def _heads(rows: list[list[Pat]]) -> set[str]:
    tags: set[str] = set()
    for row in rows:
        for r in (_expand(row) if row[0].__class__ is Or else (row,)):
            if r[0].__class__ is Con:
                tags.add(r[0].tag)
    return tags


def useful(rows: list[list[Pat]], vector: list[Pat], types: list[Any], sig: Signature) -> bool:
    """Is there a value matched by `vector` that no row matches?"""
    if not rows:
        return True  # a pattern vector always matches some value
    if not vector:
        return False
    head = vector[0]
    if isinstance(head, Or):
        return any(useful(rows, [alt] + vector[1:], types, sig) for alt in head.alts)
    ctors = sig(types[0])
    if isinstance(head, Con):
        arg_types = _arg_types(ctors, head.tag, len(head.args))
        return useful(_specialize(rows, head.tag, len(head.args)), list(head.args) + vector[1:],
                      arg_types + types[1:], sig)
    present = _heads(rows)
    if ctors is not None and ctors and all(c[0] in present for c in ctors):
        return any(useful(_specialize(rows, c[0], len(c[1])), [WILD] * len(c[1]) + vector[1:],
                          list(c[1]) + types[1:], sig) for c in ctors)
    return useful(_default(rows), vector[1:], types[1:], sig)


def missing(rows: list[list[Pat]], types: list[Any], sig: Signature) -> list[list[Pat]]:
    """Values (as patterns) that no row matches; at most MAX_WITNESSES, in declaration order.

    For a type with finitely many constructors every constructor is explored, so that a match
    missing both `Err(Failed(X))` and `Err(BadReply(_))` names both."""
    if not types:
        return [] if rows else [[]]
    ctors = sig(types[0])
    present = _heads(rows)
    if ctors is not None and not ctors:
        return []  # a type with no values (Never): nothing can be missing
    if ctors is None:
        rest = missing(_default(rows), types[1:], sig)
        return [[WILD] + r for r in rest][:MAX_WITNESSES]
    found: list[list[Pat]] = []
    default_rest: list[list[Pat]] | None = None
    for tag, arg_types, shape, names in ctors:
        arity = len(arg_types)
        if tag in present:
            for w in missing(_specialize(rows, tag, arity), list(arg_types) + types[1:], sig):
                found.append([Con(tag, tuple(w[:arity]), shape, names)] + w[arity:])
        else:
            if default_rest is None:
                default_rest = missing(_default(rows), types[1:], sig)
            for r in default_rest:
                found.append([Con(tag, tuple(WILD for _ in arg_types), shape, names)] + r)
        if len(found) >= MAX_WITNESSES:
            break
    if found and not present and len(ctors) > 1:
        return [[WILD] + found[0][1:]]
    return found[:MAX_WITNESSES]


def _arg_types(ctors: list[Ctor] | None, tag: str, arity: int) -> list[Any]:
    if ctors:
        for c in ctors:
            if c[0] == tag:
                return list(c[1])
    return [None] * arity


def show(p: Pat) -> str:
    if isinstance(p, Wild):
        return "_"
    if isinstance(p, Or):
        return " | ".join(show(a) for a in p.alts)
    if p.shape == "tuple":
        return "(" + ", ".join(show(a) for a in p.args) + ")"
    if p.shape == "list":
        return _show_list(p)
    if p.shape == "named":
        inner = ", ".join(f"{n}: {show(a)}" for n, a in zip(p.names, p.args) if not isinstance(a, Wild))
        if not inner:
            return f"{p.tag} {{ .. }}"
        rest = ", .." if any(isinstance(a, Wild) for a in p.args) else ""
        return f"{p.tag} {{ {inner}{rest} }}"
    if p.shape == "positional":
        return f"{p.tag}(" + ", ".join(show(a) for a in p.args) + ")"
    return p.tag


def _show_list(p: Pat) -> str:
    items: list[str] = []
    current: Pat = p
    while isinstance(current, Con) and current.tag == "::":
        items.append(show(current.args[0]))
        current = current.args[1]
    if isinstance(current, Con) and current.tag == "[]":
        return "[" + ", ".join(items) + "]"
    return "[" + ", ".join(items + [".."]) + "]"
