"""The host's verdict on whether the machine has a CPU to spare (flowrt/cpu_contention.py), fed
made-up switch counters: it must follow the counts, never the clock."""

from __future__ import annotations

from hypothesis import given, strategies as st

from flowrt import cpu_contention
from flowrt.cpu_contention import CONTENDED_MARKS, SAMPLE_EVERY, WINDOW, Contention


def fed(counts):
    """A Contention reading `counts` in turn, and the verdicts it gives on each."""
    values = iter(counts)
    contention = Contention(lambda: next(values), every=1)
    return contention, [contention.observe() for _ in counts]


def test_a_quiet_machine_is_never_contended():
    _, verdicts = fed([7] * 100)
    assert not any(verdicts)


def test_a_switch_on_every_wait_is_contention_from_the_third_on():
    # the first wait only sets the baseline (its count may be another thread's history)
    _, verdicts = fed(range(1000, 1000 + 10))
    assert verdicts == [False] * CONTENDED_MARKS + [True] * (10 - CONTENDED_MARKS)


def test_contention_ends_once_the_window_has_passed_without_switches():
    busy = list(range(20))
    quiet = [busy[-1]] * (WINDOW + 1)
    _, verdicts = fed(busy + quiet)
    assert verdicts[len(busy) - 1]
    # the switches age out one a wait: contended until fewer than CONTENDED_MARKS are left
    after = verdicts[len(busy):]
    assert after == [True] * (WINDOW - CONTENDED_MARKS) + [False] * (CONTENDED_MARKS + 1)


def test_lone_switches_spread_out_are_no_contention():
    counts, total = [], 0
    for wait in range(500):
        if wait % (WINDOW // (CONTENDED_MARKS - 1) + 1) == 0:
            total += 1  # CONTENDED_MARKS - 1 switches in any window, never more
        counts.append(total)
    _, verdicts = fed(counts)
    assert not any(verdicts)


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=200))
def test_the_verdict_is_the_count_of_switching_waits_in_the_window(steps):
    """Against a plain model: contended iff at least CONTENDED_MARKS of the last WINDOW waits
    (after the first, which sets the baseline) saw the counter move, by however much."""
    counts, total = [], 0
    for step in steps:
        total += step
        counts.append(total)
    _, verdicts = fed(counts)
    moved = [False] + [counts[i] != counts[i - 1] for i in range(1, len(counts))]
    expected = [sum(moved[max(1, i - WINDOW + 1):i + 1]) >= CONTENDED_MARKS if i else False
                for i in range(len(counts))]
    assert verdicts == expected


def test_the_counter_is_read_once_every_few_waits_and_the_verdict_holds_between():
    reads = []

    def read():
        reads.append(len(reads))
        return len(reads)  # a switch between every two readings

    contention = Contention(read)
    verdicts = [contention.observe() for _ in range(SAMPLE_EVERY * (CONTENDED_MARKS + 2))]
    assert len(reads) == CONTENDED_MARKS + 2
    # the first reading is the baseline; the CONTENDED_MARKS-th after it gives the verdict
    first = SAMPLE_EVERY * CONTENDED_MARKS
    assert verdicts == [False] * first + [True] * (len(verdicts) - first)


def test_the_default_counter_is_this_threads_involuntary_switches():
    assert isinstance(cpu_contention.involuntary_switches(), int)
    contention = Contention()
    assert contention.observe() is False  # the baseline
    assert contention.contended is False
