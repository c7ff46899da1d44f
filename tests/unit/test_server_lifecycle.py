"""Process handling of VllmServer and ServerPool, with a stand-in process.

What vLLM itself serves is tested against vLLM in tests/integration.
"""

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_specdec.serving.ports import claim_port
from pytest_specdec.serving.pool import ServerPool
from pytest_specdec.serving.server import ServerStartError, VllmServer, tagged_pids
from pytest_specdec.config.spec import ServerSpec

FAKE = str(Path(__file__).resolve().parents[1] / "fake_server.py")


def fake_command(port, model="m", mode="ok"):
    return [sys.executable, FAKE, "--port", str(port), "--served-model-name", model, "--mode", mode]


def start_fake(tmp_path, mode="ok", timeout=20.0, stop_timeout=5.0):
    claim = claim_port()
    server = VllmServer(
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
