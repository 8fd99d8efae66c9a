"""The host-record mark `flow archive` leaves (archive/host-mark.json, flowrt/store/host_mark.py):
an open after it reads what it would have read without it (records, durable mark, times), reads
only the records before the mark that are not `times`, and any damage it can no longer see by
hashing the whole chain is still damage: a record before the mark altered, removed or forged and
re-chained, host.jsonl cut or replaced, the mark itself damaged. A damaged `times` record before
the mark is damage when the times are read. Through `flow resume` too: exit 5, never a resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrt.store import RunStore, StorageError, canonical_bytes
from flowrt.store.chain import chain_record
from flowrt.store.host_mark import _record_spans
from flowrt.store.host_records import read_host
from flowrt.store.layout import HOST_MARK

ROOT = Path(__file__).resolve().parents[1]
START = {"program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "m", "function": "main"},
         "input": {"n": 1}, "modules": []}
CHECKPOINT = {"function": {"module": "m", "name": "f"}, "arguments": {}}
#: a host's own record shaped as much like a `times` record as a host record can be
LOOKALIKE = {"kind": "note", "at": [1, 2, 3], "from": 1, "says": '"kind":"times","prev":"sha256:' + "0" * 64}


def flow(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def archived_run(root: str, run: str = "r", *, rounds: int = 3, durability: str = "fsync") -> None:
    """A run whose host.jsonl holds, before the mark, `times` records (one or more a round) among
    records that say things; archived; then more facts and records after the mark."""
    s = RunStore.create(root, run, START, durability=durability)
    for i in range(rounds):
        s.append("Call", {"call": f"c{i}", "tool": "m.t", "arguments": {}})
        if i < 3:
            s.host_record({"kind": "paused", "head": s.head, "pending": [f"c{i}"]})
        s.close()
        s = RunStore.open(root, run, for_append=True, durability=durability)
        s.append("Reply", {"call": f"c{i}", "outcome": {"Ok": i}})
        s.append("Checkpoint", CHECKPOINT)
        if i < 3:
            s.host_record(LOOKALIKE)
    assert s.archive() > 0
    s.append("Call", {"call": "c9", "tool": "m.t", "arguments": {}})
    s.host_record({"kind": "paused", "head": s.head, "pending": ["c9"]})
    s.close()


def whole(root: str, run: str) -> tuple[list[dict], dict[int, int]]:
    """What host.jsonl says read whole, chain and all (as before there were marks)."""
    host = read_host(os.path.join(root, run))[1]
    return host.records, host.times


def test_an_open_after_the_mark_reads_what_a_whole_read_does(tmp_path):
    root = str(tmp_path)
    archived_run(root)
    mark = json.loads((tmp_path / "r" / HOST_MARK).read_text())
    records, times = whole(root, "r")
    assert sum(1 for r in records if r["kind"] == "note") == 3 and len(times) >= 10
    reader = RunStore.open(root, "r", for_append=False)
    assert reader.host_records() == records and reader.fact_times() == times
    assert reader._durable_mark == (reader.facts()[-1]["n"], reader.head)
    appender = RunStore.open(root, "r", for_append=True)
    appender.append("Reply", {"call": "c9", "outcome": {"Ok": 9}})
    assert appender.host_records() == whole(root, "r")[0]
    assert set(times) < set(appender.fact_times())
    appender.close()
    again = RunStore.open(root, "r", for_append=False)
    assert again.host_records() == whole(root, "r")[0]
    assert again.fact_times() == whole(root, "r")[1]
    # The spans are the lines that say things: none of them a `times` record, all of them found.
    data = (tmp_path / "r" / "host.jsonl").read_bytes()
    lines = b"".join(data[a:b] for a, b in mark["spans"]).split(b"\n")[:-1]
    # (a `times` record on the first line has a null `prev`: it is taken too, and read as times)
    first = data[:data.index(b"\n")]
    assert all(json.loads(line)["kind"] != "times" for line in lines if line != first)
    assert len(lines) == sum(1 for i, line in enumerate(data[:mark["offset"]].split(b"\n")[:-1])
                             if json.loads(line)["kind"] != "times" or i == 0)


def test_what_an_open_reads_does_not_grow_with_the_times_records_before_the_mark(tmp_path, monkeypatch):
    """The resume cost's guard (scripts/bench/resume_cost.py measures it): of host.jsonl before
    the mark, an open of an archived run reads only the lines that are not `times` records and
    the line at the mark, however many `times` records there are (3 or 60 rounds of them), and it
    never reads host.jsonl whole."""
    import flowrt.store.directory as directory
    import flowrt.store.host_mark as host_mark

    read: list[tuple[int, int]] = []
    pread = host_mark._pread

    def counting(fd, start, end):
        read.append((start, end))
        return pread(fd, start, end)

    skipped = {}
    for rounds in (3, 60):
        root = str(tmp_path / str(rounds))
        archived_run(root, rounds=rounds, durability="none")
        data = (tmp_path / str(rounds) / "r" / "host.jsonl").read_bytes()
        offset = json.loads((tmp_path / str(rounds) / "r" / HOST_MARK).read_text())["offset"]
        lines = data[:offset].split(b"\n")[:-1]
        records = sum(len(line) + 1 for i, line in enumerate(lines) if i == 0 or json.loads(line)["kind"] != "times")
        expected = records + len(lines[-1]) + 1  # (and the line at the mark once more)
        skipped[rounds] = offset - records
        monkeypatch.setattr(host_mark, "_pread", counting)
        monkeypatch.setattr(host_mark, "read_host", _refuse_whole_read)
        monkeypatch.setattr(directory, "read_host", _refuse_whole_read)
        for for_append in (False, True, False):
            read.clear()
            s = RunStore.open(root, "r", for_append=for_append, durability="none")
            assert sum(min(end, offset) - start for start, end in read if start < offset) == expected
            read.clear()
            s.host_records()  # (which a resume asks for three times: an appender has them from its open)
            assert sum(min(end, offset) - start for start, end in read if start < offset) == \
                (0 if for_append else expected)
            s.close()
        monkeypatch.undo()
    assert skipped[60] > 5_000 + skipped[3]  # (what the bigger run's opens did not read)


def _refuse_whole_read(*args, **kwargs):
    raise AssertionError("host.jsonl read whole by an open of an archived run")


def test_a_second_archive_moves_the_mark_on(tmp_path):
    root = str(tmp_path)
    archived_run(root)
    first = json.loads((tmp_path / "r" / HOST_MARK).read_text())["offset"]
    s = RunStore.open(root, "r", for_append=True)
    s.append("Reply", {"call": "c9", "outcome": {"Ok": 9}})
    s.append("Checkpoint", CHECKPOINT)
    s.append("End", {"outcome": {"Completed": 1}})
    assert s.archive() > 0
    s.close()
    assert json.loads((tmp_path / "r" / HOST_MARK).read_text())["offset"] > first
    reader = RunStore.open(root, "r", for_append=False)
    assert reader.ended and reader.host_records() == whole(root, "r")[0]
    assert reader.fact_times() == whole(root, "r")[1]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _before_mark(run: Path, kind: str) -> int:
    """The index of the first line of `kind` before the mark, but for the first line (a `times`
    record there has a null `prev`, and is read as a record that says something)."""
    offset = json.loads((run / HOST_MARK).read_text())["offset"]
    lines = _lines(run / "host.jsonl")
    pos = 0
    for index, line in enumerate(lines):
        pos += len(line) + 1
        if pos > offset:
            break
        if json.loads(line)["kind"] == kind and index > 0:
            return index
    raise AssertionError(f"no {kind} record before the mark")


def alter_paused(run: Path) -> None:
    lines = _lines(run / "host.jsonl")
    index = _before_mark(run, "paused")
    lines[index] = lines[index].replace(b'"pending":["c', b'"pending":["d')
    _write_lines(run / "host.jsonl", lines)


def forge_paused(run: Path) -> None:
    """The paused record altered and every record after it chained again: only the mark knows."""
    lines = _lines(run / "host.jsonl")
    index = _before_mark(run, "paused")
    head = json.loads(lines[index])["prev"]
    for i in range(index, len(lines)):
        record = json.loads(lines[i])
        del record["prev"], record["hash"]
        if i == index:
            record["pending"] = ["c7"]
        lines[i], head = chain_record(record, head)
        lines[i] = lines[i][:-1]
    _write_lines(run / "host.jsonl", lines)


def drop_paused(run: Path) -> None:
    lines = _lines(run / "host.jsonl")
    del lines[_before_mark(run, "paused")]
    _write_lines(run / "host.jsonl", lines)


def cut_before_mark(run: Path) -> None:
    offset = json.loads((run / HOST_MARK).read_text())["offset"]
    data = (run / "host.jsonl").read_bytes()
    (run / "host.jsonl").write_bytes(data[:data.rfind(b"\n", 0, offset - 1) + 1])


def mark_field(field: str, value):
    def damage(run: Path) -> None:
        mark = json.loads((run / HOST_MARK).read_text())
        mark[field] = value
        (run / HOST_MARK).write_bytes(canonical_bytes(mark) + b"\n")
    return damage


def mark_not_json(run: Path) -> None:
    (run / HOST_MARK).write_bytes(b'{"head": ')


DAMAGE = {
    "a record before the mark altered": alter_paused,
    "a record before the mark forged and the chain hashed again": forge_paused,
    "a record before the mark removed": drop_paused,
    "host.jsonl cut before the mark": cut_before_mark,
    "host.jsonl missing": lambda run: (run / "host.jsonl").unlink(),
    "the mark not JSON": mark_not_json,
    "the mark's offset moved": mark_field("offset", 40),
    "the mark's head another": mark_field("head", "sha256:" + "1" * 64),
    "the mark's spans another": mark_field("spans", [[0, 10]]),
    "the mark's spans out of order": mark_field("spans", [[50, 60], [0, 10]]),
    "the mark without lines": mark_field("lines", None),
}


@pytest.mark.parametrize("for_append", [False, True])
@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damage_the_mark_stands_for_is_damage(tmp_path, name, for_append):
    archived_run(str(tmp_path))
    DAMAGE[name](tmp_path / "r")
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()}
    with pytest.raises(StorageError):
        RunStore.open(str(tmp_path), "r", for_append=for_append).close()
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == before


def test_damage_after_the_mark_is_found_by_the_chain(tmp_path):
    archived_run(str(tmp_path))
    lines = _lines(tmp_path / "r" / "host.jsonl")
    [index] = [i for i, line in enumerate(lines) if b'"pending":["c9"]' in line]
    lines[index] = lines[index].replace(b'"pending":["c9"]', b'"pending":["c8"]')
    _write_lines(tmp_path / "r" / "host.jsonl", lines)
    with pytest.raises(StorageError, match="hash"):
        RunStore.open(str(tmp_path), "r", for_append=False)


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("damage", ["a digit", "a NUL"])
def test_a_damaged_times_record_before_the_mark_is_damage_when_times_are_read(tmp_path, which, damage):
    """Also a NUL in the last `times` records before the mark, which a whole read may take for a
    torn last write: the archive synced and verified them, so they cannot be one."""
    archived_run(str(tmp_path))
    run = tmp_path / "r"
    lines = _lines(run / "host.jsonl")
    offset = json.loads((run / HOST_MARK).read_text())["offset"]
    ends = [sum(len(line) + 1 for line in lines[:i + 1]) for i in range(len(lines))]
    # (before the line at the mark, which every open checks against its hash)
    times = [i for i, line in enumerate(lines) if i > 0 and ends[i] < offset and json.loads(line)["kind"] == "times"]
    index = times[0] if which == "first" else times[-1]
    # (the same length: the offsets hold)
    lines[index] = lines[index].replace(b'"at":[1', b'"at":[2' if damage == "a digit" else b'"at":[\0', 1)
    _write_lines(run / "host.jsonl", lines)
    for for_append in (False, True):
        store = RunStore.open(str(tmp_path), "r", for_append=for_append)  # (the records that say things are sound)
        assert [r["kind"] for r in store.host_records()].count("paused") == 4
        with pytest.raises(StorageError):
            store.fact_times()
        store.close()
    assert _lines(run / "host.jsonl")[:index + 1] == lines[:index + 1]  # (nothing cut)


def _chained_lines(records: list[dict]) -> bytes:
    head, out = None, []
    for record in records:
        line, head = chain_record(record, head)
        out.append(line)
    return b"".join(out)


_KEYS = st.sampled_from(["at", "from", "kind", "says", "batch", "x"])
_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=80),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=3),
                       max_leaves=8)
_RECORDS = st.one_of(
    st.builds(lambda first, at: {"kind": "times", "from": first, "at": at},
              st.integers(1, 10**6), st.lists(st.integers(0, 2**42), min_size=1, max_size=5)),
    st.builds(lambda kind, fields: {**fields, "kind": kind},
              st.sampled_from(["note", "paused", "times ", "Times", 'times"']),
              st.dictionaries(_KEYS.filter(lambda k: k != "kind"), _VALUES, max_size=4)),
    st.just(LOOKALIKE),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORDS, min_size=1, max_size=12))
def test_the_spans_are_exactly_the_records_that_are_not_times(records):
    data = _chained_lines(records)
    spans, lines = _record_spans(data)
    assert lines == len(records)
    taken = b"".join(data[a:b] for a, b in spans).split(b"\n")[:-1]
    # (the first line's `prev` is null: a `times` record there is taken, and read as times)
    expected = [line for i, line in enumerate(data.split(b"\n")[:-1]) if records[i]["kind"] != "times" or i == 0]
    assert taken == expected


def test_flow_resume_after_flow_archive_and_a_damaged_record_before_its_mark(tmp_path):
    (tmp_path / "main.flow").write_text(
        '@tool pub flow ask(question: Text) -> Text\n\n'
        'pub flow main(n: Int) -> Text !tool = loop(n, "start")\n\n'
        'flow loop(n: Int, last: Text) -> Text !tool = if n == 0 { last } else { loop(n - 1, ask(last)) }\n')
    (tmp_path / "flow.toml").write_text('[tools]\n"main" = { pending = true }\n')
    paused = flow("run", "main.flow", "--runs", "runs", "--input", '{"n": 3}', cwd=tmp_path)
    assert paused.returncode == 3, paused.stderr
    run_id = json.loads(flow("runs", "--runs", "runs", "--json", cwd=tmp_path).stdout)["runs"][0]["run"]

    def pending() -> str:
        return json.loads(flow("history", run_id, "--runs", "runs", "--json", cwd=tmp_path).stdout)["pending"][0]

    for answer in ("a", "b"):
        done = flow("resume", run_id, "--runs", "runs", "--call", pending(), "--reply", json.dumps({"Ok": answer}),
                    cwd=tmp_path)
        assert done.returncode == 3, done.stderr
    assert flow("archive", run_id, "--runs", "runs", cwd=tmp_path).returncode == 0
    assert (tmp_path / "runs" / run_id / HOST_MARK).is_file()
    call = pending()
    saved = (tmp_path / "runs" / run_id / "host.jsonl").read_bytes()
    lines = saved.split(b"\n")[:-1]
    index = _before_mark(tmp_path / "runs" / run_id, "paused")
    lines[index] = lines[index].replace(b'root#', b'roof#', 1)  # (the same length, so only its hash tells)
    _write_lines(tmp_path / "runs" / run_id / "host.jsonl", lines)
    damaged = flow("resume", run_id, "--runs", "runs", "--call", call, "--reply", '{"Ok": "c"}', cwd=tmp_path)
    assert damaged.returncode == 5 and "storage failure" in damaged.stderr, damaged.stderr
    (tmp_path / "runs" / run_id / "host.jsonl").write_bytes(saved)
    done = flow("resume", run_id, "--runs", "runs", "--call", call, "--reply", '{"Ok": "c"}', cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout) == "c", done.stdout + done.stderr


def test_a_resume_of_an_archived_run_never_reads_host_jsonl_whole(tmp_path, monkeypatch):
    import flowrt
    import flowrt.store.directory as directory
    import flowrt.store.host_mark as host_mark
    from flowrt.replay import open_calls, resume
    from flowrt.run import run

    program = tmp_path / "prog.flow"
    program.write_text(
        "@tool pub flow echo(n: Int) -> Int\n@tool pub flow ask(question: Text) -> Text\n\n"
        "pub flow main(n: Int) -> Text !tool = loop(n)\n\n"
        'flow loop(n: Int) -> Text !tool = if n == 0 { ask("done?") } else { loop(n - 1 + 0 * echo(n)) }\n')
    tools = {"prog.echo": lambda n: n, "prog.ask": lambda question: flowrt.PENDING}
    runs = str(tmp_path / "runs")
    paused = run(str(program), input_text='{"n": 20}', runs_dir=runs, python_tools=tools, durability="none")
    assert paused.exit_code == 3, paused
    store = RunStore.open(runs, paused.run_id, for_append=True, durability="none")
    assert store.archive() > 0
    [call] = open_calls(store)
    store.close()
    monkeypatch.setattr(host_mark, "read_host", _refuse_whole_read)
    monkeypatch.setattr(directory, "read_host", _refuse_whole_read)
    done = resume(runs, paused.run_id, call=call, reply_text='{"Ok": "yes"}', python_tools=tools, durability="none")
    assert done.exit_code == 0, done
    monkeypatch.undo()
    assert RunStore.open(runs, paused.run_id, for_append=False).ended


def test_flow_export_of_an_archived_run_copies_host_jsonl_whole_and_no_mark(tmp_path):
    archived_run(str(tmp_path / "runs"))
    done = flow("export", "r", "--runs", str(tmp_path / "runs"), "--to", str(tmp_path / "copy"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "copy" / "r" / "host.jsonl").read_bytes() == (tmp_path / "runs" / "r" / "host.jsonl").read_bytes()
    assert not (tmp_path / "copy" / "r" / HOST_MARK).exists()  # (read whole there, as before marks)
    copy = RunStore.open(str(tmp_path / "copy"), "r", for_append=False)
    assert copy.host_records() == whole(str(tmp_path / "runs"), "r")[0]
    assert copy.fact_times() == whole(str(tmp_path / "runs"), "r")[1]
    # A damaged times record before the mark fails the export (it reads host.jsonl whole).
    lines = _lines(tmp_path / "runs" / "r" / "host.jsonl")
    index = _before_mark(tmp_path / "runs" / "r", "times")
    lines[index] = lines[index].replace(b'"at":[1', b'"at":[2', 1)
    _write_lines(tmp_path / "runs" / "r" / "host.jsonl", lines)
    damaged = flow("export", "r", "--runs", str(tmp_path / "runs"), "--to", str(tmp_path / "again"))
    assert damaged.returncode == 5, damaged.stderr
