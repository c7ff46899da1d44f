"""Dynamic speculation: switch points of a k schedule, the no-fall check across them, and recommend_k.

Figures are synthetic (hand-computed expectations); the schedule rules are vLLM 0.32's
(`vllm/v1/spec_decode/dynamic/utils.py`), tested against the marker in test_spec.py.
"""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import MarkerError, ServerSpec, check_k_schedule
from pytest_specdec.analysis.dynamic_k import (
    KMeasurement,
    Switch,
    assert_no_fall_across_switches,
    check_no_fall_across_switches,
    levels_around_switches,
    measurements_from,
    recommend_k,
    schedule_of,
    switch_points,
)
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.measure.sweep import SweepResult

TWO_STEP = [[1, 1, 4], [2, 4, 2]]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def config(rows, k=4):
    return {**NGRAM, "num_speculative_tokens": k, "num_speculative_tokens_per_batch_size": rows}


# --- the schedule and its switches -------------------------------------------------------------


def test_schedule_of_is_what_vllm_runs_sorted_and_clamped():
    assert schedule_of(None) is None and schedule_of(NGRAM) is None
    assert schedule_of(config([[5, 8, 1], [1, 4, 6]], k=4)) == [(1, 4, 4), (5, 8, 1)]  # k=6 runs as 4


def test_a_switch_is_the_last_batch_of_one_k_and_the_first_of_the_next():
    assert switch_points(TWO_STEP) == [Switch(1, 2, 4, 2)]
    assert switch_points(config(TWO_STEP)) == [Switch(1, 2, 4, 2)]
    assert Switch(1, 2, 4, 2).describe() == "k 4 -> 2 between batch 1 and 2"
    # A gap keeps the k before it (vLLM's carry-forward): 17..31 run at k=3, so k switches at 31 -> 32.
    assert switch_points([[1, 16, 3], [32, 128, 2], [129, 512, 0]]) == [Switch(31, 32, 3, 2), Switch(128, 129, 2, 0)]
    assert switch_points([[1, 4, 3], [5, 8, 3], [9, 16, 1]]) == [Switch(8, 9, 3, 1)]  # equal neighbours: no switch
    # Clamped to num_speculative_tokens=2, [1,1,4] and [2,4,2] both run at k=2: no switch at all.
    assert switch_points(config(TWO_STEP, k=2)) == []
    with pytest.raises(MarkerError, match=r"num_speculative_tokens_per_batch_size\[1\]: range 3..8 overlaps"):
        switch_points([[1, 4, 3], [3, 8, 1]])


def test_levels_around_switches_take_both_sides_and_one_beyond_each():
    assert levels_around_switches(TWO_STEP) == [1, 2, 3]  # no level 0
    assert levels_around_switches([[1, 16, 3], [32, 128, 2]]) == [30, 31, 32, 33]
    assert levels_around_switches([[1, 2, 4], [3, 4, 2], [5, 64, 1]]) == [1, 2, 3, 4, 5, 6]
    assert levels_around_switches([[1, 2, 4], [3, 4, 2], [5, 64, 1]], max_level=4) == [1, 2, 3, 4]
    assert levels_around_switches([[1, 64, 3]]) == []


# --- no fall across a switch -------------------------------------------------------------------


def test_throughput_that_rises_or_dips_within_tolerance_across_the_switch_passes():
    check = assert_no_fall_across_switches({1: 100.0, 2: 180.0, 3: 240.0}, TWO_STEP)
    assert check.ok and check.rows[0]["change"] == pytest.approx(0.8)
    assert check_no_fall_across_switches({1: 100.0, 2: 91.0}, TWO_STEP).ok  # -9% within 10%
    assert not check_no_fall_across_switches({1: 100.0, 2: 91.0}, TWO_STEP, tolerance=0.05).ok


def test_a_fall_across_the_switch_fails_with_a_table():
    # vllm#49548's shape: 232 tok/s below the switch, 24 above it.
    with pytest.raises(AssertionError) as info:
        assert_no_fall_across_switches({4: 232.0, 5: 24.0, 6: 157.0}, [[1, 4, 2], [5, 512, 0]])
    message = str(info.value)
    assert message.startswith("throughput falls (or was not measured) across a k switch, tolerance 10%")
    assert "k 2 -> 0 between batch 4 and 5" in message
    assert "232.0" in message and "24.0" in message and "-89.7%" in message and "FALLS 89.7% (> 10%)" in message
    assert "SD output tok/s by concurrency: c4: 232.0, c5: 24.0, c6: 157.0" in message


