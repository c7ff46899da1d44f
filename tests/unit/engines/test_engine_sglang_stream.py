"""SGLang's native /generate stream read as completion chunks, and a run's counters summed from its responses.

Pure logic: the events are SGLang's shapes (running totals by default, deltas
with --incremental-streaming-output); no server is started.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec.engines.sglang import ENGINE as SGLANG
from pytest_specdec.engines.vllm import ENGINE as VLLM
from pytest_specdec.load.streaming import _completions_url
from pytest_specdec.engines.counters import CounterError, counters_from_requests


def meta(done: int, steps: int | None = None, finished: bool = False) -> dict:
    found = {
        "id": "r1",
        "prompt_tokens": 7,
        "completion_tokens": done,
        "finish_reason": {"type": "length", "length": done} if finished else None,
    }
    if steps is not None:
        found.update(spec_verify_ct=steps, spec_accept_histogram=[0, steps], spec_num_proposed_drafts=4 * steps)
    return found


def test_the_request_is_sglangs_native_body_on_its_own_route():
    openai = {
        "model": "m",
        "prompt": "def f():",
        "max_tokens": 32,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "return_token_ids": True,
    }
    assert SGLANG.completion_payload(openai) == {
        "text": "def f():",
        "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    assert SGLANG.completion_path == "/generate" and SGLANG.counts_per_request
    assert _completions_url("http://h:30000", SGLANG.completion_path) == "http://h:30000/generate"
    assert _completions_url("http://h:30000/v1", SGLANG.completion_path) == "http://h:30000/generate"
    # vLLM's body and route are OpenAI's, unchanged.
    assert VLLM.completion_payload(openai) == openai and not VLLM.counts_per_request
    assert _completions_url("http://h:8000", VLLM.completion_path) == "http://h:8000/v1/completions"


def test_running_totals_become_deltas_and_the_last_event_carries_usage_and_figures():
    state: dict = {}
    first = SGLANG.stream_event({"text": " a b", "output_ids": [5, 6], "meta_info": meta(2, 1)}, state)
    assert first["choices"] == [{"text": " a b", "token_ids": [5, 6]}] and "usage" not in first
    second = SGLANG.stream_event({"text": " a b c", "output_ids": [5, 6, 7], "meta_info": meta(3, 2)}, state)
    assert second["choices"] == [{"text": " c", "token_ids": [7]}]
    last = SGLANG.stream_event(
        {"text": " a b c d", "output_ids": [5, 6, 7, 8], "meta_info": meta(4, 2, finished=True)}, state
    )
    assert last["choices"] == [{"text": " d", "token_ids": [8]}]
    assert last["usage"] == {"prompt_tokens": 7, "completion_tokens": 4}
    # k is the server's (the spec's speculative_config), applied once the run is over.
    spec = SimpleNamespace(speculative_config={"method": "eagle", "num_speculative_tokens": 4})
    assert SGLANG.settle_request_sd(SGLANG.request_sd(last), spec) == {
        "num_spec_steps": 2,
        "num_draft_tokens": 8,
        "num_accepted_draft_tokens": 2,
        "per_step_accepted": [1, 1],
        "per_step_drafted": [4, 4],
        "num_spec_tokens": 4,
    }


def test_incremental_events_pass_through_as_deltas():
    state: dict = {}
    assert SGLANG.stream_event({"text": " a b", "output_ids": [5, 6], "meta_info": meta(2)}, state)["choices"] == [
        {"text": " a b", "token_ids": [5, 6]}
    ]
    # --incremental-streaming-output: two new ids while four tokens are done, so these are the new ones.
    assert SGLANG.stream_event({"text": " c d", "output_ids": [7, 8], "meta_info": meta(4)}, state)["choices"] == [
        {"text": " c d", "token_ids": [7, 8]}
    ]


def test_an_event_without_new_tokens_has_no_choices_and_errors_pass_through():
    state: dict = {"ids": 2, "text": 4}
    quiet = SGLANG.stream_event({"text": " a b", "output_ids": [5, 6], "meta_info": meta(2)}, state)
    assert "choices" not in quiet
    error = {"error": {"message": "aborted", "code": 500}}
    assert SGLANG.stream_event(error, state) == error


def record(index, figures, success=True):
    return SimpleNamespace(index=index, success=success, spec_decoding=figures)


def test_a_runs_counters_are_its_responses_figures_summed_per_position_too():
    first = {
        "num_spec_steps": 2,
        "num_draft_tokens": 8,
        "num_accepted_draft_tokens": 3,
        "per_step_accepted": [1, 2],
        "per_step_drafted": [4, 4],
    }
    second = {
        "num_spec_steps": 1,
        "num_draft_tokens": 4,
        "num_accepted_draft_tokens": 0,
        "per_step_accepted": [0],
        "per_step_drafted": [4],
    }
    failed = record(2, None, success=False)  # a failed request is the run's failure, not a missing count
    counters = counters_from_requests([record(0, first), record(1, second), failed], "http://h:30000")
    assert counters.present and (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (
        3.0,
        12.0,
        3.0,
    )
    assert counters.accepted_per_position == {0: 2.0, 1: 1.0}
    assert counters.acceptance_rate == pytest.approx(0.25) and counters.acceptance_length == pytest.approx(2.0)
    # Summary figures only (no histogram): the totals, no per-position counts.
    summary = counters_from_requests(
        [record(0, {k: first[k] for k in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")})], "u"
    )
    assert summary.present and summary.accepted_per_position == {}


def test_one_response_without_figures_makes_the_counters_unavailable_never_a_lower_sum():
    figures = {"num_spec_steps": 2, "num_draft_tokens": 8, "num_accepted_draft_tokens": 3}
    missing = counters_from_requests([record(0, figures), record(1, None), record(2, {})], "http://h:30000")
    assert not missing.present
    assert missing.problem.startswith("2 of 3 responses from http://h:30000 carried no per-request SD figures")
    assert "request 1 first" in missing.problem
    assert not counters_from_requests([record(0, None, success=False)], "u").present
    with pytest.raises(CounterError, match="accept 9 of 8 drafted"):
        counters_from_requests([record(0, {**figures, "num_accepted_draft_tokens": 9})], "u")
