"""The sandbox refuses escape attempts before they run, and runs what the compiler emits.

Three independent layers stand between generated code and the host process:
1. `sandbox.verify` (a static whitelist over the AST, driven by `flowdata.policy`),
2. RestrictedPython's restricted compile (its own refusals, and the guard calls it inserts),
3. the guards and the empty builtins at run time.
The corpus below attacks layer 1 with the whole pipeline (`sandbox.loader.load`); the later
tests switch layer 1 off, or weaken one of its rules, to show layers 2 and 3 holding alone.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import types

import pytest
from RestrictedPython import compile_restricted_exec
from RestrictedPython.transformer import INSPECT_ATTRIBUTES

from flowdata import policy
from sandbox import guards
from sandbox.guards import GUARDS, SandboxDenied
from sandbox.loader import compile_module, load
from flowdata.policy import POLICY, SAFE_BUILTINS
from sandbox.verify import Refusal, SandboxRefusal, verify


def lib_source() -> str:
    """A harmless module the attacks reach for (`m_lib`)."""
    return (
        "def helper(x):\n"
        "    return x\n"
        "\n"
        "def gen(x):\n"
        "    got = yield x\n"
        "    return got\n"
    )


def attempt(body: str) -> str:
    """Wrap an attack as the body of a generated function `main(x, d)`."""
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return f'"""generated from attack.flow"""\n\ndef main(x, d):\n{lines}'


# (id, module source, a fragment the refusal must name)
CORPUS = [
    ("dunder-class", attempt("return x.__class__"), "__class__"),
    ("subclasses", attempt("return m_lib.helper.__class__.__base__.__subclasses__()"), "__subclasses__"),
    ("mro-dunder", attempt("return x.__class__.__mro__"), "__mro__"),
    ("mro-method", attempt("return m_lib.helper.mro()"), "`mro`"),
    ("func-globals", attempt("return m_lib.helper.__globals__"), "__globals__"),
    ("func-code", attempt("return m_lib.helper.__code__"), "__code__"),
    ("func-builtins", attempt("return m_lib.helper.__builtins__"), "__builtins__"),
    ("dict-attr", attempt("return m_lib.__dict__"), "__dict__"),
    ("gi-frame", attempt("g = m_lib.gen(x)\nreturn g.gi_frame"), "gi_frame"),
    ("gi-code", attempt("g = m_lib.gen(x)\nreturn g.gi_code"), "gi_code"),
    ("gi-yieldfrom", attempt("g = m_lib.gen(x)\nreturn g.gi_yieldfrom"), "gi_yieldfrom"),
    ("f-globals", attempt("return m_lib.gen(x).gi_frame.f_globals"), "f_globals"),
    ("f-back", attempt("return m_lib.gen(x).gi_frame.f_back"), "f_back"),
    ("f-locals", attempt("return rt_frame.f_locals"), "f_locals"),
    ("tb-frame", attempt("return rt_error.tb_frame"), "tb_frame"),
    ("cr-frame", attempt("return rt_coro.cr_frame"), "cr_frame"),
    ("ag-frame", attempt("return rt_agen.ag_frame"), "ag_frame"),
    ("import", 'import os\n\ndef main(x):\n    return os.system("id")\n', "import os"),
    ("import-in-function", attempt("import subprocess\nreturn subprocess"), "import subprocess"),
    ("from-import", "from os import system\n\ndef main(x):\n    return system\n", "from os import system"),
    ("dunder-import", attempt('return __import__("os")'), "__import__"),
    ("open", attempt('return open("/etc/passwd")'), "`open`"),
    ("eval", attempt('return eval("1")'), "`eval`"),
    ("exec", attempt('exec("import os")'), "`exec`"),
    ("compile", attempt('return compile("1", "f", "eval")'), "`compile`"),
    ("getattr-built-name", attempt('return getattr(x, "_" + "_class__")'), "`getattr`"),
    ("setattr", attempt('setattr(m_lib, "helper", x)'), "`setattr`"),
    ("type", attempt("return type(x)"), "`type`"),
    ("vars", attempt("return vars()"), "`vars`"),
    ("globals", attempt("return globals()"), "`globals`"),
    ("locals", attempt("return locals()"), "`locals`"),
    ("dir", attempt("return dir(x)"), "`dir`"),
    ("id", attempt("return id(x)"), "`id`"),
    ("hash", attempt("return hash(x)"), "`hash`"),
    ("object", attempt("return object"), "`object`"),
    ("super", attempt("return super()"), "`super`"),
    ("memoryview", attempt("return memoryview(x)"), "`memoryview`"),
    ("format-attribute-walk", attempt('return "{0.__class__}".format(x)'), "`format`"),
    ("format-map", attempt('return "{x}".format_map(d)'), "`format_map`"),
    ("format-builtin", attempt('return format(x, "")'), "`format`"),
    ("f-string", attempt('return f"{x.__class__}"'), "JoinedStr"),
    ("class", "class X:\n    pass\n\ndef main(x):\n    return X\n", "ClassDef `class X:"),
    ("try-swallow", attempt("try:\n    m_lib.helper(x)\nexcept BaseException:\n    pass"), "Try"),
    ("with", attempt("with x:\n    pass"), "With"),
    ("lambda", attempt("return lambda: x"), "Lambda"),
    ("del", attempt("del x"), "Delete `del x`"),
    ("global", attempt("global y\ny = 1"), "Global `global y`"),
    ("nonlocal", attempt("def inner():\n    nonlocal x\n    x = 1\nreturn inner"), "Nonlocal"),
    ("decorator", "@rt_wrap\ndef main(x):\n    return x\n", "decorator `@rt_wrap`"),
    ("print", attempt("print(x)"), "`print`"),
    ("breakpoint", attempt("breakpoint()"), "`breakpoint`"),
    ("help", attempt("help()"), "`help`"),
    ("input", attempt("return input()"), "`input`"),
    ("builtins-subscript", attempt('return __builtins__["open"]'), "__builtins__"),
    ("underscore-name", attempt("_x = 1\nreturn _x"), "`_x`"),
    ("underscore-param", "def main(_secret):\n    return _secret\n", "parameter `_secret`"),
    ("underscore-function", "def _hidden(x):\n    return x\n", "function name `_hidden`"),
    ("underscore-keyword", attempt("return m_lib.helper(_x=1)"), "keyword argument `_x`"),
    ("rebind-guard", attempt("_getattr_ = m_lib.helper\nreturn x.y"), "`_getattr_`"),
    ("rebind-module", attempt("m_lib = x\nreturn m_lib"), "name `m_lib`"),
    ("define-runtime-name", "def rt_invoke(op, payload):\n    return None\n", "function name `rt_invoke`"),
    ("monkeypatch-module", attempt("m_lib.helper = x"), "assignment to attribute `m_lib.helper`"),
    ("item-store", attempt("d[0] = x"), "assignment to item `d[0]`"),
    ("augmented-item", attempt("d[0] += 1"), "augmented assignment `d[0] += 1`"),
    ("double-star-call", attempt("return m_lib.helper(**d)"), "`**d` in a call"),
    ("double-star-dict", attempt("return {**d}"), "`**d` in a dict literal"),
    ("star-call", attempt("return m_lib.helper(*x)"), "`*` unpacking `*x`"),
    ("unknown-builtin", attempt("return len(x)"), "name `len`"),
    ("comprehension-walk", attempt("return [c for c in x.__class__.__bases__]"), "__bases__"),
    ("for-loop", attempt("for c in x:\n    pass"), "For"),
    ("async-def", "async def main(x):\n    return await x\n", "AsyncFunctionDef"),
    ("walrus-underscore", attempt("return (_y := x)"), "name `_y`"),
    ("walrus-rebind-module", attempt("return (m_lib := x)"), "name `m_lib`"),
    ("raise", attempt("raise x"), "Raise"),
    ("assert", attempt("assert x"), "Assert"),
    ("set-literal", attempt('return {"a", "b"}'), "Set"),
    ("power", attempt("return 10 ** 10 ** 10"), "Pow"),
    ("float-constant", attempt("return 1.5"), "of type float"),
    ("annotation", "def main(x: rt_any) -> rt_any:\n    return x\n", "annotation `rt_any`"),
    ("fullwidth-eval", attempt('return ｅｖａｌ("1")'), "`eval`"),
    ("fullwidth-mro", attempt("return m_lib.helper.ｍｒｏ()"), "`mro`"),
    ("syntax-error", attempt("return x +"), "syntax error"),
    ("null-byte", attempt("return x") + "\x00", "syntax error"),
]


@pytest.mark.parametrize("source,fragment", [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_escape_attempt_is_refused_before_running(source: str, fragment: str):
    """Every attempt is refused by load(), no code runs, and the refusal names the thing."""
    ran = []
    runtime = {"rt_mark": lambda: ran.append(1), "rt_wrap": lambda f: f}
    with pytest.raises(SandboxRefusal) as caught:
        load([("lib", "lib.py", lib_source()), ("attack", "attack.py", source)], runtime)
    assert fragment in str(caught.value), str(caught.value)
    assert ran == []
    for refusal in caught.value.refusals:
        assert refusal.filename == "attack.py"
        assert "altered" in refusal.hint


def test_corpus_is_large_and_distinct():
    """The corpus has at least 30 attempts, each with its own id."""
    ids = [c[0] for c in CORPUS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


def test_refusal_carries_line_column_and_hint():
    """A refusal points at the offending node and says what to do."""
    [refusal] = verify(attempt("y = x\nreturn y.__class__"), "gen/attack.py")
    assert (refusal.line, refusal.column) == (5, 11)
    assert refusal.what == "attribute `__class__` in `y.__class__`"
    assert "flowc build" in refusal.hint
    assert str(refusal).startswith("gen/attack.py:5:11: refused attribute `__class__`")


def test_every_refusal_is_reported_at_once():
    """verify() collects all findings instead of stopping at the first."""
    refusals = verify(attempt("import os\nreturn eval(x.__class__)"), "a.py")
    whats = " | ".join(r.what for r in refusals)
    assert "import os" in whats and "`eval`" in whats and "__class__" in whats


def test_refusals_from_all_modules_are_raised_together_and_nothing_runs():
    """load() verifies every module before executing any of them."""
    ran = []
    good = "rt_mark()\n\ndef main(x):\n    return x\n"
    with pytest.raises(SandboxRefusal) as caught:
        load([("good", "good.py", good), ("bad1", "bad1.py", attempt("return x._y")),
              ("bad2", "bad2.py", "import os\n")], {"rt_mark": lambda: ran.append(1)})
    assert {r.filename for r in caught.value.refusals} == {"bad1.py", "bad2.py"}
    assert ran == []


# -- layers 2 and 3 alone -----------------------------------------------------------------------

def run_unverified(source: str, injected: dict | None = None) -> dict:
    """RestrictedPython compile and exec with the loader's globals, skipping verify()."""
    result = compile_restricted_exec(source, "unverified.py")
    if result.errors:
        raise SandboxRefusal([Refusal("unverified.py", 0, 0, e, "") for e in result.errors])
    env = {"__builtins__": dict(SAFE_BUILTINS), **GUARDS, **(injected or {})}
    exec(result.code, env)
    return env


