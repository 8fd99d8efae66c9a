"""Every ```python block of docs/api.md runs, as its own test, in a fresh directory holding the
page's ```flow program as `review.flow`: the reference cannot drift from the API. Every block
runs: the page has no way to leave one out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def blocks() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    return [(m["lang"], m["body"]) for m in BLOCK.finditer(text)]


def examples() -> list[tuple[int, str]]:
    return [(number, body) for number, (lang, body) in enumerate(blocks(), 1) if lang == "python"]


def program() -> str:
    [source] = [body for lang, body in blocks() if lang == "flow"]
    return source + "\n"


def test_the_page_has_an_example_per_method_and_leaves_none_out():
    bodies = "\n".join(body for _, body in examples())
    for method in ("host.run(", "host.start(", "host.resume(", "host.replay(", "host.fork(", "host.history(",
                   "host.runs(", "host.halt(", "host.watch(", "host.pending(", "detach=True)", "flowrt.AsyncHost(",
                   "await host.run(", "await host.start(", "async for fact in host.watch("):
        assert method in bodies, method
    assert "untested" not in DOC.read_text(encoding="utf-8")
    assert [lang for lang, _ in blocks()].count("python") == len(examples()) and len(examples()) >= 14


@pytest.mark.parametrize("number,code", examples(), ids=[f"block{n}" for n, _ in examples()])
def test_example_runs(number, code, tmp_path, monkeypatch):
    (tmp_path / "review.flow").write_text(program(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(code, f"{DOC}:block{number}", "exec"), namespace)
