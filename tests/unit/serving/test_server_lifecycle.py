"""Process handling of ManagedServer and ServerPool, with a stand-in process.

What vLLM itself serves is tested against vLLM in tests/integration.
"""

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_specdec.serving.ports import claim_port
from pytest_specdec.serving.pool import ServerPool
from pytest_specdec.serving.server import ManagedServer, ServerStartError, tagged_pids
from pytest_specdec.config.spec import ServerSpec
from tests.support import SUPPORT

FAKE = str(SUPPORT / "fake_server.py")


def fake_command(port, model="m", mode="ok"):
    return [sys.executable, FAKE, "--port", str(port), "--served-model-name", model, "--mode", mode]


def start_fake(tmp_path, mode="ok", timeout=20.0, stop_timeout=5.0):
    claim = claim_port()
    server = ManagedServer(
        ServerSpec("m"),
        fake_command(claim.port, mode=mode),
        claim,
        "127.0.0.1",
        tmp_path / "server.log",
        startup_timeout=timeout,
        stop_timeout=stop_timeout,
    )
    return server, server.start


def test_ready_server_serves_then_stops_with_nothing_left(tmp_path):
    server, start = start_fake(tmp_path)
    start()
    try:
        assert server.alive and server.startup_seconds > 0
        assert server.spec_decode_counters().num_drafts == 5.0
        assert tagged_pids(server.tag) == [server.pid]
    finally:
        server.stop()
    assert not server.alive and tagged_pids(server.tag) == []
    assert server.log_path.read_text().startswith("$ " + sys.executable)


def test_exit_during_start_fails_fast_with_the_log_tail(tmp_path):
    server, start = start_fake(tmp_path, mode="exit", timeout=60)
    began = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        start()
    assert time.monotonic() - began < 15
    message = str(info.value)
    assert "exited with code 3 during start-up" in message
    assert "fake complaint about the speculative config" in message
    assert str(server.log_path) in message


def test_start_timeout_stops_the_process(tmp_path):
    server, start = start_fake(tmp_path, mode="hang", timeout=2)
    with pytest.raises(ServerStartError, match="not ready within 2 s"):
        start()
    assert not server.alive and tagged_pids(server.tag) == []


def test_slow_server_is_waited_for(tmp_path):
    server, start = start_fake(tmp_path, mode="slow")
    start()
    server.stop()
    assert server.startup_seconds >= 1.5


def test_a_server_for_another_model_is_refused(tmp_path):
    server, start = start_fake(tmp_path, mode="wrong-model")
    with pytest.raises(ServerStartError, match=r"serves \['someone-else'\], not 'm'"):
        start()
    assert not server.alive


def test_sigterm_ignored_escalates_to_sigkill(tmp_path):
    server, start = start_fake(tmp_path, mode="ignore-term", stop_timeout=1)
    start()
    began = time.monotonic()
    server.stop()
    assert not server.alive and time.monotonic() - began < 10
    assert server.process.returncode == -9


def test_children_that_outlive_the_parent_are_killed(tmp_path):
    server, start = start_fake(tmp_path, mode="child")
    start()
    assert len(tagged_pids(server.tag)) == 2
    server.stop()
    assert tagged_pids(server.tag) == []


def test_port_claims_are_exclusive_until_released():
    claims = [claim_port() for _ in range(20)]
    assert len({c.port for c in claims}) == 20
    for claim in claims:
        claim.release()


def pool_for(tmp_path, mode_of=lambda spec: "ok"):
    return ServerPool(
        "cpu",
        tmp_path,
        launcher=lambda launch: fake_command(launch.port, launch.spec.model, mode_of(launch.spec)),
        startup_timeout=20,
        stop_timeout=5,
        model_resolver=lambda name: name,
    )


def test_pool_reuses_by_config_and_runs_one_at_a_time(tmp_path):
    pool = pool_for(tmp_path)
    try:
        a, b = ServerSpec("a"), ServerSpec("b")
        first = pool.get(a)
        assert pool.get(ServerSpec("a", origin="another test")) is first
        second = pool.get(b)
        assert not first.alive and second.alive
        pool.get(a)
        assert pool.starts == {a.key: 2, b.key: 1}
        assert [r.spec.model for r in pool.history] == ["a", "b", "a"]
    finally:
        pool.close()
    assert not any(r for r in (first, second) if r.alive)


def test_pool_remembers_a_failed_start(tmp_path):
    pool = pool_for(tmp_path, mode_of=lambda spec: "exit" if spec.model == "bad" else "ok")
    try:
        with pytest.raises(ServerStartError, match="exited with code 3"):
            pool.get(ServerSpec("bad"))
        began = time.monotonic()
        with pytest.raises(ServerStartError, match="failed earlier in this session"):
            pool.get(ServerSpec("bad"))
        assert time.monotonic() - began < 1
        assert pool.starts[ServerSpec("bad").key] == 1
        assert pool.get(ServerSpec("good")).alive
    finally:
        pool.close()


