"""How `flow run` starts: the sandbox child runs without `site` and still finds exactly its
packages; the host writes the bytecode the child cannot; a plain `flow run` is read without click,
says exactly what the click command says, and starts the child before the compiler is imported."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flowrt.sandbox_launch as launch
from flowrt import child_reaper
from flowrt.sandbox_process import Child, ChildTimeout
from flowrt.cli import plain_run
from flowdata.policy import CHILD_PACKAGES, CHILD_PYTHON_FLAGS

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"

#: Run in the child (`-c`): reports what it can see, over the channel.
REPORT = textwrap.dedent("""
    import os, sys
    from flowdata import framing
    read_fd, write_fd = framing.claim_stdio()
    found = {}
    for name in %r:
        module = __import__(name)
        found[name] = os.path.dirname(os.path.dirname(os.path.abspath(module.__file__)))
    framing.send(write_fd, {
        "flags": {"no_site": sys.flags.no_site, "no_user_site": sys.flags.no_user_site,
                  "safe_path": sys.flags.safe_path, "dont_write_bytecode": sys.flags.dont_write_bytecode,
                  "ignore_environment": sys.flags.ignore_environment},
        "site": "site" in sys.modules,
        "path": sys.path,
        "environ": dict(os.environ),
        "found": found,
        "modules": sorted(sys.modules),
    })
""") % (CHILD_PACKAGES,)


def report(**kwargs) -> dict:
    child = Child.start(argv_tail=["-c", REPORT], **kwargs)
    try:
        return child.recv(timeout=30)
    finally:
        child.kill()


def test_the_child_starts_without_site_and_sees_only_its_packages(monkeypatch):
    monkeypatch.setenv("FLOW_TEST_SECRET", "do-not-leak")
    monkeypatch.setenv("PYTHONPATH", "/nowhere/at/all")
    seen = report()
    assert seen["flags"] == {"no_site": 1, "no_user_site": 1, "safe_path": True, "dont_write_bytecode": 1,
                             "ignore_environment": 0}
    assert not seen["site"]
    # Nothing of the host's environment; PYTHONPATH is the host's choice, not inherited.
    assert set(seen["environ"]) <= {"PYTHONHASHSEED", "PYTHONPATH", "LC_CTYPE"}
    assert seen["environ"]["PYTHONPATH"] == launch.child_path()
    # The path: the standard library, then this checkout and the folders of the child's packages.
    ours = launch.child_path().split(os.pathsep)
    assert ours[0] == launch.SOURCE_ROOT
    extra = [entry for entry in seen["path"] if entry in ours]
    assert extra == ours
    stdlib = {os.path.realpath(p) for p in sys.path if "site-packages" not in p and "dist-packages" not in p}
    for entry in seen["path"]:
        assert entry in ours or os.path.realpath(entry) in stdlib or not os.path.exists(entry), entry
    assert "" not in seen["path"] and "/nowhere/at/all" not in seen["path"]
    import site

    assert site.getusersitepackages() not in seen["path"]
    # Each package comes from where the host's own interpreter imports it.
    for name in CHILD_PACKAGES:
        __import__(name)
        host = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules[name].__file__)))
        assert seen["found"][name] == host
    # No `.pth` file ran: the installation's finders and hooks are not in the sandbox.
    assert not [m for m in seen["modules"] if m.startswith("__editable__") or m == "sitecustomize"]


#: Run in the child (`-c`): imports all the child's modules and reports which packages it loaded.
LOADED = textwrap.dedent("""
    import sys
    from flowdata import framing
    read_fd, write_fd = framing.claim_stdio()
    import sandbox.child, sandbox.intrinsics, sandbox.loader, sandbox.testing  # noqa: E401
    framing.send(write_fd, {"modules": sorted(sys.modules)})
