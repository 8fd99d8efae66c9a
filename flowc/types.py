"""Types as the checker sees them, and the unifier.

A type is a frozen value. Unification variables (`TVar`) are bound in a `Subst`, never mutated in
place, so a type can be shared freely. Effects are part of function types: "pure", "tool", a
rigid effect variable of the signature being checked (`EffParam`), or an effect unification
variable (`EffVar`) bound to the join of the effects that flow into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True, slots=True)
class TCon:
    """A named type: built-ins by name (`Int`, `List`, `Task`), declared types by identity
    (`planner.Step`, `std@v1/prelude.Option`)."""

    name: str
    args: tuple["Type", ...] = ()


@dataclass(frozen=True, slots=True)
class TParam:
    """A rigid type parameter of the signature being checked."""

    name: str
    owner: str


@dataclass(frozen=True, slots=True)
class TVar:
    id: int


@dataclass(frozen=True, slots=True)
class TTuple:
    items: tuple["Type", ...]


@dataclass(frozen=True, slots=True)
class TFun:
    params: tuple["Type", ...]
    ret: "Type"
    effect: "Effect"


@dataclass(frozen=True, slots=True)
class TError:
    """The type of something already reported; unifies with everything, silently."""


@dataclass(frozen=True, slots=True)
class EffParam:
    name: str
    owner: str


@dataclass(frozen=True, slots=True)
class EffVar:
    id: int


Type = Union[TCon, TParam, TVar, TTuple, TFun, TError]
Effect = Union[str, EffParam, EffVar]  # str is "pure" or "tool"

PURE = "pure"
TOOL = "tool"

INT = TCon("Int")
DECIMAL = TCon("Decimal")
BOOL = TCon("Bool")
TEXT = TCon("Text")
BYTES = TCon("Bytes")
DURATION = TCon("Duration")
INSTANT = TCon("Instant")
UNIT = TCon("Unit")
NEVER = TCon("Never")
ERROR = TError()

SCALARS = ("Int", "Decimal", "Bool", "Text", "Bytes", "Duration", "Instant", "Unit", "Never")
BUILTIN_GENERICS = {"List": 1, "Set": 1, "Dict": 2, "Task": 1}
ORDERED_SCALARS = frozenset({"Int", "Decimal", "Text", "Bool", "Bytes", "Duration", "Instant", "Unit"})

PRELUDE = "std@v1/prelude"
OPTION = f"{PRELUDE}.Option"
RESULT = f"{PRELUDE}.Result"
TOOL_PROBLEM = f"{PRELUDE}.ToolProblem"
JSON_VALUE = "std@v1/json.Value"


def list_of(t: Type) -> TCon:
    return TCon("List", (t,))


def option_of(t: Type) -> TCon:
    return TCon(OPTION, (t,))


def result_of(ok: Type, err: Type) -> TCon:
    return TCon(RESULT, (ok, err))


def tool_problem_of(err: Type) -> TCon:
    return TCon(TOOL_PROBLEM, (err,))


@dataclass
class Subst:
    """Bindings of unification variables; the one mutable thing in type inference."""

    types: dict[int, Type] = field(default_factory=dict)
    effects: dict[int, Effect] = field(default_factory=dict)
    next_id: int = 0

    def fresh(self) -> TVar:
        self.next_id += 1
        return TVar(self.next_id)

    def fresh_effect(self) -> EffVar:
        self.next_id += 1
        return EffVar(self.next_id)

    def effect(self, e: Effect) -> Effect:
        """An effect variable stands for the join of the effects that flowed into it so far."""
        if isinstance(e, EffVar):
            return self.effects.get(e.id, PURE)
        return e

    def resolve(self, t: Type) -> Type:
        """Shallow: follow variable bindings until a non-variable or an unbound variable."""
        while isinstance(t, TVar) and t.id in self.types:
            t = self.types[t.id]
        return t

    def apply(self, t: Type) -> Type:
        """Deep: replace every bound variable."""
        t = self.resolve(t)
        if isinstance(t, TCon):
            return TCon(t.name, tuple(self.apply(a) for a in t.args)) if t.args else t
        if isinstance(t, TTuple):
            return TTuple(tuple(self.apply(a) for a in t.items))
        if isinstance(t, TFun):
            return TFun(tuple(self.apply(p) for p in t.params), self.apply(t.ret), self.effect(t.effect))
        return t


def effect_join(a: Effect, b: Effect) -> Effect:
    if a == b or b == PURE:
        return a
    if a == PURE:
        return b
    return TOOL


def effect_leq(a: Effect, b: Effect) -> bool:
    """May a function of effect `a` stand where effect `b` is expected?"""
    return a == PURE or a == b or b == TOOL


class Mismatch(Exception):
    """Unification failed; the checker turns it into a diagnostic with both types."""


def unify(s: Subst, actual: Type, expected: Type, *, variance: int = 1) -> None:
    """Make `actual` fit where `expected` is wanted. Type arguments are invariant except that a
    function's effect may be smaller than expected (`variance` flips in parameter position)."""
    a = s.resolve(actual)
    e = s.resolve(expected)
    if a is e or a == e and not _has_vars(a):
        return
    if isinstance(a, TError) or isinstance(e, TError):
        return
    if isinstance(a, TVar):
        if isinstance(e, TVar) and e.id == a.id:
            return
        if _occurs(s, a.id, e):
            raise Mismatch()
        s.types[a.id] = e
        return
    if isinstance(e, TVar):
        if _occurs(s, e.id, a):
            raise Mismatch()
        s.types[e.id] = a
        return
    if isinstance(a, TCon) and a.name == "Never" and variance > 0:
        return
    if isinstance(a, TCon) and isinstance(e, TCon):
        if a.name != e.name or len(a.args) != len(e.args):
            raise Mismatch()
        for x, y in zip(a.args, e.args):
            unify(s, x, y, variance=variance)
        return
    if isinstance(a, TTuple) and isinstance(e, TTuple):
        if len(a.items) != len(e.items):
            raise Mismatch()
        for x, y in zip(a.items, e.items):
            unify(s, x, y, variance=variance)
        return
    if isinstance(a, TFun) and isinstance(e, TFun):
        if len(a.params) != len(e.params):
            raise Mismatch()
        for x, y in zip(a.params, e.params):
            unify(s, y, x, variance=-variance)
        unify(s, a.ret, e.ret, variance=variance)
        unify_effect(s, a.effect, e.effect, variance=variance)
        return
    if isinstance(a, TParam) and isinstance(e, TParam) and a == e:
        return
    raise Mismatch()


