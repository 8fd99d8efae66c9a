"""The child template killed under live runs (flowrt/child_template.py): one `flowrt.Host` drives
runs whose sandbox children are forked from the template, and the template is SIGKILLed during
the k-th Tool call of each, for every k. Every run must then be halted (reason `template`, never
Faulted) or completed, keep every fact it had, resume on a new template to the End an
undisturbed run has, and have made each Tool call exactly once. A sequential run (no call is
left out when it halts: the call the template died in has its Reply) and one whose calls are all
out at once (task.all): the replies that came in before the halt are recorded then; a call
still out when it halted is settled Unknown by the plain resume, as after any halt (the program
then faults on it, an honest End), and none is ever made twice.

    python scripts/reliability/template_kills.py [--full]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROGRAMS = {
    "sequential": """\
@tool pub flow step(n: Int) -> Int

pub flow main(n: Int) -> Int !tool = walk(n, 0)

flow walk(n: Int, acc: Int) -> Int !tool = if n == 0 { acc } else { walk(n - 1, acc + step(n)) }
""",
    "concurrent": """\
use "std@v1/task"
use "std@v1/list"

@tool pub flow step(n: Int) -> Int

pub flow main(n: Int) -> Int !tool =
    list.fold(task.all(list.map(list.range(1, n + 1), flow(i) = flow() = step(i))), 0, flow(a, b) = a + b)
""",
}


def _facts(run: Path) -> list[dict]:
    text = (run / "history.jsonl").read_text().rstrip("\0")
    return [json.loads(line) for line in text.splitlines() if line]


def _case(work: Path, shape: str, calls: int, kill_at: int) -> str | None:
    """One run, the template killed in its `kill_at`-th call: None, or what went wrong."""
    import flowrt
    from flowrt import child_template

    program = work / f"{shape}.flow"
    program.write_text(PROGRAMS[shape])
    runs = work / f"runs-{shape}-{kill_at}"
    made: list[int] = []
    lock = threading.Lock()
    killed: list[int] = []

    def step(n: int) -> int:
        with lock:
            made.append(n)
            due = len(made) == kill_at and not killed
            if due:
                killed.append(child_template._template.pid)
        if due:
            os.kill(killed[0], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not child_template._template.ended and time.monotonic() < deadline:
                time.sleep(0.005)
        return n

    expected = calls * (calls + 1) // 2
    with flowrt.Host({f"{shape}.step": step}, runs=str(runs), durability="none") as host:
        first = host.run(str(program), {"n": calls})
        (run,) = runs.iterdir()
        before = _facts(run)
        if first.exit_code == 1 or any(f["kind"] == "End" and "Faulted" in f["outcome"] for f in before):
            return f"faulted: {first.message}"
        done, resumes = first, 0
        while done.exit_code == 130 and resumes < 3:
            if done.exit_code == 130:
                halts = [json.loads(line) for line in (run / "host.jsonl").read_text().splitlines()
                         if json.loads(line)["kind"] == "halted"]
                if not halts or halts[-1]["reason"] != "template":
                    return f"halted for {halts[-1]['reason'] if halts else 'no recorded reason'}"
            done = host.resume(run.name)
            resumes += 1
        after = _facts(run)
    if not killed:
        return "the template was never killed"
    unknown = done.exit_code == 1 and any(f["kind"] == "Reply" and "Unknown" in json.dumps(f["outcome"])
                                          for f in after)
    if shape == "concurrent" and unknown:
        pass  # a call out at the halt, settled Unknown: the fault is the program's honest End
    elif done.exit_code != 0 or done.output != expected:
        return f"ended {done.exit_code} with {done.output!r}, not {expected}"
    if [f["hash"] for f in after[:len(before)]] != [f["hash"] for f in before]:
        return "a fact was lost or changed"
    if len(made) != len(set(made)):
        return f"a call made twice: {sorted(made)}"
    if not unknown and sorted(made) != list(range(1, calls + 1)):
        return f"calls made {sorted(made)}"
    return "unknown" if unknown else None


def measure(quick: bool) -> list[dict]:
    from flowrt import child_template

    calls = 5 if quick else 10
    failures: list[str] = []
    tried = settled_unknown = 0
    halted_before = os.environ.get("FLOW_SANDBOX_TEMPLATE")
    os.environ["FLOW_SANDBOX_TEMPLATE"] = "1"
    restarts = child_template.RESTARTS
    child_template.RESTARTS = 10 ** 6  # a template per case: the cap is for a template that keeps dying by itself
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for shape in PROGRAMS:
                for kill_at in range(1, calls + 1):
                    tried += 1
                    try:
                        problem = _case(Path(scratch), shape, calls, kill_at)
                    except Exception as error:  # noqa: BLE001 - a traceback is a failure of the row
                        problem = f"{type(error).__name__}: {error}"
                    if problem == "unknown":
                        settled_unknown += 1
                    elif problem is not None:
                        failures.append(f"{shape}, killed in call {kill_at}: {problem}")
    finally:
        child_template.RESTARTS = restarts
        child_template.shut_down(5.0)
        if halted_before is None:
            os.environ.pop("FLOW_SANDBOX_TEMPLATE", None)
        else:
            os.environ["FLOW_SANDBOX_TEMPLATE"] = halted_before
    detail = (f"{len(PROGRAMS)} programs x {calls} calls, the template SIGKILLed in each call in turn: "
              f"{tried - len(failures)} halted (never faulted), kept every fact and resumed, no call made twice; "
              f"{tried - len(failures) - settled_unknown} reached the undisturbed End, {settled_unknown} "
              "faulted on a call out at the halt, settled Unknown")
    if failures:
        detail += f"; first wrong: {failures[0]}"
    return [{"check": "child template killed under a run, resumed", "tried": tried, "failures": len(failures),
             "detail": detail}]


if __name__ == "__main__":
    for row in measure("--full" not in sys.argv):
        print(json.dumps(row))
