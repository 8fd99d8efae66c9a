"""What the loader checks on the real file system before it reads a module (docs/language.md 4.3).

- A module file, its links followed, must be inside its boundary: the program root for the
  program's own modules, the pinned directory for a repository's. A link that leaves it is
  refused before anything is read, so no diagnostic can quote what it points to.
- A pinned directory must hold the commit its pin names: the HEAD of a clean git checkout whose
  top is that directory, or the content hash of its modules (`sha256:<hex>`, `content_hash`).

Virtual readers (the test cases' dicts, a nested run's submitted source, the sources a history
recorded) have nothing on disk to check and load without these checks (`load(..., disk=None)`).
Git runs with a time limit, never prompts and never touches the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess

GIT_TIMEOUT = 10.0  # seconds for one local git command
#: A content hash reads at most this much; a larger directory must be pinned as a git checkout.
HASH_MAX_FILES = 10_000
HASH_MAX_BYTES = 256 * 1024 * 1024

_GIT_ID = re.compile(r"[0-9a-f]{7,64}")
_CONTENT = re.compile(r"sha256:[0-9a-f]{64}")


class DiskChecks:
    """The checks `flowc.program.load` makes when it reads real files. With `jail` (the MCP
    server's `--root`), every file read and every pinned directory must also be inside it: a
    flow.toml under the jail cannot pin a directory outside it."""

    def __init__(self, jail: str | None = None) -> None:
        self.jail = jail

    def confine(self, path: str, boundary: str) -> str | None:
        if self.jail is not None and not inside(path, self.jail):
            return "leaves"
        return confine(path, boundary)

    def verify_pin(self, directory: str, commit: str | None) -> tuple[str, str | None] | None:
        if self.jail is not None and not inside(directory, self.jail):
            return f"the pinned directory `{directory}` is outside the served root", None
        return verify_pin(directory, commit)


DISK = DiskChecks()


def inside(path: str, boundary: str) -> bool:
    """Whether `path` is `boundary` or below it, both with their links followed."""
    real = os.path.realpath(path)
    base = os.path.realpath(boundary)
    try:
        return os.path.commonpath([real, base]) == base
    except ValueError:  # one is relative and one absolute cannot happen after realpath; a drive mismatch can
        return False


def confine(path: str, boundary: str) -> str | None:
    """None when `path` may be read as a module of `boundary`; else what is wrong (never naming
    or reading what a link points to)."""
    if not inside(path, boundary):
        return "leaves"
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # the read reports a missing or unreadable file itself
    if not stat.S_ISREG(mode):
        # A FIFO or a device would block or never end the read.
        return "not-a-file"
    return None


def verify_pin(directory: str, commit: str | None) -> tuple[str, str | None] | None:
    """None when `directory` holds `commit`; else (problem, the value to pin instead if known)."""
    if not os.path.isdir(directory):
        return f"the pinned directory `{directory}` does not exist", None
    if commit is not None and _CONTENT.fullmatch(commit):
        actual = content_hash(directory)
        if actual is None:
            return (f"`{directory}` has more than {HASH_MAX_FILES} files or {HASH_MAX_BYTES} bytes of modules "
                    "to hash; pin a git checkout by its commit instead"), None
        if actual != commit:
            return f"the modules in `{directory}` hash to {actual}, not the pinned {commit}", actual
        return None
    head = git_head(directory)
    suggestion = head if head is not None and not head.startswith("dirty:") else content_hash(directory)
    if commit is None:
        return "the pin names no commit, so what the directory holds cannot be verified", suggestion
    if not _GIT_ID.fullmatch(commit):
        return (f"`{commit}` is neither a git commit (7 to 64 hex digits) nor a content hash "
                "(sha256:<64 hex digits>)"), suggestion
    if head is None:
        return (f"`{directory}` is not the top of a git checkout, so the commit `{commit}` cannot be "
                "verified; pin it by the content hash of its modules"), content_hash(directory)
    if head.startswith("dirty:"):
        return (f"the checkout `{directory}` has uncommitted changes, so it does not hold commit "
                f"`{commit}` (commit or discard them)"), None
    if not head.startswith(commit):
        return f"the checkout `{directory}` is at commit {head}, not the pinned `{commit}`", head
    return None


def git_top(directory: str) -> str | None:
    """The top of the git checkout holding `directory`, links followed; None when there is none."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    return os.path.realpath(top) if top else None


def git_head(directory: str, *, is_top: bool = False) -> str | None:
    """The HEAD commit of the git checkout whose top is `directory`; `dirty:<commit>` when it has
    uncommitted changes (untracked files included, ignored ones not); None when `directory` is
    not the top of a checkout or git cannot say. `is_top`: the caller has just had `directory`
    from `git_top` (a worker binds a run's commands once a run: one git process fewer each)."""
    if not is_top:
        top = git_top(directory)
        if top is None or top != os.path.realpath(directory):
            return None
    head = _git(directory, "rev-parse", "--verify", "HEAD")
    if head is None:
        return None
    status = _git(directory, "status", "--porcelain", "--untracked-files=normal")
    if status is None:
        return None
    return f"dirty:{head}" if status else head


def _git(directory: str, *args: str) -> str | None:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        done = subprocess.run(["git", "-C", directory, *args], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=GIT_TIMEOUT, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace").strip()


def content_hash(directory: str, *, every_file: bool = False, skip: frozenset[str] = frozenset()) -> str | None:
    """`sha256:<hex>` over every `.flow` file below `directory` (its path and bytes, sorted by
    path), skipping entries whose names start with `.` and following no link (a link's target
    text is hashed instead); None when over the limits. `every_file`: every file, not only
    modules (what an approval of a directory's commands covers), `__pycache__` and the
    directories `skip` names (real paths: a runs directory) skipped."""
    digest = hashlib.sha256(b"flow-files/1\n" if every_file else b"flow-modules/1\n")
    wanted = (lambda name: True) if every_file else (lambda name: name.endswith(".flow"))
    entries: list[tuple[str, str]] = []
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(os.path.join(directory, relative) if relative else directory) as listing:
                found = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        for entry in found:
            if entry.name.startswith(".") or (every_file and entry.name == "__pycache__"):
                continue
            name = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_symlink():
                if wanted(entry.name):
                    entries.append((name, "link"))
            elif entry.is_dir(follow_symlinks=False):
                if not skip or os.path.realpath(entry.path) not in skip:
                    pending.append(name)
            elif entry.is_file(follow_symlinks=False) and wanted(entry.name):
                entries.append((name, "file"))
            if len(entries) > HASH_MAX_FILES:
                return None
    total = 0
    for name, kind in sorted(entries):
        path = os.path.join(directory, name)
        try:
            if kind == "link":
                data = os.readlink(path).encode("utf-8", "surrogateescape")
            else:
                with open(path, "rb") as handle:
                    data = handle.read(HASH_MAX_BYTES + 1 - total)
        except OSError:
            data = b""
            kind = "unreadable"
        total += len(data)
        if total > HASH_MAX_BYTES:
            return None
        digest.update(f"{kind} {name}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
        digest.update(data)
    return "sha256:" + digest.hexdigest()