def unify_effect(s: Subst, actual: Effect, expected: Effect, *, variance: int = 1) -> None:
    if variance < 0:
        actual, expected = expected, actual
    if isinstance(expected, EffVar):
        s.effects[expected.id] = effect_join(s.effect(expected), s.effect(actual))
        return
    if not effect_leq(s.effect(actual), expected):
        raise Mismatch()


def _has_vars(t: Type) -> bool:
    if isinstance(t, TVar):
        return True
    if isinstance(t, TCon):
        return any(_has_vars(a) for a in t.args)
    if isinstance(t, TTuple):
        return any(_has_vars(a) for a in t.items)
    if isinstance(t, TFun):
        return True
    return False


def _occurs(s: Subst, var: int, t: Type) -> bool:
    t = s.resolve(t)
    if isinstance(t, TVar):
        return t.id == var
    if isinstance(t, TCon):
        return any(_occurs(s, var, a) for a in t.args)
    if isinstance(t, TTuple):
        return any(_occurs(s, var, a) for a in t.items)
    if isinstance(t, TFun):
        return any(_occurs(s, var, p) for p in t.params) or _occurs(s, var, t.ret)
    return False


def substitute(t: Type, mapping: dict[str, Type], effects: dict[str, Effect] | None = None) -> Type:
    """Replace type parameters (by name) and effect parameters in a signature type."""
    if isinstance(t, TParam):
        return mapping.get(t.name, t)
    if isinstance(t, TCon):
        return TCon(t.name, tuple(substitute(a, mapping, effects) for a in t.args)) if t.args else t
    if isinstance(t, TTuple):
        return TTuple(tuple(substitute(a, mapping, effects) for a in t.items))
    if isinstance(t, TFun):
        effect = t.effect
        if effects and isinstance(effect, EffParam):
            effect = effects.get(effect.name, effect)
        return TFun(tuple(substitute(p, mapping, effects) for p in t.params),
                    substitute(t.ret, mapping, effects), effect)
    return t


def show(t: Type, s: Subst | None = None) -> str:
    """A type as the user writes it."""
    if s is not None:
        t = s.apply(t)
    if isinstance(t, TCon):
        name = display_name(t.name)
        if t.args:
            return f"{name}<{', '.join(show(a) for a in t.args)}>"
        return name
    if isinstance(t, TParam):
        return t.name
    if isinstance(t, TVar):
        return "_"
    if isinstance(t, TTuple):
        return "(" + ", ".join(show(a) for a in t.items) + ")" if t.items else "Unit"
    if isinstance(t, TFun):
        effect = t.effect if s is None else s.effect(t.effect)
        mark = ""
        if effect == TOOL:
            mark = " !tool"
        elif isinstance(effect, EffParam):
            mark = f" !{effect.name}"
        return f"flow({', '.join(show(p) for p in t.params)}) -> {show(t.ret)}{mark}"
    return "?"


def display_name(identity: str) -> str:
    """`std@v1/prelude.Option` shows as `Option`; `support/planner.Step` as `planner.Step`."""
    if "." not in identity:
        return identity
    module, name = identity.rsplit(".", 1)
    if module == PRELUDE:
        return name
    last = module.rsplit("/", 1)[-1]
    return f"{last}.{name}"
