"""Front-end figures: parse+check throughput on a generated 10,000-line program (in-process, and
end to end as `flow check` of the file less its start-up), and the start-up of `flow check` on a
small file. Medians of several runs; prints lines/s and milliseconds.

    python scripts/bench/check_throughput.py [--lines 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from gen_program import generate  # noqa: E402

from flowc.frontend import check_program  # noqa: E402
from flowc.parse import _get_parser, parse  # noqa: E402


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--lines", type=int, default=10_000)
    options.add_argument("--runs", type=int, default=5)
    args = options.parse_args()
    source = generate(args.lines)
    lines = source.count("\n")
    files = {"big.flow": source}

    def read(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(path)

    _get_parser()
    parse_times, check_times = [], []
    for _ in range(args.runs):
        # Each measurement starts as a `flow check` process does: with no earlier tree alive
        # (two large trees at once cost page faults and collections a single check never pays).
        gc.collect()
        start = time.perf_counter()
        parsed = parse(source, "big.flow")
        parse_times.append(time.perf_counter() - start)
        assert parsed.ok
        del parsed
        gc.collect()
        start = time.perf_counter()
        checked = check_program("big.flow", read)
        check_times.append(time.perf_counter() - start)
        assert checked.ok, checked.diagnostics[:3]
        del checked
    parse_s = statistics.median(parse_times)
    total_s = statistics.median(check_times)
    print(f"program: {lines} lines")
    print(f"parse only:        {lines / parse_s:9.0f} lines/s  (median {parse_s * 1000:.0f} ms)")
    print(f"parse+check (all): {lines / total_s:9.0f} lines/s  (median {total_s * 1000:.0f} ms, std included)")

    # End to end: `flow check` of the 10,000-line file, less its start-up on a small file.
    with tempfile.TemporaryDirectory() as directory:
        big = Path(directory) / "big.flow"
        big.write_text(source)
        small_file = HERE.parents[1] / "examples" / "payments" / "payments.flow"
        whole, bare = [], []
        for _ in range(args.runs):
            for path, times in ((big, whole), (small_file, bare)):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "flowrt.cli", "check", str(path)], check=True,
                               capture_output=True)
                times.append(time.perf_counter() - start)
        cli_s = statistics.median(whole) - statistics.median(bare)
    print(f"flow check of it:  {lines / cli_s:9.0f} lines/s  (median {statistics.median(whole) * 1000:.0f} ms "
          f"less {statistics.median(bare) * 1000:.0f} ms for a small file)")

    small = HERE.parents[1] / "examples" / "payments" / "payments.flow"
    startup = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flowrt.cli", "check", str(small)], check=True,
                       capture_output=True)
        startup.append(time.perf_counter() - start)
    baseline = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - start)
    print(f"flow check start-up on a small file: median {statistics.median(startup) * 1000:.0f} ms "
          f"(python -c pass: {statistics.median(baseline) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
