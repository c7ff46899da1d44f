"""Dynamic speculation on vLLM's CPU build: throughput must not fall where the schedule switches k.

vLLM 0.32 picks each step's draft length from the batch size when the speculative config holds
``num_speculative_tokens_per_batch_size`` (rows ``[start, end, k]``).  On GPUs, teams saw aggregate
throughput collapse exactly at the switch (vllm-project/vllm#49548: 8 concurrent requests fell from
~232 to 24-157 tok/s).  This test measures the levels on both sides of the switch and one beyond
(`levels_around_switches`: concurrency 1, 2 and 3 here), each against the reference, and fails when
output throughput at the first level after the switch is more than 10% below the last level before it.

    .venv/bin/python -m pytest examples/cpu/test_dynamic_k.py --specdec-cpu -s
"""

import pytest

from pytest_specdec.analysis.dynamic_k import assert_no_fall_across_switches, levels_around_switches

MODEL = "specdec:smollm2-135m"
EAGER = ["--enforce-eager"]
# k=4 for one request at a time, k=2 from two to four (and, carried on by vLLM, beyond).
SCHEDULE = [[1, 1, 4], [2, 4, 2]]
DYNAMIC = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
    "num_speculative_tokens_per_batch_size": SCHEDULE,
}


@pytest.mark.specdec(model=MODEL, speculative_config=DYNAMIC, server_args=EAGER)
@pytest.mark.workload("code_edit", input_len=192, output_len=16)
def test_throughput_holds_across_the_k_switch(specdec):
    sweep = specdec.sweep(levels_around_switches(DYNAMIC), num_prompts=4)
    # Measured on two cores, two sessions: SD 17.2 and 17.5 tok/s alone, 31.7 and 29.9 at two (+84%,
    # +71%; the reference +83%, +80%); benchmarks/dynamic_k.py with 6 prompts and 2 repeats: 19.1 ->
    # 34.3 (+79%).  On this build the switch costs nothing: throughput rises across it about as much
    # as the reference's does.
    check = assert_no_fall_across_switches(sweep, DYNAMIC, tolerance=0.10)
    # The server ran the schedule, not a fixed k: n-gram proposes k tokens whenever its lookup
    # matches, so drafted tokens per drafted step follow k (measured 4.0 alone, 2.0 at two, 2.5 at
    # three, where the fourth of 4 requests runs alone at k=4; the benchmark: 3.98, 2.10, 2.00).
    drafted = {
        level: r.counters.num_draft_tokens / r.counters.num_drafts for level, r in zip(sweep.levels, sweep.results)
    }
    print(check.table(), "\ndrafted tokens per drafted step by concurrency:", drafted)
    assert drafted[1] > 3.5 and drafted[2] < 3.0, f"drafted tokens per step by concurrency: {drafted}"
