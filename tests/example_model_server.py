"""Starting an example's own fake model server (examples/*/fake_model.py) for a test: on a free
port of 127.0.0.1, its base URL read from the first line it prints, stopped when the test ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def serving(example: str) -> Iterator[str]:
    """Runs examples/<example>/fake_model.py; yields its OPENAI_BASE_URL."""
    script = ROOT / "examples" / example / "fake_model.py"
    process = subprocess.Popen([sys.executable, str(script), "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline().strip()  # the server prints it once it listens
        assert line.startswith("OPENAI_BASE_URL=http://127.0.0.1:"), (line, process.stderr.read())
        yield line.split("=", 1)[1]
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def flow(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """The real `flow` entry point, with `env` over an environment that holds no OpenAI settings of
    the user's own (so a test never reaches a real endpoint)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "FLOW_MODEL", "FAKE_MODEL_KEY")}
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env={**clean, **(env or {})},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
