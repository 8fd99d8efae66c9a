"""Validated human replies (DESIGN.md §3, flowrt/reply_check.py): a supplied reply that does not
decode against the call's declared types is refused before admission (exit 2, nothing recorded,
the call stays open) with the path, what was expected, the outcome's JSON Schema and a command
that answers it; `--admit-bad-reply` admits it as BadReply; `flow history` shows, per pending
call, the exact `flow resume` command with an example reply that fits."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowdata import codec
from flowrt.reply_check import check_reply, expected_reply, with_expected_replies
from flowrt.admission import admit
from flowrt.store import open_store

ROOT = Path(__file__).resolve().parents[1]

REVIEW = """pub type Verdict { Approve, Reject(Text) }

@tool pub flow review(doc: Text) -> Result<Verdict, Text>

pub flow main() -> Text !tool =
    match review("plan") {
        Ok(Approve) => "approved",
        Ok(Reject(why)) => "rejected: ${why}",
        Err(BadReply(why)) => "bad reply: ${why}",
        Err(Failed(e)) => "failed: ${e}",
        Err(_) => "not answered",
    }
"""

GENERIC = """use "std@v1/list"

pub type Plan { pub steps: List<Text> }

@tool pub flow ask<T: Data>(prompt: Text) -> T

pub flow main() -> Int !tool = {
    let plan: Plan = ask("plan")
    let n: Int = ask("count")
    n + list.length(plan.steps)
}
"""


def flow(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=120)


def paused_run(tmp: Path, source: str) -> tuple[Path, Path, str, str]:
    """(program directory, runs directory, run id, pending call) of a run paused on its first call."""
    program = tmp / "prog"
    program.mkdir(exist_ok=True)
    (program / "main.flow").write_text(source)
    (program / "flow.toml").write_text('[tools]\n"main" = { pending = true }\n')
    runs = tmp / "runs"
    done = flow("run", "main.flow", "--runs", str(runs), "--json", cwd=program)
    assert done.returncode == 3, done.stdout + done.stderr
    result = json.loads(done.stdout)
    return program, runs, result["run"], result["pending"][0]


def stored(runs: Path, run_id: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((runs / run_id).rglob("*")) if p.is_file()}


def test_a_mistyped_enum_reply_is_refused_and_the_run_is_then_answered(tmp_path):
    """The issue's example: `{"Ok": "Aprove"}` ends nothing; `{"Ok": "Approve"}` then completes."""
    program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    before = stored(runs, run_id)
    refused = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", '{"Ok": "Aprove"}', cwd=program)
    assert refused.returncode == 2, refused.stderr
    assert "reply-invalid" in refused.stderr and "$.Ok" in refused.stderr
    assert 'no constructor "Aprove"' in refused.stderr and "Approve, Reject" in refused.stderr
    assert '"$defs"' in refused.stderr and '"oneOf"' in refused.stderr  # the outcome's JSON Schema
    assert "--admit-bad-reply" in refused.stderr
    assert stored(runs, run_id) == before  # nothing recorded: no fact, no host record
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json", cwd=program).stdout)
    assert view["state"] == "paused" and [e["call"] for e in view["open"]] == [call]

    as_data = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", '{"Ok": "Aprove"}', "--json",
                   cwd=program)
    assert as_data.returncode == 2
    document = json.loads(as_data.stdout)
    assert document["exitCode"] == 2 and document["ending"] == "refused" and document["run"] == run_id
    assert [d["code"] for d in document["diagnostics"]] == ["reply-invalid"]
    refusal = document["refusal"]
    assert (refusal["call"], refusal["tool"], refusal["path"]) == (call, "main.review", "$.Ok")
    assert refusal["example"] == {"Ok": "Approve"}
    assert refusal["schema"]["oneOf"][0]["properties"]["Ok"] == {"$ref": "#/$defs/main.Verdict"}
    assert stored(runs, run_id) == before

    answered = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", '{"Ok": "Approve"}',
                    cwd=program)
    assert (answered.returncode, answered.stdout) == (0, '"approved"\n'), answered.stderr
    assert f"run {run_id} completed" in answered.stderr


