"""The parsed standard library is cached on disk (`flowc/stdcache.py`); a check never depends on it.

A check served from the cache says exactly what a check that parses std says: every diagnostic,
every checkpoint place, the program identity and the facts code generation reads, which the
generated code shows. A damaged cache file is ignored and rewritten; std text other than the text
a file was made from is parsed afresh.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from flowc import stdcache
from flowc.emit import generate
from flowc.frontend import check_program
from flowc.program import STD_DIR

STD_MODULES = sorted(p.stem for p in STD_DIR.glob("*.flow") if p.stem != "prelude")

#: A program that loads every std module and uses a few of them.
PROGRAM = "\n".join(f'use "std@v1/{name}"' for name in STD_MODULES) + """

pub flow total(xs: List<Int>) -> Int = list.fold(xs, 0, flow(acc, x) = acc + x)

pub flow main(words: List<Text>) -> Text = {
    let counted = list.map(words, flow(w) = text.length(w))
    "${total(counted)} ${option.unwrap_or(list.first(words), "none")}"
}
"""


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """A private cache folder, and a process with no parse of std in memory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(stdcache, "_memo", {})
    return tmp_path / "cache" / "flow" / "std"


def check(source: str = PROGRAM, *, std_read=None):
    files = {"main.flow": source}

    def read(path: str) -> str:
        if path in files:
            return files[path]
        raise FileNotFoundError(2, "No such file or directory", path)

    if std_read is None:
        return check_program("main.flow", read)
    return check_program("main.flow", read, std_read=std_read)


def summary(checked) -> tuple:
    """Everything a check says, and the code generated from its facts."""
    code = [(m.identity, m.source) for m in generate(checked).modules] if checked.ok else []
    return checked.diagnostics, checked.places, checked.identity, [m.identity for m in checked.program.modules], code


def uncached(monkeypatch) -> tuple:
    with monkeypatch.context() as patch:
        patch.setattr(stdcache, "lookup", lambda display, source: None)
        patch.setattr(stdcache, "store", lambda display, source, parsed: None)
        return summary(check())


def test_the_program_checks_and_uses_every_std_module(cache_home, monkeypatch):
    checked = check()
    assert checked.ok, checked.diagnostics
    assert {m.identity for m in checked.program.modules} >= {f"std@v1/{name}" for name in STD_MODULES}


def test_a_check_from_the_cache_says_what_a_check_that_parses_says(cache_home, monkeypatch):
    expected = uncached(monkeypatch)
    first = summary(check())  # parses std and writes the cache
    files = sorted(p.name for p in cache_home.iterdir())
    assert len(files) == len(STD_MODULES) + 1  # one file per module, the prelude too
    monkeypatch.setattr(stdcache, "_memo", {})  # as a new process would: read from disk
    second = summary(check())
    assert first == expected
    assert second == expected


def test_a_cached_parse_is_read_back_not_parsed_again(cache_home, monkeypatch):
    check()
    monkeypatch.setattr(stdcache, "_memo", {})
    parsed_again: list[str] = []
    import flowc.program as program

    real_parse = program.parse

    def counting_parse(source: str, file: str):
        parsed_again.append(file)
        return real_parse(source, file)

    monkeypatch.setattr(program, "parse", counting_parse)
    check()
    assert parsed_again == ["main.flow"]


@pytest.mark.parametrize("damage", [b"", b"not a pickle", None])
def test_a_damaged_cache_file_is_ignored_and_rewritten(cache_home, monkeypatch, damage):
    expected = uncached(monkeypatch)
    check()
    for path in cache_home.iterdir():
        if damage is None:  # a valid pickle of the wrong thing
            path.write_bytes(pickle.dumps(("something", "else")))
        else:
            path.write_bytes(damage)
    monkeypatch.setattr(stdcache, "_memo", {})
    assert summary(check()) == expected
    monkeypatch.setattr(stdcache, "_memo", {})
    for path in cache_home.iterdir():  # each file was replaced by a good one
        assert stdcache.lookup(_display(path), (STD_DIR / f"{_module(path)}.flow").read_text(encoding="utf-8"))


def test_a_cache_file_made_from_other_text_is_not_used(cache_home, monkeypatch):
    check()
    # A file for `list` whose text differs from the shipped list.flow: it must not be believed,
    # even though its name (the compiler digest) matches.
    list_file = next(p for p in cache_home.iterdir() if _module(p) == "list")
    data = pickle.loads(list_file.read_bytes())
    stale_text = data[3] + "\n// an older std\n"
    list_file.write_bytes(pickle.dumps((data[0], data[1], data[2], stale_text, data[4])))
    monkeypatch.setattr(stdcache, "_memo", {})
    assert stdcache.lookup("std@v1/list.flow", (STD_DIR / "list.flow").read_text(encoding="utf-8")) is None
    assert summary(check()) == uncached(monkeypatch)


def test_changed_std_sources_are_parsed_not_served_from_the_cache(cache_home, monkeypatch):
    check()  # the cache now holds every shipped std module

    def std_read(path: str) -> str:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith("list.flow"):
            # The recorded std of some history: a function the shipped list.flow does not have.
            text += "\npub flow only_in_this_std() -> Int = 42\n"
        return text

    source = 'use "std@v1/list"\npub flow main() -> Int = list.only_in_this_std()\n'
    changed = check(source, std_read=std_read)
    assert changed.ok, changed.diagnostics
    shipped = check(source)
    assert [d.code for d in shipped.diagnostics] == ["member-undefined"]
    assert changed.identity != shipped.identity


def test_an_unwritable_cache_folder_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(stdcache, "_memo", {})
    expected = uncached(monkeypatch)
    assert summary(check()) == expected


def test_files_of_older_compilers_are_removed_when_a_new_one_writes(cache_home, monkeypatch):
    import os

    cache_home.mkdir(parents=True)
    for age, digest in enumerate(["a" * 20, "b" * 20, "c" * 20, "d" * 20, "e" * 20], start=1):
        old = cache_home / f"std-v1-prelude.{digest}.{'0' * 16}.pickle"
        old.write_bytes(b"from an older compiler")
        os.utime(old, (1_000_000 - age, 1_000_000 - age))  # "a" is the newest of them
    other_module = cache_home / f"std-v1-list.{'e' * 20}.{'0' * 16}.pickle"
    other_module.write_bytes(b"another module's file is left to that module")
    check('pub flow main() -> Int = 1\n')
    left = sorted(p.name.split(".")[1] for p in cache_home.iterdir() if p.name.startswith("std-v1-prelude."))
    assert len(left) == stdcache.KEEP_COMPILERS
    assert stdcache._compiler_digest() in left
    assert {"a" * 20, "b" * 20, "c" * 20} <= set(left)
    assert other_module.exists()


def _module(path: Path) -> str:
    return path.name.split(".", 1)[0].removeprefix("std-v1-")


def _display(path: Path) -> str:
    return f"std@v1/{_module(path)}.flow"


def test_the_compiler_digest_covers_every_compiler_module(tmp_path, monkeypatch):
    """A change to any module of flowc (here exhaust.py, which a hand-kept list once left out)
    gives generated code another cache key."""
    import shutil

    from flowc import emit

    copy = tmp_path / "flowc"
    shutil.copytree(Path(emit.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(emit, "__file__", str(copy / "emit.py"))
    monkeypatch.setattr(emit, "_compiler_digest", None)
    before = emit.compiler_digest()
    (copy / "exhaust.py").write_text((copy / "exhaust.py").read_text() + "\n# changed\n")
    monkeypatch.setattr(emit, "_compiler_digest", None)
    assert emit.compiler_digest() != before
