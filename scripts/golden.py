"""Regenerate (or check) the golden files of generated code under tests/golden/.

Each golden file starts with its input: the Flow source of every user module of the program, then
the Python generated for each of them. Inputs: every example program (examples/, and the shared
seed examples when they are beside the repository) and every valid case under tests/cases/valid/.

    python scripts/golden.py          # rewrite tests/golden/
    python scripts/golden.py --check  # exit 1 and name the files that differ
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowc.emit import generate  # noqa: E402
from flowc.frontend import check_program  # noqa: E402
from tests.casefiles import load_case  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def programs() -> list[tuple[str, str, dict[str, str]]]:
    """(golden name, root file, files by path) for every golden input."""
    out: list[tuple[str, str, dict[str, str]]] = []
    for folder in sorted((ROOT / "examples").iterdir()):
        if not folder.is_dir():
            continue
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.flow"))
                 if p.is_file() and not p.name.startswith(".")}
        roots = [n for n in files if n in ("main.flow",)] or sorted(n for n in files if not n.endswith("_test.flow"))[:1]
        for root in roots:
            out.append((f"examples-{folder.name}", root, files))
    for path in sorted((ROOT / "tests" / "cases" / "valid").glob("*.flow")):
        case = load_case(path)
        out.append((f"valid-{path.stem}", case.root, dict(case.files)))
    return out


def render(root: str, files: dict[str, str]) -> str:
    def read(path: str) -> str:
        name = path[2:] if path.startswith("./") else path
        if name in files:
            return files[name]
        raise FileNotFoundError(2, "No such file or directory", path)

    checked = check_program(root, read)
    if not checked.ok:
        problems = "\n".join(f"{d.code}: {d.message}" for d in checked.diagnostics if d.severity == "error")
        raise SystemExit(f"{root} does not check:\n{problems}")
    generated = generate(checked)
    parts: list[str] = []
    for name in sorted(files):
        parts.append(f"==== flow: {name}\n{files[name].rstrip()}\n")
    for module in generated.modules:
        if module.identity.startswith("std@"):
            continue
        parts.append(f"==== python: {module.filename}\n{module.source.rstrip()}\n")
    return "\n".join(parts)


def main() -> int:
    check = "--check" in sys.argv
    GOLDEN.mkdir(exist_ok=True)
    expected: dict[str, str] = {}
    for name, root, files in programs():
        expected[f"{name}.golden"] = render(root, files)
    differing: list[str] = []
    for filename, text in sorted(expected.items()):
        path = GOLDEN / filename
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                differing.append(filename)
        else:
            path.write_text(text, encoding="utf-8")
    stale = sorted(p.name for p in GOLDEN.glob("*.golden") if p.name not in expected)
    if check:
        for name in differing + stale:
            print(f"differs: tests/golden/{name}")
        return 1 if differing or stale else 0
    for name in stale:
        (GOLDEN / name).unlink()
    print(f"wrote {len(expected)} golden files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
