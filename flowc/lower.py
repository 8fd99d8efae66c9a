"""Lower a checked Flow module to a Python `ast.Module` for the sandbox.

Over 800 lines, on purpose: one lowering per construct, each written beside the runtime calls
it emits; the entry is `lower()`, and the parts that stand alone (loops, pattern tests, the
names generated code may use) are in loops.py, exhaust.py and flowdata/names.py.

The generated code is plain Python over the runtime value representation (docs/abi.md):

* Pure functions become plain functions; functions that can make Tool calls become generators
  that `yield from` the runtime (`rt_call` for Tools, `i_task_*` for the scheduler). A function
  with an effect variable (`!e`) is emitted twice: `name` (e pure) and `name__tool` (e tool).
* Tail calls never grow the stack. A self tail call in any named function is a jump (`while True`
  and `continue`). Any other tail call from a top-level function to a top-level function returns
  `rt_Tail(function, args)`: callers bounce it (`rt_bounce` for pure code, `rt_run` for
  generators), and the scheduler sees the ones made by a task's outermost function, which is where
  checkpoints are taken.
* Expressions that need statements (a `match`, a block with `let`s, a `?`, a call that must
  `yield from`) are lowered to statements that assign a temporary; everything else stays an
  expression, evaluated left to right as Flow says.
* Every local binding gets its own Python name, and lambdas and local functions capture the
  values of free variables as default arguments, so a closure sees the value it captured (Flow
  values are immutable; Python closures are late-binding).

Each emitted statement carries the Flow span it came from (`flow_span`), so the emitter can map
generated lines back to Flow source.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from flowc import syntax as S
from flowc import types as T
from flowc.check import CallFact, Facts, Local
from flowc.inline_lists import inline_list_call
from flowc.loops import carry_records, iterate_lists, sequential_rounds, walk_lists
from flowc.pyast import at as _at, call as _call, load as _load, store as _store
from flowc.resolve import CtorInfo, Env, FnInfo, ModuleEnv, TypeInfo
from flowc.runtypes import TYPED_INTRINSICS, mentions, runtime_typed
from flowdata.names import FORBIDDEN_NAMES, INJECTED_PREFIXES

PRELUDE = "std@v1/prelude"
#: The hidden parameter of a function that takes its type arguments at run time (flowc/runtypes.py).
TARGS = "k_targs"
# The loader's injected prefixes, and two of the lowering's own (`k_` constants, `u_` renames).
_RESERVED_PREFIXES = INJECTED_PREFIXES + ("k_", "u_")


def py_name(name: str) -> str:
    """A Flow identifier as a Python identifier: injective, never starting with `_`, never a
    keyword or one of the runtime's reserved prefixes."""
    if name.startswith("_"):
        return "u_" + name
    if name.startswith(_RESERVED_PREFIXES) or keyword.iskeyword(name) or keyword.issoftkeyword(name) \
            or name in ("None", "True", "False") or name in FORBIDDEN_NAMES:
        return "u_" + name
    return name


_PLAIN_IDENTITY = re.compile(r"std@[A-Za-z0-9]+(?:/[A-Za-z0-9]+)+|(?!std/)[A-Za-z][A-Za-z0-9]*(?:/[A-Za-z0-9]+)*")


def module_key(identity: str) -> str:
    """The Python name of a module namespace: `std@v1/list` -> `m_std_v1_list`, `sub/util` ->
    `m_sub_util`. Injective over every module path, and after `m_` it never starts with `_` (the
    sandbox reserves those names) nor with a digit: a plain identity (ASCII letters and digits
    between `/`, starting with a letter, or a std module's) joins its parts with `_`, and only a root module's identity may start with
    `std/`; any other (a repository's, one with `_`, `-`, `.` or other characters) is `m_x`, then
    each letter or digit as itself and each other character as `_<hex>_`, then a final `_`, which
    no plain key ends with."""
    if _PLAIN_IDENTITY.fullmatch(identity):
        return "m_" + identity.replace("@", "_").replace("/", "_")
    out = ["m_x"]
    for ch in identity:
        out.append(ch if ch.isascii() and ch.isalnum() else f"_{ord(ch):x}_")
    out.append("_")
    return "".join(out)


def intrinsic_name(fn: FnInfo) -> str:
    return "i_" + fn.module.rsplit("/", 1)[-1] + "_" + fn.name


def ctor_py_name(info: TypeInfo, ctor: CtorInfo) -> str:
    if info.module == PRELUDE:
        return "rt_" + ctor.name
    return f"{info.name}_{ctor.name}"


def lower(env: Env, facts: Facts, menv: ModuleEnv) -> ast.Module:
    """One checked module (`menv`, of the program `env`, with the checker's `facts`) as the
    Python module the sandbox loads."""
    return _ModuleLowerer(env, facts, menv).lower()


class Lowering(Exception):
    """An internal compiler error: lowering met something the checker should have refused."""


@dataclass
class _Fn:
    """The function being lowered."""

    name: str  # Python name
    flow: S.FnDecl | None
    tool: bool  # a generator
    top: bool  # a top-level function (may return rt_Tail)
    self_target: Any  # FnInfo or Local of itself, for self tail calls
    params: list[str]
    effect_version: str  # "pure" or "tool": how effect variables are read
    names: dict[int, str] = field(default_factory=dict)  # id(Local) -> python name
    used: set[str] = field(default_factory=set)
    temps: int = 0
    loops: bool = False
    #: the top-level function whose type arguments the body has at run time (in TARGS), if any
    targs_of: FnInfo | None = None


