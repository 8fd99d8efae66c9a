"""Property: random programs of spawns, waits, firsts and stops, run live with random reply
timings, replay Matched; and resuming from any prefix of their history (as a crash there would
leave it) re-serves the record without diverging and ends in a history that replays Matched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]

TOOL = """
import json, random, sys, threading, time
from flowrt.toolkit import describe
lock = threading.Lock()
def answer(m):
    time.sleep(random.random() * 0.02)
    with lock:
        print(json.dumps({"id": m["id"], "outcome": {"Ok": m["arguments"]["n"] * 10}}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m.get("op") == "describe":
        print(json.dumps({"op": "described", "tools": describe("main.flow", ["main.work"])}), flush=True)
    elif m.get("op") == "call":
        threading.Thread(target=answer, args=(m,), daemon=True).start()
"""


@st.composite
def programs(draw) -> str:
    lines = ['use "std@v1/task"', "", "@tool pub flow work(n: Int) -> Int", "",
             "pub flow main() -> Int !tool = {"]
    tasks: list[str] = []
    values: list[str] = []
    for step in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["spawn", "spawn", "wait", "first", "stop", "call"]))
        if kind == "spawn" or not tasks:
            name = f"t{step}"
            lines.append(f"    let {name} = task.spawn(flow() = work({step}))")
            tasks.append(name)
        elif kind == "wait":
            target = draw(st.sampled_from(tasks))
            lines.append(f"    let v{step} = task.wait({target})")
            values.append(f"v{step}")
        elif kind == "first":
            chosen = draw(st.lists(st.sampled_from(tasks), min_size=1, max_size=3, unique=True))
            lines.append(f"    let f{step} = task.first([{', '.join(chosen)}])")
            values.append(f"f{step}.1")
        elif kind == "stop":
            target = draw(st.sampled_from(tasks))
            lines.append(f"    let s{step} = task.stop({target})")
            lines.append(f"    let k{step} = match s{step} {{ task.Finished(x) => x, task.WasRunning => 0 }}")
            values.append(f"k{step}")
        else:
            lines.append(f"    let c{step} = work({100 + step})")
            values.append(f"c{step}")
    lines.append("    " + (" + ".join(values) if values else "0"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def flow(args: list[str], cwd: Path):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def history(runs: Path, run_id: str) -> list[str]:
    return (runs / run_id / "history.jsonl").read_text().splitlines()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs(), st.data())
def test_random_concurrent_programs_replay_and_resume(tmp_path_factory, source, data):
    work = tmp_path_factory.mktemp("prop")
    (work / "main.flow").write_text(source)
    (work / "tool.py").write_text(TOOL)
    (work / "flow.toml").write_text(f'[tools]\n"main" = {{ command = ["{sys.executable}", "tool.py"] }}\n')
    runs = work / "runs"
    done = flow(["run", "main.flow", "--allow", "--runs", str(runs)], work)
    assert done.returncode in (0, 1), done.stderr  # a wait on a stopped task faults, deterministically
    [run_id] = os.listdir(runs)
    assert flow(["replay", run_id, "--runs", str(runs)], work).returncode == 0
    lines = history(runs, run_id)
    prefix = data.draw(st.integers(1, len(lines) - 1))
    copy = work / "copies"
    shutil.copytree(runs / run_id, copy / run_id)
    (copy / run_id / "history.jsonl").write_text("\n".join(lines[:prefix]) + "\n")
    (copy / run_id / "host.jsonl").write_text("")
    facts = [json.loads(line) for line in lines[:prefix]]
    closed = {c for f in facts if f["kind"] == "Stop" for c in f.get("closed", [])}
    replied = {f["call"] for f in facts if f["kind"] == "Reply"}
    open_calls = [f["call"] for f in facts if f["kind"] == "Call" and f["call"] not in replied | closed]
    resend = [arg for call in open_calls for arg in ("--resend", call)]
    resumed = flow(["resume", run_id, "--allow", *resend, "--runs", str(copy)], work)
    assert resumed.returncode in (0, 1), resumed.stdout + resumed.stderr
    assert "diverged" not in resumed.stderr
    assert flow(["replay", run_id, "--runs", str(copy)], work).returncode == 0
