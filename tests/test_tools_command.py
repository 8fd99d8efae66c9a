"""`flow tools FILE` (and its spelled-out form `flow tools list FILE`) through the real entry point."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDERS = os.path.join(ROOT, "examples", "orders", "main.flow")


def flow(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_both_spellings_list_the_same_declarations():
    short, spelled = flow("tools", ORDERS), flow("tools", "list", ORDERS)
    assert short.returncode == spelled.returncode == 0, short.stderr + spelled.stderr
    assert short.stdout == spelled.stdout
    program = json.loads(short.stdout)["programs"][0]
    names = {tool["tool"] for tool in program["tools"]}
    assert names and all("." in name for name in names)
    assert all(tool["fingerprint"].startswith("sha256:") for tool in program["tools"])


def test_a_program_that_does_not_check_exits_2_with_its_diagnostics(tmp_path):
    bad = tmp_path / "bad.flow"
    bad.write_text("pub flow main() -> Int { undefined_name }\n")
    done = flow("tools", str(bad))
    assert done.returncode == 2
    diagnostics = json.loads(done.stdout)["programs"][0]["diagnostics"]
    assert diagnostics and diagnostics[0]["location"]["line"] == 1


def test_import_mcp_is_a_subcommand_of_tools():
    done = flow("tools", "--help")
    assert done.returncode == 0 and "import-mcp" in done.stdout and "list" in done.stdout