class _ModuleLowerer:
    """The lowering of one module: its constants, Tool descriptions and names in use."""

    def __init__(self, env: Env, facts: Facts, menv: ModuleEnv) -> None:
        self.env = env
        self.facts = facts
        self.menv = menv
        self.constants: dict[tuple[str, str], str] = {}
        self.constant_defs: list[ast.stmt] = []
        self.tool_descs: dict[str, str] = {}
        self.fn: _Fn | None = None
        self.may_tail_cache: dict[str, bool] = {}
        self.runtime_typed = runtime_typed(env, facts)
        #: Python names bound at module level (functions, types, constructors): locals avoid them.
        self.module_names: set[str] = set()
        for fn in menv.fns.values():
            self.module_names.add(py_name(fn.name))
            self.module_names.add(py_name(fn.name) + "__tool")
        for info in menv.types.values():
            self.module_names.add(info.name)
            for c in info.ctors:
                self.module_names.add(ctor_py_name(info, c))

    # ---- entry

    def lower(self) -> ast.Module:
        body: list[ast.stmt] = []
        for info in self.menv.types.values():
            body.extend(self.type_decl(info))
        functions: list[ast.stmt] = []
        for fn in self.menv.fns.values():
            if fn.tool or fn.intrinsic or fn.decl.body is None:
                continue
            if _effect_vars(fn.sig):
                functions.append(self.function(fn, "pure"))
                functions.append(self.function(fn, "tool"))
            else:
                functions.append(self.function(fn, "tool" if fn.call_type().effect == T.TOOL else "pure"))
        return ast.Module(body=body + self.constant_defs + functions, type_ignores=[])

    # ---- types

    def type_decl(self, info: TypeInfo) -> list[ast.stmt]:
        if info.module == PRELUDE:
            return []  # Option, Result and ToolProblem are the runtime's own (rt_Some, rt_Ok, ...)
        if info.kind == "record":
            call = _call("rt_record_tag", [ast.Constant(info.identity),
                                             _tuple([ast.Constant(f.name) for f in info.fields])])
            return [_at(ast.Assign([_store(info.name)], call), info.decl.span if info.decl else S.NO_SPAN)]
        if info.kind == "enum":
            ctors = _tuple([_tuple([ast.Constant(c.name), ast.Constant(c.form),
                                    _tuple([ast.Constant(f.name) for f in c.fields])]) for c in info.ctors])
            out: list[ast.stmt] = [_at(ast.Assign([_store(info.name)], _call(
                "rt_enum_type", [ast.Constant(info.identity), ctors])), info.decl.span if info.decl else S.NO_SPAN)]
            for c in info.ctors:
                out.append(_at(ast.Assign([_store(ctor_py_name(info, c))],
                                          _call("rt_ctor", [_load(info.name), ast.Constant(c.name)])), c.span))
            return out
        return []

    # ---- functions

    def function(self, fn: FnInfo, version: str) -> ast.stmt:
        decl = fn.decl
        name = py_name(decl.name) + ("__tool" if version == "tool" and _effect_vars(fn.sig) else "")
        tool = version == "tool" or fn.call_type().effect == T.TOOL
        ctx = _Fn(name, decl, tool, True, fn, [], version)
        saved = self.fn
        self.fn = ctx
        params = [self.bind(self.facts.bindings[id(p)], p.name) for p in decl.params]
        ctx.params = params
        hidden: list[str] = []
        if fn.identity in self.runtime_typed:
            ctx.targs_of = fn
            ctx.used.add(TARGS)
            ctx.names[0] = TARGS  # not a Local's id: lambdas and local functions capture it like one
            hidden = [TARGS]
        assert decl.body is not None
        body = _stepped(self.tail(decl.body))
        self.fn = saved
        node = ast.FunctionDef(name=name, args=_args(params + hidden), body=body or [ast.Pass()], decorator_list=[],
                               returns=None, type_comment=None)
        if ctx.loops:
            node.body = [ast.While(ast.Constant(True), body, [])]
            walk_lists(node, ctx.used)
            carry_records(node, ctx.used)
            sequential_rounds(node.body, ctx.used)
            iterate_lists(node.body)
        if tool and not _contains_yield(node):
            # A generator that happens not to yield on every path still must be one.
            node.body.insert(0, ast.If(ast.Constant(False), [ast.Expr(ast.Yield(None))], []))
        node.flow_span = decl.span  # type: ignore[attr-defined]
        node.flow_doc = f"flow {fn.identity}"  # type: ignore[attr-defined]
        return node

    def bind(self, local: Local, flow_name: str) -> str:
        ctx = self.fn
        assert ctx is not None
        base = py_name(flow_name)
        candidate = base
        n = 1
        while candidate in ctx.used or candidate in self.module_names:
            n += 1
            candidate = f"{base}_{n}"
            if candidate.startswith(_RESERVED_PREFIXES):
                candidate = f"{base}{n}"
        ctx.used.add(candidate)
        ctx.names[id(local)] = candidate
        return candidate

    def fresh(self, base: str) -> str:
        """A name for a value the lowering itself introduces, unused in the function so far."""
        ctx = self.fn
        assert ctx is not None and not self.reserved(base)
        candidate, n = base, 1
        while candidate in ctx.used or candidate in self.module_names:
            n += 1
            candidate = f"{base}_{n}"
        ctx.used.add(candidate)
        return candidate

    def reserved(self, name: str) -> bool:
        """Does `name` start with a prefix the runtime or the lowering keeps for its own names?"""
        return name.startswith(_RESERVED_PREFIXES)

    def temp(self) -> str:
        ctx = self.fn
        assert ctx is not None
        while True:
            ctx.temps += 1
            name = f"t{ctx.temps}"
            if name not in ctx.used:
                ctx.used.add(name)
                return name

    def local_name(self, local: Local) -> str:
        assert self.fn is not None
        name = self.fn.names.get(id(local))
        if name is None:
            raise Lowering("a local was used before it was bound")
        return name

    # ---- statements for tail position

    def tail(self, e: S.Expr) -> list[ast.stmt]:
        """Statements that compute `e` and return it."""
        if isinstance(e, S.Block):
            return self.block(e, tail=True)
        if isinstance(e, S.If):
            return self.if_stmt(e, tail=True, target=None)
        if isinstance(e, S.Match):
            return self.match(e, tail=True, target=None)
        if isinstance(e, S.Return):
            return self.tail(e.value)
        if isinstance(e, S.Call):
            jump = self.tail_call(e)
            if jump is not None:
                return jump
        stmts, value = self.expr(e)
        return stmts + [_at(ast.Return(value), e.span)]

    def tail_call(self, e: S.Call) -> list[ast.stmt] | None:
        fact: CallFact | None = self.facts.calls.get(id(e))
        ctx = self.fn
        assert ctx is not None
        if fact is None or fact.kind not in ("direct", "localfn"):
            return None
        target = fact.target
        if target is ctx.self_target and len(ctx.params) == len(e.args) and \
                not (ctx.top and ctx.tool):
            stmts, values = self.args(e.args)
            ctx.loops = True
            targets = list(ctx.params)
            if ctx.top and ctx.targs_of is target:
                # The same function at maybe other type arguments (`f<List<T>>` inside `f<T>`).
                targets.append(TARGS)
                values.append(self.type_args_value(fact.type_args))
            if targets:
                stmts.append(_at(ast.Assign([_tuple([_store(p) for p in targets], store=True)],
                                            _tuple(values)), e.span))
            stmts.append(_at(ast.Continue(), e.span))
            return stmts
        if fact.kind == "direct" and ctx.top and isinstance(target, FnInfo) and not target.tool \
                and not target.intrinsic and target.decl.body is not None:
            if not ctx.tool and self.callee_is_tool(target, fact):
                return None
            stmts, values = self.args(e.args)
            callee = self.fn_ref(target, fact)
            if target.identity in self.runtime_typed:
                values.append(self.type_args_value(fact.type_args))
            return stmts + [_at(ast.Return(_call("rt_Tail", [callee, _tuple(values)])), e.span)]
        return None

    def callee_is_tool(self, target: FnInfo, fact: CallFact) -> bool:
        return self.effect_is_tool(fact.effect) or target.call_type().effect == T.TOOL

    def effect_is_tool(self, effect: T.Effect) -> bool:
        if effect == T.TOOL:
            return True
        if isinstance(effect, T.EffParam):
            return self.fn is not None and self.fn.effect_version == "tool"
        return False

    # ---- blocks and statements

    def block(self, e: S.Block, tail: bool, target: str | None = None) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        last = len(e.stmts) - 1
        for i, stmt in enumerate(e.stmts):
            is_last = i == last
            if isinstance(stmt, S.ExprStmt):
                if is_last:
                    if tail:
                        out.extend(self.tail(stmt.expr))
                    elif target is not None:
                        out.extend(self.assign(target, stmt.expr))
                    else:
                        stmts, value = self.expr(stmt.expr)
                        out.extend(stmts)
                        out.append(_at(ast.Expr(value), stmt.span))
                    return out
                stmts, value = self.expr(stmt.expr)
                out.extend(stmts)
                if not _is_simple(value):
                    out.append(_at(ast.Expr(value), stmt.span))
            elif isinstance(stmt, S.Let):
                stmts, value = self.expr(stmt.value)
                out.extend(stmts)
                out.extend(self.let_pattern(stmt.pattern, value, stmt.span))
            elif isinstance(stmt, S.Guard):
                stmts, cond = self.expr(stmt.cond)
                out.extend(stmts)
                out.append(_at(ast.If(ast.UnaryOp(ast.Not(), cond), self.block(stmt.else_, tail=True), []),
                               stmt.span))
            elif isinstance(stmt, S.FnDecl):
                out.extend(self.local_fn(stmt))
        # The block ends in a statement: its value is Unit.
        if tail:
            out.append(_at(ast.Return(ast.Constant(None)), e.span))
        elif target is not None:
            out.append(_at(ast.Assign([_store(target)], ast.Constant(None)), e.span))
        return out

    def assign(self, target: str, e: S.Expr) -> list[ast.stmt]:
        if isinstance(e, S.Block):
            return self.block(e, tail=False, target=target)
        if isinstance(e, S.If):
            return self.if_stmt(e, tail=False, target=target)
        if isinstance(e, S.Match):
            return self.match(e, tail=False, target=target)
        stmts, value = self.expr(e)
        return stmts + [_at(ast.Assign([_store(target)], value), e.span)]

    def let_pattern(self, pattern: S.Pattern, value: ast.expr, span: S.Span) -> list[ast.stmt]:
        if isinstance(pattern, S.PBind):
            name = self.bind(self.facts.bindings[id(pattern)], pattern.name)
            return [_at(ast.Assign([_store(name)], value), span)]
        if isinstance(pattern, S.PWild):
            return [] if _is_simple(value) else [_at(ast.Expr(value), span)]
        holder = value
        out: list[ast.stmt] = []
        if not isinstance(value, ast.Name):
            tmp = self.temp()
            out.append(_at(ast.Assign([_store(tmp)], value), span))
            holder = _load(tmp)
        _, binds = self.pattern(pattern, holder)
        for name, access in binds:
            out.append(_at(ast.Assign([_store(name)], access), span))
        return out

    def local_fn(self, decl: S.FnDecl) -> list[ast.stmt]:
        local = self.facts.bindings[id(decl)]
        name = self.bind(local, decl.name)
        assert local.fn is not None
        sig = local.fn.sig
        outer = self.fn
        assert outer is not None
        tool = sig.effect == T.TOOL or (isinstance(sig.effect, T.EffParam) and outer.effect_version == "tool") \
            or bool(_effect_vars(sig) and sig.effect != T.PURE)
        ctx = _Fn(name, decl, tool, False, local, [], outer.effect_version, dict(outer.names), set(outer.used),
                  targs_of=outer.targs_of)
        self.fn = ctx
        params = [self.bind(self.facts.bindings[id(p)], p.name) for p in decl.params]
        ctx.params = params
        assert decl.body is not None
        body = _stepped(self.tail(decl.body))
        self.fn = outer
        if ctx.loops:
            body = [ast.While(ast.Constant(True), body, [])]
            sequential_rounds(body, ctx.used)
        outer.used |= ctx.used
        captured = sorted(_free_names(body, set(params) | {name}) & set(outer.names.values()))
        node = ast.FunctionDef(name=name, args=_args(params, captured), body=body, decorator_list=[],
                               returns=None, type_comment=None)
        if tool and not _contains_yield(node):
            node.body.insert(0, ast.If(ast.Constant(False), [ast.Expr(ast.Yield(None))], []))
        return [_at(node, decl.span)]

    # ---- if and match

    def if_stmt(self, e: S.If, tail: bool, target: str | None) -> list[ast.stmt]:
        stmts, cond = self.expr(e.cond)
        then = self.branch(e.then, tail, target)
        if e.else_ is None:
            orelse = [_at(ast.Return(ast.Constant(None)), e.span)] if tail else (
                [_at(ast.Assign([_store(target)], ast.Constant(None)), e.span)] if target else [])
        else:
            orelse = self.branch(e.else_, tail, target)
        return stmts + [_at(ast.If(cond, then or [ast.Pass()], orelse), e.span)]

    def branch(self, e: S.Expr, tail: bool, target: str | None) -> list[ast.stmt]:
        if tail:
            return self.tail(e)
        if target is not None:
            return self.assign(target, e)
        stmts, value = self.expr(e)
        return stmts + ([] if _is_simple(value) else [_at(ast.Expr(value), e.span)])

    def match(self, e: S.Match, tail: bool, target: str | None) -> list[ast.stmt]:
        stmts, scrutinee = self.expr(e.scrutinee)
        if not isinstance(scrutinee, ast.Name):
            tmp = self.temp()
            stmts.append(_at(ast.Assign([_store(tmp)], scrutinee), e.scrutinee.span))
            scrutinee = _load(tmp)
        chain: list[tuple[ast.expr | None, list[ast.stmt]]] = []
        last = len(e.arms) - 1
        for i, arm in enumerate(e.arms):
            cond, binds = self.pattern(arm.pattern, scrutinee)
            body: list[ast.stmt] = []
            if arm.guard is not None:
                # Bindings must exist before the guard runs: bind them in the condition.
                parts = [cond] if cond is not None else []
                parts += [_walrus(name, access) for name, access in binds]
                gstmts, guard = self.expr(arm.guard)
                if gstmts:
                    raise Lowering("an arm guard that needs statements")
                parts.append(guard)
                cond = _and(parts)
            else:
                body.extend(_at(ast.Assign([_store(name)], access), arm.pattern.span) for name, access in binds)
            body.extend(self.branch(arm.body, tail, target))
            if i == last and arm.guard is None and not _binds_in_condition(arm.pattern):
                cond = None
            chain.append((cond, body or [ast.Pass()]))
        if not chain:
            return stmts + [_at(ast.Expr(_call("rt_fault", [ast.Constant("unreachable"),
                                                           ast.Constant("a match with no arms was reached")])),
                                e.span)]
        node: list[ast.stmt] = []
        if chain[-1][0] is not None:
            node = [_at(ast.Expr(_call("rt_fault", [ast.Constant("unreachable"),
                                                     ast.Constant("no arm of this match applies")])), e.span)]
        if len(chain) <= _ARM_GROUP:
            return stmts + _if_chain(chain, node, e.span)
        # An `elif` chain is a Python tree as deep as it is long, and CPython's compiler (and
        # libcst) recurse over it: thousands of arms go in groups, each entered while no arm of
        # an earlier group has matched.
        done = self.temp()
        stmts.append(_at(ast.Assign([_store(done)], ast.Constant(False)), e.span))
        groups = [chain[i:i + _ARM_GROUP] for i in range(0, len(chain), _ARM_GROUP)]
        for index, group in enumerate(groups):
            marked = [(cond, [_at(ast.Assign([_store(done)], ast.Constant(True)), e.span), *body])
                      for cond, body in group]
            part = _if_chain(marked, node if index == len(groups) - 1 else [], e.span)
            stmts.extend(part if index == 0 else [_at(ast.If(ast.UnaryOp(ast.Not(), _load(done)), part, []), e.span)])
        return stmts

    # ---- patterns: a condition (None: always) and the bindings it makes

    def pattern(self, p: S.Pattern, access: ast.expr) -> tuple[ast.expr | None, list[tuple[str, ast.expr]]]:
        if isinstance(p, S.PWild):
            return None, []
        if isinstance(p, S.PBind):
            local = self.facts.bindings[id(p)]
            name = self.fn.names.get(id(local)) or self.bind(local, p.name)
            return None, [(name, access)]
        if isinstance(p, S.PLit):
            if p.lit.kind == "unit":
                return None, []
            return ast.Compare(access, [ast.Eq()], [self.literal(p.lit)]), []
        if isinstance(p, S.PTuple):
            return self.sub_patterns([(item, _index(access, i)) for i, item in enumerate(p.items)])
        if isinstance(p, S.PList):
            n = len(p.items)
            size = _call("rt_len", [access])
            conds: list[ast.expr] = [ast.Compare(size, [ast.GtE() if p.rest is not None else ast.Eq()],
                                                 [ast.Constant(n)])]
            cond, binds = self.sub_patterns([(item, _index(access, i)) for i, item in enumerate(p.items)])
            if cond is not None:
                conds.append(cond)
            if p.rest:
                local = self.facts.bindings[id(p)]
                name = self.fn.names.get(id(local)) or self.bind(local, p.rest)
                binds.append((name, _call("rt_rest", [access, ast.Constant(n)])))
            return _and(conds), binds
        if isinstance(p, S.POr):
            alts = []
            shared: dict[str, str] = {}
            for alt in p.alternatives:
                # Every alternative binds the same names: give them the same Python names.
                for name, local in _binders(alt, self.facts):
                    if name in shared:
                        self.fn.names[id(local)] = shared[name]
                cond, binds = self.pattern(alt, access)
                for name, local in _binders(alt, self.facts):
                    shared.setdefault(name, self.fn.names[id(local)])
                parts = ([cond] if cond is not None else []) + [_walrus(n, a) for n, a in binds]
                alts.append(_and(parts) if parts else ast.Constant(True))
            return _bool_op(ast.Or, alts), []
        assert isinstance(p, S.PCtor)
        info, ctor = self.facts.ctors[id(p)]
        if ctor is None:  # a record pattern
            fields = info.fields
            subs = self.named_subs(p, fields, access, offset=1)  # after the record's tag
            return self.sub_patterns(subs)
        tag = ast.Compare(_index(access, 0), [ast.Eq()], [ast.Constant(ctor.name)])
        if ctor.form == "bare":
            subs = []
        elif ctor.form == "positional":
            subs = [(sub, _index(access, i + 1)) for i, sub in enumerate(p.args)]
        else:
            subs = self.named_subs(p, ctor.fields, access, offset=1)
        cond, binds = self.sub_patterns(subs)
        return _and([tag] + ([cond] if cond is not None else [])), binds

    def named_subs(self, p: S.PCtor, fields, access: ast.expr, offset: int) -> list[tuple[Any, ast.expr]]:
        subs: list[tuple[Any, ast.expr]] = []
        order: dict[str, int] = {}
        for i, f in enumerate(fields):
            order.setdefault(f.name, i)
        for f in p.fields:
            index = order[f.name] + offset
            if f.pattern is None:
                subs.append((("bind", f), _index(access, index)))
            else:
                subs.append((f.pattern, _index(access, index)))
        return subs

    def sub_patterns(self, subs) -> tuple[ast.expr | None, list[tuple[str, ast.expr]]]:
        conds: list[ast.expr] = []
        binds: list[tuple[str, ast.expr]] = []
        for sub, access in subs:
            if isinstance(sub, tuple) and sub[0] == "bind":
                f = sub[1]
                local = self.facts.bindings[id(f)]
                name = self.fn.names.get(id(local)) or self.bind(local, f.name)
                binds.append((name, access))
                continue
            cond, more = self.pattern(sub, access)
            if cond is not None:
                conds.append(cond)
            binds.extend(more)
        return (_and(conds) if conds else None), binds

    # ---- expressions: (statements to run first, the value)

    def expr(self, e: S.Expr) -> tuple[list[ast.stmt], ast.expr]:
        method = getattr(self, "x_" + type(e).__name__)
        return method(e)

    def x_Lit(self, e: S.Lit) -> tuple[list[ast.stmt], ast.expr]:
        return [], self.literal(e)

    def literal(self, lit: S.Lit) -> ast.expr:
        if lit.kind == "int":
            return ast.Constant(int(lit.value)) if len(lit.value) < 4000 else self.constant("rt_bigint", lit.value)
        if lit.kind == "text":
            return ast.Constant(lit.value)
        if lit.kind == "bool":
            return ast.Constant(lit.value == "true")
        if lit.kind == "unit":
            return ast.Constant(None)
        if lit.kind == "decimal":
            return self.constant("rt_dec", lit.value)
        if lit.kind == "duration":
            return self.constant("rt_duration", lit.value)
        raise Lowering(f"literal {lit.kind}")

    def constant(self, maker: str, text: str) -> ast.expr:
        key = (maker, text)
        name = self.constants.get(key)
        if name is None:
            name = f"k_{len(self.constants) + 1}"
            self.constants[key] = name
            self.constant_defs.append(ast.Assign([_store(name)], _call(maker, [ast.Constant(text)])))
        return _load(name)

    def x_Interp(self, e: S.Interp) -> tuple[list[ast.stmt], ast.expr]:
        stmts: list[ast.stmt] = []
        pieces: list[ast.expr] = []
        for part in e.parts:
            if isinstance(part, str):
                if part:
                    pieces.append(ast.Constant(part))
                continue
            s, v = self.expr(part)
            stmts.extend(self.spill_before(s, pieces))
            pieces.append(_call("rt_show", [v]))
        if not pieces:
            return stmts, ast.Constant("")
        value = pieces[0]
        for piece in pieces[1:]:
            value = ast.BinOp(value, ast.Add(), piece)
        if len(pieces) == 1 and not isinstance(pieces[0], ast.Constant):
            value = pieces[0]
        return stmts, value

    def spill_before(self, new_stmts: list[ast.stmt], earlier: list[ast.expr]) -> list[ast.stmt]:
        """Before statements for a later operand run, evaluate the earlier operands (order matters
        when they call Tools)."""
        if not new_stmts:
            return []
        out: list[ast.stmt] = []
        for i, value in enumerate(earlier):
            if not _is_simple(value):
                tmp = self.temp()
                out.append(ast.Assign([_store(tmp)], value))
                earlier[i] = _load(tmp)
        return out + new_stmts

    def args(self, exprs: tuple[S.Expr, ...] | list[S.Expr]) -> tuple[list[ast.stmt], list[ast.expr]]:
        stmts: list[ast.stmt] = []
        values: list[ast.expr] = []
        for a in exprs:
            s, v = self.expr(a)
            stmts.extend(self.spill_before(s, values))
            values.append(v)
        return stmts, values

    def x_Var(self, e: S.Var) -> tuple[list[ast.stmt], ast.expr]:
        return [], self.ref_value(e)

    def ref_value(self, e: S.Var | S.Member) -> ast.expr:
        ref = self.facts.refs.get(id(e))
        if ref is None:
            raise Lowering(f"unresolved name at {e.span}")
        if ref[0] == "local":
            return _load(self.local_name(ref[1]))
        if ref[0] == "fn":
            fn: FnInfo = ref[1]
            if fn.tool:
                if fn.decl.type_params:
                    # A generic Tool as a value is the Tool at the reference's instantiation.
                    return _call("rt_tool_fn", [self.tool_desc(fn), self.type_args_value(self.instance(e, fn))])
                return _call("rt_tool_fn", [self.tool_desc(fn)])
            if fn.intrinsic:
                return _load(intrinsic_name(fn))
            target = self.fn_ref(fn, None)
            if fn.identity in self.runtime_typed:
                target = _call("rt_typed", [target, self.type_args_value(self.instance(e, fn))])
            if fn.sig.effect != T.TOOL and not _effect_vars(fn.sig):
                return _call("rt_bouncing", [target])
            return target
        raise Lowering(f"reference {ref[0]}")

    def instance(self, e: S.Var | S.Member, fn: FnInfo) -> tuple[T.Type, ...]:
        """The type arguments a generic function named as a value is taken at."""
        instance = self.facts.types.get(id(e))
        if not isinstance(instance, T.TTuple):
            raise Lowering(f"no type arguments recorded for {fn.identity} at {e.span}")
        return instance.items

    def fn_ref(self, fn: FnInfo, fact: CallFact | None) -> ast.expr:
        name = py_name(fn.name)
        if _effect_vars(fn.sig):
            tool = fact is None or self.effect_is_tool(fact.effect)
            if tool:
                name += "__tool"
        if fn.module == self.menv.identity:
            return _load(name)
        return ast.Attribute(_load(module_key(fn.module)), name, ast.Load())

    def tool_desc(self, fn: FnInfo) -> ast.expr:
        key = fn.identity
        name = self.tool_descs.get(key)
        if name is None:
            name = f"k_tool_{len(self.tool_descs) + 1}"
            self.tool_descs[key] = name
            self.constant_defs.append(ast.Assign([_store(name)], _call("rt_tool", [
                ast.Constant(fn.identity), _tuple([ast.Constant(p.name) for p in fn.decl.params])])))
        return _load(name)

    def x_CtorRef(self, e: S.CtorRef) -> tuple[list[ast.stmt], ast.expr]:
        info, ctor = self.facts.ctors[id(e)]
        return [], self.ctor_value(info, ctor)

    def ctor_value(self, info: TypeInfo, ctor: CtorInfo) -> ast.expr:
        name = ctor_py_name(info, ctor)
        if info.module == PRELUDE or info.module == self.menv.identity:
            return _load(name)
        return ast.Attribute(_load(module_key(info.module)), name, ast.Load())

    def type_value(self, info: TypeInfo) -> ast.expr:
        if info.module == self.menv.identity:
            return _load(info.name)
        return ast.Attribute(_load(module_key(info.module)), info.name, ast.Load())

    def x_Member(self, e: S.Member) -> tuple[list[ast.stmt], ast.expr]:
        ref = self.facts.refs.get(id(e))
        if ref is not None and ref[0] == "field":
            stmts, obj = self.expr(e.obj)
            # A record's fields follow its tag (flowdata.values.RecordType); a tuple's start at 0.
            record = self.facts.fields_read.get(id(e)) is not None
            read = _index(obj, ref[1] + 1 if record else ref[1])
            read.flow_field = e.name  # type: ignore[attr-defined]  # cannot fault: inline_lists may hoist it
            return stmts, read
        return [], self.ref_value(e)

    def x_Call(self, e: S.Call) -> tuple[list[ast.stmt], ast.expr]:
        fact: CallFact | None = self.facts.calls.get(id(e))
        if fact is None:
            raise Lowering(f"unchecked call at {e.span}")
        if fact.kind == "token":
            stmts, values = self.args(e.args)
            return stmts, _call("rt_token", [ast.Constant(fact.target.identity)] + values)
        if fact.kind == "ctor":
            info, ctor = self.facts.ctors[id(e)]
            stmts, values = self.args(e.args)
            return stmts, ast.Call(self.ctor_value(info, ctor), values, [])
        if fact.kind == "direct":
            fn: FnInfo = fact.target
            if fn.intrinsic and not (self.effect_is_tool(fact.effect) or fn.sig.effect == T.TOOL):
                inlined = inline_list_call(self, fn.identity, e)
                if inlined is not None:
                    return inlined
            stmts, values = self.args(e.args)
            if fn.tool:
                return self.yielding(stmts, self.tool_call(fn, fact, values), e.span)
            if fn.intrinsic:
                name = intrinsic_name(fn)
                if fn.identity == "std@v1/task.spawn":
                    parked = self.parked_shape(e.args[0])
                    if parked is not None:
                        return self.yielding(stmts, _call("i_task_spawn_parked", values + [parked]), e.span)
                if fn.identity in TYPED_INTRINSICS:
                    values = [self.type_term_literal(fact.type_args[0])] + values
                if self.effect_is_tool(fact.effect) or fn.sig.effect == T.TOOL:
                    if _effect_vars(fn.sig):
                        name += "_t"
                    return self.yielding(stmts, _call(name, values), e.span)
                return stmts, _call(name, values)
            callee = self.fn_ref(fn, fact)
            if fn.identity in self.runtime_typed:
                values.append(self.type_args_value(fact.type_args))
            if self.callee_is_tool(fn, fact):
                return self.yielding(stmts, _call("rt_run", [ast.Call(callee, values, [])]), e.span)
            call = ast.Call(callee, values, [])
            return stmts, _call("rt_bounce", [call]) if self._may_tail(fn) else call
        if fact.kind == "localfn":
            local: Local = fact.target
            stmts, values = self.args(e.args)
            call = ast.Call(_load(self.local_name(local)), values, [])
            sig = local.fn.sig if local.fn else None
            local_tool = sig is not None and (sig.effect == T.TOOL or (
                isinstance(sig.effect, T.EffParam) and self.fn is not None and self.fn.effect_version == "tool"))
            if local_tool:
                if self.effect_is_tool(fact.effect) or sig.effect == T.TOOL:
                    return self.yielding(stmts, call, e.span)
                return stmts, _call("rt_finish", [call])
            return stmts, call
        # a function value
        fstmts, fn_value = self.expr(e.fn)
        stmts, values = self.args(e.args)
        stmts = fstmts + self.spill_before(stmts, [fn_value]) if stmts else fstmts
        if self.effect_is_tool(fact.effect):
            return self.yielding(stmts, _call("rt_fcall", [fn_value, _tuple(values)]), e.span)
        return stmts, ast.Call(fn_value, values, [])

    def parked_shape(self, arg: S.Expr) -> ast.expr | None:
        """A spawned function whose whole work is one Tool call, optionally wrapped in a
        one-value constructor (`flow() = Received(feed.next())`): its task can be parked in a
        checkpoint as the call and the constructor. The shape names the constructor."""
        if not isinstance(arg, S.Lambda) or arg.params:
            return None
        body = _block_value(arg.body)
        ctor_value: ast.expr = ast.Constant(None)
        if isinstance(body, S.Call) and isinstance(body.fn, S.CtorRef) and len(body.args) == 1:
            fact = self.facts.calls.get(id(body))
            if fact is None or fact.kind != "ctor":
                return None
            info, ctor = self.facts.ctors[id(body)]
            ctor_value = _tuple([ast.Constant(info.identity), ast.Constant(ctor.name), self.ctor_value(info, ctor)])
            body = _block_value(body.args[0])
        if not isinstance(body, S.Call):
            return None
        fact = self.facts.calls.get(id(body))
        if fact is None or fact.kind != "direct" or not fact.target.tool or fact.target.decl.type_params:
            return None
        return ctor_value

    def _may_tail(self, fn: FnInfo) -> bool:
        """Conservatively: a top-level function may hand back rt_Tail if it has any tail call to
        another top-level function. Computed once per function from the checker's facts."""
        if fn.identity not in self.may_tail_cache:
            self.may_tail_cache[fn.identity] = _has_foreign_tail_call(fn, self.facts)
        return self.may_tail_cache[fn.identity]

    def yielding(self, stmts: list[ast.stmt], call: ast.expr, span: S.Span) -> tuple[list[ast.stmt], ast.expr]:
        ctx = self.fn
        if ctx is None or not ctx.tool:
            raise Lowering(f"a Tool-capable call in a pure function at {span}")
        tmp = self.temp()
        return stmts + [_at(ast.Assign([_store(tmp)], ast.YieldFrom(call)), span)], _load(tmp)

    def tool_call(self, fn: FnInfo, fact: CallFact, values: list[ast.expr]) -> ast.expr:
        args = [self.tool_desc(fn), _tuple(values)]
        if fn.decl.type_params:
            args.append(_tuple([self.type_term_literal(t) for t in fact.type_args]))
        return _call("rt_call", args)

    def type_term_literal(self, t: T.Type) -> ast.expr:
        from flowc.typeterms import term_and_defs

        term, defs = term_and_defs(self.env, t)
        owner = self.fn.targs_of if self.fn is not None else None
        if owner is not None and mentions(t, owner.identity):
            names = _tuple([ast.Constant(p.name) for p in owner.decl.type_params])
            return _call("rt_type_in", [_literal(term), _literal(defs), names, _load(TARGS)])
        return _call("rt_type", [_literal(term), _literal(defs)])

    def type_args_value(self, types: tuple[T.Type, ...]) -> ast.expr:
        """The hidden argument of a call to a function that takes its type arguments at run time."""
        return _tuple([self.type_term_literal(t) for t in types])

    def x_Binary(self, e: S.Binary) -> tuple[list[ast.stmt], ast.expr]:
        op = e.op
        lstmts, left = self.expr(e.left)
        rstmts, right = self.expr(e.right)
        if op in ("&&", "||"):
            if rstmts:
                tmp = self.temp()
                test = _load(tmp) if op == "&&" else ast.UnaryOp(ast.Not(), _load(tmp))
                return lstmts + [ast.Assign([_store(tmp)], left),
                                 ast.If(test, rstmts + [ast.Assign([_store(tmp)], right)], [])], _load(tmp)
            kind = ast.And if op == "&&" else ast.Or
            operands = [*_bool_values(left), right] if isinstance(left, ast.BoolOp) and isinstance(left.op, kind) \
                else [left, right]
            if len(operands) > _BOOL_GROUP:
                # A long `a && b && c ...` as one grouped `and`: the same order and short circuit,
                # and no parentheses nested as deep as the chain is long (CPython allows 200).
                return lstmts, _bool_op(kind, operands)
            node = ast.BoolOp(kind(), [left, right])
            node.flow_operands = operands  # type: ignore[attr-defined]
            return lstmts, node
        holder = [left]
        stmts = lstmts + self.spill_before(rstmts, holder)
        left = holder[0]
        operand = self.facts.types.get(id(e))
        if op in ("/", "%"):
            kind = "d" if operand == T.DECIMAL else "i"
            helper = f"rt_{kind}{'div' if op == '/' else 'mod'}"
            return stmts, _call(helper, [left, right])
        if op in ("+", "-", "*", "++"):
            pyop = {"+": ast.Add(), "-": ast.Sub(), "*": ast.Mult(), "++": ast.Add()}[op]
            return stmts, ast.BinOp(left, pyop, right)
        cmp = {"==": ast.Eq(), "!=": ast.NotEq(), "<": ast.Lt(), "<=": ast.LtE(), ">": ast.Gt(), ">=": ast.GtE()}[op]
        if op in ("==", "!=") and _is_literal(right, 0) and isinstance(left, ast.Call) \
                and isinstance(left.func, ast.Name) and left.func.id == "rt_imod" and _is_nonzero_int(left.args[1]):
            # `a % k == 0` for a non-zero literal k: whichever sign the remainder takes, only its
            # being zero is asked, so Python's own `%` answers it without a call.
            left = ast.BinOp(left.args[0], ast.Mod(), left.args[1])
        return stmts, ast.Compare(left, [cmp], [right])

    def x_Unary(self, e: S.Unary) -> tuple[list[ast.stmt], ast.expr]:
        stmts, value = self.expr(e.operand)
        if e.op == "!":
            return stmts, ast.UnaryOp(ast.Not(), value)
        return stmts, ast.UnaryOp(ast.USub(), value)

    def x_Try(self, e: S.Try) -> tuple[list[ast.stmt], ast.expr]:
        stmts, value = self.expr(e.expr)
        tmp = self.temp()
        stmts.append(_at(ast.Assign([_store(tmp)], value), e.span))
        is_err = ast.Compare(_index(_load(tmp), 0), [ast.Eq()], [ast.Constant("Err")])
        stmts.append(_at(ast.If(is_err, [ast.Return(_load(tmp))], []), e.span))
        return stmts, _index(_load(tmp), 1)

    def x_ListLit(self, e: S.ListLit) -> tuple[list[ast.stmt], ast.expr]:
        stmts, values = self.args(e.items)
        return stmts, _tuple(values)

    def x_TupleLit(self, e: S.TupleLit) -> tuple[list[ast.stmt], ast.expr]:
        stmts, values = self.args(e.items)
        return stmts, _tuple(values)

    def x_RecordLit(self, e: S.RecordLit) -> tuple[list[ast.stmt], ast.expr]:
        info, ctor = self.facts.ctors[id(e)]
        fields = ctor.fields if ctor is not None else info.fields
        order = [f.name for f in fields]
        stmts: list[ast.stmt] = []
        given: dict[str, ast.expr] = {}
        values: list[ast.expr] = []
        names: list[str] = []
        for f in e.fields:
            if f.value is None:
                ref = self.facts.refs[id(f)]
                value = _load(self.local_name(ref[1])) if ref[0] == "local" else self.ref_value(S.Var(f.name, f.span))
                s: list[ast.stmt] = []
            else:
                s, value = self.expr(f.value)
            stmts.extend(self.spill_before(s, values))
            values.append(value)
            names.append(f.name)
        given = dict(zip(names, values))
        base_value: ast.expr | None = None
        if e.base is not None:
            s, base_value = self.expr(e.base)
            holder = list(given.values())
            stmts.extend(self.spill_before(s, holder))
            given = dict(zip(given.keys(), holder))
            if not isinstance(base_value, ast.Name):
                tmp = self.temp()
                stmts.append(ast.Assign([_store(tmp)], base_value))
                base_value = _load(tmp)
        items = []
        for i, name in enumerate(order):
            if name in given:
                items.append(given[name])
            else:
                assert base_value is not None
                read = _index(base_value, i + 1)  # (only a record is updated: check.py)
                read.flow_field = name  # type: ignore[attr-defined]  # as a field read (x_Member)
                items.append(read)
        if ctor is not None:
            return stmts, ast.Call(self.ctor_value(info, ctor), items, [])
        # A record is the plain tuple (tag, *fields): a tuple display, the cheapest value to build.
        built = _tuple([self.type_value(info)] + items)
        built.flow_record_fields = tuple(order)  # type: ignore[attr-defined]  # for loops.carry_records
        return stmts, built

    def x_Lambda(self, e: S.Lambda) -> tuple[list[ast.stmt], ast.expr]:
        effect = self.facts.lambdas.get(id(e), T.PURE)
        outer = self.fn
        assert outer is not None
        name = self.temp().replace("t", "fn", 1)
        tool = self.effect_is_tool(effect)
        ctx = _Fn(name, None, tool, False, None, [], outer.effect_version, dict(outer.names), set(outer.used),
                  targs_of=outer.targs_of)
        self.fn = ctx
        params = [self.bind(self.facts.bindings[id(p)], p.name) for p in e.params]
        body = _stepped(self.tail(e.body))
        self.fn = outer
        outer.used |= ctx.used
        captured = sorted(_free_names(body, set(params)) & set(outer.names.values()))
        node = ast.FunctionDef(name=name, args=_args(params, captured), body=body, decorator_list=[],
                               returns=None, type_comment=None)
        if tool and not _contains_yield(node):
            node.body.insert(0, ast.If(ast.Constant(False), [ast.Expr(ast.Yield(None))], []))
        return [_at(node, e.span)], _load(name)

    def x_If(self, e: S.If) -> tuple[list[ast.stmt], ast.expr]:
        if e.else_ is not None:
            simple = self.simple_if(e)
            if simple is not None:
                return simple
        tmp = self.temp()
        return self.if_stmt(e, tail=False, target=tmp), _load(tmp)

    def simple_if(self, e: S.If) -> tuple[list[ast.stmt], ast.expr] | None:
        """`a if c else b` when neither branch needs statements."""
        if e.else_ is None:
            return None
        cstmts, cond = self.expr(e.cond)
        then = _block_value(e.then)
        other = _block_value(e.else_) if isinstance(e.else_, S.Block) else e.else_
        if then is None or other is None:
            return None
        mark = self.fn.temps if self.fn else 0
        tstmts, tvalue = self.expr(then)
        ostmts, ovalue = self.expr(other)
        if tstmts or ostmts:
            if self.fn is not None:
                self.fn.temps = mark
            return None
        return cstmts, ast.IfExp(cond, tvalue, ovalue)

    def x_Match(self, e: S.Match) -> tuple[list[ast.stmt], ast.expr]:
        tmp = self.temp()
        return self.match(e, tail=False, target=tmp), _load(tmp)

    def x_Block(self, e: S.Block) -> tuple[list[ast.stmt], ast.expr]:
        value = _block_value(e)
        if value is not None:
            return self.expr(value)
        tmp = self.temp()
        return self.block(e, tail=False, target=tmp), _load(tmp)

    def x_Return(self, e: S.Return) -> tuple[list[ast.stmt], ast.expr]:
        return self.tail(e.value), ast.Constant(None)


