"""`flowc`, the compiler's own command line: `flowc check` is `flow check` (one command, defined in
flowc), and the compiler's CLI runs without loading anything of the host (`flowrt`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOWC = [sys.executable, "-c", "import sys; from flowc.cli import main; sys.exit(main())"]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_flowc_check_is_flow_check(tmp_path):
    good = tmp_path / "good.flow"
    good.write_text("pub flow main() -> Int = 1\n")
    bad = tmp_path / "bad.flow"
    bad.write_text("pub flow main() -> Int = \"no\"\n")
    for paths, code in (([good], 0), ([bad], 2), ([good, bad], 2), ([tmp_path / "missing.flow"], 2)):
        ours = run([*FLOWC, "check", "--json", *map(str, paths)])
        host = run([sys.executable, "-m", "flowrt.cli", "check", "--json", *map(str, paths)])
        assert ours.returncode == host.returncode == code, ours.stderr
        assert ours.stdout == host.stdout and ours.stdout.startswith('{"checkpoints"')
    plain = run([*FLOWC, "--color", "never", "check", str(bad)])
    assert plain.returncode == 2 and "error[" in plain.stderr


def test_flowc_loads_nothing_of_the_host(tmp_path):
    good = tmp_path / "good.flow"
    good.write_text("pub flow main() -> Int = 1\n")
    script = ("import sys; from flowc.cli import main\n"
              "try:\n    main(['check', sys.argv[1]])\nexcept SystemExit as done:\n    code = done.code\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flowrt', 'sandbox')))\n")
    done = run([sys.executable, "-c", script, str(good)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
