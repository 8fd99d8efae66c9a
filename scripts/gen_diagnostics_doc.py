"""Generate docs/diagnostics.md: every diagnostic code, with an example program and what `flow check` says.

    python scripts/gen_diagnostics_doc.py           # rewrite docs/diagnostics.md
    python scripts/gen_diagnostics_doc.py --check   # exit 1 if docs/diagnostics.md is out of date

The codes, their severities and summaries come from the registry (`flowc/diagnostics/codes.py`), in
registry order, grouped by the stage comments of that file. Each code's example is its case file
`tests/cases/codes/<code>.flow` (see `tests/casefiles.py`): the first comment line says what the
mistake is, the program is shown with the case marks (`// E: code`) stripped, and the diagnostics are
those the checker reports for that stripped program, rendered as `flow check` does with colour off.
The output depends only on the repository's files, so it is deterministic.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowc.diagnostics.codes import REGISTRY  # noqa: E402
from flowc.diagnostics.render import render  # noqa: E402
from tests.casefiles import _HEADER, _find_mark, load_case, run_case  # noqa: E402

DOC = ROOT / "docs" / "diagnostics.md"
CODES_PY = ROOT / "flowc" / "diagnostics" / "codes.py"
CASES = ROOT / "tests" / "cases" / "codes"

#: Codes that no case file can show (the case harness gives every module as text, and runs only
#: `flow check`), with what triggers them instead.
NO_EXAMPLE = {
    "match-too-complex": "A `match` whose coverage is too costly to decide: exhaustiveness is NP-hard "
                         "in general, and a match over a tuple of 30 `Bool`s with 180 arms, each fixing "
                         "three of them, encodes a formula of propositional logic. The checker gives up "
                         "after a bounded amount of work (about a second) at the `match`, rather than "
                         "run for hours. No match a person writes comes near the bound.",
    "file-not-utf8": "A source file whose bytes are not valid UTF-8, for example a file saved as "
                     "Latin-1 with an accented letter in a comment. The diagnostic names the byte "
                     "offset of the first bad byte.",
    "entry-not-found": "Running a program whose root module has no `pub` function of the entry's "
                       "name: the CLI runs `main` unless `--entry NAME` names another, and a missing "
                       "or private entry is refused with this code.",
    "input-invalid": "`flow run --input` text that is not a JSON object, names a parameter the entry "
                     "does not declare, lacks one, or holds a value that does not decode as the "
                     "parameter's type, e.g. `--input '{\"xs\": [1, \"two\"]}'` for `xs: List<Int>`. "
                     "Nothing is recorded.",
    "reply-invalid": "`flow resume RUN --call ID --reply JSON` (or the MCP `resume` tool) with an outcome "
                     "whose value does not decode as the call's declared types (a generic Tool's at the "
                     "type arguments its Call recorded), e.g. `{\"Ok\": \"Aprove\"}` for an enum whose "
                     "constructor is `Approve`. Nothing is recorded and the call stays open; the message "
                     "names the path and what was expected, and shows the JSON Schema of the outcome and "
                     "a command that answers it. `--admit-bad-reply` admits such a reply as BadReply.",
    "binding-missing": "`flow run` of a program that can reach a Tool no implementation is bound for "
                       "(no flow.toml entry for it or its module, no Python callable).",
    "binding-not-approved": "`flow run` without `--allow`, when no person can answer the approval question, "
                            "of a program whose flow.toml names a command.",
    "binding-failed": "`flow run` when a command flow.toml names cannot be started, or does not answer "
                      "`describe`.",
    "binding-mismatch": "`flow run` when an implementation describes a Tool with another fingerprint than "
                        "its declaration has (it was written for another signature).",
    "pin-unverified": "`flow check` or `flow run` of a program that uses a repository whose pinned directory "
                      "does not hold the pinned commit: a git checkout at another commit or with uncommitted "
                      "changes, a directory whose modules hash to another `sha256:` value, or a pin without a "
                      "commit. The help names the value the directory holds.",
    "nested-refused": "`runner.resume` of a nested run that names no open call, gives a reply that is not an "
                      "outcome, or names a run that has ended or does not exist: the reply is "
                      "`Err(RunError { diagnostics })` with this code and the reason.",
}

_STAGE = re.compile(r"^# --- (.+?) -+[ \t]*$", re.MULTILINE)
_REGISTER = re.compile(r'register\(\s*"([a-z0-9-]+)"')

INTRO = """\
# Diagnostics

