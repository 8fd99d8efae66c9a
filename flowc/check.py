"""Check function bodies: types, constructor resolution, effects, patterns and exhaustiveness.

Over 800 lines, on purpose: one checker pass over the tree, a method per expression and
statement form, sharing one substitution and one scope chain; the rules of each form are read
together with the forms they interact with (expected types flow down through all of them).
The parts that stand alone are elsewhere: exhaustiveness (exhaust.py), loops (loops.py), types
and unification (types.py), messages (diagnostics/messages.py).

Checking is bidirectional: `expr(e, expected)` infers the type of `e` while pushing down the type
the context wants, which is how a bare constructor (`Search(q)`) finds its enum and a lambda
(`flow(x) = x + 1`) finds its parameter types. Generic calls instantiate their type parameters
(and effect variables) with unification variables; requirements (`T: Ord`) are checked once the
call's types are known. Each function records whether it needed `!tool`; the mark must be there
exactly when it did.

The results the code generator needs (the type of every expression, what each name resolved to,
which calls are in tail position) are recorded in `Facts`, keyed by node.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from flowc import exhaust as X
from flowc import syntax as S
from flowc import types as T
from flowc.diagnostics import M, Location
from flowc.diagnostics.suggest import did_you_mean
from flowc.records import record
from flowc.resolve import (UNBOUND_EFFECT, CtorInfo, Env, FnInfo, ModuleEnv, TypeInfo, TypeScope,
                           index_by_name, loc, signature)
from flowc.resolve import by_name as field_named
from flowc.typeinfo import holds_function, is_data, is_ord, satisfies

if TYPE_CHECKING:
    from flowc.diagnostics.messages import Message

ARITHMETIC = {"+", "-", "*", "/", "%"}
COMPARISON = {"<", "<=", ">", ">="}
EQUALITY = {"==", "!="}

_LITERAL_TYPES = {"int": T.INT, "decimal": T.DECIMAL, "text": T.TEXT, "bool": T.BOOL, "unit": T.UNIT,
                  "duration": T.DURATION}
_NUMBERS = (T.INT, T.DECIMAL)
#: Types about which nothing can be said yet (a variable) or nothing more (already reported).
_UNKNOWN_TYPES = frozenset({T.TVar, T.TError})
_CTOR_SHAPES = {"bare": "plain", "positional": "positional", "named": "named"}
_NOT_ASKED = object()


@record(frozen=False)
class Local:
    type: T.Type
    span: S.Span
    kind: str  # param | let | fn
    used: bool = False
    fn: "LocalFn | None" = None


@record(frozen=False)
class LocalFn:
    decl: S.FnDecl
    owner: str
    sig: T.TFun


@record(frozen=False)
class FnCtx:
    """The function whose body is being checked (a lambda has its own)."""

    owner: str
    ret: T.Type
    effect: T.Effect | None  # None: a lambda, whose effect is inferred
    allow_tools: bool  # @test and @fake functions call Tools without the mark
    inferred: T.Effect = T.PURE
    used_tool: bool = False
    obligations: list[tuple[T.Type, str, S.Span]] = field(default_factory=list)
    generic_tool_calls: list[tuple[T.Type, S.Span, str]] = field(default_factory=list)


@record
class CallFact:
    """What a call is, for the code generator. `kind`: ctor | direct | localfn | value."""

    kind: str
    target: Any  # FnInfo, LocalFn, CtorInfo or None
    effect: T.Effect  # resolved when the enclosing function is finished
    type_args: tuple[T.Type, ...]  # the callee's type arguments (resolved), for generic Tools and intrinsics
    tail: bool


@record(frozen=False)
class Facts:
    """Results of checking that code generation needs, keyed by `id()` of the syntax node.

    The tree is alive for the whole compilation, so the ids are stable; nothing iterates these
    dicts, so their order cannot leak into output."""

    refs: dict[int, tuple] = field(default_factory=dict)
    calls: dict[int, CallFact] = field(default_factory=dict)
    ctors: dict[int, tuple] = field(default_factory=dict)  # node -> (TypeInfo, CtorInfo | None)
    types: dict[int, T.Type] = field(default_factory=dict)
    lambdas: dict[int, T.Effect] = field(default_factory=dict)
    bindings: dict[int, Local] = field(default_factory=dict)
    #: For editors (flowc/query.py); code generation never reads these. The type of each binding
    #: (parameter, pattern name, local function) and each record field read, as inference left it
    #: when its function was done, and the record type each field read reads.
    shown: dict[int, T.Type] = field(default_factory=dict)
    fields_read: dict[int, "TypeInfo"] = field(default_factory=dict)


@record
class Place:
    """A tail call to a top-level function: where a checkpoint can be taken."""

    file: str
    span: S.Span
    caller: str
    callee: str
    marked: bool  # an argument may hold a function: decided as the run goes


@record
class CheckResult:
    """What the checker hands the front end, which builds the program's `frontend.Checked` from
    it: the checkpoint places and the facts code generation needs (its diagnostics are in
    `env.diagnostics`)."""

    env: Env
    places: tuple[Place, ...]
    facts: Facts


def check(env: Env) -> CheckResult:
    places: list[Place] = []
    facts = Facts()
    shared = _Shared()
    for identity in sorted(env.modules):
        menv = env.modules[identity]
        checker = _ModuleChecker(env, menv, places, facts, shared)
        checker.run()
    return CheckResult(env, tuple(places), facts)


class _Scope:
    __slots__ = ("names", "parent")

    def __init__(self, parent: "_Scope | None" = None) -> None:
        self.names: dict[str, Local] = {}
        self.parent = parent

    def lookup(self, name: str) -> Local | None:
        scope: _Scope | None = self
        while scope is not None:
            found = scope.names.get(name)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def all_names(self) -> list[str]:
        out: list[str] = []
        scope: _Scope | None = self
        while scope is not None:
            out.extend(scope.names)
            scope = scope.parent
        return out


class _Shared:
    """What the checker works out once per program and asks for again and again."""

    __slots__ = ("signatures", "callers_view")

    def __init__(self) -> None:
        #: a type's constructors for exhaustiveness, by type
        self.signatures: dict[T.Type, list[X.Ctor] | None] = {}
        #: a function, its type as callers see it and its effect variables' names, by identity
        self.callers_view: dict[str, tuple[FnInfo, T.TFun, list[str]]] = {}


class _ModuleChecker:
    def __init__(self, env: Env, menv: ModuleEnv, places: list[Place], facts: Facts, shared: _Shared) -> None:
        self.env = env
        self.menv = menv
        self.places = places
        self.facts = facts
        self.signatures = shared.signatures
        self.callers_view = shared.callers_view
        #: the raw type-argument tuple last recorded for a node in `facts.types`, by node id
        self.pending_types: dict[int, Any] = {}
        #: (table, key, raw type or effect) resolved when the current top-level function ends
        self.pending: list[tuple[dict, int, Any]] = []
        self.s = T.Subst()
        self.ctx: FnCtx = FnCtx("", T.UNIT, T.PURE, False)
        self.type_params: dict[str, T.Type] = {}
        self.effect_params: dict[str, T.Effect] = {}
        self.current_fn = ""
        #: while the arguments of a call that names its callee are checked: (the call, its scope,
        #: the callee's name), so that a mismatch of an argument as a whole names the parameter and
        #: points at its declaration. Which argument and parameter is worked out only then: this
        #: is set once per call, and checking a valid program pays nothing more.
        self.call: tuple[S.Call, _Scope, str] | None = None

    # ---- reporting

    def report(self, message: Message, span: S.Span) -> None:
        self.env.diagnostics.append(message.at(loc(self.menv, span)))

    def warn(self, message: Message, span: S.Span) -> None:
        self.env.diagnostics.append(message.warn_at(loc(self.menv, span)))

    def show(self, t: T.Type) -> str:
        return T.show(t, self.s)

    def expect(self, actual: T.Type, expected: T.Type | None, span: S.Span) -> T.Type:
        if expected is None:
            return actual
        if actual is expected:
            return expected
        try:
            T.unify(self.s, actual, expected)
        except T.Mismatch:
            a, e = self.s.apply(actual), self.s.apply(expected)
            if isinstance(a, T.TFun) and isinstance(e, T.TFun) and self._only_effect_differs(a, e):
                self.report(M.tool_in_pure_context(), span)
            elif self.call is not None and (parameter := self._parameter(span)) is not None:
                param, declared = parameter
                self.report(M.type_mismatch_argument(expected=self.show(e), found=self.show(a), param=param,
                                                     callee=self.call[2], declared=_place(declared)), span)
            else:
                self.report(M.type_mismatch(expected=self.show(e), found=self.show(a)), span)
            return T.ERROR
        return expected

    def _only_effect_differs(self, a: T.TFun, e: T.TFun) -> bool:
        return T.show(T.TFun(a.params, a.ret, T.PURE)) == T.show(T.TFun(e.params, e.ret, T.PURE))

    # ---- driving

    def run(self) -> None:
        for fn in self.menv.fns.values():
            if fn.decl.body is None:
                continue
            self.check_function(fn)
        root = self.env.program.root
        main = self.menv.fns.get("main")
        if self.menv.identity == root and main is not None and main.pub:
            self._check_entry(main)

    def _check_entry(self, fn: FnInfo) -> None:
        for p, t in zip(fn.decl.params, fn.sig.params):
            if not is_data(self.env, t):
                self.report(M.not_data_entry_parameter(name=p.name, type=T.show(t)), p.span)
        if not is_data(self.env, fn.sig.ret):
            self.report(M.not_data_entry_result(result=T.show(fn.sig.ret)), fn.decl.ret.span)

    def check_function(self, fn: FnInfo) -> None:
        decl = fn.decl
        self.s = T.Subst()
        self.type_params = {p.name: T.TParam(p.name, fn.identity) for p in decl.type_params}
        self.effect_params = _effect_params(fn.sig)
        self.current_fn = fn.identity
        allow = fn.test or fn.fake_target is not None or decl.attr("fake") is not None
        self.ctx = FnCtx(fn.identity, fn.sig.ret, fn.sig.effect, allow)
        scope = _Scope()
        self.pending = []
        self.pending_types = {}
        for p, t in zip(decl.params, fn.sig.params):
            scope.names[p.name] = self.bind_param(p, t)
        assert decl.body is not None
        self.expr(decl.body, fn.sig.ret, scope, tail=True)
        self._finish_ctx(decl, fn.sig.effect)
        self._resolve_pending()

    def bind_param(self, p: S.Param, t: T.Type) -> Local:
        local = Local(t, p.span, "param", used=True)
        self.facts.bindings[id(p)] = local
        self.later(self.facts.shown, p, t)
        return local

    def later(self, table: dict, node: Any, raw: Any) -> None:
        """Record a type or effect to resolve when the function's inference is complete."""
        self.pending.append((table, id(node), raw))
        if table is self.facts.types:
            self.pending_types[id(node)] = raw

    def _resolve_pending(self) -> None:
        for table, key, raw in self.pending:
            if isinstance(raw, CallFact):
                table[key] = CallFact(raw.kind, raw.target, self.s.effect(raw.effect),
                                      tuple(self.s.apply(t) for t in raw.type_args), raw.tail)
            elif isinstance(raw, (str, T.EffParam, T.EffVar)):
                table[key] = self.s.effect(raw)
            else:
                table[key] = self.s.apply(raw)
        self.pending = []
        self.pending_types = {}

    def _finish_ctx(self, decl: S.FnDecl, declared: T.Effect) -> None:
        ctx = self.ctx
        for t, requirement, span in ctx.obligations:
            resolved = self.s.apply(t)
            if not satisfies(self.env, resolved, requirement):
                self.report(M.requirement_unmet(type=self.show(resolved), requirement=requirement), span)
        for t, span, tool in ctx.generic_tool_calls:
            if _has_unknown(self.s.apply(t)):
                self.report(M.cannot_infer_type_argument(tool=tool), span)
        if declared == T.TOOL and not ctx.used_tool and not ctx.allow_tools:
            self.report(M.unneeded_tool_mark(name=decl.name), decl.name_span)

    # ---- effects

    def use_effect(self, effect: T.Effect, span: S.Span, callee: str | None) -> None:
        effect = self.s.effect(effect)
        if effect == T.PURE:
            return
        ctx = self.ctx
        if ctx.effect is None:  # a lambda: its effect grows
            ctx.inferred = T.effect_join(ctx.inferred, effect)
            ctx.used_tool = True
            return
        if ctx.allow_tools or ctx.effect == T.TOOL:
            ctx.used_tool = True
            return
        if isinstance(effect, T.EffParam) and ctx.effect == effect or \
                isinstance(ctx.effect, T.EffParam) and ctx.effect.owner == UNBOUND_EFFECT:
            ctx.used_tool = True
            return
        name = self.current_fn.rsplit(".", 1)[-1]
        self.report(M.missing_tool_mark(callee=callee, name=name), span)
        ctx.used_tool = True

    # ---- expressions

    def expr(self, e: S.Expr, expected: T.Type | None, scope: _Scope, tail: bool = False) -> T.Type:
        return _EXPR_RULES[e.__class__](self, e, expected, scope, tail)

    def e_Lit(self, e: S.Lit, expected, scope, tail) -> T.Type:
        t = _LITERAL_TYPES[e.kind]
        if e.kind == "decimal" and not _decimal_in_range(e.value):
            self.report(M.literal_invalid_decimal_exponent(), e.span)
        return self.expect(t, expected, e.span)

    def e_Interp(self, e: S.Interp, expected, scope, tail) -> T.Type:
        for part in e.parts:
            if isinstance(part, str):
                continue
            t = self.expr(part, None, scope)
            if not is_data(self.env, self.s.apply(t)):
                self.report(M.not_data_in_text(type=self.show(t)), part.span)
        return self.expect(T.TEXT, expected, e.span)

    def e_Var(self, e: S.Var, expected, scope: _Scope, tail) -> T.Type:
        local = scope.lookup(e.name)
        if local is not None:
            local.used = True
            self.facts.refs[id(e)] = ("local", local)
            if local.fn is not None:
                return self.expect(self._instantiate_local(local.fn, e.span), expected, e.span)
            return self.expect(local.type, expected, e.span)
        fn = self.menv.fns.get(e.name)
        if fn is not None:
            self.facts.refs[id(e)] = ("fn", fn)
            return self.expect(self.instantiate(fn, e.span, e), expected, e.span)
        if e.name in self.menv.imports:
            self.report(M.not_callable_module(name=e.name), e.span)
            return T.ERROR
        if e.name in self.menv.loaded.parsed.lost or e.name in self.menv.loaded.failed_aliases \
                or self._failed_import(e.name):
            return T.ERROR
        candidates = scope.all_names() + list(self.menv.fns)
        guess = did_you_mean(e.name, candidates)
        self.report(M.name_undefined(name=e.name, guess=guess), e.span)
        return T.ERROR

    def instantiate(self, fn: FnInfo, span: S.Span, node: Any = None) -> T.Type:
        view = self.callers_view.get(fn.identity)
        if view is None or view[0] is not fn:
            call_type = fn.call_type()
            view = self.callers_view[fn.identity] = (fn, call_type, effect_param_names(call_type))
        _, base, effect_names = view
        if not fn.decl.type_params and not effect_names:
            return base
        mapping = {p.name: self.s.fresh() for p in fn.decl.type_params}
        if node is not None and fn.decl.type_params:
            self.later(self.facts.types, node, T.TTuple(tuple(mapping.values())))
        effects = {name: self.s.fresh_effect() for name in effect_names}
        for p in fn.decl.type_params:
            for bound in p.bounds:
                self.ctx.obligations.append((mapping[p.name], bound, span))
        data_params = [mapping[p.name] for p in fn.decl.type_params if "Data" in p.bounds]
        if (fn.tool or fn.intrinsic) and data_params:
            # The type is needed at run time (to decode a reply or a JSON text): it must be known.
            self.ctx.generic_tool_calls.append((T.TTuple(tuple(data_params)), span, fn.identity))
        return T.substitute(base, mapping, effects)

    def _instantiate_local(self, local: LocalFn, span: S.Span) -> T.Type:
        if not local.decl.type_params:
            return local.sig
        mapping = {p.name: self.s.fresh() for p in local.decl.type_params}
        for p in local.decl.type_params:
            for bound in p.bounds:
                self.ctx.obligations.append((mapping[p.name], bound, span))
        return T.substitute(local.sig, mapping)

    def e_CtorRef(self, e: S.CtorRef, expected, scope, tail) -> T.Type:
        ctor, enum_type = self.find_ctor(e.name, e.qualifier, expected, e.span)
        if ctor is None:
            return T.ERROR
        self.facts.ctors[id(e)] = (self.env.types[ctor.type_identity], ctor)
        if ctor.form == "bare":
            return self.expect(enum_type, expected, e.span)
        if ctor.form == "named":
            self.report(M.type_mismatch_named_fields(name=e.name), e.span)
            return T.ERROR
        payload = self.payload_types(ctor, enum_type)
        return self.expect(T.TFun(tuple(payload), enum_type, T.PURE), expected, e.span)

    def e_Member(self, e: S.Member, expected, scope: _Scope, tail) -> T.Type:
        if isinstance(e.obj, S.Var) and scope.lookup(e.obj.name) is None and e.obj.name in self.menv.imports:
            fn = self.module_fn(e.obj.name, e.name, e.span)
            if fn is None:
                return T.ERROR
            self.facts.refs[id(e)] = ("fn", fn)
            return self.expect(self.instantiate(fn, e.span, e), expected, e.span)
        obj_t = self.s.resolve(self.expr(e.obj, None, scope))
        return self.expect(self.member_type(obj_t, e.name, e.span, e), expected, e.span)

    def module_fn(self, alias: str, name: str, span: S.Span) -> FnInfo | None:
        target = self.env.modules.get(self.menv.imports[alias])
        if target is None:
            return None
        fn = target.fns.get(name)
        if fn is None:
            if not target.broken:
                guess = did_you_mean(name, [n for n, f in target.fns.items() if f.pub])
                self.report(M.member_undefined(alias=alias, name=name, guess=guess), span)
            return None
        if not fn.pub and target.identity != self.menv.identity:
            self.report(M.name_private_member(alias=alias, name=name), span)
        return fn

    def member_type(self, obj_t: T.Type, name: str, span: S.Span, node: Any = None) -> T.Type:
        obj_t = self.s.resolve(obj_t)
        if isinstance(obj_t, T.TError):
            return T.ERROR
        if isinstance(obj_t, T.TTuple):
            if name.isdigit():
                index = int(name)
                if index < len(obj_t.items):
                    self.facts.refs[id(node)] = ("field", index)
                    return obj_t.items[index]
                self.report(M.field_undefined_tuple(n_items=len(obj_t.items), index=index), span)
                return T.ERROR
        if isinstance(obj_t, T.TVar):
            self.report(M.cannot_infer_record_type(name=name), span)
            return T.ERROR
        if isinstance(obj_t, T.TCon):
            info = self.env.types.get(obj_t.name)
            if info is not None and info.kind == "record":
                f = info.field(name)
                if f is None:
                    guess = did_you_mean(name, [x.name for x in info.fields])
                    self.report(M.field_undefined_access(record=info.name, field=name, guess=guess), span)
                    return T.ERROR
                if not f.pub and info.module != self.menv.identity:
                    self.report(M.field_private(field=name, record=info.name), span)
                self.facts.refs[id(node)] = ("field", index_by_name(info.fields, name))
                mapping = {p.name: a for p, a in zip(info.params, obj_t.args)}
                read = T.substitute(f.type, mapping)
                if node is not None:
                    self.facts.fields_read[id(node)] = info
                    self.later(self.facts.shown, node, read)
                return read
        self.report(M.not_a_record_field_read(type=self.show(obj_t), name=name), span)
        return T.ERROR

    # -- calls

    def e_Call(self, e: S.Call, expected, scope: _Scope, tail) -> T.Type:
        if isinstance(e.fn, S.CtorRef):
            return self.ctor_call(e, expected, scope)
        direct = self._direct_target(e.fn, scope)
        fn_t = self.s.resolve(self.expr(e.fn, None, scope))
        if isinstance(fn_t, T.TError):
            for a in e.args:
                self.expr(a, None, scope)
            self.ctx.used_tool = True  # unknown callee: do not also claim the mark is unneeded
            return T.ERROR
        if isinstance(fn_t, T.TVar):
            self.report(M.cannot_infer_callee(), e.fn.span)
            for a in e.args:
                self.expr(a, None, scope)
            return T.ERROR
        if not isinstance(fn_t, T.TFun):
            self.report(M.not_callable(type=self.show(fn_t)), e.fn.span)
            for a in e.args:
                self.expr(a, None, scope)
            return T.ERROR
        if len(e.args) != len(fn_t.params):
            self.report(M.arity_mismatch_call(n_params=len(fn_t.params), n_args=len(e.args),
                                              fn_type=self.show(fn_t)), e.span)
            for a in e.args:
                self.expr(a, None, scope)
            self.use_effect(fn_t.effect, e.span, direct)
            return T.ERROR  # a failed call has no result to check further: nothing that uses it reports
        # Arguments that are not lambdas first, then the expected result, then lambdas: lambda
        # parameters take the types the other arguments and the context have fixed.
        lambdas = []
        outer = self.call
        self.call = (e, scope, direct) if direct is not None else None
        for arg, param in zip(e.args, fn_t.params):
            if isinstance(arg, S.Lambda):
                lambdas.append((arg, param))
            else:
                self.expr(arg, param, scope)
        if expected is not None and lambdas:
            try:
                snapshot = (dict(self.s.types), dict(self.s.effects))
                T.unify(self.s, fn_t.ret, expected)
            except T.Mismatch:
                self.s.types, self.s.effects = snapshot
        for arg, param in lambdas:
            self.expr(arg, param, scope)
        self.call = outer
        self.use_effect(fn_t.effect, e.span, direct)
        self._record_call(e, fn_t, scope, tail)
        if tail:
            self._maybe_place(e, scope)
        return self.expect(fn_t.ret, expected, e.span)

    def _record_call(self, e: S.Call, fn_t: T.TFun, scope: _Scope, tail: bool) -> None:
        ref = self.facts.refs.get(id(e.fn))
        type_args: tuple[T.Type, ...] = ()
        if ref is not None and ref[0] == "fn":
            kind, target = "direct", ref[1]
        elif ref is not None and ref[0] == "local" and ref[1].fn is not None:
            kind, target = "localfn", ref[1]
        else:
            kind, target = "value", None
        raw_targs = self.pending_types.get(id(e.fn))
        if raw_targs is not None:
            type_args = raw_targs.items
        self.later(self.facts.calls, e, CallFact(kind, target, fn_t.effect, type_args, tail))

    def _direct_target(self, fn: S.Expr, scope: _Scope) -> str | None:
        if isinstance(fn, S.Var) and scope.lookup(fn.name) is None:
            return fn.name
        if isinstance(fn, S.Member) and isinstance(fn.obj, S.Var) and scope.lookup(fn.obj.name) is None \
                and fn.obj.name in self.menv.imports:
            return f"{fn.obj.name}.{fn.name}"
        return None

    def _callee(self, fn: S.Expr, scope: _Scope) -> FnInfo | None:
        """The top-level function a call names directly (`f(...)`, `module.f(...)`), if any."""
        if isinstance(fn, S.Var) and scope.lookup(fn.name) is None:
            return self.menv.fns.get(fn.name)
        if isinstance(fn, S.Member) and isinstance(fn.obj, S.Var) and scope.lookup(fn.obj.name) is None \
                and fn.obj.name in self.menv.imports:
            module = self.env.modules.get(self.menv.imports[fn.obj.name])
            return module.fns.get(fn.name) if module else None
        return None

    def _parameter(self, span: S.Span) -> tuple[str, Location] | None:
        """The name and declaration of the parameter of the call being checked whose argument is
        exactly `span`, if any."""
        assert self.call is not None
        call, scope, _ = self.call
        index = next((i for i, arg in enumerate(call.args) if arg.span == span), None)
        if index is None:
            return None
        target = self._callee(call.fn, scope)
        module = self.env.modules.get(target.module) if target is not None else None
        if module is None or index >= len(target.decl.params):
            return None
        param = target.decl.params[index]
        return param.name, loc(module, param.span)

    def _maybe_place(self, call: S.Call, scope: _Scope) -> None:
        """A tail call to a top-level, non-Tool function is a checkpoint place."""
        target = self._callee(call.fn, scope)
        if target is None or target.tool or target.intrinsic or target.decl.body is None:
            return
        if self.ctx.effect is None:
            return  # inside a lambda: not the task's outermost function
        verdicts = [holds_function(self.env, self.s.apply(t)) for t in target.sig.params]
        if "always" in verdicts:
            return
        self.places.append(Place(self.menv.file, call.span, self.current_fn, target.identity, "maybe" in verdicts))

    def ctor_call(self, e: S.Call, expected, scope: _Scope) -> T.Type:
        ref = e.fn
        assert isinstance(ref, S.CtorRef)
        host = self._host_type(ref)
        if host is not None:
            return self.token_call(e, host, expected, scope)
        ctor, enum_type = self.find_ctor(ref.name, ref.qualifier, expected, ref.span)
        if ctor is None:
            for a in e.args:
                self.expr(a, None, scope)
            return T.ERROR
        if ctor.form != "positional":
            for a in e.args:
                self.expr(a, None, scope)
            if ctor.form == "bare":
                self.report(M.arity_mismatch_no_payload(name=ref.name), e.span)
            else:
                self.report(M.type_mismatch_named_fields(name=ref.name), e.span)
            return T.ERROR
        payload = self.payload_types(ctor, enum_type)
        self._type_obligations(self.env.types[ctor.type_identity], enum_type, ref.span)
        self.facts.ctors[id(e)] = (self.env.types[ctor.type_identity], ctor)
        self.facts.calls[id(e)] = CallFact("ctor", ctor, T.PURE, (), False)
        if expected is not None:
            try:
                snapshot = (dict(self.s.types), dict(self.s.effects))
                T.unify(self.s, enum_type, expected)
            except T.Mismatch:
                self.s.types, self.s.effects = snapshot
        if len(e.args) != len(payload):
            self.report(M.arity_mismatch_payload(name=ref.name, n_payload=len(payload), n_args=len(e.args)), e.span)
            for a in e.args:
                self.expr(a, None, scope)
            return self.expect(enum_type, expected, e.span)
        for arg, t in zip(e.args, payload):
            self.expr(arg, t, scope)
        return self.expect(enum_type, expected, e.span)

    def _type_obligations(self, info: TypeInfo, instance: T.Type, span: S.Span) -> None:
        """A value of a generic type must satisfy the requirements on the type's parameters."""
        instance = self.s.resolve(instance)
        if not isinstance(instance, T.TCon):
            return
        for p, arg in zip(info.params, instance.args):
            for bound in p.bounds:
                self.ctx.obligations.append((arg, bound, span))

    def _host_type(self, ref: S.CtorRef) -> TypeInfo | None:
        if ref.qualifier is None:
            info = self.menv.types.get(ref.name)
        else:
            identity = self.menv.imports.get(ref.qualifier)
            target = self.env.modules.get(identity) if identity else None
            info = target.types.get(ref.name) if target else None
        return info if info is not None and info.kind == "host" else None

    def token_call(self, e: S.Call, host: TypeInfo, expected, scope: _Scope) -> T.Type:
        """`Page("tab-1")` in a fake or a test: a host value with the token "tab-1"."""
        if not self.ctx.allow_tools:
            self.report(M.ctor_undefined_host_type(name=host.name), e.fn.span)
            for a in e.args:
                self.expr(a, None, scope)
            return T.ERROR
        if len(e.args) != 1:
            self.report(M.arity_mismatch_host_token(name=host.name), e.span)
            return T.ERROR
        self.expr(e.args[0], T.TEXT, scope)
        self.facts.calls[id(e)] = CallFact("token", host, T.PURE, (), False)
        return self.expect(T.TCon(host.identity), expected, e.span)

    def payload_types(self, ctor: CtorInfo, enum_type: T.Type) -> list[T.Type]:
        enum_type = self.s.resolve(enum_type)
        info = self.env.types[ctor.type_identity]
        args = enum_type.args if isinstance(enum_type, T.TCon) else ()
        mapping = {p.name: a for p, a in zip(info.params, args)}
        return [T.substitute(t, mapping) for t in ctor.payload_types()]

    def find_ctor(self, name: str, qualifier: str | None, expected: T.Type | None,
                  span: S.Span) -> tuple[CtorInfo | None, T.Type]:
        """Resolve a constructor: by the expected type when known, else by scope."""
        if qualifier is not None:
            target = self._module(qualifier, span)
            if target is None:
                return None, T.ERROR
            found = [c for info in target.types.values() for c in info.ctors if c.name == name]
            if not found:
                if not target.broken:
                    guess = did_you_mean(name, sorted({c.name for i in target.types.values() if i.pub for c in i.ctors}))
                    self.report(M.ctor_undefined_module(qualifier=qualifier, name=name, guess=guess), span)
                return None, T.ERROR
            wanted = self._expected_info(expected)
            choice = next((c for c in found if wanted and c.type_identity == wanted.identity), found[0])
            info = self.env.types[choice.type_identity]
            if not info.pub and info.module != self.menv.identity:
                self.report(M.name_private_ctor_type(type_name=info.name, name=name), span)
            return choice, self._fresh_instance(info)
        wanted = self._expected_info(expected)
        if wanted is not None and wanted.kind == "enum":
            ctor = wanted.ctor(name)
            if ctor is not None:
                return ctor, self._fresh_instance(wanted)
        candidates = [c for info in self.menv.types.values() for c in info.ctors if c.name == name]
        candidates += [c for info in self.env.prelude().types.values() for c in info.ctors if c.name == name]
        if len(candidates) == 1:
            ctor = candidates[0]
            return ctor, self._fresh_instance(self.env.types[ctor.type_identity])
        if len(candidates) > 1:
            types = sorted(T.display_name(c.type_identity) for c in candidates)
            self.report(M.cannot_infer_constructor(name=name, types=types), span)
            return None, T.ERROR
        if wanted is not None and wanted.kind == "enum":
            guess = did_you_mean(name, [c.name for c in wanted.ctors])
            self.report(M.ctor_undefined_of_type(type_name=wanted.name, name=name, guess=guess,
                                                 ctors=wanted.ctors), span)
            return None, T.ERROR
        if name in self.menv.loaded.parsed.lost:
            return None, T.ERROR
        known = sorted({c.name for info in self.menv.types.values() for c in info.ctors} |
                       {c.name for info in self.env.prelude().types.values() for c in info.ctors})
        guess = did_you_mean(name, known)
        other = self._ctor_elsewhere(name)
        self.report(M.ctor_undefined_here(name=name, guess=guess, other=other), span)
        return None, T.ERROR

    def _ctor_elsewhere(self, name: str) -> str | None:
        for alias, identity in sorted(self.menv.imports.items()):
            target = self.env.modules.get(identity)
            if target and any(c.name == name for i in target.types.values() if i.pub for c in i.ctors):
                return alias
        return None

    def _expected_info(self, expected: T.Type | None) -> TypeInfo | None:
        if expected is None:
            return None
        t = self.s.resolve(expected)
        if isinstance(t, T.TCon):
            return self.env.types.get(t.name)
        return None

    def _fresh_instance(self, info: TypeInfo, span: S.Span | None = None) -> T.TCon:
        args = tuple(self.s.fresh() for _ in info.params)
        if span is not None:
            for p, var in zip(info.params, args):
                for bound in p.bounds:
                    self.ctx.obligations.append((var, bound, span))
        return T.TCon(info.identity, args)

    def _module(self, alias: str, span: S.Span) -> ModuleEnv | None:
        return TypeScope(self.env, self.menv).module_for(alias, span)

    # -- operators

    def e_Binary(self, e: S.Binary, expected, scope, tail) -> T.Type:
        op = e.op
        if op in ("&&", "||"):
            self.expr(e.left, T.BOOL, scope)
            self.expr(e.right, T.BOOL, scope)
            return self.expect(T.BOOL, expected, e.span)
        left = self.s.resolve(self.expr(e.left, None, scope))
        self.later(self.facts.types, e, left)
        left_known = left.__class__ not in _UNKNOWN_TYPES
        right_expected = left if left_known else None
        if op == "++":
            right = self.expr(e.right, right_expected, scope)
            t = self.s.resolve(left)
            if isinstance(t, T.TVar):
                t = self.s.resolve(right)
            if not (t == T.TEXT or (isinstance(t, T.TCon) and t.name == "List") or isinstance(t, (T.TError, T.TVar))):
                self.report(M.operator_mismatch_concat(type=self.show(t)), e.span)
                return T.ERROR
            return self.expect(t, expected, e.span)
        if op in ARITHMETIC:
            if left_known and left not in _NUMBERS:
                self.expr(e.right, None, scope)
                self.report(M.operator_mismatch_arith_left(op=op, type=self.show(left)), e.span)
                return T.ERROR
            right = self.s.resolve(self.expr(e.right, None, scope))
            right_known = right.__class__ not in _UNKNOWN_TYPES
            if left_known and right_known and left != right:
                self.report(M.operator_mismatch_sides(op=op, left=self.show(left), right=self.show(right)), e.span)
                return T.ERROR
            if right_known and right not in _NUMBERS:
                self.report(M.operator_mismatch_arith_right(op=op, type=self.show(right)), e.span)
                return T.ERROR
            result = left if not isinstance(left, T.TVar) else right
            return self.expect(result, expected, e.span)
        # comparisons
        self.expr(e.right, right_expected, scope)
        t = self.s.apply(left)
        if op in EQUALITY:
            if not is_data(self.env, t):
                self.report(M.not_comparable_equality(type=self.show(t), op=op), e.span)
        elif not is_ord(self.env, t):
            self.report(M.not_comparable_order(type=self.show(t), op=op), e.span)
        return self.expect(T.BOOL, expected, e.span)

    def e_Unary(self, e: S.Unary, expected, scope, tail) -> T.Type:
        if e.op == "!":
            self.expr(e.operand, T.BOOL, scope)
            return self.expect(T.BOOL, expected, e.span)
        t = self.s.resolve(self.expr(e.operand, expected if expected in (T.INT, T.DECIMAL) else None, scope))
        if t not in (T.INT, T.DECIMAL) and not isinstance(t, (T.TError, T.TVar)):
            self.report(M.operator_mismatch_negate(type=self.show(t)), e.span)
            return T.ERROR
        return self.expect(t, expected, e.span)

    def e_Try(self, e: S.Try, expected, scope, tail) -> T.Type:
        t = self.s.resolve(self.expr(e.expr, None, scope))
        if isinstance(t, T.TError):
            return T.ERROR
        if not (isinstance(t, T.TCon) and t.name == T.RESULT):
            self.report(M.try_outside_result_operand(type=self.show(t)), e.span)
            return T.ERROR
        ok, err = t.args
        ret = self.s.resolve(self.ctx.ret)
        if not (isinstance(ret, T.TCon) and ret.name == T.RESULT):
            if isinstance(ret, T.TVar):
                T.unify(self.s, T.result_of(self.s.fresh(), err), ret)
            else:
                self.report(M.try_outside_result_function(returns=self.show(ret)), e.span)
                return self.expect(ok, expected, e.span)
        else:
            try:
                T.unify(self.s, err, ret.args[1])
            except T.Mismatch:
                self.report(M.try_error_mismatch(operand_error=self.show(err),
                                                 function_error=self.show(ret.args[1])), e.span)
        return self.expect(ok, expected, e.span)

    # -- literals of structure

    def e_ListLit(self, e: S.ListLit, expected, scope, tail) -> T.Type:
        want = self.s.resolve(expected) if expected is not None else None
        if isinstance(want, T.TCon) and want.name == "List":
            elem: T.Type = want.args[0]
        else:
            elem = self.s.fresh()
        for item in e.items:
            self.expr(item, elem, scope)
        return self.expect(T.list_of(elem), expected, e.span)

    def e_TupleLit(self, e: S.TupleLit, expected, scope, tail) -> T.Type:
        want = self.s.resolve(expected) if expected is not None else None
        wanted = want.items if isinstance(want, T.TTuple) and len(want.items) == len(e.items) else None
        items = tuple(self.expr(item, wanted[i] if wanted else None, scope) for i, item in enumerate(e.items))
        return self.expect(T.TTuple(items), expected, e.span)

    def e_RecordLit(self, e: S.RecordLit, expected, scope, tail) -> T.Type:
        info, instance, fields, ctor = self._record_target(e.ctor, expected)
        if info is not None:
            self.facts.ctors[id(e)] = (info, ctor)
        if info is None:
            for f in e.fields:
                if f.value is not None:
                    self.expr(f.value, None, scope)
                else:
                    self.e_Var(S.Var(f.name, f.span), None, scope, False)
            if e.base is not None:
                self.expr(e.base, None, scope)
            return T.ERROR
        if expected is not None:
            try:
                snapshot = (dict(self.s.types), dict(self.s.effects))
                T.unify(self.s, instance, expected)
            except T.Mismatch:
                self.s.types, self.s.effects = snapshot
        mapping = {p.name: a for p, a in zip(info.params, instance.args)}
        given: set[str] = set()
        for f in e.fields:
            decl = field_named(tuple(fields), f.name)
            if decl is None:
                guess = did_you_mean(f.name, [x.name for x in fields])
                self.report(M.field_undefined_literal(record=e.ctor.name, field=f.name, guess=guess), f.span)
                if f.value is not None:
                    self.expr(f.value, None, scope)
                continue
            if f.name in given:
                self.report(M.field_duplicate_literal(name=f.name), f.span)
            given.add(f.name)
            if not decl.pub and info.module != self.menv.identity:
                self.report(M.field_private(field=f.name, record=info.name), f.span)
            want = T.substitute(decl.type, mapping)
            if f.value is None:
                shorthand = S.Var(f.name, f.span)
                self.e_Var(shorthand, want, scope, False)
                if id(shorthand) in self.facts.refs:
                    self.facts.refs[id(f)] = self.facts.refs.pop(id(shorthand))
            else:
                self.expr(f.value, want, scope)
        if e.base is not None:
            if ctor is not None:
                self.report(M.type_mismatch_update_of_constructor(), e.base.span)
            self.expr(e.base, instance, scope)
        else:
            absent = [x.name for x in fields if x.name not in given]
            if absent:
                self.report(M.field_missing_literal(name=e.ctor.name, n_absent=len(absent), absent=absent), e.span)
        return self.expect(instance, expected, e.span)

    def _record_target(self, ref: S.CtorRef, expected):
        """A record type by name, or an enum constructor with named fields (type-directed)."""
        info: TypeInfo | None = None
        if ref.qualifier is not None:
            target = self._module(ref.qualifier, ref.span)
            if target is None:
                return None, None, (), None
            info = target.types.get(ref.name)
            if info is not None and not info.pub and info.module != self.menv.identity:
                self.report(M.name_private_type(qualifier=ref.qualifier, name=ref.name), ref.span)
        else:
            info = self.menv.types.get(ref.name)
        if info is not None:
            if info.kind != "record":
                self.report(M.not_a_record_type(name=ref.name), ref.span)
                return None, None, (), None
            return info, self._fresh_instance(info, ref.span), info.fields, None
        ctor, instance = self.find_ctor(ref.name, ref.qualifier, expected, ref.span)
        if ctor is None:
            return None, None, (), None
        if ctor.form != "named":
            self.report(M.not_a_record_positional_ctor(name=ref.name, form=ctor.form), ref.span)
            return None, None, (), None
        return self.env.types[ctor.type_identity], instance, ctor.fields, ctor

    # -- functions

    def e_Lambda(self, e: S.Lambda, expected, scope: _Scope, tail) -> T.Type:
        want = self.s.resolve(expected) if expected is not None else None
        want_fn = want if isinstance(want, T.TFun) and len(want.params) == len(e.params) else None
        arity_wrong = isinstance(want, T.TFun) and want_fn is None
        if arity_wrong:
            self.report(M.arity_mismatch_lambda(n_expected=len(want.params), n_found=len(e.params)), e.span)
        tscope = TypeScope(self.env, self.menv, self.type_params, dict(self.effect_params), self.current_fn)
        inner = _Scope(scope)
        params: list[T.Type] = []
        for i, p in enumerate(e.params):
            if p.type is not None:
                t = tscope.resolve(p.type)
                if want_fn is not None:
                    self.expect(want_fn.params[i], t, p.span)
            elif want_fn is not None:
                t = want_fn.params[i]
            elif arity_wrong:
                t = T.ERROR
            else:
                self.report(M.cannot_infer_parameter(name=p.name), p.span)
                t = T.ERROR
            inner.names[p.name] = self.bind_param(p, t)
            params.append(t)
        ret: T.Type = tscope.resolve(e.ret) if e.ret is not None else (want_fn.ret if want_fn else self.s.fresh())
        outer_ctx = self.ctx
        self.ctx = FnCtx(outer_ctx.owner, ret, None, outer_ctx.allow_tools,
                         obligations=outer_ctx.obligations, generic_tool_calls=outer_ctx.generic_tool_calls)
        self.expr(e.body, ret, inner, tail=True)
        inferred = self.ctx.inferred
        self.ctx = outer_ctx
        declared = tscope.effect(e.effect, e.span) if e.effect else None
        effect = declared if declared is not None else inferred
        if declared is not None and not T.effect_leq(inferred, declared):
            self.report(M.missing_tool_mark_lambda(), e.span)
        fn_t = T.TFun(tuple(params), ret, effect)
        self.later(self.facts.lambdas, e, effect)
        if arity_wrong:
            return T.ERROR
        if want_fn is not None and not T.effect_leq(self.s.effect(effect), self.s.effect(want_fn.effect)) \
                and not isinstance(want_fn.effect, T.EffVar):
            self.report(M.tool_in_pure_context_lambda(), e.span)
            return want_fn
        return self.expect(fn_t, expected, e.span)

    # -- control

    def e_If(self, e: S.If, expected, scope, tail) -> T.Type:
        self.expr(e.cond, T.BOOL, scope)
        if e.else_ is None:
            self.expr(e.then, T.UNIT, scope, tail)
            return self.expect(T.UNIT, expected, e.span)
        branches = [e.then, e.else_]
        return self.join(branches, expected, scope, tail, e.span)

    def join(self, bodies: list[S.Expr], expected, scope, tail: bool, span: S.Span,
             scopes: list[_Scope] | None = None) -> T.Type:
        if expected is not None:
            for i, body in enumerate(bodies):
                self.expr(body, expected, scopes[i] if scopes else scope, tail)
            return expected
        result: T.Type | None = None
        for i, body in enumerate(bodies):
            t = self.expr(body, result, scopes[i] if scopes else scope, tail)
            if result is None and self.s.resolve(t) != T.NEVER:
                result = t
        return result if result is not None else T.NEVER

    def e_Match(self, e: S.Match, expected, scope: _Scope, tail) -> T.Type:
        scrutinee = self.expr(e.scrutinee, None, scope)
        arms: X.Arms | None = None
        too_complex = False  # reported once, and then nothing more is asked of this match
        arm_scopes: list[_Scope] = []
        # A pattern that was already reported says nothing about coverage: when one is present,
        # neither missing cases nor unreachable arms are reported for this match.
        reported_before = len(self.env.diagnostics)
        # A scrutinee that is (or holds) an already reported error has no type to cover: neither
        # unreachable arms nor missing cases are reported for it.
        scrutinee_known = not _holds_error(self.s.apply(scrutinee))
        for arm in e.arms:
            inner = _Scope(scope)
            bindings: dict[str, Local] = {}
            pat = self.pattern(arm.pattern, scrutinee, bindings)
            inner.names.update(bindings)
            if arm.guard is not None:
                self.expr(arm.guard, T.BOOL, inner)
            patterns_ok = self._patterns_ok(reported_before)
            if arms is None:
                arms = X.Arms(self.signature)
            reachable = True
            if scrutinee_known and patterns_ok and not too_complex:
                try:
                    reachable = arms.useful(pat, self.s.apply(scrutinee))
                except X.TooComplex:
                    too_complex = True
                    self._too_complex(e)
            if not reachable:
                self.warn(M.match_unreachable_arm(), arm.pattern.span)
            if arm.guard is None:
                arms.add(pat)
            arm_scopes.append(inner)
        result = self.join([a.body for a in e.arms], expected, scope, tail, e.span, arm_scopes)
        scrut_t = self.s.apply(scrutinee)
        patterns_ok = self._patterns_ok(reported_before)
        if scrutinee_known and not _holds_error(scrut_t) and patterns_ok:
            try:
                gaps = [] if too_complex else X.missing(arms.rows if arms is not None else [], [scrut_t],
                                                         self.signature)
            except X.TooComplex:
                gaps = []
                self._too_complex(e)
            if gaps:
                shown = [X.show(g[0]) for g in gaps]
                more = " and more" if len(gaps) >= X.MAX_WITNESSES else ""
                self.report(M.match_not_exhaustive(shown=shown, more=more), _head_span(e))
        if not e.arms:
            return self.expect(T.NEVER, expected, e.span)
        return result

    def _patterns_ok(self, reported_before: int) -> bool:
        """Whether no pattern problem was reported since `reported_before` diagnostics."""
        diagnostics = self.env.diagnostics
        if len(diagnostics) == reported_before:
            return True
        return not any(d.code.startswith("pattern-") or d.code in ("ctor-undefined", "arity-mismatch",
                                                                  "field-undefined", "field-missing")
                       for d in diagnostics[reported_before:])

    def e_Return(self, e: S.Return, expected, scope, tail) -> T.Type:
        self.expr(e.value, self.ctx.ret, scope, tail=True)
        return T.NEVER

    def e_Block(self, e: S.Block, expected, scope: _Scope, tail) -> T.Type:
        inner = _Scope(scope)
        result: T.Type = T.UNIT
        last = len(e.stmts) - 1
        for i, stmt in enumerate(e.stmts):
            is_last = i == last
            if isinstance(stmt, S.ExprStmt):
                if is_last:
                    result = self.expr(stmt.expr, expected, inner, tail)
                    self._unused(inner)
                    return result
                self.expr(stmt.expr, None, inner)
            elif isinstance(stmt, S.Let):
                self.s_let(stmt, inner)
            elif isinstance(stmt, S.Guard):
                self.expr(stmt.cond, T.BOOL, inner)
                t = self.expr(stmt.else_, None, inner)
                if self.s.resolve(t) != T.NEVER:
                    self.report(M.guard_must_leave(), stmt.else_.span)
            elif isinstance(stmt, S.FnDecl):
                self.s_local_fn(stmt, inner)
        self._unused(inner)
        return self.expect(T.UNIT, expected, e.span)

    def _too_complex(self, e: S.Match) -> None:
        self.report(M.match_too_complex_match(), _head_span(e))

    def _unused(self, scope: _Scope) -> None:
        for name, local in scope.names.items():
            if local.kind == "let" and not local.used and not name.startswith("_"):
                self.warn(M.unused_variable(name=name), local.span)

    def s_let(self, stmt: S.Let, scope: _Scope) -> None:
        declared = None
        if stmt.type is not None:
            declared = TypeScope(self.env, self.menv, self.type_params, dict(self.effect_params),
                                 self.current_fn).resolve(stmt.type)
        t = self.expr(stmt.value, declared, scope)
        bindings: dict[str, Local] = {}
        pat = self.pattern(stmt.pattern, declared or t, bindings, kind="let")
        for name in bindings:
            old = scope.names.get(name)
            if old is not None and old.kind == "let" and not old.used and not name.startswith("_"):
                self.warn(M.unused_variable_shadowed(name=name), old.span)
                old.used = True
        # A pattern that binds or ignores the whole value misses nothing: no need to ask.
        try:
            gaps = [] if pat is X.WILD else X.missing([[pat]], [self.s.apply(declared or t)], self.signature)
        except X.TooComplex:
            gaps = []
            self.report(M.match_too_complex_pattern(), stmt.pattern.span)
        if gaps and not isinstance(self.s.apply(t), T.TError):
            self.report(M.let_refutable(missing=X.show(gaps[0][0])), stmt.pattern.span)
        scope.names.update(bindings)

    def s_local_fn(self, decl: S.FnDecl, scope: _Scope) -> None:
        owner = f"{self.current_fn}/{decl.name}"
        self.env.local_params[owner] = decl.type_params
        sig = signature(self.env, self.menv, decl, owner, self.type_params, self.effect_params)
        local = LocalFn(decl, owner, sig)
        scope.names[decl.name] = Local(sig, decl.name_span, "fn", used=True, fn=local)
        self.facts.bindings[id(decl)] = scope.names[decl.name]
        self.facts.shown[id(decl)] = sig
        saved = (self.ctx, self.type_params, self.effect_params, self.current_fn)
        self.type_params = dict(self.type_params)
        self.type_params.update({p.name: T.TParam(p.name, owner) for p in decl.type_params})
        self.effect_params = {**self.effect_params, **_effect_params(sig)}
        self.current_fn = owner
        self.ctx = FnCtx(owner, sig.ret, sig.effect, saved[0].allow_tools,
                         obligations=saved[0].obligations, generic_tool_calls=saved[0].generic_tool_calls)
        inner = _Scope(scope)
        for p, t in zip(decl.params, sig.params):
            inner.names[p.name] = self.bind_param(p, t)
        assert decl.body is not None
        self.expr(decl.body, sig.ret, inner, tail=True)
        if sig.effect == T.TOOL and not self.ctx.used_tool and not self.ctx.allow_tools:
            self.report(M.unneeded_tool_mark(name=decl.name), decl.name_span)
        uses_tool = self.ctx.used_tool
        self.ctx, self.type_params, self.effect_params, self.current_fn = saved
        if uses_tool and sig.effect == T.TOOL:
            pass  # calling it is what uses the effect

    # ---- patterns

    def pattern(self, p: S.Pattern, t: T.Type, bindings: dict[str, Local], kind: str = "match") -> X.Pat:
        return _PATTERN_RULES[p.__class__](self, p, t, bindings, kind)

    def _bind_quietly(self, p: S.PCtor, bindings: dict[str, Local], kind: str) -> None:
        """Bind the names of a pattern already reported, so its arm reports nothing more."""
        for sub in p.args:
            self.pattern(sub, T.ERROR, bindings, kind)
        for f in p.fields:
            if f.pattern is not None:
                self.pattern(f.pattern, T.ERROR, bindings, kind)
            else:
                bindings[f.name] = Local(T.ERROR, f.span, "param", used=True)

    def _failed_import(self, name: str) -> bool:
        return any(i.alias == name for i in self.menv.loaded.imports) and name not in self.menv.imports

    def p_PWild(self, p, t, bindings, kind) -> X.Pat:
        return X.WILD

    def p_PBind(self, p: S.PBind, t, bindings, kind) -> X.Pat:
        if p.name in bindings:
            self.report(M.definition_duplicate_in_pattern(name=p.name), p.span)
        bindings[p.name] = Local(t, p.span, "let" if kind == "let" else "param", used=kind != "let")
        self.facts.bindings[id(p)] = bindings[p.name]
        self.later(self.facts.shown, p, t)
        return X.WILD

    def p_PLit(self, p: S.PLit, t, bindings, kind) -> X.Pat:
        lit = p.lit
        lt = _LITERAL_TYPES[lit.kind]
        try:
            T.unify(self.s, lt, t)
        except T.Mismatch:
            self.report(M.pattern_mismatch_literal(kind=lit.kind, type=self.show(t)), p.span)
            return X.WILD
        if lit.kind == "bool":
            return X.Con(lit.value, ())
        if lit.kind == "unit":
            return X.Con("()", ())
        if lit.kind == "text":
            return X.Con(_quote(lit.value), ())
        if lit.kind == "decimal":
            from decimal import Decimal
            value = Decimal(lit.value)
            return X.Con(str(abs(value).normalize()) if value == 0 else str(value.normalize()), ())
        return X.Con(str(int(lit.value)) if lit.kind == "int" else lit.value + "ns", ())

    def p_PTuple(self, p: S.PTuple, t, bindings, kind) -> X.Pat:
        want = self.s.resolve(t)
        if isinstance(want, T.TVar):
            want = T.TTuple(tuple(self.s.fresh() for _ in p.items))
            T.unify(self.s, want, t)
        if not isinstance(want, T.TTuple) or len(want.items) != len(p.items):
            if not isinstance(want, T.TError):
                self.report(M.pattern_mismatch_tuple(n_items=len(p.items), type=self.show(t)), p.span)
            for item in p.items:
                self.pattern(item, T.ERROR, bindings, kind)
            return X.WILD
        args = tuple(self.pattern(item, it, bindings, kind) for item, it in zip(p.items, want.items))
        return X.Con("tuple", args, "tuple")

    def p_PList(self, p: S.PList, t, bindings, kind) -> X.Pat:
        want = self.s.resolve(t)
        if isinstance(want, T.TVar):
            want = T.list_of(self.s.fresh())
            T.unify(self.s, want, t)
        if not (isinstance(want, T.TCon) and want.name == "List"):
            if not isinstance(want, T.TError):
                self.report(M.pattern_mismatch_list(type=self.show(t)), p.span)
            for item in p.items:
                self.pattern(item, T.ERROR, bindings, kind)
            return X.WILD
        elem = want.args[0]
        items = [self.pattern(item, elem, bindings, kind) for item in p.items]
        if p.rest is not None:
            if p.rest:
                bindings[p.rest] = Local(want, p.span, "let" if kind == "let" else "param", used=kind != "let")
                self.facts.bindings[id(p)] = bindings[p.rest]
            tail: X.Pat = X.WILD
        else:
            tail = X.Con("[]", (), "list")
        for item in reversed(items):
            tail = X.Con("::", (item, tail), "list")
        return tail

    def p_POr(self, p: S.POr, t, bindings, kind) -> X.Pat:
        alts: list[X.Pat] = []
        first: dict[str, Local] | None = None
        for alt in p.alternatives:
            own: dict[str, Local] = {}
            alts.append(self.pattern(alt, t, own, kind))
            if first is None:
                first = own
                continue
            if set(own) != set(first):
                self.report(M.pattern_bindings_differ(first=first, own=own), alt.span)
                continue
            for name in own:
                try:
                    T.unify(self.s, own[name].type, first[name].type)
                except T.Mismatch:
                    self.report(M.pattern_bindings_differ_types(name=name), own[name].span)
        for name, local in (first or {}).items():
            if name in bindings:
                self.report(M.definition_duplicate_in_pattern(name=name), local.span)
            bindings[name] = local
        return X.Or(tuple(alts))

    def p_PCtor(self, p: S.PCtor, t, bindings, kind) -> X.Pat:
        want = self.s.resolve(t)
        # A record pattern: `Point { x, .. }`
        record = None
        if p.form == "named":
            if p.qualifier is None:
                record = self.menv.types.get(p.name)
            else:
                target = self._module(p.qualifier, p.span)
                record = target.types.get(p.name) if target else None
            if record is not None and record.kind != "record":
                record = None
        if record is not None:
            instance = self._fresh_instance(record)
            try:
                T.unify(self.s, instance, t)
            except T.Mismatch:
                self.report(M.pattern_mismatch_shape(name=p.name, type=self.show(t)), p.span)
                return X.WILD
            mapping = {q.name: a for q, a in zip(record.params, instance.args)}
            self.facts.ctors[id(p)] = (record, None)
            args = self._named_fields(p, record.fields, mapping, bindings, kind, record)
            return X.Con(record.name, args, "named", tuple(f.name for f in record.fields))
        if isinstance(want, T.TError):
            ctor, instance = None, None
        else:
            ctor, instance = self.find_ctor(p.name, p.qualifier, want, p.span)
        if ctor is None:
            self._bind_quietly(p, bindings, kind)
            return X.WILD
        try:
            T.unify(self.s, instance, t)
        except T.Mismatch:
            self.report(M.pattern_mismatch_ctor_of_other_type(name=p.name,
                                                              owner=T.display_name(ctor.type_identity), type=self.show(t)), p.span)
            self._bind_quietly(p, bindings, kind)
            return X.WILD
        payload = self.payload_types(ctor, instance)
        enum_info = self.env.types[ctor.type_identity]
        self.facts.ctors[id(p)] = (enum_info, ctor)
        if ctor.form == "bare":
            if p.form != "bare":
                self.report(M.pattern_mismatch_no_payload(name=p.name), p.span)
            return X.Con(ctor.name, ())
        if ctor.form == "positional":
            if p.form == "bare":
                self.report(M.pattern_mismatch_payload_omitted(name=p.name, n_payload=len(payload),
                                                               payload=payload), p.span)
                return X.WILD
            if p.form == "named":
                self.report(M.pattern_mismatch_carries_positional(name=p.name), p.span)
                return X.WILD
            if len(p.args) != len(payload):
                self.report(M.arity_mismatch_pattern_payload(name=p.name, n_payload=len(payload),
                                                             n_args=len(p.args)), p.span)
                for sub, pt in zip(p.args, list(payload) + [T.ERROR] * len(p.args)):
                    self.pattern(sub, pt, bindings, kind)
                return X.WILD
            args = tuple(self.pattern(sub, pt, bindings, kind) for sub, pt in zip(p.args, payload))
            return X.Con(ctor.name, args, "positional")
        # named payload
        if p.form != "named":
            if p.form == "bare":
                self.report(M.pattern_mismatch_named_fields(name=p.name), p.span)
            else:
                self.report(M.pattern_mismatch_named_by_position(name=p.name), p.span)
            return X.WILD
        mapping = {q.name: a for q, a in zip(enum_info.params, instance.args)}
        args = self._named_fields(p, ctor.fields, mapping, bindings, kind, None)
        return X.Con(ctor.name, args, "named", tuple(f.name for f in ctor.fields))

    def _named_fields(self, p: S.PCtor, fields, mapping, bindings, kind, record: TypeInfo | None) -> tuple[X.Pat, ...]:
        by_name: dict[str, X.Pat] = {}
        for f in p.fields:
            decl = field_named(tuple(fields), f.name)
            if decl is None:
                guess = did_you_mean(f.name, [x.name for x in fields])
                self.report(M.field_undefined_pattern(record=p.name, field=f.name, guess=guess), f.span)
                continue
            if f.name in by_name:
                self.report(M.field_duplicate_pattern(name=f.name), f.span)
            if record is not None and not decl.pub and record.module != self.menv.identity:
                self.report(M.field_private(field=f.name, record=record.name), f.span)
            ft = T.substitute(decl.type, mapping)
            if f.pattern is None:
                shorthand = S.PBind(f.name, f.span)
                by_name[f.name] = self.p_PBind(shorthand, ft, bindings, kind)
                self.facts.bindings[id(f)] = self.facts.bindings.pop(id(shorthand))
                self.later(self.facts.shown, f, ft)
            else:
                by_name[f.name] = self.pattern(f.pattern, ft, bindings, kind)
        absent = [x.name for x in fields if x.name not in by_name]
        if absent and not p.rest:
            self.report(M.field_missing_pattern(absent=absent), p.span)
        return tuple(by_name.get(x.name, X.WILD) for x in fields)

    def signature(self, t: Any) -> list[X.Ctor] | None:
        """The constructors of a type, for exhaustiveness (asked again and again for the same types)."""
        if t is None:
            return None
        t = self.s.resolve(t)
        # The answer depends only on the type and the declarations, never on the substitution.
        known = self.signatures.get(t, _NOT_ASKED)
        if known is _NOT_ASKED:
            known = self.signatures[t] = self._signature(t)
        return known

    def _signature(self, t: T.Type) -> list[X.Ctor] | None:
        if isinstance(t, T.TTuple):
            return [("tuple", t.items, "tuple", ())]
        if not isinstance(t, T.TCon):
            return None
        if t.name == "Bool":
            return [("true", (), "plain", ()), ("false", (), "plain", ())]
        if t.name == "Unit":
            return [("()", (), "plain", ())]
        if t.name == "Never":
            return []
        if t.name == "List":
            return [("[]", (), "list", ()), ("::", (t.args[0], t), "list", ())]
        info = self.env.types.get(t.name)
        if info is None or info.kind == "host":
            return None
        mapping = {p.name: a for p, a in zip(info.params, t.args)}
        if info.kind == "record":
            return [(info.name, tuple(T.substitute(f.type, mapping) for f in info.fields), "named",
                     tuple(f.name for f in info.fields))]
        out: list[X.Ctor] = []
        for c in info.ctors:
            types = tuple(T.substitute(x, mapping) for x in c.payload_types())
            shape = _CTOR_SHAPES[c.form]
            out.append((c.name, types, shape, tuple(f.name for f in c.fields)))
        return out


