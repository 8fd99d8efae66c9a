"""The Python API's behaviours (docs/api.md): Python callables refused before Start when their
parameters do not match, async Tools awaited on the application's own loop, detached runs, a
supplied reply checked against its declared types (refused, nothing recorded, the call still open),
fork, history paging and filters, run discovery, output as Python values, results as data."""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowrt
from flowdata import codec
from flowrt.api_values import Variant, from_json, to_json
from flowrt.bind import signature_mismatch
from flowrt.store import open_store

ROOT = Path(__file__).resolve().parents[1]
ASK = str(ROOT / "tests" / "programs" / "ask.flow")  # note(text) -> Unit; ask(question) -> Result<Text, AskError>


def fact_kinds(runs: Path, run_id: str) -> list[str]:
    with open_store(str(runs)).open(run_id, for_append=False) as store:
        return [f["kind"] for f in store.facts()]


def host(tmp_path: Path, ask, note=lambda text: None, cls=flowrt.Host):
    return cls({"ask.ask": ask, "ask.note": note}, runs=str(tmp_path / "runs"), durability="none")


# ---- binding checked before Start ----------------------------------------------------------------

ASK_TOOL = {"tool": "ask.ask", "signature": "ask(question: Text) -> Text", "params": [{"name": "question"}]}


def _kwargs(**kw):
    return "x"


async def _async_wrong(prompt):
    return "x"


class _Callable:
    def __call__(self, question):
        return "x"


@pytest.mark.parametrize("fn,fits,why", [
    (lambda question: "x", True, None),
    (lambda question, call: "x", True, None),  # `call` is the host's to give
    (lambda question, extra=1: "x", True, None),  # a parameter with a default is never missed
    (lambda *, question: "x", True, None),
    (lambda **kw: "x", True, None),
    (_kwargs, True, None),
    (_Callable(), True, None),
    (lambda prompt: "x", False, "it takes no parameter `question`"),
    (lambda: "x", False, "it takes no parameter `question`"),
    (lambda question, extra: "x", False, "it needs `extra`, which the Tool does not give"),
    (lambda question, /: "x", False, "it takes no parameter `question`"),  # cannot be passed by keyword
    (_async_wrong, False, "it takes no parameter `question`"),
    (max, True, None),  # a builtin without a signature is taken on trust
    (len, False, "it needs `obj`"),  # one with a signature is checked
])
def test_signature_cases(fn, fits, why):
    problem = signature_mismatch(fn, ASK_TOOL)
    assert (problem is None) is fits, problem
    if why is not None:
        assert why in problem and "ask.ask" in problem


def test_a_mismatched_callable_refuses_the_run_before_any_fact(tmp_path):
    called = []
    with pytest.raises(flowrt.Refused) as refused:
        host(tmp_path, lambda prompt: called.append(prompt)).run(ASK, {"topic": "tea"})
    assert refused.value.diagnostics[0].code == "binding-failed"
    assert "`question`" in str(refused.value) and called == []
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_the_cli_embedding_paths_refuse_too(tmp_path):
    """`flowrt.run.run` and `flowrt.replay.resume` (what the CLI and nested runs call) bind through
    the same check: exit 2, nothing recorded, and a resume appends nothing."""
    from flowrt.replay import resume
    from flowrt.run import run

    runs = str(tmp_path / "runs")
    outcome = run(ASK, input_text='{"topic": "x"}', runs_dir=runs, durability="none",
                  python_tools={"ask.ask": lambda prompt: "x", "ask.note": lambda text: None})
    assert outcome.exit_code == 2 and outcome.diagnostics[0].code == "binding-failed"
    paused = host(tmp_path, lambda question: flowrt.PENDING).run(ASK, {"topic": "x"})
    before = fact_kinds(tmp_path / "runs", paused.run_id)
    again = resume(runs, paused.run_id, python_tools={"ask.ask": lambda q: "x", "ask.note": lambda text: None})
    assert again.exit_code == 2 and again.diagnostics[0].code == "binding-failed"
    assert fact_kinds(tmp_path / "runs", paused.run_id) == before


# ---- async Tools on the application's loop -----------------------------------------------------


