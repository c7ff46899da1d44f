"""run_load against a tiny streaming HTTP/1.1 server on loopback.

The server speaks just enough of vLLM's streamed /v1/completions (chunked
transfer encoding, SSE events, a final usage event) to time the client
exactly: each test scripts the events and the delays between them.
"""

import asyncio
import json
import math
import socket
import time
from dataclasses import dataclass

import pytest

from pytest_specdec.load.client import count_output_tokens, generate_load, run_load
from pytest_specdec.load.transport import _SSE
from pytest_specdec.load.patterns import AccessPattern
from tests.support.stream_server import P, Event, Reply, sse, token_event, usage_event, stream, StreamServer


@pytest.fixture(scope="module")
def _server():
    server = StreamServer()
    yield server
    server.close()


@pytest.fixture
def server(_server):
    _server.reset()
    return _server


def one(n=1, **kw):
    return AccessPattern("t", num_prompts=n, **kw)


def test_timing_tokens_usage_and_payload(server):
    server.respond = lambda p: stream([[1], [2, 3], [4], [5, 6, 7]], first=0.15, gap=0.05, usage=(11, None))
    run = generate_load(server.url, "m", [P("hello", 5, 7)], one())
    (rec,) = run.records
    assert rec.success and rec.error is None
    assert rec.token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert rec.output_tokens == 7 and rec.prompt_len == 11  # usage wins over the Prompt's
    assert rec.text == "<1><2><3><4><5><6><7>"
    assert rec.top_logprobs is None
    # One ITL per event with choices, however many tokens it carries.
    assert len(rec.itl) == 3
    assert 0.15 <= rec.ttft < 0.15 + 0.12
    assert all(0.03 < gap < 0.05 + 0.12 for gap in rec.itl)
    assert rec.latency == pytest.approx(rec.ttft + sum(rec.itl), abs=1e-9)
    assert run.duration_s >= rec.latency and rec.start_time >= run.start_perf
    assert abs(run.started_at - time.time()) < 30
    ((_, path, payload),) = server.requests
    assert path == "/v1/completions"
    salt = payload.pop("cache_salt")  # the run's own prefix cache (test_workers.py checks it further)
    assert isinstance(salt, str) and len(salt) == 32
    assert payload == {
        "model": "m",
        "prompt": "hello",
        "max_tokens": 7,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "return_token_ids": True,
    }


def test_logprobs_requested_and_parsed_per_token(server):
    server.respond = lambda p: stream([[1], [2, 3]], logprobs=True)
    run = generate_load(server.url, "m", [P("x", 1, 3)], one(), logprobs=2, ignore_eos=False, temperature=0.5)
    (rec,) = run.records
    assert rec.top_logprobs == [
        {"<1>": -0.1, "alt": -5.0},
        {"<2>": -0.2, "alt": -5.0},
        {"<3>": pytest.approx(-0.3), "alt": -5.0},
    ]
    payload = server.requests[0][2]
    assert (payload["logprobs"], payload["ignore_eos"], payload["temperature"]) == (2, False, 0.5)


def test_without_usage_counts_token_ids_and_keeps_prompt_len(server):
    server.respond = lambda p: stream([[9, 8], [7]], usage=None)
    (rec,) = generate_load(server.url + "/v1/", "m", [P("x", 5, 3)], one()).records
    assert rec.success and rec.output_tokens == 3 and rec.prompt_len == 5
    assert server.requests[0][1] == "/v1/completions"


def test_without_usage_or_token_ids_the_text_is_counted_never_the_events(server):
    # llama.cpp and older vLLM stream text only; under SD one event carries several tokens,
    # so counting events would undercount.  vllm bench serve tokenizes the text; so does the plugin.
    def bare(payload):
        events = [Event(0.0, [sse({"id": "c", "choices": [{"index": 0, "text": text}]})]) for text in (" a b", " c")]
        return Reply(events=events + [Event(0.0, [sse(b"[DONE]")])])

    server.respond = bare
    (rec,) = generate_load(server.url, "m", [P("x", 5, 3)], one()).records
    assert rec.success and rec.output_tokens == 0 and rec.output_tokens_from == "text"
    words = lambda text, add_special_tokens: type("Encoding", (), {"input_ids": text.split()})()  # noqa: E731
    assert count_output_tokens([rec], lambda: words) == 1 and rec.output_tokens == 3
    assert rec.output_tokens_from == "tokenized text"
    never = lambda: pytest.fail("no record needed the tokenizer")  # noqa: E731
    assert count_output_tokens([rec], never) == 0  # counted already: the tokenizer is not loaded