# Attempts RestrictedPython refuses on its own, without verify().
RESTRICTED_COMPILE_REFUSES = [
    ("dunder-class", attempt("return x.__class__"), "__class__"),
    ("dunder-import", attempt('return __import__("os")'), "__import__"),
    ("underscore-name", attempt("_x = 1"), "_x"),
    ("gi-frame", attempt("return m_lib.gen(x).gi_frame"), "gi_frame"),
    ("f-globals", attempt("return rt_frame.f_globals"), "f_globals"),
    ("tb-frame", attempt("return rt_error.tb_frame"), "tb_frame"),
    ("eval", attempt('return eval("1")'), "Eval calls"),
    ("exec", attempt('exec("1")'), "Exec calls"),
    ("builtins-subscript", attempt('return __builtins__["open"]'), "__builtins__"),
    ("nonlocal", attempt("def inner():\n    nonlocal x\nreturn inner"), "Nonlocal"),
    ("async", "async def main(x):\n    return 1\n", "AsyncFunctionDef"),
    ("augmented-attribute", attempt("m_lib.helper += 1"), "Augmented assignment of attributes"),
]


@pytest.mark.parametrize(
    "source,fragment", [c[1:] for c in RESTRICTED_COMPILE_REFUSES],
    ids=[c[0] for c in RESTRICTED_COMPILE_REFUSES],
)
def test_restricted_compile_is_an_independent_net(source: str, fragment: str):
    """With verify() skipped, RestrictedPython still refuses these at compile time."""
    with pytest.raises(SandboxRefusal) as caught:
        run_unverified(source)
    assert fragment in str(caught.value)