def test_pool_restarts_a_server_that_died(tmp_path):
    events = []
    pool = pool_for(tmp_path)
    pool.on_event = events.append
    try:
        first = pool.get(ServerSpec("a"))
        os.killpg(first.pid, 9)
        first.process.wait()
        second = pool.get(ServerSpec("a"))
        assert second is not first and second.alive
        assert any("died" in e for e in events)
    finally:
        pool.close()


def test_a_bad_launch_command_is_refused(tmp_path):
    pool = ServerPool("cpu", tmp_path, launcher=lambda launch: "vllm serve m", model_resolver=str)
    with pytest.raises(ServerStartError, match="must be a list of strings"):
        pool.get(ServerSpec("m"))
    pool.close()


def test_a_root_cause_above_the_tail_is_quoted(tmp_path):
    server, start = start_fake(tmp_path, mode="exit-late")
    with pytest.raises(ServerStartError) as info:
        start()
    message = str(info.value)
    assert (
        "--- exception lines earlier in the log ---\nERROR 11-22 [worker.py:9] ValueError: the real root cause"
        in message
    )
    assert "is only a warning" not in message
    assert message.rstrip().endswith("RuntimeError: Engine core initialization failed. See root cause above.")


def test_an_engine_without_per_request_metrics_is_said_once_and_not_asked_for(tmp_path, monkeypatch):
    from pytest_specdec.engines.vllm import Vllm

    monkeypatch.setattr(Vllm, "per_request_metrics_available", lambda self, python=None: False)
    events, launches = [], []
    pool = ServerPool(
        "cpu",
        tmp_path,
        launcher=lambda launch: launches.append(launch) or "not a list",
        model_resolver=str,
        on_event=events.append,
    )
    for _ in range(2):
        with pytest.raises(ServerStartError):
            pool.get(ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 3}))
    pool.close()
    said = [e for e in events if "--per-request-spec-decode-metrics" in e]
    assert len(said) == 1 and "estimated from the tokens in each streamed chunk" in said[0]
    assert launches and not any(launch.per_request_metrics for launch in launches)


def test_a_process_still_exiting_is_told_from_a_reused_pid_and_a_zombie():
    import os
    import subprocess

    from pytest_specdec.serving.server import process_start, still_exiting

    me = os.getpid()
    state, start = process_start(me)
    assert state in ("R", "S") and still_exiting({me: start}) == [me]  # the very process, alive
    assert still_exiting({me: start + 1}) == []  # the pid now names another process: reused, not a leak
    child = subprocess.Popen(["true"])
    child_start = process_start(child.pid)
    while (found := process_start(child.pid)) and found[0] != "Z":  # exited, not yet reaped: a zombie
        pass
    assert still_exiting({child.pid: child_start[1]}) == [] if child_start else True
    child.wait()
    assert process_start(child.pid) is None


def process_state(pid):
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def parking_pool(tmp_path, limit=2, available=64 * 1024**3, mode="child"):
    memory = {"available": available}
    pool = ServerPool(
        "cpu",
        tmp_path,
        launcher=lambda launch: fake_command(launch.port, launch.spec.model, mode),
        startup_timeout=20,
        stop_timeout=5,
        model_resolver=lambda name: name,
        park_limit=limit,
        memory_available=lambda: memory["available"],
    )
    return pool, memory