# ---- helpers -----------------------------------------------------------------------------------


#: Arms of a match lowered as one `if`/`elif` chain; a longer match is split in chains this long.
_ARM_GROUP = 64


def _if_chain(chain: list[tuple[ast.expr | None, list[ast.stmt]]], otherwise: list[ast.stmt],
              span: S.Span) -> list[ast.stmt]:
    node = otherwise
    for cond, body in reversed(chain):
        if cond is None:
            node = body
        else:
            node = [_at(ast.If(cond, body, node), span)]
    return node


def _stepped(body: list[ast.stmt]) -> list[ast.stmt]:
    """Count an evaluation step on every call and every round of a loop (`flow test` bounds
    them; the loader takes the statements out of a run's code)."""
    return [ast.Expr(_call("rt_step", []))] + body


def _effect_vars(sig: T.TFun) -> list[str]:
    from flowc.check import effect_param_names

    return effect_param_names(sig)


def _has_foreign_tail_call(fn: FnInfo, facts: Facts) -> bool:
    """Does the function have a tail call to a top-level function other than itself?"""
    if fn.decl.body is None:
        return False
    def into(node: object) -> bool:  # a lambda's or local function's tail calls are its own
        return not (isinstance(node, S.Lambda) or isinstance(node, S.FnDecl) and node is not fn.decl)

    for node in S.walk(fn.decl.body, into):
        if isinstance(node, S.Call):
            fact = facts.calls.get(id(node))
            if fact is not None and fact.tail and fact.kind == "direct" and fact.target is not fn \
                    and isinstance(fact.target, FnInfo) and not fact.target.tool and not fact.target.intrinsic:
                return True
    return False


