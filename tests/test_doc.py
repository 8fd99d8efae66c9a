"""`flow doc`: a page per module (std included), doc comments of fields, constructors and named
payload fields in source order, type parameters' requirements, local and anonymous functions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = '''/// Shapes and their areas.

use "std@v1/list"

/// A shape.
pub type Shape {
    /// A circle.
    Circle {
        /// Its radius.
        radius: Int,
    },
    /// A square.
    Square(Int),
}

/// A labelled box.
pub type Box {
    /// What it says on it.
    pub label: Text,
    size: Int,
}

/// The largest of some values.
pub flow largest<T: Ord>(xs: List<T>, first: T) -> T = {
    flow pick(a: T, b: T) -> T = if a > b { a } else { b }
    list.fold(xs, first, flow(acc, x) = pick(acc, x))
}
'''


def flow(*args: str):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_pages_for_every_module_with_member_docs_and_inner_functions(tmp_path):
    (tmp_path / "shapes.flow").write_text(PROGRAM)
    out = tmp_path / "out"
    done = flow("doc", str(tmp_path / "shapes.flow"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "index.md").exists() and (out / "std@v1" / "list.md").exists()
    assert (out / "std@v1" / "prelude.md").exists()
    page = (out / "shapes.md").read_text()
    assert page.startswith("# Module `shapes`\n\nShapes and their areas.")
    order = [page.index(s) for s in ("A circle.", "`radius`: Its radius.", "A square.")]
    assert order == sorted(order)
    assert "- `pub label: Text`: What it says on it." in page
    assert "`T` requires `Ord`" in page
    assert "local `flow pick(a: T, b: T) -> T`" in page and "anonymous `flow(acc, x)`" in page
    assert "[`shapes`](shapes.md): Shapes and their areas" in (out / "index.md").read_text()


def test_without_out_prints_the_pages(tmp_path):
    (tmp_path / "shapes.flow").write_text(PROGRAM)
    done = flow("doc", str(tmp_path / "shapes.flow"))
    assert done.returncode == 0
    assert "# Module `std@v1/list`" in done.stdout and "# Module `shapes`" in done.stdout


def test_html_pages_highlight_flow_code_with_the_flow_lexer(tmp_path):
    (tmp_path / "shapes.flow").write_text(PROGRAM)
    done = flow("doc", str(tmp_path / "shapes.flow"), "--out", str(tmp_path / "html"), "--html")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "html" / "shapes.html").read_text()
    assert '<span class="k">flow</span>' in page and '<span class="nc">Shape</span>' in page
    assert 'href="shapes.html"' in (tmp_path / "html" / "index.html").read_text()
