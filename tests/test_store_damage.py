"""Damage to a history that a store made durable is a storage failure, never a torn tail: a NUL
byte or a flipped bit anywhere in a closed history, or in the part of a crashed run that was
durable when a store last opened it, fails the read (exit 5 in the CLI) and nothing is cut from it
(docs/trace.md sections 7, 9 and 10). Host records are chained like facts. Resume of a run that
has ended checks its value files and sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowrt.store import RunStore, StorageError, scan_runs

ROOT = Path(__file__).resolve().parents[1]
START = {
    "program": "sha256:" + "ab" * 32,
    "std": "std@v1",
    "entry": {"module": "m", "function": "main"},
    "input": {"n": 3},
    "modules": [],
}


def reply(i: int) -> tuple[str, dict]:
    return "Reply", {"call": f"root#{i}", "outcome": {"Ok": [i, "é", None]}}


def read(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def write(path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def history(root: str, run: str = "run-1") -> str:
    return os.path.join(root, run, "history.jsonl")


def host(root: str, run: str = "run-1") -> str:
    return os.path.join(root, run, "host.jsonl")


def closed_run(root: str, *, end: bool = True) -> list[dict]:
    s = RunStore.create(root, "run-1", START, durability="fsync")
    for i in range(4):
        s.append(*reply(i))
    if end:
        s.append("End", {"outcome": {"Completed": 4}})
    s.close()
    return RunStore.open(root, "run-1", for_append=False).facts()


def damages(data: bytes):
    """A NUL byte and a flipped low bit at every offset."""
    for offset in range(len(data)):
        for kind in ("nul", "flip"):
            damaged = bytearray(data)
            damaged[offset] = 0 if kind == "nul" else damaged[offset] ^ 0x01
            if bytes(damaged) != data:
                yield offset, kind, bytes(damaged)


def test_a_closed_history_is_marked_durable_once(tmp_path):
    root = str(tmp_path)
    facts = closed_run(root)
    records = RunStore.open(root, "run-1", for_append=False).host_records()
    assert records == [{"kind": "durable", "facts": len(facts), "head": facts[-1]["hash"]}]
    RunStore.open(root, "run-1", for_append=True).close()  # nothing new: no second record
    assert RunStore.open(root, "run-1", for_append=False).host_records() == records
    assert not read(history(root)).endswith(b"\0")  # the reserved space was cut


@pytest.mark.parametrize("end", [True, False], ids=["ended", "paused"])
def test_every_nul_and_flip_in_a_closed_history_is_a_storage_failure_and_nothing_is_cut(tmp_path, end):
    root = str(tmp_path)
    closed_run(root, end=end)
    original, original_host = read(history(root)), read(host(root))
    for offset, kind, damaged in damages(original):
        write(history(root), damaged)
        with pytest.raises(StorageError):
            RunStore.open(root, "run-1", for_append=False)
        with pytest.raises(StorageError):
            RunStore.open(root, "run-1", for_append=True)
        assert read(history(root)) == damaged, (offset, kind)  # nothing cut, nothing appended
        assert read(host(root)) == original_host, (offset, kind)
        [row] = scan_runs(root)["runs"]
        assert row["record"] == "unreadable" and row["problem"]["component"] == "history.jsonl", (offset, kind)
    # Facts lost at a line boundary, and a cut End, are damage too.
    lines = original.splitlines(keepends=True)
    for kept in range(1, len(lines)):
        write(history(root), b"".join(lines[:kept]))
        with pytest.raises(StorageError, match="facts were lost"):
            RunStore.open(root, "run-1", for_append=True)


def crashed_after_resume(root: str) -> tuple[bytes, int]:
    """A run closed after 3 facts, opened for appending again, 3 more facts written, and the host
    killed before it closed (the files are copied before `close`). Returns the history and the
    length of its durable part."""
    s = RunStore.create(root, "run-1", START, durability="fsync")
    for i in range(2):
        s.append(*reply(i))
    s.close()
    durable = len(read(history(root)))
    s = RunStore.open(root, "run-1", for_append=True)
    for i in range(2, 5):
        s.append(*reply(i), sync=i != 4)
    image, host_image = read(history(root)), read(host(root))
    s.close()
    write(history(root), image)
    write(host(root), host_image)
    return image, durable


def test_a_crashed_resume_may_lose_only_what_it_wrote(tmp_path):
    root = str(tmp_path)
    image, durable = crashed_after_resume(root)
    assert image.endswith(b"\0")  # the reserved space of a host that died
    written = len(image.rstrip(b"\0"))
    host_image = read(host(root))
    torn = 0
    for offset, kind, damaged in damages(image[:written]):
        damaged += image[written:]
        write(history(root), damaged)
        write(host(root), host_image)
        try:
            reader = RunStore.open(root, "run-1", for_append=False)
        except StorageError:
            assert read(history(root)) == damaged
            continue
        # Read as a torn tail: only ever in what the resume wrote, never in the durable part.
        assert offset >= durable and reader.torn_tail is not None and reader.torn_tail.offset >= durable, \
            (offset, kind)
        s = RunStore.open(root, "run-1", for_append=True)
        s.close()
        assert read(history(root)).startswith(image[:durable])
        torn += 1
    assert torn > 0  # the rule for the unsynced part still holds


def test_host_records_are_chained(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="fsync")
    s.host_record({"kind": "binding", "tool": "m.t", "implementation": "pending"})
    s.host_record({"kind": "paused", "head": s.head, "pending": ["root#1"]})
    with pytest.raises(ValueError):
        s.host_record({"kind": "note", "hash": "sha256:" + "0" * 64})
    s.close()
    lines = read(host(root)).splitlines()
    assert [json.loads(line)["prev"] for line in lines][0] is None
    assert all(json.loads(b)["prev"] == json.loads(a)["hash"] for a, b in zip(lines, lines[1:]))
    original = read(host(root))
    last = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] != "times")
    # The last write may be torn whole: a record's `batch` says where its write began.
    batch = json.loads(lines[last]).get("batch")
    if batch is not None:
        last = next(i for i in range(last + 1) if len(b"".join(l + b"\n" for l in lines[i:last])) <= batch)
    for offset, kind, damaged in damages(original):
        write(host(root), damaged)
        try:
            RunStore.open(root, "run-1", for_append=False)
        except StorageError as problem:
            assert problem.component == "host.jsonl"
            continue
        # Only the last write can read as torn (each write is synced before the next), with the
        # `times` records after it (written unsynced, docs/trace.md section 10).
        assert offset >= len(original) - len(b"".join(line + b"\n" for line in lines[last:])) - 1, (offset, kind)
    write(host(root), original)


def test_an_unchained_host_file_is_read_and_the_chain_commits_to_it(tmp_path):
    root = str(tmp_path)
    s = RunStore.create(root, "run-1", START, durability="none")
    s.close()
    legacy = b'{"kind":"origin","root":"/x/main.flow"}\n{"kind":"checkpoints","policy":"every"}\n'
    write(host(root), legacy)
    reader = RunStore.open(root, "run-1", for_append=False)
    assert [r["kind"] for r in reader.host_records()] == ["origin", "checkpoints"]
    s = RunStore.open(root, "run-1", for_append=True, durability="none")
    s.host_record({"kind": "halted", "head": s.head, "reason": "interrupt"})
    s.close()
    assert [r["kind"] for r in RunStore.open(root, "run-1", for_append=False).host_records()] == \
        ["origin", "checkpoints", "halted"]
    forged = read(host(root)).replace(b"/x/main.flow", b"/y/main.flow")
    write(host(root), forged)
    with pytest.raises(StorageError, match="chain"):
        RunStore.open(root, "run-1", for_append=False)


# -- through the CLI -------------------------------------------------------------------------------


def flow(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def rounds(tmp_path) -> tuple[Path, Path, str]:
    """A completed run of scripts/reliability/rounds.flow (four command Tool calls)."""
    for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
        shutil.copy(ROOT / "scripts" / "reliability" / name, tmp_path / name)
    runs = tmp_path / "runs"
    done = flow("run", "rounds.flow", "--allow", "--input", '{"rounds": 1}', "--runs", str(runs), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [run_id] = os.listdir(runs)
    return tmp_path, runs, run_id


def test_a_nul_in_a_completed_history_is_a_storage_failure_for_replay_and_resume(rounds):
    work, runs, run_id = rounds
    path = runs / run_id / "history.jsonl"
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    starts = [sum(map(len, lines[:i])) for i in range(len(lines))]
    # In Start, in an early Call, in a Reply, in End, and End's newline.
    for offset in (starts[0] + 5, starts[2] + 40, starts[6] + 10, starts[-1] + 3, len(original) - 1):
        damaged = bytearray(original)
        damaged[offset] = 0
        path.write_bytes(bytes(damaged))
        replayed = flow("replay", run_id, "--runs", str(runs), cwd=work)
        assert replayed.returncode == 5 and "storage failure" in replayed.stderr, (offset, replayed.stderr)
        resumed = flow("resume", run_id, "--allow", "--runs", str(runs), cwd=work)
        assert resumed.returncode == 5 and "storage failure" in resumed.stderr, (offset, resumed.stderr)
        assert path.read_bytes() == bytes(damaged)  # nothing cut, no Tool called again
        assert "Traceback" not in replayed.stderr + resumed.stderr


def test_a_flipped_byte_in_host_records_is_a_storage_failure(rounds):
    work, runs, run_id = rounds
    path = runs / run_id / "host.jsonl"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    for command in (["replay", run_id], ["resume", run_id, "--allow"]):
        done = flow(*command, "--runs", str(runs), cwd=work)
        assert done.returncode == 5 and "host.jsonl" in done.stderr, done.stderr


def test_resume_of_an_ended_run_with_a_damaged_value_or_source_is_a_storage_failure(tmp_path):
    runs = tmp_path / "runs"
    program = ROOT / "tests" / "programs" / "arith.flow"
    done = flow("run", str(program), "--input", json.dumps({"xs": list(range(400))}), "--runs", str(runs),
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [run_id] = os.listdir(runs)
    resumed = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
    assert resumed.returncode == 2 and "nothing to resume" in resumed.stderr
    for folder in ("values", "sources"):
        [name, *_] = sorted(os.listdir(runs / run_id / folder))
        target = runs / run_id / folder / name
        original = target.read_bytes()
        os.chmod(target, 0o600)
        target.write_bytes(original[:-1] + bytes([original[-1] ^ 0x01]))
        resumed = flow("resume", run_id, "--runs", str(runs), cwd=tmp_path)
        assert resumed.returncode == 5 and f"{folder}/{name}" in resumed.stderr, resumed.stderr
        target.write_bytes(original)
