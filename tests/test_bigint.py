"""Ints up to 100,000 digits and Decimals at the exponent's limits on every path: conversion
(flowdata.bigint), canonical JSON (flowdata.canonical, as the ABI and the store write it), the channel, `--input`, output, Tool replies
(a command Tool and a Python callable), Text interpolation, replay; and the limit itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import assume, given, settings, strategies as st

from flowdata import canonical, codec
from flowrt.run import run
from flowrt.store import canonical_bytes, loads_canonical
from flowdata import framing
from flowdata.bigint import MAX_INT_DIGITS, IntOverLimit, int_text, over_limit, text_int
from flowdata.values import decimal_text, parse_decimal

ROOT = Path(__file__).resolve().parents[1]


def flow(*args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


@st.composite
def big_ints(draw, max_digits=MAX_INT_DIGITS):
    """An int of 1..max_digits digits: random digits, or runs of 9s and 0s at powers of ten."""
    digits = draw(st.one_of(st.integers(1, 30), st.integers(4_290, 4_310), st.integers(1, max_digits),
                            st.sampled_from([max_digits - 1, max_digits])))
    shape = draw(st.sampled_from(["random", "nines", "power"]))
    if shape == "nines":
        n = 10 ** digits - 1
    elif shape == "power":
        n = 10 ** (digits - 1)
    else:
        rnd = draw(st.randoms(use_true_random=False))
        n = rnd.randrange(10 ** (digits - 1), 10 ** digits)
    return -n if draw(st.booleans()) else n


@settings(max_examples=30, deadline=None)
@given(big_ints())
def test_int_text_round_trips_up_to_the_limit(n):
    text = int_text(n)
    assert len(text.lstrip("-")) <= MAX_INT_DIGITS
    assert text_int(text) == n
    assert Decimal(text) == Decimal(n)  # the digits are right (Decimal has no 4,300-digit guard)


@settings(max_examples=20, deadline=None)
@given(big_ints())
def test_big_ints_through_canonical_json_store_and_channel(n):
    data = {"v": [n, "x", {"n": n}]}
    text = canonical.dumps(data)
    assert text == canonical_bytes(data)
    assert codec.decode(codec.parse_json(text), {"Dict": ["Text", {"List": "json.Value"}]}) is not None
    assert codec.decode(codec.parse_json(int_text(n)), "Int") == n
    assert loads_canonical(text) == data
    frame = framing.encode(data)
    exact = bool(int.from_bytes(frame[:4], "big") & framing.EXACT)
    assert exact == (n >= 2 ** 64 or n < -2 ** 63)  # orjson's own range: unsigned 64 bits up
    assert framing.decode_body(frame[4:], exact) == data


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 10 ** 30), st.integers(-(2 ** 63), 2 ** 63 - 1), st.booleans())
def test_decimals_with_extreme_exponents_round_trip(coefficient, exponent, negative):
    try:
        d = parse_decimal(f"{'-' if negative else ''}{coefficient}E{exponent}")
    except ValueError:  # its last significant digit beyond the 64-bit range (trailing zeros)
        assume(False)
    text = decimal_text(d)
    assert parse_decimal(text) == d
    assert codec.decode(codec.parse_json(canonical.dumps({"d": codec.encode(d, "Decimal")})), {"Dict": ["Text", "Decimal"]}) \
        .get("d") == d
    frame = framing.encode({"d": text})
    assert parse_decimal(framing.decode_body(frame[4:])["d"]) == d


def test_the_limit_is_exact_and_checked_before_converting():
    assert not over_limit(10 ** MAX_INT_DIGITS - 1) and not over_limit(-(10 ** MAX_INT_DIGITS - 1))
    assert over_limit(10 ** MAX_INT_DIGITS) and over_limit(-(10 ** MAX_INT_DIGITS))
    with pytest.raises(IntOverLimit):
        int_text(10 ** MAX_INT_DIGITS)
    assert text_int("0" * 50 + "9" * MAX_INT_DIGITS) == 10 ** MAX_INT_DIGITS - 1  # leading zeros are not digits
    huge = 1 << 40_000_000
    started = time.perf_counter()
    for text in ("9" * (MAX_INT_DIGITS + 1), "-" + "9" * 10_000_000):
        with pytest.raises(IntOverLimit):
            text_int(text)
    with pytest.raises(IntOverLimit):
        int_text(huge)
    assert time.perf_counter() - started < 2  # refused by a length or a comparison, not converted
    with pytest.raises(ValueError):
        text_int("1" * 700 + "x")
    # The channel refuses a frame holding an over-limit Int (a child could only send one by a bug).
    body = b'{"v":' + b"9" * (MAX_INT_DIGITS + 1) + b"}"
    with pytest.raises(framing.ChannelError):
        framing.decode_body(body, exact=True)


# ---- end to end through `flow` ---------------------------------------------------------------

ECHO = "pub flow main(n: Int) -> Int = n\n"
SHOW = 'pub flow main(n: Int) -> Text = "v=${n}"\n'
POWER = """pub flow main(n: Int, k: Int) -> Int = pow(n, k, 1)
flow pow(n: Int, k: Int, acc: Int) -> Int = if k == 0 { acc } else { pow(n, k - 1, acc * n) }
"""
SCALE = "pub flow main(d: Decimal, e: Decimal) -> Decimal = d * e\n"
BIG_TOOL = """pub type Problem { Busy }

