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
from heapq import merge
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

#: Work one question (is this arm reachable, what does this match miss) may take, counted in the
#: pattern cells each step reads (rows times columns), besides a few per cell of the question:
#: deciding exhaustiveness is NP-hard in general (a match of Bool tuples can encode a formula of
#: propositional logic, and its exhaustiveness is the formula's validity), so an answer is not
#: always within reach. Past the bound the question is `TooComplex` and the checker says so
#: (`match-too-complex`) in about a second rather than run for hours; a match of 20,000 arms of an
#: enum of 20,000 constructors takes about 60,000.
MAX_WORK = 1_000_000
WORK_PER_CELL = 8


class TooComplex(Exception):
    """The question took more than MAX_WORK."""


class _State:
    """The current question's steps, its bound and remembered answers. Checks take turns (one at a
    time, see frontend.with_big_stack), so one state serves them all."""

    work = 0
    bound = MAX_WORK
    memo: dict = {}


_state = _State()


def _begin(cells: int) -> None:
    _state.work = 0
    _state.bound = MAX_WORK + WORK_PER_CELL * cells
    _state.memo = {}


def _step(cells: int) -> None:
    _state.work += cells + 1
    if _state.work > _state.bound:
        raise TooComplex


def _expand(row: list[Pat]) -> list[list[Pat]]:
    head = row[0]
    if isinstance(head, Or):
        out: list[list[Pat]] = []
        for alt in head.alts:
            out.extend(_expand([alt] + row[1:]))
        return out
    return [row]


class _Split:
    """Rows sorted by their first column, once: the rows headed by each constructor and the rows
    headed by a wildcard, each with its position. Specializing by one constructor then reads only
    its own rows and the wildcard ones, so asking about every constructor of a type (or about each
    of thousands of arms) costs the rows once, not once per constructor."""

    __slots__ = ("by_tag", "wild", "count")

    def __init__(self, rows: list[list[Pat]] = ()) -> None:
        self.by_tag: dict[str, list[tuple[int, list[Pat]]]] = {}
        self.wild: list[tuple[int, list[Pat]]] = []
        self.count = 0
        for row in rows:
            self.add(row)

    def add(self, row: list[Pat]) -> None:
        for r in (_expand(row) if row[0].__class__ is Or else (row,)):
            head = r[0]
            if head.__class__ is Wild:
                self.wild.append((self.count, r))
            else:
                self.by_tag.setdefault(head.tag, []).append((self.count, r))
            self.count += 1

    def specialize(self, tag: str, arity: int) -> list[list[Pat]]:
        """The rows of `_specialize`: those of `tag` and the wildcards, in their order."""
        own = self.by_tag.get(tag, ())
        if not self.wild:
            return [list(r[0].args) + r[1:] for _, r in own]
        if not own:
            return [[WILD] * arity + r[1:] for _, r in self.wild]
        return [list(r[0].args) + r[1:] if r[0].__class__ is Con else [WILD] * arity + r[1:]
                for _, r in merge(own, self.wild, key=_position)]

    def default(self) -> list[list[Pat]]:
        return [r[1:] for _, r in self.wild]


def _position(entry: tuple[int, list[Pat]]) -> int:
    return entry[0]


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


class Arms:
    """The rows of a match's arms so far, for asking of each new arm whether it is reachable:
    kept split by head (`_Split`), so a match of thousands of arms costs about as many steps, not
    their square."""

    def __init__(self, sig: Signature) -> None:
        self.rows: list[list[Pat]] = []
        self._split = _Split()
        self._sig = sig

    def add(self, pat: Pat) -> None:
        self.rows.append([pat])
        self._split.add([pat])

    def useful(self, pat: Pat, scrutinee: Any) -> bool:
        """Does `pat` match a value of type `scrutinee` that no arm so far matches?
        (`useful(rows, [pat], [scrutinee], sig)`)"""
        _begin(self._split.count)
        return _useful_split(self._split, [pat], [scrutinee], self._sig)


#: Rows wider than this are first rid of the columns only wildcards fill (a record pattern of
#: thousands of fields that binds or ignores most of them): the algorithm takes one column a step,
#: and a column of wildcards decides nothing.
_WIDE = 16


def _wild_columns(rows: list[list[Pat]], width: int) -> list[bool]:
    """For each column, whether every row holds a wildcard there."""
    wild = [True] * width
    for row in rows:
        for j, p in enumerate(row):
            if wild[j] and p.__class__ is not Wild:
                wild[j] = False
    return wild


def useful(rows: list[list[Pat]], vector: list[Pat], types: list[Any], sig: Signature) -> bool:
    """Is there a value matched by `vector` that no row matches? (TooComplex past MAX_WORK.)"""
    _begin(len(rows) * len(vector))
    return _useful(rows, vector, types, sig)


