"""The generated code a new sandbox child warms up on (sandbox/warmup.py) is what flowc generates
from its Flow source today, the loader accepts it, and it leaves nothing a run can see."""

from __future__ import annotations

import flowc
from sandbox import runtime as R
from sandbox import warmup
from sandbox.intrinsics import INTRINSICS
from sandbox.loader import load


def generated_now() -> str:
    files = {"warmup.flow": warmup.FLOW}

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    compiled = flowc.compile("warmup.flow", read, disk=None)
    assert compiled.ok, compiled.diagnostics
    (module,) = [m for m in compiled.generated.modules if m.key == "m_warmup"]
    return module.source


def test_the_warm_up_code_is_what_flowc_generates_from_its_source():
    # When code generation changes, regenerate GENERATED from FLOW (this function's result).
    assert warmup.GENERATED == generated_now()


def test_the_loader_accepts_it_and_it_changes_nothing_it_is_given():
    injected = dict(R.names())
    injected.update(INTRINSICS)
    injected.update(R.TASK_INTRINSICS)
    before = dict(injected)
    warmup.warm_up(load, injected)
    warmup.warm_up(load, injected)  # as often as it likes
    assert injected == before


def test_a_child_that_warmed_up_runs_its_program_as_one_that_did_not(tmp_path):
    """A child that waited past `WARM_AFTER_SECONDS` (and so warmed up) and one handed its
    program at once record the same facts and end the same way."""
    import time

    from flowrt.run import run
    from flowrt.sandbox_process import Child
    from flowrt.store import open_store
    from sandbox.child import WARM_AFTER_SECONDS

    program = tmp_path / "warmup.flow"
    program.write_text(warmup.FLOW)
    histories = []
    for wait in (0.0, WARM_AFTER_SECONDS * 20):
        child = Child.start()
        time.sleep(wait)
        outcome = run(str(program), input_text='{"n": 3}', runs_dir=str(tmp_path / "runs"),
                      python_tools={"warmup.echo": lambda n: n * 10}, durability="none", child=child)
        assert outcome.exit_code == 0, outcome
        with open_store(str(tmp_path / "runs")).open(outcome.run_id, for_append=False) as store:
            histories.append([(f["kind"], f.get("outcome")) for f in store.facts()[1:]])
        assert outcome.output == b"75"  # area(Rect(n, 2)) + echo(n) for n = 3, 2, 1 (72), and the point moved to x = 3
    assert histories[0] == histories[1]
