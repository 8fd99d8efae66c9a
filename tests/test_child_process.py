"""The host's view of the sandbox child: framed pipe, isolation, limits, and every way it ends.

Each test launches `tests/sandbox_echo_child.py` (a stand-in for `sandbox.child` that obeys one
command per message) through `flowrt.sandbox_process.Child`, and asserts what the host observes. Every
failure mode must surface as `ChildDied` or `ChildTimeout` within a bounded time, never a hang.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import os
import signal
import time
from pathlib import Path

import pytest

import flowrt.sandbox_launch as launch
import flowrt.sandbox_process as child_module
from flowrt.cpu_contention import CONTENDED_MARKS, WINDOW, Contention
from flowrt.sandbox_process import Child, ChildDied, ChildTimeout
from flowdata import framing
from flowdata.policy import LIMITS, STDERR_TAIL_BYTES

ECHO_CHILD = str(Path(__file__).resolve().with_name("sandbox_echo_child.py"))


def start(**limits) -> Child:
    return Child.start(limits=dataclasses.replace(LIMITS, **limits), argv_tail=[ECHO_CHILD])


def ask(child: Child, message: dict, timeout: float = 5.0) -> dict:
    child.send(message, timeout=timeout)
    return child.recv(timeout=timeout)


def gone(pid: int) -> bool:
    """True once `pid` no longer runs (absent, or a zombie awaiting its new parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_until(predicate, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# -- talking ----------------------------------------------------------------------------------

def test_echo_round_trip():
    """Messages cross the pipe as canonical JSON, unchanged, in order."""
    values = [None, True, 0, -(2**63), 2**63 - 1, "", "héllo ✓", [1, [2, [3]]], {"b": 1, "a": {"z": []}}]
    with start() as child:
        for value in values:
            assert ask(child, {"op": "echo", "value": value}) == {"echo": value}


def test_a_host_with_other_children_says_so_on_what_it_posts_and_does_not_poll(monkeypatch):
    """While this host drives more than one child, each posted frame has BUSY set (the child
    then sleeps rather than polls for the next) and the host's own wait skips its poll."""
    monkeypatch.setattr(launch, "_CPUS", 2)  # two children on two CPUs: not crowded
    first = start()
    first.contention = Contention(lambda: 0)  # this machine's own load must not decide
    try:
        first.send({"op": "next_flags"}, timeout=5)
        first.post({"op": "anything"})
        assert first.recv(timeout=5) == {"busy": False, "exact": False, "crowded": False}
        assert first._spin_for_message() in (True, False)  # alone: the poll may run
        second = start()
        try:
            first.send({"op": "next_flags"}, timeout=5)
            first.post({"op": "big", "n": 2 ** 70})
            assert first.recv(timeout=5) == {"busy": True, "exact": True, "crowded": False}
            assert launch.others_live()
            polled = []
            first._poller = type("Poller", (), {"poll": lambda self, ms: polled.append(ms) or []})()
            assert first._spin_for_message() is False and polled == []
        finally:
            second.kill()
        assert not launch.others_live()
    finally:
        first.kill()


def test_a_host_with_more_children_than_cpus_says_it_is_crowded(monkeypatch):
    """More children than CPUs: each posted frame has CROWDED set beside BUSY (the child sleeps
    on its pipe without first looking), and once the host is down to its CPUs' worth, neither."""
    monkeypatch.setattr(launch, "_CPUS", 1)
    first = start()
    first.contention = Contention(lambda: 0)
    try:
        second = start()
        try:
            first.send({"op": "next_flags"}, timeout=5)
            first.post({"op": "anything"})
            assert first.recv(timeout=5) == {"busy": True, "exact": False, "crowded": True}
        finally:
            second.kill()
        first.send({"op": "next_flags"}, timeout=5)
        first.post({"op": "anything"})
        assert first.recv(timeout=5) == {"busy": False, "exact": False, "crowded": False}
    finally:
        first.kill()


def test_a_host_on_a_machine_with_no_cpu_to_spare_says_so_and_does_not_poll():
    """Alone, but with its thread preempted on wait after wait (a made-up switch counter), the
    host skips its poll and sets BUSY on what it posts; once the switches stop for a window's
    waits, it polls again and the flag is gone."""
    switches = [0]
    with start() as child:
        child.contention = Contention(lambda: switches[0], every=1)
        polled = []
        real_poller = child._poller
        child._poller = type("Poller", (), {"poll": lambda self, ms: polled.append(ms) or []})()
        child.contention.observe()  # the baseline
        for _ in range(CONTENDED_MARKS - 1):  # still polls: a switch or two is no verdict
            switches[0] += 1
            assert child._spin_for_message() is False
        assert polled and not child.contention.contended
        polled.clear()
        switches[0] += 1
        assert child._spin_for_message() is False
        assert child.contention.contended and polled == []
        child._poller = real_poller
        child.send({"op": "next_flags"}, timeout=5)
        child.post({"op": "anything"})
        assert child.recv(timeout=5) == {"busy": True, "exact": False, "crowded": False}
        for _ in range(WINDOW):
            child._spin_for_message()
        assert not child.contention.contended
        child.send({"op": "next_flags"}, timeout=5)
        child.post({"op": "anything"})
        assert child.recv(timeout=5) == {"busy": False, "exact": False, "crowded": False}


def test_an_answer_already_there_leaves_the_hosts_backoff_as_it_was(monkeypatch):
    """Only a poll that waited wears the backoff down: a message already in the pipe at the
    first look (most of them, beside a CPU hog) says nothing of whether polling pays."""
    ticks = iter(range(10 ** 6))
    clock = lambda: next(ticks) * 1e-6  # noqa: E731  a microsecond a look, all of it on the CPU
    with start() as child:
        child.contention = Contention(lambda: 0)
        child._spin._penalty = 8
        with monkeypatch.context() as patch:
            patch.setattr(child_module, "time", type("Clock", (), {"perf_counter": clock, "thread_time": clock}))
            child._poller = type("Poller", (), {"poll": lambda self, ms: [(child._read_fd, 1)]})()
            assert child._spin_for_message() is True
            assert child._spin._penalty == 8
            answers = iter([[], [], [(child._read_fd, 1)]])  # found on the third look
            child._poller = type("Poller", (), {"poll": lambda self, ms: next(answers)})()
            assert child._spin_for_message() is True
            assert child._spin._penalty == 4


def test_many_messages_and_a_large_one():
    """Pipelined messages and a 4 MiB message (many partial reads and writes) arrive whole."""
    big = "x" * (4 * 1024 * 1024)
    with start() as child:
        for i in range(200):
            child.send({"op": "echo", "value": i})
        assert [child.recv(timeout=5)["echo"] for _ in range(200)] == list(range(200))
        assert ask(child, {"op": "echo", "value": big})["echo"] == big


def test_last_message_before_exit_is_delivered_then_death_reported():
    with start() as child:
        assert ask(child, {"op": "last_words"}) == {"bye": True}
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=5)
        assert died.value.returncode == 0 and died.value.signal is None


def test_stray_print_goes_to_stderr_not_into_the_channel():
    """`framing.claim_stdio()` moves the pipe off fd 1, so print() cannot corrupt frames."""
    with start() as child:
        assert ask(child, {"op": "print"}) == {"printed": True}
        assert ask(child, {"op": "echo", "value": 1}) == {"echo": 1}
        assert wait_until(lambda: "stray output on stdout" in child.stderr_tail())


# -- isolation --------------------------------------------------------------------------------

def test_environment_is_empty_and_cwd_is_a_fresh_empty_dir(monkeypatch):
    """Nothing of the host's environment reaches the child; its cwd is empty and removed after."""
    monkeypatch.setenv("FLOW_TEST_SECRET", "do-not-leak")
    with start() as child:
        report = ask(child, {"op": "env"})
        workdir = child.workdir
        assert os.path.isdir(workdir)
    assert "FLOW_TEST_SECRET" not in report["environ"]
    # PYTHONHASHSEED and PYTHONPATH from the host; LC_CTYPE is set by CPython itself (PEP 538).
    assert set(report["environ"]) <= {"PYTHONHASHSEED", "PYTHONPATH", "LC_CTYPE"}
    assert report["environ"]["PYTHONHASHSEED"] == "0"
    # This checkout, then where the host finds the child's packages (the child runs without site).
    assert report["environ"]["PYTHONPATH"] == launch.child_path()
    assert report["environ"]["PYTHONPATH"].split(os.pathsep)[0] == launch.SOURCE_ROOT
    assert os.path.realpath(report["cwd"]) == os.path.realpath(workdir)
    assert report["listing"] == []
    assert not os.path.exists(workdir)


def test_isolated_flags_inherited_fds_and_fixed_hash_seed():
    """-s -P: no user site, no script dir on sys.path; only stdio inherited; same str hash."""
    with start() as first, start() as second:
        a, b = ask(first, {"op": "env"}), ask(second, {"op": "env"})
    assert a["flags"] == {"no_user_site": 1, "safe_path": True, "hash_randomization": 0}
    # 0-2 stdio, 3-4 the channel's duplicates, 5 the listing of /proc/self/fd itself.
    assert set(a["fds"]) <= {0, 1, 2, 3, 4, 5}
    assert a["hash"] == b["hash"]


def test_network_isolation_is_reported_truthfully():
    """`network_isolated` is True exactly when the child sits in another network namespace."""
    with start() as child:
        report = ask(child, {"op": "env"})
    assert child.network_isolated == (report["net"] != os.readlink("/proc/self/ns/net"))


def test_isolated_child_cannot_reach_the_network():
    """In a new network namespace there is no route out: connecting fails with ENETUNREACH."""
    with start() as child:
        if not child.network_isolated:
            pytest.skip("this kernel refused unshare(CLONE_NEWNET)")
        reply = ask(child, {"op": "connect", "host": "192.0.2.1", "port": 80})
    assert reply == {"connected": False, "errno": errno.ENETUNREACH}


def test_files_cannot_be_written():
    """RLIMIT_FSIZE=0: a write to a file fails with EFBIG (CPython ignores SIGXFSZ)."""
    with start() as child:
        assert ask(child, {"op": "write_file"}) == {"wrote": False, "error": errno.EFBIG}


# -- every way the child ends -----------------------------------------------------------------

def test_unbounded_allocation_dies_as_child_died_quickly():
    """A child that allocates without bound hits RLIMIT_AS and is reported, not hung."""
    began = time.monotonic()
    with start(address_space_bytes=256 * 1024 * 1024) as child:
        child.send({"op": "alloc"})
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=10)
    assert time.monotonic() - began < 5
    assert "MemoryError" in died.value.stderr_tail
    assert died.value.returncode == 1
    assert "address-space limit" in str(died.value)


