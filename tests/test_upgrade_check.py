"""`flow upgrade-check NEW.flow --runs DIR`, with real runs of the support example and real edits."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "examples" / "support"
TICKET = '{"ticket": "Login fails on Safari"}'


def flow(*args: str, cwd: Path, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A completed run and a paused one (waiting on `human.ask`, its latest checkpoint fact 9)."""
    base = tmp_path_factory.mktemp("upgrade")
    folder = base / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns(".flow", "histories"))
    runs = base / "runs"
    finished = flow("run", "main.flow", "--allow", "--input", TICKET, "--runs", str(runs), cwd=folder)
    assert finished.returncode == 3, finished.stderr
    completed = finished.stdout.split()[2]
    assert flow("resume", completed, "--call", "c1:root#2", "--reply", '{"Ok": "Safari 17.4"}', "--runs", str(runs),
                "--allow", cwd=folder).returncode == 0
    waiting = flow("run", "main.flow", "--allow", "--input", TICKET, "--runs", str(runs), cwd=folder)
    assert waiting.returncode == 3, waiting.stderr
    return folder, runs, completed, waiting.stdout.split()[2]


def new_version(tmp_path: Path, edits: list[tuple[str, str]]) -> Path:
    """A copy of the support program with `edits` made to main.flow."""
    folder = tmp_path / "new"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns(".flow", "histories"))
    main = folder / "main.flow"
    text = main.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    main.write_text(text)
    return main


def check(main: Path, runs: Path) -> tuple[int, dict, str]:
    done = flow("upgrade-check", str(main), "--runs", str(runs), "--json", cwd=main.parent)
    report = json.loads(done.stdout)
    text = flow("upgrade-check", str(main), "--runs", str(runs), cwd=main.parent)
    assert text.returncode == done.returncode
    return done.returncode, {r["run"]: r for r in report["runs"]}, text.stdout


def test_a_compatible_change_is_safe_for_every_run(stored, tmp_path):
    _, runs, completed, paused = stored
    main = new_version(tmp_path, [("pub flow main(", "/// The support desk.\npub flow main("),
                                  ("flow work(", "flow unused() -> Int = 1\n\nflow work(")])
    code, rows, text = check(main, runs)
    assert code == 0, text
    assert rows[completed]["status"] == "matched" and rows[completed]["safe"]
    assert rows[paused]["status"] == "replays" and rows[paused]["state"] == "paused"
    assert rows[paused]["checkpoint"]["fact"] == 9 and rows[paused]["checkpoint"]["fits"]
    assert rows[paused]["hint"] is None
    assert "2 runs of" in text and "0 not safe" in text


def test_a_change_that_diverges_a_completed_run(stored, tmp_path):
    _, runs, completed, paused = stored
    main = new_version(tmp_path, [("Ok(Done(summary)) => Resolved(summary)",
                                   'Ok(Done(summary)) => Resolved(summary ++ " (checked)")')])
    code, rows, text = check(main, runs)
    assert code == 1
    row = rows[completed]
    assert row["status"] == "diverged" and not row["safe"] and row["fact"] == 17
    assert "ends otherwise than fact 17 records" in row["replay"]
    assert f"flow history {completed} --fact 17" in row["hint"]
    assert rows[paused]["safe"]  # its prefix never reaches the changed line
    assert f"{completed}" in text and "Diverged at fact 17" in text


def test_a_paused_run_whose_checkpoint_parameter_changed_type_is_unsafe_with_a_fork_hint(stored, tmp_path):
    folder, runs, completed, paused = stored
    main = new_version(tmp_path, [("round: Int) -> Report", "round: Text) -> Report"),
                                  ("guard round <= 10", 'guard round != "10"'),
                                  ("work(ticket, [], 1)", 'work(ticket, [], "1")'),
                                  ("round + 1)", 'round ++ "+")')])
    code, rows, text = check(main, runs)
    assert code == 1
    row = rows[paused]
    assert not row["safe"] and row["checkpoint"]["fact"] == 9 and not row["checkpoint"]["fits"]
    assert row["checkpoint"]["param"] == "round" and "does not fit" in row["checkpoint"]["reason"]
    assert f"flow fork {paused} --checkpoint 9 --program {main}" in row["hint"]
    assert "--input '{\"round\": ...}'" in row["hint"] and f"flow resume {paused}" in row["hint"]
    assert "hint: flow fork" in text
    # The hint is the way through: the fork with `round` given at its new type is taken.
    forked_runs = tmp_path / "runs"
    shutil.copytree(runs, forked_runs)
    forked = flow("fork", paused, "--checkpoint", "9", "--program", str(main), "--input", '{"round": "2"}',
                  "--runs", str(forked_runs), "--allow", cwd=main.parent)
    assert forked.returncode == 3, forked.stderr  # on the new version, waiting on the person again
    as_is = flow("fork", paused, "--checkpoint", "9", "--program", str(main), "--runs", str(forked_runs),
                 cwd=main.parent)
    assert as_is.returncode == 2 and "does not fit" in as_is.stderr  # what the check predicted


def test_a_checkpoint_function_that_is_gone_leaves_resume_as_the_hint(stored, tmp_path):
    _, runs, completed, paused = stored
    main = new_version(tmp_path, [("flow work(", "flow step("), ("= work(", "= step("), ("=> work(", "=> step(")])
    code, rows, _ = check(main, runs)
    assert code == 1
    row = rows[paused]
    assert "no top-level function `work`" in row["checkpoint"]["reason"]
    assert row["hint"].startswith(f"flow resume {paused}")
    # the completed run's record names `main.work` in its checkpoints: it diverges there
    assert rows[completed]["status"] == "diverged"


def test_runs_of_other_programs_are_skipped_and_bad_input_is_refused(stored, tmp_path):
    _, runs, completed, paused = stored
    other = tmp_path / "other" / "report.flow"
    other.parent.mkdir()
    other.write_text("pub flow main() -> Int = 1\n")
    done = flow("upgrade-check", str(other), "--runs", str(runs), "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["runs"] == []
    assert {s["run"] for s in report["skipped"]} == {completed, paused}
    broken = tmp_path / "broken" / "main.flow"
    broken.parent.mkdir()
    broken.write_text("pub flow main( -> Int = 1\n")
    refused = flow("upgrade-check", str(broken), "--runs", str(runs), cwd=tmp_path)
    assert refused.returncode == 2 and "does not check" in refused.stderr
    nothing = flow("upgrade-check", str(other), "--runs", str(tmp_path / "none"), cwd=tmp_path)
    assert nothing.returncode == 0 and "0 runs of" in nothing.stdout and not (tmp_path / "none").exists()


def test_a_damaged_run_is_a_storage_failure_not_a_verdict(stored, tmp_path):
    _, runs, completed, paused = stored
    damaged = tmp_path / "runs"
    shutil.copytree(runs, damaged)
    history = damaged / completed / "history.jsonl"
    data = bytearray(history.read_bytes().rstrip(b"\0"))
    at = data.index(b'"Safari 17.4"')
    data[at + 1] ^= 0x20
    history.write_bytes(bytes(data))
    code, rows, text = check(new_version(tmp_path, []), damaged)
    assert code == 5
    assert rows[completed]["status"] == "damaged" and not rows[completed]["safe"]
    assert rows[paused]["safe"]
