"""Reading user files and finding `.flow` files in directories.

A directory search skips entries whose names start with `.` and follows no symbolic link, so it
stays inside the directory it was given and ends (the execution seed's rule for `flow fmt`, which
`flow check` and `flow test` share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def read_text(path: str) -> str:
    """Read a source file as UTF-8; raises OSError or UnicodeDecodeError."""
    with open(path, "rb") as handle:
        data = handle.read()
    return data.decode("utf-8")


@dataclass(frozen=True, slots=True)
class SearchProblem:
    path: str
    reason: str


def program_roots(paths: list[str]) -> tuple[list[str], list[SearchProblem]]:
    """The `.flow` files named by command-line paths: files as given, directories searched."""
    roots: list[str] = []
    problems: list[SearchProblem] = []
    for path in paths:
        if os.path.isdir(path):
            files, unreadable = find_flow_files(path)
            roots.extend(files)
            problems.extend(unreadable)
        else:
            roots.append(path)
    return roots, problems


def find_flow_files(directory: str) -> tuple[list[str], list[SearchProblem]]:
    """Every `.flow` file under `directory`, sorted, and the entries that could not be read."""
    found: list[str] = []
    problems: list[SearchProblem] = []
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as problem:
            problems.append(SearchProblem(current, problem.strerror or str(problem)))
            continue
        for entry in listed:
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(".flow"):
                found.append(entry.path)
    return sorted(found), problems
