"""The live feed (flowrt/watch.py, `flow history --follow`): facts as another process writes them,
the endings (End, a pause, a halt, a crash), the timeout, and damage, through the store and the
real `flow` entry point."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowrt.store import RunNotFound, RunStore, StorageError
from flowrt.watch import RunWatch, watch_run, watch_run_async

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "watch"
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {"n": 1}, "modules": []}


def program(tmp_path: Path, *, hold: bool = False, delay: float | None = None) -> Path:
    """A copy of tests/programs/watch: its step Tool waits while `hold` exists beside it."""
    copy = tmp_path / "p"
    shutil.copytree(PROGRAM, copy)
    if hold:
        (copy / "hold").write_text("")
    if delay is not None:
        (copy / "delay").write_text(str(delay))
    return copy


def start_run(copy: Path, runs: Path, entry: str = "main", n: int = 2) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", str(copy / "main.flow"), "--entry", entry,
                             "--input", json.dumps({"n": n}), "--runs", str(runs), "--allow"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_id_of(runs: Path, process: subprocess.Popen) -> str:
    """The one run in `runs` once its Start is written (up to 60 s)."""
    for _ in range(1200):
        names = os.listdir(runs) if runs.exists() else []
        if names and (runs / names[0] / "history.jsonl").exists() and (runs / names[0] / "history.jsonl").stat().st_size:
            return names[0]
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError("the run never started")


def flow(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_facts_come_as_another_process_writes_them_and_the_watch_ends_at_end(tmp_path):
    copy = program(tmp_path, hold=True)
    runs = tmp_path / "runs"
    process = start_run(copy, runs, n=2)
    try:
        run_id = run_id_of(runs, process)
        feed = watch_run(str(runs), run_id, timeout=60)
        seen = []
        for row in feed:
            seen.append(row)
            if row["kind"] == "Call":
                break
        # The Tool holds its call: the writer is still running, and the Call came while it was.
        assert process.poll() is None
        assert [r["kind"] for r in seen] == ["Start", "Call"] and seen[1]["tool"] == "main.step"
        (copy / "hold").unlink()
        seen += list(feed)
    finally:
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert [r["n"] for r in seen] == list(range(1, len(seen) + 1))
    assert seen[-1]["kind"] == "End" and seen[-1]["summary"] == '{"Completed":3}'
    stored = RunStore.open(str(runs), run_id, for_append=False)
    assert [r["hash"] for r in seen] == [f["hash"] for f in stored.facts()]
    # As `flow history --json` shows each fact; a time, where the feed had it, is the recorded one
    # (a fact whose time comes late is given without it: tests/test_times.py has the times).
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json").stdout)
    untimed = [{k: v for k, v in r.items() if k not in ("acceptedAt", "durationMs")} for r in view["facts"]]
    assert [{k: v for k, v in r.items() if k not in ("acceptedAt", "durationMs")} for r in seen] == untimed
    for row, shown in zip(seen, view["facts"]):
        assert row.get("acceptedAt", shown["acceptedAt"]) == shown["acceptedAt"]


def test_the_watch_ends_at_a_pause(tmp_path):
    copy = program(tmp_path)
    runs = tmp_path / "runs"
    process = start_run(copy, runs, entry="asking", n=1)
    run_id = run_id_of(runs, process)
    rows = list(watch_run(str(runs), run_id, timeout=60))
    process.communicate(timeout=60)
    assert process.returncode == 3
    assert rows[-1]["kind"] == "Call" and rows[-1]["tool"] == "main.ask"
    # A run that is paused already: its facts, then the end.
    again = RunWatch(str(runs), run_id)
    try:
        later = [row for row in _drain(again)]
        assert [r["n"] for r in later] == [r["n"] for r in rows] and again.ending == "paused"
    finally:
        again.close()


def _drain(watch: RunWatch):
    from flowrt.watch import follow

    return list(follow(watch, timeout=30))


def test_the_watch_ends_at_a_halt(tmp_path):
    copy = program(tmp_path, hold=True)
    runs = tmp_path / "runs"
    process = start_run(copy, runs, n=2)
    try:
        run_id = run_id_of(runs, process)
        watch = RunWatch(str(runs), run_id)
        from flowrt.watch import follow

        feed = follow(watch, timeout=60)
        for row in feed:
            if row["kind"] == "Call":
                break
        process.send_signal(signal.SIGINT)  # an interrupt halts the run while its call is held
        rest = list(feed)
    finally:
        process.communicate(timeout=60)
        (copy / "hold").unlink(missing_ok=True)
    assert process.returncode == 130
    assert watch.ending == "halted" and all(r["kind"] != "End" for r in rest)
    watch.close()


def test_a_run_whose_host_died_ends_the_watch_as_crashed(tmp_path):
    runs = str(tmp_path)
    writer = RunStore.create(runs, "r", START, durability="none")
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    writer.close()  # no pause nor halt recorded, and nobody holds the run
    watch = RunWatch(runs, "r")
    rows = _drain(watch)
    assert [r["kind"] for r in rows] == ["Start", "Call"] and watch.ending == "crashed"
    watch.close()


def test_the_timeout_bounds_the_wait(tmp_path):
    runs = str(tmp_path)
    writer = RunStore.create(runs, "r", START, durability="none")  # holds the run: it is running
    try:
        began = time.monotonic()
        rows = []
        with pytest.raises(TimeoutError, match="did not end"):
            for row in watch_run(runs, "r", poll=0.02, timeout=0.3):
                rows.append(row)
        assert [r["kind"] for r in rows] == ["Start"]
        assert time.monotonic() - began < 30  # bounded (not a timing check: it did not hang)
    finally:
        writer.close()


def test_facts_written_after_the_watch_began_are_verified_as_they_come(tmp_path):
    runs = str(tmp_path)
    writer = RunStore.create(runs, "r", START, durability="none")
    feed = watch_run(runs, "r", poll=0.01, timeout=30)
    assert next(feed)["kind"] == "Start"
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {"x": 1}})
    writer.sync()
    assert next(feed)["kind"] == "Call"
    writer.append("Reply", {"call": "c1", "outcome": {"Ok": 2}})
    writer.append("End", {"outcome": {"Completed": 2}})
    writer.sync()  # (as a host does before it waits: the times of what it wrote are recorded)
    rest = list(feed)
    assert [r["kind"] for r in rest] == ["Reply", "End"] and "durationMs" in rest[0]
    writer.close()


def test_a_damaged_history_raises_storage_error(tmp_path):
    runs = str(tmp_path)
    writer = RunStore.create(runs, "r", START, durability="none")
    writer.append("Call", {"call": "c1", "tool": "m.t", "arguments": {}})
    feed = watch_run(runs, "r", poll=0.01, timeout=30)
    assert [next(feed)["kind"], next(feed)["kind"]] == ["Start", "Call"]
    # Bytes that are no fact, appended behind the writer's back: damage, never a fact.
    with open(os.path.join(runs, "r", "history.jsonl"), "ab") as handle:
        handle.write(b'{"kind":"Reply","n":3}\n')
    with pytest.raises(StorageError):
        next(feed)
    writer.close()
    # And a history damaged before the watch begins.
    path = os.path.join(runs, "r", "history.jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data.replace(b'"tool":"m.t"', b'"tool":"m.u"'))
    with pytest.raises(StorageError):
        list(watch_run(runs, "r", timeout=5))


def test_an_absent_run_and_bad_arguments_are_refused(tmp_path):
    with pytest.raises(RunNotFound):
        list(watch_run(str(tmp_path), "nope", timeout=1))
    with pytest.raises(ValueError):
        list(watch_run(str(tmp_path), "nope", poll=0))
    with pytest.raises(ValueError):
        list(watch_run(str(tmp_path), "nope", timeout=-1))


def test_the_async_watch_yields_the_same_facts(tmp_path):
    runs = str(tmp_path)
    writer = RunStore.create(runs, "r", START, durability="none")
    writer.sync()  # (as a host does before it waits: the times of what it wrote are recorded)

    async def main():
        rows = []
        async for row in watch_run_async(runs, "r", poll=0.01, timeout=30):
            rows.append(row)
            if row["kind"] == "Start":
                await asyncio.to_thread(writer.append, "Call", {"call": "c1", "tool": "m.t", "arguments": {}})
                await asyncio.to_thread(writer.sync)
            elif row["kind"] == "Call":
                await asyncio.to_thread(writer.append, "Reply", {"call": "c1", "outcome": {"Ok": 1}})
                await asyncio.to_thread(writer.append, "End", {"outcome": {"Completed": 1}})
                await asyncio.to_thread(writer.sync)
        return rows

    rows = asyncio.run(main())
    writer.close()
    assert [r["kind"] for r in rows] == ["Start", "Call", "Reply", "End"]
    assert rows == list(watch_run(runs, "r", timeout=30))

    async def timing_out():
        async for _ in watch_run_async(runs, "held", timeout=0.2):
            pass

    held = RunStore.create(runs, "held", START, durability="none")  # open for appending: running
    try:
        with pytest.raises(TimeoutError):
            asyncio.run(timing_out())
    finally:
        held.close()


# ---- flow history --follow ---------------------------------------------------------------------


def test_follow_prints_each_fact_and_exits_as_the_run_did(tmp_path):
    copy = program(tmp_path, delay=0.05)
    runs = tmp_path / "runs"
    process = start_run(copy, runs, entry="asking", n=2)
    run_id = run_id_of(runs, process)
    followed = flow("history", run_id, "--runs", str(runs), "--follow", "--json", "--timeout", "60")
    process.communicate(timeout=60)
    assert followed.returncode == 3, followed.stderr  # paused, as `flow run` said
    rows = [json.loads(line) for line in followed.stdout.splitlines()]
    assert rows[0]["kind"] == "Start" and rows[-1]["kind"] == "Call" and rows[-1]["tool"] == "main.ask"
    text = flow("history", run_id, "--runs", str(runs), "--follow")
    assert text.returncode == 3 and text.stdout.splitlines()[-1].startswith(f"run {run_id}: paused")
    answered = flow("resume", run_id, "--runs", str(runs), "--call", rows[-1]["call"], "--reply", '{"Ok": "yes"}',
                    "--allow")
    assert answered.returncode == 0, answered.stderr
    done = flow("history", run_id, "--runs", str(runs), "--follow", "--kind", "reply", "--json")
    assert done.returncode == 0
    assert {json.loads(line)["kind"] for line in done.stdout.splitlines()} == {"Reply"}


def test_follow_refuses_what_does_not_go_with_it_and_times_out(tmp_path):
    runs = str(tmp_path)
    assert flow("history", "nope", "--runs", runs, "--follow").returncode == 2
    assert flow("history", "nope", "--runs", runs, "--follow", "--summary").returncode == 2
    assert flow("history", "nope", "--runs", runs, "--timeout", "1").returncode == 2
    writer = RunStore.create(runs, "r", START, durability="none")
    try:
        waited = flow("history", "r", "--runs", runs, "--follow", "--timeout", "0.3")
        assert waited.returncode == 3 and "did not end" in waited.stderr
        assert waited.stdout.split()[0] == "1"
    finally:
        writer.close()
