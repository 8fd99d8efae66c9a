"""Crash recovery, shown: kill the host with SIGKILL at every fact boundary of a run with
concurrent calls, resume each, and check that every one reaches the same End, that no admitted
fact was lost (the resumed history starts with the facts the killed one had), and that no call
was sent twice (no --resend is given).

    python scripts/reliability.py [--rounds 25] [--every 1]

Prints: kill points tried, resumed to the same End, facts lost, duplicate sends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent / "reliability"


def flow(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def facts(runs: Path, run_id: str) -> list[dict]:
    # A killed host leaves the NUL bytes it had reserved past its facts (docs/trace.md section 9).
    text = (runs / run_id / "history.jsonl").read_text().rstrip("\0")
    return [json.loads(line) for line in text.splitlines() if line]


def trial(work: Path, rounds: int, kill_after: int | None) -> dict:
    runs = work / f"runs-{kill_after}"
    log = work / f"sent-{kill_after}.log"
    env = dict(os.environ, ROUNDS_LOG=str(log))
    if kill_after is not None:
        env["FLOW_FAULT_KILL_AFTER"] = str(kill_after)
    done = flow(["run", "rounds.flow", "--allow", "--input", json.dumps({"rounds": rounds}), "--runs", str(runs)],
                work, env)
    env.pop("FLOW_FAULT_KILL_AFTER", None)
    [run_id] = os.listdir(runs)
    before = facts(runs, run_id)
    resumes = 0
    while done.returncode != 0 and resumes < 3:
        done = flow(["resume", run_id, "--allow", "--runs", str(runs)], work, env)
        resumes += 1
    after = facts(runs, run_id)
    sent = Counter(line.split()[1] for line in log.read_text().splitlines()) if log.exists() else Counter()
    return {"exit": done.returncode, "end": after[-1].get("outcome") if after and after[-1]["kind"] == "End" else None,
            "facts_before": len(before), "lost": sum(1 for a, b in zip(before, after) if a != b)
            + max(0, len(before) - len(after)), "duplicates": sum(n - 1 for n in sent.values() if n > 1),
            "facts": len(after), "stderr": done.stderr[-500:]}


def main() -> int:
    options = argparse.ArgumentParser()
    options.add_argument("--rounds", type=int, default=25)
    options.add_argument("--every", type=int, default=1, help="try every Nth fact boundary")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
            shutil.copy(HERE / name, work / name)
        clean = trial(work, args.rounds, None)
        assert clean["exit"] == 0, clean
        total = clean["facts"]
        print(f"clean run: {total} facts, End {json.dumps(clean['end'])}")
        tried = same = lost = duplicates = 0
        for k in range(1, total, args.every):
            result = trial(work, args.rounds, k)
            tried += 1
            same += result["end"] == clean["end"] and result["exit"] == 0
            lost += result["lost"]
            duplicates += result["duplicates"]
            if result["end"] != clean["end"]:
                print(f"  kill after fact {k}: exit {result['exit']}, End {result['end']} {result['stderr']}")
        print(f"kill points tried: {tried}, resumed to the same End: {same}, facts lost: {lost}, "
              f"duplicate sends: {duplicates}")
        return 0 if same == tried and lost == 0 and duplicates == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