def test_history_shows_the_exact_command_and_it_answers_the_call(tmp_path):
    program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    human = flow("history", run_id, "--runs", str(runs), cwd=program)
    command = f"""flow resume {run_id} --call '{call}' --reply '{{"Ok":"Approve"}}' --runs {runs}"""
    assert command in human.stdout
    assert 'expects {"Ok": V}, V: {"$defs":{"main.Verdict":' in human.stdout
    assert command in flow("history", run_id, "--runs", str(runs), "--summary", cwd=program).stdout
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json", cwd=program).stdout)
    entry, = view["open"]
    assert entry["next"] == [command] and entry["reply"]["command"] == command
    assert entry["reply"]["example"] == {"Ok": "Approve"}
    assert entry["reply"]["okSchema"]["$ref"] == "#/$defs/main.Verdict"
    argv = shlex.split(command)
    assert argv[0] == "flow"
    done = flow(*argv[1:], cwd=program)
    assert (done.returncode, done.stdout) == (0, '"approved"\n'), done.stderr


def test_the_open_calls_a_caller_found_answer_for_the_store(tmp_path):
    """`flow history` goes through the facts once and hands the open calls it found on: what
    answers a pending call is then found from them, as from the store's own, without the store
    going through its facts again."""
    _program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    store = open_store(str(runs)).open(run_id, for_append=False)
    found = dict(store.open_calls())
    entries = [{"call": call, "tool": found[call]["tool"], "status": "pending", "next": []}]
    by_store = with_expected_replies(store, entries)
    store.close()
    store = open_store(str(runs)).open(run_id, for_append=False)

    def not_asked():
        raise AssertionError("the store's open calls were asked for")

    store.open_calls = not_asked
    assert with_expected_replies(store, entries, open_call_facts=found) == by_store
    assert by_store[0]["reply"]["example"] == {"Ok": "Approve"}
    store.close()


@pytest.mark.parametrize("reply, path", [
    ('{"Ok": {"Reject": 7}}', "$.Ok.Reject"),
    ('{"Ok": {"Reject": "no", "extra": 1}}', "$.Ok"),
    ('{"Err": {"Failed": 5}}', "$.Err.Failed"),
    ('{"Err": {"Nope": "x"}}', "$"),
    ('{"Err": {"Unknown": 3}}', "$"),
    ('{"Err": {"BadReply": 3}}', "$"),
])
def test_each_kind_of_misfit_is_refused_at_its_path(tmp_path, reply, path):
    program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    before = stored(runs, run_id)
    done = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", reply, "--json", cwd=program)
    assert done.returncode == 2, done.stdout
    assert json.loads(done.stdout)["refusal"]["path"] == path
    assert stored(runs, run_id) == before


@pytest.mark.parametrize("reply, output", [
    ('{"Ok": {"Reject": "too dear"}}', "rejected: too dear"),
    ('{"Err": {"Failed": "nobody there"}}', "failed: nobody there"),
    ('{"Err": {"BadReply": "the form was torn"}}', "bad reply: the form was torn"),  # a BadReply as such
    ('{"Err": {"NotRun": "skipped"}}', "not answered"),
])
def test_replies_that_fit_are_admitted(tmp_path, reply, output):
    program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    done = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", reply, "--json", cwd=program)
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["output"] == output


