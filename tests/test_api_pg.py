"""Every public method of `flowrt.Host` and `flowrt.AsyncHost` against a PostgreSQL store location
(`runs="postgresql://..."`, the `pg_url` fixture of tests/pg_cluster.py): run, start (detached),
watch, pending, resume (checked reply, refused reply), halt, history, runs, replay and fork, on the
same tables `flow --store` uses."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import flowrt

ROOT = Path(__file__).resolve().parents[1]
ASK = str(ROOT / "tests" / "programs" / "ask.flow")  # note(text) -> Unit; ask(question) -> Result<Text, AskError>
REVIEW_DOC = ROOT / "docs" / "api.md"


def pg_host(url: str, ask, cls=flowrt.Host):
    return cls({"ask.ask": ask, "ask.note": lambda text: None}, runs=url, durability="none")


def review_program(tmp_path: Path) -> str:
    """docs/api.md's program (it has a checkpoint, for fork)."""
    from tests.test_api_docs import program

    path = tmp_path / "review.flow"
    path.write_text(program(), encoding="utf-8")
    return str(path)


def test_run_pause_pending_resume_history_runs_replay_on_postgres(pg_url):
    host = pg_host(pg_url, lambda question: flowrt.PENDING)
    paused = host.run(ASK, {"topic": "tea"})
    assert paused.status == "paused" and paused.exit_code == 3
    [question] = paused.pending
    assert host.pending(paused.run_id) == paused.pending
    assert question.arguments == {"question": "What about tea?"}

    with pytest.raises(flowrt.Refused) as refused:
        host.resume(paused.run_id, call=question.call, reply=7)
    assert refused.value.path == "$.Ok"
    assert [f.kind for f in host.history(paused.run_id).facts] == ["Start", "Call", "Reply", "Call"]

    done = host.resume(paused.run_id, call=question.call, reply="yes")
    assert done.status == "completed" and done.output == "answer: yes"
    assert host.pending(paused.run_id) == ()

    page = host.history(paused.run_id, limit=2)
    assert [f.kind for f in page.facts] == ["Start", "Call"] and page.next_after == 2
    rest = host.history(paused.run_id, after=2)
    assert [f.kind for f in rest.facts] == ["Reply", "Call", "Reply", "End"] and rest.state == "ended"
    [reply] = [f for f in rest.facts if f.kind == "Reply" and f.call == question.call]
    assert reply.outcome == {"Ok": "yes"}

    other = host.run(ASK, {"topic": "cake"})
    listed = host.runs()
    assert sorted(r.run_id for r in listed.runs) == sorted([paused.run_id, other.run_id])
    by_id = {r.run_id: r for r in listed.runs}
    assert by_id[other.run_id].host_decision == "paused" and by_id[paused.run_id].ending is not None
    first = host.runs(limit=1)
    assert len(first.runs) == 1 and first.next_after == first.runs[0].run_id

    replayed = host.replay(paused.run_id)
    assert replayed.verdict == "Matched" and replayed.exit_code == 0
    assert host.replay(other.run_id).verdict == "Incomplete"


def test_detached_start_watch_halt_and_resend_on_postgres(pg_url):
    asked = threading.Event()
    gate = threading.Event()

    def ask(question):
        asked.set()
        gate.wait(30)
        return "late"

    host = pg_host(pg_url, ask)
    handle = host.start(ASK, {"topic": "tea"}, detach=True)
    assert asked.wait(30)
    host.halt(handle.run_id)
    gate.set()
    halted = handle.wait(timeout=60)
    assert halted.status == "halted" and halted.exit_code == 130
    kinds = [row["kind"] for row in host.watch(halted.run_id, timeout=60)]  # ends at the halt
    assert kinds == ["Start", "Call", "Reply", "Call"]

    [call] = [f.call for f in host.history(halted.run_id, kinds=["Call"]).facts if f.tool == "ask.ask"]
    resumed = host.resume(halted.run_id, resend=[call])
    assert resumed.status == "completed" and resumed.output == "answer: late"
    assert [row["kind"] for row in host.watch(halted.run_id, timeout=60)][-1] == "End"


def test_fork_on_postgres(pg_url, tmp_path):
    host = flowrt.Host({"review.price": lambda item: 250, "review.review": lambda quote: "Approve"},
                       runs=pg_url, durability="none")
    first = host.run(review_program(tmp_path), {"item": "kettle", "quantity": 3})
    [checkpoint] = host.history(first.run_id, kinds=["Checkpoint"]).facts
    forked = host.fork(first.run_id, checkpoint=checkpoint.n,
                       input={"quote": {"item": "kettle", "quantity": 3, "total": "6.0"}})
    assert forked.status == "completed" and forked.run_id != first.run_id
    [start] = host.history(forked.run_id, kinds=["Start"]).facts
    assert start.parent == {"run": first.run_id, "checkpoint": checkpoint.n}


def test_async_host_on_postgres(pg_url):
    async def main():
        async def ask(question):
            await asyncio.sleep(0)
            return flowrt.PENDING

        host = pg_host(pg_url, ask, cls=flowrt.AsyncHost)
        handle = await host.start(ASK, {"topic": "tea"}, detach=True)
        kinds = [row["kind"] async for row in host.watch(handle.run_id, timeout=60)]  # ends at the pause
        paused = await handle.wait()
        [question] = await host.pending(paused.run_id)
        done = await host.resume(paused.run_id, call=question.call, reply="fine")
        history = await host.history(paused.run_id)
        listed = await host.runs()
        replayed = await host.replay(paused.run_id)
        return kinds, paused, done, history, listed, replayed

    kinds, paused, done, history, listed, replayed = asyncio.run(main())
    assert kinds == ["Start", "Call", "Reply", "Call"] and paused.status == "paused"
    assert done.output == "answer: fine" and history.state == "ended"
    assert [r.run_id for r in listed.runs] == [paused.run_id] and replayed.verdict == "Matched"
