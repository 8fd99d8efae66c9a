"""Resolve declarations: every module's types, constructors and function signatures, as data.

`resolve(program)` builds one `Env` for the whole program: per module, its imports by alias, its
declared types (`TypeInfo`) and functions (`FnInfo`) with signatures resolved to `types.Type`.
Declaration-level rules are enforced here: duplicates, attributes and where they may appear,
bodies, Tool signatures being data, `@test` and `@fake` signatures. Function bodies are checked
in `check.py` against this environment.
"""

from __future__ import annotations

from dataclasses import field

from flowc import syntax as S
from flowc import types as T
from flowc.diagnostics import Diagnostic, Location, error
from flowc.diagnostics.suggest import did_you_mean
from flowc.program import PRELUDE, LoadedModule, Program
from flowc.records import record
from flowc.typeinfo import is_data, satisfies

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


def _report(env: Env, code: str, message: str, menv: ModuleEnv, span: S.Span, **extra) -> None:
    env.diagnostics.append(error(code, message, loc(menv, span), **extra))


# ---- declaring names ---------------------------------------------------------------------------


def _declare(env: Env, menv: ModuleEnv) -> None:
    seen: dict[str, S.Span] = {}
    for item in menv.loaded.parsed.module.items:
        if isinstance(item, S.Use):
            continue
        name = item.name
        if name in seen:
            _report(env, "definition-duplicate", f"`{name}` is defined twice in this module", menv,
                    item.name_span, notes=(f"first defined at line {seen[name].line}",))
            continue
        seen[name] = item.name_span
        if name in menv.imports:
            _report(env, "definition-duplicate", f"`{name}` is already the name of an imported module", menv,
                    item.name_span)
        identity = f"{menv.identity}.{name}"
        if isinstance(item, S.TypeDecl):
            if name in T.SCALARS or name in T.BUILTIN_GENERICS:
                _report(env, "definition-duplicate", f"`{name}` is a built-in type", menv, item.name_span)
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
                _report(env, "type-undefined", f"there is no type `{texpr.name}`", menv, texpr.span,
                        help=f"did you mean `{guess}`?" if guess else None)
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
                _report(env, "type-undefined", f"module `{texpr.qualifier}` has no type `{texpr.name}`", menv,
                        texpr.span, help=f"did you mean `{texpr.qualifier}.{guess}`?" if guess else None)
                return T.ERROR
            if not info.pub and target.identity != menv.identity:
                _report(env, "name-private", f"type `{texpr.qualifier}.{texpr.name}` is private to its module",
                        menv, texpr.span, help="mark it `pub` where it is declared to use it here")
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
                    _report(self.env, "requirement-unmet",
                            f"`{T.show(arg)}` does not satisfy `{bound}`, which `{info.name}` requires of "
                            f"`{param.name}`", self.menv, span)

    def module_for(self, alias: str, span: S.Span) -> ModuleEnv | None:
        identity = self.menv.imports.get(alias)
        if identity is None:
            known = self.menv.loaded.imports
            if any(i.alias == alias for i in known):
                return None  # the module itself failed to load; already reported
            guess = did_you_mean(alias, list(self.menv.imports))
            _report(self.env, "name-undefined", f"no module is imported as `{alias}`", self.menv, span,
                    help=f"did you mean `{guess}`?" if guess else f'add `use "./{alias}"` or `use "std@v1/{alias}"`')
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
        _report(self.env, "effect-variable-unbound",
                f"effect variable `!{name}` is not introduced by a parameter of this signature",
                self.menv, span, help="write `!tool`, or use the variable on a function-typed parameter first")
        eff = T.EffParam(name, UNBOUND_EFFECT)
        self.effects[name] = eff  # reported once; treated as a variable so nothing else cascades
        return eff

    def _arity(self, texpr: S.TNamed, expected: int, found: int) -> bool:
        if expected == found:
            return True
        name = f"{texpr.qualifier}.{texpr.name}" if texpr.qualifier else texpr.name
        _report(self.env, "type-arity-mismatch",
                f"`{name}` takes {expected} type argument{'s' if expected != 1 else ''}, found {found}",
                self.menv, texpr.span)
        return False