def test_admit_bad_reply_admits_it_as_a_live_reply_would_be(tmp_path):
    program, runs, run_id, call = paused_run(tmp_path, REVIEW)
    done = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", '{"Ok": "Aprove"}',
                "--admit-bad-reply", "--json", cwd=program)
    assert done.returncode == 0, done.stdout
    output = json.loads(done.stdout)["output"]
    assert output.startswith("bad reply: $.Ok: ") and "Aprove" in output
    replies = [json.loads(line) for line in (runs / run_id / "history.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "Reply"]
    assert list(replies[0]["outcome"]["Err"]) == ["BadReply"]


def test_a_generic_tools_reply_is_checked_at_the_calls_recorded_type(tmp_path):
    """`ask<T>` asked at `Plan` then at `Int`: each reply is checked at its own call's type."""
    program, runs, run_id, call = paused_run(tmp_path, GENERIC)
    refused = flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", '{"Ok": {"steps": [1]}}',
                   "--json", cwd=program)
    assert refused.returncode == 2 and json.loads(refused.stdout)["refusal"]["path"] == "$.Ok.steps[0]"
    example = json.loads(refused.stdout)["refusal"]["example"]
    assert example == {"Ok": {"steps": ["text"]}}
    second = json.loads(flow("resume", run_id, "--runs", str(runs), "--call", call, "--reply", json.dumps(example),
                             "--json", cwd=program).stdout)
    assert second["exitCode"] == 3, second
    count_call, = second["pending"]
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json", cwd=program).stdout)
    assert view["open"][0]["reply"]["example"] == {"Ok": 1}
    refused = flow("resume", run_id, "--runs", str(runs), "--call", count_call, "--reply", '{"Ok": "seven"}',
                   "--json", cwd=program)
    assert refused.returncode == 2 and json.loads(refused.stdout)["refusal"]["path"] == "$.Ok"
    done = flow("resume", run_id, "--runs", str(runs), "--call", count_call, "--reply", '{"Ok": 7}', "--json",
                cwd=program)
    assert json.loads(done.stdout)["output"] == 8  # 7 and the one step


# ---- the check against the codec, for random values -------------------------------------------

TYPES = """pub type Verdict { Approve, Reject(Text), Later { days: Int, note: Option<Text> } }
pub type Form { pub amount: Int, pub tags: List<Text>, pub note: Option<Text>, pub rate: Decimal }

@tool pub flow ask_int() -> Int
@tool pub flow ask_verdict() -> Verdict
@tool pub flow ask_form() -> Result<Form, Text>
@tool pub flow ask_map() -> Dict<Text, List<Int>>
@tool pub flow ask_pair() -> (Bool, Option<Int>)

pub flow main() -> Int !tool = {
    let a = task.spawn(flow() = ask_int())
    let b = task.spawn(flow() = ask_verdict())
    let c = task.spawn(flow() = ask_form())
    let d = task.spawn(flow() = ask_map())
    let e = task.spawn(flow() = ask_pair())
    let _ = task.wait(b)
    let _ = task.wait(c)
    let _ = task.wait(d)
    let _ = task.wait(e)
    task.wait(a)
}
"""


@pytest.fixture(scope="module")
def typed_calls(tmp_path_factory):
    """A run paused with one pending call per Tool of TYPES: {tool: (store, call id, typed)}."""
    tmp = tmp_path_factory.mktemp("typed")
    program, runs, run_id, _ = paused_run(tmp, 'use "std@v1/task"\n\n' + TYPES)
    store = open_store(str(runs)).open(run_id, for_append=False)
    from flowrt.reply_check import _typed

    calls = {}
    for fact in store.facts():
        if fact["kind"] == "Call":
            calls[fact["tool"]] = (fact["call"], _typed(store, fact["call"])[0])
    assert sorted(calls) == ["main.ask_form", "main.ask_int", "main.ask_map", "main.ask_pair", "main.ask_verdict"]
    yield store, calls
    store.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.text(max_size=8)
    | st.sampled_from(["Approve", "Reject", "Later", "1.5", "x", ""]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["amount", "tags", "note", "rate", "Reject", "Later", "days", "k"]),
                      inner, max_size=4),
    max_leaves=12)