def _useful(rows: list[list[Pat]], vector: list[Pat], types: list[Any], sig: Signature) -> bool:
    _step(len(rows) * len(vector))
    if not rows:
        return True  # a pattern vector always matches some value
    if not vector:
        return False
    if len(vector) > _WIDE:
        wild = _wild_columns(rows + [vector], len(vector))
        if any(wild):
            keep = [j for j, w in enumerate(wild) if not w]
            rows = [[row[j] for j in keep] for row in rows]
            vector = [vector[j] for j in keep]
            types = [types[j] for j in keep]
            if not vector:
                return False
    head = vector[0]
    if head.__class__ is Con:  # one constructor: no need to sort the rows by every head
        arg_types = _arg_types(sig(types[0]), head.tag, len(head.args))
        return _useful(_specialize(rows, head.tag, len(head.args)), list(head.args) + vector[1:],
                      arg_types + types[1:], sig)
    return _useful_split(_Split(rows), vector, types, sig)


def _useful_split(split: _Split, vector: list[Pat], types: list[Any], sig: Signature) -> bool:
    _step(split.count * len(vector))
    if not split.count:
        return True
    if not vector:
        return False
    head = vector[0]
    if isinstance(head, Or):
        return any(_useful_split(split, [alt] + vector[1:], types, sig) for alt in head.alts)
    ctors = sig(types[0])
    if isinstance(head, Con):
        arg_types = _arg_types(ctors, head.tag, len(head.args))
        return _useful(split.specialize(head.tag, len(head.args)), list(head.args) + vector[1:],
                      arg_types + types[1:], sig)
    present = split.by_tag
    if ctors is not None and ctors and all(c[0] in present for c in ctors):
        return any(_useful(split.specialize(c[0], len(c[1])), [WILD] * len(c[1]) + vector[1:],
                          list(c[1]) + types[1:], sig) for c in ctors)
    return _useful(split.default(), vector[1:], types[1:], sig)


def missing(rows: list[list[Pat]], types: list[Any], sig: Signature) -> list[list[Pat]]:
    """Values (as patterns) that no row matches; at most MAX_WITNESSES, in declaration order.
    (TooComplex past MAX_WORK.)

    For a type with finitely many constructors every constructor is explored, so that a match
    missing both `Err(Failed(X))` and `Err(BadReply(_))` names both."""
    _begin(len(rows) * len(types))
    return _missing(rows, types, sig)


def _missing(rows: list[list[Pat]], types: list[Any], sig: Signature) -> list[list[Pat]]:
    """`missing`, remembered: specializing an or-pattern by each of its constructors often
    leaves the same rows (`(true | false, true | false, ...)`), which would otherwise be explored
    once per path, exponentially."""
    # By identity: every pattern and type in a question is held by the question's own rows and
    # types (the memo lives as long as the question), and ids are quicker to hash than patterns.
    key = (tuple([tuple(map(id, row)) for row in rows]), tuple(map(id, types)))
    known = _state.memo.get(key)
    if known is None:
        known = _state.memo[key] = _missing_step(rows, types, sig)
    return known


def _missing_step(rows: list[list[Pat]], types: list[Any], sig: Signature) -> list[list[Pat]]:
    _step(len(rows) * len(types))
    if not types:
        return [] if rows else [[]]
    if len(types) > _WIDE and rows:
        wild = _wild_columns(rows, len(types))
        if any(wild):
            keep = [j for j, w in enumerate(wild) if not w]
            found = _missing([[row[j] for j in keep] for row in rows], [types[j] for j in keep], sig)
            out = []
            for witness in found:
                given = iter(witness)
                out.append([WILD if w else next(given) for w in wild])
            return out
    ctors = sig(types[0])
    split = _Split(rows)
    present = split.by_tag
    if ctors is not None and not ctors:
        return []  # a type with no values (Never): nothing can be missing
    if ctors is None:
        rest = _missing(split.default(), types[1:], sig)
        return [[WILD] + r for r in rest][:MAX_WITNESSES]
    found: list[list[Pat]] = []
    default_rest: list[list[Pat]] | None = None
    for tag, arg_types, shape, names in ctors:
        arity = len(arg_types)
        if tag in present:
            for w in _missing(split.specialize(tag, arity), list(arg_types) + types[1:], sig):
                found.append([Con(tag, tuple(w[:arity]), shape, names)] + w[arity:])
        else:
            if default_rest is None:
                default_rest = _missing(split.default(), types[1:], sig)
            for r in default_rest:
                found.append([Con(tag, tuple(WILD for _ in arg_types), shape, names)] + r)
        if len(found) >= MAX_WITNESSES:
            break
    if found and not present and len(ctors) > 1:
        return [[WILD] + found[0][1:]]
    return found[:MAX_WITNESSES]


def _arg_types(ctors: list[Ctor] | None, tag: str, arity: int) -> list[Any]:
    if ctors:
        if len(ctors) > 8:  # an enum of thousands of constructors: find by name, not by scanning
            key = id(ctors)
            known = _ARG_TYPES.get(key)
            if known is None or known[0] is not ctors:
                known = _ARG_TYPES[key] = (ctors, {c[0]: c[1] for c in ctors})
                if len(_ARG_TYPES) > 256:
                    _ARG_TYPES.clear()
                    _ARG_TYPES[key] = known
            found = known[1].get(tag)
            if found is not None:
                return list(found)
        else:
            for c in ctors:
                if c[0] == tag:
                    return list(c[1])
    return [None] * arity


#: id(constructor list) -> (the list, tag -> argument types): `signature` hands out the same list
#: for a type again and again; the list is held so that its id is not reused.
_ARG_TYPES: dict[int, tuple[list, dict]] = {}


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
