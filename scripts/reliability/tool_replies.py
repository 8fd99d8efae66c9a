"""Hostile Tool processes (issue 13, items 5-7): a corpus of processes that describe themselves
honestly and then misbehave (tests/hostile/hostile_tool.py), each run through the real
`flow run` CLI with a timeout. Per entry: the outcome the history records for each call, whether
the run hung, whether the host printed a traceback, and the host's peak memory.

    python scripts/reliability/tool_replies.py [--quick]
"""

from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "hostile"
TIMEOUT = 120  # seconds for one run; a run that takes longer counts as a hang
RSS_LIMIT_MB = 150  # the host (with its sandbox child) stays near 40 MB: it never holds a whole line

BROKE = "BadReply|BadReply|NotRun"  # protocol broken: both calls out BadReply, the later call never sent
#: misbehaviour -> what main.flow prints: how a.ask "one", a.ask "two" and then b.ask "three" ended
CASES: dict[str, str] = {
    "honest": "Ok one|Ok two|Ok three",
    "not-json": BROKE,
    "array": BROKE,
    "string": BROKE,
    "no-id": BROKE,
    "int-id": BROKE,
    "unknown-id": BROKE,
    "deep-line": BROKE,
    "not-utf8": BROKE,
    "endless": BROKE,
    "huge-line": BROKE,
    # A limit that the start of the line pins on a call out: that call alone.
    "deep-reply": "BadReply|Ok two|Ok three",
    "huge-reply": "BadReply|Ok two|Ok three",
    "long-int": "BadReply|Ok two|Ok three",  # an integer is not Text, and 5,000 digits crash nothing
    # The process exits (or closes its output) with both calls out: they may have had effects.
    "dies": "Unknown|Unknown|NotRun",
    "closes-stdout": "Unknown|Unknown|NotRun",
    # race.flow: a reply for a call the host cancelled is dropped; the process is still trusted.
    "answers-late": "Ok fast|Ok three",
    # flood.flow: the process stops reading its input with two calls out; the host writes the
    # next call's line (over a pipe's worth) from its writer thread, so the run goes on, and
    # after STALL_SECONDS unread the process is broken: the calls it may have read (every byte
    # or some in its pipe) are Unknown, the one queued behind them and the later b.ask NotRun.
    "stops-reading": "Unknown|Unknown|Unknown|NotRun|NotRun",
}
PROGRAM = {"answers-late": "race.flow", "stops-reading": "flood.flow"}  # the others run main.flow
QUICK = ("honest", "not-json", "int-id", "unknown-id", "deep-reply", "not-utf8", "endless", "huge-reply", "dies",
         "answers-late", "stops-reading")


def workdir(base: Path, mode: str) -> Path:
    """The hostile program, its flow.toml binding both modules to one hostile process."""
    folder = base / mode
    folder.mkdir(parents=True)
    for name in ("main.flow", "race.flow", "flood.flow", "a.flow", "b.flow", "hostile_tool.py"):
        shutil.copy(HOSTILE / name, folder / name)
    entry = json.dumps(["hostile_tool.py", mode])
    (folder / "flow.toml").write_text(f'[tools]\n"a" = {{ python = {entry} }}\n"b" = {{ python = {entry} }}\n')
    return folder