def _effect_params(sig: T.TFun) -> dict[str, T.Effect]:
    return {e.name: e for e in _collect_effects(sig) if isinstance(e, T.EffParam)}


def effect_param_names(t: T.Type) -> list[str]:
    return sorted({e.name for e in _collect_effects(t) if isinstance(e, T.EffParam)})


def _collect_effects(t: T.Type, out: list[T.Effect] | None = None) -> list[T.Effect]:
    """The effects written in a type, outermost first, in the order they appear."""
    if out is None:
        out = []
    cls = t.__class__
    if cls is T.TFun:
        out.append(t.effect)
        for p in t.params:
            _collect_effects(p, out)
        _collect_effects(t.ret, out)
    elif cls is T.TCon:
        for a in t.args:
            _collect_effects(a, out)
    elif cls is T.TTuple:
        for a in t.items:
            _collect_effects(a, out)
    return out


def _has_unknown(t: T.Type) -> bool:
    if isinstance(t, T.TVar):
        return True
    if isinstance(t, T.TCon):
        return any(_has_unknown(a) for a in t.args)
    if isinstance(t, T.TTuple):
        return any(_has_unknown(a) for a in t.items)
    if isinstance(t, T.TFun):
        return any(_has_unknown(p) for p in t.params) or _has_unknown(t.ret)
    return False


