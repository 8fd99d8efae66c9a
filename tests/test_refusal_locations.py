"""A refused run points at the real place: the flow.toml entry at fault (found by its key's line,
since tomllib gives no positions), a TOML or JSON syntax error's position, or nothing at all when
the problem has no place (never a made-up `flow.toml:1:1` or `<input>:1:1`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowc.diagnostics.places import toml_key_location

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"


def flow(*args: str, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=120)


def _program(tmp_path: Path, manifest: str) -> Path:
    folder = tmp_path / "prog"
    folder.mkdir()
    (folder / "main.flow").write_text(
        "@tool pub flow echo(text: Text) -> Text\n\npub flow main() -> Text !tool = echo(\"hi\")\n")
    (folder / "flow.toml").write_text(manifest)
    return folder / "main.flow"


def test_a_failing_command_points_at_its_entry(tmp_path):
    main = _program(tmp_path, '# bindings\n\n[tools]\n"other" = { pending = true }\n'
                              '"main" = { command = ["/nonexistent/tool"] }\n')
    done = flow("run", str(main), "--allow", "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stderr
    assert "binding-failed" in done.stderr
    assert "flow.toml:5:1" in done.stderr, done.stderr
    assert '5 | "main" = { command = ["/nonexistent/tool"] }' in done.stderr  # the snippet is shown


def test_a_malformed_entry_points_at_its_line(tmp_path):
    main = _program(tmp_path, '[tools]\n\n"main" = { command = "not a list" }\n')
    done = flow("run", str(main), "--allow", "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stderr
    assert "tools.main.command must be a list of strings" in done.stderr
    assert "flow.toml:3:1" in done.stderr, done.stderr


def test_invalid_toml_points_at_the_error(tmp_path):
    main = _program(tmp_path, '[tools]\n"main" = { command = ["x"]\n')
    done = flow("run", str(main), "--allow", "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2, done.stderr
    assert "flow.toml:1:1" not in done.stderr
    assert "flow.toml:2:" in done.stderr, done.stderr


def test_an_unbound_tool_points_at_the_tools_table_or_nowhere(tmp_path):
    main = _program(tmp_path, '[pins]\n\n[tools]\n"elsewhere" = { pending = true }\n')
    done = flow("run", str(main), "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2 and "binding-missing" in done.stderr, done.stderr
    assert "flow.toml:3:1" in done.stderr, done.stderr
    (main.parent / "flow.toml").write_text("")
    done = flow("run", str(main), "--runs", str(tmp_path / "runs"))
    assert done.returncode == 2 and "binding-missing" in done.stderr, done.stderr
    assert "flow.toml:1:1" not in done.stderr and "-->" not in done.stderr


def test_input_that_is_not_json_points_at_the_position(tmp_path):
    done = flow("run", str(PROGRAMS / "arith.flow"), "--input", '{"xs": [1,\n  2,, 3]}', "--runs", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "<input>:2:5" in done.stderr, done.stderr
    assert "2 |   2,, 3]}" in done.stderr


def test_input_whose_data_is_wrong_has_no_made_up_position(tmp_path):
    for text in ("[1]", '{"xs": [1, "two"]}', '{"xs": [], "extra": 1}', "{}"):
        done = flow("run", str(PROGRAMS / "arith.flow"), "--input", text, "--runs", str(tmp_path))
        assert done.returncode == 2 and "input-invalid" in done.stderr, (text, done.stderr)
        assert "<input>:1:1" not in done.stderr and "-->" not in done.stderr, (text, done.stderr)


def test_the_host_api_sees_the_same_location(tmp_path):
    import flowrt

    main = _program(tmp_path, '[pins]\n\n[tools]\n"elsewhere" = { pending = true }\n')
    with pytest.raises(flowrt.Refused) as refused:
        flowrt.Host({}, runs_dir=str(tmp_path / "runs")).run(str(main), {})
    [refusal] = refused.value.diagnostics
    assert refusal.code == "binding-missing"
    assert (refusal.location.file, refusal.location.line) == (str(main.parent / "flow.toml"), 3)


_keys = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e, blacklist_characters='"\\#'),
                min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(before=st.lists(_keys, max_size=4, unique=True), key=_keys, after=st.lists(_keys, max_size=4, unique=True),
       blank=st.integers(0, 3), style=st.sampled_from(["inline", "table", "dotted"]))
def test_a_key_is_found_on_the_line_that_defines_it(before, key, after, blank, style):
    """Whatever the other entries, the line found for a key is the one that tomllib reads it from."""
    import tomllib

    first = [k for k in before if k != key]
    second = [k for k in after if k != key and k not in first]
    lines = ["# flow.toml", "[tools]"] + [f'"{k}" = {{ pending = true }}' for k in first]
    lines += [""] * blank
    if style == "inline":
        lines.append(f'"{key}" = {{ pending = true }}')
    elif style == "table":
        lines += [f'[tools."{key}"]', "pending = true"]
    else:
        lines = ["# flow.toml", f'tools."{key}" = {{ pending = true }}']
    number = len(lines) - (1 if style == "table" else 0)
    lines += ["[more]"] + [f'"{k}" = 1' for k in second]
    text = "\n".join(lines) + "\n"
    assert key in tomllib.loads(text)["tools"]
    found = toml_key_location("flow.toml", text, "tools", key)
    assert found is not None and found.line == number, (text, found)
