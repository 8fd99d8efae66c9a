"""The in-process cache of recorded programs (flowrt/replay.py `recorded_program`): a worker that
resumes many runs of one program compiles it once; the stored sources are still read and checked
on every resume, so damage is found with the program kept; different programs are kept apart;
the cache is bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import flowc
from flowrt import replay
from flowrt.run import run
from flowrt.store import StorageError, open_store

PROGRAM = "pub flow main(n: Int) -> Int = n + {delta}\n"


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(replay, "_RECORDED_PROGRAMS", type(replay._RECORDED_PROGRAMS)())


@pytest.fixture
def compiles(monkeypatch):
    """Counts the compiles of recorded programs (calls of `flowc.compile` from replay)."""
    counted = []
    real = flowc.compile

    def counting(*args, **kwargs):
        counted.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(flowc, "compile", counting)
    return counted


def queued(tmp_path: Path, n: int, delta: int = 1) -> str:
    """A run of the program with `delta`, queued (Start only) as `flow run --detach` leaves it."""
    folder = tmp_path / f"program{delta}"
    folder.mkdir(exist_ok=True)
    (folder / "main.flow").write_text(PROGRAM.format(delta=delta))
    outcome = run(str(folder / "main.flow"), input_text=json.dumps({"n": n}), runs_dir=str(tmp_path / "runs"),
                  detach=True)
    assert outcome.exit_code == 0 and outcome.queued, outcome.message
    return outcome.run_id


def resumed(tmp_path: Path, run_id: str):
    runs = str(tmp_path / "runs")
    return replay.resume_claimed(open_store(runs).open(run_id, for_append=True), runs)


def ended_with(tmp_path: Path, run_id: str):
    log = open_store(str(tmp_path / "runs")).open(run_id, for_append=False)
    try:
        return log.facts()[-1]["outcome"]
    finally:
        log.close()


def test_runs_of_one_program_compile_it_once_and_end_as_without_the_cache(tmp_path, compiles):
    ids = [queued(tmp_path, n) for n in (1, 2, 3)]
    compiles.clear()  # queueing compiled the working file; only the resumes' compiles count
    for run_id in ids:
        assert resumed(tmp_path, run_id).exit_code == 0
    assert len(compiles) == 1
    assert [ended_with(tmp_path, run_id) for run_id in ids] == [{"Completed": 2}, {"Completed": 3}, {"Completed": 4}]
    programs = [replay.recorded_program(open_store(str(tmp_path / "runs")).open(r, for_append=False))[0]
                for r in ids]
    assert programs[0] is programs[1] is programs[2]


def test_a_damaged_source_is_a_storage_failure_with_the_program_kept(tmp_path, compiles):
    first, second = queued(tmp_path, 1), queued(tmp_path, 2)
    assert resumed(tmp_path, first).exit_code == 0
    sources = tmp_path / "runs" / second / "sources"
    for name in os.listdir(sources):
        (sources / name).write_bytes(b"pub flow main(n: Int) -> Int = n + 1000\n")
    outcome = resumed(tmp_path, second)
    assert outcome.exit_code == 5 and "does not match its hash" in outcome.message
    with pytest.raises(StorageError):
        replay.recorded_program(open_store(str(tmp_path / "runs")).open(second, for_append=False))


def test_different_programs_are_kept_apart(tmp_path, compiles):
    ones = [queued(tmp_path, 10, delta=1), queued(tmp_path, 20, delta=1)]
    twos = [queued(tmp_path, 10, delta=2), queued(tmp_path, 20, delta=2)]
    compiles.clear()
    for run_id in [ones[0], twos[0], ones[1], twos[1]]:
        assert resumed(tmp_path, run_id).exit_code == 0
    assert len(compiles) == 2
    assert [ended_with(tmp_path, r) for r in ones + twos] == [{"Completed": v} for v in (11, 21, 12, 22)]


def test_the_cache_keeps_a_bounded_number_of_programs_newest_used_last(tmp_path, compiles, monkeypatch):
    monkeypatch.setattr(replay, "_RECORDED_PROGRAMS_KEPT", 2)
    store = open_store(str(tmp_path / "runs"))
    ids = {delta: queued(tmp_path, 0, delta=delta) for delta in (1, 2, 3)}

    def program(delta: int):
        return replay.recorded_program(store.open(ids[delta], for_append=False))[0]

    compiles.clear()
    one = program(1)
    program(2)
    assert program(1) is one  # used again: now the newest
    program(3)  # drops 2, the least recently used
    assert len(replay._RECORDED_PROGRAMS) == 2
    assert program(1) is one
    assert len(compiles) == 3
    program(2)
    assert len(compiles) == 4
