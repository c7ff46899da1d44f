"""Run summaries and result figures against hand-computed samples."""

import math
from dataclasses import dataclass, field

import pytest

from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.verdict.metric_names import higher_is_better
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.config.spec import ServerSpec


@dataclass
class Rec:
    index: int = 0
    prompt_len: int = 10
    output_tokens: int = 5
    ttft: float = 0.1
    itl: list = field(default_factory=list)
    latency: float = 0.5
    token_ids: list = field(default_factory=list)
    success: bool = True


def test_summary_matches_hand_computed_values():
    records = [
        Rec(0, prompt_len=10, output_tokens=5, ttft=0.1, itl=[0.1, 0.1, 0.2], latency=0.5),
        Rec(1, prompt_len=20, output_tokens=3, ttft=0.3, itl=[0.2], latency=0.7),
        Rec(2, prompt_len=30, output_tokens=1, ttft=0.2, itl=[], latency=0.2),  # no TPOT for 1 token
        Rec(3, success=False),
    ]
    m = summarize(records, duration_s=2.0)
    assert (m.completed, m.failed, m.total_input_tokens, m.total_output_tokens) == (3, 1, 60, 9)
    assert m.request_throughput == pytest.approx(1.5)
    assert m.output_throughput == pytest.approx(4.5)
    assert m.total_token_throughput == pytest.approx(34.5)
    # TPOT: (0.5-0.1)/4 = 0.1 s, (0.7-0.3)/2 = 0.2 s
    assert m.tpot.count == 2 and m.tpot.mean == pytest.approx(150.0) and m.tpot.median == pytest.approx(150.0)
    assert m.ttft.mean == pytest.approx(200.0) and m.ttft.median == pytest.approx(200.0)
    # p95 of [100, 200, 300] ms with linear interpolation: 200 + 0.9 * 100
    assert m.ttft.p95 == pytest.approx(290.0) and m.ttft.p99 == pytest.approx(298.0)
    assert m.itl.count == 4 and m.itl.mean == pytest.approx(150.0)
    assert m.e2el.median == pytest.approx(500.0)
    flat = m.as_dict()
    assert flat["median_tpot_ms"] == pytest.approx(150.0) and flat["output_throughput"] == pytest.approx(4.5)
    assert {"mean_itl_ms", "p99_e2el_ms", "p95_ttft_ms", "total_token_throughput"} <= set(flat)


def test_empty_run_gives_nan_not_an_error():
    m = summarize([Rec(success=False)], duration_s=1.0)
    assert m.completed == 0 and math.isnan(m.tpot.mean)


def test_directions():
    assert higher_is_better("output_throughput") and higher_is_better("acceptance_length")
    assert not higher_is_better("median_tpot_ms") and not higher_is_better("p99_ttft_ms")
    # A speedup is better larger whatever it is a speedup of, including the pre-0.2 spelling with a unit.
    assert higher_is_better("speedup_median_tpot") and higher_is_better("speedup_median_tpot_ms")


def run_with(output_throughput, tpot_s, counters=None):
    records = [Rec(i, output_tokens=11, ttft=0.0, latency=tpot_s * 10, token_ids=[1, 2, 3]) for i in range(2)]
    metrics = summarize(records, duration_s=22 / output_throughput)
    return Run(ServerSpec("m"), 0, metrics, records, counters, ["vllm", "serve", "m"], 0.0)


def result_of(ref_runs, sd_runs):
    spec = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
    outputs = compare_outputs(ref_runs[0].records, sd_runs[0].records)
    return SpecDecResult(spec, {"name": "w"}, {"name": "p"}, ref_runs, sd_runs, outputs, {})


def test_speedup_is_direction_aware_and_the_median_of_paired_repeats():
    counters = SpecDecodeCounters(10, 40, 30, {0: 10, 1: 8, 2: 7, 3: 5})
    ref = [run_with(30.0, 0.030), run_with(31.0, 0.031), run_with(90.0, 0.010)]  # one outlier repeat
    sd = [run_with(45.0, 0.020, counters), run_with(46.5, 0.020, counters), run_with(46.0, 0.021, counters)]
    result = result_of(ref, sd)
    # Repeat i of SD against repeat i of the reference: 1.5, 1.5 and 0.51 (the outlier pair); median 1.5.
    assert result.repeat_speedups("output_throughput") == pytest.approx([45 / 30, 46.5 / 31, 46 / 90])
    assert result.speedup("output_throughput") == pytest.approx(1.5)
    assert result.speedup("median_tpot_ms") == pytest.approx(30.0 / 20.0)  # reference / SD for latencies
    assert result.acceptance_rate == pytest.approx(90 / 120)
    assert result.acceptance_length == pytest.approx(1 + 90 / 30)
    assert result.per_position_acceptance == pytest.approx([1.0, 0.8, 0.7, 0.5])
    assert result.match_rate == 1.0
    assert result.summary()["speedup_output_throughput"] == result.speedup()


def test_counters_add_and_subtract():
    a = SpecDecodeCounters(1, 4, 2, {0: 1, 1: 1})
    b = SpecDecodeCounters(2, 8, 3, {0: 2, 1: 1})
    assert (a + b).num_accepted_tokens == 5 and (a + b).accepted_per_position == {0: 3, 1: 2}
    assert (b - a).num_drafts == 1
    # An unavailable repeat makes the total unavailable, with its reason: never a partial sum.
    total = SpecDecodeCounters.unavailable("no counters at http://x/metrics") + a
    assert not total.present and total.problem == "no counters at http://x/metrics"


def test_output_comparison_finds_the_first_divergence_with_context():
    ref = [Rec(0, token_ids=[1, 2, 3]), Rec(1, token_ids=list(range(20))), Rec(2, token_ids=[5, 6])]
    sd = [Rec(0, token_ids=[1, 2, 3]), Rec(1, token_ids=list(range(12)) + [99, 98]), Rec(2, token_ids=[5, 6, 7])]
    comparison = compare_outputs(ref, sd, decode=lambda ids: "|".join(map(str, ids)))
    assert comparison.match_rate == pytest.approx(1 / 3)
    first, second = comparison.diverged
    assert first.first_divergence == 12
    assert first.reference_context == [7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    assert first.speculative_context == [7, 8, 9, 10, 11, 99, 98]
    assert first.speculative_text == "7|8|9|10|11|99|98"
    assert second.first_divergence == 2 and (second.reference_tokens, second.speculative_tokens) == (2, 3)
    with pytest.raises(ValueError, match="request count"):
        compare_outputs(ref, sd[:2])