def _binders(p: S.Pattern, facts: Facts) -> list[tuple[str, Local]]:
    """The names a pattern binds, with their checker bindings."""
    out: list[tuple[str, Local]] = []
    stack: list[object] = [p]
    while stack:
        node = stack.pop()
        if isinstance(node, S.PBind) or isinstance(node, S.PField) and node.pattern is None:
            local = facts.bindings.get(id(node))
            if local is not None:
                out.append((node.name, local))
        elif isinstance(node, S.PList) and node.rest:
            local = facts.bindings.get(id(node))
            if local is not None:
                out.append((node.rest, local))
        if isinstance(node, S.PCtor):
            stack.extend(node.args)
            stack.extend(node.fields)
        elif isinstance(node, S.PField) and node.pattern is not None:
            stack.append(node.pattern)
        elif isinstance(node, (S.PTuple, S.PList)):
            stack.extend(node.items)
        elif isinstance(node, S.POr):
            stack.extend(node.alternatives[:1])
    return out


def _binds_in_condition(p: S.Pattern) -> bool:
    """Or-patterns bind inside their condition (`:=`): such an arm keeps its test."""
    stack: list[object] = [p]
    while stack:
        node = stack.pop()
        if isinstance(node, S.POr):
            return True
        if isinstance(node, S.PCtor):
            stack.extend(node.args)
            stack.extend(f.pattern for f in node.fields if f.pattern is not None)
        elif isinstance(node, (S.PTuple, S.PList)):
            stack.extend(node.items)
    return False


