"""`flow history RUN --html OUT.html`: the picture of a run, rendered in a real headless browser.

Chromium is required, not optional: a test that skipped without it would let a page that no
browser can draw pass. `.ci/run` installs Debian's `chromium` where it is missing.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from flowrt.run_picture import fact_times, picture, render, task_of
from flowrt.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "examples" / "support"
SUPPORT_RUN = "run-20261129-204400-b53d35"
HOSTILE = '</script><script>document.title="owned"</script><img src=x onerror="document.title=1">'


def flow(*args: str, cwd: Path = ROOT, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (the picture is tested in a real "
                    "browser; .ci/run installs it)")
    return found


def browse(page: Path, tmp_path: Path, *, screenshot: Path | None = None, query: str = "") -> str:
    """Chromium's DOM of the page after its script ran (or, with `screenshot`, a PNG of it)."""
    profile = tmp_path / f"chromium-profile-{time.monotonic_ns()}"
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--window-size=1100,500"]
    command += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run(command + [page.as_uri() + query], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        pytest.fail(f"chromium could not render the page (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


class Elements(html.parser.HTMLParser):
    """Every element of a DOM with its attributes, and the text inside each element by id."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        if tag not in ("meta", "br", "img", "input", "line", "polygon", "link"):
            self._open.append(attributes.get("id"))
            if attributes.get("id"):
                self.text_by_id.setdefault(attributes["id"], "")

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for element_id in self._open:
            if element_id:
                self.text_by_id[element_id] += data

    def having(self, tag: str, css_class: str) -> list[dict]:
        return [a for t, a in self.elements if t == tag and css_class in (a.get("class") or "").split()]


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


def png_colours(path: Path) -> int:
    """How many distinct colours an 8-bit RGB or RGBA PNG holds (stdlib only: zlib, struct)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat, header = 8, b"", None
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    previous = bytearray(stride)
    colours = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 255
            elif kind == 4:
                corner = previous[i - channels] if i >= channels else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        colours.update(bytes(line[i:i + channels]) for i in range(0, stride, channels * 4))
        previous = line
    return len(colours)


def support_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(SUPPORT / "histories", runs)
    return runs


def recorded_tasks_and_calls(runs: Path, run_id: str) -> tuple[set[str], list[str]]:
    """What the record holds, read straight from the facts (the seed's id rule: a call is its
    task plus `#` and a counter)."""
    store = RunStore.open(str(runs), run_id, for_append=False)
    try:
        facts = store.facts()
    finally:
        store.close()
    calls = [f["call"] for f in facts if f["kind"] == "Call"]
    tasks = {"root"} | {c.rsplit("#", 1)[0] for c in calls}
    tasks |= {f[k] for f in facts if f["kind"] == "Choice" for k in ("task", "picked")}
    tasks |= {f["task"] for f in facts if f["kind"] == "Stop"}
    return tasks, calls


def test_the_support_run_draws_a_lane_per_task_and_a_bar_per_call_in_chromium(tmp_path):
    runs = support_runs(tmp_path)
    page = tmp_path / "support.html"
    done = flow("history", SUPPORT_RUN, "--runs", str(runs), "--html", str(page))
    assert done.returncode == 0, done.stderr
    tasks, calls = recorded_tasks_and_calls(runs, SUPPORT_RUN)
    assert tasks == {"root", "root/1", "root/2", "c1:root", "c2:root"} and len(calls) == 6
    dom = parse(browse(page, tmp_path))
    lanes = dom.having("g", "lane")
    assert sorted(a["data-task"] for a in lanes) == sorted(tasks)
    bars = dom.having("rect", "bar")
    assert sorted(a["data-call"] for a in bars) == sorted(calls)
    outcomes = {a["data-call"]: a["data-outcome"] for a in bars}
    assert outcomes["root/1#1"] == "closed"  # the race's loser, closed by the Stop with no reply
    assert {outcomes[c] for c in calls if c != "root/1#1"} == {"Ok"}
    assert [a["data-fact"] for a in dom.having("g", "checkpoint")] == ["9", "14"]
    assert len(dom.having("g", "mark-Choice")) == 1 and len(dom.having("g", "mark-Stop")) == 1
    assert len(dom.having("g", "end")) == 1
    shot = tmp_path / "support.png"
    browse(page, tmp_path, screenshot=shot)
    # a blank or unstyled page has a handful of colours; lanes, bars, marks and text have many
    assert png_colours(shot) > 20


def test_clicking_a_bar_shows_its_call_and_a_hostile_argument_stays_text(tmp_path):
    runs = tmp_path / "runs"
    store = RunStore.create(str(runs), "run-hostile", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {"q": HOSTILE}, "modules": []}, durability="none")
    store.append("Call", {"call": "root#1", "tool": "web.search", "fingerprint": "f", "arguments": {"q": HOSTILE}})
    store.append("Reply", {"call": "root#1", "outcome": {"Ok": HOSTILE + "</style>"}})
    store.append("End", {"outcome": {"Completed": HOSTILE}})
    store.close()
    page = tmp_path / "hostile.html"
    assert flow("history", "run-hostile", "--runs", str(runs), "--html", str(page)).returncode == 0
    dom = parse(browse(page, tmp_path, query="?select=0"))
    scripts = [a for t, a in dom.elements if t == "script"]
    assert len(scripts) == 2  # the data and the page's own script: nothing the arguments held
    assert not [a for t, a in dom.elements if t == "img"]
    assert dom.text_by_id["picture"].count("root#1") == 1  # the bar's title
    details = dom.text_by_id["details"]
    assert "web.search" in details and "root#1" in details
    assert json.dumps({"q": HOSTILE}, separators=(",", ":"), ensure_ascii=False) in details
    assert json.dumps({"Ok": HOSTILE + "</style>"}, separators=(",", ":")) in details
    data = json.loads(dom.text_by_id["calls"])
    assert data["bars"][0]["arguments"]["text"] == json.dumps({"q": HOSTILE}, separators=(",", ":"))


def test_a_hole_is_shown_as_a_hole_and_a_long_value_is_cut(tmp_path):
    runs = tmp_path / "runs"
    store = RunStore.create(str(runs), "run-holes", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {}, "modules": []}, durability="none", inline_limit=0)
    store.append("Call", {"call": "root#1", "tool": "crm.lookup", "fingerprint": "f", "arguments": {"who": "Ada"}})
    store.append("Reply", {"call": "root#1", "outcome": {"Ok": "a secret"}})
    store.append("Call", {"call": "root#2", "tool": "docs.read", "fingerprint": "f", "arguments": {"x": "y" * 9000}})
    store.redact(3, "outcome")
    store.close()
    page = tmp_path / "holes.html"
    assert flow("history", "run-holes", "--runs", str(runs), "--html", str(page)).returncode == 0
    text = page.read_text()
    assert "a secret" not in text
    details = parse(browse(page, tmp_path, query="?select=0")).text_by_id["details"]
    assert "hole (redacted value, sha256:" in details and "a secret" not in details
    long = parse(browse(page, tmp_path, query="?select=1"))
    assert "more characters" in long.text_by_id["details"]
    assert {a["data-call"]: a["data-outcome"] for a in long.having("rect", "bar")} == \
        {"root#1": "hole", "root#2": "open"}


