"""`flow test` on 1,000 trivial tests in one file: one sandbox process serves them all.

    python scripts/bench/many_tests.py [--tests 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def program(count: int) -> str:
    lines = ["@tool pub flow double(n: Int) -> Int", "",
             "@fake(double) flow fake_double(n: Int) -> Int = n * 2", ""]
    for i in range(count):
        lines.append(f"@test flow t{i}() -> Result<Unit, Text> = if double({i}) == {2 * i} {{ Ok(()) }} "
                     f"else {{ Err(\"wrong\") }}")
    return "\n".join(lines) + "\n"


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--tests", type=int, default=1000)
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "many_test.flow"
        path.write_text(program(args.tests))
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "flowrt.cli", "test", str(path)], capture_output=True,
                                  text=True)
            times.append(time.perf_counter() - start)
            assert done.returncode == 0, done.stdout[-500:] + done.stderr[-2000:]
            assert done.stdout.strip().endswith(f"{args.tests} passed, 0 failed")
        print(f"flow test, {args.tests} trivial tests (each one faked Tool call): "
              f"median {statistics.median(times):.2f} s (first run compiles; later runs use the build cache)")


if __name__ == "__main__":
    main()
