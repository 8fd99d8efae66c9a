"""Damage to a stored history: a NUL byte or a flipped bit at every offset of a closed history
(a completed run of rounds.flow) and of an open one (a run killed, resumed, and killed again),
read the way replay and resume read it, and a sample of offsets through `flow replay` and
`flow resume` themselves. A closed history must always be a storage failure (exit 5) with the
file unchanged; an open one must be a storage failure for damage in the part a store had made
durable, and may lose, as a torn tail, only what was written after that.

    measure(quick) -> [{"check", "tried", "failures", "detail"}]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from flowrt.store import RunStore, StorageError  # noqa: E402

TIMEOUT = 60


def _flow(args: list[str], cwd: Path, env: dict | None = None) -> int | str:
    """The exit code, or "hang" / "traceback" (each a failure whatever was expected)."""
    try:
        done = subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return "hang"
    return "traceback" if "Traceback" in done.stderr else done.returncode


def _damages(data: bytes, offsets):
    for offset in offsets:
        for kind in ("nul", "flip"):
            damaged = bytearray(data)
            damaged[offset] = 0 if kind == "nul" else damaged[offset] ^ 0x01
            if bytes(damaged) != data:
                yield offset, kind, bytes(damaged)


def _runs_of(work: Path, name: str) -> tuple[Path, str]:
    runs = work / name
    [run_id] = os.listdir(runs)
    return runs, run_id


def _store_verdict(runs: Path, run_id: str) -> str:
    """How the store reads the run for replay (read-only) and for resume (for appending):
    "failure" when both raise StorageError, "torn" when the tail is cut, "read" otherwise."""
    try:
        RunStore.open(str(runs), run_id, for_append=False)
    except StorageError:
        try:
            RunStore.open(str(runs), run_id, for_append=True).close()
        except StorageError:
            return "failure"
        return "mixed"  # the two readers disagree: always wrong
    reader = RunStore.open(str(runs), run_id, for_append=False)
    if reader.torn_tail is None:
        return "read"
    RunStore.open(str(runs), run_id, for_append=True).close()
    return "torn"


def _restore(run_dir: Path, saved: dict[str, bytes]) -> None:
    for name, data in saved.items():
        (run_dir / name).write_bytes(data)


def _closed(work: Path, quick: bool) -> list[dict]:
    runs, run_id = _runs_of(work, "closed")
    run_dir = runs / run_id
    saved = {name: (run_dir / name).read_bytes() for name in ("history.jsonl", "host.jsonl")}
    original = saved["history.jsonl"]
    step = 5 if quick else 1
    tried = wrong = cut = 0
    examples = []
    for offset, kind, damaged in _damages(original, range(0, len(original), step)):
        (run_dir / "history.jsonl").write_bytes(damaged)
        verdict = _store_verdict(runs, run_id)
        tried += 1
        changed = (run_dir / "history.jsonl").read_bytes() != damaged
        cut += changed
        if verdict != "failure" or changed:
            wrong += 1
            examples.append(f"{kind}@{offset}:{verdict}")
        _restore(run_dir, saved)
    rows = [{"check": "closed history: NUL / bit flip at every offset, read for replay and resume",
             "tried": tried, "failures": wrong,
             "detail": f"{len(original)} bytes, every {'5th ' if quick else ''}offset; expected a storage "
                       f"failure each time; histories cut: {cut}" + (f"; wrong: {examples[:5]}" if examples else "")}]
    # Through the CLI: a sample of offsets, one in each fact and End's newline.
    lines = original.splitlines(keepends=True)
    starts = [sum(map(len, lines[:i])) for i in range(len(lines))]
    sample = sorted({s + len(line) // 2 for s, line in zip(starts, lines)} | {len(original) - 1})
    if quick:
        sample = sample[::max(1, len(sample) // 6)] + [len(original) - 1]
    tried = wrong = 0
    examples = []
    for offset, kind, damaged in _damages(original, sorted(set(sample))):
        for command in (["replay", run_id], ["resume", run_id, "--allow"]):
            (run_dir / "history.jsonl").write_bytes(damaged)
            code = _flow([*command, "--runs", str(runs)], work)
            tried += 1
            if code != 5 or (run_dir / "history.jsonl").read_bytes() != damaged:
                wrong += 1
                examples.append(f"{command[0]} {kind}@{offset}: {code}")
            _restore(run_dir, saved)
    rows.append({"check": "closed history: NUL / bit flip, flow replay and flow resume", "tried": tried,
                 "failures": wrong, "detail": "expected exit 5 and the file unchanged (no Tool called again)"
                 + (f"; wrong: {examples[:5]}" if examples else "")})
    return rows


def _open(work: Path, quick: bool) -> list[dict]:
    runs, run_id = _runs_of(work, "open")
    run_dir = runs / run_id
    saved = {name: (run_dir / name).read_bytes() for name in ("history.jsonl", "host.jsonl")}
    image = saved["history.jsonl"]
    records = [json.loads(line) for line in saved["host.jsonl"].splitlines()]
    [durable_facts] = [r["facts"] for r in records if r["kind"] == "durable"][-1:]
    written = len(image.rstrip(b"\0"))
    lines = image[:written].splitlines(keepends=True)
    durable = sum(map(len, lines[:durable_facts]))
    step = 5 if quick else 1
    tried = wrong = torn = 0
    examples = []
    for offset, kind, damaged in _damages(image[:written], range(0, written, step)):
        damaged += image[written:]
        (run_dir / "history.jsonl").write_bytes(damaged)
        verdict = _store_verdict(runs, run_id)
        tried += 1
        kept = (run_dir / "history.jsonl").read_bytes()
        bad = verdict in ("mixed", "read") or not kept.startswith(damaged[:durable]) \
            or (offset < durable and verdict != "failure")
        torn += verdict == "torn"
        if bad:
            wrong += 1
            examples.append(f"{kind}@{offset}:{verdict}")
        _restore(run_dir, saved)
    rows = [{"check": "open history (killed after a resume): NUL / bit flip at every offset, read for replay and "
                      "resume", "tried": tried, "failures": wrong,
             "detail": f"{written} bytes written, the first {durable} ({durable_facts} facts) durable when the "
                       f"resume opened the run; expected a storage failure there, and after it a storage failure "
                       f"or a torn tail that cuts only bytes after it (torn: {torn})"
                       + (f"; wrong: {examples[:5]}" if examples else "")}]
    sample = [durable // 3, durable - 2, durable + 5, (durable + written) // 2, written - 1]
    tried = wrong = 0
    examples = []
    env = dict(os.environ, ROUNDS_LOG=str(work / "open-resume.log"))
    for offset, kind, damaged in _damages(image[:written], sample[:3] if quick else sample):
        damaged += image[written:]
        for command in (["replay", run_id], ["resume", run_id, "--allow"]):
            (run_dir / "history.jsonl").write_bytes(damaged)
            code = _flow([*command, "--runs", str(runs)], work, env)
            tried += 1
            kept = (run_dir / "history.jsonl").read_bytes()
            if not isinstance(code, int) or not kept.startswith(damaged[:durable]) \
                    or (offset < durable and code != 5):
                wrong += 1
                examples.append(f"{command[0]} {kind}@{offset}: {code}")
            _restore(run_dir, saved)
    rows.append({"check": "open history: NUL / bit flip, flow replay and flow resume", "tried": tried,
                 "failures": wrong, "detail": "expected exit 5 for damage in the durable part; the durable part "
                 "never cut" + (f"; wrong: {examples[:5]}" if examples else "")})
    return rows


def _host(work: Path) -> dict:
    runs, run_id = _runs_of(work, "closed")
    path = runs / run_id / "host.jsonl"
    original = path.read_bytes()
    last = len(original) - len(original.splitlines()[-1]) - 1
    # The last write may be torn, however many records it held: a record's `batch` says how many
    # bytes before it its write began (docs/trace.md section 9).
    batch = json.loads(original.splitlines()[-1]).get("batch")
    if type(batch) is int and 0 <= batch <= last:
        last -= batch
    tried = wrong = 0
    for offset, kind, damaged in _damages(original, range(len(original))):
        path.write_bytes(damaged)
        tried += 1
        try:
            RunStore.open(str(runs), run_id, for_append=False)
            wrong += offset < last  # only the last write may read as torn
        except StorageError:
            pass
    path.write_bytes(original)
    return {"check": "host.jsonl: NUL / bit flip at every offset", "tried": tried, "failures": wrong,
            "detail": "expected a storage failure, except in the last write (its records), which may read as torn"}


def _times_lines_before(data: bytes, end: int) -> list[tuple[int, int]]:
    """Where the `times` records among host.jsonl's lines before byte `end` are."""
    spans, pos = [], 0
    for line in data[:end].splitlines(keepends=True):
        if json.loads(line)["kind"] == "times":
            spans.append((pos, pos + len(line)))
        pos += len(line)
    return spans


