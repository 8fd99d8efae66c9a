"""Approval of the commands flow.toml names (docs/cli.md, Approval): decided, remembered, recorded.

A command runs when `--allow` approves it, when it was approved before for the same repository
and commit, or when a person says yes at the terminal; a yes is remembered. What is approved is
exactly what was there: the *repository* is the top of the git checkout holding flow.toml (its
directory when there is none) and the *commit* is that checkout's HEAD when it has no uncommitted
changes, else the content hash of every file under flow.toml's directory (`sha256:`; entries
named `.*`, `__pycache__` and the runs directory are not part of it); when that
cannot be computed (too large) nothing is remembered and the question is asked each time.

Remembered approvals are one JSON file, `$XDG_CONFIG_HOME/flow/approvals.json` (default
`~/.config/flow/`), written whole to a temporary file and renamed, under a lock. A file that does
not read as approvals is left as it is: nothing is remembered from or into it.

Every decision is a `Decision`; the run writes each approval as the host record `{"kind":
"approval", "repository", "commit", "directory", "command", "decision", "how"}` (`how`:
`--allow`, `remembered` or `asked`). A refusal refuses the run before its Start, so it has no
history to be recorded in; it is reported on standard error.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from dataclasses import dataclass

from flowc.disk import content_hash, git_head, git_top

FILE_NAME = "approvals.json"
FORMAT = 1


def config_dir() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "flow")


@dataclass(frozen=True)
class Decision:
    repository: str
    commit: str | None
    directory: str
    command: tuple[str, ...]
    decision: str  # "approved" or "refused"
    how: str  # "--allow", "remembered", "asked" or "nobody-to-ask"

    def host_record(self) -> dict:
        return {"kind": "approval", "repository": self.repository, "commit": self.commit,
                "directory": self.directory, "command": list(self.command), "decision": self.decision,
                "how": self.how}


class Approvals:
    """The approval state of one flow.toml's directory, worked out once per run."""

    def __init__(self, manifest_dir: str, runs_dir: str | None = None) -> None:
        self.directory = os.path.realpath(manifest_dir)
        #: a runs directory below flow.toml changes with every run; it is not what is approved
        self.skip = frozenset([os.path.realpath(runs_dir)]) if runs_dir and "://" not in runs_dir else frozenset()
        self._state: tuple[str, str | None] | None = None

    def where(self) -> tuple[str, str | None]:
        """(repository, commit) of the directory; the commit is None when it cannot be said."""
        if self._state is None:
            top = git_top(self.directory)
            head = git_head(top, is_top=True) if top is not None else None
            if top is not None and head is not None and not head.startswith("dirty:"):
                self._state = (top, head)
            else:
                self._state = (top or self.directory, content_hash(self.directory, every_file=True, skip=self.skip))
        return self._state

    def decide(self, command: tuple[str, ...], *, allow: bool, ask) -> Decision:
        repository, commit = self.where()

        def decision(verdict: str, how: str) -> Decision:
            return Decision(repository, commit, self.directory, command, verdict, how)

        if allow:
            return decision("approved", "--allow")
        if commit is not None and self._remembered(repository, commit, command):
            return decision("approved", "remembered")
        if ask is None:
            return decision("refused", "nobody-to-ask")
        if not ask(" ".join(command)):
            return decision("refused", "asked")
        if commit is not None:
            remember(repository, commit, self.directory, command)
        return decision("approved", "asked")

    def _remembered(self, repository: str, commit: str, command: tuple[str, ...]) -> bool:
        entries = _read(os.path.join(config_dir(), FILE_NAME))
        return entries is not None and any(
            e.get("repository") == repository and e.get("commit") == commit and e.get("directory") == self.directory
            and e.get("command") == list(command) for e in entries)


def remember(repository: str, commit: str, directory: str, command: tuple[str, ...]) -> bool:
    """Add an approval to the file; False when it could not be (unwritable, or not approvals)."""
    folder = config_dir()
    path = os.path.join(folder, FILE_NAME)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(os.path.join(folder, FILE_NAME + ".lock"), "a") as lock:
            # Two runs approving at once each add theirs: the second reads the first's file.
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = _read(path)
            if entries is None:
                return False
            entry = {"repository": repository, "commit": commit, "directory": directory, "command": list(command)}
            if entry not in entries:
                entries.append(entry)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=FILE_NAME + ".")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    json.dump({"format": FORMAT, "approvals": entries}, out, indent=1, sort_keys=True)
                    out.write("\n")
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, path)
            except BaseException:
                if os.path.exists(temporary):
                    os.unlink(temporary)
                raise
    except OSError:
        return False
    return True


def _read(path: str) -> list[dict] | None:
    """The approvals in the file ([] when there is none); None when it is not an approvals file."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("approvals"), list):
        return None
    return [e for e in data["approvals"] if isinstance(e, dict)]
