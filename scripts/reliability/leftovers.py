"""Leftovers of issue 13, measured through the real `flow` CLI (and a real MCP client): a faulted
run replays Matched whatever path it was started with; `flow history --rounds` never calls a
refused re-run Matched; a reader's lock probe never makes opening for appending fail; a program
using a pinned repository replays and resumes from its recorded sources; `flow mcp` returns a
5,000-digit Int. Every subprocess has a timeout: a hang counts as a failure.

    python scripts/reliability/leftovers.py [--full]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # run directly: this folder's numbers.py must not shadow the stdlib's
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

ROOT = Path(__file__).resolve().parents[2]
APPROVAL = ROOT / "examples" / "approval" / "main.flow"
EXPENSE = {"expense": {"id": "e-1", "who": "Ada", "cents": 120050, "reason": "a ticket"}}
TIMEOUT = 60


def flow(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)


def _row(check: str, tried: int, failures: list[str], detail: str) -> dict:
    if failures:
        detail += f"; first wrong: {failures[0]}"
    return {"check": check, "tried": tried, "failures": len(failures), "detail": detail}


def _guarded(failures: list[str], what: str, trial) -> None:
    try:
        problem = trial()
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError, IndexError) as error:
        problem = f"{type(error).__name__}: {error}"
    if problem is not None:
        failures.append(f"{what}: {problem}")


# ---- a fault replays Matched whatever path started the run ------------------------------------


FAULTS = {  # module file -> its text; main.flow uses lib/util
    "main.flow": 'use "./lib/util"\n\npub flow main(n: Int) -> Int = if n == 0 { 1 / n } else { util.divide(n, 0) }\n',
    "lib/util.flow": "pub flow divide(a: Int, b: Int) -> Int = a % b\n",
}


def faults(work: Path, quick: bool) -> dict:
    program = work / "faults" / "prog"
    for name, text in FAULTS.items():
        (program / name).parent.mkdir(parents=True, exist_ok=True)
        (program / name).write_text(text)
    runs = work / "faults" / "runs"
    ways = [(str(program / "main.flow"), ROOT), ("main.flow", program), ("prog/main.flow", program.parent),
            (os.path.relpath(program / "main.flow", ROOT), ROOT)]
    inputs = [0, 7] if quick else [0, 1, 7, -3]
    failures: list[str] = []
    tried = 0
    for started_as, cwd in ways:
        for n in inputs:
            tried += 1

            def trial() -> str | None:
                done = flow("run", started_as, "--input", json.dumps({"n": n}), "--runs", str(runs), cwd=cwd)
                if done.returncode != 1 or "(run " not in done.stderr:
                    return f"run exit {done.returncode}: {done.stderr[-200:]}"
                run_id = done.stderr.split("(run ")[1].split(")")[0]
                replayed = flow("replay", run_id, "--runs", str(runs))
                if (replayed.returncode, replayed.stdout.strip()) != (0, "Matched"):
                    return f"replay of {started_as} said {replayed.stdout.strip() or replayed.stderr[-200:]}"
                return None

            _guarded(failures, f"{started_as} n={n}", trial)
    return _row("faulted runs replayed, started by absolute/relative/other-directory path, not Matched", tried,
                failures, f"{len(ways)} ways of naming the program x {len(inputs)} inputs")


# ---- the rounds view's verdict is replay's ----------------------------------------------------


def rounds(work: Path) -> dict:
    """A completed run (rounds Matched), then its build cache poisoned so the sandbox refuses the
    re-run: both `flow replay` and `flow history --rounds` must refuse (exit 2), never Matched."""
    cache = work / "rounds" / "cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    runs = work / "rounds" / "runs"
    failures: list[str] = []

    def trial() -> str | None:
        paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(runs), env=env)
        run_id = paused.stdout.split()[2]
        done = flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": {"Yes": "fine"}}', "--runs", str(runs),
                    "--allow", env=env)
        if done.returncode != 0:
            return f"resume exit {done.returncode}"
        shown = flow("history", run_id, "--runs", str(runs), "--json", "--rounds", env=env)
        if json.loads(shown.stdout)["replay"]["verdict"] != "Matched":
            return "an honest re-run was not Matched"
        for entry in (cache / "flow" / "build").glob("*.json"):
            data = json.loads(entry.read_text())
            for module in data["modules"]:
                module["source"] = "import os\n" + module["source"]
            entry.write_text(json.dumps(data))
        refused = flow("history", run_id, "--runs", str(runs), "--json", "--rounds", env=env)
        if refused.returncode != 2 or "Matched" in refused.stdout:
            return f"a refused re-run gave exit {refused.returncode}: {refused.stdout[:120]}"
        return None

    _guarded(failures, "rounds", trial)
    return _row("flow history --rounds: an honest re-run not Matched, or a refused one counted Matched", 1,
                failures, "one run, its rounds before and after its generated code is refused")


# ---- a reader's probe never makes an append open busy -----------------------------------------


def probes(work: Path, quick: bool) -> dict:
    from flowrt.store import RunBusy, RunStore

    runs = work / "probes"
    paused = flow("run", str(APPROVAL), "--allow", "--input", json.dumps(EXPENSE), "--runs", str(runs))
    run_id = paused.stdout.split()[2]
    history = str(runs / run_id / "history.jsonl")
    prober = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom flowrt.run_state import appender_holds\nwhile True: appender_holds(sys.argv[1])"), history])
    opens = 300 if quick else 3000
    failures: list[str] = []
    try:
        time.sleep(0.5)  # the prober is probing
        for index in range(opens):
            try:
                RunStore.open(str(runs), run_id, for_append=True, durability="none").close()
            except RunBusy as busy:
                failures.append(f"open {index}: {busy}")
    finally:
        prober.kill()
        prober.wait(10)
    return _row("run opened for appending while another process probes its lock: RunBusy", opens, failures,
                "a process probing flow history's shared lock in a loop")


# ---- a pinned repository's program re-forms from recorded sources -----------------------------


def pins(work: Path) -> dict:
    from flowc.disk import content_hash

    acme = work / "pins" / "acme"
    acme.mkdir(parents=True)
    (acme / "util.flow").write_text("@tool pub flow ask(q: Text) -> Text\n\n"
                                    "pub flow twice(q: Text) -> Text !tool = ask(q) ++ ask(q)\n")
    program = work / "pins" / "prog"
    program.mkdir()
    (program / "main.flow").write_text('use "acme@1.0/util"\n\npub flow main() -> Text !tool = util.twice("hi")\n')
    (program / "flow.toml").write_text(f'[pins]\n"acme@1.0" = {{ path = "../acme", commit = "{content_hash(str(acme))}" }}'
                                       '\n\n[tools]\n"acme@1.0/util" = { pending = true }\n')
    runs = work / "pins" / "runs"
    failures: list[str] = []
    steps = ["replay while paused: Incomplete", "resume: paused again", "resume: completed", "replay: Matched"]

    def trial() -> str | None:
        run_id = flow("run", "main.flow", "--runs", str(runs), cwd=program).stdout.split()[2]
        shutil.move(str(acme), str(work / "pins" / "gone"))
        results = [flow("replay", run_id, "--runs", str(runs)).returncode,
                   flow("resume", run_id, "--call", "root#1", "--reply", '{"Ok": "a"}', "--runs", str(runs),
                        cwd=program).returncode,
                   flow("resume", run_id, "--call", "root#2", "--reply", '{"Ok": "b"}', "--runs", str(runs),
                        cwd=program).returncode,
                   flow("replay", run_id, "--runs", str(runs)).returncode]
        wrong = [f"{step} (exit {got})" for step, got, want in zip(steps, results, (3, 3, 0, 0)) if got != want]
        return ", ".join(wrong) or None

    _guarded(failures, "pins", trial)
    return _row("pinned-repository program replayed/resumed from recorded sources (directory gone): wrong",
                len(steps), failures, "replay paused, resume twice, replay ended")


# ---- flow mcp returns a 5,000-digit Int -------------------------------------------------------


def mcp_big_int(work: Path) -> dict:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    program = work / "mcp" / "big.flow"
    program.parent.mkdir()
    program.write_text(f"pub flow main() -> Int = {'7' * 5000} + 1\n")
    failures: list[str] = []

    async def session() -> str | None:
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "flowrt.cli", "mcp", "--runs", str(work / "mcp" / "runs"), "--root", str(program.parent)],
            cwd=str(ROOT))
        with open(os.devnull, "w") as quiet, anyio.fail_after(TIMEOUT):
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    done = await client.call_tool("run", {"file": str(program)})
        result = done.structured_content or {}
        if done.is_error or result.get("outputJson") != "7" * 4999 + "8":
            return f"is_error={done.is_error}, outputJson {str(result.get('outputJson'))[:40]}"
        return None

    def trial() -> str | None:
        try:
            return anyio.run(session)
        except TimeoutError:
            return f"no reply within {TIMEOUT} s"

    _guarded(failures, "mcp", trial)
    return _row("flow mcp run with a 5,000-digit Int result: not returned exactly", 1, failures,
                "the SDK's stdio client; outputJson compared digit for digit")


def measure(quick: bool) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="leftovers-"))
    try:
        return [faults(work, quick), rounds(work), probes(work, quick), pins(work), mcp_big_int(work)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for row in measure(quick="--full" not in sys.argv):
        print(f"{row['check']}: {row['failures']}/{row['tried']} ({row['detail']})")