def _archived_host(work: Path, quick: bool) -> list[dict]:
    """host.jsonl and the archive's host-record mark of an archived run, damaged at every offset:
    an open verifies host.jsonl from the mark on, and before it only the records that are not
    `times` (flowrt/store/host_mark.py), so damage must be a storage failure everywhere but in a
    `times` record before the mark; there, the run must read with the same host records and a
    storage failure when its times are read. Nothing is ever cut from what the mark covers."""
    closed, run_id = _runs_of(work, "closed")
    runs = work / "archived"
    shutil.copytree(closed, runs)
    assert _flow(["archive", run_id, "--runs", str(runs)], work) == 0
    run_dir = runs / run_id
    mark_path = run_dir / "archive" / "host-mark.json"
    saved = {name: (run_dir / name).read_bytes() for name in ("history.jsonl", "host.jsonl", "archive/host-mark.json")}
    mark = json.loads(saved["archive/host-mark.json"])
    original = saved["host.jsonl"]
    records = RunStore.open(str(runs), run_id, for_append=False).host_records()
    times = _times_lines_before(original, mark["offset"])
    rows = []
    for name in ("host.jsonl", "archive/host-mark.json"):
        target = run_dir / name
        data = saved[name]
        step = 3 if quick and name == "host.jsonl" else 1
        tried = wrong = in_times = 0
        examples = []
        for offset, kind, damaged in _damages(data, range(0, len(data), step)):
            target.write_bytes(damaged)
            tried += 1
            verdict = _store_verdict(runs, run_id)
            inside = name == "host.jsonl" and any(a <= offset < b for a, b in times)
            bad = verdict != "failure"
            if inside and verdict == "read":
                in_times += 1
                reader = RunStore.open(str(runs), run_id, for_append=False)
                try:
                    reader.fact_times()
                    bad = True
                except StorageError:
                    bad = reader.host_records() != records
            if not (run_dir / "host.jsonl").read_bytes().startswith(
                    (damaged if name == "host.jsonl" else original)[:mark["offset"]]):
                bad = True  # (cut, or changed, within what the mark covers)
            if bad:
                wrong += 1
                examples.append(f"{kind}@{offset}:{verdict}")
            _restore(run_dir, saved)
        rows.append({
            "check": f"archived run, {name}: NUL / bit flip at every {'3rd ' if step == 3 else ''}offset, read for "
                     "replay and resume",
            "tried": tried, "failures": wrong,
            "detail": f"{len(data)} bytes; expected a storage failure, except in a times record before the mark "
                      f"({in_times} such): the same host records, and a storage failure reading the times"
                      + (f"; wrong: {examples[:5]}" if examples else "")})
    assert mark_path.read_bytes() == saved["archive/host-mark.json"]
    return rows