""")


def test_the_child_loads_no_host_code():
    """The child imports the value contract (`flowdata`), never the trusted host (`flowrt`) nor
    the compiler (`flowc`): what runs untrusted code has none of their code in its process."""
    child = Child.start(argv_tail=["-c", LOADED])
    try:
        modules = child.recv(timeout=30)["modules"]
    finally:
        child.kill()
    packages = {name.split(".")[0] for name in modules}
    assert {"sandbox", "flowdata"} <= packages
    assert "flowdata.codec" in modules and "flowdata.canonical" in modules
    assert not packages & {"flowrt", "flowc"}, sorted(m for m in modules if m.split(".")[0] in ("flowrt", "flowc"))


def test_the_real_child_is_started_with_the_policy_flags():
    assert "-S" in CHILD_PYTHON_FLAGS and "-s" in CHILD_PYTHON_FLAGS and "-B" in CHILD_PYTHON_FLAGS
    child = Child.start()
    try:
        assert child.argv[1:1 + len(CHILD_PYTHON_FLAGS)] == list(CHILD_PYTHON_FLAGS)
        after_flags = 1 + len(CHILD_PYTHON_FLAGS)
        # then the module, and the lockdown's arguments (the seccomp filter the host built)
        assert child.argv[after_flags:after_flags + 2] == ["-m", "sandbox.child"]
    finally:
        child.kill()


def test_the_child_path_leaves_the_user_site_out(monkeypatch, tmp_path):
    user_site = tmp_path / "user-site"
    other = tmp_path / "venv-site"
    user_site.mkdir()
    other.mkdir()
    folders = {CHILD_PACKAGES[0]: str(user_site), CHILD_PACKAGES[1]: str(other)}
    monkeypatch.setattr(launch, "_CHILD_PATH", None)
    monkeypatch.setattr(launch, "_package_folder", folders.get)
    monkeypatch.setattr(launch, "_user_site", lambda: os.path.realpath(user_site))
    assert launch.child_path() == os.pathsep.join([launch.SOURCE_ROOT, str(other)])


def test_a_package_folder_is_the_entry_it_is_imported_from():
    import orjson

    assert launch._package_folder("orjson") == os.path.dirname(os.path.dirname(orjson.__file__))
    assert launch._package_folder("no_such_package_here") is None


def copy_child_sources(into: Path) -> None:
    for source in launch._child_sources():  # (of this checkout: SOURCE_ROOT not yet changed)
        target = into / Path(source).relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(source).read_bytes())


def test_the_host_writes_the_bytecode_the_child_cannot(monkeypatch, tmp_path):
    import importlib.util

    copy_child_sources(tmp_path)
    monkeypatch.setattr(launch, "SOURCE_ROOT", str(tmp_path))
    monkeypatch.setattr(launch, "_COMPILED", False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    launch.compile_for_child()
    assert not list(tmp_path.rglob("*.pyc"))  # PYTHONDONTWRITEBYTECODE / -B: nothing is written
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    launch.compile_for_child()
    assert not list(tmp_path.rglob("*.pyc"))  # elsewhere than the child looks: nothing is written
    monkeypatch.setattr(sys, "pycache_prefix", None)
    launch.compile_for_child()
    caches = {}
    sources = [Path(p) for p in launch._child_sources()]
    relative = {p.relative_to(tmp_path).as_posix() for p in sources}
    assert relative >= {"sandbox/child.py", "sandbox/loader.py", "flowdata/codec.py", "flowdata/framing.py"}
    assert not [p for p in relative if not p.startswith(("sandbox/", "flowdata/"))]  # nothing of the host
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.exists(), cached
        # What the import system checks: the source's mtime and size in the header.
        header = cached.read_bytes()[:16]
        stat = source.stat()
        assert header[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
        assert int.from_bytes(header[12:16], "little") == stat.st_size
        caches[cached] = cached.stat().st_mtime_ns
    # Once per process; and a fresh cache is left alone, a stale one written again.
    stale = tmp_path / "sandbox" / "runtime.py"
    stale.write_text(stale.read_text() + "\n# changed\n")
    launch.compile_for_child()
    assert {c: c.stat().st_mtime_ns for c in caches} == caches
    monkeypatch.setattr(launch, "_COMPILED", False)
    launch.compile_for_child()
    rewritten = {c for c in caches if c.stat().st_mtime_ns != caches[c]}
    assert rewritten == {Path(importlib.util.cache_from_source(str(stale)))}


# -- `flow run` without click ------------------------------------------------------------------

def test_only_plain_run_arguments_are_read_without_click():
    assert plain_run(["run", "a.flow"]) == {"file": "a.flow", "color": "auto"}
    assert plain_run(["--color=never", "run", "--input", "-", "a.flow", "--allow", "--runs=r", "--entry", "go",
                      "--checkpoints", "3", "--redactable", "--color", "always"]) == {
        "file": "a.flow", "input_text": "-", "allow": True, "runs_dir": "r", "entry": "go", "checkpoints": "3",
        "redactable": True, "color": "always"}
    assert plain_run(["--color", "never", "run", "a.flow"]) == {"file": "a.flow", "color": "never"}
    for args in (["run"], [], ["check", "a.flow"], ["run", "a.flow", "b.flow"], ["run", "-h"], ["run", "a", "--help"],
                 ["run", "--", "a"], ["run", "-"], ["run", ""], ["run", "a", "--allow", "--allow"],
                 ["run", "a", "--entry"], ["run", "a", "--entry", "x", "--entry", "y"], ["run", "a", "--entry="],
                 ["run", "a", "--input", "--allow"], ["run", "a", "--color", "red"], ["run", "a", "--bogus"],
                 ["run", "a", "--allow=yes"], ["--version"], ["--color", "run", "a"], ["--help", "run", "a"]):
        assert plain_run(args) is None, args


#: The click application alone, under the name click gives `python -m flowrt.cli`.
CLICK_ONLY = "from flowrt.commands import main; main(prog_name='python -m flowrt.cli')"


def flow(args: list[str], *, click_only: bool, cwd: Path, stdin: str | None = None) -> tuple[int, str, str]:
    command = [sys.executable, "-c", CLICK_ONLY] if click_only else [sys.executable, "-m", "flowrt.cli"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE") and k not in ("FLOW_RUNS", "FLOW_STORE")}
    done = subprocess.run(command + args, cwd=cwd, capture_output=True, text=True, env=env, timeout=120,
                          input=stdin)
    unnamed = re.compile(r"run-\d{8}-\d{6}-[0-9a-f]{6}")
    return done.returncode, unnamed.sub("RUN", done.stdout), unnamed.sub("RUN", done.stderr)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("programs")
    (folder / "hello.flow").write_text('pub flow main() -> Text = "hello, world"\n', encoding="utf-8")
    (folder / "plus.flow").write_text("pub flow main(n: Int) -> Int = n + 1\n", encoding="utf-8")
    (folder / "divide.flow").write_bytes((PROGRAMS / "divide.flow").read_bytes())
    (folder / "bad.flow").write_text('pub flow main() -> Int = "text"\n', encoding="utf-8")
    return folder


RUN_CASES = [
    (["run", "hello.flow"], None),
    (["run", "hello.flow", "--runs", "elsewhere", "--checkpoints", "off"], None),
    (["run", "--runs=elsewhere", "hello.flow", "--checkpoints=2", "--redactable"], None),
    (["run", "hello.flow", "--store", "elsewhere"], None),
    (["run", "hello.flow", "--store=elsewhere", "--runs", "other"], None),
    (["run", "plus.flow", "--input", '{"n": 41}'], None),
    (["run", "plus.flow", "--input", "-"], '{"n": 1}'),
    (["run", "plus.flow", "--input", "[1]"], None),
    (["run", "plus.flow"], None),
    (["run", "divide.flow", "--input", '{"a": 1, "b": 0}'], None),
    (["run", "hello.flow", "--entry", "nope"], None),
    (["--color", "always", "run", "bad.flow"], None),
    (["run", "bad.flow", "--color=never"], None),
    (["--color=never", "run", "bad.flow", "--color", "always"], None),
    (["run", "hello.flow", "--checkpoints", "sometimes"], None),
    (["run", "missing.flow"], None),
    (["run"], None),
    (["run", "--help"], None),
    (["run", "hello.flow", "plus.flow"], None),
    (["run", "hello.flow", "--allow", "--allow"], None),
    (["run", "hello.flow", "--entry"], None),
    (["run", "hello.flow", "--bogus"], None),
]


@pytest.mark.parametrize("args,stdin", RUN_CASES, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_a_plain_run_says_what_click_says(programs, args, stdin):
    assert flow(args, click_only=False, cwd=programs, stdin=stdin) == flow(args, click_only=True, cwd=programs,
                                                                             stdin=stdin)


#: `flow run` as the program, reporting what it imported and when the child was started.
WATCHED = textwrap.dedent("""
    import atexit, runpy, sys
    import flowrt.sandbox_process
    started = []
    original = flowrt.sandbox_process.Child.start_soon.__func__
    def start_soon(cls, *args, **kwargs):
        started.append(sorted(m for m in ("flowrt.run", "flowc.frontend", "click") if m in sys.modules))
        return original(cls, *args, **kwargs)
    flowrt.sandbox_process.Child.start_soon = classmethod(start_soon)
    atexit.register(lambda: sys.stderr.write(repr((started, "click" in sys.modules)) + "\\n"))
    sys.argv = ["flow"] + sys.argv[1:]
    runpy.run_module("flowrt.cli", run_name="__main__")