def test_async_tools_are_awaited_on_the_callers_loop_and_sync_ones_off_it(tmp_path):
    seen: dict[str, object] = {}

    async def main():
        app_loop = asyncio.get_running_loop()
        lock = asyncio.Lock()  # bound to the app's loop: usable only there

        async def ask(question):
            async with lock:
                seen["loop"] = asyncio.get_running_loop() is app_loop
                await asyncio.sleep(0)
            return f"yes to {question}"

        def note(text):
            seen["note_thread"] = threading.current_thread() is not threading.main_thread()

        result = await host(tmp_path, ask, note, cls=flowrt.AsyncHost).run(ASK, {"topic": "tea"})
        return result

    result = asyncio.run(main())
    assert result.status == "completed" and result.output == "answer: yes to What about tea?"
    assert seen == {"loop": True, "note_thread": True}


def test_an_async_reply_waiting_on_a_stopped_loop_is_unknown():
    from flowrt.api_async import _awaited_on

    loop = asyncio.new_event_loop()  # never run: the call cannot be served

    async def ask(question):
        return "never"

    try:
        answer = _awaited_on(ask, loop)(question="q")
    finally:
        loop.close()
    assert isinstance(answer, flowrt.Problem) and answer.kind == "Unknown"
    assert "event loop stopped" in answer.value


def test_async_host_resume_and_detached_start(tmp_path):
    async def main():
        app_loop = asyncio.get_running_loop()
        pending = host(tmp_path, lambda question: flowrt.PENDING, cls=flowrt.AsyncHost)
        paused = await pending.run(ASK, {"topic": "x"})
        with pytest.raises(flowrt.Refused):
            await pending.resume(paused.run_id, call=paused.pending[0].call, reply=7)
        done = await pending.resume(paused.run_id, call=paused.pending[0].call, reply="fine")

        async def ask(question):
            assert asyncio.get_running_loop() is app_loop
            return "later"

        detached = await host(tmp_path, ask, cls=flowrt.AsyncHost).start(ASK, {"topic": "y"}, detach=True)
        return done, await detached.wait(), detached

    done, later, handle = asyncio.run(main())
    assert done.output == "answer: fine" and later.output == "answer: later" and handle.done()


# ---- detach and halt -----------------------------------------------------------------------------


def test_a_detached_run_returns_after_start_while_it_goes_on(tmp_path):
    gate = threading.Event()
    asked = threading.Event()

    def ask(question):
        asked.set()
        gate.wait(30)
        return "late"

    h = host(tmp_path, ask)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    assert asked.wait(30) and not handle.done()
    with pytest.raises(TimeoutError):
        handle.wait(timeout=0.01)
    assert fact_kinds(tmp_path / "runs", handle.run_id)[0] == "Start"
    gate.set()
    result = handle.wait(timeout=60)
    assert result.run_id == handle.run_id and result.output == "answer: late"
    with pytest.raises(flowrt.Refused):
        h.halt(handle.run_id)  # it is no longer driven by this host


def test_a_detached_start_raises_its_refusal(tmp_path):
    with pytest.raises(flowrt.Refused) as refused:
        host(tmp_path, lambda question: "x").start(ASK, {"topic": 5}, detach=True)
    assert refused.value.diagnostics[0].code == "input-invalid"


def test_halting_a_run_this_host_does_not_drive_is_refused(tmp_path):
    with pytest.raises(flowrt.Refused, match="not driven by this host"):
        host(tmp_path, lambda question: "x").halt("run-20260101-000000-abcdef")


# ---- resume: the reply checked before admission ----------------------------------------------------


@pytest.mark.parametrize("reply,path", [
    (7, "$.Ok"),
    (["yes"], "$.Ok"),
    (flowrt.failed("Nope"), "$.Err.Failed"),
    ({"Err": {"Whatever": "x"}}, "$"),
    ({"Err": {"Unknown": 3}}, "$"),
])
def test_a_reply_that_does_not_decode_is_refused_and_nothing_is_recorded(tmp_path, reply, path):
    h = host(tmp_path, lambda question: flowrt.PENDING)
    paused = h.run(ASK, {"topic": "x"})
    [pending] = paused.pending
    assert pending.schema["oneOf"][0]["properties"]["Ok"] == {"type": "string"}
    before = fact_kinds(tmp_path / "runs", paused.run_id)
    with pytest.raises(flowrt.Refused) as refused:
        h.resume(paused.run_id, call=pending.call, reply=reply)
    assert refused.value.path == path and refused.value.schema == pending.schema
    assert refused.value.message.startswith(f"the reply to {pending.call} (ask.ask) does not fit: {path}")
    assert '"oneOf"' in refused.value.message  # the schema, for a person to answer again
    assert fact_kinds(tmp_path / "runs", paused.run_id) == before
    assert h.history(paused.run_id).state == "paused"  # the call is still open: answer again
    assert h.resume(paused.run_id, call=pending.call, reply=flowrt.failed(Variant("Declined"))).output == "declined"


