"""gpt-oss-120b with EAGLE-3: the published studies, as regression tests.

Run on a GPU box with ``pytest examples/gpu --specdec-gpu`` (see README.md in
this folder for the data files and the run time). Three blocks:

1. ``test_eagle3_grid``: the 7 workloads x 5 access patterns grid of
   docs/references.md#blackwell-eagle-3 (Experiment 3), with the
   ``nvidia/gpt-oss-120b-Eagle3-throughput`` draft at k=1, that study's server
   flags, and per-cell floors on speedup and acceptance rate.
2. ``test_eagle3_draft_length``: the same draft at k=1 and k=3 on the study's
   Experiment 2 traffic (random 1024/1024, one request at a time), where k=3
   lost 30% to the baseline.
3. ``test_concurrency_sweep`` + ``test_concurrency_sweep_geomean``:
   docs/references.md#h200-concurrency, concurrency 1, 5, 25, 50, 100,
   200 on ShareGPT (k = 2, 3, 4: the study's draft-token sweep), MLPerf and
   SWE-bench (k = 3); each level is one test, and one test per series checks
   the geometric mean over the levels against the published one.

Together the blocks cover k = 1, 2, 3, 4, each k with the study that published it.

Every threshold is the published number times MARGIN (a floor 10% below what
the study measured on its hardware and vLLM version). Some published ratios
are below 1 (SD lost there): those cells are floors that catch SD getting even
worse, not claims that SD wins.
"""

from __future__ import annotations

import statistics

import pytest

from pytest_specdec import SpecDecodeCounters, concurrency_sweep
from pytest_specdec.measure.sweep import SweepResult

# Published figures stay between fmt: off and on: the formatter would split a figure from the
# comment citing it, and tests/plugin/test_examples_gpu.py checks that every figure cites its source.
# fmt: off
MARGIN = 0.90  # threshold = MARGIN x published number; see README.md in this folder
# fmt: on

TARGET = "openai/gpt-oss-120b"
# The draft the Blackwell study found best (its Experiment 2) and used for Experiment 3.
THROUGHPUT_DRAFT = "nvidia/gpt-oss-120b-Eagle3-throughput"
# The draft the H200 concurrency study used. Its acceptance numbers belong to
# this draft: to hold the throughput draft to the same throughput gains, set
# SWEEP_DRAFT = THROUGHPUT_DRAFT and drop the acceptance checks of the sweep.
H200_DRAFT = "nvidia/gpt-oss-120b-Eagle3-v2"
SWEEP_DRAFT = H200_DRAFT

# The Blackwell study's vLLM config (GPT-OSS_Blackwell.yaml, vLLM 0.14.1), as flags.
BLACKWELL_SERVER_ARGS = [
    "--kv-cache-dtype",
    "fp8",
    "--compilation-config",
    '{"pass_config":{"fuse_allreduce_rms":true,"eliminate_noops":true}}',
    "--async-scheduling",
    "--no-enable-prefix-caching",
    "--max-cudagraph-capture-size",
    "2048",
    "--max-num-batched-tokens",
    "8192",
    "--stream-interval",
    "20",
]


def blackwell_eagle3(k: int):
    """The Blackwell study's server: throughput draft with k draft tokens."""
    return pytest.mark.specdec(
        model=TARGET,
        speculative_config={
            "method": "eagle3",
            "model": THROUGHPUT_DRAFT,
            "num_speculative_tokens": k,
            "draft_tensor_parallel_size": 1,
        },
        server_args=BLACKWELL_SERVER_ARGS,
        requires_gpu=True,
    )


# ---------------------------------------------------------------------------
# 1. The 7 x 5 grid (docs/references.md#blackwell-eagle-3, Experiment 3)
# ---------------------------------------------------------------------------

# The tables' columns, in the published order. sharegpt, spec_bench and
# burstgpt read data files: give their paths with PYTEST_SPECDEC_SHAREGPT_PATH,
# PYTEST_SPECDEC_SPEC_BENCH_PATH, PYTEST_SPECDEC_BURSTGPT_PATH (or the ini keys
# specdec_sharegpt_path, specdec_spec_bench_path, specdec_burstgpt_path).
GRID_WORKLOADS = ("random_x", "random_l", "random_m", "random_s", "sharegpt", "spec_bench", "burstgpt")
GRID_PATTERNS = ("burstiness_high", "burstiness_low", "burstiness_mid", "throughput_high", "throughput_low")