def test_cpu_limit_kills_a_spinning_child():
    """RLIMIT_CPU: a spinning child gets SIGXCPU after its CPU seconds."""
    began = time.monotonic()
    with start(cpu_seconds=1) as child:
        child.send({"op": "spin"})
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=10)
    assert time.monotonic() - began < 5
    assert died.value.signal in (signal.SIGXCPU, signal.SIGKILL)
    assert "CPU" in str(died.value)


def test_spinning_child_times_out_and_is_killed():
    """recv(timeout) raises ChildTimeout on time; kill() then ends the child for good."""
    with start() as child:
        child.send({"op": "spin"})
        began = time.monotonic()
        with pytest.raises(ChildTimeout, match="did not answer within 0.3 s"):
            child.recv(timeout=0.3)
        assert 0.25 < time.monotonic() - began < 1.5
        assert child.kill() == -signal.SIGKILL
        assert gone(child.pid)
        with pytest.raises(ChildDied):
            child.recv(timeout=1)


@pytest.mark.parametrize("sig", [signal.SIGABRT, signal.SIGSEGV, signal.SIGTERM])
def test_child_killed_by_a_signal_is_reported(sig):
    with start() as child:
        child.send({"op": "signal", "signal": int(sig)})
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=5)
    assert died.value.signal == sig and died.value.returncode is None
    assert sig.name in str(died.value)


