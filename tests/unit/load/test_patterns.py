import json
import math

import numpy as np
import pytest

from pytest_specdec.load.patterns import CATALOG, AccessPattern, PatternError, concurrency_sweep, resolve_pattern

INF = math.inf


@pytest.mark.parametrize(
    "name, rate, burstiness, concurrency, prompts",
    [
        ("throughput_low", INF, 1.0, 1, 16),
        ("throughput_high", INF, 1.0, 32, 256),
        ("burstiness_high", 64.0, 0.2, 32, 256),
        ("burstiness_mid", 8.0, 1.0, 32, 256),
        ("burstiness_low", 2.0, 4.0, 32, 256),
    ],
)
def test_catalog_values(name, rate, burstiness, concurrency, prompts):
    assert CATALOG[name] == AccessPattern(name, rate, burstiness, concurrency, prompts)


def test_catalog_has_exactly_the_field_patterns_and_the_capacity_searches():
    assert set(CATALOG) == {
        "throughput_low",
        "throughput_high",
        "burstiness_high",
        "burstiness_mid",
        "burstiness_low",
        "slo_capacity",
        "slo_capacity_concurrency",
        "trace_replay",
        "multi_turn",
    }
    assert CATALOG["slo_capacity"].search == "request_rate"
    assert CATALOG["slo_capacity_concurrency"].search == "max_concurrency"


def test_a_capacity_search_probes_one_load_at_a_time():
    search = CATALOG["slo_capacity"].with_overrides(search_start=0.5, max_probes=4, num_prompts=12)
    probe = search.at_load(2.0)
    assert (probe.request_rate, probe.search, probe.num_prompts, probe.burstiness) == (2.0, None, 12, 1.0)
    closed = CATALOG["slo_capacity_concurrency"].at_load(8)
    assert (closed.max_concurrency, closed.request_rate) == (8, math.inf)
    assert search.describe()["search_start"] == 0.5 and search.describe()["max_probes"] == 4
    with pytest.raises(PatternError, match="max_probes must be an int >= 2"):
        search.with_overrides(max_probes=1)
    with pytest.raises(PatternError, match="search_start must be a finite whole number"):
        CATALOG["slo_capacity_concurrency"].with_overrides(search_start=2.5)
    with pytest.raises(PatternError, match="is not a capacity search"):
        CATALOG["throughput_low"].at_load(2.0)


def test_overrides_return_a_changed_copy():
    base = CATALOG["burstiness_mid"]
    small = base.with_overrides(num_prompts=8, max_concurrency=2, request_rate=1.5, burstiness=3)
    assert (small.request_rate, small.burstiness, small.max_concurrency, small.num_prompts) == (1.5, 3.0, 2, 8)
    assert small.name == "burstiness_mid"
    assert base.num_prompts == 256  # the catalog entry is untouched
    assert base.with_overrides(request_rate=INF).request_rate == INF
    assert base.with_overrides(max_concurrency=None).max_concurrency is None
    assert base.with_overrides() is base
    assert base.with_overrides(num_prompts=np.int64(4)).num_prompts == 4


@pytest.mark.parametrize(
    "key, value",
    [
        ("request_rate", 0),
        ("request_rate", -1.0),
        ("request_rate", float("nan")),
        ("request_rate", "8"),
        ("request_rate", True),
        ("burstiness", 0.0),
        ("burstiness", None),
        ("max_concurrency", 0),
        ("max_concurrency", 2.5),
        ("max_concurrency", True),
        ("num_prompts", 0),
        ("num_prompts", None),
        ("num_prompts", 3.0),
    ],
)
def test_bad_override_values_name_the_key(key, value):
    with pytest.raises(PatternError, match=key):
        CATALOG["throughput_low"].with_overrides(**{key: value})


def test_unknown_override_key_is_named():
    with pytest.raises(PatternError, match="'concurrency'.*allowed: request_rate"):
        CATALOG["throughput_low"].with_overrides(concurrency=4)


