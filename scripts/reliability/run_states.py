"""Run states, measured: runs made for real in each state `flow history` tells apart (a host still
running with its call out, a paused run, a host killed with SIGKILL with its call out, a host halted
by SIGINT; and a host killed right after each fact of a run with concurrent calls), and the runs
whose reported state, or the status given to their open calls, is wrong.

    python scripts/reliability/run_states.py [--full]

`measure(quick)` is what scripts/reliability.py calls. Every subprocess has a timeout: a hang, a
traceback or an exit code other than the expected one counts as a failure of that run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPROVAL = ROOT / "examples" / "approval" / "main.flow"
EXPENSE = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}
TIMEOUT = 60

GATED_FLOW = """\
@tool pub flow wait(path: Text) -> Text

pub flow main(path: Text) -> Text !tool = "got ${wait(path)}"
"""

GATED_TOOL = """\
import os, time
from flowrt.toolkit import serve

def wait(path):
    for _ in range(6000):
        if os.path.exists(path):
            return open(path).read()
        time.sleep(0.01)
    return "gave up"

serve({"gated.wait": wait}, declared_in="gated.flow")
"""

#: what each made state must be reported as, with its open call's status
EXPECTED = {"running": ("running", "out"), "paused": ("paused", "pending"),
            "crashed": ("crashed", "unknown-outcome"), "halted": ("halted", "unknown-outcome")}


def _flow(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _reported(runs: Path, run_id: str) -> tuple[str, list[str]] | str:
    """(state, open-call statuses) as `flow history --json` says, or why it could not be had."""
    done = _flow(["history", run_id, "--runs", str(runs), "--json"], ROOT)
    if done.returncode != 0 or "Traceback" in done.stderr:
        return f"history exited {done.returncode}: {done.stderr.strip()[-200:]}"
    view = json.loads(done.stdout)
    return view["state"], [entry["status"] for entry in view["open"]]


def _has_end(run: Path) -> bool:
    lines = (run / "history.jsonl").read_bytes().rstrip(b"\0").splitlines()
    return bool(lines) and json.loads(lines[-1])["kind"] == "End"


def _start_gated(work: Path, runs: Path, gate: Path) -> tuple[subprocess.Popen, str]:
    before = set(os.listdir(runs)) if runs.exists() else set()
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "gated.flow", "--allow", "--input",
                             json.dumps({"path": str(gate)}), "--runs", str(runs)],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and host.poll() is None:
            for run_id in (set(os.listdir(runs)) if runs.exists() else set()) - before:
                try:  # the run's directory is made before its history
                    if b'"kind":"Call"' in (runs / run_id / "history.jsonl").read_bytes():
                        return host, run_id
                except FileNotFoundError:
                    pass
            time.sleep(0.02)
    except BaseException:
        host.kill()
        raise
    host.kill()
    host.communicate(timeout=TIMEOUT)
    raise RuntimeError("the gated run's call never went out")


def _trial(made: str, work: Path, index: int) -> str | None:
    """Make one run in state `made`; None when it is reported right, else what went wrong."""
    runs = work / "runs"
    if made == "paused":
        done = _flow(["run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(runs)], ROOT)
        if done.returncode != 3:
            return f"the paused run exited {done.returncode}"
        run_id = done.stdout.split()[2]
        got = _reported(runs, run_id)
    else:
        gate = work / f"gate-{made}-{index}"
        host, run_id = _start_gated(work, runs, gate)
        try:
            if made == "running":
                got = _reported(runs, run_id)
            else:
                host.send_signal(signal.SIGKILL if made == "crashed" else signal.SIGINT)
                host.communicate(timeout=TIMEOUT)
                expected_exit = -signal.SIGKILL if made == "crashed" else 130
                if host.returncode != expected_exit:
                    return f"the {made} host exited {host.returncode}"
                got = _reported(runs, run_id)
        finally:
            gate.write_text("x")  # the Tool process (orphaned by a kill) ends
            if host.poll() is None:
                host.communicate(timeout=TIMEOUT)
        if made == "running" and isinstance(got, tuple):
            after = _reported(runs, run_id)  # and once it has finished, it is ended
            if after != ("ended", []):
                return f"a finished live run was reported {after}"
    state, status = EXPECTED[made]
    if got != (state, [status]):
        return f"{made} run {run_id} reported as {got}"
    return None


def _killed_at_facts(work: Path, quick: bool) -> dict:
    """The host of a run with concurrent calls (rounds.flow beside this file) killed with SIGKILL
    right after each fact in turn: every one must be reported crashed, each open call with an
    unknown outcome, whatever was out when it died."""
    here = Path(__file__).resolve().parent
    for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
        shutil.copy(here / name, work / name)
    env = dict(os.environ, ROUNDS_LOG=str(work / "sent.log"))
    points = range(1, 20, 3) if quick else range(1, 20)
    failures: list[str] = []
    for kill_after in points:
        runs = work / f"killed-{kill_after}"
        done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "rounds.flow", "--allow", "--input",
                               json.dumps({"rounds": 2}), "--runs", str(runs)], cwd=work, capture_output=True,
                              text=True, timeout=TIMEOUT, env=dict(env, FLOW_FAULT_KILL_AFTER=str(kill_after)))
        if done.returncode != -signal.SIGKILL:
            failures.append(f"killed after fact {kill_after}: the host exited {done.returncode}")
            continue
        [run_id] = os.listdir(runs)
        got = _reported(runs, run_id)
        # Killed after a fact written in one write with End (the run's last Checkpoint): ended.
        expected = "ended" if _has_end(runs / run_id) else "crashed"
        if isinstance(got, str) or got[0] != expected or any(s != "unknown-outcome" for s in got[1]):
            failures.append(f"killed after fact {kill_after}: reported as {got}")
    return {"check": "run states: host killed after fact k, state reported wrong", "tried": len(points),
            "failures": len(failures),
            "detail": f"kill points {points.start}..{points.stop - 1} step {points.step}"
                      + (f"; first wrong: {failures[0]}" if failures else "; every one crashed, calls unknown")}


def measure(quick: bool) -> list[dict]:
    per_state = 3 if quick else 12
    work = Path(tempfile.mkdtemp(prefix="run-states-"))
    try:
        (work / "gated.flow").write_text(GATED_FLOW)
        (work / "gated_tool.py").write_text(GATED_TOOL)
        (work / "flow.toml").write_text('[tools]\n"gated" = { command = ["%s", "gated_tool.py"] }\n'
                                        % sys.executable)
        tried = 0
        failures: list[str] = []
        counts = {made: 0 for made in EXPECTED}
        for index in range(per_state):
            for made in EXPECTED:
                tried += 1
                try:
                    problem = _trial(made, work, index)
                except (subprocess.TimeoutExpired, RuntimeError, OSError, ValueError) as error:
                    problem = f"{made}: {type(error).__name__}: {error}"
                if problem is None:
                    counts[made] += 1
                else:
                    failures.append(problem)
        detail = ", ".join(f"{counts[m]}/{per_state} {m}" for m in EXPECTED) + " reported right"
        if failures:
            detail += "; first wrong: " + failures[0]
        row = {"check": "run states: live/paused/crashed/halted runs, state reported wrong", "tried": tried,
                "failures": len(failures), "detail": detail}
        try:
            killed = _killed_at_facts(work, quick)
        except (subprocess.TimeoutExpired, OSError, ValueError) as error:
            killed = {"check": "run states: host killed after fact k, state reported wrong", "tried": 1,
                      "failures": 1, "detail": f"{type(error).__name__}: {error}"}
        return [row, killed]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for row in measure(quick="--full" not in sys.argv):
        print(json.dumps(row))