def test_child_killed_from_outside_is_reported():
    with start() as child:
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=5)
    assert died.value.signal == signal.SIGKILL
    assert "outside the host's control" in str(died.value)


def test_exit_code_and_stderr_tail_are_reported():
    with start() as child:
        child.send({"op": "exit", "code": 7, "stderr": "boom: the scheduler faulted\n"})
        with pytest.raises(ChildDied) as died:
            child.recv(timeout=5)
    assert died.value.returncode == 7
    assert "boom: the scheduler faulted" in died.value.stderr_tail
    assert "last stderr line: boom" in str(died.value)


def test_child_that_closes_its_pipe_but_lingers_is_killed_and_reported(monkeypatch):
    monkeypatch.setattr(child_module, "EXIT_GRACE", 0.2)
    with start() as child:
        child.send({"op": "close", "sleep": 30})
        began = time.monotonic()
        with pytest.raises(ChildDied, match="closed its pipe.*host killed it") as died:
            child.recv(timeout=5)
        assert time.monotonic() - began < 2
    assert died.value.signal == signal.SIGKILL
    assert gone(child.pid)


def test_partial_frame_then_exit_is_child_died():
    with start() as child:
        child.send({"op": "partial"})
        with pytest.raises(ChildDied, match="mid-frame") as died:
            child.recv(timeout=5)
    assert died.value.returncode == 3


