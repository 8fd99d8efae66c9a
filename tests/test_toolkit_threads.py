"""`flowrt.toolkit.serve` runs each call on a thread of its own, reusing threads whose call ended:
calls out at once still run at once (one waits for the other here, so serving them one at a time
would never finish), round after round, and every thread that served a call is reused for the
next round's rather than a new one started per call (tests/test_toolkit_serve.py speaks to it over
its pipes directly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = """\
use "std@v1/task"
use "std@v1/list"

/// Waits (at most 20 s) until `release` of the same round was called; answers how it ended.
@tool pub flow hold(round: Int) -> Text
@tool pub flow release(round: Int) -> Int
/// How many threads have served calls in this process so far.
@tool pub flow threads() -> Int

pub flow main(rounds: Int) -> List<Text> !tool = loop(rounds, [])

flow loop(rounds: Int, seen: List<Text>) -> List<Text> !tool =
    if rounds == 0 {
        seen
    } else {
        let held = task.spawn(flow() = hold(rounds))
        let _ = release(rounds)
        let answer = task.wait(held)
        loop(rounds - 1, list.concat([seen, ["${answer}/${threads()}"]]))
    }
"""

TOOL = """\
import threading

from flowrt.toolkit import serve

released = {}
served = set()
guard = threading.Lock()


def note():
    with guard:
        served.add(threading.current_thread().name)  # a new Thread object is named anew


def event(round):
    with guard:
        return released.setdefault(round, threading.Event())


def hold(round):
    note()
    return "released" if event(round).wait(20) else "timed out"


def release(round):
    note()
    event(round).set()
    return round


def threads():
    note()
    return len(served)


serve({"pair.hold": hold, "pair.release": release, "pair.threads": threads}, declared_in="pair.flow")
"""


def test_calls_out_at_once_run_at_once_on_reused_threads(tmp_path: Path):
    (tmp_path / "pair.flow").write_text(PROGRAM)
    (tmp_path / "pair_tool.py").write_text(TOOL)
    (tmp_path / "flow.toml").write_text('[tools]\n"pair" = { python = "pair_tool.py" }\n')
    done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "pair.flow", "--allow", "--input",
                           json.dumps({"rounds": 6})], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert [a.split("/")[0] for a in answers] == ["released"] * 6
    # Two calls are out at once at most (hold and release), and the thread that reads the next line
    # runs the call it reads: three threads at most serve all 18 calls (a thread per call: 18).
    counts = [int(a.split("/")[1]) for a in answers]
    assert counts == sorted(counts) and 2 <= counts[-1] <= 3
