"""Reliability rows for the sandbox's isolation (docs/sandbox.md §5, docs/reliability.md).

- `sandbox escapes`: the escape corpus of tests/test_sandbox_escape.py through `load()` (an
  escape: a module load() accepts, or one whose code ran), then every forbidden operation against
  a locked-down child with all layers, and once per layer with that layer alone (the others left
  out with FLOW_SANDBOX_WITHOUT). An escape: the operation worked. A layer this kernel lacks
  counts as a failure too, since it would have been assumed.
- `orphaned children after host SIGKILL`: `flow run` of a program that spins in the child,
  the host SIGKILLed once the child computes; a failure: the child still alive 5 s later.

    python scripts/reliability/isolation.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

SPIN = "pub flow main() -> Int = spin(0)\n\nflow spin(n: Int) -> Int = spin(n + 1)\n"
LOCKDOWN_CHILD = str(ROOT / "tests" / "sandbox_lockdown_child.py")
EVERY_LAYER = ("uid", "user_namespace", "capabilities", "landlock", "seccomp")
# Per layer: the attempts it stops alone, and the layers left out so that it stands alone.
ALONE = {
    "seccomp": (("open", "write_file", "connect", "fork", "exec", "ptrace", "setuid", "signal_host"), ""),
    "landlock": (("open", "write_file", "connect", "signal_host"), "seccomp,network"),
    "uid": (("write_file", "setuid", "ptrace"), "seccomp,landlock,user_namespace,capabilities"),
    "capabilities": (("unshare_net",), "seccomp,landlock"),
    "network": (("connect",), "seccomp,landlock"),
}


def corpus_escapes() -> tuple[int, int, list[str]]:
    from sandbox.loader import load
    from sandbox.verify import SandboxRefusal
    from tests.test_sandbox_escape import CORPUS, lib_source

    escapes = []
    for name, source, _fragment in CORPUS:
        ran = []
        try:
            load([("lib", "lib.py", lib_source()), ("attack", "attack.py", source)],
                 {"rt_mark": lambda: ran.append(1), "rt_wrap": lambda f: f})
            escapes.append(name)
        except SandboxRefusal:
            if ran:
                escapes.append(name)
    return len(CORPUS), len(escapes), escapes


def layer_attempts(work: Path) -> tuple[int, int, list[str]]:
    import socket

    from flowrt.sandbox_process import Child, ChildDied

    owned = work / "owned"
    owned.mkdir(mode=0o755, exist_ok=True)
    work.chmod(0o755)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    tried, failures = 0, []
    plans = [("all layers", op, "") for op in ALONE["seccomp"][0]]
    plans += [(f"{layer} alone", op, without) for layer, (ops, without) in ALONE.items() for op in ops]
    try:
        for label, op, without in plans:
            tried += 1
            os.environ["FLOW_SANDBOX_WITHOUT"] = without
            target = owned / f"file-{tried}"
            try:
                with Child.start(argv_tail=[LOCKDOWN_CHILD], lockdown=True) as child:
                    child.send({"op": "hello"}, timeout=30)
                    child.recv(timeout=30)
                    layer = label.split()[0]
                    if layer in child.layers and not child.layers[layer]["applied"]:
                        failures.append(f"{label}: layer missing ({child.layers[layer]['detail']})")
                        continue
                    try:
                        child.send({"op": op, "path": str(target), "port": port, "pid": os.getpid()}, timeout=30)
                        answer = child.recv(timeout=30)
                    except ChildDied as died:
                        answer = {"killed": died.signal}
            except Exception as problem:  # noqa: BLE001 - a hang or crash counts, never stops the row
                failures.append(f"{label} {op}: {type(problem).__name__}: {problem}")
                continue
            if answer.get("done") or target.exists():
                failures.append(f"{label} {op}: escaped")
    finally:
        os.environ.pop("FLOW_SANDBOX_WITHOUT", None)
        server.close()
    return tried, len(failures), failures


def orphan_trial(work: Path, index: int) -> str | None:
    program = work / "spin.flow"
    program.write_text(SPIN)
    host = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", str(program), "--runs", str(work / "runs")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    try:
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            # Any of the host's threads may have forked it (`flow run` starts it on a thread).
            for task in Path(f"/proc/{host.pid}/task").glob("*"):
                try:
                    for candidate in (task / "children").read_text().split():
                        if b"sandbox.child" in Path(f"/proc/{candidate}/cmdline").read_bytes():
                            pid = int(candidate)
                except FileNotFoundError:
                    pass
            time.sleep(0.05)
        if pid is None:
            return f"trial {index}: no sandbox child seen"
        while time.monotonic() < deadline:  # until it computes: its uid has turned, or CPU time grows
            status = Path(f"/proc/{pid}/status").read_text()
            ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
            if int(status.split("\nUid:")[1].split()[1]) != os.geteuid() or ticks > 50:
                break
            time.sleep(0.05)
        host.kill()
        host.wait(timeout=30)
        time.sleep(5.0)
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
            return f"trial {index}: child {pid} alive 5 s after its host's SIGKILL"
        return None
    except Exception as problem:  # noqa: BLE001
        return f"trial {index}: {type(problem).__name__}: {problem}"
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=30)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def measure(quick: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        corpus_tried, corpus_escaped, corpus_names = corpus_escapes()
        layers_tried, layers_failed, layer_notes = layer_attempts(work)
        rows.append({"check": "sandbox escapes (corpus + per isolation layer)",
                     "tried": corpus_tried + layers_tried, "failures": corpus_escaped + layers_failed,
                     "detail": f"{corpus_tried} corpus attempts through load(), {layers_tried} OS-level attempts "
                               f"(all layers, then each layer alone)"
                               + (": " + "; ".join(corpus_names + layer_notes) if corpus_escaped + layers_failed else "")})
        trials = 3 if quick else 10
        problems = [p for p in (orphan_trial(work, i) for i in range(trials)) if p]
        rows.append({"check": "orphaned sandbox children after host SIGKILL", "tried": trials,
                     "failures": len(problems),
                     "detail": "children alive 5 s after their host was SIGKILLed mid-computation"
                               + (": " + "; ".join(problems) if problems else "")})
    return rows


if __name__ == "__main__":
    options = argparse.ArgumentParser()
    options.add_argument("--quick", action="store_true")
    for row in measure(options.parse_args().quick):
        print(f"{row['check']}: tried {row['tried']}, failures {row['failures']} ({row['detail']})")
