"""Replay streams the record to the child ahead of its requests and checks what the child does
as it streams back: the verdict must be exactly the one a fact-by-fact exchange gives, at the
same fact and with the same reason, wherever a stream batch ends; a damaged history is still a
storage failure whatever the re-run found first. Also the live side of the protocol: checkpoint
policies the child applies itself, and Tool calls served on the host's thread."""

from __future__ import annotations

import json
import os

import pytest

from flowrt import replay as replay_mod
from flowrt.replay import replay, rounds
from flowrt.run import run
from flowrt.store import RunStore, canonical_bytes, fact_hash

ECHO = """
@tool pub flow echo(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { loop(n - 1, acc + echo(n)) }
"""
CALLS = 2500  # 5,002 facts: more than two stream batches


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One recorded run of CALLS echo calls; tests copy its history before changing it."""
    work = tmp_path_factory.mktemp("echo")
    (work / "echo.flow").write_text(ECHO)
    runs = work / "runs"
    outcome = run(str(work / "echo.flow"), input_text=json.dumps({"n": CALLS}), runs_dir=str(runs),
                  python_tools={"echo.echo": lambda n: n}, durability="none", checkpoints="off")
    assert outcome.exit_code == 0
    return work, outcome.run_id


def facts_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def copy_run(recorded, tmp_path, change=None, cut=None) -> tuple[str, str]:
    """A copy of the recorded run, its facts changed by `change(facts)` and cut to `cut` facts,
    numbered and chained again (so the history reads as sound)."""
    work, run_id = recorded
    source = work / "runs" / run_id
    target = tmp_path / "runs" / run_id
    target.mkdir(parents=True)
    for sub in ("values", "sources"):
        (target / sub).mkdir()
        for name in os.listdir(source / sub):
            (target / sub / name).write_bytes((source / sub / name).read_bytes())
    if (source / "host.jsonl").exists():
        (target / "host.jsonl").write_bytes((source / "host.jsonl").read_bytes())
    facts = facts_of(source / "history.jsonl")
    if change is not None:
        change(facts)
    if cut is not None:
        facts = facts[:cut]
    prev = None
    lines = []
    for n, fact in enumerate(facts, 1):
        fact = {k: v for k, v in fact.items() if k != "hash"}
        fact["n"] = n
        fact["prev"] = prev
        fact["hash"] = fact_hash(fact)
        prev = fact["hash"]
        lines.append(canonical_bytes(fact) + b"\n")
    (target / "history.jsonl").write_bytes(b"".join(lines))
    return str(tmp_path / "runs"), run_id


@pytest.fixture(params=[(1, 8192, 4096), (7, 16, 8), (2048, 8192, 4096), (10 ** 6, 3, 2)],
                ids=lambda p: f"batch{p[0]}-ahead{p[1]}-release{p[2]}")
def batch(request, monkeypatch):
    """The verdict may not depend on how the record is cut into frames, nor on how far the stream
    runs ahead of the facts checked and how often the ones passed are left to the store."""
    size, ahead, release = request.param
    monkeypatch.setattr(replay_mod, "STREAM_BATCH", size)
    monkeypatch.setattr(replay_mod, "STREAM_AHEAD", ahead)
    monkeypatch.setattr(replay_mod, "RELEASE_EVERY", release)
    return size


def test_the_recorded_run_matches(recorded, batch):
    work, run_id = recorded
    result = replay(str(work / "runs"), run_id)
    assert result.exit_code == 0 and result.verdict.kind == "Matched"


def test_other_arguments_in_the_middle_of_a_batch_diverge_at_that_fact(recorded, tmp_path, batch):
    def change(facts):
        call = facts[2999]  # fact 3000, a Call inside the second batch
        assert call["kind"] == "Call" and call["n"] == 3000
        call["arguments"] = {"n": call["arguments"]["n"] + 1}

    runs, run_id = copy_run(recorded, tmp_path, change)
    result = replay(runs, run_id)
    assert result.exit_code == 1
    assert result.verdict.to_json() == {
        "verdict": "Diverged", "fact": 3000,
        "reason": "the program calls echo.echo (root#1500) with other arguments than fact 3000 records", "from": 1}


def test_a_reply_to_another_call_diverges_at_that_fact(recorded, tmp_path, batch):
    def change(facts):
        reply = facts[4000]  # fact 4001
        assert reply["kind"] == "Reply"
        reply["call"] = "root#9999"

    runs, run_id = copy_run(recorded, tmp_path, change)
    result = replay(runs, run_id)
    assert result.verdict.to_json() == {
        "verdict": "Diverged", "fact": 4001,
        "reason": "fact 4001 replies to root#9999, which the program has not called", "from": 1}


def test_another_reply_value_diverges_where_the_program_then_differs(recorded, tmp_path, batch):
    def change(facts):
        facts[2000]["outcome"] = {"Ok": 0}  # fact 2001 replies to root#1000

    runs, run_id = copy_run(recorded, tmp_path, change)
    result = replay(runs, run_id)
    # The sum differs only at the end: every call is still the recorded one.
    assert result.verdict.kind == "Diverged" and result.verdict.fact == 2 * CALLS + 2
    assert result.verdict.reason == f"the program ends otherwise than fact {2 * CALLS + 2} records"


def test_a_missing_fact_in_the_middle_diverges_at_the_next_one(recorded, tmp_path, batch):
    def change(facts):
        del facts[3000]  # the Reply to root#1500: the Call of root#1501 takes its place

    runs, run_id = copy_run(recorded, tmp_path, change)
    result = replay(runs, run_id)
    assert result.verdict.to_json() == {
        "verdict": "Diverged", "fact": 3001,
        "reason": "every task of the program waits, but fact 3001 is a Call", "from": 1}


@pytest.mark.parametrize("cut, reason", [
    (3000, "the history ends while the program waits for a reply"),  # after the Call of root#1500
    (3001, "the history ends before the program does"),  # after its Reply
])
def test_a_record_cut_in_the_middle_of_a_batch_is_incomplete(recorded, tmp_path, batch, cut, reason):
    runs, run_id = copy_run(recorded, tmp_path, cut=cut)
    result = replay(runs, run_id)
    assert result.exit_code == 3
    assert result.verdict.to_json() == {"verdict": "Incomplete", "fact": None, "reason": reason, "from": 1}


def test_an_unused_fact_before_end_is_reported(recorded, tmp_path, batch):
    def change(facts):
        facts.insert(len(facts) - 1, {"kind": "Choice", "task": "root", "picked": "root/1"})

    runs, run_id = copy_run(recorded, tmp_path, change)
    result = replay(runs, run_id)
    assert result.verdict.to_json() == {
        "verdict": "Diverged", "fact": 2 * CALLS + 2,
        "reason": f"the program ends, but fact {2 * CALLS + 2} (Choice) is unused", "from": 1}


def test_damage_anywhere_wins_over_an_early_divergence(recorded, tmp_path):
    def change(facts):
        facts[9]["arguments"] = {"n": -1}  # fact 10: the re-run diverges here, early

    runs, run_id = copy_run(recorded, tmp_path, change)
    history = os.path.join(runs, run_id, "history.jsonl")
    with open(history, "rb") as handle:
        data = bytearray(handle.read())
    data[-300] ^= 0x20  # damage in the last facts, read long after the divergence
    with open(history, "wb") as handle:
        handle.write(bytes(data))
    result = replay(runs, run_id)
    assert result.exit_code == 5 and result.verdict is None
    assert result.message.startswith("storage failure: history.jsonl: fact")


def test_a_hole_in_the_middle_of_the_stream_is_incomplete_at_that_fact(tmp_path, batch):
    (tmp_path / "echo.flow").write_text(ECHO)
    runs = str(tmp_path / "runs")
    outcome = run(str(tmp_path / "echo.flow"), input_text=json.dumps({"n": 1500}), runs_dir=runs,
                  python_tools={"echo.echo": lambda n: n}, durability="none", checkpoints="off", inline_limit=0)
    assert outcome.exit_code == 0
    store = RunStore.open(runs, outcome.run_id, for_append=True, durability="none")
    assert store.fact(2501)["kind"] == "Reply"
    store.redact(2501, "outcome")
    store.close()
    result = replay(runs, outcome.run_id)
    assert result.verdict.to_json() == {
        "verdict": "Incomplete", "fact": 2501, "reason": "fact 2501 is a hole: its outcome was withheld", "from": 1}


def test_every_nth_place_is_taken_live_and_replays(tmp_path):
    (tmp_path / "echo.flow").write_text(ECHO)
    runs = str(tmp_path / "runs")
    outcome = run(str(tmp_path / "echo.flow"), input_text='{"n": 10}', runs_dir=runs,
                  python_tools={"echo.echo": lambda n: n}, durability="none", checkpoints="3")
    assert outcome.exit_code == 0 and outcome.output == b"55"
    facts = facts_of(tmp_path / "runs" / outcome.run_id / "history.jsonl")
    kinds = "".join({"Call": "C", "Reply": "R", "Checkpoint": "K"}.get(f["kind"], "") for f in facts)
    # A place after every call (main's tail call comes before any fact: no place); the 3rd, 6th
    # and 9th are taken.
    assert kinds == "CRCRCRK" * 3 + "CR"
    calls = [f["call"] for f in facts if f["kind"] == "Call"]
    assert calls == ["root#1", "root#2", "root#3", "c1:root#1", "c1:root#2", "c1:root#3",
                     "c2:root#1", "c2:root#2", "c2:root#3", "c3:root#1"]
    result = replay(runs, outcome.run_id)
    assert result.verdict.kind == "Matched"
    places, verdict = rounds(runs, outcome.run_id)
    assert verdict.kind == "Matched" and len(places) == 10
    assert [p["checkpoint"] for p in places if p["checkpoint"]] == [f["n"] for f in facts if f["kind"] == "Checkpoint"]


def test_a_checkpoint_is_written_with_the_fact_after_it(tmp_path, monkeypatch):
    """Grouped, not lost or reordered: the history is the same as with a write per fact."""
    (tmp_path / "echo.flow").write_text(ECHO)
    runs = str(tmp_path / "runs")
    writes = []
    original = RunStore.append_many

    def counting(self, items, **options):
        writes.append([kind for kind, _ in items])
        return original(self, items, **options)

    monkeypatch.setattr(RunStore, "append_many", counting)
    outcome = run(str(tmp_path / "echo.flow"), input_text='{"n": 4}', runs_dir=runs,
                  python_tools={"echo.echo": lambda n: n}, durability="none", checkpoints="every")
    assert outcome.exit_code == 0
    assert writes == [["Checkpoint", "Call"]] * 3 + [["Checkpoint", "End"]]  # the last one with End
    kinds = [f["kind"] for f in facts_of(tmp_path / "runs" / outcome.run_id / "history.jsonl")]
    assert kinds == ["Start", "Call", "Reply"] + ["Checkpoint", "Call", "Reply"] * 3 + ["Checkpoint", "End"]


TOOLS = """
@tool pub flow risky(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = risky(n) + risky(n + 1)
"""


def test_tools_served_on_the_host_thread_answer_as_on_a_worker(tmp_path):
    (tmp_path / "main.flow").write_text(TOOLS)
    runs = str(tmp_path / "runs")

    def risky(n):
        if n > 1:
            raise RuntimeError("too big")
        return n

    outcome = run(str(tmp_path / "main.flow"), input_text='{"n": 1}', runs_dir=runs,
                  python_tools={"main.risky": risky}, durability="none")
    assert outcome.exit_code == 1 and "main.risky ended in Unknown: RuntimeError: too big" in json.dumps(outcome.fault)

    async def later(n):
        return n * 10

    outcome = run(str(tmp_path / "main.flow"), input_text='{"n": 1}', runs_dir=runs,
                  python_tools={"main.risky": later}, durability="none")
    assert outcome.exit_code == 0 and outcome.output == b"30"

    def coroutine_returning(n):
        return later(n)  # a plain function handing back an awaitable: awaited on a worker

    outcome = run(str(tmp_path / "main.flow"), input_text='{"n": 2}', runs_dir=runs,
                  python_tools={"main.risky": coroutine_returning}, durability="none")
    assert outcome.exit_code == 0 and outcome.output == b"50"


ALL = """
use "std@v1/task"
use "std@v1/list"

pub type Problem { Busy }

@tool pub flow work(part: Int) -> Result<Int, Problem>

pub flow main(n: Int) -> Int !tool = {
    let answers = task.all([flow() = work(1), flow() = work(2), flow() = work(3), flow() = work(4)])
    list.length(answers) + n
}
"""


def test_waits_in_a_row_replay_and_resume(tmp_path, batch):
    """Several calls out, then a wait for each reply in turn: every wait is one the host sees
    (a resumed run would otherwise wait for a reply nobody was asked for)."""
    from flowrt.replay import resume

    (tmp_path / "main.flow").write_text(ALL)
    runs = str(tmp_path / "runs")
    outcome = run(str(tmp_path / "main.flow"), input_text='{"n": 1}', runs_dir=runs,
                  python_tools={"main.work": lambda part: part}, durability="none")
    assert outcome.exit_code == 0 and outcome.output == b"5"
    assert replay(runs, outcome.run_id).verdict.kind == "Matched"
    facts = facts_of(tmp_path / "runs" / outcome.run_id / "history.jsonl")
    assert [f["kind"] for f in facts[:5]] == ["Start", "Call", "Call", "Call", "Call"]
    # Cut where a crash could have: four calls out, two replies in.
    cut_at = next(i for i, f in enumerate(facts) if f["kind"] == "Reply") + 2
    runs_copy, run_id = copy_run((tmp_path, outcome.run_id), tmp_path / "copy", cut=cut_at)
    resumed = resume(runs_copy, run_id, python_tools={"main.work": lambda part: part}, durability="none")
    assert resumed.exit_code == 0 and resumed.output == b"5"
    assert replay(runs_copy, run_id).verdict.kind == "Matched"


FAN_OUT = """
use "std@v1/task"
use "std@v1/list"

@tool pub flow work(n: Int) -> Int

pub flow main(n: Int) -> Int !tool =
    list.fold(task.all(list.map(list.range(0, n), flow(i) = flow() = work(i))), 0, flow(a, b) = a + b)
"""


@pytest.mark.parametrize("ahead", [1, 50, 8192])
def test_a_stream_held_close_to_the_facts_checked_never_stops_a_child_waiting_for_it(tmp_path, monkeypatch, ahead):
    """Many calls in one frame, then many replies: the child passes hundreds of facts without a
    wait. However close the stream is held to the facts the driver has checked, the child never
    waits for a record that is held back (the replay ends, Matched), the stream is never further
    ahead than that plus a batch, and the facts passed are left to the store on the way."""
    (tmp_path / "tasks.flow").write_text(FAN_OUT)
    runs = str(tmp_path / "runs")
    outcome = run(str(tmp_path / "tasks.flow"), input_text='{"n": 300}', runs_dir=runs,
                  python_tools={"tasks.work": lambda n: n}, durability="none")
    assert outcome.exit_code == 0 and outcome.output == str(sum(range(300))).encode()
    monkeypatch.setattr(replay_mod, "STREAM_BATCH", 16)
    monkeypatch.setattr(replay_mod, "STREAM_AHEAD", ahead)
    monkeypatch.setattr(replay_mod, "RELEASE_EVERY", 20)
    leads, released = [], []
    far_ahead = replay_mod.ReplayDriver._far_ahead

    def watched(driver):
        leads.append(driver.streamed - (driver.base + driver.position))
        return far_ahead(driver)

    real_release = RunStore.release_before

    def release(store, index):
        real_release(store, index)
        released.append((index, store.verified_facts().base))

    monkeypatch.setattr(replay_mod.ReplayDriver, "_far_ahead", watched)
    monkeypatch.setattr(RunStore, "release_before", release)
    result = replay(runs, outcome.run_id)
    assert result.exit_code == 0 and result.verdict.kind == "Matched"
    assert leads and max(leads) <= ahead + 16
    assert released and all(base == index for index, base in released[1:])