def test_a_parked_server_is_resumed_for_its_configuration_not_started_again(tmp_path):
    events = []
    pool, _ = parking_pool(tmp_path)
    pool.on_event = events.append
    try:
        a, b = ServerSpec("a"), ServerSpec("b")
        first = pool.get(a)
        deadline = time.monotonic() + 10
        while len(tagged_pids(first.tag)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the forked child (an engine core's stand-in)
        (child,) = [pid for pid in tagged_pids(first.tag) if pid != first.pid]
        second = pool.get(b)
        # Parked: every process but the one launched is stopped (no CPU), and the server is kept.
        assert first.alive and first.paused and second.alive and not second.paused
        assert process_state(child) == "T" and process_state(first.pid) != "T"
        assert list(pool.parked) == [a.key]
        assert pool.get(ServerSpec("a", origin="another test")) is first
        assert not first.paused and process_state(child) != "T"
        assert list(pool.parked) == [b.key] and second.paused
        assert pool.starts == {a.key: 1, b.key: 1} and pool.resumes == {a.key: 1}
        assert f"resumed {a.label()}: parked, not started again" in events
        assert pool.history[0].describe().endswith("; resumed 1 time after parking")
        assert "resumed" not in pool.history[1].describe()
    finally:
        pool.close()
    # Closing stops the parked server too, its stopped child included (a SIGTERM waits on a stopped process).
    assert not first.alive and not second.alive
    assert tagged_pids(first.tag) == [] and tagged_pids(second.tag) == []


def test_parking_keeps_at_most_its_limit_and_stops_what_memory_cannot_hold(tmp_path):
    pool, memory = parking_pool(tmp_path, limit=1)
    try:
        a, b, c = ServerSpec("a"), ServerSpec("b"), ServerSpec("c")
        first, second = pool.get(a), pool.get(b)
        third = pool.get(c)  # b parked, a (the oldest) stopped: one parked at most
        assert list(pool.parked) == [b.key] and not first.alive and second.paused
        memory["available"] = 1024**3  # short of memory: the next one is stopped, and the parked one too
        fourth = pool.get(a)
        assert not third.alive and not second.alive and pool.parked == {} and fourth.alive
        assert pool.starts == {a.key: 2, b.key: 1, c.key: 1} and not pool.resumes
    finally:
        pool.close()


def test_beyond_its_limit_the_pool_stops_a_parked_sd_server_before_a_reference(tmp_path):
    pool, _ = parking_pool(tmp_path, limit=2)
    try:
        ngram = {"method": "ngram", "num_speculative_tokens": 4}
        reference, first, second, third = (
            ServerSpec("a"),
            ServerSpec("a", speculative_config=ngram),
            ServerSpec("a", speculative_config={**ngram, "num_speculative_tokens": 3}),
            ServerSpec("a", speculative_config={**ngram, "num_speculative_tokens": 2}),
        )
        kept = pool.get(reference)
        for spec in (first, second, third):
            pool.get(spec)
        # The reference was parked first, yet the SD server parked first is the one stopped.
        assert list(pool.parked) == [reference.key, second.key] and kept.alive
        assert pool.get(reference) is kept
    finally:
        pool.close()


def test_stop_running_stops_the_parked_servers_too(tmp_path):
    # A test with servers of its own stops the pool first (the main job, the builds tests): a parked server
    # would still hold its memory and its processes beside them.
    pool, _ = parking_pool(tmp_path)
    try:
        first = pool.get(ServerSpec("a"))
        second = pool.get(ServerSpec("b"))
        assert first.paused and list(pool.parked) == [ServerSpec("a").key]
        pool.stop_running()
        assert pool.current is None and pool.parked == {} and not first.alive and not second.alive
        assert tagged_pids(first.tag) == [] and tagged_pids(second.tag) == []
    finally:
        pool.close()


def test_without_parking_the_pool_stops_what_it_leaves(tmp_path):
    def stops_what_it_leaves(pool):
        try:
            first = pool.get(ServerSpec("a"))
            pool.get(ServerSpec("b"))
            assert not first.alive and pool.parked == {}
        finally:
            pool.close()

    stops_what_it_leaves(parking_pool(tmp_path, limit=0)[0])
    # A server of one process (llama.cpp's) has nothing to stop but the process it would keep running: the
    # pool stops it as before.
    stops_what_it_leaves(parking_pool(tmp_path, mode="ok")[0])


def test_a_server_whose_drafter_remembers_requests_is_stopped_not_parked(tmp_path):
    pool, _ = parking_pool(tmp_path)
    try:
        suffix = ServerSpec("a", speculative_config={"method": "suffix", "num_speculative_tokens": 4})
        ngram = ServerSpec("a", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
        assert suffix.remembers_requests and not ngram.remembers_requests and not suffix.reference().remembers_requests
        first = pool.get(suffix)
        pool.get(ngram)
        assert not first.alive and pool.parked == {}
        pool.get(suffix)
        assert list(pool.parked) == [ngram.key] and pool.starts[suffix.key] == 2
    finally:
        pool.close()


def test_a_parked_server_that_died_is_started_again(tmp_path):
    pool, _ = parking_pool(tmp_path)
    try:
        a = ServerSpec("a")
        first = pool.get(a)
        pool.get(ServerSpec("b"))
        os.kill(first.pid, 9)
        first.process.wait(timeout=5)
        again = pool.get(a)
        assert again is not first and again.alive and pool.starts[a.key] == 2 and not pool.resumes
    finally:
        pool.close()


def test_a_server_started_anew_replaces_the_running_or_parked_one_of_its_configuration(tmp_path):
    pool, _ = parking_pool(tmp_path, limit=1)
    try:
        a, b = ServerSpec("a"), ServerSpec("b")
        first = pool.get(a)
        again = pool.start_anew(a)  # running: stopped, and started afresh
        assert again is not first and again.alive and not first.alive
        pool.get(b)  # a parked
        assert list(pool.parked) == [a.key]
        third = pool.start_anew(a)  # parked: stopped, not resumed
        assert third is not again and not again.alive and third.alive and a.key not in pool.parked
        assert pool.starts == {a.key: 3, b.key: 1} and not pool.resumes
        with pytest.raises(ServerStartError, match="running endpoint: the plugin does not start it anew"):
            ngram = {"method": "ngram", "num_speculative_tokens": 4}
            pool.start_anew(ServerSpec("a", ngram, endpoints=(("speculative", "http://127.0.0.1:9"),)))
    finally:
        pool.close()