def test_format_string_attribute_walk_stopped_by_getattr_guard():
    """`"{0.__class__}".format(x)` compiles under RestrictedPython; the `_getattr_` guard stops it."""
    env = run_unverified(attempt('return "{0.__class__}".format(x)'))
    with pytest.raises(SandboxDenied, match="`format` of a str value"):
        env["main"](1, {})


def test_mro_stopped_by_getattr_guard():
    """`.mro()` compiles under RestrictedPython; the guard refuses it at run time."""
    env = run_unverified(attempt("return rt_cls.mro()"), {"rt_cls": int})
    with pytest.raises(SandboxDenied, match="`mro`"):
        env["main"](1, {})


def test_gi_frame_stopped_by_getattr_guard_on_a_real_generator():
    """If `gi_frame` ever slipped past both compile layers, the guard refuses it on a generator."""
    def gen():
        yield 1
    with pytest.raises(SandboxDenied, match="`gi_frame` of a generator"):
        guards.guarded_getattr(gen(), "gi_frame")


def test_import_compiles_under_restricted_python_but_finds_no_import_machinery():
    """RestrictedPython accepts `import os`; with no builtins there is no `__import__`."""
    with pytest.raises(ImportError, match="__import__ not found"):
        run_unverified("import os\n")


@pytest.mark.parametrize("name", ["open", "getattr", "type", "globals", "vars", "len"])
def test_builtins_are_absent_at_run_time(name: str):
    """Builtins that pass RestrictedPython do not exist in the sandbox (NameError)."""
    env = run_unverified(attempt(f"return {name}"))
    with pytest.raises(NameError, match=name):
        env["main"](1, {})


