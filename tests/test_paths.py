"""Files outside the program (issue 13, items 11 and 15): what `flow check` accepts runs, modules
stay inside the program root and their pinned repositories, links that leave are refused without
quoting what they point to, pinned commits are verified, and `flow mcp --root` serves only its root.
Through the real `flow` entry point and a real MCP client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flowc.disk import content_hash
from tests.test_mcp import call, scenario, session

SECRET = "root:$6$NEVER-SHOWN$abc:19000:0:99999:7:::"


def flow(*args: str, cwd: Path, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env, input=stdin if stdin is not None else "")


def program(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def secret_outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    # A parse error in either file would quote its first line.
    (outside / "shadow").write_text(SECRET + "\n")
    (outside / "m.flow").write_text(SECRET + "\n")
    return outside


def test_what_checks_runs_for_any_module_path(tmp_path):
    """Item 11: module identities with `_`, `-` or nesting that collided or started with `_`
    all run, and a `use` above the root is refused by check (so run never starts on it)."""
    program(tmp_path, {
        "a_b.flow": "pub flow f() -> Int = 1\n",
        "a/b.flow": "pub flow f() -> Int = 20\n",
        "_u.flow": "pub flow f() -> Int = 300\n",
        "x-y/z.flow": "pub flow f() -> Int = 4000\n",
        "9.flow": "pub flow f() -> Int = 50000\n",
        "main.flow": 'use "./a_b"\nuse "./a/b"\nuse "./_u" as u\nuse "./x-y/z"\nuse "./9" as nine\n'
                     "pub flow main() -> Int = a_b.f() + b.f() + u.f() + z.f() + nine.f()\n",
    })
    assert flow("check", "main.flow", cwd=tmp_path).returncode == 0
    done = flow("run", "--runs", "runs", "main.flow", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "54321\n"), done.stderr


def test_use_above_the_root_is_refused_by_check_and_run(tmp_path):
    program(tmp_path, {"lib/util.flow": 'pub flow hi() -> Text = "hi"\n',
                       "app/main.flow": 'use "../lib/util"\npub flow main() -> Text = util.hi()\n'})
    checked = flow("check", "app/main.flow", cwd=tmp_path)
    assert checked.returncode == 2
    assert "error[module-outside-root]: `../lib/util` leaves the program root" in checked.stderr
    assert "app/main.flow:1:1" in checked.stderr
    ran = flow("run", "--runs", "runs", "app/main.flow", cwd=tmp_path)
    assert ran.returncode == 2 and "module-outside-root" in ran.stderr
    assert not (tmp_path / "runs").exists()  # refused before Start: nothing recorded


ESCAPES = [
    'use "./sub/../../outside/m"',
    'use "../outside/m"',
    'use "./../../../../../../etc/passwd"',
    'use "/etc/passwd"',
    'use "acme@1/../../outside/m"',
    'use "./evil"',
    'use "./linked/m"',
]


def test_escapes_are_refused_and_never_quote_the_target(tmp_path):
    """Item 15: `..`, absolute paths, a repository path that climbs out, a module that is a link
    to a file outside, a directory that is a link outside: each refused with a location."""
    outside = secret_outside(tmp_path)
    prog = tmp_path / "prog"
    prog.mkdir()
    os.symlink(outside / "shadow", prog / "evil.flow")
    os.symlink(outside, prog / "linked")
    (prog / "vendor").mkdir()
    (prog / "flow.toml").write_text(f'[pins]\n"acme@1" = {{ path = "vendor", commit = "{content_hash(str(prog / "vendor"))}" }}\n')
    for number, line in enumerate(ESCAPES):
        (prog / f"main{number}.flow").write_text(f"{line}\npub flow main() -> Int = 1\n")
        for command in (["check", f"main{number}.flow"], ["check", "--json", f"main{number}.flow"],
                        ["run", "--runs", "runs", f"main{number}.flow"]):
            done = flow(*command, cwd=prog)
            assert done.returncode == 2, (line, done.stdout, done.stderr)
            assert "NEVER-SHOWN" not in done.stdout + done.stderr, line
            assert "Traceback" not in done.stderr
        report = json.loads(flow("check", "--json", f"main{number}.flow", cwd=prog).stdout)
        [diagnostic] = report["diagnostics"]
        assert diagnostic["code"] in ("module-outside-root", "module-not-found"), (line, diagnostic)
        assert diagnostic["location"]["file"] == f"main{number}.flow" and diagnostic["location"]["line"] == 1
    assert not (prog / "runs").exists()


def test_a_link_inside_the_root_is_followed(tmp_path):
    program(tmp_path, {"real/m.flow": "pub flow f() -> Int = 7\n",
                       "main.flow": 'use "./alias/m"\npub flow main() -> Int = m.f()\n'})
    os.symlink(tmp_path / "real", tmp_path / "alias")
    done = flow("run", "--runs", "runs", "main.flow", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "7\n"), done.stderr


def test_a_fifo_module_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.flow")
    (tmp_path / "main.flow").write_text('use "./pipe"\npub flow main() -> Int = 1\n')
    done = flow("check", "main.flow", cwd=tmp_path)
    assert done.returncode == 2 and "is not a regular file" in done.stderr


def test_a_linked_flow_toml_is_not_read(tmp_path):
    outside = secret_outside(tmp_path)
    prog = tmp_path / "prog"
    prog.mkdir()
    os.symlink(outside / "shadow", prog / "flow.toml")
    (prog / "main.flow").write_text("pub flow main() -> Int = 1\n")
    done = flow("check", "main.flow", cwd=prog)
    assert done.returncode == 2 and "module-outside-root" in done.stderr and "NEVER-SHOWN" not in done.stderr


def _git(directory: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_SYSTEM=os.devnull)
    return subprocess.run(["git", "-C", str(directory), *args], check=True, capture_output=True, text=True,
                          env=env, timeout=30).stdout.strip()


def pinned_program(tmp_path: Path, commit: str) -> Path:
    prog = tmp_path / "prog"
    program(prog, {"main.flow": 'use "acme@1.2/text"\npub flow main() -> Text = text.shout("hi")\n',
                   "flow.toml": f'[pins]\n"acme@1.2" = {{ path = "../acme", commit = "{commit}" }}\n'})
    return prog


def git_repository(tmp_path: Path) -> tuple[Path, str]:
    acme = tmp_path / "acme"
    program(acme, {"text.flow": 'pub flow shout(t: Text) -> Text = t ++ "!"\n'})
    _git(acme, "init", "-q")
    _git(acme, "add", ".")
    _git(acme, "commit", "-q", "-m", "one")
    return acme, _git(acme, "rev-parse", "HEAD")


def test_a_pinned_git_commit_is_verified(tmp_path):
    acme, head = git_repository(tmp_path)
    prog = pinned_program(tmp_path, head[:12])
    done = flow("run", "--runs", "runs", "main.flow", cwd=prog)
    assert (done.returncode, done.stdout) == (0, '"hi!"\n'), done.stderr
    # Uncommitted changes: the directory no longer holds the commit.
    (acme / "text.flow").write_text('pub flow shout(t: Text) -> Text = t ++ "?"\n')
    done = flow("run", "--runs", "runs", "main.flow", cwd=prog)
    assert done.returncode == 2 and "pin-unverified" in done.stderr and "uncommitted changes" in done.stderr


def test_a_pinned_commit_that_does_not_match_is_refused(tmp_path):
    acme, head = git_repository(tmp_path)
    prog = pinned_program(tmp_path, "0123abc")
    for command in (["check", "main.flow"], ["run", "--runs", "runs", "main.flow"]):
        done = flow(*command, cwd=prog)
        assert done.returncode == 2, done.stderr
        assert "error[pin-unverified]: `acme@1.2` cannot be used: the checkout `../acme` is at commit " \
               f"{head}, not the pinned `0123abc`" in done.stderr
        assert "main.flow:1:1" in done.stderr
    assert not (prog / "runs").exists()


def test_a_plain_directory_is_pinned_by_its_content_hash(tmp_path):
    acme = tmp_path / "acme"
    program(acme, {"text.flow": 'pub flow shout(t: Text) -> Text = t ++ "!"\n'})
    prog = pinned_program(tmp_path, "0123abc")
    done = flow("check", "main.flow", cwd=prog)
    expected = content_hash(str(acme))
    assert done.returncode == 2 and "is not the top of a git checkout" in done.stderr and expected in done.stderr
    prog = pinned_program(tmp_path, expected)
    done = flow("run", "--runs", "runs", "main.flow", cwd=prog)
    assert (done.returncode, done.stdout) == (0, '"hi!"\n'), done.stderr
    (acme / "text.flow").write_text('pub flow shout(t: Text) -> Text = t ++ "?"\n')
    done = flow("check", "main.flow", cwd=prog)
    assert done.returncode == 2 and "hash to" in done.stderr
    # A pin without a commit cannot be verified either.
    (prog / "flow.toml").write_text('[pins]\n"acme@1.2" = { path = "../acme" }\n')
    done = flow("check", "main.flow", cwd=prog)
    assert done.returncode == 2 and "names no commit" in done.stderr


@scenario
async def test_mcp_serves_only_its_root(tmp_path):
    outside = secret_outside(tmp_path)
    served = tmp_path / "served"
    program(served, {"main.flow": "pub flow main() -> Int = 5\n",
                     "escape.flow": 'use "../outside/m"\npub flow main() -> Int = 1\n',
                     "flow.toml": f'[pins]\n"o@1" = {{ path = "../outside", commit = "{content_hash(str(outside))}" }}\n',
                     "pinned.flow": 'use "o@1/m"\npub flow main() -> Int = 1\n'})
    os.symlink(outside / "m.flow", served / "link.flow")
    async with session(tmp_path / "runs", root=str(served)) as client:
        ok = await call(client, "run", {"file": "main.flow"})
        assert not ok.is_error and ok.structured_content["output"] == 5
        assert (await call(client, "check", {"paths": [str(served / "main.flow")]})).structured_content["ok"]
        for name, arguments in [("check", {"paths": [str(outside / "m.flow")]}),
                                ("check", {"paths": ["../outside/m.flow"]}),
                                ("check", {"paths": ["link.flow"]}),
                                ("check", {"paths": [str(outside)]}),
                                ("run", {"file": str(outside / "m.flow")}),
                                ("run", {"file": "link.flow"})]:
            refused = await call(client, name, arguments)
            assert refused.is_error, arguments
            text = json.dumps([c.model_dump() for c in refused.content])
            assert "outside the served root" in text and "NEVER-SHOWN" not in text
        for file in ("escape.flow", "pinned.flow"):
            refused = (await call(client, "run", {"file": file})).structured_content
            assert refused["exitCode"] == 2 and "NEVER-SHOWN" not in json.dumps(refused)
            checked = (await call(client, "check", {"paths": [file]})).structured_content
            assert not checked["ok"] and "NEVER-SHOWN" not in json.dumps(checked)


from hypothesis import given, settings
from hypothesis import strategies as st

from flowc.lower import module_key

_SEGMENT = st.text(alphabet=st.sampled_from("ab1_-.@éZ"), min_size=1, max_size=4)
_IDENTITY = st.one_of(st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join),
                      st.lists(_SEGMENT, min_size=1, max_size=2).map(lambda s: "std@v1/" + "/".join(s)))


@settings(max_examples=400, deadline=None)
@given(st.lists(_IDENTITY, min_size=2, max_size=6, unique=True))
def test_module_keys_are_injective_and_loadable(identities):
    """Item 11's cause: keys collided (`a_b`, `a/b`) or started with `_` after `m_`."""
    keys = [module_key(i) for i in identities]
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert key.startswith("m_") and key[2:].isidentifier() and not key[2:].startswith("_")