OUTCOME_CASES = [
    ({"Ok": 1}, "Ok"),
    ({"Err": {"Failed": {"code": 3}}}, "Failed"),
    ({"Err": {"NotRun": "no budget"}}, "NotRun"),
    ({"Err": {"Unknown": "the host died with the call out"}}, "Unknown"),
    ({"Err": {"BadReply": "$.Ok: expected a string"}}, "BadReply"),
]


@pytest.mark.parametrize("outcome,expected", OUTCOME_CASES)
def test_a_bar_is_coloured_by_its_outcome(tmp_path, outcome, expected):
    store = RunStore.create(str(tmp_path), "run-1", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {}, "modules": []}, durability="none")
    store.append("Call", {"call": "root/3#2", "tool": "t.x", "fingerprint": "f", "arguments": {}})
    store.append("Reply", {"call": "root/3#2", "outcome": outcome})
    model = picture(store)
    store.close()
    assert model["lanes"] == ["root", "root/3"]
    (bar,) = model["bars"]
    assert bar["outcome"] == expected and bar["task"] == task_of("root/3#2") == "root/3"
    assert f'class="bar outcome-{expected}"' in render(model)


def _untimed(monkeypatch) -> None:
    """As a history written before the store recorded times."""
    monkeypatch.setattr("flowrt.run_picture.fact_times", lambda store: {})