@pytest.mark.parametrize("kwargs,match", [
    ({"call": "root#2"}, "needs a reply"),
    ({"reply": "x"}, "needs the call"),
    ({"call": "root#2", "reply": flowrt.PENDING}, "cannot leave the call pending"),
    ({"call": "root#2", "reply": object()}, "not data"),
    ({"call": "root#9", "reply": "x"}, "not open"),
])
def test_resume_refusals(tmp_path, kwargs, match):
    h = host(tmp_path, lambda question: flowrt.PENDING)
    paused = h.run(ASK, {"topic": "x"})
    with pytest.raises(flowrt.Refused, match=match):
        h.resume(paused.run_id, **kwargs)


def test_resume_of_a_run_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(flowrt.Refused):
        host(tmp_path, lambda question: "x").resume("run-20260101-000000-abcdef", call="root#1", reply="x")


# ---- history, runs, fork, results ----------------------------------------------------------------


def test_history_pages_cover_every_fact_once(tmp_path):
    h = host(tmp_path, lambda question: "yes")
    run_id = h.run(ASK, {"topic": "tea"}).run_id
    whole = h.history(run_id, limit=1000)
    for limit in (1, 2, 4):
        seen, after = [], 0
        while True:
            page = h.history(run_id, after=after, limit=limit)
            seen += page.facts
            if page.next_after is None:
                break
            assert len(page.facts) == limit
            after = page.next_after
        assert seen == list(whole.facts)
    assert [f.kind for f in whole.facts] == ["Start", "Call", "Reply", "Call", "Reply", "End"]
    replies = h.history(run_id, kinds=["REPLY"]).facts
    assert [r.outcome for r in replies] == [{"Ok": None}, {"Ok": "yes"}]
    assert isinstance(whole.facts[-1], flowrt.EndFact) and whole.facts[-1].outcome == {"Completed": "answer: yes"}
    with pytest.raises(flowrt.Refused, match="no fact kind"):
        h.history(run_id, kinds=["Nope"])
    with pytest.raises(flowrt.Refused):
        h.history("run-20260101-000000-abcdef")


def test_runs_lists_pages_and_an_empty_store(tmp_path):
    h = host(tmp_path, lambda question: "yes")
    assert h.runs().runs == () and h.runs().next_after is None
    ids = sorted(h.run(ASK, {"topic": t}).run_id for t in ("a", "b", "c"))
    page = h.runs(limit=2)
    assert [r.run_id for r in page.runs] == ids[:2]
    rest = h.runs(after=page.next_after)
    assert [r.run_id for r in rest.runs] == ids[2:]
    assert rest.runs[0].ending == "completed" and rest.runs[0].facts == 6


def test_fork_from_a_fact_that_is_not_a_checkpoint_is_refused(tmp_path):
    h = host(tmp_path, lambda question: "yes")
    run_id = h.run(ASK, {"topic": "tea"}).run_id
    with pytest.raises(flowrt.Refused, match="not a checkpoint"):
        h.fork(run_id, checkpoint=2)


OUTPUTS = """
pub type Shape { Circle { radius: Decimal }, Square(Decimal), Pair(Int, Int), Empty }

pub type Out { pub n: Int, pub d: Decimal, pub shapes: List<Shape>, pub some: Option<Int>,
               pub none: Option<Int>, pub pair: (Int, Text), pub big: Int }

pub flow main(n: Int) -> Out =
    Out { n, d: 1.25, shapes: [Circle { radius: 0.5 }, Square(2.0), Pair(1, 2), Empty], some: Some(3),
          none: None, pair: (n, "a"), big: n * n * n * n * n * n * n * n }
"""