def test_the_servers_per_request_sd_metrics_are_kept_from_the_last_event(server):
    # vLLM with --per-request-spec-decode-metrics detailed: the final usage chunk carries them.
    per_request = {
        "per_step_accepted": [2, 0],
        "per_step_drafted": [3, 3],
        "num_spec_steps": 2,
        "num_draft_tokens": 6,
        "num_spec_tokens": 3,
        "mean_acceptance_length": 2.0,
    }
    usage = {**usage_event(5, 4), "metrics": {"speculative_decoding": per_request}}
    server.respond = lambda p: Reply(
        events=[
            Event(0.0, [sse(token_event([1]))]),
            Event(0.0, [sse(token_event([2, 3, 4]))]),
            Event(0.0, [sse(usage)]),
            Event(0.0, [sse(b"[DONE]")]),
        ]
    )
    (rec,) = generate_load(server.url, "m", [P("x", 5, 4)], one()).records
    assert rec.spec_decoding == per_request and rec.chunk_tokens == [1, 3]


def test_sse_split_across_writes_comments_and_crlf(server):
    snowman = token_event([42], text="é☃")
    raw = sse(snowman)
    cut = raw.index("☃".encode()) + 1  # in the middle of a multi-byte character
    server.respond = lambda p: Reply(
        events=[
            Event(0.0, [b": ping\n\n", b"da", b"ta: " + raw[6:cut], raw[cut:]], piece_gap=0.03),
            Event(0.0, [b"data: " + json.dumps(token_event([43, 44])).encode() + b"\r\n\r\n"]),
            Event(0.0, [b"event: message\nid: 3\n" + sse(usage_event(4, 3))[:-1], b"\n", sse(b"[DONE]")]),
        ]
    )
    (rec,) = generate_load(server.url, "m", [P("x", 1, 3)], one()).records
    assert rec.success, rec.error
    assert rec.text == "é☃<43><44>" and rec.token_ids == [42, 43, 44] and rec.output_tokens == 3
    assert rec.ttft >= 0.09  # the first event counts only once complete
    assert len(rec.itl) == 1


def test_complete_event_is_dispatched_before_its_newline(server):
    # As vLLM bench's handler does: a parseable event without "\n\n" yet counts now.
    server.respond = lambda p: Reply(
        events=[
            Event(0.0, [b"data: " + json.dumps(token_event([1])).encode(), b"\n\n"], piece_gap=0.3),
            Event(0.0, [sse(token_event([2])), sse(b"[DONE]")]),
        ]
    )
    (rec,) = generate_load(server.url, "m", [P("x", 1, 2)], one()).records
    assert rec.success and rec.token_ids == [1, 2]
    assert rec.ttft < 0.2 and rec.itl[0] >= 0.25


def test_decoder_byte_by_byte_equals_whole():
    stream_bytes = b": keepalive\n\n" + sse(token_event([1], text="ü")) + b"data: {\"a\": 1}\r\n\r\n" + sse(b"[DONE]")
    whole, expected = _SSE(), []
    whole.feed(stream_bytes, expected)
    whole.close(expected)
    assert [m for m in expected if m != b"[DONE]"][1] == b'{"a": 1}' and expected[-1] == b"[DONE]"
    split, got = _SSE(), []
    for i in range(len(stream_bytes)):
        split.feed(stream_bytes[i : i + 1], got)
    split.close(got)
    assert got == expected


def test_concurrency_cap_is_honoured(server):
    # The first replies wait until three are in flight: on a loaded machine the client's third request once came
    # after the first reply had ended (0.15 s + 0.15 s), and the server saw two at a time although the cap was 3.
    server.hold_until_in_flight = 3
    server.respond = lambda p: stream([[1], [2]], first=0.15, gap=0.15)
    done = []
    run = generate_load(
        server.url, "m", [P("x", 1, 2)], one(12, max_concurrency=3), on_progress=lambda d, t: done.append((d, t))
    )
    assert all(r.success for r in run.records)
    assert server.max_in_flight == 3
    assert run.duration_s >= 4 * 0.3 - 0.01  # four waves of three
    assert done == [(i, 12) for i in range(1, 13)]
    assert [r.index for r in run.records] == list(range(12))


