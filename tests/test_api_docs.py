"""Every ```python block of docs/api.md runs, as its own test, in a fresh directory holding the
page's ```flow program as `review.flow`: the reference cannot drift from the API. A block after
an `<!-- untested: ... -->` line is left out (it waits for a module another change brings); the
page may hold only the one it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"(?P<marker><!-- untested:[^>]*-->\n)?```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def blocks() -> list[tuple[str, str, bool]]:
    text = DOC.read_text(encoding="utf-8")
    return [(m["lang"], m["body"], m["marker"] is not None) for m in BLOCK.finditer(text)]


def examples() -> list[tuple[int, str]]:
    found = []
    for number, (lang, body, untested) in enumerate(blocks(), 1):
        if lang == "python" and not untested:
            found.append((number, body))
    return found


def program() -> str:
    [source] = [body for lang, body, _ in blocks() if lang == "flow"]
    return source + "\n"


def test_the_page_has_an_example_per_method_and_leaves_out_only_watch():
    bodies = "\n".join(body for _, body in examples())
    for method in ("host.run(", "host.start(", "host.resume(", "host.replay(", "host.fork(", "host.history(",
                   "host.runs(", "host.halt(", "flowrt.AsyncHost(", "await host.run(", "await host.start("):
        assert method in bodies, method
    untested = [body for lang, body, skipped in blocks() if skipped]
    assert len(untested) == 1 and "host.watch(" in untested[0]


@pytest.mark.parametrize("number,code", examples(), ids=[f"block{n}" for n, _ in examples()])
def test_example_runs(number, code, tmp_path, monkeypatch):
    (tmp_path / "review.flow").write_text(program(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(code, f"{DOC}:block{number}", "exec"), namespace)
