"""Which parser driver: today's `flowc.lalr` (lark's tables, read through lark's internals, run by
our own loop) against the two public ways lark offers for the same grammar: `lark.Lark(parser=
"lalr")` and the parser `python -m lark.tools.standalone` generates. All three build the same tree
with the same builder (`flowc.parse`), and the script checks that they do.

The standalone parser is generated into a temporary folder for the measurement only (it is
third-party code: it is never committed).

    python scripts/bench/parser_choice.py [--lines 10000] [--runs 7]
    python scripts/bench/parser_choice.py --callgrind [--lines 1000]

Wall time: the variants are interleaved (a round runs each once, in a rotating order), medians
and ranges per variant. Start-up: the time to have a ready parser in a fresh process (tables or
lark's cache already on disk, as for every `flow check` but the first). `--callgrind` counts
instructions instead (valgrind): per parse, as the difference between a process that parses twice
and one that parses once, so start-up and table loading are not counted.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

VARIANTS = ("flowc.lalr", "lark lalr", "lark standalone")


def generate_standalone(folder: str) -> str:
    """Generate lark's standalone parser of the grammar, with the options `parse._get_parser` uses."""
    out = os.path.join(folder, "flow_standalone.py")
    subprocess.run([sys.executable, "-m", "lark.tools.standalone", "-s", "module", "-s", "expr_s",
                    "-l", "contextual", "--keep_all_tokens", "--maybe_placeholders", "-o", out,
                    "flow.lark"], check=True, cwd=ROOT / "flowc" / "grammar")
    return out


def use(variant: str, standalone_folder: str | None):
    """Make `flowc.parse` parse with `variant`, in this process."""
    from flowc import parse as P

    if variant == "flowc.lalr":
        P._fast = None
        P._fast_parser()
        assert P._fast, "the fast parser could not be built"
        return
    P._fast = False  # every chunk goes to `_get_parser()`
    if variant == "lark lalr":
        P._parser = None
        P._get_parser()
        return
    sys.path.insert(0, standalone_folder)
    import flow_standalone

    P._parser = flow_standalone.Lark_StandAlone(
        transformer=P._BUILD, postlex=P._Postlex(), lexer_callbacks={"COMMENT": P._collect_comment})


def _load(variant: str, standalone_folder: str | None) -> None:
    """Start-up child: have a ready parser (lark's module imports count, as they would)."""
    from flowc import parse as P

    if variant == "flowc.lalr":
        P._fast_parser()
    elif variant == "lark lalr":
        P._get_parser()
    else:
        sys.path.insert(0, standalone_folder)
        import flow_standalone

        flow_standalone.Lark_StandAlone(transformer=P._BUILD, postlex=P._Postlex(),
                                        lexer_callbacks={"COMMENT": P._collect_comment})


def _callgrind_child(variant: str, standalone_folder: str | None, lines: int, times: int) -> None:
    from gen_program import generate

    from flowc.parse import parse

    source = generate(lines)
    use(variant, standalone_folder)
    for _ in range(times):
        assert parse(source, "big.flow").ok


def callgrind(variant: str, folder: str, lines: int) -> int:
    counts = []
    for times in (1, 2):
        out = os.path.join(folder, f"cg.{variant.replace(' ', '_')}.{times}")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        __file__, "--child-callgrind", variant, "--folder", folder, "--lines", str(lines),
                        "--times", str(times)], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONHASHSEED="0"))
        with open(out) as handle:
            total = next(int(line.split()[1]) for line in handle if line.startswith("totals:"))
        counts.append(total)
    return counts[1] - counts[0]


def main() -> None:
    options = argparse.ArgumentParser()
    options.add_argument("--lines", type=int, default=10_000)
    options.add_argument("--runs", type=int, default=7)
    options.add_argument("--callgrind", action="store_true")
    options.add_argument("--child-load", choices=VARIANTS)
    options.add_argument("--child-callgrind", choices=VARIANTS)
    options.add_argument("--folder")
    options.add_argument("--times", type=int, default=1)
    args = options.parse_args()
    if args.child_load:
        return _load(args.child_load, args.folder)
    if args.child_callgrind:
        return _callgrind_child(args.child_callgrind, args.folder, args.lines, args.times)

    with tempfile.TemporaryDirectory() as folder:
        generate_standalone(folder)
        if args.callgrind:
            counts = {variant: callgrind(variant, folder, args.lines) for variant in VARIANTS}
            base = counts["flowc.lalr"]
            print(f"instructions per parse of a generated {args.lines}-line program (callgrind):")
            for variant in VARIANTS:
                print(f"  {variant:16} {counts[variant] / 1e6:9.1f} M  {counts[variant] / base:5.2f}x")
            return
        wall(args, folder)


def wall(args, folder: str) -> None:
    from gen_program import generate

    from flowc import syntax as S
    from flowc.parse import parse

    source = generate(args.lines)
    lines = source.count("\n")
    trees = {}
    for variant in VARIANTS:
        use(variant, folder)
        parsed = parse(source, "big.flow")
        assert parsed.ok, parsed.diagnostics[:3]
        trees[variant] = S.dump(parsed.module)
        del parsed
    assert len(set(trees.values())) == 1, "the variants built different trees"

    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_ in range(args.runs):
        order = VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]
        for variant in order:
            use(variant, folder)
            gc.collect()
            start = time.perf_counter()
            parsed = parse(source, "big.flow")
            times[variant].append(time.perf_counter() - start)
            del parsed

    # With bytecode caches, as `flow check` runs once installed (this machine sets
    # PYTHONDONTWRITEBYTECODE); one warm-up each writes them.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for variant in VARIANTS:
        subprocess.run([sys.executable, __file__, "--child-load", variant, "--folder", folder], check=True, env=env)
    startup: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    bare = []
    for round_ in range(args.runs):
        order = VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]
        for variant in order:
            start = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--child-load", variant, "--folder", folder], check=True,
                           env=env)
            startup[variant].append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import flowc.parse"], check=True, cwd=ROOT, env=env)
        bare.append(time.perf_counter() - start)
    base = statistics.median(bare)

    print(f"parse only, generated {lines}-line program, {args.runs} interleaved rounds:")
    fast = statistics.median(times["flowc.lalr"])
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        print(f"  {variant:16} {lines / median:8.0f} lines/s  median {median * 1000:6.0f} ms "
              f"(range {min(times[variant]) * 1000:.0f}-{max(times[variant]) * 1000:.0f})  "
              f"{median / fast:5.2f}x the time of flowc.lalr")
    print(f"ready parser in a fresh process, beyond `import flowc.parse` ({base * 1000:.0f} ms), "
          "cache on disk:")
    for variant in VARIANTS:
        print(f"  {variant:16} +{(statistics.median(startup[variant]) - base) * 1000:5.0f} ms")


if __name__ == "__main__":
    main()