def test_direct_construction_is_validated():
    with pytest.raises(PatternError, match="num_prompts"):
        AccessPattern("x", num_prompts=-3)
    with pytest.raises(PatternError, match="name"):
        AccessPattern("")


def test_resolve_catalog_name_with_overrides():
    pattern = resolve_pattern("throughput_high", {"num_prompts": 4})
    assert pattern == AccessPattern("throughput_high", INF, 1.0, 32, 4)


def test_resolve_pattern_object_and_registered():
    own = AccessPattern("peak_hour", request_rate=12, burstiness=0.5, num_prompts=100)
    assert resolve_pattern(own, {"num_prompts": 10}).num_prompts == 10
    assert resolve_pattern("peak_hour", {}, registered={"peak_hour": own}) is own
    shadow = AccessPattern("throughput_high", num_prompts=3)
    assert resolve_pattern("throughput_high", {}, registered={"throughput_high": shadow}) is shadow


def test_resolve_sweep_level_name():
    assert resolve_pattern("concurrency_25", {}) == concurrency_sweep([25])[0]


def test_unknown_name_lists_every_known_pattern():
    with pytest.raises(PatternError) as info:
        resolve_pattern("burstiness_max", {}, registered={"peak_hour": AccessPattern("peak_hour")})
    message = str(info.value)
    assert "burstiness_max" in message
    for name in [*CATALOG, "peak_hour", "concurrency_<N>"]:
        assert name in message


def test_resolve_rejects_other_types():
    with pytest.raises(PatternError, match="catalog name or an AccessPattern"):
        resolve_pattern(42, {})


def _gaps(offsets):
    return np.diff(np.concatenate([[0.0], offsets]))