""")


def test_a_plain_run_starts_the_child_first_and_never_imports_click(programs):
    done = subprocess.run([sys.executable, "-c", WATCHED, "run", "hello.flow", "--runs", "watched"], cwd=programs,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '"hello, world"\n'
    assert done.stderr.strip().splitlines()[-1] == repr(([[]], False))


def test_run_takes_a_child_already_started(tmp_path, monkeypatch):
    from flowrt.run import run

    program = tmp_path / "hello.flow"
    program.write_text('pub flow main() -> Text = "hello, world"\n', encoding="utf-8")
    child = Child.start()

    def no_second(*args, **kwargs):
        raise AssertionError("run() started a child of its own")

    monkeypatch.setattr(Child, "start", no_second)
    outcome = run(str(program), runs_dir=str(tmp_path / "runs"), child=child)
    assert outcome.exit_code == 0 and outcome.output == b'"hello, world"'
    # the run owned it: its group was killed as the run ended, and it is reaped off the run's path
    assert child not in launch._LIVE
    assert child_reaper.wait_for_reaps(10) and child._closed
    monkeypatch.undo()
    child = Child.start()
    outcome = run(str(tmp_path / "missing.flow"), runs_dir=str(tmp_path / "runs"), child=child)
    assert outcome.exit_code == 2 and child._closed  # refused: the child is killed, nothing recorded


def test_a_child_started_on_a_thread_outlives_its_start_and_is_let_go_when_reaped():
    # The parent-death signal follows the thread that forked: the starting thread must live as
    # long as the child, and end once it is reaped.
    starting = Child.start_soon()
    child = starting.child()
    try:
        # Alive and waiting for its program (a child the signal had killed would be ChildDied).
        with pytest.raises(ChildTimeout):
            child.recv(timeout=2)
        assert not child._exited() and starting._thread.is_alive()
    finally:
        child.kill()
    starting._thread.join(timeout=10)
    assert not starting._thread.is_alive()
    assert child.returncode is not None


def test_a_child_whose_start_fails_raises_where_it_is_awaited(monkeypatch):
    def refused(*args, **kwargs):
        raise OSError("no fork here")

    monkeypatch.setattr(Child, "start", classmethod(refused))
    starting = Child.start_soon()
    with pytest.raises(OSError, match="no fork here"):
        starting.child()
    starting.kill()  # nothing was started: nothing to kill, and no wait
    starting._thread.join(timeout=10)
    assert not starting._thread.is_alive()
