"""Resolve declarations: every module's types, constructors and function signatures, as data.

`resolve(program)` builds one `Env` for the whole program: per module, its imports by alias, its
declared types (`TypeInfo`) and functions (`FnInfo`) with signatures resolved to `types.Type`.
Declaration-level rules are enforced here: duplicates, attributes and where they may appear,
bodies, Tool signatures being data, `@test` and `@fake` signatures. Function bodies are checked
in `check.py` against this environment.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from flowc import syntax as S
from flowc import types as T
from flowc.diagnostics import M, Diagnostic, Location
from flowc.diagnostics.suggest import did_you_mean
from flowc.program import PRELUDE, LoadedModule, Program
from flowc.records import record
from flowc.typeinfo import is_data, satisfies

if TYPE_CHECKING:
    from flowc.diagnostics.messages import Message

#: The owner of an effect variable already reported as unbound: nothing else is said about it.
UNBOUND_EFFECT = "<unbound>"
KNOWN_ATTRIBUTES = {"tool", "test", "fake", "intrinsic"}
REQUIREMENTS = ("Eq", "Ord", "Data")


@record
class FieldInfo:
    name: str
    type: T.Type
    pub: bool
    doc: str | None
    span: S.Span


@record
class CtorInfo:
    name: str
    type_identity: str
    index: int
    form: str  # bare | positional | named
    args: tuple[T.Type, ...]
    fields: tuple[FieldInfo, ...]
    span: S.Span

    def payload_types(self) -> tuple[T.Type, ...]:
        return self.args if self.form == "positional" else tuple(f.type for f in self.fields)


@record(frozen=False)
class TypeInfo:
    identity: str
    name: str
    module: str
    params: tuple[S.TypeParam, ...]
    kind: str  # record | enum | host | builtin
    pub: bool
    decl: S.TypeDecl | None
    fields: tuple[FieldInfo, ...] = ()
    ctors: tuple[CtorInfo, ...] = ()

    def ctor(self, name: str) -> CtorInfo | None:
        return by_name(self.ctors, name)

    def field(self, name: str) -> FieldInfo | None:
        return by_name(self.fields, name)


#: id(tuple of fields or constructors) -> (the tuple, name -> the first of that name), for a type
#: of many: a match of all 20,000 constructors of an enum looks each up once, and a scan for each
#: would be their square. The tuple is held so that its id is not reused.
_NAMED: dict[int, tuple[tuple, dict]] = {}


def by_name(items: tuple, name: str):
    """The first of `items` (fields or constructors) named `name`, or None."""
    if len(items) <= 8:
        for item in items:
            if item.name == name:
                return item
        return None
    found = _named(items).get(name)
    return found[1] if found is not None else None


def index_by_name(items: tuple, name: str) -> int:
    """The position of the first of `items` named `name` (there is one)."""
    if len(items) <= 8:
        return next(i for i, item in enumerate(items) if item.name == name)
    return _named(items)[name][0]


def _named(items: tuple) -> dict:
    known = _NAMED.get(id(items))
    if known is None or known[0] is not items:
        index: dict = {}
        for position, item in enumerate(items):
            index.setdefault(item.name, (position, item))
        if len(_NAMED) > 1024:
            _NAMED.clear()
        known = _NAMED[id(items)] = (items, index)
    return known[1]


@record(frozen=False)
class FnInfo:
    identity: str
    name: str
    module: str
    decl: S.FnDecl
    type_params: tuple[S.TypeParam, ...]
    sig: T.TFun
    pub: bool
    tool: bool = False
    intrinsic: bool = False
    test: bool = False
    fake_target: "FnInfo | None" = None

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.decl.params)

    def call_type(self) -> T.TFun:
        """The type callers see. A Tool declared `-> Result<T, E>` answers `Result<T, ToolProblem<E>>`."""
        if self.tool:
            return T.TFun(self.sig.params, tool_reply_type(self.sig.ret), T.TOOL)
        if self.test or self.decl.attr("fake") is not None:
            # Tests and fakes may call Tools without the mark: calling one is Tool-capable.
            return T.TFun(self.sig.params, self.sig.ret, T.TOOL)
        return self.sig


def tool_reply_type(declared: T.Type) -> T.Type:
    if isinstance(declared, T.TCon) and declared.name == T.RESULT:
        ok, err = declared.args
        return T.result_of(ok, T.tool_problem_of(err))
    return declared


@record(frozen=False)
class ModuleEnv:
    identity: str
    file: str
    loaded: LoadedModule
    imports: dict[str, str] = field(default_factory=dict)  # alias -> identity
    types: dict[str, TypeInfo] = field(default_factory=dict)
    fns: dict[str, FnInfo] = field(default_factory=dict)
    broken: bool = False  # has syntax errors: its members are unknown, not missing

    @property
    def is_std(self) -> bool:
        return self.identity.startswith("std@")


@record(frozen=False)
class Env:
    program: Program
    modules: dict[str, ModuleEnv]
    types: dict[str, TypeInfo]  # by identity
    fns: dict[str, FnInfo]  # by identity
    diagnostics: list[Diagnostic]
    #: Type parameters of local functions, by owner name (the checker registers them).
    local_params: dict[str, tuple[S.TypeParam, ...]] = field(default_factory=dict)

    def prelude(self) -> ModuleEnv:
        return self.modules[PRELUDE]


def resolve(program: Program) -> Env:
    env = Env(program, {}, {}, {}, [])
    for loaded in program.modules:
        menv = ModuleEnv(loaded.identity, loaded.file, loaded)
        menv.broken = not loaded.parsed.ok
        menv.imports = {i.alias: i.identity for i in loaded.imports if any(
            m.identity == i.identity for m in program.modules)}
        env.modules[loaded.identity] = menv
    for menv in env.modules.values():
        _declare(env, menv)
    for menv in env.modules.values():
        _define_types(env, menv)
    for menv in env.modules.values():
        _define_functions(env, menv)
    for menv in env.modules.values():
        for fn in menv.fns.values():
            _check_attributes(env, menv, fn)
    return env


# ---- locations and messages --------------------------------------------------------------------


def loc(menv: ModuleEnv, span: S.Span) -> Location:
    return Location(menv.file, span.line, span.column, span.end_line, span.end_column)


def _report(env: Env, message: Message, menv: ModuleEnv, span: S.Span) -> None:
    env.diagnostics.append(message.at(loc(menv, span)))


# ---- declaring names ---------------------------------------------------------------------------


def _declare(env: Env, menv: ModuleEnv) -> None:
    seen: dict[str, S.Span] = {}
    for item in menv.loaded.parsed.module.items:
        if isinstance(item, S.Use):
            continue
        name = item.name
        if name in seen:
            _report(env, M.definition_duplicate_in_module(name=name, first_line=seen[name].line), menv,
                                                          item.name_span)
            continue
        seen[name] = item.name_span
        if name in menv.imports:
            _report(env, M.definition_duplicate_module_name(name=name), menv, item.name_span)
        identity = f"{menv.identity}.{name}"
        if isinstance(item, S.TypeDecl):
            if name in T.SCALARS or name in T.BUILTIN_GENERICS:
                _report(env, M.definition_duplicate_builtin_type(name=name), menv, item.name_span)
                continue
            info = TypeInfo(identity, name, menv.identity, item.params, item.kind, item.pub, item)
            menv.types[name] = info
            env.types[identity] = info


# ---- resolving type expressions ----------------------------------------------------------------


class TypeScope:
    """What a type expression can name: built-ins, the module's and imported modules' types, and
    the type parameters in scope."""

    def __init__(self, env: Env, menv: ModuleEnv, params: dict[str, T.Type] | None = None,
                 effects: dict[str, T.Effect] | None = None, owner: str = "") -> None:
        self.env = env
        self.menv = menv
        self.params = params or {}
        self.effects = effects if effects is not None else {}
        self.owner = owner
        self.allow_new_effects = False

    def resolve(self, texpr: S.TypeExpr) -> T.Type:
        env, menv = self.env, self.menv
        cls = texpr.__class__
        if cls is S.TTuple:
            if not texpr.items:
                return T.UNIT
            return T.TTuple(tuple([self.resolve(i) for i in texpr.items]))
        if cls is S.TFn:
            params = tuple([self.resolve(p) for p in texpr.params])
            ret = self.resolve(texpr.ret)
            return T.TFun(params, ret, self.effect(texpr.effect, texpr.span))
        assert cls is S.TNamed
        args = tuple([self.resolve(a) for a in texpr.args]) if texpr.args else ()
        if texpr.qualifier is None:
            if texpr.name in self.params:
                self._arity(texpr, 0, len(args))
                return self.params[texpr.name]
            scalar = T.SCALAR_TYPES.get(texpr.name)
            if scalar is not None:
                self._arity(texpr, 0, len(args))
                return scalar
            if texpr.name in T.BUILTIN_GENERICS:
                if not self._arity(texpr, T.BUILTIN_GENERICS[texpr.name], len(args)):
                    return T.ERROR
                return T.TCon(texpr.name, args)
            info = menv.types.get(texpr.name) or env.prelude().types.get(texpr.name)
            if info is None and texpr.name in menv.loaded.parsed.lost:
                return T.ERROR
            if info is None:
                candidates = list(self.params) + list(T.SCALARS) + list(T.BUILTIN_GENERICS) + \
                    list(menv.types) + list(env.prelude().types)
                guess = did_you_mean(texpr.name, candidates)
                _report(env, M.type_undefined(name=texpr.name, guess=guess), menv, texpr.span)
                return T.ERROR
        else:
            target = self.module_for(texpr.qualifier, texpr.span)
            if target is None:
                return T.ERROR
            info = target.types.get(texpr.name)
            if info is None:
                if target.broken:
                    return T.ERROR
                guess = did_you_mean(texpr.name, [n for n, t in target.types.items() if t.pub])
                _report(env, M.type_undefined_module(qualifier=texpr.qualifier, name=texpr.name, guess=guess),
                                                     menv, texpr.span)
                return T.ERROR
            if not info.pub and target.identity != menv.identity:
                _report(env, M.name_private_type_with_help(qualifier=texpr.qualifier, name=texpr.name), menv,
                                                           texpr.span)
        if not self._arity(texpr, len(info.params), len(args)):
            return T.ERROR
        self._requirements(info, args, texpr.span)
        return T.TCon(info.identity, args)

    def _requirements(self, info: "TypeInfo", args: tuple[T.Type, ...], span: S.Span) -> None:
        for param, arg in zip(info.params, args):
            for bound in param.bounds:
                if isinstance(arg, T.TParam):
                    continue  # checked where the parameter is given a type
                if bound in ("Eq", "Ord", "Data") and not satisfies(self.env, arg, bound):
                    _report(self.env, M.requirement_unmet_type_argument(arg_type=T.show(arg), bound=bound,
                                                                        info_name=info.name, param_name=param.name), self.menv, span)

    def module_for(self, alias: str, span: S.Span) -> ModuleEnv | None:
        identity = self.menv.imports.get(alias)
        if identity is None:
            known = self.menv.loaded.imports
            if any(i.alias == alias for i in known):
                return None  # the module itself failed to load; already reported
            guess = did_you_mean(alias, list(self.menv.imports))
            _report(self.env, M.name_undefined_module(alias=alias, guess=guess), self.menv, span)
            return None
        return self.env.modules.get(identity)

    def effect(self, name: str | None, span: S.Span) -> T.Effect:
        if name is None:
            return T.PURE
        if name == "tool":
            return T.TOOL
        if name in self.effects:
            return self.effects[name]
        if self.allow_new_effects:
            eff = T.EffParam(name, self.owner)
            self.effects[name] = eff
            return eff
        _report(self.env, M.effect_variable_unbound(name=name), self.menv, span)
        eff = T.EffParam(name, UNBOUND_EFFECT)
        self.effects[name] = eff  # reported once; treated as a variable so nothing else cascades
        return eff

    def _arity(self, texpr: S.TNamed, expected: int, found: int) -> bool:
        if expected == found:
            return True
        name = f"{texpr.qualifier}.{texpr.name}" if texpr.qualifier else texpr.name
        _report(self.env, M.type_arity_mismatch(name=name, expected=expected, found=found), self.menv, texpr.span)
        return False


def type_params_scope(env: Env, menv: ModuleEnv, params: tuple[S.TypeParam, ...], owner: str,
                      outer: dict[str, T.Type] | None = None) -> dict[str, T.Type]:
    scope = dict(outer or {})
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            _report(env, M.definition_duplicate_type_parameter(name=p.name), menv, p.span)
        seen.add(p.name)
        for bound in p.bounds:
            if bound not in REQUIREMENTS:
                _report(env, M.type_undefined_requirement(bound=bound), menv, p.span)
        scope[p.name] = T.TParam(p.name, owner)
    return scope


# ---- types -------------------------------------------------------------------------------------


def _define_types(env: Env, menv: ModuleEnv) -> None:
    for info in menv.types.values():
        decl = info.decl
        assert decl is not None
        scope = TypeScope(env, menv, type_params_scope(env, menv, decl.params, info.identity), owner=info.identity)
        for attr in decl.attrs:
            if attr.name != "tool":
                marks = M.attribute_misplaced_on_type if attr.name in KNOWN_ATTRIBUTES else M.attribute_unknown_on_type
                _report(env, marks(name=attr.name), menv, attr.span)
        is_host = any(a.name == "tool" for a in decl.attrs)
        if is_host:
            info.kind = "host"
            if decl.kind != "host":
                _report(env, M.body_unexpected_tool_type(), menv, decl.span)
            if decl.params:
                _report(env, M.body_unexpected_tool_type_parameters(), menv, decl.span)
            continue
        if decl.kind == "host":
            _report(env, M.body_missing_type(name=decl.name), menv, decl.name_span)
            info.kind = "record"
            continue
        if decl.kind == "record":
            info.fields = _fields(env, menv, scope, decl.fields)
        else:
            ctors: list[CtorInfo] = []
            seen: set[str] = set()
            for index, c in enumerate(decl.ctors):
                if c.name in seen:
                    _report(env, M.definition_duplicate_constructor(name=c.name), menv, c.span)
                    continue
                seen.add(c.name)
                args = tuple(scope.resolve(a) for a in c.args)
                fields = _fields(env, menv, scope, c.fields)
                ctors.append(CtorInfo(c.name, info.identity, index, c.form, args, fields, c.span))
            info.ctors = tuple(ctors)


def _fields(env: Env, menv: ModuleEnv, scope: TypeScope, decls: tuple[S.FieldDecl, ...]) -> tuple[FieldInfo, ...]:
    out: list[FieldInfo] = []
    seen: set[str] = set()
    for f in decls:
        if f.name in seen:
            _report(env, M.field_duplicate_declaration(name=f.name), menv, f.span)
            continue
        seen.add(f.name)
        out.append(FieldInfo(f.name, scope.resolve(f.type), f.pub, f.doc, f.span))
    return tuple(out)


# ---- functions ---------------------------------------------------------------------------------


def _define_functions(env: Env, menv: ModuleEnv) -> None:
    for item in menv.loaded.parsed.module.items:
        if not isinstance(item, S.FnDecl) or item.name in menv.fns:
            continue
        if menv.types.get(item.name) is not None:
            continue
        identity = f"{menv.identity}.{item.name}"
        sig = signature(env, menv, item, identity)
        info = FnInfo(identity, item.name, menv.identity, item, item.type_params, sig, item.pub)
        info.tool = item.attr("tool") is not None
        info.intrinsic = item.attr("intrinsic") is not None
        info.test = item.attr("test") is not None
        menv.fns[item.name] = info
        env.fns[identity] = info


def signature(env: Env, menv: ModuleEnv, decl: S.FnDecl, owner: str,
              outer: dict[str, T.Type] | None = None, outer_effects: dict[str, T.Effect] | None = None) -> T.TFun:
    params = type_params_scope(env, menv, decl.type_params, owner, outer)
    scope = TypeScope(env, menv, params, dict(outer_effects or {}), owner)
    scope.allow_new_effects = True
    param_types = tuple(_param_type(env, menv, scope, p) for p in decl.params)
    scope.allow_new_effects = False
    ret = scope.resolve(decl.ret)
    effect = scope.effect(decl.effect, decl.span)
    seen: set[str] = set()
    for p in decl.params:
        if p.name in seen:
            _report(env, M.definition_duplicate_parameter(name=p.name), menv, p.span)
        seen.add(p.name)
    return T.TFun(param_types, ret, effect)


def _param_type(env: Env, menv: ModuleEnv, scope: TypeScope, p: S.Param) -> T.Type:
    if p.type is None:  # only lambdas omit parameter types; the grammar requires them here
        return T.ERROR
    return scope.resolve(p.type)


def _check_attributes(env: Env, menv: ModuleEnv, fn: FnInfo) -> None:
    decl = fn.decl
    seen: set[str] = set()
    for attr in decl.attrs:
        if attr.name not in KNOWN_ATTRIBUTES:
            guess = did_you_mean(attr.name, sorted(KNOWN_ATTRIBUTES))
            _report(env, M.attribute_unknown(name=attr.name, guess=guess), menv, attr.span)
        if attr.name in seen:
            _report(env, M.attribute_misplaced_repeated(name=attr.name), menv, attr.span)
        seen.add(attr.name)
        if attr.name == "fake" and not attr.target:
            _report(env, M.fake_target_invalid_syntax(), menv, attr.span)
        if attr.name != "fake" and attr.target:
            _report(env, M.attribute_misplaced_argument(name=attr.name), menv, attr.span)
    kinds = [a for a in ("tool", "test", "fake", "intrinsic") if a in seen]
    if len(kinds) > 1:
        _report(env, M.attribute_misplaced_exclusive(first=kinds[0], second=kinds[1]), menv, decl.span)
        return
    if fn.tool or fn.intrinsic:
        if decl.body is not None:
            _report(env, M.body_unexpected(tool=fn.tool), menv, decl.body.span if hasattr(decl.body,
                                           "span") else decl.span)
        if decl.effect is not None and fn.tool:
            _report(env, M.unneeded_tool_mark_on_tool(), menv, decl.span)
    elif decl.body is None:
        _report(env, M.body_missing_function(name=decl.name), menv, decl.name_span)
    if fn.intrinsic and not menv.is_std:
        _report(env, M.intrinsic_outside_std(), menv, decl.attr("intrinsic").span)
    if fn.tool:
        _check_tool_signature(env, menv, fn)
    if fn.test:
        _check_test_signature(env, menv, fn)
    fake = decl.attr("fake")
    if fake is not None and fake.target:
        _check_fake(env, menv, fn, fake)


def _check_tool_signature(env: Env, menv: ModuleEnv, fn: FnInfo) -> None:
    decl = fn.decl
    data_params = {p.name for p in decl.type_params if "Data" in p.bounds}
    for p in decl.type_params:
        if p.name not in data_params:
            _report(env, M.generic_tool_requirement(name=p.name), menv, p.span)
    for p, t in zip(decl.params, fn.sig.params):
        if not is_data(env, t, assume_params=True):
            _report(env, M.tool_not_data_parameter(name=p.name, type=T.show(t)), menv, p.span)
    if not is_data(env, fn.sig.ret, assume_params=True):
        _report(env, M.tool_not_data_result(result=T.show(fn.sig.ret)), menv, decl.ret.span)


def _check_test_signature(env: Env, menv: ModuleEnv, fn: FnInfo) -> None:
    decl = fn.decl
    expected = T.result_of(T.UNIT, T.TEXT)
    if decl.params or decl.type_params or fn.sig.ret != expected:
        _report(env, M.test_signature(), menv, decl.name_span)


def _check_fake(env: Env, menv: ModuleEnv, fn: FnInfo, attr: S.Attr) -> None:
    target = lookup_path(env, menv, attr.target)
    if target is None or not target.tool:
        if target is not None or not _path_module_broken(env, menv, attr.target):
            _report(env, M.fake_target_invalid(target=".".join(attr.target), exists=target is not None), menv,
                    attr.span)
        return
    fn.fake_target = target
    want_params = target.sig.params
    declared = target.sig.ret
    if target.decl.type_params:
        # A fake for a generic Tool is generic in the same way: its type parameters stand for the
        # Tool's, in order.
        if len(fn.decl.type_params) != len(target.decl.type_params):
            _report(env, M.fake_signature_mismatch_generic(identity=target.identity,
                                                           params=target.decl.type_params), menv, fn.decl.name_span)
            return
        mapping = {p.name: T.TParam(q.name, fn.identity) for p, q in zip(target.decl.type_params,
                                                                         fn.decl.type_params)}
        want_params = tuple(T.substitute(t, mapping) for t in want_params)
        declared = T.substitute(declared, mapping)
    have = fn.sig.params
    if len(have) == len(want_params) + 1 and have and have[0] == T.INT and fn.decl.params[0].name == "call":
        have = have[1:]
    want_ret = tool_reply_type(declared)
    if have != want_params or fn.sig.ret != want_ret:
        shown_params = ", ".join(T.show(p) for p in want_params)
        _report(env, M.fake_signature_mismatch(identity=target.identity, params=shown_params,
                                               ret_type=T.show(want_ret)), menv, fn.decl.name_span)


def _path_module_broken(env: Env, menv: ModuleEnv, path: tuple[str, ...]) -> bool:
    if len(path) == 2:
        identity = menv.imports.get(path[0])
        target = env.modules.get(identity) if identity else None
        return bool(target and target.broken) or (identity is None and any(
            i.alias == path[0] for i in menv.loaded.imports))
    return menv.broken


def lookup_path(env: Env, menv: ModuleEnv, path: tuple[str, ...]) -> FnInfo | None:
    if len(path) == 1:
        return menv.fns.get(path[0])
    if len(path) == 2:
        identity = menv.imports.get(path[0])
        if identity is None:
            return None
        target = env.modules.get(identity)
        return target.fns.get(path[1]) if target else None
    return None