texts = st.text(max_size=6)
fitting = {
    "main.ask_int": st.integers(-2 ** 80, 2 ** 80),
    "main.ask_verdict": st.one_of(
        st.just("Approve"), st.builds(lambda t: {"Reject": t}, texts),
        st.builds(lambda d, n: {"Later": {"days": d, "note": n}}, st.integers(), st.none() | texts)),
    "main.ask_form": st.fixed_dictionaries({
        "amount": st.integers(), "tags": st.lists(texts, max_size=3), "note": st.none() | texts,
        "rate": st.sampled_from(["0", "1.5", "-2.25", "1e3"])}),
    "main.ask_map": st.dictionaries(texts, st.lists(st.integers(), max_size=3), max_size=3),
    "main.ask_pair": st.tuples(st.booleans(), st.none() | st.integers()).map(list),
}


def _decodes(value, term, defs) -> bool:
    try:
        codec.decode(value, term, defs)
    except codec.DecodeError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_reply_is_refused_exactly_when_the_codec_refuses_its_value(typed_calls, data):
    store, calls = typed_calls
    tool = data.draw(st.sampled_from(sorted(calls)))
    call, typed = calls[tool]
    value = data.draw(st.one_of(fitting[tool], json_values))
    tag = data.draw(st.sampled_from(["Ok", "Ok", "Failed", "NotRun"]))
    if tag == "Ok":
        outcome, term, prefix = {"Ok": value}, typed.ok, "$.Ok"
    elif tag == "Failed":  # only ask_form is declared with Result (its error: Text)
        value = data.draw(st.one_of(texts, json_values))
        outcome, term, prefix = {"Err": {"Failed": value}}, typed.err, "$.Err.Failed"
    else:
        outcome, term, prefix = {"Err": {"NotRun": data.draw(texts)}}, "Text", "$"
    fits = term is not None and (tag == "NotRun" or _decodes(value, term, typed.defs))
    refusal = check_reply(store, call, outcome)
    admitted = admit({"ok": typed.ok, "err": typed.err, "types": typed.defs, "tool": tool}, outcome)
    if fits:
        assert refusal is None, refusal
        assert "BadReply" not in admitted.get("Err", {})  # admitted as it is, never as BadReply
    else:
        assert refusal is not None, outcome
        assert refusal.path.startswith(prefix) and refusal.problem
        assert list(admitted["Err"]) == ["BadReply"]
        if term is not None:
            assert admitted["Err"]["BadReply"] == f"{refusal.path}: {refusal.problem}"


@pytest.mark.parametrize("tool", sorted(fitting))
def test_the_example_for_each_type_is_a_reply_that_is_admitted(typed_calls, tool):
    store, calls = typed_calls
    call, _typed = calls[tool]
    expected = expected_reply(store, call)
    assert expected["example"] is not None
    assert check_reply(store, call, expected["example"]) is None


def test_mcp_resume_refuses_a_misfit_and_admits_it_when_asked(tmp_path):
    """The MCP `resume` tool checks a reply as `flow resume` does; `admit_bad_reply` admits it."""
    import anyio

    from tests.test_mcp import call, session

    program, runs, run_id, call_id = paused_run(tmp_path, REVIEW)
    before = stored(runs, run_id)

    async def scenario():
        async with session(runs) as client:
            refused = (await call(client, "resume", {"run": run_id, "call": call_id,
                                                     "reply": {"Ok": "Aprove"}})).structured_content
            assert refused["exitCode"] == 2 and refused["ending"] == "refused", refused
            assert refused["refusal"]["path"] == "$.Ok" and refused["refusal"]["example"] == {"Ok": "Approve"}
            assert stored(runs, run_id) == before
            view = (await call(client, "history", {"run": run_id})).structured_content
            assert view["open"][0]["reply"]["example"] == {"Ok": "Approve"}
            admitted = (await call(client, "resume", {"run": run_id, "call": call_id, "reply": {"Ok": "Aprove"},
                                                      "admit_bad_reply": True})).structured_content
            assert admitted["exitCode"] == 0 and admitted["output"].startswith("bad reply: $.Ok"), admitted

    anyio.run(scenario)