def test_levels_not_measured_are_named_never_passed():
    check = check_no_fall_across_switches({1: 100.0, 3: 240.0}, TWO_STEP)
    assert not check.ok and check.rows[0]["verdict"] == "concurrency 2 not measured"
    nan = check_no_fall_across_switches({1: math.nan, 2: 150.0}, TWO_STEP)
    assert not nan.ok and "concurrency 1 not measured" in nan.table()
    nothing = check_no_fall_across_switches({1: 100.0, 2: 50.0}, config(TWO_STEP, k=2))
    assert not nothing.ok and "switches k nowhere" in nothing.table()
    for bad in (-0.1, 1.0, True, "0.1"):
        with pytest.raises(ValueError, match="tolerance must be a fraction"):
            check_no_fall_across_switches({1: 1.0}, TWO_STEP, tolerance=bad)


SPEC = ServerSpec("m", config(TWO_STEP))


class Rec:
    def __init__(self, index, lag=0.0):
        self.index, self.prompt_len, self.output_tokens, self.success = index, 8, 10, True
        self.ttft, self.itl, self.latency, self.dispatch_lag = 0.1, [0.05] * 9, 0.55, lag
        self.token_ids, self.text, self.top_logprobs = list(range(10)), "x", None


def level(concurrency, sd_seconds, ref_seconds, lag=0.0):
    """One sweep level of SPEC: 4 requests of 10 tokens each side (tok/s = 40 / seconds)."""
    ref = [Rec(i) for i in range(4)]
    sd = [Rec(i, lag=lag) for i in range(4)]
    runs = (
        Run(SPEC.reference(), 0, summarize(ref, ref_seconds), ref, None, ["vllm"], 0.0),
        Run(SPEC, 0, summarize(sd, sd_seconds), sd, None, ["vllm"], 0.0),
    )
    outputs = compare_outputs(ref, sd)
    return SpecDecResult(
        SPEC,
        {"name": "w"},
        {"name": f"concurrency_{concurrency}", "max_concurrency": concurrency},
        [runs[0]],
        [runs[1]],
        outputs,
        {},
        outputs_per_repeat=[outputs],
    )


def test_a_sweep_gives_sds_throughput_and_the_references_change_beside_it():
    sweep = SweepResult([level(1, 0.4, 0.5), level(2, 0.8, 0.4), level(3, 0.5, 0.3)])
    check = check_no_fall_across_switches(sweep, SPEC.speculative_config)
    assert check.throughput == {1: pytest.approx(100.0), 2: pytest.approx(50.0), 3: pytest.approx(80.0)}
    row = check.rows[0]
    assert not check.ok and row["change"] == pytest.approx(-0.5) and row["reference_change"] == pytest.approx(0.25)
    assert "reference: c1: 80.0, c2: 100.0, c3: 133.3" in check.table()
    # The machine itself stopped scaling: said beside the fall.
    fell = check_no_fall_across_switches(SweepResult([level(1, 0.4, 0.4), level(2, 0.8, 0.5)]), TWO_STEP)
    assert "FALLS 50.0% (> 10%); the reference fell too (-20.0%)" in fell.rows[0]["verdict"]


def test_a_client_bound_level_is_not_measured_and_says_why():
    sweep = SweepResult([level(1, 0.4, 0.5), level(2, 0.3, 0.4, lag=0.05)])
    check = check_no_fall_across_switches(sweep, TWO_STEP)
    assert not check.ok
    assert check.rows[0]["verdict"].startswith("concurrency 2 not measured (client-bound: the SD run")


# --- recommend_k ---------------------------------------------------------------------------------