def type_params_scope(env: Env, menv: ModuleEnv, params: tuple[S.TypeParam, ...], owner: str,
                      outer: dict[str, T.Type] | None = None) -> dict[str, T.Type]:
    scope = dict(outer or {})
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            _report(env, "definition-duplicate", f"type parameter `{p.name}` is declared twice", menv, p.span)
        seen.add(p.name)
        for bound in p.bounds:
            if bound not in REQUIREMENTS:
                _report(env, "type-undefined", f"`{bound}` is not a requirement; use Eq, Ord or Data", menv, p.span)
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
                _report(env, "attribute-misplaced" if attr.name in KNOWN_ATTRIBUTES else "attribute-unknown",
                        f"`@{attr.name}` cannot mark a type", menv, attr.span)
        is_host = any(a.name == "tool" for a in decl.attrs)
        if is_host:
            info.kind = "host"
            if decl.kind != "host":
                _report(env, "body-unexpected", "a `@tool` type is a host token and has no body", menv, decl.span)
            if decl.params:
                _report(env, "body-unexpected", "a `@tool` type takes no type parameters", menv, decl.span)
            continue
        if decl.kind == "host":
            _report(env, "body-missing", f"type `{decl.name}` needs a body: `{{ field: Type }}` or "
                                         f"`{{ Constructor }}`", menv, decl.name_span,
                    help="a host token type is written `@tool pub type Name`")
            info.kind = "record"
            continue
        if decl.kind == "record":
            info.fields = _fields(env, menv, scope, decl.fields)
        else:
            ctors: list[CtorInfo] = []
            seen: set[str] = set()
            for index, c in enumerate(decl.ctors):
                if c.name in seen:
                    _report(env, "definition-duplicate", f"constructor `{c.name}` is declared twice", menv, c.span)
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
            _report(env, "field-duplicate", f"field `{f.name}` is declared twice", menv, f.span)
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
            _report(env, "definition-duplicate", f"parameter `{p.name}` is declared twice", menv, p.span)
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
            _report(env, "attribute-unknown", f"there is no attribute `@{attr.name}`", menv, attr.span,
                    help=f"did you mean `@{guess}`?" if guess else "attributes are @tool, @test, @fake(tool) and @intrinsic")
        if attr.name in seen:
            _report(env, "attribute-misplaced", f"`@{attr.name}` is written twice", menv, attr.span)
        seen.add(attr.name)
        if attr.name == "fake" and not attr.target:
            _report(env, "fake-target-invalid", "`@fake` names the Tool it stands in for: `@fake(module.tool)`",
                    menv, attr.span)
        if attr.name != "fake" and attr.target:
            _report(env, "attribute-misplaced", f"`@{attr.name}` takes no argument", menv, attr.span)
    kinds = [a for a in ("tool", "test", "fake", "intrinsic") if a in seen]
    if len(kinds) > 1:
        _report(env, "attribute-misplaced", f"a function cannot be both `@{kinds[0]}` and `@{kinds[1]}`", menv,
                decl.span)
        return
    if fn.tool or fn.intrinsic:
        if decl.body is not None:
            what = "a Tool declaration" if fn.tool else "an intrinsic"
            _report(env, "body-unexpected", f"{what} has no body: its implementation is outside Flow", menv,
                    decl.body.span if hasattr(decl.body, "span") else decl.span)
        if decl.effect is not None and fn.tool:
            _report(env, "unneeded-tool-mark", "a Tool declaration is not marked `!tool`; calling it is the Tool call",
                    menv, decl.span)
    elif decl.body is None:
        _report(env, "body-missing", f"function `{decl.name}` has no body", menv, decl.name_span,
                help="write `= expression`, or mark a Tool declaration `@tool`")
    if fn.intrinsic and not menv.is_std:
        _report(env, "intrinsic-outside-std", "`@intrinsic` is reserved for the standard library", menv,
                decl.attr("intrinsic").span, help="declare a Tool with `@tool` and bind an implementation")
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
            _report(env, "generic-tool-requirement",
                    f"type parameter `{p.name}` of a Tool must require `Data`: `{p.name}: Data`", menv, p.span)
    for p, t in zip(decl.params, fn.sig.params):
        if not is_data(env, t, assume_params=True):
            _report(env, "tool-not-data", f"Tool parameter `{p.name}` has type `{T.show(t)}`, which is not data",
                    menv, p.span, help="functions and tasks cannot cross to a Tool")
    if not is_data(env, fn.sig.ret, assume_params=True):
        _report(env, "tool-not-data", f"a Tool cannot return `{T.show(fn.sig.ret)}`, which is not data", menv,
                decl.ret.span)


def _check_test_signature(env: Env, menv: ModuleEnv, fn: FnInfo) -> None:
    decl = fn.decl
    expected = T.result_of(T.UNIT, T.TEXT)
    if decl.params or decl.type_params or fn.sig.ret != expected:
        _report(env, "test-signature", "a `@test` function takes no parameters and returns `Result<Unit, Text>`",
                menv, decl.name_span)


def _check_fake(env: Env, menv: ModuleEnv, fn: FnInfo, attr: S.Attr) -> None:
    target = lookup_path(env, menv, attr.target)
    if target is None or not target.tool:
        shown = ".".join(attr.target)
        what = "is not a Tool declaration" if target is not None else "names no function"
        if target is None and not _path_module_broken(env, menv, attr.target):
            _report(env, "fake-target-invalid", f"`@fake({shown})` {what}", menv, attr.span)
        elif target is not None:
            _report(env, "fake-target-invalid", f"`@fake({shown})` {what}", menv, attr.span)
        return
    fn.fake_target = target
    want_params = target.sig.params
    declared = target.sig.ret
    if target.decl.type_params:
        # A fake for a generic Tool is generic in the same way: its type parameters stand for the
        # Tool's, in order.
        if len(fn.decl.type_params) != len(target.decl.type_params):
            _report(env, "fake-signature-mismatch",
                    f"a fake for the generic Tool `{target.identity}` takes the same type parameters "
                    f"({', '.join(p.name for p in target.decl.type_params)})", menv, fn.decl.name_span)
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
        _report(env, "fake-signature-mismatch",
                f"a fake for `{target.identity}` takes ({shown_params}), optionally after `call: Int`, "
                f"and returns `{T.show(want_ret)}`", menv, fn.decl.name_span)


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
