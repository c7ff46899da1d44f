"""One schedule sent by several client processes, against the streaming test server of test_client."""

import gc
import multiprocessing
import os
import signal

import pytest

from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workers import assign, split_concurrency
from tests.support.stream_server import P, StreamServer, stream
from tests.support.fault_server import (
    trtllm_refusal,
    vllm_refusal,
)  # the strict fakes' copies of each engine's validation


@pytest.fixture(scope="module")
def server():
    server = StreamServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _fresh(server):
    server.reset()


@pytest.mark.parametrize(
    "cap, workers, caps", [(None, 3, [None, None, None]), (5, 2, [3, 2]), (2, 4, [1, 1]), (1, 2, [1])]
)
def test_a_cap_is_split_into_worker_caps_that_add_up_to_it(cap, workers, caps):
    assert split_concurrency(cap, workers) == caps


def test_each_worker_gets_a_share_in_proportion_to_its_cap_across_the_whole_schedule():
    offsets = [0.1 * i for i in range(12)]
    shares = assign(offsets, [2, 1])
    assert [len(s) for s in shares] == [8, 4]
    assert sorted(i for s in shares for i, _ in s) == list(range(12))
    assert shares[1][0][0] < 4 and shares[1][-1][0] >= 8  # the small worker's share spans the schedule
    assert all(offset == offsets[i] for s in shares for i, offset in s)


def test_two_workers_send_every_request_once_within_the_cap_and_report_in_order(server):
    server.hold_until_in_flight = 3  # the cap read, not how fast a loaded machine sent the third request
    server.respond = lambda p: stream([[1], [2, 3]], first=0.05, gap=0.02)
    done = []
    run = generate_load(
        server.url,
        "m",
        [P(f"p{i}", 1, 3) for i in range(5)],
        AccessPattern("c", num_prompts=12, max_concurrency=3),
        workers=2,
        on_progress=lambda d, t: done.append((d, t)),
    )
    assert [r.index for r in run.records] == list(range(12)) and all(r.success for r in run.records)
    assert [r.token_ids for r in run.records] == [[1, 2, 3]] * 12
    assert sorted(p["prompt"] for _, _, p in server.requests) == sorted(f"p{i % 5}" for i in range(12))
    assert server.max_in_flight == 3
    assert done == [(i, 12) for i in range(1, 13)]
    assert run.duration_s >= 4 * 0.07 - 0.01  # twelve requests of 70 ms, three at a time


def test_workers_follow_the_one_arrival_schedule_from_one_start(server):
    server.respond = lambda p: stream([[1]])
    pattern = AccessPattern("a", request_rate=20, burstiness=1.0, num_prompts=10)
    offsets = pattern.arrival_offsets(seed=4)
    run = generate_load(server.url, "m", [P("x", 1, 1)], pattern, seed=4, workers=3)
    sent = [r.start_time - run.start_perf for r in run.records]
    for offset, at in zip(offsets, sent):
        assert offset - 0.002 <= at <= offset + 0.05
    assert max(r.dispatch_lag for r in run.records) < 0.05
    assert run.duration_s >= offsets[-1]


def test_a_worker_killed_mid_run_fails_its_requests_by_name_and_the_rest_stand(server):
    server.respond = lambda p: stream([[1], [2]], first=0.2)
    killed = []

    def kill_worker_1(done, total):
        for child in multiprocessing.active_children():
            if child.name == "specdec-client-1" and not killed:
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    run = generate_load(
        server.url,
        "m",
        [P("x", 1, 2)],
        AccessPattern("c", num_prompts=8, max_concurrency=2),
        workers=2,
        on_progress=kill_worker_1,
    )
    assert killed and len(run.records) == 8
    lost = [r for r in run.records if not r.success]
    assert [r.index for r in lost] == [1, 3, 5, 7]
    assert all(r.error == "client worker 1 failed: exited with code -9 before reporting" for r in lost), lost[0].error
    assert all(r.success for r in run.records if r.index % 2 == 0), [r.error for r in run.records]
    assert not multiprocessing.active_children()


def test_one_worker_is_the_in_process_client(server, monkeypatch):
    import pytest_specdec.load.workers as workers

    monkeypatch.setattr(workers, "run_in_workers", lambda *a, **k: pytest.fail("spawned for one worker"))
    run = generate_load(server.url, "m", [P("x", 1, 2)], AccessPattern("c", num_prompts=2), workers=1)
    assert all(r.success for r in run.records)


def salts(server):
    return [payload.get("cache_salt") for _, _, payload in server.requests]


def test_each_run_has_a_prompt_cache_of_its_own_on_vllm_and_one_across_its_workers(server):
    # A shared reference served earlier runs' prompts from its prefix cache while SD prefilled them: each run
    # now sends one salt of its own, in every request, and passes vLLM's validation of it.
    server.respond = lambda p: stream([[1]])
    pattern = AccessPattern("c", num_prompts=3, max_concurrency=3)
    generate_load(server.url, "m", [P("x", 1, 1)], pattern)
    first = salts(server)
    assert len(set(first)) == 1 and first[0] and vllm_refusal(server.requests[0][2]) is None
    server.reset()
    generate_load(server.url, "m", [P("x", 1, 1)], pattern)
    (second,) = set(salts(server))
    assert second != first[0]
    server.reset()
    generate_load(server.url, "m", [P("x", 1, 1)], AccessPattern("c", num_prompts=6), workers=2)
    assert len(set(salts(server))) == 1 and None not in salts(server) and second not in salts(server)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_that_shares_the_servers_cache_or_an_engine_without_salts_sends_none(server, workers):
    server.respond = lambda p: stream([[1]])
    pattern = AccessPattern("c", num_prompts=2)
    generate_load(server.url, "m", [P("x", 1, 1)], pattern, isolate_cache=False, workers=workers)
    generate_load(server.url, "m", [P("x", 1, 1)], pattern, engine="trtllm", workers=workers)
    assert salts(server) == [None] * 4
    assert trtllm_refusal(server.requests[-1][2]) is None  # trtllm-serve refuses any field it does not know


def test_vllms_validation_of_a_salt_is_the_fakes():
    assert vllm_refusal({"cache_salt": ""}) and vllm_refusal({"cache_salt": "a/b"}) and vllm_refusal({"cache_salt": 7})
    assert vllm_refusal({"cache_salt": "x" * 129}) and vllm_refusal({}) is None


def test_a_run_freezes_what_the_process_held_before_it_and_lifts_the_freeze_after(server):
    # A full collection of the session's process stalled the event loop for seconds: during a run the
    # collector walks only what the run makes.
    held = gc.get_freeze_count()
    seen = []

    def respond(payload):
        seen.append(gc.get_freeze_count())
        return stream([[1], [2]])

    server.respond = respond
    run = generate_load(server.url, "m", [P("x", 1, 2)], AccessPattern("c", num_prompts=3, max_concurrency=2))
    assert all(r.success for r in run.records)
    assert len(seen) == 3 and all(count > held for count in seen), (held, seen)
    assert gc.get_freeze_count() == held