def test_the_best_median_wins_per_level_and_equal_neighbours_merge_into_bands():
    data = [
        (k, c, value)
        for k, c, values in (
            (1, 1, (100, 102, 101)),
            (2, 1, (120, 118, 121)),
            (4, 1, (140, 139, 142)),
            (1, 2, (190, 188, 191)),
            (2, 2, (200, 198, 203)),
            (4, 2, (230, 232, 229)),
            (1, 8, (600, 605, 598)),
            (2, 8, (640, 641, 639)),
            (4, 8, (560, 555, 570)),
            (1, 16, (900, 910, 905)),
            (2, 16, (950, 945, 955)),
            (4, 16, (700, 690, 705)),
        )
        for value in values
    ]
    bands = recommend_k(data)
    assert bands.as_schedule() == [[1, 2, 4], [8, 16, 2]]
    assert check_k_schedule(bands.as_schedule())  # pasteable into num_speculative_tokens_per_batch_size
    assert [p.concurrency for p in bands[0].levels] == [1, 2] and bands[1].levels[0].stats(2).median == 640
    table = bands.table()
    assert "k=4 tok/s (min-max)" in table and "140.0 (139.0-142.0)" in table
    assert table.endswith("num_speculative_tokens_per_batch_size: [[1, 2, 4], [8, 16, 2]]")


def test_repeats_with_failed_requests_are_discarded_and_counted():
    data = [
        KMeasurement(4, 1, 150.0),
        KMeasurement(4, 1, 900.0, failed_requests=2),
        KMeasurement(4, 1, 148.0),
        KMeasurement(2, 1, 149.0),
        KMeasurement(2, 1, 120.0),
        KMeasurement(2, 1, 121.0),
        KMeasurement(2, 1, math.nan),
    ]
    (band,) = recommend_k(data)
    pick = band.levels[0]
    assert pick.discarded == 2 and pick.stats(4).repeats == 2 and pick.stats(4).median == 149.0
    assert pick.k == 4 and "2 repeat(s) discarded" in recommend_k(data).table()
    # A level where every repeat failed is named, and vLLM keeps the band below through it.
    failing = recommend_k(data + [KMeasurement(4, 4, 300.0, 1), KMeasurement(2, 4, 280.0, 3)])
    assert failing.as_schedule() == [[1, 1, 4]] and failing.skipped == [
        "concurrency 4: every repeat failed (2 discarded)"
    ]
    assert "no k at concurrency 4: every repeat failed (2 discarded)" in failing.table()
    with pytest.raises(ValueError, match=r"at least one valid measurement; concurrency 2: every repeat failed"):
        recommend_k([KMeasurement(4, 2, 300.0, 1)])
    with pytest.raises(ValueError, match="none given"):
        recommend_k([])


def test_a_tie_within_noise_goes_to_the_smaller_k_and_is_said():
    # k=4's median is higher, but k=2's lies within k=4's repeats (140-155): noise, not a difference.
    data = [
        (4, 1, 150.0),
        (4, 1, 140.0),
        (4, 1, 155.0),
        (2, 1, 142.0),
        (2, 1, 138.0),
        (2, 1, 141.0),
        (1, 1, 120.0),
        (1, 1, 119.0),
    ]
    (band,) = recommend_k(data)
    assert band.k == 2 and band.levels[0].tie == "k=2, 4 tie within noise, the smaller k chosen"
    # One lucky repeat of k=2 (149, inside k=4's range) does not make a tie: its median (121) decides.
    lucky = [(4, 1, 150.0), (4, 1, 148.0), (4, 1, 151.0), (2, 1, 149.0), (2, 1, 121.0), (2, 1, 120.0)]
    assert recommend_k(lucky)[0].k == 4 and not recommend_k(lucky)[0].levels[0].tie
    # Single repeats: within 1% of the best is a tie, 2% is not.
    assert recommend_k([(4, 1, 100.0), (2, 1, 99.5)])[0].k == 2
    assert recommend_k([(4, 1, 100.0), (2, 1, 98.0)])[0].k == 4
    # No speculation (k=0, the reference) can win a tie too: the band turns SD off.
    assert recommend_k([(4, 8, 300.0), (0, 8, 299.0), (4, 1, 150.0), (0, 1, 100.0)]).as_schedule() == [
        [1, 1, 4],
        [8, 8, 0],
    ]