# Output token throughput with EAGLE-3 relative to the baseline, in percent,
# one row per access pattern, columns as GRID_WORKLOADS, copied from the study.
# fmt: off
PUBLISHED_SPEEDUP_PCT = {
    "burstiness_high": (125.4, 108.5, 97.1, 92.1, 100.8, 102.6, 108.3),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Output token throughput"
    "burstiness_low": (126.2, 114.1, 97.7, 99.0, 99.3, 99.7, 101.8),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Output token throughput"
    "burstiness_mid": (127.0, 112.4, 97.1, 100.4, 102.0, 106.4, 107.7),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Output token throughput"
    "throughput_high": (124.5, 109.2, 92.7, 90.3, 108.5, 107.7, 107.8),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Output token throughput"
    "throughput_low": (68.3, 83.3, 63.3, 79.3, 83.8, 91.9, 81.5),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Output token throughput"
}
# fmt: on

# Draft acceptance rate (accepted / drafted tokens), in percent, same layout.
# fmt: off
PUBLISHED_ACCEPTANCE_PCT = {
    "burstiness_high": (71.1, 70.9, 36.9, 46.6, 53.0, 70.6, 58.5),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Accept ratio"
    "burstiness_low": (71.4, 72.0, 36.8, 45.7, 53.6, 70.4, 58.5),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Accept ratio"
    "burstiness_mid": (72.0, 71.8, 36.5, 46.7, 53.9, 70.4, 57.9),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Accept ratio"
    "throughput_high": (70.3, 71.8, 36.9, 45.1, 53.8, 70.4, 58.2),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Accept ratio"
    "throughput_low": (70.1, 65.2, 37.9, 49.6, 53.6, 70.4, 51.0),  # docs/references.md#blackwell-eagle-3, Experiment 3, table "Accept ratio"
}
# fmt: on

# k in Experiment 3: the study runs "the throughput model" after Experiment 2
# found k=1 the only setting that beat the baseline, and its config shows k=1.
GRID_K = 1

GRID = [
    pytest.param(
        workload,
        pattern,
        marks=[pytest.mark.workload(workload), pytest.mark.access_pattern(pattern)],
        id=f"{workload}-{pattern}",
    )
    for workload in GRID_WORKLOADS
    for pattern in GRID_PATTERNS
]


@blackwell_eagle3(GRID_K)
@pytest.mark.parametrize(("workload", "pattern"), GRID)
def test_eagle3_grid(specdec, workload, pattern):
    column = GRID_WORKLOADS.index(workload)
    result = specdec.run()
    result.assert_speedup(min=MARGIN * PUBLISHED_SPEEDUP_PCT[pattern][column] / 100)
    result.assert_acceptance(min_rate=MARGIN * PUBLISHED_ACCEPTANCE_PCT[pattern][column] / 100)


# ---------------------------------------------------------------------------
# 2. Draft length on one stream (docs/references.md#blackwell-eagle-3, Experiment 2)
# ---------------------------------------------------------------------------

# k: (SD output tok/s, baseline output tok/s, acceptance rate, acceptance length,
#     per-position acceptance rates), all as published (percentages as fractions).
# fmt: off
PUBLISHED_DRAFT_LENGTH = {
    1: (180.67, 177.71, 0.7058, 1.71, (0.7058,)),  # docs/references.md#blackwell-eagle-3, Experiment 2 results table, "throughput (num=1)" vs "baseline" (concurrency 1)
    3: (124.73, 177.71, 0.1979, 1.59, (0.5496, 0.0426, 0.0016)),  # docs/references.md#blackwell-eagle-3, Experiment 2 results table, "throughput (num=3)" vs "baseline" (concurrency 1)
}
# fmt: on


@pytest.mark.parametrize(
    "k",
    [
        pytest.param(
            k,
            marks=[
                blackwell_eagle3(k),
                # Experiment 2's traffic: random 1024 in / 1024 out, --max-concurrency 1 --num-prompts 32.
                pytest.mark.workload("random_s", output_len=1024),
                pytest.mark.access_pattern("throughput_low", num_prompts=32),
            ],
            id=f"k{k}",
        )
        for k in PUBLISHED_DRAFT_LENGTH
    ],
)
def test_eagle3_draft_length(specdec, k):
    sd_tok_s, baseline_tok_s, rate, length, per_position = PUBLISHED_DRAFT_LENGTH[k]
    result = specdec.run()
    result.assert_speedup(min=MARGIN * sd_tok_s / baseline_tok_s)
    result.assert_acceptance(
        min_rate=MARGIN * rate, min_length=MARGIN * length, min_per_position=[MARGIN * p for p in per_position]
    )


