"""Type arguments at run time (issue 15, item 2, step 1): a generic function whose body makes its
type parameters into data (a generic Tool call, `json.decode`, a call to another such function)
takes its concrete type arguments as a hidden argument (flowc/runtypes.py), and puts them into the
terms it emits (sandbox/typeargs.py), so a call through a generic wrapper records the very type
the same call written out records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import flowc
import flowrt
from flowc import types as T
from flowc.files import read_text
from flowc.frontend import check_program
from flowc.typeterms import term_and_defs
from sandbox.typeargs import instantiate
from tests.forging import read_facts

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "generic_wrap" / "main.flow"
PLAN = {"Named": "main.Plan"}


def flow(*args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


def answer(prompt, call: flowrt.ToolCall):
    wanted = call.types["T"]
    if wanted == "Int":
        return len(prompt)
    if wanted == PLAN:
        return {"steps": [prompt]}
    return {"item": {"steps": ["boxed"]}, "note": prompt}


def test_generic_wrappers_call_the_tool_at_the_callers_types_and_replay_matched(tmp_path):
    seen: list[dict] = []

    def ask(prompt, call):
        seen.append(dict(call.types))
        return answer(prompt, call)

    outcome = flowrt.Host({"main.ask": ask}, runs_dir=str(tmp_path)).run(str(PROGRAM), {"goal": "g"}, entry="all")
    assert outcome.exit_code == 0, outcome
    assert json.loads(outcome.output_json) == {"Ok": [
        {"steps": ["wrapped: g"]}, {"item": {"steps": ["boxed"]}, "note": "wrapped: g"}, len("wrapped: g"),
        {"steps": ["wrapped: g"]}, {"steps": ["parsed"]}]}
    # get<Plan>, boxed<Plan> (asks Box<Plan>), later<Int> (through self tail calls and a spawned
    # lambda), and get named as a value at Plan.
    assert seen == [{"T": PLAN}, {"T": {"Named": "main.Box<main.Plan>"}}, {"T": "Int"}, {"T": PLAN}]
    calls = [f for f in read_facts(tmp_path / outcome.run_id) if f["kind"] == "Call"]
    box_types = calls[1]["types"][0]
    assert set(box_types["defs"]) == {"main.Box<main.Plan>", "main.Plan"}
    assert box_types["defs"]["main.Box<main.Plan>"]["args"] == [PLAN]
    # The call through the wrapper records what the call written out (`direct`) records.
    direct = flowrt.Host({"main.ask": answer}, runs_dir=str(tmp_path)).run(str(PROGRAM), {"goal": "g"},
                                                                          entry="direct")
    assert direct.exit_code == 0, direct
    (direct_call,) = [f for f in read_facts(tmp_path / direct.run_id) if f["kind"] == "Call"]
    assert direct_call["types"] == calls[0]["types"]
    replayed = flow("replay", outcome.run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stdout + replayed.stderr


def test_a_wrapped_reply_of_the_wrong_shape_is_bad_reply_at_the_concrete_type(tmp_path):
    outcome = flowrt.Host({"main.ask": lambda prompt: {"steps": [1]}}, runs_dir=str(tmp_path)).run(
        str(PROGRAM), {"goal": "g"}, entry="all")
    assert outcome.exit_code == 4, outcome
    assert json.loads(outcome.output_json) == {"Err": {"BadReply": "$.Ok.steps[0]: expected a string, found the integer 1"}}


def test_only_functions_that_need_their_types_take_them():
    compiled = flowc.compile(str(PROGRAM), read_text)
    typed = {f.name for f in compiled.functions.values() if f.module == "main" and f.runtime_typed}
    assert typed == {"get", "boxed", "later", "decoded"}
    (main,) = [m for m in compiled.generated.modules if m.identity == "main"]
    assert "def first(xs):" in main.source and "def direct(goal):" in main.source
    assert "def get(prompt, k_targs):" in main.source


# ---- the run-time substitution against the compiler's own terms

DECLS = """\
pub type Plan { pub steps: List<Text> }
pub type Box<T> { pub item: T, pub note: Text }
pub type Pair<A, B> { pub left: A, pub right: B }
pub type Tree<T> { Leaf(T), Node(List<Tree<T>>), Empty }
pub flow main() -> Int = 1
"""


def _env(tmp_path_factory=None):
    folder = Path(__import__("tempfile").mkdtemp())
    (folder / "main.flow").write_text(DECLS)
    checked = check_program(str(folder / "main.flow"), read_text)
    assert checked.ok, checked.diagnostics
    return checked.env


ENV = None


def env():
    global ENV
    if ENV is None:
        ENV = _env()
    return ENV


def types(leaf):
    def grow(inner):
        return st.one_of(
            st.builds(T.list_of, inner), st.builds(T.option_of, inner),
            st.builds(lambda a, b: T.TCon("Dict", (a, b)), st.just(T.TEXT), inner),
            st.builds(lambda a, b: T.TTuple((a, b)), inner, inner),
            st.builds(lambda a: T.TCon("main.Box", (a,)), inner),
            st.builds(lambda a, b: T.TCon("main.Pair", (a, b)), inner, inner),
            st.builds(lambda a: T.TCon("main.Tree", (a,)), inner),
            st.builds(T.result_of, inner, st.just(T.TEXT)))
    return st.recursive(leaf, grow, max_leaves=6)


CONCRETE = st.sampled_from([T.INT, T.TEXT, T.UNIT, T.TCon(T.JSON_VALUE, ()), T.TCon("main.Plan", ())])
PARAM = T.TParam("X", "main.f")


@settings(max_examples=150, deadline=None)
@given(types(st.one_of(CONCRETE, st.just(PARAM))), types(CONCRETE))
def test_instantiating_at_run_time_gives_the_compilers_term_of_the_concrete_type(generic, concrete):
    e = env()
    term, defs = term_and_defs(e, generic)
    arg = term_and_defs(e, concrete)
    got = instantiate(term, defs, {"X": arg})
    want = term_and_defs(e, T.substitute(generic, {"X": concrete}))
    assert json.loads(json.dumps(got)) == json.loads(json.dumps(want))
