"""`flowc.compile`: the compiler's one entry for a host. Source in; diagnostics, the generated
Python and a manifest out.

The manifest is everything a host needs to run, replay, resume, fork or test a program without
looking inside the compiler: the program's identity and module sources, every top-level function
it may name (entries, checkpoint functions, tests, fakes) with its parameter and result type
terms, each function's direct references (so the Tools an entry can reach are a walk over frozen
data), and every Tool declaration as `flow tools` describes it. It is frozen data computed once;
the syntax trees and checker facts it was read from stay behind in the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from flowc import types as T
from flowc.diagnostics import Diagnostic
from flowc.disk import DISK, DiskChecks
from flowc.emit import Generated, generate_cached
from flowc.frontend import Checked, check_program
from flowc.lower import module_key, py_name
from flowc.program import Reader
from flowc.syntax import walk
from flowc.typeinfo import is_data
from flowc.typeterms import term, tool_description

if TYPE_CHECKING:
    from flowc.compile_cache import CompileCache


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    #: the parameter's type term (docs/abi.md); None when it is not data (a function, a task)
    type: Any
    #: a `Task`, which a checkpoint may carry parked on its only Tool call
    task: bool = False


@dataclass(frozen=True, slots=True)
class Function:
    """A top-level function with a body, as a host may name it."""

    identity: str  # "<module>.<name>"
    module: str
    name: str
    #: how the sandbox child finds the function: "<module key>.<python name>"
    key: str
    file: str
    line: int
    pub: bool
    generic: bool
    test: bool
    #: the Tool this function fakes in `flow test` (`@fake`), and whether it takes the call count first
    fake_of: str | None
    fake_counted: bool
    #: the signature is polymorphic in an effect: it cannot be a checkpoint's function
    effect_generic: bool
    params: tuple[Param, ...]
    #: the result's type term; None when the result is not data
    result: Any
    #: the declared result is a `Result` (a run that ends with its `Err` exits 4)
    returns_result: bool
    #: the named types the terms of `params` and `result` refer to
    defs: Mapping[str, Any]
    #: identities of the top-level functions and Tools the body refers to
    refers_to: tuple[str, ...]
    #: takes its type arguments at run time, as a last argument (flowc/runtypes.py): a fake of a
    #: generic Tool that does is handed the call's
    runtime_typed: bool = False

    @property
    def data_only(self) -> bool:
        """Every parameter is data: the function can be given input as JSON (an entry)."""
        return not self.generic and all(p.type is not None and not p.task for p in self.params)

    @property
    def checkpointable(self) -> bool:
        """A checkpoint may name it: non-generic, every parameter data or a task, no test or fake."""
        return not (self.generic or self.test or self.fake_of is not None or self.effect_generic) \
            and all(p.type is not None or p.task for p in self.params)


@dataclass(frozen=True, slots=True)
class ModuleSource:
    identity: str
    file: str
    source: str


@dataclass(frozen=True, slots=True)
class Compiled:
    """What compiling a program produced. `ok` is False when any diagnostic is an error; then
    only `diagnostics`, `modules` and `root_file` are meaningful."""

    root_file: str
    diagnostics: tuple[Diagnostic, ...]
    places: tuple[Any, ...]  # checkpoint places (`flowc.check.Place`), as `flow check` lists them
    modules: tuple[ModuleSource, ...]
    identity: str | None  # "sha256:<hex>" over every module's tree (None when not ok)
    root: str | None  # the root module's identity
    functions: Mapping[str, Function]
    tools: Mapping[str, dict]  # Tool identity -> its description (`flow tools`), with `type_params`
    generated: Generated | None
    #: the `[pins]` the identity covers, `(repo, commit)` sorted by repo: a recorded run keeps
    #: them (Start `pins`) so the program re-forms from its recorded sources alone
    pins: tuple[tuple[str, str | None], ...] = ()

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    def sources(self) -> dict[str, str]:
        return {m.file: m.source for m in self.modules}

    def entry(self, name: str) -> Function | None:
        """A top-level function of the root module named `name` (not necessarily `pub`)."""
        return self.functions.get(f"{self.root}.{name}")

    def reachable_tools(self, identity: str) -> dict[str, dict]:
        """Every Tool a call of the function `identity` can reach, by identity, sorted."""
        seen: set[str] = set()
        found: set[str] = set()
        work = [identity]
        while work:
            current = work.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in self.tools:
                found.add(current)
                continue
            function = self.functions.get(current)
            if function is not None:
                work.extend(function.refers_to)
        return {tool: self.tools[tool] for tool in sorted(found)}

    def checkpoint_functions(self) -> dict[str, Function]:
        """The functions a checkpoint may name, keyed as the child finds them."""
        return {f.key: f for _, f in sorted(self.functions.items()) if f.checkpointable}

    def tests(self) -> list[Function]:
        """The root module's `@test` functions, in source order."""
        return sorted((f for f in self.functions.values() if f.test and f.module == self.root), key=lambda f: f.line)

    def fakes(self) -> dict[str, Function]:
        """Tool identity -> the `@fake` that stands in for it in `flow test`."""
        return {f.fake_of: f for _, f in sorted(self.functions.items()) if f.fake_of is not None}


