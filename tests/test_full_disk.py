"""A full disk on append: the run is cut short by a storage failure (exit 5), and resumes to its
End once there is room again. Needs a small tmpfs, so it runs only where mounting is allowed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
@tool pub flow blob(n: Int) -> Text

pub flow main(n: Int) -> Int !tool = loop(n, 0)

flow loop(n: Int, total: Int) -> Int !tool = if n == 0 { total } else { loop(n - 1, total + text_size(blob(n))) }

flow text_size(t: Text) -> Int = if t == "" { 0 } else { 1 }
"""


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_cuts_the_run_short_and_it_resumes_later(tmp_path, tiny_disk):
    program = tmp_path / "prog"
    program.mkdir()
    (program / "main.flow").write_text(PROGRAM)
    (program / "blob.py").write_text(
        "from flowrt.toolkit import serve\n\n"
        "def blob(n):\n    return 'x' * 20000 + str(n)\n\n"
        "serve({'main.blob': blob}, declared_in='main.flow')\n")
    (program / "flow.toml").write_text(f'[tools]\n"main" = {{ command = ["{sys.executable}", "blob.py"] }}\n')
    runs = tiny_disk / "runs"

    def flow(*args):
        return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=program, capture_output=True,
                              text=True, timeout=120)

    done = flow("run", "main.flow", "--allow", "--input", '{"n": 40}', "--runs", str(runs))
    assert done.returncode == 5, (done.returncode, done.stderr)
    assert "storage failure" in done.stderr
    [run_id] = os.listdir(runs)
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_disk)], check=True)
    # The call whose Reply could not be written is open, its outcome unknown (the host stopped
    # with it out): send it again under its id.
    view = json.loads(flow("history", run_id, "--runs", str(runs), "--json").stdout)
    assert view["state"] == "crashed" and [c["status"] for c in view["open"]] == ["unknown-outcome"]
    resend = [arg for call in view["open"] for arg in ("--resend", call["call"])]
    resumed = flow("resume", run_id, "--allow", *resend, "--runs", str(runs))
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 40
    assert flow("replay", run_id, "--runs", str(runs)).returncode == 0
