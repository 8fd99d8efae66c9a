"""Replay checks every checkpoint, measured. Two rows:

* checkpoint tampering: for every Checkpoint of real runs (the support example's saved history; a
  run of rounds of concurrent calls with a checkpoint after each round, recorded through `flow
  run`; a run carrying a task parked on its call across its checkpoints), the Checkpoint's
  arguments are altered and the chain hashed again (tests/forging.py), so the store finds a sound
  history. Each forgery is replayed with `flow replay` (from Start, the default) and with `flow
  test` on its directory; a replay that does not say Diverged at that Checkpoint's fact (exit 1
  for replay, a failed test naming the fact for `flow test`) is a failure.
* program changes before the latest checkpoint: edits to the current program, each changing what
  the run does at a known fact at or before the saved history's latest checkpoint; `flow test`
  must fail the history at that fact. Edits this run cannot show (a branch it never takes) must
  pass: a false alarm is a failure too.

    python scripts/reliability/replay_checkpoints.py [--full]

`measure(quick)` is what scripts/reliability.py calls. Every subprocess has a timeout: a hang, a
traceback or an unexpected exit code counts as a failure of that trial.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.forging import alter_arguments, forge, read_facts  # noqa: E402

HERE = Path(__file__).resolve().parent
SUPPORT = ROOT / "examples" / "support"
FEED = ROOT / "tests" / "programs" / "feed"
TIMEOUT = 120

#: (old text, new text, the fact the changed program first differs at) in examples/support/main.flow,
#: whose saved history's checkpoints are facts 9 and 14; None: a change this run cannot show (a
#: branch it never takes), which must pass
SUPPORT_EDITS = [
    ("= work(ticket, [], 1)", '= work(ticket, ["seen"], 1)', 2),
    ("flow() = web.search(query),", 'flow() = web.search(query ++ " "),', 4),
    ("flow() = docs.search(query),", 'flow() = docs.search("${query}?"),', 5),
    ("Ok(hit) => work(ticket, notes ++ [hit], round + 1)", 'Ok(hit) => work(ticket, notes ++ [hit ++ "."], round + 1)',
     9),
    ("Ok(hit) => work(ticket, notes ++ [hit], round + 1)", "Ok(hit) => work(ticket, notes ++ [hit], round + 2)", 9),
    # the notes are empty when the one search returns: this run is the same
    ("Ok(hit) => work(ticket, notes ++ [hit], round + 1)", "Ok(hit) => work(ticket, [hit] ++ notes, round + 1)",
     None),
    ("match human.ask(question)", 'match human.ask("${question} ")', 12),
    ("Ok(answer) => work(ticket, notes ++ [answer], round + 1)",
     "Ok(answer) => work(ticket, notes ++ [answer, answer], round + 1)", 14),
    ("guard round <= 10 else", "guard round <= 1 else", 10),
    ("Err(_) => work(ticket, notes, round + 1)", "Err(_) => work(ticket, notes, round + 3)", None),
    ("Err(_) => Unanswered(question)", 'Err(_) => Unanswered("${question}!")', None),
]


def flow(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None


def replay_says(runs: Path, run_id: str, fact: int) -> bool:
    done = flow(["replay", run_id, "--runs", str(runs), "--json"], runs)
    if done is None or done.returncode != 1:
        return False
    seen = json.loads(done.stdout)
    return seen["verdict"] == "Diverged" and seen["fact"] == fact


def flow_test_says(folder: Path, fact: int | None) -> bool:
    """`flow test` on a folder holding one saved history: failed at `fact`, or passed for None."""
    done = flow(["test", str(folder), "--json"], folder)
    if done is None or done.returncode not in (0, 1):
        return False
    results = json.loads(done.stdout)["tests"]
    if len(results) != 1:
        return False
    [result] = results
    if fact is None:
        return done.returncode == 0 and result["outcome"] == "passed"
    return done.returncode == 1 and result["outcome"] == "failed" and \
        str(result.get("message", "")).startswith(f"Diverged at fact {fact}: ")


def recorded_rounds(work: Path, rounds: int) -> tuple[Path, Path, str] | None:
    """A run of `rounds` rounds of four concurrent calls (scripts/reliability/rounds.flow, served
    by its command through flow.toml): (program folder, runs dir, run id)."""
    folder = work / "rounds"
    folder.mkdir()
    for name in ("rounds.flow", "rounds_tool.py"):
        shutil.copy(HERE / name, folder / name)
    (folder / "flow.toml").write_text('[tools]\n"rounds" = { command = [%s, "rounds_tool.py"] }\n'
                                      % json.dumps(sys.executable))
    env = dict(os.environ, ROUNDS_LOG=str(work / "rounds-sent.log"))
    done = flow(["run", "rounds.flow", "--allow", "--input", json.dumps({"rounds": rounds}), "--runs", "runs"],
                folder, env)
    if done is None or done.returncode != 0:
        return None
    [run_id] = os.listdir(folder / "runs")
    return folder, folder / "runs", run_id


def recorded_feed(work: Path, rounds: int) -> tuple[Path, Path, str] | None:
    """A run whose every checkpoint carries a task parked on its call (paused, then resumed)."""
    folder = work / "feed"
    shutil.copytree(FEED, folder)
    (folder / "flow.toml").write_text('[tools]\n"main.next" = { pending = true }\n'
                                      '"main.tick" = { command = [%s, "tick.py"] }\n' % json.dumps(sys.executable))
    done = flow(["run", "main.flow", "--allow", "--input", json.dumps({"rounds": rounds}), "--runs", "runs"], folder)
    if done is None or done.returncode != 3:
        return None
    run_id = done.stdout.split()[2]
    done = flow(["resume", run_id, "--call", "root/1#1", "--reply", '{"Ok": "hello"}', "--runs", "runs", "--allow"],
                folder)
    if done is None or done.returncode != 0:
        return None
    return folder, folder / "runs", run_id


def saved_support(work: Path) -> tuple[Path, Path, str]:
    folder = work / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns(".flow"))
    runs = folder / "histories"
    [run_id] = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    return folder, runs, run_id


def tamper(recorded: tuple[Path, Path, str], label: str) -> tuple[int, int, list[str]]:
    """Every Checkpoint of one run altered in turn, each forgery replayed twice."""
    folder, runs, run_id = recorded
    tried = failures = 0
    missed: list[str] = []
    targets = [f["n"] for f in read_facts(runs / run_id) if f["kind"] == "Checkpoint"]
    for target in targets:
        forged = folder / f"forged-{target}"
        shutil.copytree(runs / run_id, forged / run_id)
        try:
            forge(forged / run_id, target, "arguments", alter_arguments)
        except ValueError as problem:  # nothing to alter: counted, since the row claims every checkpoint
            tried += 2
            failures += 2
            missed.append(f"{label} fact {target}: {problem}")
            continue
        for how, said in (("replay", replay_says(forged, run_id, target)),
                          ("flow test", flow_test_says(forged, target))):
            tried += 1
            if not said:
                failures += 1
                missed.append(f"{label} fact {target} ({how})")
        shutil.rmtree(forged)
    return tried, failures, missed


def measure(quick: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        runs_made = [("support", saved_support(work)),
                     ("rounds", recorded_rounds(work, 4 if quick else 25)),
                     ("parked", recorded_feed(work, 2 if quick else 12))]
        tried = failures = checkpoints = 0
        missed: list[str] = []
        for label, recorded in runs_made:
            if recorded is None:  # the run could not be recorded: nothing was tried, and that is a failure
                tried += 1
                failures += 1
                missed.append(f"{label}: not recorded")
                continue
            checkpoints += sum(1 for f in read_facts(recorded[1] / recorded[2]) if f["kind"] == "Checkpoint")
            t, f, m = tamper(recorded, label)
            tried, failures, missed = tried + t, failures + f, missed + m
        rows = [{"check": "checkpoint tampering", "tried": tried, "failures": failures,
                 "detail": f"{checkpoints} checkpoints of 3 real runs (support, rounds of concurrent calls, a task "
                           f"parked across checkpoints), each altered and re-chained, replayed with flow replay "
                           f"(from Start) and flow test; failures: not Diverged at that fact"
                           + (f"; missed: {', '.join(missed[:5])}" if missed else "")}]

        folder, runs, run_id = saved_support(work / "edits")
        main = folder / "main.flow"
        original = main.read_text()
        tried = failures = 0
        missed = []
        for old, new, fact in SUPPORT_EDITS:
            tried += 1
            if old not in original:
                failures += 1
                missed.append(f"edit not applicable: {old}")
                continue
            main.write_text(original.replace(old, new, 1))
            if not flow_test_says(runs, fact):
                failures += 1
                missed.append(f"{new} (expected {'a pass' if fact is None else f'Diverged at fact {fact}'})")
        main.write_text(original)
        changed = sum(1 for e in SUPPORT_EDITS if e[2] is not None)
        rows.append({"check": "program changes before the latest checkpoint (flow test)", "tried": tried,
                     "failures": failures,
                     "detail": f"{changed} edits of the support program changing a fact at or before its saved "
                               f"history's latest checkpoint (fact 14) must fail at that fact; "
                               f"{tried - changed} edits the run cannot show must pass"
                               + (f"; wrong: {', '.join(missed[:5])}" if missed else "")})
        return rows


def main() -> int:
    options = argparse.ArgumentParser()
    options.add_argument("--full", action="store_true")
    args = options.parse_args()
    rows = measure(quick=not args.full)
    for row in rows:
        print(f"{row['check']}: {row['tried']} tried, {row['failures']} failures  ({row['detail']})")
    return 1 if any(row["failures"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