def test_output_is_python_values_and_the_result_is_frozen(tmp_path):
    program = tmp_path / "out.flow"
    program.write_text(OUTPUTS)
    result = flowrt.Host({}, runs=str(tmp_path / "runs"), durability="none").run(str(program), {"n": 2 ** 40})
    assert result.status == "completed", result
    assert result.output == {
        "n": 2 ** 40, "d": decimal.Decimal("1.25"),
        "shapes": [Variant("Circle", {"radius": decimal.Decimal("0.5")}), Variant("Square", decimal.Decimal("2")),
                   Variant("Pair", (1, 2)), Variant("Empty")],
        "some": 3, "none": None, "pair": (2 ** 40, "a"), "big": 2 ** 320}
    assert codec.parse_json(result.output_json)["big"] == 2 ** 320
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "faulted"  # type: ignore[misc]


# ---- values: an encoding, so a property --------------------------------------------------------

TERMS = {
    "Int": st.integers(min_value=-(2 ** 100), max_value=2 ** 100),
    "Text": st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
    "Decimal": st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-10 ** 6, max_value=10 ** 6).map(str),
    "Bool": st.booleans(),
}


@st.composite
def typed_json(draw):
    """(a type term, JSON data of that type), drawn from scalars, lists, options, tuples and dicts."""
    scalar = draw(st.sampled_from(sorted(TERMS)))
    shape = draw(st.sampled_from(["scalar", "list", "option", "tuple", "dict", "intdict"]))
    if shape == "scalar":
        return scalar, draw(TERMS[scalar])
    if shape == "list":
        return {"List": scalar}, draw(st.lists(TERMS[scalar], max_size=4))
    if shape == "option":
        return {"Option": scalar}, draw(st.none() | TERMS[scalar])
    if shape == "tuple":
        return {"Tuple": [scalar, "Int"]}, [draw(TERMS[scalar]), draw(TERMS["Int"])]
    if shape == "dict":
        return {"Dict": ["Text", scalar]}, draw(st.dictionaries(TERMS["Text"], TERMS[scalar], max_size=3))
    keys = sorted(set(draw(st.lists(TERMS["Int"], max_size=3))))
    return {"Dict": ["Int", scalar]}, [[k, draw(TERMS[scalar])] for k in keys]


@settings(max_examples=200, deadline=None)
@given(typed_json())
def test_python_values_go_back_to_the_same_canonical_json(case):
    term, data = case
    canonical = codec.canonical(codec.decode(data, term), term)
    value = from_json(codec.parse_json(canonical), term)
    assert codec.canonical(codec.decode(to_json(value, term), term), term) == canonical
    if not (isinstance(value, dict) and not value):  # untyped, an empty dict is an object
        assert codec.canonical(codec.decode(to_json(value), term), term) == canonical


