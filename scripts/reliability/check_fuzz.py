"""`flow check` under fuzzing, for a fixed budget: modules drawn from the grammar (hypothesis's
lark strategy over flowc/grammar/flow.lark), the example programs mutated, random token sequences,
and the pathological shapes of tests/shapes.py (every kind of deep nesting up to 100,000 levels,
every long flat list up to 20,000 items, or 100,000 with the full run). Counts tracebacks, hangs
and wrong verdicts, and the worst time and peak memory per input size; then runs the deepest
program of each shape that checks ("what checks, runs").

    python scripts/reliability/check_fuzz.py [--quick]

Each input is a real file checked by `flow check --json` (flowrt.cli's own entry) in a process of
its own, forked from a worker that has imported the compiler once (a fresh interpreter per input
would spend the budget on start-ups): the child has an address-space limit and an alarm, the
worker kills it past the timeout (a hang), and its peak resident memory comes from wait4. The
worker itself is a subprocess with a timeout. `flow run` goes through `python -m flowrt.cli`.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = 30  # seconds for one `flow check`: past it, a hang
MEMORY = 4 << 30  # address space of one `flow check`: past it, a MemoryError (a traceback)
BUCKETS = ((1_000, "<1 KB"), (10_000, "1-10 KB"), (100_000, "10-100 KB"), (1_000_000, "100 KB-1 MB"),
           (None, ">=1 MB"))


def _bucket(size: int) -> str:
    return next(name for bound, name in BUCKETS if bound is None or size < bound)


# ---- inputs ------------------------------------------------------------------------------------


def _draw(strategy, count: int) -> list[str]:
    """`count` examples of a hypothesis strategy, as a test run would draw them (no database)."""
    from hypothesis import HealthCheck, given, settings

    drawn: list[str] = []

    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(text):
        drawn.append(text)

    collect()
    return drawn


def _inputs(quick: bool) -> list[dict]:
    from hypothesis import strategies as st

    from tests.fuzzgen import grammar_programs, mutated, tokens
    from tests.shapes import DEEP, FLAT

    n = 100 if quick else 1_200
    out: list[dict] = []
    deep_sizes = (1_000, 20_000, 100_000) if quick else (100, 1_000, 5_000, 20_000, 100_000, 1_000_000)
    flat_sizes = (20_000,) if quick else (100, 1_000, 5_000, 20_000, 100_000)
    for name, shape in sorted(DEEP.items()):
        for size in deep_sizes:
            # Past every bound (4 x 1,000 postfixes or operators), nesting-too-deep is the verdict.
            out.append({"family": "shapes", "label": f"{name} {size}", "text": shape(size),
                        "expect": "nesting-too-deep" if size > 4_000 and name != "deep-interpolation" else None})
    for name, shape in sorted(FLAT.items()):
        for size in flat_sizes:
            out.append({"family": "shapes", "label": f"{name} {size}", "text": shape(size), "expect": "ok"})
    # Shapes inside real programs: a mutated example with a pathological declaration added.
    shaped = st.tuples(mutated(), st.sampled_from(sorted({**DEEP, **FLAT})), st.integers(1, 3_000))
    families = [
        [{"family": "grammar", "text": t} for t in _draw(grammar_programs(), n)],
        [{"family": "mutated", "text": t} for t in _draw(mutated(), n)],
        [{"family": "mutated", "text": t} for t in _draw(tokens(), n // 3)],
        [{"family": "mutated", "text": m + "\n" + {**DEEP, **FLAT}[s](k).replace("main", "main2")}
         for m, s, k in _draw(shaped, n // 3)],
    ]
    # Taken in turns, so that a budget spent early leaves every family tried.
    for index in range(max(len(f) for f in families)):
        out += [f[index] for f in families if index < len(f)]
    return out


# ---- the worker: one forked `flow check` per input -----------------------------------------------


def _worker(folder: Path, timeout: float, budget: float) -> None:
    """Check every input file in `folder` (inputs.json names them), printing one JSON line each."""
    import contextlib

    from flowrt import cli

    names = json.loads((folder / "inputs.json").read_text())
    warm = folder / "warm.flow"
    warm.write_text("pub flow main() -> Int = 1\n")
    # One check here first: what it imports and caches (the std modules) every child inherits,
    # as a `flow check` started afresh has it from its cache folder.
    sys.argv = ["flow", "check", "--json", str(warm)]
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere), contextlib.suppress(SystemExit):
        cli.main()
    started = time.monotonic()
    for name in names:
        if time.monotonic() - started > budget:
            break
        result = _fork_check(folder / name, folder, timeout)
        result["name"] = name
        print(json.dumps(result), flush=True)


def _fork_check(path: Path, folder: Path, timeout: float) -> dict:
    out, err = folder / "out.txt", folder / "err.txt"
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: `flow check --json path`, as the command line runs it
        code = 1
        try:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
            signal.alarm(int(timeout) + 1)
            with open(out, "wb") as o, open(err, "wb") as e:
                os.dup2(o.fileno(), 1)
                os.dup2(e.fileno(), 2)
            sys.argv = ["flow", "check", "--json", str(path)]
            from flowrt.cli import main

            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:  # noqa: BLE001 - what the command line would print
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    hung = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            hung = True
            break
        time.sleep(0.002)
    seconds = time.monotonic() - start
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        hung = True
    stderr = err.read_text(errors="replace")
    codes: list[str] | None = None
    try:
        codes = [d["code"] for d in json.loads(out.read_text())["diagnostics"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {"exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status),
            "seconds": seconds, "peak_kb": usage.ru_maxrss, "hung": hung,
            "traceback": "Traceback" in stderr, "codes": codes, "stderr": stderr[-600:]}


# ---- running and counting ----------------------------------------------------------------------


def _check_all(inputs: list[dict], budget: float) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="check-fuzz-") as tmp:
        folder = Path(tmp)
        names = []
        for index, item in enumerate(inputs):
            name = f"in{index:05d}.flow"
            (folder / name).write_text(item["text"], encoding="utf-8", errors="surrogatepass")
            names.append(name)
        (folder / "inputs.json").write_text(json.dumps(names))
        worker = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(folder), str(TIMEOUT), str(budget)],
            cwd=folder, capture_output=True, text=True, timeout=budget + 3 * TIMEOUT + 120,
            env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
        if worker.returncode != 0:
            raise RuntimeError(f"the fuzzing worker failed: {worker.stderr[-2000:]}")
        by_name = {}
        for line in worker.stdout.splitlines():
            result = json.loads(line)
            by_name[result["name"]] = result
        results = []
        for name, item in zip(names, inputs):
            if name in by_name:
                results.append({**item, **by_name[name], "size": len(item["text"].encode("utf-8", "surrogatepass"))})
        return results


def _from_registry() -> set[str]:
    from flowc.diagnostics.codes import REGISTRY

    return set(REGISTRY)


def _verdict(result: dict, registry: set[str]) -> str | None:
    """What went wrong with one input, or None."""
    if result["hung"]:
        return "hang"
    if result["traceback"] or result["exit"] not in (0, 2):
        return "traceback"
    if result["codes"] is None or any(code not in registry for code in result["codes"]):
        return "wrong"
    expect = result.get("expect")
    if expect == "nesting-too-deep" and "nesting-too-deep" not in result["codes"]:
        return "wrong"
    if expect == "ok" and result["exit"] != 0:
        return "wrong"
    return None


def _row(check: str, results: list[dict], registry: set[str], extra: str = "") -> dict:
    verdicts = [_verdict(r, registry) for r in results]
    failures = [v for v in verdicts if v]
    worst = max(results, key=lambda r: r["seconds"], default=None)
    detail = (f"{failures.count('traceback')} tracebacks, {failures.count('hang')} hangs, "
              f"{failures.count('wrong')} wrong verdicts")
    if worst is not None:
        detail += (f"; worst {worst['seconds']:.2f} s ({worst['size']:,} bytes), "
                   f"peak {max(r['peak_kb'] for r in results) / 1024:.0f} MB")
    bad = [r for r, v in zip(results, verdicts) if v]
    if bad:
        detail += "; first: " + (bad[0].get("label") or repr(bad[0]["text"][:80])) + " " + bad[0]["stderr"][-200:]
    return {"check": check, "tried": len(results), "failures": len(failures), "detail": detail + extra}


def _by_size(results: list[dict]) -> str:
    parts = []
    for _, name in BUCKETS:
        inside = [r for r in results if _bucket(r["size"]) == name]
        if inside:
            slowest = max(inside, key=lambda r: r["seconds"])
            largest = max(inside, key=lambda r: r["peak_kb"])
            parts.append(f"{name}: {len(inside)} inputs, worst {slowest['seconds']:.2f} s ({_name(slowest)}), "
                         f"peak {largest['peak_kb'] / 1024:.0f} MB ({_name(largest)})")
    return "; ".join(parts)


def _name(result: dict) -> str:
    return result.get("label") or f"{result['family']} input of {result['size']:,} bytes"


def _runs_at_the_bounds(quick: bool) -> dict:
    """The deepest program of each shape that checks, run by `python -m flowrt.cli run`."""
    from flowc.frontend import check_program
    from tests.shapes import DEEP

    never_typed = {"member-chain", "call-chain", "try-chain", "deep-interpolation"}
    names = sorted(set(DEEP) - never_typed)
    if quick:
        names = ["add-chain", "deep-if", "deep-lambda", "deep-match", "deep-records", "deep-type"]

    def checks(text: str) -> bool:
        def read(path: str) -> str:
            if path == "main.flow":
                return text
            raise FileNotFoundError(2, "No such file or directory", path)

        return not any(d.code == "nesting-too-deep" for d in check_program("main.flow", read).diagnostics)

    failures, notes = 0, []
    with tempfile.TemporaryDirectory(prefix="check-runs-") as tmp:
        for name in names:
            low, high = 1, 4_000
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if checks(DEEP[name](middle)) else (low, middle - 1)
            path = Path(tmp) / f"{name}.flow"
            path.write_text(DEEP[name](low), encoding="utf-8")
            try:
                done = subprocess.run([sys.executable, "-m", "flowrt.cli", "run", str(path), "--runs",
                                       str(Path(tmp) / "runs")], cwd=ROOT, capture_output=True, text=True,
                                      timeout=300)
                ok = done.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
            failures += not ok
            notes.append(f"{name} {low}" + ("" if ok else " FAILED"))
    return {"check": "flow run of the deepest program of each shape that checks (what checks, runs)",
            "tried": len(names), "failures": failures, "detail": ", ".join(notes)}


def measure(quick: bool) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    registry = _from_registry()
    inputs = _inputs(quick)
    results = _check_all(inputs, budget=40 if quick else 900)
    family = {name: [r for r in results if r["family"] == name] for name in ("grammar", "mutated", "shapes")}
    rows = [
        _row("flow check: modules drawn from the grammar (hypothesis)", family["grammar"], registry),
        _row("flow check: mutated examples, token soup, examples with a shape added", family["mutated"], registry),
        _row("flow check: pathological shapes (deep nesting to "
             + ("100,000 levels, flat lists to 20,000)" if quick else "1,000,000 levels, flat lists to 100,000)"),
             family["shapes"], registry),
    ]
    all_failures = sum(1 for r in results if _verdict(r, registry))
    rows.append({"check": "flow check: worst time and peak memory per input size", "tried": len(results),
                 "failures": all_failures, "detail": _by_size(results)
                 + f" (of {len(inputs)} inputs drawn; peak memory is the whole process's)"})
    rows.append(_runs_at_the_bounds(quick))
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
        return 0
    rows = measure(quick="--quick" in sys.argv)
    for row in rows:
        print(f"{row['check']}: tried {row['tried']}, failures {row['failures']}\n    {row['detail']}")
    return 1 if any(row["failures"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