@pytest.mark.parametrize("burstiness", [0.2, 1.0, 4.0])
def test_arrival_process_rate_and_burstiness(burstiness):
    rate, n = 50.0, 20000
    offsets = np.array(AccessPattern("p", rate, burstiness, None, n).arrival_offsets(seed=7))
    gaps = _gaps(offsets)
    assert len(offsets) == n and np.all(gaps >= 0)
    # The rescaling pins the end; the middle of the run must be at the rate too.
    assert n / offsets[-1] == pytest.approx(rate, rel=1e-9)
    assert (n // 2) / offsets[n // 2 - 1] == pytest.approx(rate, rel=0.05)
    # Gamma(shape=k) has CV 1/sqrt(k); rescaling by a constant keeps the CV.
    # Tolerance ~4 standard errors (gamma's excess kurtosis is 6/k).
    cv = gaps.std(ddof=1) / gaps.mean()
    expected = 1 / math.sqrt(burstiness)
    standard_error = expected * math.sqrt((6 / burstiness + 2) / (4 * n))
    assert abs(cv - expected) < 4 * standard_error + 0.01


def test_burstiness_orders_the_spread():
    cvs = []
    for burstiness in (0.2, 1.0, 4.0):
        gaps = _gaps(AccessPattern("p", 8, burstiness, None, 2000).arrival_offsets(seed=1))
        cvs.append(gaps.std() / gaps.mean())
    assert cvs[0] > cvs[1] > cvs[2]


def test_same_seed_same_offsets_other_seed_different():
    pattern = CATALOG["burstiness_mid"]
    assert pattern.arrival_offsets(seed=3) == pattern.arrival_offsets(seed=3)
    assert pattern.arrival_offsets(seed=3) != pattern.arrival_offsets(seed=4)
    assert pattern.arrival_offsets() == pattern.arrival_offsets(seed=0)


@pytest.mark.parametrize("name", ["burstiness_high", "burstiness_mid", "burstiness_low"])
def test_last_offset_is_num_prompts_over_rate(name):
    pattern = CATALOG[name]
    offsets = pattern.arrival_offsets(seed=11)
    assert len(offsets) == pattern.num_prompts
    assert offsets[-1] == pytest.approx(pattern.num_prompts / pattern.request_rate, rel=1e-12)
    assert offsets[0] > 0  # the first request waits for its own gap, as in vLLM
    assert offsets == sorted(offsets)


def test_single_prompt_is_sent_after_one_mean_gap():
    assert AccessPattern("one", request_rate=4, num_prompts=1).arrival_offsets() == [0.25]


def test_infinite_rate_sends_everything_at_once():
    assert CATALOG["throughput_high"].arrival_offsets(seed=5) == [0.0] * 256


def test_infinite_burstiness_is_evenly_spaced():
    offsets = AccessPattern("even", request_rate=4, burstiness=INF, num_prompts=4).arrival_offsets()
    assert offsets == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_bench_flags():
    assert CATALOG["burstiness_high"].bench_flags() == [
        "--request-rate",
        "64",
        "--burstiness",
        "0.2",
        "--max-concurrency",
        "32",
        "--num-prompts",
        "256",
    ]
    assert CATALOG["throughput_low"].bench_flags() == [
        "--request-rate",
        "inf",
        "--burstiness",
        "1",
        "--max-concurrency",
        "1",
        "--num-prompts",
        "16",
    ]
    unlimited = AccessPattern("u", request_rate=2.5, num_prompts=3).bench_flags()
    assert unlimited == ["--request-rate", "2.5", "--burstiness", "1", "--num-prompts", "3"]


def test_describe_is_json_safe():
    described = CATALOG["throughput_high"].describe()
    assert json.loads(json.dumps(described, allow_nan=False)) == described
    assert described == {
        "name": "throughput_high",
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 32,
        "num_prompts": 256,
        "arrivals": "all at once",
    }
    assert CATALOG["burstiness_mid"].describe()["arrivals"] == "poisson"
    assert CATALOG["burstiness_high"].describe()["arrivals"] == "gamma(shape=0.2)"


def test_concurrency_sweep_defaults():
    sweep = concurrency_sweep()
    assert [p.name for p in sweep] == [f"concurrency_{c}" for c in (1, 5, 25, 50, 100, 200)]
    assert [p.max_concurrency for p in sweep] == [1, 5, 25, 50, 100, 200]
    assert [p.num_prompts for p in sweep] == [16, 20, 100, 200, 400, 800]
    assert all(p.request_rate == INF for p in sweep)


def test_concurrency_sweep_overrides():
    assert [p.num_prompts for p in concurrency_sweep((1, 8), num_prompts=10)] == [10, 10]
    assert [p.num_prompts for p in concurrency_sweep((2, 10), prompts_per_level=2)] == [16, 20]
    with pytest.raises(PatternError, match="concurrency level"):
        concurrency_sweep([0])
    with pytest.raises(PatternError, match="at least one"):
        concurrency_sweep([])


@pytest.mark.parametrize("name, seed", [("burstiness_mid", 0), ("burstiness_high", 7), ("burstiness_low", 3)])
def test_arrivals_are_the_ones_vllm_bench_serve_sends_for_the_same_flags(name, seed, monkeypatch):
    """The reproduce command passes --seed; vLLM seeds NumPy's global generator with it and
    draws the gaps in get_request.  Its schedule, read off a fake clock, must equal ours."""
    serve = pytest.importorskip("vllm.benchmarks.serve", reason="vLLM's benchmark code is installed with [cpu]")
    import asyncio

    import numpy as np

    from pytest_specdec.load.patterns import resolve_pattern

    pattern = resolve_pattern(name, {"num_prompts": 40})
    clock = [1000.0]
    monkeypatch.setattr(serve.time, "time", lambda: clock[0])

    async def fake_sleep(seconds):
        clock[0] += seconds

    monkeypatch.setattr(serve.asyncio, "sleep", fake_sleep)

    async def schedule():
        np.random.seed(seed)  # what `vllm bench serve --seed` does before sending
        return [
            clock[0] - 1000.0
            async for _ in serve.get_request(list(range(pattern.num_prompts)), pattern.request_rate, pattern.burstiness)
        ]

    theirs = asyncio.run(schedule())
    assert pattern.arrival_offsets(seed) == pytest.approx(theirs, abs=1e-9)