def test_cancelling_an_awaited_run_halts_it(tmp_path):
    """The application gave up on the run: it is halted (resumable), not left running."""
    import time

    asked, gate = threading.Event(), threading.Event()

    def ask(question):
        asked.set()
        gate.wait(30)
        return "late"

    h = host(tmp_path, ask, cls=flowrt.AsyncHost)

    async def main():
        task = asyncio.ensure_future(h.run(ASK, {"topic": "tea"}))
        assert await asyncio.to_thread(asked.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    gate.set()
    [run] = h.host.runs().runs
    deadline = time.monotonic() + 60
    while h.host.history(run.run_id).state != "halted":
        assert time.monotonic() < deadline, h.host.history(run.run_id)
        time.sleep(0.05)
    resumed = h.host.resume(run.run_id, resend=["root#2"])
    assert resumed.output == "answer: late"


def test_a_redacted_value_is_a_hole_in_the_history(tmp_path):
    h = host(tmp_path, lambda question: "y" * 5000)  # over the inline limit: stored by reference
    run_id = h.run(ASK, {"topic": "tea"}).run_id
    [reply] = [f for f in h.history(run_id, kinds=["Reply"]).facts if f.call == "root#2"]
    assert reply.outcome == {"Ok": "y" * 5000}
    open_store(str(tmp_path / "runs")).redact(run_id, reply.n, "outcome")
    [after] = [f for f in h.history(run_id, kinds=["Reply"]).facts if f.call == "root#2"]
    assert isinstance(after.outcome, flowrt.HoleValue) and after.outcome.hash.startswith("sha256:")
    assert after.hash == reply.hash  # the chain of facts is unchanged


def test_an_async_detached_start_raises_its_refusal(tmp_path):
    async def main():
        await host(tmp_path, lambda prompt: "x", cls=flowrt.AsyncHost).start(ASK, {"topic": "t"}, detach=True)

    with pytest.raises(flowrt.Refused) as refused:
        asyncio.run(main())
    assert refused.value.diagnostics[0].code == "binding-failed"



# ---- watch: the live feed -------------------------------------------------------------------------


def _gated():
    """An ask Tool that waits for `gate` (set by the test), saying when it was asked."""
    asked, gate = threading.Event(), threading.Event()

    def ask(question):
        asked.set()
        gate.wait(30)
        return "late"

    return ask, asked, gate


def _follow_in_thread(watch):
    """Iterate `watch` on another thread; `seen_call` is set once the ask.ask Call has come."""
    rows: list = []
    seen_call = threading.Event()
    box: dict = {}

    def follow():
        try:
            for row in watch:
                rows.append(row)
                if row["kind"] == "Call" and row.get("tool") == "ask.ask":
                    seen_call.set()
        except BaseException as problem:  # handed to the test
            box["error"] = problem

    thread = threading.Thread(target=follow)
    thread.start()
    return thread, rows, seen_call, box


def test_watch_from_another_thread_gives_each_fact_as_the_run_goes_on_to_its_end(tmp_path):
    ask, asked, gate = _gated()
    h = host(tmp_path, ask)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    watch = h.watch(handle.run_id, timeout=60)
    thread, rows, seen_call, box = _follow_in_thread(watch)
    assert seen_call.wait(30)
    # The Call has come while the Tool still holds the run: the feed is live, not the history after.
    assert not handle.done() and [r["kind"] for r in rows] == ["Start", "Call", "Reply", "Call"]
    gate.set()
    thread.join(60)
    assert not thread.is_alive() and "error" not in box
    assert handle.wait(timeout=60).status == "completed"
    assert [r["kind"] for r in rows] == fact_kinds(tmp_path / "runs", handle.run_id)
    assert [r["n"] for r in rows] == list(range(1, len(rows) + 1))
    assert watch.ending == "ended" and watch.head == len(rows)
    # Rows as `flow history --json` shows facts (their times where the store has them yet).
    assert rows[1]["tool"] == "ask.note" and rows[0]["summary"].startswith("program=")


def test_watch_ends_at_a_pause_whether_it_began_before_or_after(tmp_path):
    h = host(tmp_path, lambda question: flowrt.PENDING)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    watch = h.watch(handle.run_id, timeout=60)
    assert [r["kind"] for r in watch] == ["Start", "Call", "Reply", "Call"] and watch.ending == "paused"
    paused = handle.wait(timeout=60)
    assert paused.status == "paused"
    again = h.watch(paused.run_id, timeout=60)
    assert [r["kind"] for r in again] == ["Start", "Call", "Reply", "Call"] and again.ending == "paused"
    # `after`: only what comes after a fact already seen (a feed reconnecting).
    assert list(h.watch(paused.run_id, after=3, timeout=60))[0]["n"] == 4
    assert list(h.watch(paused.run_id, after=4, timeout=60)) == []


def test_watch_ends_at_a_halt(tmp_path):
    ask, asked, gate = _gated()
    h = host(tmp_path, ask)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    thread, rows, seen_call, box = _follow_in_thread(h.watch(handle.run_id, timeout=60))
    assert asked.wait(30) and seen_call.wait(30)
    h.halt(handle.run_id)
    gate.set()
    assert handle.wait(timeout=60).status == "halted"
    thread.join(60)
    assert not thread.is_alive() and "error" not in box
    assert [r["kind"] for r in rows] == fact_kinds(tmp_path / "runs", handle.run_id)
    assert rows[-1]["kind"] != "End"


def test_watch_times_out_while_the_run_goes_on_and_refuses_what_it_cannot_follow(tmp_path):
    ask, asked, gate = _gated()
    h = host(tmp_path, ask)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    try:
        assert asked.wait(30)
        rows = []
        with pytest.raises(TimeoutError, match="did not end, pause or halt"):
            for row in h.watch(handle.run_id, timeout=0.3):
                rows.append(row)
        assert rows[0]["kind"] == "Start"  # what was there came before the timeout
    finally:
        gate.set()
    assert handle.wait(timeout=60).status == "completed"
    with pytest.raises(flowrt.Refused):
        h.watch("run-20260101-000000-abcdef")
    for bad in ({"poll": 0}, {"timeout": -1}, {"after": -1}):
        with pytest.raises(ValueError):
            h.watch(handle.run_id, **bad)


def test_async_watch_follows_a_run_on_the_loop_to_its_end(tmp_path):
    async def main():
        gate = asyncio.Event()

        async def ask(question):
            await gate.wait()
            return "later"

        h = host(tmp_path, ask, cls=flowrt.AsyncHost)
        handle = await h.start(ASK, {"topic": "tea"}, detach=True)
        kinds = []
        async for row in h.watch(handle.run_id, timeout=60):
            kinds.append(row["kind"])
            if row["kind"] == "Call" and row.get("tool") == "ask.ask":
                assert not handle.done()
                gate.set()  # the loop is free while the watch waits: the Tool can be answered
        result = await handle.wait()
        with pytest.raises(flowrt.Refused):
            async for _ in h.watch("run-20260101-000000-abcdef"):
                pass
        return kinds, result

    kinds, result = asyncio.run(main())
    assert kinds == fact_kinds(tmp_path / "runs", result.run_id) and kinds[-1] == "End"
    assert result.output == "answer: later"


# ---- pending and detached resume ------------------------------------------------------------------


def test_pending_reads_the_open_calls_of_a_run_from_its_history(tmp_path):
    h = host(tmp_path, lambda question: flowrt.PENDING)
    paused = h.run(ASK, {"topic": "tea"})
    # Another host (an application restarted, or one that did not start the run) reads the same.
    other = flowrt.Host(runs=str(tmp_path / "runs"))
    assert other.pending(paused.run_id) == paused.pending
    [question] = paused.pending
    assert question.tool == "ask.ask" and question.arguments == {"question": "What about tea?"}
    assert question.schema["oneOf"][0]["required"] == ["Ok"]
    h.resume(paused.run_id, call=question.call, reply="yes")
    assert other.pending(paused.run_id) == ()
    with pytest.raises(flowrt.Refused):
        other.pending("run-20260101-000000-abcdef")


def test_a_detached_resume_returns_once_the_reply_is_recorded(tmp_path):
    ask, asked, gate = _gated()
    answers = iter([flowrt.PENDING])
    h = host(tmp_path, lambda question: next(answers))
    paused = h.run(ASK, {"topic": "tea"})
    [question] = paused.pending
    with pytest.raises(flowrt.Refused):  # the reply is checked before the handle
        h.resume(paused.run_id, call=question.call, reply=7, detach=True)
    with pytest.raises(flowrt.Refused):  # and so is the call it answers
        h.resume(paused.run_id, call="root#9", reply="x", detach=True)
    handle = h.resume(paused.run_id, call=question.call, reply="yes", detach=True)
    assert handle.run_id == paused.run_id
    assert "Reply" in fact_kinds(tmp_path / "runs", paused.run_id)[4:]
    assert handle.wait(timeout=60).output == "answer: yes" and handle.done()


def test_an_async_detached_resume_checks_the_reply_then_goes_on_in_the_background(tmp_path):
    async def main():
        answers = iter([flowrt.PENDING])
        h = host(tmp_path, lambda question: next(answers), cls=flowrt.AsyncHost)
        paused = await h.run(ASK, {"topic": "tea"})
        [question] = await h.pending(paused.run_id)
        with pytest.raises(flowrt.Refused):
            await h.resume(paused.run_id, call=question.call, reply=7, detach=True)
        handle = await h.resume(paused.run_id, call=question.call, reply="yes", detach=True)
        recorded = fact_kinds(tmp_path / "runs", paused.run_id)
        return recorded, await handle.wait(), handle

    recorded, result, handle = asyncio.run(main())
    assert recorded[:5] == ["Start", "Call", "Reply", "Call", "Reply"]
    assert result.output == "answer: yes" and handle.done()


def test_a_detached_resume_that_resends_returns_while_the_resent_call_is_out(tmp_path):
    ask, asked, gate = _gated()
    h = host(tmp_path, ask)
    handle = h.start(ASK, {"topic": "tea"}, detach=True)
    assert asked.wait(30)
    h.halt(handle.run_id)
    gate.set()
    halted = handle.wait(timeout=60)
    assert halted.status == "halted"
    [call] = [f.call for f in h.history(halted.run_id, kinds=["Call"]).facts if f.tool == "ask.ask"]
    asked.clear()
    gate.clear()
    resumed = h.resume(halted.run_id, resend=[call], detach=True)
    try:
        assert asked.wait(30) and not resumed.done()  # back before the resent call's reply
    finally:
        gate.set()
    assert resumed.wait(timeout=60).output == "answer: late"
