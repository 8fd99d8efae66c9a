"""Replay and resume through the real `flow` entry point: verdicts, pauses answered later, crashes
settled as Unknown (or resent on request), damaged and forged histories."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowrt.store import RunStore, canonical_bytes, fact_hash

ROOT = Path(__file__).resolve().parents[1]
APPROVAL = ROOT / "examples" / "approval" / "main.flow"
BIG = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}


def flow(*args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd or ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def paused_run(runs: Path) -> str:
    done = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(BIG), "--runs", str(runs))
    assert done.returncode == 3, done.stderr
    assert "pending call root#1" in done.stdout
    return done.stdout.split()[2]


def test_pause_resume_then_replay_matches(tmp_path):
    run_id = paused_run(tmp_path)
    replayed = flow("replay", run_id, "--runs", str(tmp_path), "--json")
    assert replayed.returncode == 3
    assert json.loads(replayed.stdout)["verdict"] == "Incomplete"
    done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--runs", str(tmp_path),
                "--allow")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"Approved": "L-" + done.stdout.split("L-")[1].split(":")[0] + ": fine"}
    replayed = flow("replay", run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched"


def test_resume_refuses_a_call_that_is_not_open_or_a_reply_that_is_not_an_outcome(tmp_path):
    run_id = paused_run(tmp_path)
    wrong_call = flow("resume", run_id, "--call", "root#7", "--reply", '{"Ok": 1}', "--runs", str(tmp_path))
    assert wrong_call.returncode == 2 and "not open" in wrong_call.stderr
    not_outcome = flow("resume", run_id, "--call", "root#1", "--reply", '"yes"', "--runs", str(tmp_path))
    assert not_outcome.returncode == 2
    not_json = flow("resume", run_id, "--call", "root#1", "--reply", "{nope", "--runs", str(tmp_path))
    assert not_json.returncode == 2


def test_a_reply_that_does_not_decode_is_refused_or_with_admit_bad_reply_admitted_as_bad_reply(tmp_path):
    """A person is not a process: a typo is refused (tests/test_reply_check.py has the rest)."""
    run_id = paused_run(tmp_path)
    refused = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Maybe": 1}}', "--runs", str(tmp_path),
                   "--allow")
    assert refused.returncode == 2 and "reply-invalid" in refused.stderr, refused.stderr
    done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Maybe": 1}}', "--runs", str(tmp_path),
                "--allow", "--admit-bad-reply")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"NoAnswer": '$.Ok: Answer has no constructor "Maybe" (its constructors: Yes, No)'}


def test_reply_from_stdin(tmp_path):
    run_id = paused_run(tmp_path)
    done = flow("resume", run_id, "--call", "root#1", "--reply", "-", "--runs", str(tmp_path), "--allow",
                stdin='{"Ok": {"No": "too much"}}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"Rejected": "too much"}


def test_a_flipped_byte_is_a_storage_failure_not_a_verdict(tmp_path):
    run_id = paused_run(tmp_path)
    history = tmp_path / run_id / "history.jsonl"
    data = bytearray(history.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("X") if data[middle] != ord("X") else ord("Y")
    history.write_bytes(bytes(data))
    replayed = flow("replay", run_id, "--runs", str(tmp_path))
    assert replayed.returncode == 5, (replayed.stdout, replayed.stderr)
    assert "storage failure" in replayed.stderr


def _rewrite(history: Path, change) -> None:
    """Rewrite facts with `change(fact)` and recompute the hash chain (a forged but valid history).
    The forger rewrites host.jsonl too: the heads its records name, and its own chain."""
    facts = [json.loads(line) for line in history.read_text().splitlines()]
    prev = None
    lines = []
    renamed = {}
    for fact in facts:
        old = fact["hash"]
        fact = change(dict(fact))
        fact.pop("hash", None)
        fact["prev"] = prev
        fact["hash"] = fact_hash(fact)
        renamed[old] = prev = fact["hash"]
        lines.append(canonical_bytes(fact))
    history.write_bytes(b"\n".join(lines) + b"\n")
    host = history.parent / "host.jsonl"
    prev, lines = None, []
    for record in [json.loads(line) for line in host.read_text().splitlines()]:
        record.pop("hash")
        record["prev"] = prev
        if "head" in record:
            record["head"] = renamed.get(record["head"], record["head"])
        record["hash"] = prev = fact_hash(record)
        lines.append(canonical_bytes(record))
    host.write_bytes(b"\n".join(lines) + b"\n")


def test_a_history_the_program_does_not_make_diverges_at_that_fact(tmp_path):
    run_id = paused_run(tmp_path)
    done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--runs", str(tmp_path),
                "--allow")
    assert done.returncode == 0

    history = tmp_path / run_id / "history.jsonl"
    recorded = [json.loads(line) for line in history.read_text().splitlines()]
    last_call = max(f["n"] for f in recorded if f["kind"] == "Call")
    end = recorded[-1]["n"]

    def other_end(fact):
        if fact["kind"] == "End":
            fact["outcome"] = {"Completed": {"Rejected": "forged"}}
        return fact

    _rewrite(history, other_end)
    verdict = json.loads(flow("replay", run_id, "--runs", str(tmp_path), "--json").stdout)
    assert verdict["verdict"] == "Diverged" and verdict["fact"] == end

    def other_amount(fact):
        if fact["n"] == last_call:
            fact["arguments"] = dict(fact["arguments"], cents=1)
        return fact

    _rewrite(history, other_amount)
    replayed = flow("replay", run_id, "--runs", str(tmp_path), "--json")
    assert replayed.returncode == 1
    verdict = json.loads(replayed.stdout)
    assert verdict["verdict"] == "Diverged" and verdict["fact"] == last_call
    assert "arguments" in verdict["reason"]


@pytest.fixture
def slow_program(tmp_path):
    folder = tmp_path / "slow"
    shutil.copytree(ROOT / "tests" / "programs" / "slow", folder)
    return folder


def _run_until_call_then_kill(folder: Path, runs: Path) -> str:
    (folder / "delay").write_text("30")
    process = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "main.flow", "--allow", "--input",
                                '{"topic": "tea"}', "--runs", str(runs)], cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 60
    run_id = None
    log = folder / "calls.log"
    while time.time() < deadline:
        # The Call recorded and the call received by the Tool (which logs it first, then sleeps):
        # killed between the two, the call would never have been sent.
        if runs.exists() and log.exists() and "tea" in log.read_text():
            ids = sorted(os.listdir(runs))
            if ids and b'"kind":"Call"' in (runs / ids[0] / "history.jsonl").read_bytes():
                run_id = ids[0]
                break
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert run_id is not None
    (folder / "delay").write_text("0")
    return run_id


def test_a_call_out_at_a_crash_is_settled_unknown_on_resume(slow_program, tmp_path):
    runs = tmp_path / "runs"
    run_id = _run_until_call_then_kill(slow_program, runs)
    done = flow("resume", run_id, "--runs", str(runs), "--allow", cwd=slow_program)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout).startswith("unknown:")
    assert (slow_program / "calls.log").read_text().count("tea") == 1  # never sent twice
    store = RunStore.open(str(runs), run_id, for_append=False)
    assert any(r.get("kind") == "settled" and r.get("as") == "Unknown" for r in store.host_records())
    store.close()
    assert flow("replay", run_id, "--runs", str(runs)).returncode == 0


def test_resend_sends_the_call_again_under_the_same_id(slow_program, tmp_path):
    runs = tmp_path / "runs"
    run_id = _run_until_call_then_kill(slow_program, runs)
    done = flow("resume", run_id, "--resend", "root#1", "--runs", str(runs), "--allow", cwd=slow_program)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "answer: yes (tea)"
    assert (slow_program / "calls.log").read_text().count("tea") == 2


def test_a_torn_last_fact_is_removed_before_resuming(tmp_path):
    run_id = paused_run(tmp_path)
    history = tmp_path / run_id / "history.jsonl"
    with open(history, "ab") as handle:
        handle.write(b'{"kind":"Reply","n":3,"outco')
    done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "ok"}}', "--runs", str(tmp_path),
                "--allow")
    assert done.returncode == 0, done.stderr
    assert flow("replay", run_id, "--runs", str(tmp_path)).returncode == 0


def test_archive_moves_the_facts_before_the_latest_checkpoint_aside(tmp_path):
    folder = tmp_path / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns(".flow", "histories"))
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--input", '{"ticket": "Login fails on Safari"}', "--runs", str(runs),
                cwd=folder)
    run_id = done.stdout.split()[2]
    archived = flow("archive", run_id, "--runs", str(runs))
    assert archived.returncode == 0 and "archived 7 facts" in archived.stdout
    kept = [json.loads(line)["n"] for line in (runs / run_id / "history.jsonl").read_text().splitlines()]
    assert kept == [1, 9, 10, 11, 12]
    assert (runs / run_id / "archive" / "facts-2-8.jsonl").exists()
    assert flow("replay", run_id, "--runs", str(runs)).returncode == 3  # paused: Incomplete
    done = flow("resume", run_id, "--call", "c1:root#2", "--reply", '{"Ok": "Safari 17.4"}', "--runs", str(runs),
                "--allow", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert flow("archive", run_id, "--runs", str(runs)).returncode == 0
    assert flow("replay", run_id, "--runs", str(runs)).stdout.strip() == "Matched"
    anchor = runs / run_id / "archive" / "anchor.json"
    anchor.write_text(anchor.read_text().replace('"through":13', '"through":12'))
    assert flow("replay", run_id, "--runs", str(runs)).returncode == 5


def test_an_evaluator_that_dies_during_replay_makes_it_incomplete_not_a_verdict(tmp_path, monkeypatch):
    """The child killed mid-replay says nothing about the program: Incomplete, and the read-only
    history is not written to."""
    import threading

    from flowrt import sandbox_process as child_module
    from flowrt import replay as replay_module

    program = tmp_path / "count.flow"
    program.write_text("pub flow main(n: Int) -> Int = count(n, 0)\n\n"
                       "flow count(n: Int, acc: Int) -> Int = if n == 0 { acc } else { count(n - 1, acc + 1) }\n")
    runs = tmp_path / "runs"
    done = flow("run", str(program), "--input", '{"n": 30000000}', "--runs", str(runs), timeout=300)
    assert done.returncode == 0, done.stderr
    [run_id] = os.listdir(runs)
    history = runs / run_id / "history.jsonl"
    before = history.read_bytes()
    start = child_module.Child.start.__func__
    started = []

    def start_and_kill_soon(cls, *args, **kwargs):
        child = start(cls, *args, **kwargs)
        started.append(child)
        threading.Timer(0.3, os.kill, (child.pid, signal.SIGKILL)).start()
        return child

    monkeypatch.setattr(child_module.Child, "start", classmethod(start_and_kill_soon))
    result = replay_module.replay(str(runs), run_id)
    assert started
    assert result.verdict.kind == "Incomplete", result.verdict
    assert "the re-run could not go on: the sandboxed evaluator died" in result.verdict.reason
    assert history.read_bytes() == before


def test_a_fault_replays_matched_whatever_path_the_program_was_started_with(tmp_path):
    # The fault's location names the module by its identity (`lib/util.flow`), not by the path
    # the run was started with, so the replay, which re-forms the program from recorded
    # sources, records the same location.
    program = tmp_path / "prog"
    (program / "lib").mkdir(parents=True)
    (program / "main.flow").write_text('use "./lib/util"\n\npub flow main() -> Int = util.divide(1, 0)\n')
    (program / "lib" / "util.flow").write_text("pub flow divide(a: Int, b: Int) -> Int = a / b\n")
    runs = tmp_path / "runs"
    for started_as, cwd in ((str(program / "main.flow"), ROOT), ("main.flow", program), ("prog/main.flow", tmp_path)):
        done = flow("run", started_as, "--runs", str(runs), cwd=cwd)
        assert done.returncode == 1, done.stderr
        assert "lib/util.flow:1:" in done.stderr and str(tmp_path) not in done.stderr
        run_id = done.stderr.split("(run ")[1].split(")")[0]
        replayed = flow("replay", run_id, "--runs", str(runs))
        assert (replayed.returncode, replayed.stdout.strip()) == (0, "Matched"), replayed.stdout + replayed.stderr
        end = json.loads((runs / run_id / "history.jsonl").read_text().splitlines()[-1])
        assert end["outcome"]["Faulted"]["location"] == {"file": "lib/util.flow", "line": 1, "column": 42}


def test_a_program_using_a_pinned_repository_replays_and_resumes_from_its_recorded_sources(tmp_path):
    """Start records the pins the program identity covers, so replay and resume re-form the
    program from the recorded sources alone, even once the pinned directory has gone."""
    from flowc.disk import content_hash

    acme = tmp_path / "acme"
    acme.mkdir()
    (acme / "util.flow").write_text("/// Asks a person.\n@tool pub flow ask(q: Text) -> Text\n\n"
                                    'pub flow twice(q: Text) -> Text !tool = ask(q) ++ ask(q)\n')
    program = tmp_path / "prog"
    program.mkdir()
    (program / "main.flow").write_text('use "acme@1.0/util"\n\npub flow main() -> Text !tool = util.twice("hi")\n')
    (program / "flow.toml").write_text(
        f'[pins]\n"acme@1.0" = {{ path = "../acme", commit = "{content_hash(str(acme))}" }}\n'
        '"unused@2.0" = { path = "../nowhere", commit = "abc1234" }\n\n'
        '[tools]\n"acme@1.0/util" = { pending = true }\n')
    runs = tmp_path / "runs"
    paused = flow("run", "main.flow", "--runs", str(runs), cwd=program)
    assert paused.returncode == 3, paused.stderr
    run_id = paused.stdout.split()[2]
    start = json.loads((runs / run_id / "history.jsonl").read_text().splitlines()[0])
    assert start["pins"] == [{"repo": "acme@1.0", "commit": content_hash(str(acme))},
                             {"repo": "unused@2.0", "commit": "abc1234"}]
    acme.rename(tmp_path / "gone")  # nothing of the repository is read again
    replayed = flow("replay", run_id, "--runs", str(runs), "--json")
    assert replayed.returncode == 3 and json.loads(replayed.stdout)["verdict"] == "Incomplete", replayed.stderr
    first = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": "a"}', "--runs", str(runs), cwd=program)
    assert first.returncode == 3, first.stderr
    done = flow("resume", run_id, "--call", "root#2", "--reply", '{"Ok": "b"}', "--runs", str(runs), cwd=program)
    assert (done.returncode, done.stdout.strip()) == (0, '"ab"'), done.stderr
    replayed = flow("replay", run_id, "--runs", str(runs))
    assert (replayed.returncode, replayed.stdout.strip()) == (0, "Matched"), replayed.stderr
