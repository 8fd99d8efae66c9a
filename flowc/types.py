"""Types as the checker sees them, and the unifier.

A type is a frozen value. Unification variables (`TVar`) are bound in a `Subst`, never mutated in
place, so a type can be shared freely. Effects are part of function types: "pure", "tool", a
rigid effect variable of the signature being checked (`EffParam`), or an effect unification
variable (`EffVar`) bound to the join of the effects that flow into it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Union

from flowc.records import record


@record
class TCon:
    """A named type: built-ins by name (`Int`, `List`, `Task`), declared types by identity
    (`planner.Step`, `std@v1/prelude.Option`)."""

    name: str
    args: tuple["Type", ...] = ()


@record
class TParam:
    """A rigid type parameter of the signature being checked."""

    name: str
    owner: str


@record
class TVar:
    id: int


@record
class TTuple:
    items: tuple["Type", ...]


@record
class TFun:
    params: tuple["Type", ...]
    ret: "Type"
    effect: "Effect"


@record
class TError:
    """The type of something already reported; unifies with everything, silently."""


@record
class EffParam:
    name: str
    owner: str


@record
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
#: One shared value per scalar type: the checker compares types often, and the same object
#: compares equal at once.
SCALAR_TYPES = {t.name: t for t in (INT, DECIMAL, BOOL, TEXT, BYTES, DURATION, INSTANT, UNIT, NEVER)}
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


@record(frozen=False)
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
        if e.__class__ is EffVar:
            return self.effects.get(e.id, PURE)
        return e

    def resolve(self, t: Type) -> Type:
        """Shallow: follow variable bindings until a non-variable or an unbound variable."""
        while t.__class__ is TVar:
            bound = self.types.get(t.id)
            if bound is None:
                return t
            t = bound
        return t

    def apply(self, t: Type) -> Type:
        """Deep: replace every bound variable. A type with nothing to replace is returned as it is."""
        cls = t.__class__
        if cls is TVar:
            t = self.resolve(t)
            cls = t.__class__
        if cls is TCon:
            args = t.args
            if not args:
                return t
            applied = tuple([self.apply(a) for a in args])
            return t if _same(applied, args) else TCon(t.name, applied)
        if cls is TTuple:
            items = t.items
            applied = tuple([self.apply(a) for a in items])
            return t if _same(applied, items) else TTuple(applied)
        if cls is TFun:
            params = tuple([self.apply(p) for p in t.params])
            ret = self.apply(t.ret)
            effect = self.effect(t.effect)
            if ret is t.ret and effect is t.effect and _same(params, t.params):
                return t
            return TFun(params, ret, effect)
        return t


def _same(new: tuple, old: tuple) -> bool:
    """Whether every item of `new` is the very object at the same place in `old`."""
    for a, b in zip(new, old):
        if a is not b:
            return False
    return True


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
    function's effect may be smaller than expected (`variance` flips in parameter position).

    Unifying two equal types changes nothing that matters, so equality is not tested first (that
    was a full comparison on every call): the structural cases below meet it on the way."""
    a = s.resolve(actual) if actual.__class__ is TVar else actual
    e = s.resolve(expected) if expected.__class__ is TVar else expected
    if a is e:
        return
    ca = a.__class__
    ce = e.__class__
    if ca is TError or ce is TError:
        return
    if ca is TVar:
        if ce is TVar and e.id == a.id:
            return
        if _occurs(s, a.id, e):
            raise Mismatch()
        s.types[a.id] = e
        return
    if ce is TVar:
        if _occurs(s, e.id, a):
            raise Mismatch()
        s.types[e.id] = a
        return
    if ca is TCon:
        if a.name == "Never" and variance > 0:
            return
        if ce is TCon:
            if a.name != e.name:
                raise Mismatch()
            _unify_each(s, a.args, e.args, variance)
            return
    elif ca is TTuple:
        if ce is TTuple:
            _unify_each(s, a.items, e.items, variance)
            return
    elif ca is TFun:
        if ce is TFun:
            if len(a.params) != len(e.params):
                raise Mismatch()
            for x, y in zip(a.params, e.params):
                unify(s, y, x, variance=-variance)
            unify(s, a.ret, e.ret, variance=variance)
            unify_effect(s, a.effect, e.effect, variance=variance)
            return
    elif ca is TParam:
        if ce is TParam and a == e:
            return
    raise Mismatch()


def _unify_each(s: Subst, actuals: tuple, expecteds: tuple, variance: int) -> None:
    """Type arguments or tuple items, pairwise (the same number of each, or Mismatch)."""
    if len(actuals) != len(expecteds):
        raise Mismatch()
    for x, y in zip(actuals, expecteds):
        if x is not y:
            unify(s, x, y, variance=variance)


def unify_effect(s: Subst, actual: Effect, expected: Effect, *, variance: int = 1) -> None:
    if variance < 0:
        actual, expected = expected, actual
    if isinstance(expected, EffVar):
        s.effects[expected.id] = effect_join(s.effect(expected), s.effect(actual))
        return
    if not effect_leq(s.effect(actual), expected):
        raise Mismatch()


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
    """Replace type parameters (by name) and effect parameters in a signature type. A type with
    nothing to replace is returned as it is."""
    cls = t.__class__
    if cls is TParam:
        return mapping.get(t.name, t)
    if cls is TCon:
        args = t.args
        if not args:
            return t
        new = tuple([substitute(a, mapping, effects) for a in args])
        return t if _same(new, args) else TCon(t.name, new)
    if cls is TTuple:
        items = t.items
        new = tuple([substitute(a, mapping, effects) for a in items])
        return t if _same(new, items) else TTuple(new)
    if cls is TFun:
        effect = t.effect
        if effects and effect.__class__ is EffParam:
            effect = effects.get(effect.name, effect)
        params = tuple([substitute(p, mapping, effects) for p in t.params])
        ret = substitute(t.ret, mapping, effects)
        if effect is t.effect and ret is t.ret and _same(params, t.params):
            return t
        return TFun(params, ret, effect)
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
