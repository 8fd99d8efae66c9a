"""Resume cost does not depend on the history before the latest checkpoint: runs with about 1,000
and about 100,000 facts before it (then a pending call), archived, are resumed with a reply; the
median resume times and their ratio. The same runs resumed without archiving show what reading
the whole history costs.

    python scripts/bench/resume_cost.py [--small 1000] [--big 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import flowrt  # noqa: E402
from flowrt.replay import resume  # noqa: E402
from flowrt.run import run  # noqa: E402
from flowrt.store import RunStore  # noqa: E402

PROGRAM = """
@tool pub flow echo(n: Int) -> Int
@tool pub flow ask(question: Text) -> Text

pub flow main(n: Int) -> Text !tool = loop(n)

flow loop(n: Int) -> Text !tool = if n == 0 { ask("done?") } else { loop(n - 1 + 0 * echo(n)) }
"""

TOOLS = {"prog.echo": lambda n: n, "prog.ask": lambda question: flowrt.PENDING}


def make_run(directory: str, facts: int) -> tuple[str, str]:
    program = os.path.join(directory, "prog.flow")
    Path(program).write_text(PROGRAM)
    runs = os.path.join(directory, f"runs-{facts}")
    outcome = run(program, input_text=f'{{"n": {max(1, facts // 3)}}}', runs_dir=runs, python_tools=TOOLS,
                  durability="none")
    assert outcome.exit_code == 3, outcome
    return runs, outcome.run_id


def time_resume(runs: str, run_id: str, archived: bool, repeats: int) -> float:
    times = []
    for i in range(repeats):
        copy = f"{runs}-copy{i}-{archived}"
        shutil.copytree(runs, copy)
        if archived:
            store = RunStore.open(copy, run_id, for_append=True, durability="none")
            store.archive()
            store.close()
        start = time.perf_counter()
        outcome = resume(copy, run_id, call=_pending(copy, run_id), reply_text='{"Ok": "yes"}', python_tools=TOOLS,
                         durability="none")
        times.append(time.perf_counter() - start)
        assert outcome.exit_code == 0, outcome
        shutil.rmtree(copy)
    return statistics.median(times)


def _pending(runs: str, run_id: str) -> str:
    from flowrt.replay import open_calls

    store = RunStore.open(runs, run_id, for_append=False)
    try:
        return open_calls(store)[-1]
    finally:
        store.close()


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--small", type=int, default=1_000)
    options.add_argument("--big", type=int, default=100_000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        results = {}
        for size in (args.small, args.big):
            runs, run_id = make_run(directory, size)
            with open(os.path.join(runs, run_id, "history.jsonl")) as handle:
                facts = sum(1 for _ in handle)
            results[size] = (facts, time_resume(runs, run_id, True, args.runs),
                             time_resume(runs, run_id, False, args.runs))
        for size, (facts, archived, whole) in results.items():
            print(f"{facts:7d} facts before the checkpoint: resume {archived * 1000:7.0f} ms archived, "
                  f"{whole * 1000:7.0f} ms unarchived")
        small, big = results[args.small], results[args.big]
        print(f"ratio big/small, archived: {big[1] / small[1]:.2f}  (unarchived: {big[2] / small[2]:.2f})")


if __name__ == "__main__":
    main()