def test_send_to_a_dead_child_is_child_died():
    with start() as child:
        child.send({"op": "exit", "code": 0})
        assert wait_until(lambda: child._exited())
        with pytest.raises(ChildDied):
            for _ in range(100):  # the first writes may still land in the pipe buffer
                child.send({"op": "echo", "value": "x" * 4096}, timeout=1)
        with pytest.raises(ChildDied):
            child.send({"op": "echo", "value": 1})


def test_send_times_out_when_the_child_stops_reading():
    """A child that does not read cannot block the host: send(timeout) raises ChildTimeout."""
    with start() as child:
        child.send({"op": "sleep", "seconds": 30})
        with pytest.raises(ChildTimeout, match="accept a message"):
            child.send({"op": "echo", "value": "x" * (1024 * 1024)}, timeout=0.3)
        assert wait_until(lambda: gone(child.pid))  # a half-written frame killed it


def test_kill_takes_the_whole_process_group():
    """kill() SIGKILLs the child's process group: a grandchild it forked dies too."""
    with start(processes=None) as child:
        grandchild = ask(child, {"op": "fork"})["grandchild"]
        assert not gone(grandchild)
        assert os.getpgid(grandchild) == child.pid
        child.kill()
    assert wait_until(lambda: gone(grandchild))


def test_stderr_is_drained_and_bounded():
    """A chatty child never blocks on stderr; the host keeps only the last 64 KiB."""
    with start() as child:
        assert ask(child, {"op": "stderr_flood", "kib": 300}) == {"flooded": True}
        assert wait_until(lambda: child.stderr_tail().endswith("THE END\n"))
        assert len(child.stderr_tail().encode()) <= STDERR_TAIL_BYTES


def test_context_manager_reaps_and_cleans_up():
    with start() as child:
        pid, workdir = child.pid, child.workdir
    assert child.returncode is not None
    assert gone(pid) and not os.path.exists(workdir)


def test_close_lets_the_child_exit_on_end_of_input():
    """close() ends the child's input; the child sees EOF (recv() -> None) and exits 0."""
    child = start()
    assert child.close(grace=3) == 0


# -- frame size ---------------------------------------------------------------------------------

def test_incoming_frame_over_the_limit_is_refused_and_the_child_killed():
    with start() as child:
        child.send({"op": "huge_header"})
        with pytest.raises(framing.FrameTooLarge, match="over the 67108864-byte limit"):
            child.recv(timeout=5)
        assert child.returncode == -signal.SIGKILL


def test_outgoing_frame_over_the_limit_is_refused_before_writing():
    with start() as child:
        with pytest.raises(framing.FrameTooLarge, match="exceeds the 67108864-byte frame limit"):
            child.send({"v": "x" * framing.MAX_FRAME})
        assert ask(child, {"op": "echo", "value": 1}) == {"echo": 1}


# -- the channel alone ----------------------------------------------------------------------------

def test_encoding_is_canonical_json_with_a_length_header():
    frame = framing.encode({"b": [1, 2], "a": {"d": None, "c": "é"}})
    body = '{"a":{"c":"é","d":null},"b":[1,2]}'.encode()
    assert frame == len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("value", [
    [1], None, "text",                                   # not an object
    {"when": datetime.datetime(2026, 1, 1)},             # not JSON
    {1: "int key"}, {"s": {1, 2}}, {"big": 2**64, "key": {1: 2}}, {"big": 2**64, "nan": float("nan")},
    {"big": -2**64, "sub": type("Text", (str,), {})("x")},
])
def test_encoding_refuses_what_is_not_a_json_object(value):
    with pytest.raises(framing.ChannelError):
        framing.encode(value)


def test_blocking_recv_returns_none_at_eof_and_refuses_truncation():
    read_fd, write_fd = os.pipe()
    try:
        framing.send(write_fd, {"k": 1})
        os.write(write_fd, framing.HEADER.pack(10) + b"{")
        os.close(write_fd)
        assert framing.recv(read_fd) == {"k": 1}
        with pytest.raises(framing.ChannelError, match="inside a frame"):
            framing.recv(read_fd)
    finally:
        os.close(read_fd)
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    assert framing.recv(read_fd) is None
    os.close(read_fd)


def test_frame_reader_decodes_byte_by_byte():
    data = framing.encode({"a": 1}) + framing.encode({"b": [2]})
    reader = framing.FrameReader()
    messages = []
    for i in range(len(data)):
        messages += reader.feed(data[i:i + 1])
    assert messages == [{"a": 1}, {"b": [2]}] and not reader.mid_frame


def test_frame_reader_refuses_an_oversized_header_at_once():
    with pytest.raises(framing.FrameTooLarge):
        framing.FrameReader().feed(framing.HEADER.pack(framing.MAX_FRAME + 1))