def run_flow(args: list[str], cwd: Path, env: dict | None = None, timeout: float = TIMEOUT) -> dict:
    """`python -m flowrt.cli ARGS`: exit code, output, whether it hung (killed at `timeout`), its
    wall time and the host's peak resident memory. The peak is the host's own high-water mark
    (`VmHWM`, which starts anew at exec), read while it runs: wait4's `ru_maxrss` also counts the
    image of the process that forked it, which inside a long pytest session is larger than the
    host ever is."""
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    streams: dict[str, bytes] = {}

    def collect(name: str, stream) -> None:
        streams[name] = stream.read()

    readers = [threading.Thread(target=collect, args=(n, s), daemon=True)
               for n, s in (("stdout", process.stdout), ("stderr", process.stderr))]
    for reader in readers:
        reader.start()
    ended: dict = {}
    reaper = threading.Thread(target=lambda: ended.update(wait=os.wait4(process.pid, 0)), daemon=True)
    reaper.start()
    peak_kb = 0
    deadline = started + timeout
    while reaper.is_alive() and time.monotonic() < deadline:
        peak_kb = max(peak_kb, _high_water_kb(process.pid))
        reaper.join(0.02)
    hung = reaper.is_alive()
    if hung:
        os.killpg(process.pid, signal.SIGKILL)  # the host and the processes it started
        reaper.join(30)
    for reader in readers:
        reader.join(30)
    _, status, _ = ended.get("wait", (0, 0, None))
    process.returncode = os.waitstatus_to_exitcode(status) if "wait" in ended else -9
    return {"exit": process.returncode, "stdout": streams.get("stdout", b"").decode("utf-8", "replace"),
            "stderr": streams.get("stderr", b"").decode("utf-8", "replace"), "hung": hung,
            "seconds": time.monotonic() - started, "rss_mb": peak_kb / 1024}


def _high_water_kb(pid: int) -> int:
    """The process's peak resident memory so far (kB), or 0 once it has gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def replies(runs: Path) -> list[dict]:
    """The Reply outcomes of the one run in `runs`, in order."""
    [run_id] = os.listdir(runs)
    text = (runs / run_id / "history.jsonl").read_text(encoding="utf-8").rstrip("\0")
    return [fact["outcome"] for fact in map(json.loads, filter(None, text.splitlines())) if fact["kind"] == "Reply"]


def trial(base: Path, mode: str) -> dict:
    folder = workdir(base, mode)
    runs = folder / "runs"
    done = run_flow(["run", PROGRAM.get(mode, "main.flow"), "--allow", "--runs", str(runs)], folder)
    try:
        printed = json.loads(done["stdout"]) if done["exit"] == 0 else None
    except ValueError:
        printed = None
    recorded = replies(runs) if runs.exists() and os.listdir(runs) else []
    kinds = "|".join(("Ok " + o["Ok"]) if "Ok" in o else next(iter(o["Err"])) for o in recorded)
    return {"mode": mode, "expected": CASES[mode], "printed": printed, "recorded": kinds,
            "right": printed == CASES[mode] and kinds == CASES[mode], "traceback": "Traceback" in done["stderr"],
            **{k: done[k] for k in ("exit", "hung", "seconds", "rss_mb", "stderr")}}


def measure(quick: bool) -> list[dict]:
    modes = QUICK if quick else tuple(CASES)
    with tempfile.TemporaryDirectory(prefix="tool-replies-") as base:
        results = [trial(Path(base), mode) for mode in modes]
    hangs = [r["mode"] for r in results if r["hung"]]
    tracebacks = [r["mode"] for r in results if r["traceback"]]
    wrong = [r["mode"] for r in results if not r["right"] and not r["hung"]]
    heavy = [r["mode"] for r in results if r["rss_mb"] > RSS_LIMIT_MB]
    peak = max(results, key=lambda r: r["rss_mb"])
    slowest = max(results, key=lambda r: r["seconds"])
    detail = (f"hangs {len(hangs)}{' ' + ','.join(hangs) if hangs else ''}; tracebacks {len(tracebacks)}"
              f"{' ' + ','.join(tracebacks) if tracebacks else ''}; wrong outcomes {len(wrong)}"
              f"{' ' + ','.join(wrong) if wrong else ''}; peak RSS {peak['rss_mb']:.0f} MB ({peak['mode']}), "
              f"limit {RSS_LIMIT_MB}; slowest {slowest['seconds']:.1f} s ({slowest['mode']})")
    failures = len(set(hangs) | set(tracebacks) | set(wrong) | set(heavy))
    return [{"check": "malformed-reply corpus (items 5-8): 0 hangs, 0 tracebacks", "tried": len(results),
             "failures": failures, "detail": detail}]


if __name__ == "__main__":
    for row in measure("--quick" in sys.argv):
        print(f"{row['check']}: {row['tried']} tried, {row['failures']} failures ({row['detail']})")