# The machinery at a forced acceptance (docs/engines.md): Experiment 2 found k=3 slower than no SD at the
# draft's own acceptance. Is the draft too weak there, or does a k=3 step cost too much on this GPU? Forced to
# accept a set mean length whatever the drafts say, the engine leaves only the machinery: the sweep measures the
# speedup at lengths from half a token above 1 up to k+1, on Experiment 2's traffic, one server start a length.
FORCED_K = 3
FORCED_LENGTHS = tuple(1 + step / 2 for step in range(1, 2 * FORCED_K + 1))  # 1.5, 2, ..., k+1


@pytest.mark.specdec(
    model=TARGET,
    speculative_config={
        "method": "eagle3",
        "model": THROUGHPUT_DRAFT,
        "num_speculative_tokens": FORCED_K,
        "draft_tensor_parallel_size": 1,
        "rejection_sample_method": "synthetic",  # vLLM's synthetic sampler (vllm-project/vllm#38045)
        "synthetic_acceptance_length": (1 + FORCED_K + 1) / 2,  # each sweep length replaces it
    },
    server_args=BLACKWELL_SERVER_ARGS,
    requires_gpu=True,
)
@pytest.mark.workload("random_s", output_len=1024)
@pytest.mark.access_pattern("throughput_low", num_prompts=32)
def test_eagle3_forced_acceptance_sweep(specdec):
    sweep = specdec.sweep_acceptance(FORCED_LENGTHS)
    print(f"\n{sweep.table()}\n{sweep.curve().describe()}")
    # With every draft accepted (k+1 tokens a step) an EAGLE-3 head must pay for its step; a break-even beyond
    # k+1 says the machinery, not the draft, is why SD loses on this GPU.
    sweep.assert_break_even(max_length=FORCED_K + 1)


# ---------------------------------------------------------------------------
# 3. Concurrency sweep 1..200 (docs/references.md#h200-concurrency)
# ---------------------------------------------------------------------------

# The study's levels with 100 prompts each. It drew a disjoint set of 100
# prompts per level; here every level samples the data file with the same
# seed, so one reference run per level serves every SD configuration.
SWEEP_PATTERNS = concurrency_sweep((1, 5, 25, 50, 100, 200), num_prompts=100)
SWEEP_LEVELS = tuple(p.max_concurrency for p in SWEEP_PATTERNS)

# series: (workload, k, published geometric-mean output-throughput ratio
#          SD / baseline over the six levels, acceptance rate, acceptance length)
# The ShareGPT k=2 and k=4 ratios are the draft-token table's geometric-mean
# output throughputs over the ShareGPT baseline's 970.9 tok/s (the k=3 column
# equals the ShareGPT summary's SD figure, so both tables share that baseline).
# The study gives acceptance only for its ShareGPT draft-token sweep (None: not published).
# Data files: PYTEST_SPECDEC_SHAREGPT_PATH, PYTEST_SPECDEC_MLPERF_PATH,
# PYTEST_SPECDEC_SWE_BENCH_PATH (or specdec_sharegpt_path, specdec_mlperf_path, specdec_swe_bench_path).
# fmt: off
SWEEP_SERIES = {
    "sharegpt-k2": ("sharegpt", 2, 1160.6 / 970.9, 0.454, 1.91),  # docs/references.md#h200-concurrency, draft-token "Geometric mean summary" (2 draft) over the ShareGPT "Geometric mean summary" baseline; "Draft acceptance rate analysis" table
    "sharegpt-k3": ("sharegpt", 3, 1171.7 / 970.9, 0.356, 2.07),  # docs/references.md#h200-concurrency, ShareGPT "Geometric mean summary" (output throughput +20.7%); "Draft acceptance rate analysis" table
    "sharegpt-k4": ("sharegpt", 4, 1078.4 / 970.9, 0.283, 2.13),  # docs/references.md#h200-concurrency, draft-token "Geometric mean summary" (4 draft) over the ShareGPT "Geometric mean summary" baseline; "Draft acceptance rate analysis" table
    "mlperf-k3": ("mlperf", 3, 1150.5 / 1051.0, None, None),  # docs/references.md#h200-concurrency, MLPerf "TP=1 geometric mean summary" (output throughput +9.5%)
    "swe_bench-k3": ("swe_bench", 3, 1377.94 / 1143.87, None, None),  # docs/references.md#h200-concurrency, SWE-bench "Geometric mean summary" (output throughput +20.5%)
}
# fmt: on