def test_a_held_reply_does_not_raise_the_in_flight_count_past_the_clients_cap(server):
    # The hold above is strict: a client capped at two leaves the fake at two, and the replies go out after the wait.
    server.hold_until_in_flight, server.hold_timeout = 3, 1.0
    server.respond = lambda p: stream([[1]], first=0.05)
    run = generate_load(server.url, "m", [P("x", 1, 1)], one(4, max_concurrency=2))
    assert all(r.success for r in run.records)
    assert server.max_in_flight == 2


def test_no_cap_sends_everything_at_once(server):
    server.hold_until_in_flight = 10
    server.respond = lambda p: stream([[1]], first=0.3)
    run = generate_load(server.url, "m", [P("x", 1, 1)], one(10))
    assert all(r.success for r in run.records)
    assert server.max_in_flight == 10 and run.duration_s < 0.3 * 3


def test_arrival_offsets_are_honoured(server):
    server.respond = lambda p: stream([[1]])
    pattern = AccessPattern("a", request_rate=20, burstiness=1.0, num_prompts=8)
    offsets = pattern.arrival_offsets(seed=3)
    run = generate_load(server.url, "m", [P(f"p{i}", 1, 1) for i in range(8)], pattern, seed=3)
    sent = [r.start_time - run.start_perf for r in run.records]
    for offset, at in zip(offsets, sent):
        assert offset - 0.002 <= at <= offset + 0.05
    arrivals = sorted(t for t, _, _ in server.requests)
    for i in range(1, 8):
        assert arrivals[i] - arrivals[0] == pytest.approx(offsets[i] - offsets[0], abs=0.05)
    assert run.duration_s >= offsets[-1]


def test_prompts_cycle_when_fewer_than_num_prompts(server):
    server.respond = lambda p: stream([[1]])
    generate_load(server.url, "m", [P("a", 1, 1), P("b", 1, 2)], one(5, max_concurrency=1))
    assert [(p["prompt"], p["max_tokens"]) for _, _, p in server.requests] == [
        ("a", 1),
        ("b", 2),
        ("a", 1),
        ("b", 2),
        ("a", 1),
    ]


def test_http_500_becomes_failed_records(server):
    server.respond = lambda p: Reply(status=500, body=b'{"error": {"message": "boom: KV cache full"}}')
    progress = []
    run = generate_load(server.url, "m", [P("x", 1, 1)], one(3), on_progress=lambda d, t: progress.append(d))
    assert progress == [1, 2, 3]
    for rec in run.records:
        assert not rec.success
        assert "HTTP 500" in rec.error and "boom: KV cache full" in rec.error


def test_connection_refused_becomes_failed_records():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    run = generate_load(f"http://127.0.0.1:{port}", "m", [P("x", 1, 1)], one(2))
    assert [r.success for r in run.records] == [False, False]
    assert all("ConnectionRefusedError" in r.error for r in run.records)


def test_stream_without_choices_fails(server):
    server.respond = lambda p: Reply(events=[Event(0, [sse(usage_event(3, 0)), sse(b"[DONE]")])])
    (rec,) = generate_load(server.url, "m", [P("x", 1, 1)], one()).records
    assert not rec.success and "choices" in rec.error


def test_error_event_mid_stream_fails(server):
    server.respond = lambda p: Reply(
        events=[
            Event(0, [sse(token_event([1])), sse({"error": {"message": "engine died", "code": 500}}), sse(b"[DONE]")])
        ]
    )
    (rec,) = generate_load(server.url, "m", [P("x", 1, 4)], one()).records
    assert not rec.success and "engine died" in rec.error and rec.token_ids == [1]


