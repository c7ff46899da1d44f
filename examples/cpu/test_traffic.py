"""The traffic SD meets in production: categories, conversations, shared prefixes.

N-gram drafting on three workloads the single-turn catalog does not cover,
the first two on llama.cpp (the configuration of test_llamacpp.py, whose
servers they reuse: nothing here asks a vLLM feature of the engine, and
llama.cpp decodes this model several times faster on a CPU), the third on
vLLM's CPU build, whose prefix caching it is about:

- prompts of Spec-Bench's six kinds of task (examples/cpu/data/categories.jsonl,
  three prompts each, written for this example): the acceptance of an n-gram
  drafter depends on how much of the answer the prompt already holds, so the
  result is broken down by category and each category is gated on its own;
- conversations of three turns (examples/cpu/data/conversations.jsonl), each
  turn sent with the real replies before it, users arriving at random: the
  figures are broken down by turn, because the context, and what n-gram can
  look up in it, grows turn by turn;
- many requests over two long common prefixes with vLLM's prefix caching on
  for both sides (its default; the test checks both servers ran with it): SD
  measured where real serving runs it, on cached prefixes.

Acceptance figures are the model's and the drafter's, not the machine's: the
floors below are about half of what every run measured (figures in the
README), so a drafter that stops finding its continuations fails them.
"""

from pathlib import Path

import pytest

MODEL = "specdec:smollm2-135m"
EAGER = ["--enforce-eager"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
# llama.cpp's ngram-simple matches one n-gram length: 3 tokens, drafting up to 4 (as in test_llamacpp.py).
LLAMACPP_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
DATA = Path(__file__).resolve().parent / "data"
CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=LLAMACPP_NGRAM)
@pytest.mark.workload("spec_bench", path=str(DATA / "categories.jsonl"), output_len=32)
# Six requests at a time: what is gated here is acceptance, which greedy n-gram decides per request
# whatever else shares the batch, and eighteen requests one at a time took three times as long.
@pytest.mark.access_pattern("throughput_high", max_concurrency=6, num_prompts=18)
def test_ngram_acceptance_by_category(specdec):
    result = specdec.run()
    groups = {g.name: g for g in result.by("category")}
    assert set(groups) == set(CATEGORIES)
    assert all(g.requests == 3 * len(result.speculative_runs) and g.problem is None for g in groups.values())
    # Where the answer quotes the prompt (retrieval, summaries), n-gram finds its drafts.
    result.assert_category("rag", min_rate=0.25)
    result.assert_category("summarization", min_rate=0.15)


@pytest.mark.specdec(model=MODEL, engine="llamacpp", speculative_config=LLAMACPP_NGRAM)
@pytest.mark.workload("spec_bench", path=str(DATA / "conversations.jsonl"), turns=3, output_len=32)
@pytest.mark.access_pattern("multi_turn", num_prompts=4, think_time_s=0.5)
def test_ngram_in_three_turn_conversations(specdec):
    result = specdec.run()
    turns = result.by("turn")
    assert [t.name for t in turns] == ["turn 1", "turn 2", "turn 3"]
    assert all(t.requests == 4 * len(result.speculative_runs) and t.problem is None for t in turns)
    # Each turn carried the conversation so far: every conversation's prompt grew turn by turn.
    for run in (*result.reference_runs, *result.speculative_runs):
        by_conversation = {}
        for record in run.records:
            by_conversation.setdefault(record.index, []).append(record.prompt_len)
        assert all(lengths[0] < lengths[1] < lengths[2] for lengths in by_conversation.values())
    # Later turns can look up the replies before them: acceptance does not collapse as the context grows.
    result.assert_group("turn", "turn 3", min_rate=0.15)


@pytest.mark.specdec(model=MODEL, speculative_config=NGRAM, server_args=EAGER)
@pytest.mark.workload("shared_prefix", prefix_len=384, input_len=32, output_len=16, num_prefixes=2)
@pytest.mark.access_pattern("throughput_low", num_prompts=6)
def test_ngram_over_shared_prefixes_with_prefix_caching(specdec):
    result = specdec.run()
    for run in (*result.reference_runs, *result.speculative_runs):
        assert (run.engine_facts or {}).get("enable_prefix_caching") in (True, "True"), run.engine_facts
    result.assert_acceptance(min_rate=0.3)
    # No engine confound either: on the CPU build both sides run without async scheduling (on a GPU vLLM
    # turns it off for n-gram only, and this would need allow=["confound"]).
    result.assert_fair_comparison()
