"""A program compiled again unchanged is not checked again (flowc/compile_cache.py): the last
result is reused only once every file the compile read reads the same and every disk check
answers the same; anything else compiles afresh, and the result is always what a fresh compile
gives."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowc
import flowrt
from flowc.compile_cache import CompileCache
from flowc.disk import DiskChecks
from flowc.files import read_text

MAIN = 'use "./helper"\n\npub flow main(n: Int) -> Int = helper.twice(n) + {k}\n'
HELPER = "pub flow twice(n: Int) -> Int = n * {m}\n"


def write(path, text: str) -> None:
    path.write_text(text)
    # The same size and the same second would fool a check by timestamp; this one reads the text.


def program(tmp_path, k: int = 1, m: int = 2) -> str:
    write(tmp_path / "main.flow", MAIN.format(k=k))
    write(tmp_path / "helper.flow", HELPER.format(m=m))
    return str(tmp_path / "main.flow")


def compile_with(cache: CompileCache, root: str, **options):
    return flowc.compile(root, read_text, disk=DiskChecks(), cache=cache, **options)


def same_compile(a, b) -> bool:
    """The parts of a compile a host uses: diagnostics, identity, generated code, manifest."""
    return (a.diagnostics == b.diagnostics and a.identity == b.identity and a.functions == b.functions
            and a.tools == b.tools and a.modules == b.modules
            and (a.generated is None) == (b.generated is None)
            and (a.generated is None or a.generated.modules == b.generated.modules))


def test_an_unchanged_program_is_compiled_once(tmp_path):
    root = program(tmp_path)
    cache = CompileCache()
    first = compile_with(cache, root)
    second = compile_with(cache, root)
    assert first.ok and second is first
    assert (cache.hits, cache.misses) == (1, 1)


@pytest.mark.parametrize("edit", ["root", "import"])
def test_an_edited_module_is_compiled_again(tmp_path, edit):
    root = program(tmp_path)
    cache = CompileCache()
    first = compile_with(cache, root)
    if edit == "root":
        write(tmp_path / "main.flow", MAIN.format(k=5))
    else:
        write(tmp_path / "helper.flow", HELPER.format(m=3))
    second = compile_with(cache, root)
    assert second is not first and second.identity != first.identity
    assert same_compile(second, flowc.compile(root, read_text))
    assert (cache.hits, cache.misses) == (0, 2)


def test_a_manifest_that_appears_is_read(tmp_path):
    root = program(tmp_path)
    cache = CompileCache()
    compile_with(cache, root)
    (tmp_path / "flow.toml").write_text("[pins]\n")
    compile_with(cache, root)
    assert cache.misses == 2


def test_a_module_that_becomes_a_link_out_of_the_root_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    inner = tmp_path / "prog"
    inner.mkdir()
    root = program(inner)
    cache = CompileCache()
    assert compile_with(cache, root).ok
    # the same text, now behind a link that leaves the program's root
    (outside / "helper.flow").write_text((inner / "helper.flow").read_text())
    os.remove(inner / "helper.flow")
    os.symlink(outside / "helper.flow", inner / "helper.flow")
    again = compile_with(cache, root)
    assert not again.ok
    assert same_compile(again, flowc.compile(root, read_text))


def test_a_failed_compile_is_not_kept(tmp_path):
    (tmp_path / "bad.flow").write_text("pub flow main(n: Int) -> Int = n +\n")
    cache = CompileCache()
    first = compile_with(cache, str(tmp_path / "bad.flow"))
    second = compile_with(cache, str(tmp_path / "bad.flow"))
    assert not first.ok and not second.ok and second is not first
    assert cache.hits == 0


def test_a_virtual_reader_is_asked_again(tmp_path):
    files = {"main.flow": "pub flow main(n: Int) -> Int = n + 1\n"}

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    cache = CompileCache()
    first = flowc.compile("main.flow", read, disk=None, cache=cache)
    assert flowc.compile("main.flow", read, disk=None, cache=cache) is first
    files["main.flow"] = "pub flow main(n: Int) -> Int = n + 2\n"
    assert flowc.compile("main.flow", read, disk=None, cache=cache).identity != first.identity


def test_generate_and_manifest_only_are_kept_apart(tmp_path):
    root = program(tmp_path)
    cache = CompileCache()
    manifest_only = compile_with(cache, root, generate=False)
    full = compile_with(cache, root)
    assert manifest_only.generated is None and full.generated is not None


def test_it_keeps_at_most_its_entries(tmp_path):
    cache = CompileCache(entries=2)
    roots = []
    for i in range(3):
        folder = tmp_path / f"p{i}"
        folder.mkdir()
        roots.append(program(folder, k=i))
    for root in roots:
        compile_with(cache, root)
    assert compile_with(cache, roots[2]) is compile_with(cache, roots[2])
    misses = cache.misses
    compile_with(cache, roots[0])  # the oldest was dropped
    assert cache.misses == misses + 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["main", "helper", "none"]), st.integers(0, 3)), min_size=1, max_size=6))
def test_a_cached_compile_is_always_what_a_fresh_one_gives(tmp_path_factory, edits):
    folder = tmp_path_factory.mktemp("edits")
    root = program(folder)
    cache = CompileCache()
    for which, value in edits:
        if which == "main":
            write(folder / "main.flow", MAIN.format(k=value))
        elif which == "helper":
            # a value of 0 breaks the module: a compile with an error in between
            write(folder / "helper.flow", HELPER.format(m=value) if value else "pub flow twice(n: Int) -> Int =\n")
        assert same_compile(compile_with(cache, root), flowc.compile(root, read_text))


def test_a_host_runs_the_edited_program_at_once(tmp_path):
    root = program(tmp_path)
    with flowrt.Host(runs=str(tmp_path / "runs"), durability="none") as host:
        assert host.run(root, {"n": 5}).output == 11
        assert host.run(root, {"n": 5}).output == 11
        write(tmp_path / "helper.flow", HELPER.format(m=10))
        assert host.run(root, {"n": 5}).output == 51
        write(tmp_path / "main.flow", "pub flow main(n: Int) -> Int = n +\n")
        with pytest.raises(flowrt.Refused):
            host.run(root, {"n": 5})
