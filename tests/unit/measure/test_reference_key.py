"""The reference is measured once per traffic of a target: the key names the traffic, not the pattern."""

from pytest_specdec import ServerSpec
from pytest_specdec.load.patterns import AccessPattern, concurrency_sweep, resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.measure.reference_runs import ReferenceRuns

NGRAM = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
SUFFIX = ServerSpec("m", {"method": "suffix", "num_speculative_tokens": 4})
CODE_EDIT = resolve_workload("code_edit", {"input_len": 192, "output_len": 32})
key = ReferenceRuns.reference_key


def test_a_sweeps_first_level_is_the_same_traffic_as_throughput_low_with_as_many_prompts():
    (level_1,) = concurrency_sweep([1], num_prompts=4)
    low = resolve_pattern("throughput_low", {"num_prompts": 4})
    assert level_1.name != low.name
    # Both SD configurations of one target share it, under either name.
    assert key(NGRAM, CODE_EDIT, level_1) == key(SUFFIX, CODE_EDIT, low)


def test_any_difference_in_what_is_sent_is_another_reference():
    low = resolve_pattern("throughput_low", {"num_prompts": 4})
    others = [
        resolve_pattern("throughput_low", {"num_prompts": 5}),
        AccessPattern("throughput_low", max_concurrency=2, num_prompts=4),
        AccessPattern("throughput_low", request_rate=2.0, max_concurrency=1, num_prompts=4),
        AccessPattern("throughput_low", max_concurrency=1, num_prompts=4, think_time_s=0.5),
    ]
    keys = {key(NGRAM, CODE_EDIT, low)} | {key(NGRAM, CODE_EDIT, other) for other in others}
    assert len(keys) == 1 + len(others)
    assert key(NGRAM, CODE_EDIT, low, seed=1) != key(NGRAM, CODE_EDIT, low)
    assert key(NGRAM, resolve_workload("code_edit", {"input_len": 192, "output_len": 64}), low) != key(
        NGRAM, CODE_EDIT, low
    )
    assert key(ServerSpec("other", None), CODE_EDIT, low) != key(NGRAM, CODE_EDIT, low)
