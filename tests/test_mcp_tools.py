"""MCP servers as Tools (flowrt/mcp_tools.py, flowrt/mcp_import.py) through the real `flow` CLI:
a server written with the SDK (tests/mcp_sample_server.py) and a published one from PyPI
(`mcp-server-time`), called live, recorded, and replayed Matched once the server is gone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "mcp_sample_server.py"
PROGRAM = ROOT / "tests" / "programs" / "mcp"


def flow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180)


def facts(runs: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in (runs / run_id / "history.jsonl").read_text().splitlines()]


def only_run(runs: Path) -> str:
    (run_id,) = [p.name for p in runs.iterdir()]
    return run_id


def sample_program(tmp_path: Path) -> Path:
    """The program of tests/programs/mcp with its own copy of the server, so the test can remove it."""
    work = tmp_path / "work"
    shutil.copytree(PROGRAM, work)
    shutil.copy(SAMPLE, work / "server.py")
    (work / "flow.toml").write_text('[tools]\n"shop" = { mcp = ["%s", "server.py"] }\n' % sys.executable)
    return work


def test_a_program_calls_an_sdk_server_and_replays_matched_without_it(tmp_path):
    work = sample_program(tmp_path)
    runs = tmp_path / "runs"
    log = tmp_path / "calls.log"
    env_file = work / "flow.toml"
    env_file.write_text('[tools]\n"shop" = { mcp = ["/usr/bin/env", "MCP_SAMPLE_LOG=%s", "%s", "server.py"] }\n'
                        % (log, sys.executable))
    done = flow("run", "main.flow", "--allow", "--runs", str(runs), "--input", '{"item": "kettle"}', cwd=work)
    assert done.returncode == 0, done.stderr
    # quote: structured record; shout: a wrapped primitive with an Option left out; tally: text
    # content parsed as JSON for an Int; refuse: isError, Failed with the server's text.
    assert json.loads(done.stdout) == "kettle x3: 750 cents; KETTLE KETTLE; 6; failed: " \
                                      "Error executing tool refuse: refused: closed"
    assert log.read_text().split() == ["quote", "shout", "tally", "refuse"]
    run_id = only_run(runs)
    recorded = facts(runs, run_id)
    calls = [f for f in recorded if f["kind"] == "Call"]
    assert [c["tool"] for c in calls] == ["shop.quote", "shop.shout", "shop.tally", "shop.refuse"]
    replies = [f for f in recorded if f["kind"] == "Reply"]
    assert len(replies) == 4
    (work / "server.py").unlink()
    replayed = flow("replay", run_id, "--runs", str(runs), cwd=work)
    assert replayed.returncode == 0, replayed.stderr
    assert "Matched" in replayed.stdout
    assert log.read_text().split() == ["quote", "shout", "tally", "refuse"]  # replay called nothing


def test_a_declaration_the_server_does_not_take_is_refused_before_the_run(tmp_path):
    work = sample_program(tmp_path)
    (work / "shop.flow").write_text((work / "shop.flow").read_text().replace(
        "quote(item: Text, quantity: Int)", "quote(item: Text, quantity: Text)"))
    (work / "main.flow").write_text((work / "main.flow").read_text().replace("shop.quote(item, 3)",
                                                                             'shop.quote(item, "3")'))
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--runs", str(runs), "--input", '{"item": "kettle"}', cwd=work)
    assert done.returncode == 2, done.stderr
    assert "`quantity`: declared Text, the server's schema says integer" in done.stderr
    assert not runs.exists() or not any(runs.iterdir())


def test_a_server_that_cannot_start_refuses_the_binding(tmp_path):
    work = sample_program(tmp_path)
    (work / "flow.toml").write_text('[tools]\n"shop" = { mcp = ["%s", "-c", "import sys; sys.exit(3)"] }\n'
                                    % sys.executable)
    done = flow("run", "main.flow", "--allow", "--runs", str(tmp_path / "runs"), "--input", '{"item": "k"}', cwd=work)
    assert done.returncode == 2
    assert "cannot start the MCP server" in done.stderr


def test_a_server_that_exits_with_a_call_out_is_unknown(tmp_path):
    work = sample_program(tmp_path)
    (work / "server.py").write_text(SAMPLE.read_text().replace(
        '    _log("tally")\n', '    _log("tally")\n    os._exit(9)\n'))
    runs = tmp_path / "runs"
    (work / "main.flow").write_text('use "./shop"\n\npub flow main(item: Text) -> Text !tool = '
                                    'match shop.tally([1]) { Ok(n) => "${n}", Err(Unknown(why)) => match shop.quote(item, 1) '
                                    '{ Err(NotRun(_)) => "unknown, then not run", _ => "unknown, then other" }, '
                                    'Err(_) => "other" }\n')
    done = flow("run", "main.flow", "--allow", "--runs", str(runs), "--input", '{"item": "k"}', cwd=work)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "unknown, then not run"


def test_import_mcp_writes_a_module_that_checks_and_runs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SAMPLE, work / "server.py")
    done = flow("tools", "import-mcp", "--out", "shop.flow", "--", sys.executable, "server.py", cwd=work)
    assert done.returncode == 0, done.stderr
    text = (work / "shop.flow").read_text()
    assert "pub type Quote { pub item: Text, pub quantity: Int, pub cents: Int, pub in_stock: Bool }" in text
    assert "@tool pub flow quote(item: Text, quantity: Int) -> Result<Quote, Text>" in text
    assert "@tool pub flow shout(text: Text, times: Option<Int>) -> Result<Text, Text>" in text
    assert "@tool pub flow tally(numbers: List<Int>) -> Result<Text, Text>" in text
    (work / "flow.toml").write_text(done.stdout)
    assert '"shop" = { mcp = [' in done.stdout
    assert "@tool pub flow label_Of(type_: Text) -> Result<Text, Text>" in text  # renamed, mapped back
    (work / "main.flow").write_text('use "./shop"\n\npub flow main() -> Text !tool = '
                                    'match shop.tally([4, 5]) { Ok(t) => "${t} ${shop.label_Of("box")}", Err(_) => "no" }\n')
    ran = flow("run", "main.flow", "--allow", "--runs", str(tmp_path / "runs"), cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == '9 {"Ok":"<box>"}'
    again = flow("tools", "import-mcp", "--out", "shop.flow", "--", sys.executable, "server.py", cwd=work)
    assert again.returncode == 2 and "exists" in again.stderr


def test_import_mcp_needs_a_server(tmp_path):
    done = flow("tools", "import-mcp", "--out", "x.flow", cwd=tmp_path)
    assert done.returncode == 2
    assert not (tmp_path / "x.flow").exists()


TIME_MAIN = """\
use "./time"

