"""Reliability rows for files outside the program (issue 13, items 11, 15, 17).

- path escapes: a corpus of `use` paths and files that try to read a secret outside the program
  root (`..`, absolute paths, a repository path that climbs out, a module that is a link, a
  directory that is a link, a linked flow.toml, a flow.toml pinning a directory outside the served
  root) through `flow check`, `flow check --json`, `flow run` and `flow mcp --root` (a real MCP
  client), plus paths given to MCP `check` and `run` directly. An escape is any answer that is
  not a refusal, shows the secret, is a traceback, or takes longer than its timeout.
- pinned commits: pins that do not hold (another git commit, uncommitted changes, another content
  hash, no commit, a malformed commit) must each be refused by `flow check` (exit 2,
  pin-unverified); one that holds must run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SECRET = "root:$6$RELIABILITY-SECRET$x:19000:0:99999:7:::"
TIMEOUT = 60

USES = [
    'use "../outside/m"',
    'use "./a/../../outside/m"',
    'use "./../../../../../../../../etc/passwd"',
    'use "/etc/passwd"',
    'use "/etc/shadow"',
    'use "acme@1/../../outside/m"',
    'use "acme@1/../../../etc/passwd"',
    'use "./evil"',
    'use "./linked/m"',
    'use "./deep/linked/m"',
    'use "acme@1/evil"',
    'use "far@1/m"',
    'use "./a\\u{0}b"',
    'use "./"',
    'use "./.."',
]


def _flow(args: list[str], cwd: Path, env: dict | None = None) -> tuple[int | None, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


def _escaped(code: int | None, text: str) -> bool:
    return code != 2 or "RELIABILITY-SECRET" in text or "Traceback" in text


def _content_hash(directory: Path) -> str:
    from flowc.disk import content_hash

    value = content_hash(str(directory))
    assert value is not None
    return value


def _corpus(work: Path) -> Path:
    outside = work / "outside"
    outside.mkdir()
    (outside / "shadow").write_text(SECRET + "\n")
    (outside / "m.flow").write_text(SECRET + "\n")
    prog = work / "served" / "prog"
    (prog / "vendor").mkdir(parents=True)
    (prog / "deep").mkdir()
    os.symlink(outside / "shadow", prog / "evil.flow")
    os.symlink(outside / "shadow", prog / "vendor" / "evil.flow")
    os.symlink(outside, prog / "linked")
    os.symlink(outside, prog / "deep" / "linked")
    (prog / "flow.toml").write_text(
        f'[pins]\n"acme@1" = {{ path = "vendor", commit = "{_content_hash(prog / "vendor")}" }}\n'
        f'"far@1" = {{ path = "../../outside", commit = "{_content_hash(outside)}" }}\n')
    for number, line in enumerate(USES):
        (prog / f"m{number}.flow").write_text(f"{line}\npub flow main() -> Int = 1\n")
    linked = work / "served" / "linked-toml"
    linked.mkdir()
    os.symlink(outside / "shadow", linked / "flow.toml")
    (linked / "main.flow").write_text("pub flow main() -> Int = 1\n")
    return prog


def _cli_attempts(work: Path, prog: Path, quick: bool) -> tuple[int, int, list[str]]:
    tried = failures = 0
    failed: list[str] = []
    commands = [["check"], ["check", "--json"]] + ([] if quick else [["run", "--runs", str(work / "runs")]])
    # The far@1 pin names a directory outside the program root on purpose: the CLI reads a
    # repository flow.toml declares (verified), so only MCP, whose root excludes it, must refuse it.
    files = [prog / f"m{n}.flow" for n, line in enumerate(USES) if "far@1" not in line] + \
        [work / "served" / "linked-toml" / "main.flow"]
    for file in files:
        for command in commands:
            tried += 1
            code, text = _flow([*command, file.name], file.parent)
            if _escaped(code, text):
                failures += 1
                failed.append(f"{' '.join(command)} {file.name}")
    return tried, failures, failed


async def _mcp_attempts(work: Path, prog: Path) -> tuple[int, int, list[str]]:
    import contextlib

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    served = work / "served"
    params = StdioServerParameters(command=sys.executable, args=["-m", "flowrt.cli", "mcp", "--runs",
                                                                 str(work / "mcp-runs"), "--root", str(served)],
                                   cwd=str(work))
    attempts: list[tuple[str, dict]] = []
    for number in range(len(USES)):
        attempts.append(("check", {"paths": [str(prog / f"m{number}.flow")]}))
        attempts.append(("run", {"file": str(prog / f"m{number}.flow")}))
    for path in [str(work / "outside" / "m.flow"), "../outside/m.flow", "served/../outside/m.flow",
                 str(prog / "evil.flow"), str(prog / "linked" / "m.flow"), "/etc/passwd", str(work / "outside"),
                 str(served / "linked-toml" / "main.flow")]:
        attempts.append(("check", {"paths": [path]}))
        attempts.append(("run", {"file": path}))
    tried = failures = 0
    failed: list[str] = []
    import anyio

    with anyio.fail_after(TIMEOUT * 3):
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(stdio_client(params, errlog=stack.enter_context(
                open(os.devnull, "w"))))
            client = await stack.enter_async_context(ClientSession(read, write))
            await client.initialize()
            for name, arguments in attempts:
                tried += 1
                result = await client.call_tool(name, arguments)
                text = json.dumps([c.model_dump() for c in result.content]) + json.dumps(result.structured_content)
                refused = result.is_error or (result.structured_content or {}).get("exitCode") == 2 or \
                    (name == "check" and (result.structured_content or {}).get("ok") is False)
                if not refused or "RELIABILITY-SECRET" in text:
                    failures += 1
                    failed.append(f"mcp {name} {arguments}")
    return tried, failures, failed


def _pins(work: Path) -> dict:
    from flowc.disk import content_hash

    env = dict(os.environ, GIT_AUTHOR_NAME="r", GIT_AUTHOR_EMAIL="r@example.org", GIT_COMMITTER_NAME="r",
               GIT_COMMITTER_EMAIL="r@example.org", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_SYSTEM=os.devnull)
    acme = work / "acme"
    acme.mkdir()
    (acme / "text.flow").write_text('pub flow shout(t: Text) -> Text = t ++ "!"\n')
    plain = work / "plain"
    plain.mkdir()
    (plain / "text.flow").write_text('pub flow shout(t: Text) -> Text = t ++ "!"\n')

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(acme), *args], check=True, capture_output=True, text=True,
                              env=env, timeout=TIMEOUT).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    prog = work / "pinprog"
    prog.mkdir()
    (prog / "main.flow").write_text('use "acme@1/text"\npub flow main() -> Text = text.shout("hi")\n')

    def attempt(path: str, commit: str | None) -> tuple[int | None, str]:
        spec = f'path = "{path}"' + (f', commit = "{commit}"' if commit is not None else "")
        (prog / "flow.toml").write_text(f'[pins]\n"acme@1" = {{ {spec} }}\n')
        return _flow(["check", "main.flow"], prog)

    tried = failures = 0
    details: list[str] = []
    bad = [("../acme", "0123abcdef"), ("../acme", None), ("../acme", "not-a-commit"),
           ("../plain", "sha256:" + "0" * 64), ("../plain", head), ("../missing", head)]
    for path, commit in bad:
        tried += 1
        code, text = attempt(path, commit)
        if code != 2 or "pin-unverified" not in text:
            failures += 1
            details.append(f"{path} {commit} not refused")
    for path, commit in [("../acme", head), ("../acme", head[:10]), ("../plain", content_hash(str(plain)))]:
        tried += 1
        code, _ = attempt(path, commit)
        if code != 0:
            failures += 1
            details.append(f"{path} {commit} refused")
    (acme / "text.flow").write_text('pub flow shout(t: Text) -> Text = t ++ "?"\n')  # uncommitted
    tried += 1
    code, text = attempt("../acme", head)
    if code != 2 or "uncommitted" not in text:
        failures += 1
        details.append("dirty checkout not refused")
    return {"check": "pinned commits", "tried": tried, "failures": failures,
            "detail": "; ".join(details) or "mismatch, dirty, no commit, bad commit, missing dir refused; "
                                            "matching commit, prefix and content hash accepted"}


def measure(quick: bool) -> list[dict]:
    import anyio

    with tempfile.TemporaryDirectory(prefix="flow-paths-") as folder:
        work = Path(folder)
        prog = _corpus(work)
        tried, failures, failed = _cli_attempts(work, prog, quick)
        m_tried, m_failures, m_failed = anyio.run(_mcp_attempts, work, prog)
        escapes = {"check": "path escapes", "tried": tried + m_tried, "failures": failures + m_failures,
                   "detail": (f"CLI {tried} ({failures} escaped), MCP --root {m_tried} ({m_failures} escaped)"
                              + ("; " + "; ".join((failed + m_failed)[:5]) if failed or m_failed else ""))}
        (work / "pins").mkdir()
        pins = _pins(work / "pins")
    return [escapes, pins]


if __name__ == "__main__":
    for row in measure("--full" not in sys.argv):
        print(row)
