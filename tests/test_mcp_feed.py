"""The MCP server's live feed through a real MCP client (the SDK's stdio client): one progress
notification per accepted fact on a `run` or `resume` that asked for progress, bounded and
without Flow values, all before the answer; none without a progress token."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flowrt.store import RunStore
from tests.test_mcp import call, scenario, session

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "watch"


def notes(messages: list) -> list:
    return [m for m in messages if getattr(m, "method", None) == "notifications/progress"]


@scenario
async def test_a_run_and_a_resume_send_one_progress_notification_per_fact(tmp_path):
    copy = tmp_path / "p"
    shutil.copytree(PROGRAM, copy)
    runs = tmp_path / "runs"
    messages: list = []
    async with session(runs, messages=messages) as client:
        progress = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        done = (await call(client, "run", {"file": str(copy / "main.flow"), "entry": "asking", "input": {"n": 2}},
                           progress_callback=on_progress)).structured_content
        assert done["exitCode"] == 3
        run_id = done["run"]
        facts = RunStore.open(str(runs), run_id, for_append=False).facts()
        # Every fact, in order, before the answer: Start's own notification, then one per fact.
        assert [value for value, _ in progress] == [float(f["n"]) for f in facts]
        sent = notes(messages)
        assert [n.params.meta["ng.flowla/fact"] for n in sent] == [str(f["n"]) for f in facts]
        assert [n.params.meta["ng.flowla/hash"] for n in sent] == [f["hash"] for f in facts]
        assert all(n.params.meta["ng.flowla/run"] == run_id for n in sent)
        assert [n.params.meta.get("ng.flowla/kind") for n in sent[1:]] == [f["kind"] for f in facts[1:]]
        assert progress[-1][1] == f"run {run_id}: fact {facts[-1]['n']} Call {facts[-1]['call']} main.ask"
        # Bounded, and no Flow value: not the question the program asked, nor a step's answer.
        for note in sent:
            text = json.dumps(note.params.model_dump(by_alias=True))
            assert "is 3 right?" not in text and '"Ok"' not in text and len(note.params.message) <= 200
        # A resume that asked for progress: the facts it adds, from the Reply it admits on.
        progress.clear()
        before = len(notes(messages))
        resumed = (await call(client, "resume", {"run": run_id, "call": facts[-1]["call"], "reply": {"Ok": "yes"}},
                              progress_callback=on_progress)).structured_content
        assert resumed["exitCode"] == 0, resumed
        after = RunStore.open(str(runs), run_id, for_append=False).facts()
        added = after[len(facts):]
        assert [value for value, _ in progress] == [float(f["n"]) for f in added]
        assert added[0]["kind"] == "Reply" and added[-1]["kind"] == "End"
        assert len(notes(messages)) - before == len(added)
        # Without a progress token, nothing is sent.
        count = len(notes(messages))
        plain = (await call(client, "run", {"file": str(copy / "main.flow"), "input": {"n": 1}})).structured_content
        assert plain["exitCode"] == 0 and len(notes(messages)) == count
