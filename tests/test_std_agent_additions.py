"""std additions of issue 15, item 5: `task.map_bounded` (at most N calls of `f` at once, results
in order), `task.race_ok` (the first Ok wins, errors do not), and `structured.ask_checked` /
`structured.retold` (a check's failure repaired like a reply that did not decode; the repair told
in the prompt). Run as `flow test` programs on the virtual clock, against what a Python model of
each says (a pool of N workers; the quickest Ok)."""

from __future__ import annotations

import heapq
import random
import re
import subprocess
import sys
from pathlib import Path

MAP_PROGRAM = """\
use "std@v1/task"

@tool pub flow work(n: Int) -> Int

pub flow main(xs: List<Int>, limit: Int) -> List<Int> !tool = task.map_bounded(xs, limit, work)
"""

MAP_FAKES = """\
use "std@v1/clock"
use "std@v1/duration"
use "std@v1/instant"
use "./main"

/// Item n takes n seconds and answers n * 10.
@fake(main.work) flow work(n: Int) -> Int = {
    clock.sleep(duration.from_seconds(n))
    n * 10
}

flow check(xs: List<Int>, limit: Int, want: Int) -> Result<Unit, Text> !tool = {
    let start = clock.now()
    let got = main.main(xs, limit)
    let took = instant.diff(clock.now(), start)
    guard got == list_times_ten(xs) else { return Err("results ${got}") }
    guard took == duration.from_seconds(want) else { return Err("took ${took}, a pool of ${limit} takes ${want}s") }
    Ok(())
}

flow list_times_ten(xs: List<Int>) -> List<Int> = match xs {
    [] => [],
    [x, ..rest] => [x * 10] ++ list_times_ten(rest),
}
"""


def pool_time(durations: list[int], limit: int) -> int:
    """How long a pool of `limit` workers (at least 1) takes, each item started as soon as a worker is free."""
    width = max(1, limit)
    finishing: list[int] = []
    now = 0
    for d in durations:
        if len(finishing) == width:
            now = heapq.heappop(finishing)
        heapq.heappush(finishing, now + d)
    return max(finishing, default=0)


def flow_test(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowrt.cli", "test", str(directory)], capture_output=True,
                          text=True, timeout=300)


def map_cases() -> list[tuple[list[int], int]]:
    rng = random.Random(15)
    cases = [([], 2), ([4], 1), ([3, 1, 1, 2], 2), ([3, 1, 1, 2], 0), ([3, 1, 1, 2], -5), ([3, 1, 1, 2], 10),
             ([1, 1, 1, 1], 4), ([5, 1, 1, 1, 1, 1], 2), ([2, 2, 2], 3)]
    for _ in range(30):
        cases.append(([rng.randint(0, 6) for _ in range(rng.randint(0, 9))], rng.randint(-1, 5)))
    return cases


def test_map_bounded_takes_what_a_pool_of_limit_workers_takes_and_keeps_the_order(tmp_path):
    cases = map_cases()
    (tmp_path / "main.flow").write_text(MAP_PROGRAM)
    tests = [MAP_FAKES]
    for number, (xs, limit) in enumerate(cases):
        tests.append(f"@test flow case_{number}() -> Result<Unit, Text> = check({xs}, {limit}, {pool_time(xs, limit)})\n"
                     .replace("(-", "(0 - ").replace(", -", ", 0 - "))
    (tmp_path / "main_test.flow").write_text("\n".join(tests))
    done = flow_test(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(cases)} passed, 0 failed" in done.stdout


def test_the_pool_model_is_not_all_at_once_nor_one_at_a_time():
    # The cases above tell a bounded map from the unbounded and the serial one.
    assert pool_time([3, 1, 1, 2], 2) == 4 and pool_time([3, 1, 1, 2], 10) == 3 and pool_time([3, 1, 1, 2], 1) == 7


