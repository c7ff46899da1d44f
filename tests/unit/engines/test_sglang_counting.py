"""SGLang's two ways of counting proposals, k from the server's configuration, its n-gram note, and the fake
SGLang server as strict as the real one's SamplingParams."""

from __future__ import annotations


import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines import engine_named
from pytest_specdec.engines.counters import counters_from_requests
from pytest_specdec.engines.sglang import ENGINE as SGLANG
from pytest_specdec.load.client import RequestOptions, completion_body
from pytest_specdec.load.sampling import Sampling

from tests.support.fault_server import sglang_refusal, sglang_spec_meta  # noqa: E402 - the fake's copy of SGLang's checks

K4 = ServerSpec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4}, engine="sglang")


def settled(meta: dict) -> dict:
    """A request's figures as a run ends with them: read in the stream, then settled with the server's k."""
    payload = {"text": "...", "output_ids": [1], "meta_info": {"completion_tokens": 9, **meta}}
    return SGLANG.settle_request_sd(SGLANG.request_sd(payload), K4)


def test_k_is_the_servers_not_proposals_over_steps():
    # A build counting only useful proposals: 9 over 3 steps at k = 4 was read as k = 3, silently.
    figures = settled({"spec_verify_ct": 3, "spec_accept_histogram": [1, 1, 1], "spec_num_proposed_drafts": 9})
    assert figures == {
        "num_spec_steps": 3,
        "num_draft_tokens": 9,
        "num_accepted_draft_tokens": 3,
        "num_spec_tokens": 4,
    }  # which step proposed how many is unknown: no per-step arrays, never k = 3


def test_a_count_no_k_divides_is_read_not_an_exception_in_the_stream():
    meta = {"spec_verify_ct": 3, "spec_accept_histogram": [1, 1, 1], "spec_num_proposed_drafts": 10}
    payload = {"text": "...", "output_ids": [1], "meta_info": meta}
    SGLANG.request_sd(payload)  # raised ValueError inside the stream handler: the request counted as failed
    assert settled(meta)["num_draft_tokens"] == 10 and "per_step_drafted" not in settled(meta)


def test_every_step_counted_at_k_gives_the_per_step_arrays():
    figures = settled({"spec_verify_ct": 3, "spec_accept_histogram": [1, 1, 1], "spec_num_proposed_drafts": 12})
    assert figures["per_step_drafted"] == [4, 4, 4] and figures["per_step_accepted"] == [0, 1, 2]


def test_more_proposals_than_k_a_step_is_unreadable_and_the_run_says_so():
    meta = {"spec_verify_ct": 3, "spec_accept_histogram": [1, 1, 1], "spec_num_proposed_drafts": 13}
    figures = settled(meta)
    assert set(figures) == {"problem"} and "k = 4" in figures["problem"]

    class Record:
        index, success, spec_decoding = 0, True, figures

    counters = counters_from_requests([Record()], "http://h:30000")
    assert not counters.present and "k = 4" in counters.problem and "request 0" in counters.problem


@pytest.mark.parametrize("mode, drafted", [("ok", 16), ("useful-drafts", 13)])
def test_the_fake_counts_proposals_both_ways(mode, drafted):
    figures = settled(sglang_spec_meta(mode, 4))
    assert (figures["num_draft_tokens"], figures["num_accepted_draft_tokens"]) == (drafted, 4)
    assert ("per_step_drafted" in figures) == (mode == "ok")


def test_the_fake_refuses_sampling_params_sglang_does_not_take():
    assert "unexpected keyword argument 'max_tokens'" in sglang_refusal(
        {"text": "hi", "sampling_params": {"max_tokens": 8}}
    )
    assert sglang_refusal({"prompt": "hi", "sampling_params": {}}).startswith("text")
    # What the plugin sends, sampled and seeded too, passes.
    body = completion_body("m", "hello", 8, RequestOptions(sampling=Sampling(temperature=0.8, top_p=0.9, top_k=20)))
    assert sglang_refusal(engine_named("sglang").completion_payload(dict(body))) is None, body


def test_the_ngram_note_names_the_matcher_that_runs_and_the_keys_it_ignores():
    note = SGLANG.acceptance_note(K4)
    assert "trie" in note and "18" in note and "prompt_lookup_min" in note and "5-5" in note
    assert "zero padding" in note