<!-- Generated by scripts/gen_diagnostics_doc.py from flowc/diagnostics/codes.py and
     tests/cases/codes/*.flow. Do not edit by hand: run `python scripts/gen_diagnostics_doc.py`. -->

Everything the Flow compiler finds wrong with a program is reported as a *diagnostic*, and a
diagnostic is data:

| field | meaning |
|---|---|
| `code` | a stable kebab-case name, such as `type-mismatch` or `match-not-exhaustive` |
| `severity` | `error` (the program is refused) or `warning` (it still checks) |
| `message` | one sentence about this occurrence |
| `location` | `{file, line, column, end_line, end_column}`: lines and columns count from 1 (columns in code points) and `end_column` is exclusive |
| `notes` | zero or more further facts, such as where a name was first defined |
| `help` | optionally, a suggested fix |

`flow check FILE` prints diagnostics for people: the code and message, the place as
`file:line:column`, the source line with carets under the span, then the notes and help, and a
summary line at the end. `flow check --json FILE` prints the same diagnostics as JSON objects with
exactly the fields above. Codes are stable: tools and scripts may match on them, and a code is
renamed or removed only with a migration note in this file.

Below, every code is listed in the order of the registry (`flowc/diagnostics/codes.py`), grouped
by the stage of the compiler that reports it. Each entry gives the code's default severity and
meaning, a small program that makes the mistake, and what `flow check` says about that program.
"""


@dataclasses.dataclass(frozen=True)
class Stage:
    title: str
    codes: tuple[str, ...]


def stages() -> list[Stage]:
    """The registry's codes grouped by the `# --- Stage ---` comments of codes.py, in file order."""
    text = CODES_PY.read_text(encoding="utf-8")
    marks = [(m.start(), "stage", m.group(1)) for m in _STAGE.finditer(text)]
    marks += [(m.start(), "code", m.group(1)) for m in _REGISTER.finditer(text)]
    groups: list[tuple[str, list[str]]] = []
    for _, kind, value in sorted(marks):
        if kind == "stage":
            groups.append((value, []))
        else:
            if not groups:
                groups.append(("Other", []))
            groups[-1][1].append(value)
    result = [Stage(title, tuple(names)) for title, names in groups if names]
    listed = [name for s in result for name in s.codes]
    if listed != list(REGISTRY):
        # A registration this parser did not see (or a code registered elsewhere): keep every code,
        # in registry order, and put the unseen ones last.
        seen = set(listed)
        extra = tuple(name for name in REGISTRY if name not in seen)
        result = [Stage(s.title, tuple(n for n in s.codes if n in REGISTRY)) for s in result]
        if extra:
            result.append(Stage("Other", extra))
    return [s for s in result if s.codes]


def strip_marks(text: str) -> str:
    """The text of one case file with the `// E: ...` / `// W: ...` marks removed from its lines."""
    out = []
    for line in text.split("\n"):
        mark = _find_mark(line)
        if mark is not None:
            line = line[: line.rfind("// " + mark[0])].rstrip()
        out.append(line)
    return "\n".join(out)


def description(path: Path) -> str:
    """The case's first line, without its `//`: one sentence saying what the mistake is."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0].strip()
    return first[2:].strip() if first.startswith("//") else ""


def _has_headers(path: Path) -> bool:
    return any(_HEADER.match(line) for line in path.read_text(encoding="utf-8").split("\n"))


def _language(name: str) -> str:
    return "toml" if name.endswith(".toml") else "flow"


def _fence(body: str, language: str) -> str:
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{language}\n{body}\n{fence}"


def case_section(path: Path) -> str:
    """The example part of one code's section: the mistake, the program and the checker's report."""
    case = load_case(path)
    files = {name: strip_marks(text).rstrip("\n") for name, text in case.files.items()}
    stripped = dataclasses.replace(case, files=files, expected=frozenset())
    checked, _ = run_case(stripped)
    parts = []
    text = description(path)
    if text:
        parts.append(f"*The mistake:* {text}")
    headers = _has_headers(path)
    for name, source in files.items():
        if headers:
            parts.append(f"`{name}`:")
        parts.append(_fence(source, _language(name)))
    report = render(checked.diagnostics, files, color=False).rstrip("\n")
    parts.append("`flow check` says:")
    parts.append(_fence(report if report else "ok: 1 program checked", "text"))
    return "\n\n".join(parts)


def generate() -> str:
    """The whole text of docs/diagnostics.md."""
    out = [INTRO.rstrip("\n")]
    for stage in stages():
        out.append(f"# {stage.title}")
        for name in stage.codes:
            code = REGISTRY[name]
            section = [f"## {name}", f"**{code.severity}**: {code.summary}"]
            path = CASES / f"{name}.flow"
            if path.is_file():
                section.append(case_section(path))
            elif name in NO_EXAMPLE:
                section.append(f"No example program: a case file cannot produce this code. "
                               f"It is reported for: {NO_EXAMPLE[name]}")
            else:
                section.append("No example program yet.")
            out.append("\n\n".join(section))
    return "\n\n".join(out) + "\n"


def check() -> bool:
    """Whether docs/diagnostics.md is exactly what `generate()` writes."""
    try:
        current = DOC.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return current == generate()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/diagnostics.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/diagnostics.md is out of date")
    args = parser.parse_args(argv)
    if args.check:
        if check():
            return 0
        shown = DOC.relative_to(ROOT) if DOC.is_relative_to(ROOT) else DOC
        print(f"{shown} is out of date: run `python scripts/gen_diagnostics_doc.py`", file=sys.stderr)
        return 1
    text = generate()
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
