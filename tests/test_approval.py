"""Approval of flow.toml's commands (issue 13, item 17): a yes at the terminal is remembered per
repository and commit in $XDG_CONFIG_HOME/flow, a remembered approval answers the next run, any
change to what was approved asks again, and every approval a run acts on is a host record."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from flowrt.store import RunStore

TOOL = """\
from flowrt.toolkit import serve

serve({"main.echo": lambda text: text + "!"}, declared_in="main.flow")
"""


def tool_program(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.flow").write_text('@tool pub flow echo(text: Text) -> Text\n\n'
                                         'pub flow main() -> Text !tool = echo("hi")\n')
    (directory / "tool.py").write_text(TOOL)
    (directory / "flow.toml").write_text('[tools]\n"main" = { command = ["%s", "tool.py"] }\n' % sys.executable)
    return directory


def environment(config: Path) -> dict:
    return dict(os.environ, XDG_CONFIG_HOME=str(config))


def run_answering(directory: Path, runs: Path, config: Path, answer: str) -> tuple[int, str]:
    """`flow run` with a terminal on standard input, answering the approval question."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "run", "--runs", str(runs), "main.flow"],
                                   cwd=directory, stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=environment(config))
        os.close(follower)
        follower = -1
        deadline = time.monotonic() + 60
        # The prompt goes to standard error; typing ahead is read once the question is asked.
        os.write(leader, answer.encode() + b"\n")
        out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return process.returncode, out.decode() + err.decode()


def run_unattended(directory: Path, runs: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", "run", "--runs", str(runs), *extra, "main.flow"],
                          cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          env=environment(config))


def approvals_of(runs: Path) -> list[dict]:
    [run_id] = [name for name in os.listdir(runs)]
    store = RunStore.open(str(runs), run_id, for_append=False)
    try:
        return [r for r in store.host_records() if r.get("kind") == "approval"]
    finally:
        store.close()


def test_an_approval_is_remembered_for_the_same_commit(tmp_path):
    program = tool_program(tmp_path / "prog")
    config = tmp_path / "config"
    # Nobody to ask and nothing remembered: refused, nothing recorded.
    refused = run_unattended(program, tmp_path / "runs0", config)
    assert refused.returncode == 2 and "binding-not-approved" in refused.stderr
    assert not (tmp_path / "runs0").exists()

    code, said = run_answering(program, tmp_path / "runs1", config, "y")
    assert code == 0 and '"hi!"' in said, said
    [asked] = approvals_of(tmp_path / "runs1")
    assert asked["decision"] == "approved" and asked["how"] == "asked"
    assert asked["command"] == [sys.executable, "tool.py"] and asked["commit"].startswith("sha256:")
    assert asked["repository"] == os.path.realpath(program)
    stored = json.loads((config / "flow" / "approvals.json").read_text())
    assert [e["commit"] for e in stored["approvals"]] == [asked["commit"]]

    # The next run, with nobody to ask, is approved by the remembered answer.
    again = run_unattended(program, tmp_path / "runs2", config)
    assert again.returncode == 0 and again.stdout == '"hi!"\n', again.stderr
    [remembered] = approvals_of(tmp_path / "runs2")
    assert remembered["how"] == "remembered" and remembered["commit"] == asked["commit"]

    # --allow approves without asking or remembering.
    allowed = run_unattended(program, tmp_path / "runs3", tmp_path / "other-config", "--allow")
    assert allowed.returncode == 0
    assert approvals_of(tmp_path / "runs3")[0]["how"] == "--allow"
    assert not (tmp_path / "other-config" / "flow" / "approvals.json").exists()

    # The implementation changed: what was approved is not what would run.
    (program / "tool.py").write_text(TOOL + "# changed\n")
    changed = run_unattended(program, tmp_path / "runs4", config)
    assert changed.returncode == 2 and "binding-not-approved" in changed.stderr


def test_a_no_is_not_remembered(tmp_path):
    program = tool_program(tmp_path / "prog")
    config = tmp_path / "config"
    code, said = run_answering(program, tmp_path / "runs", config, "n")
    assert code == 2 and "binding-not-approved" in said
    assert not (config / "flow" / "approvals.json").exists()


def test_a_git_checkout_is_approved_by_its_commit(tmp_path):
    program = tool_program(tmp_path / "repo")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_SYSTEM=os.devnull)
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(program), *args], check=True, env=env, capture_output=True, timeout=30)
    head = subprocess.run(["git", "-C", str(program), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True, timeout=30).stdout.strip()
    config = tmp_path / "config"
    code, said = run_answering(program, tmp_path / "runs1", config, "yes")
    assert code == 0, said
    assert approvals_of(tmp_path / "runs1")[0]["commit"] == head
    again = run_unattended(program, tmp_path / "runs2", config)
    assert again.returncode == 0 and approvals_of(tmp_path / "runs2")[0]["how"] == "remembered"


def test_an_unreadable_approvals_file_is_left_alone(tmp_path):
    program = tool_program(tmp_path / "prog")
    config = tmp_path / "config"
    (config / "flow").mkdir(parents=True)
    (config / "flow" / "approvals.json").write_text("not json")
    code, said = run_answering(program, tmp_path / "runs", config, "y")
    assert code == 0, said
    assert (config / "flow" / "approvals.json").read_text() == "not json"
    assert run_unattended(program, tmp_path / "runs2", config).returncode == 2