def test_print_compiles_under_restricted_python_but_has_no_collector():
    """RestrictedPython rewrites `print` to a `_print_` collector, which the sandbox never injects."""
    env = run_unverified(attempt("print(x)"))
    with pytest.raises(NameError, match="_print_"):
        env["main"](1, {})


def test_item_store_stopped_by_write_guard():
    """`d[0] = x` compiles to `_write_(d)[0] = x`, and `_write_` refuses."""
    env = run_unverified(attempt("d[0] = x"))
    with pytest.raises(SandboxDenied, match="writing into a dict"):
        env["main"](1, {})


def test_attribute_store_stopped_by_write_guard():
    """`m_lib.helper = x` (monkeypatching another module) is refused by `_write_` too."""
    lib = types.SimpleNamespace(helper=1)
    env = run_unverified(attempt("m_lib.helper = x"), {"m_lib": lib})
    with pytest.raises(SandboxDenied, match="writing into a SimpleNamespace"):
        env["main"](2, {})
    assert lib.helper == 1


def test_weakened_verify_is_caught_by_restricted_compile_through_load():
    """With `gi_frame` dropped from the static list, load() still refuses (RestrictedPython)."""
    weak = dataclasses.replace(POLICY, forbidden_attributes=POLICY.forbidden_attributes - {"gi_frame"})
    with pytest.raises(SandboxRefusal, match=r"\(RestrictedPython\).*gi_frame") as caught:
        load([("lib", "lib.py", lib_source()),
              ("attack", "attack.py", attempt("return m_lib.gen(x).gi_frame"))], {}, policy=weak)
    assert "sandbox bug" in caught.value.refusals[0].hint


def test_weakened_verify_is_caught_by_guard_through_load():
    """With `format` dropped from the static list, the loaded code is stopped by `_getattr_`."""
    weak = dataclasses.replace(POLICY, forbidden_attributes=POLICY.forbidden_attributes - {"format"})
    source = attempt('return "{0.__class__}".format(x)')
    with pytest.raises(SandboxRefusal):
        load([("attack", "attack.py", source)], {})
    loaded = load([("attack", "attack.py", source)], {}, policy=weak)
    with pytest.raises(SandboxDenied, match="format"):
        loaded["attack"].main(1, {})


# -- the guards, one by one ---------------------------------------------------------------------

def test_guards_are_exactly_the_policy_hooks():
    """The loader injects one guard per hook name the policy lists, and nothing else."""
    assert set(GUARDS) == policy.GUARD_NAMES


def test_getattr_guard_reads_ordinary_attributes():
    ns = types.SimpleNamespace(next=3)
    assert guards.guarded_getattr(ns, "next") == 3
    assert guards.guarded_getattr("ab", "upper")() == "AB"


@pytest.mark.parametrize("name", ["_x", "__class__", "__globals__", "gi_frame", "f_back", "format", "mro"])
def test_getattr_guard_refuses_private_and_forbidden_names(name: str):
    with pytest.raises(SandboxDenied, match=f"`{name}`"):
        guards.guarded_getattr("text", name)


def test_getitem_guard_is_operator_getitem():
    """Items, including slices, read through `operator.getitem`."""
    assert guards.guarded_getitem is operator.getitem
    env = run_unverified(attempt("return (x[0], x[1:], x[:-1], x[::2], d['k'])"))
    assert env["main"]([1, 2, 3], {"k": "v"}) == (1, [2, 3], [1, 2], [1, 3], "v")


def test_getiter_guard_is_iter():
    assert guards.guarded_getiter is iter


def test_unpack_sequence_guard_leaves_unpacking_to_cpython():
    """Nested and starred tuple targets unpack as in plain Python."""
    env = run_unverified(attempt("a, (b, c), *rest = x\nreturn a, b, c, rest"))
    assert env["main"]([1, (2, 3), 4, 5], {}) == (1, 2, 3, [4, 5])
    with pytest.raises(ValueError):
        env["main"]([1], {})