def test_malformed_event_fails_only_that_request(server):
    server.respond = lambda p: (
        Reply(events=[Event(0, [b"data: {not json\n\n"])]) if p["prompt"] == "bad" else stream([[1]])
    )
    run = generate_load(server.url, "m", [P("ok", 1, 1), P("bad", 1, 1)], one(2))
    assert [r.success for r in run.records] == [True, False]
    assert run.records[1].error.startswith("ValueError: malformed JSON in a streamed event (")
    assert run.records[1].error.endswith("): {not json"), run.records[1].error


def test_request_timeout(server):
    server.respond = lambda p: stream([[1]], first=1.0)
    (rec,) = generate_load(server.url, "m", [P("x", 1, 1)], one(), request_timeout=0.2).records
    assert not rec.success and "timed out after 0.2 s" in rec.error


def test_generate_load_from_inside_an_event_loop(server):
    async def main():
        return generate_load(server.url, "m", [P("x", 1, 2)], one())

    (rec,) = asyncio.run(main()).records
    assert rec.success and rec.token_ids == [1, 2]


def test_run_load_is_awaitable_and_progress_errors_propagate(server):
    def broken(done, total):
        raise RuntimeError("progress bar broke")

    with pytest.raises(RuntimeError, match="progress bar broke"):
        asyncio.run(run_load(server.url, "m", [P("x", 1, 2)], one(2), on_progress=broken))
    run = asyncio.run(run_load(server.url, "m", [P("x", 1, 2)], one(2)))
    assert [r.success for r in run.records] == [True, True] and not math.isnan(run.duration_s)


def test_no_prompts_is_an_argument_error(server):
    with pytest.raises(ValueError, match="at least one prompt"):
        generate_load(server.url, "m", [], one())


# --- dispatch lag: the client's own hold-back is measured, not assumed ----------------------


def test_dispatch_lag_is_small_for_a_client_with_time_to_spare(server):
    server.respond = lambda p: stream([[1], [2]], first=0.01)
    pattern = AccessPattern("a", request_rate=50, burstiness=1.0, num_prompts=10)
    run = generate_load(server.url, "m", [P("x", 1, 2)], pattern)
    lags = [r.dispatch_lag for r in run.records]
    assert all(0 <= lag < 0.01 for lag in lags), lags


def test_a_starved_client_shows_its_lag_and_trips_the_client_bound_verdict(server):
    from pytest_specdec.config.spec import ServerSpec
    from pytest_specdec.analysis.metrics import summarize
    from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs

    server.respond = lambda p: stream([[1], [2]], first=0.01)
    # A progress callback that blocks the event loop for 40 ms stands for a client
    # too busy to send on time: requests due meanwhile go out late.
    pattern = AccessPattern("a", request_rate=100, burstiness=1.0, num_prompts=12)
    starved = generate_load(server.url, "m", [P("x", 1, 2)], pattern, on_progress=lambda d, t: time.sleep(0.04))
    lags = sorted(r.dispatch_lag for r in starved.records)
    assert lags[-1] > 0.02, lags  # held back by the blocked loop
    metrics = summarize(starved.records, starved.duration_s)
    assert metrics.dispatch_lag.p99 == pytest.approx(
        float(__import__("numpy").percentile([lag * 1000 for lag in lags], 99))
    )
    assert metrics.as_dict()["p99_dispatch_lag_ms"] > 20

    relaxed = generate_load(server.url, "m", [P("x", 1, 2)], pattern)
    spec = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})

    def result_of(ref_run, sd_run):
        runs = [
            Run(spec.reference(), 0, summarize(ref_run.records, ref_run.duration_s), ref_run.records, None, [], 0),
            Run(spec, 0, summarize(sd_run.records, sd_run.duration_s), sd_run.records, None, [], 0),
        ]
        return SpecDecResult(
            spec,
            {},
            {},
            runs[:1],
            runs[1:],
            compare_outputs(ref_run.records, sd_run.records),
            {},
            dispatch_lag_limit_ms=10.0,
        )

    assert result_of(relaxed, relaxed).client_bound() is None
    bound = result_of(relaxed, starved)
    assert bound.client_bound().startswith("client-bound: the SD run (repeat 1) had a p99 dispatch lag of ")
    with pytest.raises(AssertionError, match="speedup_output_throughput: unavailable: client-bound"):
        bound.assert_speedup(min=0.0)