# The few single-level figures the study states exactly: (series, level) -> SD / baseline output throughput.
# fmt: off
PUBLISHED_LEVEL_SPEEDUP = {
    ("swe_bench-k3", 100): 3250.07 / 2620.89,  # docs/references.md#h200-concurrency, "Cost implications for production deployments" (SWE-bench, TP=1, concurrency 100)
}
# fmt: on

# Filled by test_concurrency_sweep, read by test_concurrency_sweep_geomean:
# {series: {concurrency level: SpecDecResult}}. Module state, so the geometric-
# mean test sees the levels that ran in this process: run the file in one
# process (with pytest-xdist, use --dist loadfile).
SWEEP_RESULTS: dict[str, dict[int, object]] = {}


def h200_eagle3(series: str):
    """The H200 study's server: vLLM defaults (prefix caching on), its draft, the series' k, TP=1."""
    k = SWEEP_SERIES[series][1]
    return pytest.mark.specdec(
        model=TARGET,
        speculative_config={"method": "eagle3", "model": SWEEP_DRAFT, "num_speculative_tokens": k},
        requires_gpu=True,
    )


@pytest.mark.parametrize(
    ("series", "level"),
    [
        pytest.param(
            series,
            pattern.max_concurrency,
            marks=[
                h200_eagle3(series),
                pytest.mark.workload(SWEEP_SERIES[series][0]),
                pytest.mark.access_pattern(pattern),
            ],
            id=f"{series}-c{pattern.max_concurrency}",
        )
        for series in SWEEP_SERIES
        for pattern in SWEEP_PATTERNS
    ],
)
def test_concurrency_sweep(specdec, series, level):
    result = specdec.run()
    SWEEP_RESULTS.setdefault(series, {})[level] = result  # recorded before any check, for the geomean test
    published = PUBLISHED_LEVEL_SPEEDUP.get((series, level))
    if published is not None:
        result.assert_speedup(min=MARGIN * published)


# Same marker as the series' sweep tests: the plugin orders tests by server
# configuration, keeping file order within one, so this runs after them; it
# starts no server itself (no specdec fixture) and is skipped like them
# without --specdec-gpu.
@pytest.mark.parametrize(
    "series", [pytest.param(series, marks=[h200_eagle3(series)], id=series) for series in SWEEP_SERIES]
)
def test_concurrency_sweep_geomean(series):
    results = SWEEP_RESULTS.get(series, {})
    if not results:
        pytest.skip(
            f"no test_concurrency_sweep[{series}-c*] level ran in this process, nothing to summarise "
            "(deselected, or run on another pytest-xdist worker: use --dist loadfile)"
        )
    missing = [level for level in SWEEP_LEVELS if level not in results]
    assert not missing, (
        f"{series}: no result for concurrency {missing} (those sweep tests failed before measuring); "
        "the published geometric mean covers all of " + ", ".join(map(str, SWEEP_LEVELS))
    )
    _, k, published_gain, published_rate, published_length = SWEEP_SERIES[series]
    speedups = {level: results[level].speedup() for level in SWEEP_LEVELS}
    gain = statistics.geometric_mean(speedups.values())
    per_level = ", ".join(f"c{level}: {value:.3f}" for level, value in speedups.items())
    assert gain >= MARGIN * published_gain, (
        f"{series}: geometric-mean output-throughput speedup {gain:.3f} < {MARGIN * published_gain:.3f} "
        f"(published {published_gain:.3f} x margin {MARGIN}); per level {per_level}"
    )
    if published_rate is None:
        return
    # Acceptance over the whole sweep, as the study read it off the server
    # logs of every run: counters summed over levels, then the ratios.
    counters = sum((results[level].counters for level in SWEEP_LEVELS), SpecDecodeCounters(present=False))
    assert counters.present, f"{series}: the server exposed no spec-decode counters"
    assert counters.acceptance_rate >= MARGIN * published_rate, (
        f"{series} (k={k}): acceptance rate {counters.acceptance_rate:.3f} < {MARGIN * published_rate:.3f} "
        f"(published {published_rate:.3f} x margin {MARGIN})"
    )
    assert counters.acceptance_length >= MARGIN * published_length, (
        f"{series} (k={k}): acceptance length {counters.acceptance_length:.3f} < {MARGIN * published_length:.3f} "
        f"(published {published_length:.3f} x margin {MARGIN})"
    )


