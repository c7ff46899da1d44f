"""TensorRT-LLM's acceptance as its own sources define it: the decoding type it declares, what its n-gram
counting means beside vLLM's, and each request's ``avg_decoded_tokens_per_iter`` read into vLLM's vocabulary.

Pure logic: no server is started and nothing touches the network.
"""

from __future__ import annotations

import re

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines import engine_named
from pytest_specdec.engines.base import VLLM_ACCEPTANCE_COUNTING
from pytest_specdec.engines.per_request import ACCEPTED, PER_REQUEST_FIELDS, STEPS
from pytest_specdec.engines.registry import ENGINE_MODULES
from pytest_specdec.engines.trtllm import DECODING_TYPES
from pytest_specdec.engines.trtllm import ENGINE as TRTLLM
from pytest_specdec.report.row.parts import _acceptance_note

# tensorrt_llm/llmapi/llm_args.py on NVIDIA/TensorRT-LLM's main branch (commit 00043967), verbatim: the
# literal the `SpeculativeConfig` union (discriminator "decoding_type") accepts for a draft model.
DRAFT_TARGET_DECLARATION = 'decoding_type: Literal["Draft_Target"] = Field(default="Draft_Target")'


def spec(config):
    return ServerSpec(model="t", speculative_config=config, engine="trtllm")


def test_the_draft_model_decoding_type_is_the_literal_llm_args_declares():
    declared = re.search(r'Literal\["([^"]+)"\]', DRAFT_TARGET_DECLARATION).group(1)
    assert DECODING_TYPES["draft_model"] == declared


def test_every_engine_states_how_it_counts_acceptance():
    for name in ENGINE_MODULES:
        counting = engine_named(name).acceptance_counting
        assert isinstance(counting, str) and counting and "\n" not in counting, name
    assert engine_named("vllm").acceptance_counting == VLLM_ACCEPTANCE_COUNTING
    assert "padding" in TRTLLM.acceptance_counting and "prefill" in TRTLLM.acceptance_counting


def test_trtllm_ngram_rows_say_their_acceptance_is_not_vllms():
    note = _acceptance_note(spec({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1}))
    assert note and "pads" in note and "vLLM's prompt lookup proposes and counts nothing" in note
    assert _acceptance_note(spec({"method": "eagle3", "num_speculative_tokens": 3, "model": "d"})) is None


def test_an_engine_that_counts_otherwise_gets_its_counting_on_its_rows_by_default():
    class Other(type(engine_named("vllm"))):
        acceptance_counting = "drafted: whatever it proposes, padding included"

    assert Other().acceptance_note(spec(None)) == Other.acceptance_counting
    assert engine_named("vllm").acceptance_note(spec(None)) is None


def stream(events):
    """The request's SD figures as the client reads them: every event through `stream_event`, the last
    `request_sd` that found any."""
    state, found = {}, None
    for event in events:
        figures = TRTLLM.request_sd(TRTLLM.stream_event(event, state))
        found = figures if figures is not None else found
    return found


def chunk(text, avg):
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "avg_decoded_tokens_per_iter": avg}]}


USAGE = {"object": "text_completion", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 12}}


def test_a_request_s_avg_decoded_tokens_per_iter_reads_as_steps_and_accepted_drafts():
    # 12 tokens in 4 iterations: the prefill's token, then 3 verify steps of 1 + 2 accepted drafts each.
    found = stream([chunk(" a", 1.0), chunk(" b c d", 2.0), chunk(" e f g h i j k l", 3.0), USAGE])
    assert found == {STEPS: 3, ACCEPTED: 8} and set(found) <= PER_REQUEST_FIELDS
    assert 1 + found[ACCEPTED] / found[STEPS] == pytest.approx((12 - 1) / 3)  # vLLM's acceptance length


def test_a_float32_figure_still_reads_as_whole_iterations():
    found = stream([chunk(" a", 2.5733333110809326), {**USAGE, "usage": {"completion_tokens": 386}}])
    assert found == {STEPS: 149, ACCEPTED: 236}


def test_a_ratio_no_whole_iteration_count_gives_is_refused_by_name():
    with pytest.raises(ValueError, match="avg_decoded_tokens_per_iter = 2.4"):
        stream([chunk(" a", 2.4), {**USAGE, "usage": {"completion_tokens": 11}}])


def test_a_stream_without_the_figure_has_no_per_request_figures():
    assert stream([{"choices": [{"index": 0, "text": " a"}]}, USAGE]) is None
