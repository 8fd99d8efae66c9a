"""Resume cost does not depend on the history before the latest checkpoint: runs with about 1,000
and about 100,000 facts before it (then a pending call), archived, are resumed with a reply; the
median resume times and the median of their ratios, paired (each round resumes both sizes, in
alternating order, one after the other). The same runs resumed without archiving show what
reading the whole history costs.

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


def make_run(directory: str, facts: int) -> tuple[str, str, str]:
    """The paused run, in a runs directory of its own and in one where it is archived."""
    program = os.path.join(directory, "prog.flow")
    Path(program).write_text(PROGRAM)
    runs = os.path.join(directory, f"runs-{facts}")
    outcome = run(program, input_text=f'{{"n": {max(1, facts // 3)}}}', runs_dir=runs, python_tools=TOOLS,
                  durability="none")
    assert outcome.exit_code == 3, outcome
    archived = runs + "-archived"
    shutil.copytree(runs, archived)
    store = RunStore.open(archived, outcome.run_id, for_append=True, durability="none")
    store.archive()
    store.close()
    return runs, archived, outcome.run_id


def _link_archive(source: str, target: str) -> None:
    # A resume only reads archive/, so its files are linked, not copied: a copy of the 28 MB of
    # archived facts before each resume would leave the kernel writing them back while the
    # resume is timed, on the big run alone.
    if os.sep + "archive" + os.sep in source:
        os.link(source, target)
    else:
        shutil.copy2(source, target)


def time_resume(runs: str, run_id: str, copy: str) -> float:
    """One resume of a fresh copy of the run, in seconds."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(runs, copy, copy_function=_link_archive)
    call = _pending(copy, run_id)
    start = time.perf_counter()
    outcome = resume(copy, run_id, call=call, reply_text='{"Ok": "yes"}', python_tools=TOOLS, durability="none")
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    shutil.rmtree(copy)
    return elapsed


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
        made = {size: make_run(directory, size) for size in (args.small, args.big)}
        facts = {}
        for size, (runs, _, run_id) in made.items():
            with open(os.path.join(runs, run_id, "history.jsonl")) as handle:
                facts[size] = sum(1 for _ in handle)
        copy = os.path.join(directory, "copy")

        def resume_once(size: int, archived: bool) -> float:
            runs, archived_runs, run_id = made[size]
            return time_resume(archived_runs if archived else runs, run_id, copy)

        resume_once(args.small, True)  # (not counted: the first resume of a process warms it)
        # Paired: each round resumes both sizes, one after the other, so that load on the machine
        # falls on both alike; the ratio is the median of the rounds' ratios.
        timed: dict[tuple[int, bool], list[float]] = {(size, archived): [] for size in made
                                                      for archived in (True, False)}
        for round_ in range(args.runs):
            for archived in (True, False):
                order = (args.small, args.big) if round_ % 2 == 0 else (args.big, args.small)
                for size in order:
                    timed[(size, archived)].append(resume_once(size, archived))
        for size in made:
            print(f"{facts[size]:7d} facts before the checkpoint: resume "
                  f"{statistics.median(timed[(size, True)]) * 1000:7.0f} ms archived, "
                  f"{statistics.median(timed[(size, False)]) * 1000:7.0f} ms unarchived (medians of {args.runs})")

        def ratio(archived: bool) -> float:
            return statistics.median(big / small for big, small in zip(timed[(args.big, archived)],
                                                                        timed[(args.small, archived)]))
        print(f"ratio big/small, archived: {ratio(True):.2f}  (unarchived: {ratio(False):.2f}); "
              f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
