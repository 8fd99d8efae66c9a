"""`flow run` of hello world, end to end, as `recorded_calls.py` measures it at its end: the wall
time of `python -m flowrt.cli run hello.flow --runs DIR`, next to `python -c pass`. Medians.

Two ways, because a checkout run with PYTHONDONTWRITEBYTECODE=1 recompiles its own modules at
every start while an installed package has its bytecode caches:

- `cached`: PYTHONDONTWRITEBYTECODE unset, after one warm-up run (so `__pycache__` exists);
- `as-is`: the environment as given (with PYTHONDONTWRITEBYTECODE=1 and no `__pycache__` of the
  tree's own modules, they are compiled at every start).

Several trees can be compared side by side (runs alternate between them, so both see the same
load): each is copied to a temporary folder first (without `__pycache__`), so the figures do not
depend on which caches the working tree happens to hold.

    python scripts/bench/hello_start.py [--runs 15] [TREE ...]      (default: this checkout)

`--overlap` measures instead, in this process and this checkout, what starting the child costs
the host beside work of its own (a CPU loop standing for the compiler's imports): `Child.start()`
then the work, against `Child.start_soon()`, the work, then `child()`. Alternated, medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELLO = 'pub flow main() -> Text = "hello, world"\n'


def copy_tree(tree: Path, into: Path) -> Path:
    target = into / tree.name
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".flow", "*.egg-info", ".pytest_cache",
                                    ".hypothesis", "tests", "docs", "examples")
    shutil.copytree(tree, target, ignore=ignore)
    return target


def one(tree: Path, env: dict, hello: str, runs: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "flowrt.cli", "run", hello, "--runs", runs], check=True,
                   capture_output=True, cwd=tree, env=env)
    return time.perf_counter() - start


def overlap(runs: int) -> None:
    sys.path.insert(0, str(ROOT))
    from flowrt.sandbox_process import Child

    Child.start().kill()  # the imports and the seccomp program's cache, paid once

    def work() -> None:
        sum(i * i for i in range(600_000))

    alone, blocking, threaded = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        alone.append(time.perf_counter() - start)
        start = time.perf_counter()
        child = Child.start()
        work()
        blocking.append(time.perf_counter() - start)
        child.kill()
        start = time.perf_counter()
        starting = Child.start_soon()
        work()
        child = starting.child()
        threaded.append(time.perf_counter() - start)
        child.kill()
    for name, times in (("work alone", alone), ("Child.start, work", blocking),
                        ("start_soon, work, child()", threaded)):
        print(f"{name:28s} median {statistics.median(times) * 1000:6.1f} ms  (min {min(times) * 1000:.1f})")


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--runs", type=int, default=15)
    options.add_argument("--overlap", action="store_true")
    options.add_argument("trees", nargs="*", default=[str(ROOT)])
    args = options.parse_args()
    if args.overlap:
        overlap(args.runs)
        return
    load_before = os.getloadavg()[0]  # the figures mean little when the machine is busy: say how busy
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        hello = str(base / "hello.flow")
        Path(hello).write_text(HELLO)
        runs = str(base / "runs")
        as_is = dict(os.environ)
        cached_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        trees = []
        for i, tree in enumerate(args.trees):
            holder = base / f"t{i}"
            holder.mkdir()
            plain = copy_tree(Path(tree).resolve(), holder)
            holder_c = base / f"c{i}"
            holder_c.mkdir()
            cached = copy_tree(Path(tree).resolve(), holder_c)
            trees.append((tree, plain, cached))
        for _, plain, cached in trees:
            one(cached, cached_env, hello, runs)  # writes __pycache__ (and the compiler's caches)
            one(plain, as_is, hello, runs)
        results = {(tree, mode): [] for tree, _, _ in trees for mode in ("cached", "as-is")}
        python = []
        for _ in range(args.runs):
            for tree, plain, cached in trees:
                results[(tree, "cached")].append(one(cached, cached_env, hello, runs))
                results[(tree, "as-is")].append(one(plain, as_is, hello, runs))
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            python.append(time.perf_counter() - start)
        for (tree, mode), times in results.items():
            times.sort()
            print(f"{tree:40s} {mode:7s} median {statistics.median(times) * 1000:6.0f} ms  "
                  f"(min {times[0] * 1000:.0f}, max {times[-1] * 1000:.0f}, n={len(times)})")
        print(f"python -c pass: median {statistics.median(python) * 1000:.0f} ms")
        print(f"load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