def compile(root_file: str, read: Reader, *, generate: bool = True, std_read: Reader | None = None,
            parse_cache: dict | None = None, disk: DiskChecks | None = DISK,
            cache: "CompileCache | None" = None) -> Compiled:
    """Compile the program rooted at `root_file`, reading its files with `read` (and std modules
    with `std_read` when they come from elsewhere than the package, as a recorded run's do).
    Never raises on bad input: every problem is a diagnostic. `generate=False` skips code
    generation (a host that only needs the manifest). `disk` keeps the modules read inside the
    program's root (flowc/disk.py); `disk=None` when `read` reads no real files. With `cache`
    (flowc/compile_cache.py), an unchanged program's last result is reused once every file it
    read reads the same again."""
    if cache is not None:
        return cache.compile(
            lambda r, s, d: _compile(root_file, r, generate, s, parse_cache, d),
            root_file, read, std_read, disk, (generate,))
    return _compile(root_file, read, generate, std_read, parse_cache, disk)


def _compile(root_file: str, read: Reader, generate: bool, std_read: Reader | None, parse_cache: dict | None,
             disk: DiskChecks | None) -> Compiled:
    checked = check_program(root_file, read, parse_cache, std_read=std_read, disk=disk)
    modules = tuple(ModuleSource(m.identity, m.file, m.source) for m in checked.program.modules)
    if not checked.ok:
        return Compiled(root_file, tuple(checked.diagnostics), tuple(checked.places), modules, None, None, {}, {},
                        None)
    functions, tools = _manifest(checked)
    generated = generate_cached(checked) if generate else None
    return Compiled(root_file, tuple(checked.diagnostics), tuple(checked.places), modules, checked.identity,
                    checked.program.root, functions, tools, generated,
                    tuple((pin.repo, pin.commit) for pin in checked.program.pins))


def _manifest(checked: Checked) -> tuple[dict[str, Function], dict[str, dict]]:
    from flowc.check import effect_param_names
    from flowc.runtypes import runtime_typed

    env = checked.env
    refs = checked.facts.refs
    typed = runtime_typed(env, checked.facts)
    functions: dict[str, Function] = {}
    tools: dict[str, dict] = {}
    for identity in sorted(env.fns):
        fn = env.fns[identity]
        if fn.tool:
            description = tool_description(env, fn)
            description["type_params"] = [p.name for p in fn.decl.type_params]
            tools[identity] = description
            continue
        if fn.intrinsic or fn.decl.body is None:
            continue
        defs: dict[str, Any] = {}
        params = tuple(Param(p.name, None, True) if _is_task(t) else Param(p.name, _data_term(env, t, defs))
                       for p, t in zip(fn.decl.params, fn.sig.params))
        ret = fn.sig.ret
        target = fn.fake_target
        functions[identity] = Function(
            identity=identity, module=fn.module, name=fn.name, key=f"{module_key(fn.module)}.{py_name(fn.name)}",
            file=env.modules[fn.module].file, line=fn.decl.span.line, pub=fn.pub, generic=bool(fn.decl.type_params),
            test=fn.test, fake_of=target.identity if target is not None else None,
            fake_counted=target is not None and len(fn.decl.params) == len(target.decl.params) + 1,
            effect_generic=bool(effect_param_names(fn.sig)), params=params, result=_data_term(env, ret, defs),
            returns_result=isinstance(ret, T.TCon) and ret.name == T.RESULT, defs=dict(sorted(defs.items())),
            refers_to=_references(fn.decl.body, refs), runtime_typed=identity in typed)
    return functions, tools


def _data_term(env, t: T.Type, defs: dict[str, Any]) -> Any:
    if not is_data(env, t):
        return None
    return term(env, t, defs)


def _is_task(t: T.Type) -> bool:
    return isinstance(t, T.TCon) and t.name == "Task"


def _references(body, refs: dict) -> tuple[str, ...]:
    """The top-level functions and Tools a body names (the checker's resolved references)."""
    found: set[str] = set()
    for node in walk(body):
        ref = refs.get(id(node))
        if ref is not None and ref[0] == "fn":
            found.add(ref[1].identity)
    return tuple(sorted(found))
