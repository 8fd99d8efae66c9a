"""Crash recovery at fact boundaries (a small version of scripts/reliability.py): the host is
killed with SIGKILL right after a fact is durable, the run is resumed, and it reaches the same End
with no admitted fact lost and no call sent twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import reliability  # noqa: E402


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    import shutil

    work = tmp_path_factory.mktemp("reliability")
    for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
        shutil.copy(reliability.HERE / name, work / name)
    return work


@pytest.fixture(scope="module")
def clean(workdir):
    result = reliability.trial(workdir, 2, None)
    assert result["exit"] == 0
    return result


@pytest.mark.parametrize("kill_after", [1, 2, 4, 7, 10, 13, 16, 19])
def test_killed_after_a_fact_resumes_to_the_same_end(workdir, clean, kill_after):
    if kill_after >= clean["facts"]:
        pytest.skip("the run is shorter")
    result = reliability.trial(workdir, 2, kill_after)
    assert result["exit"] == 0, result["stderr"]
    assert result["end"] == clean["end"]
    assert result["lost"] == 0
    assert result["duplicates"] == 0