def test_accept_times_place_the_bars_when_every_fact_has_one(tmp_path, monkeypatch):
    store = RunStore.create(str(tmp_path), "run-1", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {}, "modules": []}, durability="none")
    store.append("Call", {"call": "root#1", "tool": "t.x", "fingerprint": "f", "arguments": {}})
    store.append("Reply", {"call": "root#1", "outcome": {"Ok": 1}})
    store.sync()  # the store writes the times it noted with the next sync
    times = fact_times(store)
    model = picture(store)
    assert sorted(times) == [1, 2, 3] and model["axis"] == "ms"
    bar = model["bars"][0]
    assert (bar["from"], bar["to"]) == (times[2] - times[1], times[3] - times[1])
    assert "time since Start" in render(model)
    _untimed(monkeypatch)
    untimed = picture(store)
    store.close()
    assert untimed["axis"] == "fact" and untimed["bars"][0]["from"] == 2 and untimed["bars"][0]["to"] == 3


def test_follow_writes_the_page_again_as_facts_land_and_stops_at_end(tmp_path):
    folder = tmp_path / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns(".flow", "histories"))
    runs = tmp_path / "runs"
    paused = flow("run", "main.flow", "--allow", "--input", '{"ticket": "Login fails on Safari"}', "--runs",
                  str(runs), cwd=folder)
    assert paused.returncode == 3, paused.stderr
    run_id = paused.stdout.split()[2]
    page = tmp_path / "live.html"
    follower = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "history", run_id, "--runs", str(runs),
                                 "--html", str(page), "--follow"], cwd=folder, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not page.exists() and time.monotonic() < deadline and follower.poll() is None:
            time.sleep(0.1)
        first = page.read_text()
        assert 'http-equiv="refresh"' in first and 'data-outcome="open"' in first
        assert follower.poll() is None  # still following: the run has not ended
        resumed = flow("resume", run_id, "--call", "c1:root#2", "--reply", '{"Ok": "Safari 17.4"}', "--runs",
                       str(runs), "--allow", cwd=folder)
        assert resumed.returncode == 0, resumed.stderr
        assert follower.wait(timeout=60) == 0, follower.stderr.read()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    last = page.read_text()
    assert 'http-equiv="refresh"' not in last and 'data-outcome="open"' not in last
    assert parse(last).having("g", "end")
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_refusals_and_a_missing_run(tmp_path):
    runs = support_runs(tmp_path)
    assert flow("history", SUPPORT_RUN, "--runs", str(runs), "--follow", "--search", "x").returncode == 2
    mixed = flow("history", SUPPORT_RUN, "--runs", str(runs), "--html", str(tmp_path / "x.html"), "--kind", "Call")
    assert mixed.returncode == 2 and "--kind" in mixed.stderr and not (tmp_path / "x.html").exists()
    missing = flow("history", "run-nope", "--runs", str(runs), "--html", str(tmp_path / "x.html"))
    assert missing.returncode == 2 and not (tmp_path / "x.html").exists()
    unwritable = flow("history", SUPPORT_RUN, "--runs", str(runs), "--html", str(tmp_path / "no" / "x.html"))
    assert unwritable.returncode == 2 and "cannot write" in unwritable.stderr