@tool pub flow make(digits: Int) -> Result<Int, Problem>

pub flow main(digits: Int) -> Result<Text, ToolProblem<Problem>> !tool = match make(digits) {
    Ok(n) => Ok("${n % 1000} ${text.length("${n}")}"),
    Err(p) => Err(p),
}

use "std@v1/text"
"""
TOOLKIT_TOOL = """import os
from flowrt.toolkit import serve

serve({"big.make": lambda digits: 7 * (10 ** digits - 1) // 9},
      declared_in=os.path.join(os.path.dirname(os.path.abspath(__file__)), "big.flow"))
"""
RAW_TOOL = """import json, os, sys
from flowrt.toolkit import describe
here = os.path.dirname(os.path.abspath(__file__))
for raw in sys.stdin:
    m = json.loads(raw)
    if m.get("op") == "describe":
        print(json.dumps({"op": "described", "tools": describe(os.path.join(here, "big.flow"), ["big.make"])}), flush=True)
    elif m.get("op") == "call":
        print('{"id": %s, "outcome": {"Ok": %s}}' % (json.dumps(m["id"]), "7" * m["arguments"]["digits"]), flush=True)
"""


def program(tmp_path: Path, text: str, name: str = "main.flow") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_ids(runs: Path) -> list[str]:
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


@pytest.mark.parametrize("digits", [4_301, 5_000, MAX_INT_DIGITS])
def test_input_and_output_of_big_ints_and_replay(tmp_path, digits):
    runs = tmp_path / "runs"
    n = -(10 ** digits - 1)
    done = flow("run", program(tmp_path, ECHO), "--input", "-", "--runs", str(runs),
                stdin=f'{{"n": {int_text(n)}}}')
    assert done.returncode == 0, done.stderr[-2000:]
    assert text_int(done.stdout.strip()) == n
    [run_id] = run_ids(runs)
    replayed = flow("replay", run_id, "--runs", str(runs))
    assert replayed.returncode == 0 and "Matched" in replayed.stdout, replayed.stderr[-2000:]


def test_input_over_the_limit_is_refused_before_any_fact(tmp_path):
    runs = tmp_path / "runs"
    for text in ("9" * (MAX_INT_DIGITS + 1), "-" + "1" * 1_000_000):
        done = flow("run", program(tmp_path, ECHO), "--input", "-", "--runs", str(runs), stdin=f'{{"n": {text}}}')
        assert done.returncode == 2, done.stderr[-2000:]
        assert "input-invalid" in done.stderr and "integer over the limit of 100000 digits" in done.stderr
        assert "Traceback" not in done.stderr
    assert run_ids(runs) == []


def test_computed_big_int_and_its_interpolation(tmp_path):
    runs = tmp_path / "runs"
    done = flow("run", program(tmp_path, POWER), "--input", '{"n": 10, "k": 4515}', "--runs", str(runs))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1" + "0" * 4515
    n = 7 * (10 ** 5_000 - 1) // 9
    shown = flow("run", program(tmp_path, SHOW, "show.flow"), "--input", f'{{"n": {int_text(n)}}}', "--runs", str(runs))
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout) == "v=" + "7" * 5_000


def test_computed_int_over_the_limit_faults_limit(tmp_path):
    runs = tmp_path / "runs"
    done = flow("run", program(tmp_path, POWER), "--input", '{"n": 10, "k": 100000}', "--runs", str(runs))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "fault[limit]" in done.stderr and "over the limit of 100000 digits" in done.stderr
    interpolated = 'pub flow main(k: Int) -> Int = text.length("${pow(10, k, 1)}")\n' + POWER.split("\n", 1)[1] \
        + 'use "std@v1/text"\n'
    done = flow("run", program(tmp_path, interpolated, "interp.flow"), "--input", '{"k": 100000}', "--runs", str(runs))
    assert done.returncode == 1 and "fault[limit]" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("tool", [TOOLKIT_TOOL, RAW_TOOL], ids=["toolkit", "raw"])
def test_command_tool_replies_of_big_ints(tmp_path, tool):
    program(tmp_path, BIG_TOOL, "big.flow")
    (tmp_path / "big_tool.py").write_text(tool)
    (tmp_path / "flow.toml").write_text('[tools]\n"big" = { command = ["%s", "big_tool.py"] }\n' % sys.executable)
    runs = tmp_path / "runs"
    for digits, expected in ((5_000, {"Ok": "777 5000"}), (MAX_INT_DIGITS, {"Ok": "777 100000"})):
        done = flow("run", "big.flow", "--input", f'{{"digits": {digits}}}', "--runs", str(runs), "--allow",
                    cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == expected
    done = flow("run", "big.flow", "--input", f'{{"digits": {MAX_INT_DIGITS + 1}}}', "--runs", str(runs), "--allow",
                cwd=tmp_path, timeout=60)
    assert done.returncode == 4, done.stderr[-2000:]
    answer = json.loads(done.stdout)["Err"]["BadReply"]
    assert "over the limit of 100000 digits" in answer


def test_python_callable_tool_replies_of_big_ints(tmp_path):
    path = program(tmp_path, BIG_TOOL, "big.flow")
    make = {"big.make": lambda digits: 7 * (10 ** digits - 1) // 9}
    for digits, code, expected in ((5_000, 0, {"Ok": "777 5000"}), (MAX_INT_DIGITS, 0, {"Ok": "777 100000"}),
                                   (MAX_INT_DIGITS + 1, 4, None)):
        outcome = run(path, input_text=f'{{"digits": {digits}}}', runs_dir=str(tmp_path / "runs"), python_tools=make)
        assert outcome.exit_code == code
        result = json.loads(outcome.output)
        if expected is not None:
            assert result == expected
        else:
            assert "over the limit of 100000 digits" in result["Err"]["BadReply"]


def test_decimal_exponents_at_the_limits(tmp_path):
    """Any signed 64-bit exponent (of the last significant digit) is a Decimal: exact through
    --input, arithmetic, output and replay; a result beyond is a `limit` fault, never a rounding."""
    runs = tmp_path / "runs"
    # A relative program path: a fault's recorded location names the file as given, and replay
    # (of any fault, not only these) diverges on an absolute one (left alone, see the report).
    program(tmp_path, SCALE)
    path = "main.flow"
    top, bottom = 2 ** 63 - 1, -(2 ** 63)
    for d, e, expected in ((f"1E+{top - 1}", "10", f"1E+{top}"), ("1E+4000000000000000000", "1", "1E+4000000000000000000"),
                           (f"1E{bottom + 1}", "0.1", f"1E{bottom}"), ("-25E-9223372036854775807", "4", "-1E-9223372036854775805"),
                           ("1E-900000000000000000", "1E-900000000000000000", "1E-1800000000000000000")):
        done = flow("run", path, "--input", json.dumps({"d": d, "e": e}), "--runs", str(runs), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == expected
    for d, e in ((f"1E+{top}", "10"), (f"1E{bottom}", "0.1"), ("1E+5000000000000000000", "1E+5000000000000000000")):
        done = flow("run", path, "--input", json.dumps({"d": d, "e": e}), "--runs", str(runs), cwd=tmp_path)
        assert done.returncode == 1, done.stderr[-2000:]
        assert "fault[limit]" in done.stderr and "signed 64-bit range" in done.stderr
    for run_id in run_ids(runs):
        replayed = flow("replay", run_id, "--runs", str(runs), cwd=tmp_path)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-2000:]
        assert "Matched" in replayed.stdout + replayed.stderr


@pytest.mark.parametrize("text", ["1E+9223372036854775808", "10E+9223372036854775807", "1E-9223372036854775809",
                                  "0.1E-9223372036854775808", "1E+99999999999999999999999999999999999999999999"])
def test_decimal_exponent_beyond_64_bits_is_refused_saying_why(tmp_path, text):
    """Only a text whose exponent is beyond signed 64 bits is refused, naming the range, before
    anything is recorded."""
    runs = tmp_path / "runs"
    done = flow("run", program(tmp_path, SCALE), "--input", json.dumps({"d": text, "e": "1"}), "--runs", str(runs))
    assert done.returncode == 2
    assert "beyond the signed 64-bit range" in done.stderr
    assert run_ids(runs) == []
