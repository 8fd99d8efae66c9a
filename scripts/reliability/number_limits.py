"""Numbers at the limits: every path an Int or a Decimal takes, at sizes around CPython's
4,300-digit guard and Flow's 100,000-digit limit, and Decimals at the exponent's ends.

Each case runs `python -m flowrt.cli` on a small program in a temporary directory, with a timeout
(a hang is a failure), and checks the exit code and the printed value; a Python traceback on
stderr is a failure whatever the exit code. Every completed run is then replayed (must match).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowdata.bigint import MAX_INT_DIGITS, int_text, text_int  # noqa: E402

TIMEOUT = 60

PROGRAMS = {
    "echo.flow": "pub flow main(n: Int) -> Int = n\n",
    "show.flow": 'pub flow main(n: Int) -> Text = "v=${n}"\n',
    "power.flow": "pub flow main(n: Int, k: Int) -> Int = pow(n, k, 1)\n"
                  "flow pow(n: Int, k: Int, acc: Int) -> Int = if k == 0 { acc } else { pow(n, k - 1, acc * n) }\n",
    "scale.flow": "pub flow main(d: Decimal, e: Decimal) -> Decimal = d * e\n",
    "big.flow": """pub type Problem { Busy }

@tool pub flow make(digits: Int) -> Result<Int, Problem>

pub flow main(digits: Int) -> Result<Int, ToolProblem<Problem>> !tool = match make(digits) {
    Ok(n) => Ok(n),
    Err(p) => Err(p),
}
""",
    "big_tool.py": """import os
from flowrt.toolkit import serve

serve({"big.make": lambda digits: 7 * (10 ** digits - 1) // 9},
      declared_in=os.path.join(os.path.dirname(os.path.abspath(__file__)), "big.flow"))
""",
    "flow.toml": '[tools]\n"big" = { command = ["%s", "big_tool.py"] }\n' % sys.executable,
}


def _flow(work: Path, *args: str, stdin: str | None = None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=work, input=stdin, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None


def _sevens(digits: int) -> int:
    return 7 * (10 ** digits - 1) // 9


def _cases(sizes: list[int], decimals: bool):
    """(path, label, args, stdin, expected exit, check of stdout and stderr)."""
    for d in sizes:
        ok = d <= MAX_INT_DIGITS
        n = -(10 ** d - 1)
        yield ("input", d, ["run", "echo.flow", "--input", "-"], f'{{"n": {int_text(n) if ok else "-" + "9" * d}}}',
               0 if ok else 2,
               (lambda out, err, n=n: text_int(out.strip()) == n) if ok else
               (lambda out, err: "over the limit of 100000 digits" in err))
        yield ("computed", d, ["run", "power.flow", "--input", json.dumps({"n": 10, "k": d - 1})], None,
               0 if ok else 1,
               (lambda out, err, d=d: out.strip() == "1" + "0" * (d - 1)) if ok else
               (lambda out, err: "fault[limit]" in err))
        if ok:
            yield ("interpolation", d, ["run", "show.flow", "--input", "-"], f'{{"n": {int_text(_sevens(d))}}}', 0,
                   lambda out, err, d=d: json.loads(out) == "v=" + "7" * d)
        yield ("command Tool reply", d, ["run", "big.flow", "--allow", "--input", json.dumps({"digits": d})], None,
               0 if ok else 4,
               (lambda out, err, d=d: text_int(out.strip()[6:-1]) == _sevens(d)) if ok else
               (lambda out, err: "over the limit of 100000 digits" in out))
    if decimals:
        top, bottom = 2 ** 63 - 1, -(2 ** 63)
        for d, e, expected in ((f"1E+{top - 1}", "10", f"1E+{top}"), (f"1E{bottom + 1}", "0.1", f"1E{bottom}"),
                               ("1E-900000000000000000", "1E-900000000000000000", "1E-1800000000000000000"),
                               ("-1.5E+999999999999999990", "1", "-1.5E+999999999999999990")):
            yield ("decimal exponent", f"{d}*{e}", ["run", "scale.flow", "--input", json.dumps({"d": d, "e": e})],
                   None, 0, lambda out, err, expected=expected: json.loads(out) == expected)
        for d, e in ((f"1E+{top}", "10"), (f"1E{bottom}", "0.1")):
            yield ("decimal exponent", f"{d}*{e} (beyond: limit)",
                   ["run", "scale.flow", "--input", json.dumps({"d": d, "e": e})], None, 1,
                   lambda out, err: "fault[limit]" in err)
        # The seed allows any 64-bit exponent: beyond libmpdec's +-10^18, inside 64 bits, exact;
        # one past 64 bits is refused (exit 2) naming the range.
        for d in ("1E+4000000000000000000", "1E-9223372036854775807"):
            yield ("decimal 64-bit exponent", d, ["run", "scale.flow", "--input", json.dumps({"d": d, "e": "1"})],
                   None, 0, lambda out, err, d=d: json.loads(out) == d)
        for d in ("1E+9223372036854775808", "10E+9223372036854775807"):
            yield ("decimal 64-bit exponent", f"{d} (refused)",
                   ["run", "scale.flow", "--input", json.dumps({"d": d, "e": "1"})], None, 2,
                   lambda out, err: "signed 64-bit range" in err)


def measure(quick: bool) -> list[dict]:
    sizes = [4_301, MAX_INT_DIGITS + 1] if quick else [4_301, 5_000, MAX_INT_DIGITS, MAX_INT_DIGITS + 1]
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="flow-numbers-") as tmp:
        work = Path(tmp)
        for name, text in PROGRAMS.items():
            (work / name).write_text(text)
        runs = work / "runs"
        for path, label, args, stdin, code, check in _cases(sizes, decimals=True):
            row = rows.setdefault(path, {"check": f"numbers: {path}", "tried": 0, "failures": 0, "bad": []})
            before = set(os.listdir(runs)) if runs.exists() else set()
            done = _flow(work, *args, "--runs", str(runs), stdin=stdin)
            row["tried"] += 1
            if done is None:
                why = "hang"
            elif "Traceback" in done.stderr:
                why = "traceback"
            elif done.returncode != code:
                why = f"exit {done.returncode}, not {code}"
            else:
                try:
                    why = None if check(done.stdout, done.stderr) else "wrong result"
                except (ValueError, IndexError):
                    why = "wrong result"
            if why is None and done.returncode != 2 and not quick:
                new = sorted(set(os.listdir(runs)) - before)
                for run_id in new:
                    replayed = _flow(work, "replay", run_id, "--runs", str(runs))
                    if replayed is None or replayed.returncode != 0:
                        why = "replay did not match"
            if why is not None:
                row["failures"] += 1
                row["bad"].append(f"{label}: {why}")
    out = []
    for row in rows.values():
        bad = row.pop("bad")
        row["detail"] = "; ".join(bad) if bad else ("sizes " + ", ".join(map(str, sizes)) + " digits"
                                                    if "decimal" not in row["check"] else "exponents at the signed 64-bit ends and past them")
        out.append(row)
    return out


if __name__ == "__main__":
    for row in measure("--full" not in sys.argv):
        print(f"{row['check']:<40} {row['tried']:>4} {row['failures']:>4}  {row['detail']}")