def _ended_files(work: Path) -> dict:
    runs = work / "arith"
    program = HERE.parents[1] / "tests" / "programs" / "arith.flow"
    _flow(["run", str(program), "--input", json.dumps({"xs": list(range(400))}), "--runs", str(runs)], work)
    [run_id] = os.listdir(runs)
    tried = wrong = 0
    for folder in ("values", "sources"):
        for name in sorted(os.listdir(runs / run_id / folder)):
            target = runs / run_id / folder / name
            original = target.read_bytes()
            os.chmod(target, 0o600)
            target.write_bytes(original[:-1] + bytes([original[-1] ^ 0x01]))
            tried += 1
            wrong += _flow(["resume", run_id, "--runs", str(runs)], work) != 5
            target.write_bytes(original)
    return {"check": "resume of an ended run with a damaged value or source file", "tried": tried,
            "failures": wrong, "detail": "each file of a completed run flipped in turn; expected exit 5"}


def measure(quick: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for name in ("rounds.flow", "flow.toml", "rounds_tool.py"):
            shutil.copy(HERE / name, work / name)
        env = dict(os.environ, ROUNDS_LOG=str(work / "sent.log"))
        rounds = ["--allow", "--input", json.dumps({"rounds": 2})]
        assert _flow(["run", "rounds.flow", *rounds, "--runs", str(work / "closed")], work, env) == 0
        # Killed after fact 6, resumed, killed again after fact 14: the resume marked 6 facts durable.
        killed = dict(env, FLOW_FAULT_KILL_AFTER="6")
        _flow(["run", "rounds.flow", *rounds, "--runs", str(work / "open")], work, killed)
        runs, run_id = _runs_of(work, "open")
        _flow(["resume", run_id, "--allow", "--runs", str(runs)], work, dict(env, FLOW_FAULT_KILL_AFTER="14"))
        return [*_closed(work, quick), *_open(work, quick), _host(work), *_archived_host(work, quick),
                _ended_files(work)]


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in measure(quick):
        print(f"{row['check']}: tried {row['tried']}, failures {row['failures']} ({row['detail']})")