def test_a_forks_parked_call_is_drawn_from_the_checkpoint_that_carries_it(tmp_path, monkeypatch):
    _untimed(monkeypatch)  # bars placed by fact number
    store = RunStore.create(str(tmp_path), "run-fork", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {}, "modules": [], "parent": {"run": "run-parent", "checkpoint": 9}}, durability="none")
    parked = {"call": "root/1#1", "tool": "web.search", "arguments": {"query": "q"}, "ctor": None}
    store.append("Checkpoint", {"function": {"module": "main", "name": "work"}, "types": [],
                                "arguments": {"pending": parked, "record": {"call": "not a task", "n": 1}}})
    store.append("Reply", {"call": "root/1#1", "outcome": {"Ok": "found"}})
    model = picture(store)
    store.close()
    (bar,) = model["bars"]  # the record argument that merely has a `call` field is no call
    assert (bar["call"], bar["tool"], bar["task"], bar["from"], bar["to"], bar["outcome"]) == \
        ("root/1#1", "web.search", "root/1", 2, 3, "Ok")


def _script_safe_cases():
    from hypothesis import strategies as st

    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40) | \
        st.sampled_from(["</script>", "<!--", "]]>", "</style>", "\u2028", "&lt;", "{{DATA}}", "<svg onload=x>"])
    return st.recursive(st.none() | st.booleans() | st.integers() | text,
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                        max_leaves=12), text


def test_recorded_text_of_any_kind_stays_data_in_the_page():
    from hypothesis import given, settings

    from flowrt.run_picture import _json_for_script

    values, texts = _script_safe_cases()

    @settings(max_examples=150, deadline=None)
    @given(value=values, tool=texts, task=texts)
    def check(value, tool, task):
        encoded = _json_for_script(value)
        assert json.loads(encoded) == value and not set("<>&") & set(encoded)
        model = {"run": "run-1", "state": "ended", "axis": "fact", "last": 3, "lanes": [task], "facts": 3,
                 "bars": [{"call": task + "#1", "tool": tool, "task": task, "callFact": 2, "from": 2, "to": 3,
                           "replyFact": 3, "outcome": "Ok", "arguments": {"text": json.dumps(value)},
                           "reply": None}],
                 "marks": [{"kind": "Choice", "task": task, "fact": 3, "at": 3, "label": tool}],
                 "checkpoints": [], "end": None}
        dom = parse(render(model))
        assert len([a for t, a in dom.elements if t == "script"]) == 2
        assert [a["data-task"] for a in dom.having("g", "lane")] == [task]
        assert [(a["data-call"], a["data-outcome"]) for a in dom.having("rect", "bar")] == [(task + "#1", "Ok")]
        data = json.loads(dom.text_by_id["calls"])
        assert data["bars"][0]["tool"] == tool and data["bars"][0]["arguments"]["text"] == json.dumps(value)

    check()


def test_follow_stops_with_130_when_interrupted(tmp_path):
    import signal

    store = RunStore.create(str(tmp_path / "runs"), "run-open", {
        "program": "sha256:" + "ab" * 32, "std": "std@v1", "entry": {"module": "main", "function": "main"},
        "input": {}, "modules": []}, durability="none")
    store.append("Call", {"call": "root#1", "tool": "human.ask", "fingerprint": "f", "arguments": {}})
    store.close()
    page = tmp_path / "open.html"
    follower = subprocess.Popen([sys.executable, "-m", "flowrt.cli", "history", "run-open", "--runs",
                                 str(tmp_path / "runs"), "--html", str(page), "--follow"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not page.exists() and time.monotonic() < deadline and follower.poll() is None:
            time.sleep(0.1)
        assert 'data-outcome="open"' in page.read_text()
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=60) == 130
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