def _holds_error(t: T.Type) -> bool:
    """Whether `t` is, or has inside it, the type of something already reported."""
    cls = t.__class__
    if cls is T.TError:
        return True
    if cls is T.TCon:
        return any(_holds_error(a) for a in t.args)
    if cls is T.TTuple:
        return any(_holds_error(i) for i in t.items)
    if cls is T.TFun:
        return any(_holds_error(p) for p in t.params) or _holds_error(t.ret)
    return False


def _place(location: Location) -> str:
    return f"{location.file}:{location.line}:{location.column}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _head_span(e: S.Match) -> S.Span:
    """The `match` keyword and scrutinee: where a missing case is reported."""
    s = e.scrutinee.span
    return S.Span(e.span.line, e.span.column, s.end_line, s.end_column)


def _decimal_in_range(text: str) -> bool:
    from decimal import Decimal

    exponent = Decimal(text).normalize().as_tuple().exponent
    return isinstance(exponent, int) and -(2 ** 63) <= exponent < 2 ** 63


#: The rule for each kind of expression and pattern node: `e_<Node>` and `p_<Node>` methods.
_EXPR_RULES = {getattr(S, name[2:]): rule for name, rule in vars(_ModuleChecker).items() if name.startswith("e_")}
_PATTERN_RULES = {getattr(S, name[2:]): rule for name, rule in vars(_ModuleChecker).items()
                  if name.startswith("p_")}