def queued_request(server_url: str, woke_late_s: float, busy_after_release_s: float):
    """One request queued behind a concurrency-1 slot that another request holds for 50 ms: its task woke
    `woke_late_s` after its arrival time, and the client is busy `busy_after_release_s` once the slot is free."""
    from pytest_specdec.engines.registry import engine_named
    from pytest_specdec.load.schedule import RequestSlots
    from pytest_specdec.load.streaming import RequestOptions, _completions_url, send_request
    from pytest_specdec.load.transport import Transport

    async def main():
        slots, transport = RequestSlots(1), Transport(_completions_url(server_url))

        async def other_request():
            async with slots:
                await asyncio.sleep(0.05)
            time.sleep(busy_after_release_s)  # the event loop held: the queued request cannot go

        other = asyncio.create_task(other_request())
        await asyncio.sleep(0)  # it takes the slot
        assert slots.full()
        due = time.perf_counter() - woke_late_s
        record = await send_request(transport, engine_named("vllm"), "m", 0, P("x", 1, 2), RequestOptions(), slots, due)
        await other
        transport.close()
        return record

    return asyncio.run(main())


def test_a_request_queued_for_a_slot_is_late_only_from_when_the_slot_came_free(server):
    server.respond = lambda p: stream([[1], [2]], first=0.01)
    # Its task woke 30 ms late, but the slot came free 50 ms later and it went at once: no lag.  (Counting
    # the late wake read concurrency-1 runs of three requests client-bound on 2-core boxes.)
    on_time = queued_request(server.url, woke_late_s=0.03, busy_after_release_s=0.0)
    assert on_time.success and on_time.dispatch_lag < 0.01, on_time.dispatch_lag
    # It woke on time, but the client was busy 40 ms after the slot came free: that is lag.
    held = queued_request(server.url, woke_late_s=0.0, busy_after_release_s=0.04)
    assert held.success and held.dispatch_lag >= 0.035, held.dispatch_lag


# --- traces and conversations (load.traffic, load.conversations) ---


@dataclass(frozen=True)
class TraceP:
    text: str
    prompt_len: int
    output_len: int
    arrival_s: float | None = None
    category: str | None = None
    turns: tuple = ()


@pytest.mark.parametrize("speed", [1.0, 2.0, 0.5])
def test_a_trace_is_replayed_at_its_own_times_at_the_scale_asked(server, speed):
    server.respond = lambda p: stream([[1]])
    times = [0.0, 0.013, 0.05, 0.051, 0.12, 0.2, 0.2, 0.31]
    prompts = [TraceP(f"p{i}", 1, 1, arrival_s=t, category="qa") for i, t in enumerate(times)]
    pattern = AccessPattern("trace_replay", num_prompts=len(times), replay_speed=speed)
    run = generate_load(server.url, "m", prompts, pattern)
    sent = [r.start_time - run.start_perf for r in run.records]
    for t, at, r in zip(times, sent, run.records):
        # Never early; due at the trace's time scaled, within 1 ms, where any lateness (a busy box's
        # scheduler wakes a task a few ms late) is the record's own dispatch lag, which the run reports
        # as client-bound; and never grossly late, which no lag accounting would excuse.
        assert at >= t / speed - 0.001, (t, at)
        assert at - r.dispatch_lag == pytest.approx(t / speed, abs=0.001), (t, at, r.dispatch_lag)
        assert at - t / speed < 0.025, (t, at)
    assert [r.category for r in run.records] == ["qa"] * len(times)
    assert [p["prompt"] for _, _, p in sorted(server.requests)] == [f"p{i}" for i in range(len(times))]


def test_a_trace_pattern_without_arrival_times_is_refused(server):
    from pytest_specdec.load.patterns import PatternError

    with pytest.raises(PatternError, match="prompts have none: give it a trace workload"):
        generate_load(server.url, "m", [P("x", 1, 1)], AccessPattern("trace_replay", num_prompts=2, replay_speed=1.0))


