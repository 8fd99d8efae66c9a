"""Compiling a program again that has not changed: the answer of last time, once proved current.

A compile is a function of what it was told: the text of every file it read (or the failure of
the read), the answer of every check made on the disk (a link followed, a pinned directory
verified), in the order it asked. `CompileCache` keeps, per root file, the last result and those
questions with their answers. The next compile of that root asks the same questions again, in the
same order, of the reader and disk checks it is given now: when every answer is the same, the
compile would have gone the same way, and its result is returned without checking or generating
anything. Any answer that differs (a file edited, a link moved, a pin's checkout changed) and the
program is compiled afresh. So nothing is trusted that was not read again, and an edit is seen by
the very next run.

A host that starts the same program run after run (an application starting a workflow per
request, a worker) saves the check and code generation each time: ~2.7 ms of a one-step run's
~18 ms (docs/impl.md, "Session 11").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

from flowc.disk import DiskChecks

#: How many programs a cache keeps, and how much source text in all: each entry holds its
#: generated code, its manifest and the texts it read, and a host serves few programs many
#: times each.
ENTRIES = 16
SOURCE_CHARS = 4_000_000


class _Raised:
    """A read that failed, as the compile saw it: the error's type and text."""

    __slots__ = ("kind", "text")

    def __init__(self, problem: BaseException) -> None:
        self.kind = type(problem)
        self.text = str(problem)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Raised) and self.kind is other.kind and self.text == other.text

    def __hash__(self) -> int:
        return hash((self.kind, self.text))


def _ask(function: Callable, args: tuple) -> Any:
    try:
        return function(*args)
    except Exception as problem:  # a reader's failure is an answer too (a missing flow.toml)
        return _Raised(problem)


class _Noting:
    """The reader, the std reader and the disk checks of one compile, each answer noted in order."""

    def __init__(self, read: Callable, std_read: Callable, disk: DiskChecks | None) -> None:
        self.answers: list[tuple[str, tuple, Any]] = []
        self._read, self._std_read, self._disk = read, std_read, disk

    def _note(self, question: str, function: Callable, args: tuple) -> Any:
        try:
            answer = function(*args)
        except Exception as problem:  # the compile handles it as it would have; it is noted too
            self.answers.append((question, args, _Raised(problem)))
            raise
        self.answers.append((question, args, answer))
        return answer

    def read(self, path: str) -> str:
        return self._note("read", self._read, (path,))

    def std_read(self, path: str) -> str:
        return self._note("std_read", self._std_read, (path,))

    def disk(self) -> DiskChecks | None:
        return None if self._disk is None else _NotingDisk(self)


class _NotingDisk(DiskChecks):
    def __init__(self, noting: _Noting) -> None:
        super().__init__(noting._disk.jail)
        self._noting = noting

    def confine(self, path: str, boundary: str) -> str | None:
        return self._noting._note("confine", self._noting._disk.confine, (path, boundary))

    def verify_pin(self, directory: str, commit: str | None):
        return self._noting._note("verify_pin", self._noting._disk.verify_pin, (directory, commit))


class _Entry:
    __slots__ = ("answers", "compiled", "chars")

    def __init__(self, answers: tuple, compiled: Any) -> None:
        self.answers = answers
        self.compiled = compiled
        self.chars = sum(len(m.source) for m in compiled.modules)


class CompileCache:
    """The last compile of each root file, reused while every file and disk check answers as it
    did (see the module's text). Safe to share between threads."""

    def __init__(self, entries: int = ENTRIES, source_chars: int = SOURCE_CHARS) -> None:
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = entries
        self._chars_limit = source_chars
        self.hits = 0
        self.misses = 0

    def compile(self, compile_afresh: Callable, root_file: str, read: Callable, std_read: Callable | None,
                disk: DiskChecks | None, key: tuple) -> Any:
        """`compile_afresh(read, std_read, disk)`'s result, reused when still current."""
        from flowc.program import std_reader

        std = std_read if std_read is not None else std_reader
        slot = (root_file, disk is None, std_read is None) + key
        with self._lock:
            entry = self._entries.get(slot)
        if entry is not None and self._still_current(entry.answers, read, std, disk):
            with self._lock:
                self.hits += 1
                if slot in self._entries:
                    self._entries.move_to_end(slot)
            return entry.compiled
        noting = _Noting(read, std, disk)
        compiled = compile_afresh(noting.read, noting.std_read, noting.disk())
        with self._lock:
            self.misses += 1
            if compiled.ok:
                self._entries[slot] = _Entry(tuple(noting.answers), compiled)
                self._entries.move_to_end(slot)
                self._trim()
            else:
                self._entries.pop(slot, None)
        return compiled

    @staticmethod
    def _still_current(answers: tuple, read: Callable, std_read: Callable, disk: DiskChecks | None) -> bool:
        for question, args, answer in answers:
            if question == "read":
                now = _ask(read, args)
            elif question == "std_read":
                now = _ask(std_read, args)
            else:  # a disk check: the entry's slot says there are disk checks, as there are now
                now = _ask(getattr(disk, question), args)
            if now != answer:
                return False
        return True

    def _trim(self) -> None:
        chars = sum(e.chars for e in self._entries.values())
        while self._entries and (len(self._entries) > self._limit or chars > self._chars_limit):
            _, dropped = self._entries.popitem(last=False)
            chars -= dropped.chars

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