# The study prices SD at its peak throughput (concurrency 100, SWE-bench, TP=1): $4.41 against $3.56 per 1M
# output tokens on an H200 instance at $41.62 an hour, 19.4% saved.  An operator buys interactivity, so the same
# sweep read as its throughput-interactivity frontier: at the per-user speed the reference serves at its peak,
# SD's frontier must give at least the study's concurrency-100 ratio (SD serves each user faster at the same
# concurrency, so at the reference's per-user speed SD's point lies at that concurrency or beyond it).
H200_USD_PER_HOUR = 41.62  # docs/references.md#h200-concurrency, "Cost implications for production deployments"


@pytest.mark.parametrize(
    "series", [pytest.param("swe_bench-k3", marks=[h200_eagle3("swe_bench-k3")], id="swe_bench-k3")]
)
def test_concurrency_sweep_frontier(series):
    results = SWEEP_RESULTS.get(series, {})
    missing = [level for level in SWEEP_LEVELS if level not in results]
    if len(missing) == len(SWEEP_LEVELS):
        pytest.skip(f"no test_concurrency_sweep[{series}-c*] level ran in this process (use --dist loadfile)")
    assert not missing, f"{series}: no result for concurrency {missing}: the frontier needs every level"
    sweep = SweepResult([results[level] for level in SWEEP_LEVELS])
    reference, _ = sweep.frontiers()
    peak = next(p for p in reference.points() if p.concurrency == 100)
    worth = sweep.assert_pays_at(peak.per_user, min=MARGIN * PUBLISHED_LEVEL_SPEEDUP[(series, 100)])
    priced = sweep.worth_at(peak.per_user, usd_per_gpu_hour=H200_USD_PER_HOUR)  # the study's $4.41 and $3.56
    print(
        f"\n{sweep.frontier_table(peak.per_user, H200_USD_PER_HOUR)}\nUSD per 1M output tokens: {priced.usd_per_million()}"
    )
    assert worth.ratio is not None and priced.saving() is not None


# ---------------------------------------------------------------------------
# 4. SLO capacity (docs/references.md#h200-concurrency): how many concurrent
#    requests one H200 carries within a TTFT objective, with and without SD
# ---------------------------------------------------------------------------

# The study's ShareGPT runs, k=3 with its draft, priced on its H200 instance.
# Its text gives p95 TTFT at the two top levels: ~10.0 s with SD against
# 12.3 s without at concurrency 100, ~13.7 s against ~16.4 s at 200 (the
# paragraph under Figure 2). A 12 s p95 TTFT objective therefore sits between
# the two sides at concurrency 100: the reference should lose it below 100
# and SD keep it to 100 or beyond, so SD's capacity is at least the
# reference's (ratio >= 1, a published ordering, not a margin on a number).
CAPACITY_SLO_TTFT_MS = 12_000  # docs/references.md#h200-concurrency, p95 TTFT at concurrency 100 (Figure 2 text)
# fmt: off
CAPACITY_MIN_RATIO = 1.0  # docs/references.md#h200-concurrency, SD ~10.0 s vs 12.3 s p95 TTFT at concurrency 100
# fmt: on


@pytest.mark.specdec(
    model=TARGET,
    speculative_config={"method": "eagle3", "model": H200_DRAFT, "num_speculative_tokens": 3},
    requires_gpu=True,
)
@pytest.mark.workload("sharegpt")
# Closed loops at 25, 50, 100, 200 concurrent requests (the study's range, so max_load=200),
# then bisection and a second run at each end of the bracket: 100 prompts per probe (the study's
# 100 prompts per level). Beyond 200 a side is reported as a bound (">= 200"), never a plain ratio.
@pytest.mark.access_pattern("slo_capacity_concurrency", search_start=25, max_load=200, num_prompts=100)
@pytest.mark.specdec_slo(ttft_ms=CAPACITY_SLO_TTFT_MS, percentile=95)
def test_eagle3_slo_capacity(specdec):
    result = specdec.run()
    print(result.describe())
    result.assert_capacity(min_ratio=CAPACITY_MIN_RATIO)