def _block_value(e: S.Expr) -> S.Expr | None:
    """The one expression a block consists of, if it has no statements before it."""
    if isinstance(e, S.Block):
        if len(e.stmts) == 1 and isinstance(e.stmts[0], S.ExprStmt):
            return _block_value(e.stmts[0].expr)
        return None
    return e


def _is_literal(value: ast.expr, constant: int) -> bool:
    return isinstance(value, ast.Constant) and type(value.value) is int and value.value == constant


def _is_nonzero_int(value: ast.expr) -> bool:
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    return isinstance(value, ast.Constant) and type(value.value) is int and value.value != 0


def _is_simple(value: ast.expr) -> bool:
    return isinstance(value, (ast.Name, ast.Constant))


def _tuple(items: list[ast.expr], store: bool = False) -> ast.Tuple:
    return ast.Tuple(items, ast.Store() if store else ast.Load())


def _index(value: ast.expr, i: int) -> ast.Subscript:
    return ast.Subscript(value, ast.Constant(i), ast.Load())


def _and(parts: list[ast.expr]) -> ast.expr:
    parts = [p for p in parts if p is not None]
    if not parts:
        return ast.Constant(True)
    if len(parts) == 1:
        return parts[0]
    return ast.BoolOp(ast.And(), parts)


#: Operands of one `and` or `or`: libcst reads `a or b or c` as a tree as deep as it is long, so
#: more are grouped, in order, into a balanced tree of parenthesized groups (the same short
#: circuit, and only log-many levels).
_BOOL_GROUP = 32


