"""`flow fork`: new runs from a checkpoint, on the same program or a newer one; the parent stays."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def flow(*args: str, cwd: Path, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def finished_support_run(tmp_path):
    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow"))
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--input", '{"ticket": "Login fails on Safari"}', "--runs", str(runs),
                cwd=folder)
    run_id = done.stdout.split()[2]
    assert flow("resume", run_id, "--call", "c1:root#2", "--reply", '{"Ok": "Safari 17.4"}', "--runs", str(runs),
                "--allow", cwd=folder).returncode == 0
    return folder, runs, run_id


def heads(runs: Path, run_id: str) -> tuple[int, str]:
    store = RunStore.open(str(runs), run_id, for_append=False)
    try:
        return len(store.facts()), store.head
    finally:
        store.close()


def test_fork_on_the_same_program_and_with_changed_arguments(finished_support_run):
    folder, runs, parent = finished_support_run
    before = heads(runs, parent)
    done = flow("fork", parent, "--checkpoint", "9", "--runs", str(runs), "--allow", cwd=folder)
    assert done.returncode == 3, done.stderr
    assert "pending call c1:root#2" in done.stdout
    child = done.stdout.split()[2]
    store = RunStore.open(str(runs), child, for_append=False)
    start, checkpoint = store.facts()[:2]
    store.close()
    assert start["parent"] == {"run": parent, "checkpoint": 9}
    assert checkpoint["kind"] == "Checkpoint" and checkpoint["function"] == {"module": "main", "name": "work"}
    changed = flow("fork", parent, "--checkpoint", "9", "--input", '{"round": 11}', "--runs", str(runs), "--allow",
                   cwd=folder)
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout) == {"GaveUp": ["SameSite=None requires Secure ..."]}
    assert heads(runs, parent) == before  # the parent is never changed
    assert flow("fork", parent, "--checkpoint", "3", "--runs", str(runs), cwd=folder).returncode == 2
    bad = flow("fork", parent, "--checkpoint", "9", "--input", '{"round": "x"}', "--runs", str(runs), cwd=folder)
    assert bad.returncode == 2


def test_fork_onto_a_newer_program(finished_support_run, tmp_path):
    folder, runs, parent = finished_support_run
    newer = folder / "main.flow"
    newer.write_text(newer.read_text().replace("guard round <= 10", "guard round <= 1"))
    done = flow("fork", parent, "--checkpoint", "9", "--program", "main.flow", "--runs", str(runs), "--allow",
                cwd=folder)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"GaveUp": ["SameSite=None requires Secure ..."]}
    newer.write_text(newer.read_text().replace("flow work(", "flow rounds(").replace("= work(", "= rounds(")
                     .replace("=> work(", "=> rounds("))
    refused = flow("fork", parent, "--checkpoint", "9", "--program", "main.flow", "--runs", str(runs), cwd=folder)
    assert refused.returncode == 2
    assert "no top-level function `work`" in refused.stderr