def test_a_bounded_map_replays_matched_from_its_recorded_choices(tmp_path):
    program = tmp_path / "prog"
    program.mkdir()
    (program / "main.flow").write_text(MAP_PROGRAM)
    (program / "tool.py").write_text(
        "import time\nfrom flowrt.toolkit import serve\n\n"
        "def work(n):\n    time.sleep(n / 20)\n    return n * 10\n\n"
        "serve({'main.work': work}, declared_in='main.flow')\n")
    (program / "flow.toml").write_text('[tools]\n"main" = { python = "tool.py" }\n')
    runs = str(tmp_path / "runs")
    flow = [sys.executable, "-m", "flowrt.cli"]
    done = subprocess.run([*flow, "run", "main.flow", "--runs", runs, "--allow", "--input",
                           '{"xs": [3, 1, 2, 1, 0, 2], "limit": 2}'], cwd=program, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[30,10,20,10,0,20]"
    [run_id] = [p.name for p in (tmp_path / "runs").iterdir()]
    history = subprocess.run([*flow, "history", run_id, "--runs", runs], capture_output=True, text=True, timeout=120)
    assert len(re.findall(r"\bChoice\b", history.stdout)) >= 6  # one per finished item, at least
    replayed = subprocess.run([*flow, "replay", run_id, "--runs", runs], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
    assert replayed.returncode == 0 and replayed.stdout.strip() == "Matched", replayed.stdout + replayed.stderr


CHECKED_PROGRAM = """\
use "std@v1/structured"

pub type AskError { Refused(Text) }

@tool pub flow ask<T: Data>(prompt: Text) -> Result<T, AskError>

pub flow rating(attempts: Int) -> Result<Int, ToolProblem<AskError>> !tool =
    structured.ask_checked(flow(p: Text, r: Option<structured.Repair>) = ask(structured.retold(p, r)), "Rate it", attempts,
        flow(n: Int) = if n >= 1 && n <= 5 { Ok(()) } else { Err("$.Ok: ${n} is not between 1 and 5") })
"""

CHECKED_TESTS = """\
use "std@v1/json"
use "std@v1/text"
use "std@v1/structured"
use "./main"

/// 9 (fails the check), then text (does not decode), then 4; any other call is refused.
@fake(main.ask) flow ask<T: Data>(call: Int, prompt: Text) -> Result<T, ToolProblem<main.AskError>> =
    if call == 1 && prompt == "Rate it" { decoded("9") }
    else if call == 2 && text.contains(prompt, "attempt 1 did not fit: $.Ok: 9 is not between 1 and 5. Answer again") { decoded("\\"x\\"") }
    else if call == 3 && text.contains(prompt, "attempt 2 did not fit: ") { decoded("4") }
    else { Err(Failed(main.Refused(prompt))) }

flow decoded<T: Data>(body: Text) -> Result<T, ToolProblem<main.AskError>> = match json.decode(body) {
    Ok(v) => Ok(v),
    Err(why) => Err(BadReply(why)),
}

@test flow a_value_failing_the_check_and_one_not_decoding_are_both_repaired() -> Result<Unit, Text> = match main.rating(3) {
    Ok(4) => Ok(()),
    other => Err("${other}"),
}

@test flow the_last_check_failure_is_the_bad_reply() -> Result<Unit, Text> = match main.rating(1) {
    Err(BadReply("$.Ok: 9 is not between 1 and 5")) => Ok(()),
    other => Err("${other}"),
}

@test flow one_attempt_is_made_even_for_zero() -> Result<Unit, Text> = match main.rating(0) {
    Err(BadReply(_)) => Ok(()),
    other => Err("${other}"),
}

@test flow other_problems_are_not_repaired() -> Result<Unit, Text> = match main.rating(2) {
    Err(BadReply(why)) => if text.contains(why, "expected") { Ok(()) } else { Err(why) },
    other => Err("${other}"),
}

@test flow retold_leaves_a_first_prompt_alone() -> Result<Unit, Text> = {
    guard structured.retold("p", None) == "p" else { return Err("changed") }
    guard structured.retold("p", Some(structured.Repair { attempt: 2, problem: "$.x: bad" }))
        == "p\\n\\nYour answer to attempt 2 did not fit: $.x: bad. Answer again, fixing that." else { return Err("wording") }
    Ok(())
}
"""


def test_ask_checked_repairs_check_failures_and_decoding_failures_alike(tmp_path):
    (tmp_path / "main.flow").write_text(CHECKED_PROGRAM)
    (tmp_path / "main_test.flow").write_text(CHECKED_TESTS)
    done = flow_test(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed, 0 failed" in done.stdout


RACE_PROGRAM = """\
use "std@v1/task"

@tool pub flow look(n: Int) -> Result<Int, Text>

pub flow main(xs: List<Int>) -> Result<Int, List<ToolProblem<Text>>> !tool = task.race_ok(lookups(xs))

flow lookups(xs: List<Int>) -> List<flow() -> Result<Int, ToolProblem<Text>> !tool> = match xs {
    [] => [],
    [x, ..rest] => [flow() = look(x)] ++ lookups(rest),
}
"""

RACE_FAKES = """\
use "std@v1/clock"
use "std@v1/duration"
use "std@v1/instant"
use "./main"

/// n > 0 answers Ok(n) after n seconds; n <= 0 fails after -n seconds.
@fake(main.look) flow look(n: Int) -> Result<Int, ToolProblem<Text>> =
    if n > 0 {
        clock.sleep(duration.from_seconds(n))
        Ok(n)
    } else {
        clock.sleep(duration.from_seconds(0 - n))
        Err(Failed("no ${n}"))
    }

flow check(xs: List<Int>, want: Result<Int, List<ToolProblem<Text>>>, seconds: Int) -> Result<Unit, Text> !tool = {
    let start = clock.now()
    let got = main.main(xs)
    guard got == want else { return Err("got ${got}") }
    let took = instant.diff(clock.now(), start)
    guard took == duration.from_seconds(seconds) else { return Err("took ${took}") }
    Ok(())
}
"""


def race_expectation(xs: list[int]) -> tuple[str, int]:
    """What race_ok gives (as Flow source) and when: the quickest Ok (the earliest listed among
    equals), else every error in order, after the slowest."""
    oks = [(x, i) for i, x in enumerate(xs) if x > 0]
    if oks:
        best = min(oks)[0]
        return f"Ok({best})", best
    errors = ", ".join(f'Failed("no {x}")' for x in xs)
    return f"Err([{errors}])", max((-x for x in xs), default=0)


def test_race_ok_gives_the_first_ok_or_every_error_in_order(tmp_path):
    rng = random.Random(5)
    cases = [[], [0], [2], [0, 3, 2, -1], [-3, 0, -1], [1, 1], [-2, 4]]
    cases += [[rng.randint(-4, 4) for _ in range(rng.randint(1, 6))] for _ in range(25)]
    (tmp_path / "main.flow").write_text(RACE_PROGRAM)
    tests = [RACE_FAKES]
    for number, xs in enumerate(cases):
        want, seconds = race_expectation(xs)
        items = ", ".join(str(x) if x >= 0 else f"0 - {-x}" for x in xs)
        tests.append(f"@test flow case_{number}() -> Result<Unit, Text> = check([{items}], {want}, {seconds})\n")
    (tmp_path / "main_test.flow").write_text("\n".join(tests))
    done = flow_test(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(cases)} passed, 0 failed" in done.stdout