pub flow main(zone: Text) -> Text !tool = match time.get_current_time(zone) {
    Ok(now) => "${now.timezone} ${now.day_of_week} ${now.datetime}",
    Err(Failed(why)) => "failed: ${why}",
    Err(_) => "no answer",
}
"""


def test_the_published_time_server_imported_called_live_and_replayed(tmp_path):
    # Installed by the test extra from PyPI: a missing server fails the test, never skips it.
    beside = Path(sys.executable).parent / "mcp-server-time"
    server = str(beside) if beside.exists() else shutil.which("mcp-server-time")
    assert server, "mcp-server-time is not installed: pip install -e '.[test]'"
    work = tmp_path / "work"
    work.mkdir()
    imported = flow("tools", "import-mcp", "--out", "time.flow", "--", server, cwd=work)
    assert imported.returncode == 0, imported.stderr
    text = (work / "time.flow").read_text()
    assert "@tool pub flow get_current_time(timezone: Text) -> Result<TimeResult, Text>" in text
    assert "pub type TimeResult { pub timezone: Text, pub datetime: Text, pub day_of_week: Text, pub is_dst: Bool }" \
        in text
    (work / "flow.toml").write_text(imported.stdout)
    (work / "main.flow").write_text(TIME_MAIN)
    runs = tmp_path / "runs"
    done = flow("run", "main.flow", "--allow", "--runs", str(runs), "--input", '{"zone": "Europe/Paris"}', cwd=work)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    zone, day, stamp = answer.split(" ")
    assert zone == "Europe/Paris"
    assert day in {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
    assert stamp[:2] == "20" and stamp[10] == "T" and stamp[-6:] in {"+01:00", "+02:00"}
    bad = flow("run", "main.flow", "--allow", "--runs", str(runs), "--input", '{"zone": "Nowhere/Else"}', cwd=work)
    assert bad.returncode == 0, bad.stderr
    assert json.loads(bad.stdout).startswith("failed: ") and "Nowhere/Else" in json.loads(bad.stdout)
    first = sorted(p.name for p in runs.iterdir())
    # The server gone: flow.toml now names a command that does not exist; replay needs none.
    (work / "flow.toml").write_text('[tools]\n"time" = { mcp = ["/nonexistent/mcp-server-time"] }\n')
    for run_id in first:
        replayed = flow("replay", run_id, "--runs", str(runs), cwd=work)
        assert replayed.returncode == 0, replayed.stderr
        assert "Matched" in replayed.stdout


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streamable_http_server_imported_and_called(tmp_path):
    import socket
    import time

    port = free_port()
    server = subprocess.Popen([sys.executable, str(SAMPLE), "--http", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # up to 20 s for it to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        work = tmp_path / "work"
        work.mkdir()
        imported = flow("tools", "import-mcp", "--out", "shop.flow", "--url", url, cwd=work)
        assert imported.returncode == 0, imported.stderr
        assert f'"shop" = {{ mcp_url = "{url}" }}' in imported.stdout
        (work / "flow.toml").write_text(imported.stdout)
        (work / "main.flow").write_text('use "./shop"\n\npub flow main() -> Text !tool = match shop.quote("pot", 2) '
                                        '{ Ok(q) => "${q.cents}", Err(_) => "no" }\n')
        runs = tmp_path / "runs"
        done = flow("run", "main.flow", "--runs", str(runs), cwd=work)  # a URL starts nothing: no approval
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == "500"
    finally:
        server.kill()
        server.wait(10)
    replayed = flow("replay", only_run(runs), "--runs", str(runs), cwd=work)
    assert replayed.returncode == 0 and "Matched" in replayed.stdout


# ---- import-mcp on schemas of any shape: the module it writes always checks --------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_names = st.sampled_from(["a", "id", "match", "type", "x-y", "Value", "2nd", "ok_1", "use", "result", "Text"])
_scalars = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
                            {"type": "null"}, {}, {"type": ["string", "null"]}, {"enum": ["A", "B"], "type": "string"},
                            {"enum": ["lower", "B"], "type": "string"}, {"type": ["integer", "string"]}])
_schemas = st.recursive(_scalars, lambda inner: st.one_of(
    st.builds(lambda i: {"type": "array", "items": i}, inner),
    st.builds(lambda props, title: {"type": "object", "properties": props, "title": title,
                                    "required": sorted(props)[:1]},
              st.dictionaries(_names, inner, min_size=1, max_size=3), st.sampled_from(["Thing", "thing", "T-1", "Quote", "Result", "Text"])),
    st.builds(lambda v: {"type": "object", "additionalProperties": v}, inner),
    st.builds(lambda a: {"anyOf": [a, {"type": "null"}]}, inner)), max_leaves=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_names, st.dictionaries(_names, _schemas, max_size=3), st.none() | _schemas),
                min_size=1, max_size=3, unique_by=lambda t: t[0]))
def test_the_module_import_writes_checks_for_any_schema(tmp_path, tools):
    import flowc
    from flowc.files import read_text
    from mcp.types import Tool

    from flowrt.mcp_import import module_text

    listed = [Tool(name=name, input_schema={"type": "object", "properties": props, "required": sorted(props)[:1]},
                   output_schema=out if out is None or out.get("type") == "object" else
                   {"type": "object", "properties": {"result": out}, "required": ["result"]},
                   description="A tool.\n\nWith two paragraphs.")
              for name, props, out in tools]
    text = module_text(listed, "server")
    path = tmp_path / "imported.flow"
    path.write_text(text)
    compiled = flowc.compile(str(path), read_text, generate=False)
    assert compiled.ok, (text, [d.to_json() for d in compiled.diagnostics])
    assert len(compiled.tools) == len(tools)