def test_paired_repeats_separate_prompt_sets_from_noise():
    # Measured on the CPU build (benchmarks/dynamic_k.py, code_edit 192/32, 6 prompts, 2 repeats): repeat 2
    # sent other prompts and ran ~20% faster for every k, so unpaired every k "ties" at concurrency 1.
    runs = {
        (0, 1): (15.6, 16.1),
        (1, 1): (15.8, 17.8),
        (2, 1): (16.3, 19.9),
        (4, 1): (17.2, 21.2),
        (0, 4): (44.5, 45.9),
        (1, 4): (46.3, 50.7),
        (2, 4): (44.6, 52.1),
        (4, 4): (46.3, 53.6),
    }
    unpaired = recommend_k([(k, c, v) for (k, c), values in runs.items() for v in values])
    assert unpaired.as_schedule() == [[1, 1, 2], [4, 4, 1]] and unpaired[0].levels[0].tie.startswith("k=2, 4 tie")
    # Paired, k=4 beat every other k in both repeats at concurrency 1 (by 5-6% over k=2); at 4 it matched k=1
    # in repeat 1 (46.3 both), so those two tie and the smaller k is taken.
    paired = recommend_k([KMeasurement(k, c, v, 0, r) for (k, c), values in runs.items() for r, v in enumerate(values)])
    assert paired.as_schedule() == [[1, 1, 4], [4, 4, 1]]
    assert not paired[0].levels[0].tie and paired[1].levels[0].tie == "k=1, 4 tie within noise, the smaller k chosen"


def test_the_first_band_starts_at_batch_size_1_as_vllm_requires():
    assert recommend_k([(3, 2, 100.0), (1, 2, 80.0), (1, 4, 150.0)]).as_schedule() == [[1, 2, 3], [4, 4, 1]]


def test_measurements_from_results_take_every_repeat_and_the_reference_once_per_level_as_k0():
    def result(k, concurrency, sd, ref):
        def runs(values):
            return [
                SimpleNamespace(repeat=i, metrics=SimpleNamespace(output_throughput=v, failed=f))
                for i, (v, f) in enumerate(values)
            ]

        return SimpleNamespace(
            spec=ServerSpec("m", {**NGRAM, "num_speculative_tokens": k}),
            pattern={"max_concurrency": concurrency},
            speculative_runs=runs(sd),
            reference_runs=runs(ref),
        )

    got = measurements_from([result(4, 1, [(150, 0), (152, 1)], [(100, 0)]), result(2, 1, [(140, 0)], [(100, 0)])])
    assert got == [
        KMeasurement(4, 1, 150, 0, 0),
        KMeasurement(4, 1, 152, 1, 1),
        KMeasurement(0, 1, 100, 0, 0),
        KMeasurement(2, 1, 140, 0, 0),
    ]
    assert [m.k for m in measurements_from([result(4, 1, [(150, 0)], [(100, 0)])], include_reference=False)] == [4]


# --- the server command --------------------------------------------------------------------------


def test_the_schedule_reaches_vllm_as_json_rows_and_other_engines_refuse_it():
    import json

    from pytest_specdec.config.spec import parse_specdec_marker
    from pytest_specdec.engines.base import LaunchRequest
    from pytest_specdec.engines.vllm import build_command

    spec = parse_specdec_marker(
        (),
        {
            "model": "specdec:smollm2-135m",
            "server_args": ["--enforce-eager"],
            "speculative_config": config(((1, 1, 4), (2, 4, 2))),
        },
    )
    command = build_command(
        LaunchRequest(
            spec=spec,
            device="cpu",
            host="127.0.0.1",
            port=41234,
            model_path="/m",
            speculative_config=spec.speculative_config,
            kv_cache_bytes=1 << 30,
            python="/venv/bin/python",
        )
    )
    sent = json.loads(command[command.index("--speculative-config") + 1])
    assert sent["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 4, 2]]  # tuples as JSON lists
    assert sent["num_speculative_tokens"] == 4
    for engine in ("sglang", "llamacpp"):  # no translation: refused at collection, never dropped silently
        with pytest.raises(
            MarkerError,
            match=r"speculative_config.num_speculative_tokens_per_batch_size: .*has no "
            r"setting for 'num_speculative_tokens_per_batch_size'",
        ):
            parse_specdec_marker(
                (),
                {
                    "model": "m",
                    "engine": engine,
                    "speculative_config": {
                        "method": "ngram",
                        "num_speculative_tokens": 4,
                        "num_speculative_tokens_per_batch_size": TWO_STEP,
                    },
                },
            )
