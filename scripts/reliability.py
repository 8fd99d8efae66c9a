"""The reliability table: every measured way a Tool, an input, a file, a program or a crash could
make the host hang, crash, lose a fact or lie, tried for real, in one table.

    python scripts/reliability.py [--quick] [--only NAME ...]

Each row is a check with how many cases it tried and how many failed (a failure is a wrong
verdict, a lost or twice-sent fact, a hang, a traceback or an escape, as the row says);
docs/reliability.md explains each row. The first row is crash recovery: the host is killed with
SIGKILL at every fact boundary of a run with concurrent calls, each run is resumed, and every one
must reach the same End with no admitted fact lost and no call sent twice (no --resend is given).
The other rows come from the modules in scripts/reliability/, each exposing
`measure(quick) -> [{"check", "tried", "failures", "detail"}]`.

Exit status 0 only when no row has a failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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
    # Killed after a fact written in one write with End (a run's last Checkpoint): the run has
    # its End, and `flow resume` would say there is nothing to resume.
    ended = bool(before) and before[-1]["kind"] == "End"
    while done.returncode != 0 and not ended and resumes < 3:
        done = flow(["resume", run_id, "--allow", "--runs", str(runs)], work, env)
        resumes += 1
    after = facts(runs, run_id)
    sent = Counter(line.split()[1] for line in log.read_text().splitlines()) if log.exists() else Counter()
    return {"exit": 0 if ended else done.returncode, "end": after[-1].get("outcome") if after and after[-1]["kind"] == "End" else None,
            "facts_before": len(before), "lost": sum(1 for a, b in zip(before, after) if a != b)
            + max(0, len(before) - len(after)), "duplicates": sum(n - 1 for n in sent.values() if n > 1),
            "facts": len(after), "stderr": done.stderr[-500:]}


def measure_kills(quick: bool, rounds: int = 25, every: int = 1) -> list[dict]:
    if quick:
        rounds, every = 3, 3
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
            shutil.copy(HERE / name, work / name)
        clean = trial(work, rounds, None)
        if clean["exit"] != 0:
            return [{"check": "SIGKILL at every fact boundary, resumed", "tried": 1, "failures": 1,
                     "detail": f"the run without a kill exited {clean['exit']}: {clean['stderr']}"}]
        tried = different = lost = duplicates = 0
        for k in range(1, clean["facts"], every):
            result = trial(work, rounds, k)
            tried += 1
            different += not (result["end"] == clean["end"] and result["exit"] == 0)
            lost += result["lost"]
            duplicates += result["duplicates"]
        return [{"check": "SIGKILL at every fact boundary, resumed", "tried": tried,
                 "failures": different + lost + duplicates,
                 "detail": f"{rounds} rounds, one boundary in {every} of {clean['facts']} facts: {tried - different} "
                           f"reached the same End, {lost} facts lost, {duplicates} calls sent twice"}]


def load_measures() -> dict[str, object]:
    """The row modules, by name: loaded by path, since this script's name is also the folder's."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_") or path.name == "rounds_tool.py":
            continue
        spec = importlib.util.spec_from_file_location(f"reliability_rows.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "measure"):
            found[path.stem] = module.measure
    return found


def main() -> int:
    options = argparse.ArgumentParser()
    options.add_argument("--quick", action="store_true", help="a smaller sample of every row (about a minute each)")
    options.add_argument("--only", nargs="*", help="row modules to run (kills is the crash-recovery row)")
    args = options.parse_args()
    measures = {"kills": measure_kills, **load_measures()}
    rows = []
    for name, measure in measures.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        try:
            produced = measure(args.quick)
        except Exception as error:  # a row that cannot measure is a failure of the table, shown as such
            produced = [{"check": name, "tried": 0, "failures": 1, "detail": f"could not measure: {error!r}"}]
        for row in produced:
            rows.append((name, row, time.monotonic() - started))
        print(f"{name}: {len(produced)} rows in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print("| source | check | tried | failures | detail |")
    print("| --- | --- | ---: | ---: | --- |")
    for name, row, _ in rows:
        print(f"| {name} | {row['check']} | {row['tried']} | {row['failures']} | {row['detail']} |")
    return 0 if all(row["failures"] == 0 for _, row, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