def test_iter_unpack_sequence_guard_iterates():
    it = guards.guarded_iter_unpack_sequence([(1, 2), (3, 4)], {"childs": (), "min_len": 2}, iter)
    assert [a + b for a, b in it] == [3, 7]


def test_inplacevar_guard_applies_allowed_operators():
    env = run_unverified(attempt("n = 10\nn += 5\nn -= 1\nn *= 2\nn //= 3\nn %= 5\nreturn n"))
    assert env["main"](0, {}) == ((10 + 5 - 1) * 2 // 3) % 5
    assert guards.guarded_inplacevar("/=", 3, 2) == 1.5


def test_inplacevar_guard_refuses_other_operators():
    with pytest.raises(SandboxDenied, match=r"`\*\*=`"):
        guards.guarded_inplacevar("**=", 2, 100)


def test_write_guard_refuses_everything():
    with pytest.raises(SandboxDenied, match="writing into a list"):
        guards.guarded_write([1])


# -- the policy is data ---------------------------------------------------------------------------

def test_policy_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        POLICY.forbidden_names = frozenset()  # type: ignore[misc]
    assert isinstance(POLICY.allowed_nodes, frozenset)
    assert len(SAFE_BUILTINS) == 0


def test_policy_node_names_exist_in_ast():
    """A misspelt node name would silently allow nothing; every listed name is an ast class."""
    for name in POLICY.allowed_nodes:
        assert isinstance(getattr(ast, name, None), type), name


def test_forbidden_attributes_cover_restricted_pythons_list():
    assert INSPECT_ATTRIBUTES <= POLICY.forbidden_attributes


def test_limits_are_documented_values():
    limits = policy.LIMITS
    assert limits.address_space_bytes == 2 * 1024**3
    assert (limits.cpu_seconds, limits.file_size_bytes, limits.open_files, limits.processes) == (300, 0, 32, 0)


# -- legitimate generated code loads and runs -----------------------------------------------------

PLANNER = '''"""generated from planner.flow (program sha256:0000)"""

LIMIT = 3


def split(xs):
    head = xs[0]
    tail = xs[1:]
    first, *others = tail
    return (head, first, others)


def count_to(n):
    i = 0
    total = 0
    while True:
        if i >= n:
            break
        elif i % 2 == 0:
            total += i
        else:
            total = total - 1
        i += 1
    return total


def describe(x):
    kind = "small" if x < LIMIT else "large"
    ok = not (x is None) and (x in [1, 2, 3] or x != 0)
    return {"kind": kind, "ok": ok, "raw": b"\\x00", "pair": (x, -x), "div": x // 2}


def step(state):
    reply = yield rt_call("planner.next", {"state": state})
    return m_util.wrap(reply)


def run(state):
    a = yield from step(state)
    b = yield from m_util.twice(a)
    return rt_done(b)


def first_ok(pair):
    if (tag := pair[0]) is tag and tag == "Ok":
        return pair[1]
    return None


def make_adder(k):
    def add(v):
        return v + k
    return add
'''

UTIL = '''"""generated from util.flow"""


def wrap(v):
    return ("Ok", v)


def twice(v):
    x = yield rt_call("util.echo", {"v": v})
    y = yield rt_call("util.echo", {"v": x})
    return m_planner.split([x, y, 0])
'''


def test_legitimate_modules_load_and_run():
    """Generators with yield from, while/break, unpacking, slices, `:=` in a condition, closures
    and cross-module calls work."""
    runtime = {"rt_call": lambda op, payload: (op, payload), "rt_done": lambda v: ("done", v)}
    loaded = load([("planner", "planner.py", PLANNER), ("util", "util.py", UTIL)], runtime)
    planner = loaded["planner"]
    assert planner.split([1, 2, 3, 4]) == (1, 2, [3, 4])
    assert planner.count_to(6) == 0 + 2 + 4 - 3
    assert planner.describe(5) == {"kind": "large", "ok": True, "raw": b"\x00", "pair": (5, -5), "div": 2}
    assert planner.make_adder(2)(40) == 42
    assert (planner.first_ok(("Ok", 1)), planner.first_ok(("Err", 2))) == (1, None)
    assert planner.LIMIT == 3

    # Drive the generator the way the scheduler does: effects out, replies in.
    gen = planner.run("s0")
    assert next(gen) == ("planner.next", {"state": "s0"})
    assert gen.send("r1") == ("util.echo", {"v": ("Ok", "r1")})
    assert gen.send("e1") == ("util.echo", {"v": "e1"})
    with pytest.raises(StopIteration) as stop:
        gen.send("e2")
    assert stop.value.value == ("done", ("e1", "e2", [0]))


def test_a_name_read_before_its_binding_is_allowed_and_one_bound_nowhere_is_not():
    """The verifier judges reads of names once it has walked the whole module: a function may
    call one defined after it and read a constant bound below it; a name the module binds
    nowhere is refused wherever it is read, however often."""
    later = "def first(x):\n    return second(x) + LATER\n\ndef second(y):\n    return y\n\nLATER = 1\n"
    assert verify(later, "m.py") == []
    assert load([("m", "m.py", later)], {})["m"].first(2) == 3
    nowhere = "def first(x):\n    return nowhere(x)\n\ndef second(x):\n    nowhere = x\n    return x\n"
    assert verify(nowhere, "m.py") == []  # bound in a function: a read elsewhere fails at run time, as in Python
    refused = verify("def first(x):\n    return nowhere(x) + nowhere(x)\n", "m.py")
    assert [(r.line, r.column, r.what) for r in refused] == [(2, 11, "name `nowhere`"), (2, 24, "name `nowhere`")]


def test_a_run_leaves_out_every_step_even_a_whole_body():
    """`count_steps=False` compiles without a single `rt_step()`, and a body that held nothing
    else is left a `pass`; `flow test`'s compile keeps them all."""
    source = ("def f(x):\n    rt_step()\n    if x:\n        rt_step()\n    else:\n        rt_step()\n"
              "    while x > 5:\n        rt_step()\n        x = x - 1\n    return x\n")
    for count_steps, names in ((False, set()), (True, {"rt_step"})):
        code, refusals = compile_module("m.py", source, count_steps=count_steps)
        assert refusals == []
        steps = []
        namespace = {"__builtins__": {}, **GUARDS, "rt_step": lambda: steps.append(1)}
        exec(code, namespace)
        assert namespace["f"](7) == 5 and namespace["f"](0) == 0
        assert {"rt_step"} & set(namespace["f"].__code__.co_names) == names
        assert len(steps) == (0 if not count_steps else 1 + 1 + 2 + 1 + 1)


def test_namespaces_hold_only_public_module_names():
    loaded = load([("planner", "planner.py", PLANNER), ("util", "util.py", UTIL)],
                  {"rt_call": None, "rt_done": None})
    assert sorted(vars(loaded["util"])) == ["twice", "wrap"]
    assert "rt_call" not in vars(loaded["planner"])


def test_restricted_code_references_only_policy_guards():
    """A module using every allowed construct needs no `_` global beyond GUARD_NAMES.

    (`__doc__` is the module docstring, stored by CPython itself.)
    """
    code, refusals = compile_module("planner.py", PLANNER)
    assert refusals == []
    used: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        used.update(n for n in current.co_names if n.startswith("_") and n != "__doc__")
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    assert used and used <= policy.GUARD_NAMES


def test_golden_modules_are_sandbox_clean():
    """Every committed golden module passes verify() (none yet is fine)."""
    from pathlib import Path

    golden = Path(__file__).resolve().parents[1] / "tests" / "golden"
    for path in sorted(golden.rglob("*.py")):
        assert verify(path.read_text(encoding="utf-8"), str(path)) == [], path


@pytest.mark.parametrize("key", ["", "1x", "_x", "a-b"])
def test_loader_refuses_bad_module_keys(key: str):
    with pytest.raises(ValueError, match="module key"):
        load([(key, "k.py", "")], {})


def test_loader_refuses_unprefixed_injected_globals():
    with pytest.raises(ValueError, match="lacks an injected prefix"):
        load([("a", "a.py", "")], {"invoke": print})
    with pytest.raises(ValueError, match="lacks an injected prefix"):
        load([("a", "a.py", "")], {"_getattr_": getattr})


def test_loader_refuses_injected_module_collision():
    with pytest.raises(ValueError, match="collides"):
        load([("a", "a.py", "")], {"m_a": types.SimpleNamespace()})


def test_injected_other_modules_are_reachable():
    """Pre-loaded modules (e.g. std) can be injected as `m_` globals."""
    std = types.SimpleNamespace(inc=lambda v: v + 1)
    loaded = load([("a", "a.py", "def main(x):\n    return m_std.inc(x)\n")], {"m_std": std})
    assert loaded["a"].main(1) == 2


def test_item_reads_are_plain_while_the_guard_is_getitem_and_writes_stay_guarded():
    """`_getitem_` is `operator.getitem`, so the loader leaves `a[i]` as it is (the guard call
    would do the same, slower); an item write still goes through `_write_`, which refuses."""
    from sandbox import loader

    assert GUARDS["_getitem_"] is operator.getitem and loader._TRANSFORMER is loader._PlainItemReads
    loaded = load([("attack", "attack.py", attempt("return x[1] + d['k'][0]"))], {})
    main = loaded["attack"].main
    assert "_getitem_" not in main.__code__.co_names
    assert main((1, 2), {"k": [40]}) == 42
    with pytest.raises(SandboxRefusal):  # verify refuses an item write first
        load([("attack", "attack.py", attempt("d['k'] = 1\nreturn d"))], {})
    # ... and past verify, the transformer still guards it
    result = compile_restricted_exec("def f(d):\n    d[0] = 1\n    del d[1]\n", "w.py", policy=loader._TRANSFORMER)
    [function] = [c for c in result.code.co_consts if isinstance(c, types.CodeType)]
    assert "_write_" in function.co_names


# -- the operating-system layers (sandbox/lockdown.py): one attempt per layer ----------------
#
# `tests/sandbox_lockdown_child.py` locks down as `sandbox.child` does and then runs plain Python
# past the language layers, standing for generated code that got out of them. Each layer is
# shown alone (FLOW_SANDBOX_WITHOUT leaves the others out), and what a kernel without it gives.

import errno as _errno  # noqa: E402
import os as _os  # noqa: E402
import signal as _signal  # noqa: E402
import socket as _socket  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

from flowrt import syscall_filter  # noqa: E402
from flowrt.sandbox_process import LAYER_NAMES, Child, ChildDied  # noqa: E402
from sandbox import lockdown  # noqa: E402

LOCKDOWN_CHILD = str(_Path(__file__).resolve().with_name("sandbox_lockdown_child.py"))
CHILD_LAYERS = set(lockdown.LAYERS)
FORBIDDEN = ("open", "write_file", "connect", "fork", "exec", "ptrace", "setuid", "signal_host")


def locked_child(monkeypatch, without: str = "") -> Child:
    monkeypatch.setenv("FLOW_SANDBOX_WITHOUT", without)
    child = Child.start(argv_tail=[LOCKDOWN_CHILD], lockdown=True)
    child.send({"op": "hello"}, timeout=10)
    child.recv(timeout=10)  # the lockdown report arrives first and is taken into child.layers
    assert child.lockdown_reported
    return child


def try_in_child(child: Child, op: str, **fields) -> dict:
    """{"done": ...} if the child survived the attempt, {"killed": signal} if it did not."""
    try:
        child.send({"op": op, **fields}, timeout=10)
        return child.recv(timeout=10)
    except ChildDied as died:
        return {"killed": died.signal}


def require(child: Child, layer: str) -> None:
    """A layer this kernel refused is reported with its reason; its attempts cannot be shown."""
    report = child.layers[layer]
    if not report["applied"]:
        assert report["detail"].startswith("missing: ") and len(report["detail"]) > len("missing: ")
        pytest.skip(f"{layer} is missing on this machine: {report['detail']}")


@pytest.fixture()
def listener():
    with _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        yield server.getsockname()[1]


@pytest.fixture()
def root_owned_dir(tmp_path):
    """A directory only its owner (the host's user) may write, that the child may reach."""
    folder = tmp_path / "owned"
    folder.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    return folder


def test_every_layer_is_reported_applied_or_missing_with_a_reason(monkeypatch):
    with locked_child(monkeypatch) as child:
        assert set(child.layers) == CHILD_LAYERS | {"process_group", "network", "rlimits", "wall_clock"}
        for name, layer in child.layers.items():
            assert layer["applied"] or layer["detail"].startswith("missing: "), (name, layer)
        assert child.missing_layers() == sorted(n for n, v in child.layers.items() if not v["applied"])


def test_the_locked_down_child_still_computes_allocates_and_collects(monkeypatch):
    with locked_child(monkeypatch) as child:
        assert try_in_child(child, "compute", n=10_000) == {"sum": 49_995_000}


@pytest.mark.parametrize("op", FORBIDDEN)
def test_seccomp_kills_a_child_that_tries(monkeypatch, op, listener, root_owned_dir):
    with locked_child(monkeypatch) as child:
        require(child, "seccomp")
        outcome = try_in_child(child, op, path=str(root_owned_dir / "x"), port=listener, pid=_os.getpid())
        assert outcome == {"killed": _signal.SIGSYS}
        assert not (root_owned_dir / "x").exists()


def test_a_seccomp_kill_is_explained(monkeypatch):
    with locked_child(monkeypatch) as child:
        require(child, "seccomp")
        with pytest.raises(ChildDied, match="system call the sandbox forbids"):
            child.send({"op": "open"}, timeout=10)
            child.recv(timeout=10)


def test_landlock_alone_denies_the_filesystem_tcp_and_signals(monkeypatch, listener, root_owned_dir):
    with locked_child(monkeypatch, "seccomp,network") as child:
        require(child, "landlock")
        assert try_in_child(child, "open", path="/etc/hostname") == {"done": False, "errno": _errno.EACCES}
        assert try_in_child(child, "write_file", path=str(root_owned_dir / "x")) == {"done": False, "errno": _errno.EACCES}
        assert not (root_owned_dir / "x").exists()
        abi = int(child.layers["landlock"]["detail"].split()[1].rstrip(":"))
        if abi >= 4:  # TCP connect is Landlock's from ABI 4: the network namespace is left out here
            assert try_in_child(child, "connect", port=listener) == {"done": False, "errno": _errno.EACCES}
        if abi >= 6:  # signals to outside the domain
            assert try_in_child(child, "signal_host") == {"done": False, "errno": _errno.EPERM}


def test_the_uid_alone_keeps_the_child_out_of_the_hosts_files_and_processes(monkeypatch, root_owned_dir):
    with locked_child(monkeypatch, "seccomp,landlock,user_namespace,capabilities") as child:
        require(child, "uid")
        if _os.geteuid() == 0:
            assert child.layers["uid"]["detail"].startswith("uid 65534")
        assert try_in_child(child, "write_file", path=str(root_owned_dir / "x")) == {"done": False, "errno": _errno.EACCES}
        assert try_in_child(child, "setuid")["errno"] in (_errno.EPERM, _errno.EINVAL)
        assert try_in_child(child, "ptrace", pid=_os.getpid()) == {"done": False, "errno": _errno.EPERM}


def test_no_capabilities_in_the_user_namespace(monkeypatch):
    with locked_child(monkeypatch, "seccomp,landlock") as child:
        require(child, "user_namespace")
        require(child, "capabilities")
        # unshare needs CAP_SYS_ADMIN, which the new user namespace granted and the child gave up
        assert try_in_child(child, "unshare_net") == {"done": False, "errno": _errno.EPERM}
        assert try_in_child(child, "setuid")["errno"] in (_errno.EPERM, _errno.EINVAL)


def test_a_kernel_without_the_layers_is_reported_and_the_attempts_then_succeed(monkeypatch, root_owned_dir):
    """What each layer stops, shown by its absence: with all of them left out the same attempts
    work, and the report says so (nothing is assumed)."""
    left_out = ("uid", "user_namespace", "capabilities", "landlock", "seccomp")
    with locked_child(monkeypatch, ",".join(left_out)) as child:
        for name in left_out:
            assert child.layers[name] == {"applied": False,
                                          "detail": "missing: left out on purpose (FLOW_SANDBOX_WITHOUT)"}
        assert child.missing_layers() == sorted(left_out)
        assert try_in_child(child, "open", path="/etc/hostname") == {"done": True}
        if _os.geteuid() == 0:  # as root the child could write the host's files
            assert try_in_child(child, "write_file", path=str(root_owned_dir / "x")) == {"done": True}
            assert (root_owned_dir / "x").exists()


def test_no_filter_from_the_host_is_reported_missing_with_the_reason(monkeypatch):
    monkeypatch.setattr(syscall_filter, "_PROGRAM", None)
    monkeypatch.setattr(syscall_filter, "_PROBLEM", "libseccomp is not available: simulated")
    with locked_child(monkeypatch) as child:
        assert child.layers["seccomp"] == {"applied": False,
                                           "detail": "missing: libseccomp is not available: simulated"}
        assert try_in_child(child, "open", path="/etc/hostname")["done"] is False  # Landlock still holds


def test_the_lockdown_probes_report_what_fails():
    with pytest.raises(lockdown.Missing, match="no seccomp filter"):
        lockdown.install_seccomp(b"")
    assert set(lockdown.LAYERS) <= set(LAYER_NAMES)


def test_the_filter_is_built_from_the_policy_and_cached(tmp_path, monkeypatch):
    program = syscall_filter.build()
    assert program and len(program) % 8 == 0
    assert syscall_filter.build(("read",)) != program
    monkeypatch.setattr(syscall_filter, "_PROGRAM", None)
    monkeypatch.setattr(syscall_filter, "_PROBLEM", None)
    assert syscall_filter.program() == (program, None)
