"""One per-request vocabulary: every engine's `request_sd` speaks vLLM's names, so the per-group breakdown
reads each engine's own response shape right (it read 0% accepted on llama.cpp and SGLang before)."""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.engines import engine_named
from pytest_specdec.engines.per_request import PER_REQUEST_FIELDS
from pytest_specdec.engines.counters import counters_from_requests
from pytest_specdec.measure.groups import breakdown


def vllm_payload(drafted, accepted, steps):
    # The last streamed event of vLLM's CPU build with --per-request-spec-decode-metrics (k=4).
    per_step = [accepted // steps + (1 if i < accepted % steps else 0) for i in range(steps)]
    return {
        "choices": [{"text": ""}],
        "metrics": {
            "speculative_decoding": {
                "num_spec_tokens": 4,
                "num_spec_steps": steps,
                "num_draft_tokens": drafted,
                "num_accepted_draft_tokens": accepted,
                "per_step_accepted": per_step,
                "per_step_drafted": [4] * steps,
            }
        },
    }


def sglang_payload(drafted, accepted, steps):
    # /generate's final meta_info: a histogram of accepted drafts per verify step (k=4).
    histogram = [0] * 5
    for a in [accepted // steps + (1 if i < accepted % steps else 0) for i in range(steps)]:
        histogram[a] += 1
    return {
        "text": "...",
        "output_ids": [1],
        "meta_info": {
            "completion_tokens": 20,
            "spec_verify_ct": steps,
            "spec_accept_histogram": histogram,
            "spec_num_proposed_drafts": drafted,
            "spec_num_correct_drafts": accepted,
        },
    }


def llamacpp_payload(drafted, accepted, steps):
    # llama-server's final chunk: totals in `timings`, no step count.
    return {"choices": [{"text": ""}], "timings": {"predicted_n": 20, "draft_n": drafted, "draft_n_accepted": accepted}}


SHAPES = {"vllm": vllm_payload, "sglang": sglang_payload, "llamacpp": llamacpp_payload}


def records(engine, side_figures):
    out = []
    for index, (category, drafted, accepted, steps) in enumerate(side_figures):
        figures = engine_named(engine).request_sd(SHAPES[engine](drafted, accepted, steps)) if drafted else None
        out.append(
            SimpleNamespace(
                index=index,
                success=True,
                output_tokens=11,
                ttft=0.1,
                latency=0.3,
                category=category,
                turn=None,
                spec_decoding=figures,
            )
        )
    return [SimpleNamespace(records=out)]


# Category a accepts 12 of 16 drafts in 4 steps a request, b 2 of 16.
REQUESTS = [("a", 16, 12, 4), ("a", 16, 12, 4), ("b", 16, 2, 4), ("b", 16, 2, 4)]


@pytest.mark.parametrize("engine", sorted(SHAPES))
def test_every_engines_request_figures_use_the_one_vocabulary(engine):
    figures = engine_named(engine).request_sd(SHAPES[engine](16, 12, 4))
    assert figures and set(figures) <= PER_REQUEST_FIELDS, figures
    assert (figures["num_draft_tokens"], figures["num_accepted_draft_tokens"]) == (16, 12)


@pytest.mark.parametrize("engine", sorted(SHAPES))
def test_the_per_group_breakdown_reads_each_engines_own_response_shape(engine):
    reference = records(engine, [(c, 0, 0, 0) for c, *_ in REQUESTS])
    a, b = breakdown(reference, records(engine, REQUESTS), lambda r: r.category)
    assert (a.acceptance_rate, b.acceptance_rate) == (12 / 16, 2 / 16)
    assert a.problem is None and b.problem is None
    if engine == "llamacpp":  # no per-request step count there: the length is unknown, never made up
        assert math.isnan(a.acceptance_length)
    else:
        assert a.acceptance_length == 1 + 12 / 4


def test_a_runs_counters_summed_from_sglang_responses_read_the_same_names():
    counters = counters_from_requests(records("sglang", REQUESTS)[0].records, "http://h:30000")
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (16, 64, 28)


def test_no_engine_is_sent_another_engines_request_field():

    from pytest_specdec.load.client import RequestOptions, completion_body

    from tests.support.fault_server import trtllm_refusal  # the strict fake's copy of trtllm-serve's validation

    body = completion_body("m", "hello", 8, RequestOptions(logprobs=2))
    trtllm = engine_named("trtllm").completion_payload(dict(body))
    assert trtllm_refusal(trtllm) is None, trtllm  # it refused every request while vLLM's field rode along
    assert (
        trtllm_refusal(engine_named("vllm").completion_payload(dict(body)))
        == "return_token_ids: Extra inputs are not permitted"
    )
    assert engine_named("vllm").completion_payload(dict(body))["return_token_ids"] is True
    assert "return_token_ids" not in engine_named("llamacpp").completion_payload(dict(body))
