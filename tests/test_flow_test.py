"""`flow test` through the real entry point: fakes, call counters, the virtual clock, results and
exit codes. The seed examples pass as written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "examples"


def flow(*args: str, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(not SHARED.exists(), reason="shared examples not beside the repository")
def test_the_seed_examples_pass_as_written():
    done = flow("test", str(SHARED / "support"), str(SHARED / "payments"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "3 passed, 0 failed"


def test_the_bundled_examples_pass():
    done = flow("test", "examples")
    assert done.returncode == 0, done.stdout + done.stderr
    # Every example's tests, and the saved history: as many PASS lines as the summary counts.
    summary = done.stdout.strip().splitlines()[-1]
    passed = int(summary.split()[0])
    assert summary == f"{passed} passed, 0 failed" and passed >= 4
    assert sum(line.startswith("PASS ") for line in done.stdout.splitlines()) == passed
    assert "PASS history examples/support/histories/" in done.stdout


def test_a_saved_history_that_the_current_program_no_longer_makes_fails(tmp_path):
    import shutil

    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    main = folder / "main.flow"
    # After the history's latest checkpoint the program now ends otherwise.
    main.write_text(main.read_text().replace("Ok(Done(summary)) => Resolved(summary)",
                                             'Ok(Done(summary)) => Resolved("done: " ++ summary)'))
    done = flow("test", str(folder / "histories"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL history" in done.stdout and "Diverged" in done.stdout
    (folder / "main.flow").unlink()
    done = flow("test", str(folder / "histories"))
    assert done.returncode == 2


PROGRAM = """
use "std@v1/clock"

pub type Err { Nope }

@tool pub flow charge(amount: Int) -> Result<Text, Err>
@tool pub flow audit(text: Text) -> Unit

pub flow pay(amount: Int) -> Result<Text, Text> !tool = match charge(amount) {
    Ok(receipt) => Ok(receipt),
    Err(Unknown(_)) => pay(amount),
    Err(_) => Err("failed"),
}

@fake(charge) flow fake_charge(call: Int, amount: Int) -> Result<Text, ToolProblem<Err>> =
    if call < 3 { Err(Unknown("again")) } else { Ok("r${call}-${amount}") }

@test flow counts_calls_from_one() -> Result<Unit, Text> =
    if pay(5) == Ok("r3-5") { Ok(()) } else { Err("expected the third call to succeed") }

@test flow fails_with_its_text() -> Result<Unit, Text> = Err("this one fails")

@test flow sleeps_an_hour_in_no_time() -> Result<Unit, Text> = {
    let before = clock.now()
    clock.sleep(1h)
    let after = clock.now()
    guard after != before else { return Err("the clock did not move") }
    Ok(())
}

@test flow reaches_an_unfaked_tool() -> Result<Unit, Text> = {
    audit("x")
    Ok(())
}

@test flow faults() -> Result<Unit, Text> = {
    let zero = 0
    guard 1 / zero == 1 else { return Err("no") }
    Ok(())
}
"""


def test_results_exit_codes_and_the_virtual_clock(tmp_path):
    (tmp_path / "pay_test.flow").write_text(PROGRAM)
    start = time.perf_counter()
    done = flow("test", str(tmp_path / "pay_test.flow"), "--json")
    elapsed = time.perf_counter() - start
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    outcomes = {t["name"]: t["outcome"] for t in report["tests"]}
    assert outcomes == {"counts_calls_from_one": "passed", "fails_with_its_text": "failed",
                        "sleeps_an_hour_in_no_time": "passed", "reaches_an_unfaked_tool": "not-started",
                        "faults": "failed"}
    messages = {t["name"]: t.get("message") for t in report["tests"]}
    assert messages["fails_with_its_text"] == "this one fails"
    assert "pay_test.audit" in messages["reaches_an_unfaked_tool"]
    assert messages["faults"].startswith("fault[division-by-zero]")
    assert elapsed < 30  # the hour is virtual
    human = flow("test", str(tmp_path / "pay_test.flow"))
    assert human.stdout.strip().splitlines()[-1] == "2 passed, 3 failed"
    assert "NOT STARTED reaches_an_unfaked_tool" in human.stdout


def test_a_program_that_does_not_check_exits_2(tmp_path):
    (tmp_path / "bad_test.flow").write_text('@test flow t() -> Result<Unit, Text> = Ok(1)\n')
    done = flow("test", str(tmp_path))
    assert done.returncode == 2
    assert "type-mismatch" in done.stderr


def test_a_test_that_never_ends_reaches_the_step_bound(tmp_path):
    (tmp_path / "spin_test.flow").write_text(
        "@test flow spins() -> Result<Unit, Text> = if spin(0) > 0 { Ok(()) } else { Err(\"no\") }\n\n"
        "flow spin(n: Int) -> Int = spin(n + 1)\n\n"
        "@test flow quick() -> Result<Unit, Text> = Ok(())\n")
    done = flow("test", str(tmp_path), "--steps", "50000", "--json")
    assert done.returncode == 1
    tests = {t["name"]: t for t in json.loads(done.stdout)["tests"]}
    assert tests["quick"]["outcome"] == "passed"
    assert tests["spins"]["message"] == "fault[step-bound]: the test reached the step bound of 50000 evaluation steps"


def test_fakes_produce_every_tool_problem_and_host_values():
    done = flow("test", "tests/programs/fakes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "1 passed, 0 failed"