def test_conversations_carry_the_real_replies_and_think_between_turns(server):
    replies = iter(range(100))

    def respond(payload):
        n = next(replies)
        return Reply(
            events=[
                Event(0.0, [sse(token_event([n], text=f" reply{n}"))]),
                Event(0.0, [sse(usage_event(7 + n, 1))]),
                Event(0.0, [sse(b"[DONE]")]),
            ]
        )

    server.respond = respond
    conversation = TraceP("User: hello\nAssistant:", 5, 3, category="chat", turns=(("and then?", 4), ("bye", 2)))
    pattern = AccessPattern("multi_turn", num_prompts=1, think_time_s=0.05)
    run = generate_load(server.url, "m", [conversation], pattern)
    assert [(r.turn, r.success, r.category) for r in run.records] == [
        (0, True, "chat"),
        (1, True, "chat"),
        (2, True, "chat"),
    ]
    sent = [p for _, _, p in sorted(server.requests)]
    assert [p["max_tokens"] for p in sent] == [3, 4, 2]
    assert sent[1]["prompt"] == "User: hello\nAssistant: reply0\nUser: and then?\nAssistant:"
    assert sent[2]["prompt"] == sent[1]["prompt"] + " reply1\nUser: bye\nAssistant:"
    arrivals = sorted(t for t, _, _ in server.requests)
    assert all(b - a >= 0.05 for a, b in zip(arrivals, arrivals[1:]))  # the user read each reply first
    assert [r.prompt_len for r in run.records] == [7, 8, 9]  # from each turn's usage
    # Every turn names the conversation it belongs to, and a run that sends it again names it the same.
    again = generate_load(server.url, "m", [conversation], pattern)
    assert len({r.prompt_key for r in run.records + again.records}) == 1 and run.records[0].prompt_key
    other = generate_load(
        server.url, "m", [TraceP("User: hi\nAssistant:", 5, 3)], AccessPattern("throughput_low", num_prompts=1)
    )
    assert other.records[0].prompt_key != run.records[0].prompt_key


def test_a_failed_turn_ends_its_conversation_and_the_rest_are_recorded_failed(server):
    calls = []

    def respond(payload):
        calls.append(payload)
        return stream([[1]]) if len(calls) == 1 else Reply(status=500, body=b'{"error": "KV cache full"}')

    server.respond = respond
    conversation = TraceP("first", 1, 1, turns=(("second", 1), ("third", 1)))
    run = generate_load(server.url, "m", [conversation], AccessPattern("c", num_prompts=1))
    assert [(r.turn, r.success) for r in run.records] == [(0, True), (1, False), (2, False)]
    assert "HTTP 500" in run.records[1].error and run.records[2].error.startswith("not sent: turn 1")
    assert len(calls) == 2


def test_conversations_are_refused_over_several_client_processes():
    from pytest_specdec.load.workers import run_in_workers

    with pytest.raises(ValueError, match="conversations are sent by one client process"):
        run_in_workers(
            "http://127.0.0.1:9",
            "m",
            [TraceP("a", 1, 1, turns=(("b", 1),))],
            AccessPattern("c", num_prompts=1),
            workers=2,
        )


def test_replay_sends_a_runs_prompts_file_again_with_its_pattern(server, tmp_path, capsys):
    from pytest_specdec.measure.replay import replay_main
    from pytest_specdec.load.traffic import trace_line
    from pytest_specdec.load.workloads import Prompt

    server.respond = lambda p: stream([[1], [2]])
    prompts = [Prompt("a", 1, 2, "qa", 0.0), Prompt("b", 1, 2, "qa", 0.05, turns=(("c", 3),))]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(trace_line(p) for p in prompts) + "\n")
    pattern = AccessPattern("trace_replay", num_prompts=2, replay_speed=1.0, think_time_s=0.0)
    code = replay_main(
        [
            "--base-url",
            server.url,
            "--model",
            "m",
            "--prompts",
            str(path),
            "--pattern",
            json.dumps(pattern.describe()),
            "--ignore-eos",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["failed"] == 0 and out["completed"] == 3  # two conversations: one of two turns
    sent = [p for _, _, p in sorted(server.requests)]
    assert [p["max_tokens"] for p in sent] == [2, 2, 3] and sent[2]["prompt"].endswith("User: c\nAssistant:")
    path.write_text('{"prompt": "x"}\n')
    assert replay_main(["--base-url", server.url, "--model", "m", "--prompts", str(path), "--pattern", "{}"]) == 2
    assert "prompts.jsonl, line 1: not a prompts line" in capsys.readouterr().err