def _bool_op(kind: type, values: list[ast.expr]) -> ast.BoolOp:
    if len(values) <= _BOOL_GROUP:
        node = ast.BoolOp(kind(), values)
    else:
        size = -(-len(values) // _BOOL_GROUP)
        node = ast.BoolOp(kind(), [_bool_op(kind, values[i:i + size]) if size > 1 else values[i]
                                   for i in range(0, len(values), size)])
    node.flow_operands = values  # type: ignore[attr-defined]  # what a longer chain extends
    return node


def _bool_values(node: ast.BoolOp) -> list[ast.expr]:
    return getattr(node, "flow_operands", node.values)


def _walrus(name: str, access: ast.expr) -> ast.expr:
    """`(name := access) is name`: binds and is always true (a binding inside a condition)."""
    return ast.Compare(ast.NamedExpr(_store(name), access), [ast.Is()], [_load(name)])


def _args(params: list[str], captured: list[str] | None = None) -> ast.arguments:
    captured = captured or []
    return ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params + captured], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[_load(c) for c in captured])


def _literal(value: Any) -> ast.expr:
    """A JSON-like Python value as a literal expression (dict keys sorted)."""
    if isinstance(value, dict):
        keys = sorted(value)
        return ast.Dict([ast.Constant(k) for k in keys], [_literal(value[k]) for k in keys])
    if isinstance(value, (list, tuple)):
        return _tuple([_literal(v) for v in value])
    return ast.Constant(value)


def _contains_yield(node: ast.AST) -> bool:
    """Does this function's own body (not a nested function's) yield?"""
    return _direct_yield(node)


def _direct_yield(node: ast.AST) -> bool:
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.Lambda)):
            continue
        if isinstance(child, (ast.Yield, ast.YieldFrom)):
            return True
        stack.extend(ast.iter_child_nodes(child))
    return False


def _free_names(body: list[ast.stmt], bound: set[str]) -> set[str]:
    """Names read in `body` (nested functions included) that it does not assign or bind."""
    reads: set[str] = set()
    assigned: set[str] = set(bound)
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    reads.add(node.id)
                else:
                    assigned.add(node.id)
            elif isinstance(node, ast.FunctionDef):
                assigned.add(node.name)
                assigned.update(a.arg for a in node.args.args)
            elif isinstance(node, ast.NamedExpr):
                assigned.add(node.target.id)  # type: ignore[union-attr]
    return reads - assigned
