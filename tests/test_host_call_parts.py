"""scripts/bench/host_call_parts.py measures the host's per-call work by driving the run's real
`Driver` with a stand-in child that replays a real child's frames from memory. That measure means
something only while the stand-in says what the sandbox says: the history it leads to must be the
history a real run of the same program records, fact for fact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import flowrt
from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import host_call_parts  # noqa: E402


def facts_without_chain(runs: str, run_id: str) -> list[dict]:
    """The run's facts after Start, without what names the run (hash, prev)."""
    store = RunStore.open(runs, run_id, for_append=False)
    try:
        return [{k: v for k, v in fact.items() if k not in ("hash", "prev")} for fact in store.facts()[1:]]
    finally:
        store.close()


def test_the_stand_in_child_leads_to_the_history_a_real_child_does(tmp_path):
    calls = 4
    prepared = host_call_parts.prepared_run(str(tmp_path), calls)
    host_call_parts.drive(str(tmp_path), prepared, calls, 1)
    from_memory = facts_without_chain(str(tmp_path / "runs"), "run-parts-1")

    real_runs = tmp_path / "real"
    host = flowrt.Host({"echo.echo": lambda n: n}, runs_dir=str(real_runs), durability="none")
    outcome = host.run(os.path.join(tmp_path, "echo.flow"), {"n": calls})
    assert outcome.exit_code == 0, outcome
    (real_id,) = os.listdir(real_runs)
    real = facts_without_chain(str(real_runs), real_id)

    assert [f["kind"] for f in real] == ["Call", "Reply"] + ["Checkpoint", "Call", "Reply"] * (calls - 1) + \
        ["Checkpoint", "End"]
    assert from_memory == real


def test_the_benchmark_runs_and_reports_each_part(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "host_call_parts.py"),
                             "--calls", "20", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("host CPU per call, Driver.run from memory")
    assert [line.split("  ")[1].strip() for line in lines[1:]] == [
        "decode the call and place frames", "the Call's fields (dict)",
        "Checkpoint + Call facts (build, hash, pwrite)", "the Tool's call (call_here)",
        "admit the reply (size, decode, encode)", "Reply fact (build, hash, pwrite)", "encode the reply frame"]
    assert all(float(line.split()[-2]) > 0 for line in lines[1:])


def test_the_child_s_own_work_is_measured_over_a_whole_run(tmp_path):
    """scripts/bench/child_call_work.py runs the child's real loader, scheduler and wire with the
    replies fed from memory: the run it measures makes every call, takes a checkpoint at each
    place as the default policy does, and ends with what the program computes."""
    import child_call_work

    sent: list[dict] = []
    assert child_call_work.one_round(5, str(tmp_path), sent) > 0
    ops = [m["op"] for m in sent]
    assert ops.count("call") == 5 and ops.count("place") == 5 and ops[-1] == "end"
    assert [m["arguments"]["n"] for m in sent if m["op"] == "call"] == [5, 4, 3, 2, 1]
    assert sent[-1]["outcome"] == {"Completed": 15}
