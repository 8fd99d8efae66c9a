"""Models as Tools: every way a chat completions endpoint can answer (docs/cli.md, "Models as Tools"),
streamed and not, through `flow run` against a local endpoint on 127.0.0.1 (tests/model_server.py).

Row 1, the problem map: each scenario must give its one outcome kind (Ok, NotRun, Unknown, Failed,
BadReply), exit 0 or 4, and no traceback. Row 2, random answers: the model's text is random JSON
(or JSON cut short); the verdict must be Ok exactly when the text decodes to a `Plan`, else
BadReply, and the run must replay Matched from its history with nothing bound.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.model_server import Answer, ModelServer, free_port  # noqa: E402

PROGRAM = ROOT / "tests" / "programs" / "model_ask" / "main.flow"
PLAN = '{"steps": ["a", "b"], "done": true}'


def _flow(args: list[str], cwd: Path) -> subprocess.CompletedProcess | None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "FLOW_MODEL")}
    env["OPENAI_API_KEY"] = "sk-reliability"
    try:
        return subprocess.run([sys.executable, "-m", "flowrt.cli", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None  # a hang: counted as a failure


def _run(work: Path, url: str, extra: str, entry: str = "plan") -> tuple[subprocess.CompletedProcess | None, Path]:
    work.mkdir(parents=True)
    shutil.copy(PROGRAM, work / "main.flow")
    (work / "flow.toml").write_text(f'[tools]\n"main" = {{ model = "m", base_url = "{url}"{extra} }}\n')
    return _flow(["run", "main.flow", "--entry", entry, "--input", '{"goal": "g"}', "--runs", "runs", "--allow"], work), work


def _kind(done: subprocess.CompletedProcess | None) -> str:
    if done is None:
        return "hang"
    if "Traceback" in done.stderr:
        return "traceback"
    try:
        value = json.loads(done.stdout)
    except ValueError:
        return f"exit {done.returncode}"
    if "Ok" in value and done.returncode == 0:
        return "Ok"
    if "Err" in value and done.returncode == 4:
        return next(iter(value["Err"]))
    return f"exit {done.returncode}"


SCENARIOS = [
    ("good record", Answer(content=PLAN), "", "Ok"),
    ("not JSON", Answer(content='{"steps": '), "", "BadReply"),
    ("wrong shape", Answer(content='{"steps": [1], "done": true}'), "", "BadReply"),
    ("400", Answer(status=400, error="no"), "", "Failed"),
    ("429", Answer(status=429, error="slow down"), "", "Failed"),
    ("503", Answer(status=503, error="busy"), "", "Unknown"),
    ("refusal", Answer(refusal="no"), "", "Failed"),
    ("slow", Answer(content=PLAN, delay=3), ", timeout = 0.5", "Unknown"),
    ("dropped", Answer(content=PLAN * 3, drop=True), "", "Unknown"),
    ("not a completion", Answer(raw="<html>nginx</html>"), "", "BadReply"),
    ("content filter", Answer(content='{"ste', finish_reason="content_filter"), "", "Failed"),
]


def _problem_map(base: Path) -> dict:
    tried = failures = 0
    wrong: list[str] = []
    with ModelServer() as server:
        for stream in (False, True):
            for name, answer, extra, expected in SCENARIOS:
                server.script.append(answer)
                done, _ = _run(base / f"map-{stream}-{name}", server.url, extra + f", stream = {str(stream).lower()}")
                tried += 1
                got = _kind(done)
                if got != expected:
                    failures += 1
                    wrong.append(f"{name}{' (stream)' if stream else ''}: {got}, not {expected}")
    done, _ = _run(base / "map-not-listening", f"http://127.0.0.1:{free_port()}/v1", "")
    tried += 1
    if _kind(done) != "NotRun":
        failures += 1
        wrong.append(f"not listening: {_kind(done)}, not NotRun")
    return {"check": "model endpoint problems map to their outcome (stream off and on)", "tried": tried,
            "failures": failures, "detail": "; ".join(wrong[:3]) or "each scenario gave its one outcome kind"}


def _random_text(rng: random.Random) -> str:
    """A Plan's JSON, half the time spoiled one way or another."""
    value: object = {"steps": [rng.choice(["a", "b", "ü", "\\n", ""]) for _ in range(rng.randrange(4))],
                     "done": rng.choice([True, False])}
    spoil = rng.randrange(12)
    if spoil == 0:
        del value["done"]
    elif spoil == 1:
        value["extra"] = 1
    elif spoil == 2:
        value["steps"].append(rng.choice([1, None, True, {"a": 1}]))
    elif spoil == 3:
        value["done"] = rng.choice(["yes", 0, None])
    elif spoil == 4:
        value = value["steps"]
    elif spoil == 5:
        value = rng.randrange(-5, 5)
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
    if spoil == 6:
        text = text[: rng.randrange(len(text))]
    return text


def _fits_plan(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return (isinstance(value, dict) and set(value) == {"steps", "done"} and isinstance(value["done"], bool)
            and isinstance(value["steps"], list) and all(isinstance(s, str) for s in value["steps"]))


def _random_answers(base: Path, count: int) -> dict:
    rng = random.Random(15)
    failures = fitting = 0
    wrong: list[str] = []
    with ModelServer() as server:
        for number in range(count):
            text = _random_text(rng)
            stream = number % 2 == 1
            server.script.append(Answer(content=text))
            done, work = _run(base / f"rand-{number}", server.url, f", stream = {str(stream).lower()}")
            expected = "Ok" if _fits_plan(text) else "BadReply"
            fitting += expected == "Ok"
            got = _kind(done)
            replayed = None
            if got in ("Ok", "BadReply"):
                (work / "flow.toml").unlink()
                run_id = next((work / "runs").iterdir()).name
                replayed = _flow(["replay", run_id, "--runs", "runs"], work)
            if got != expected or replayed is None or replayed.stdout.strip() != "Matched":
                failures += 1
                wrong.append(f"{text[:40]!r}: {got}, not {expected}"
                             + ("" if replayed is not None and replayed.stdout.strip() == "Matched" else ", no Matched"))
    return {"check": "random model answers: Ok exactly when they fit, replayed Matched", "tried": count,
            "failures": failures, "detail": "; ".join(wrong[:3]) or f"verdicts agree with a direct check of the text ({fitting} fit, "
                                                          f"{count - fitting} do not)"}


def measure(quick: bool) -> list[dict]:
    base = Path(tempfile.mkdtemp(prefix="flow-models-"))
    try:
        return [_problem_map(base), _random_answers(base, 8 if quick else 60)]
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    for row in measure("--full" not in sys.argv):
        print(json.dumps(row))
