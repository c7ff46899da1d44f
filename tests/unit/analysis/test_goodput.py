import math
from dataclasses import dataclass

import pytest

from pytest_specdec.analysis.goodput import (
    SLO_KEYS,
    SLOPercentiles,
    describe_objectives,
    goodput,
    parse_objectives,
    parse_slo,
    resolve_slo,
)


@dataclass
class Rec:
    success: bool
    ttft: float
    latency: float
    output_tokens: int


# Hand-computed per request (ms):       TTFT   TPOT (goodput)   E2E
A = Rec(True, 0.1, 1.1, 11)  #           100    100              1100
B = Rec(True, 0.5, 0.7, 5)  #            500     50               700
C = Rec(True, 0.3, 0.3, 1)  #            300      0 (one token)   300
D = Rec(True, 0.05, 2.05, 21)  #          50    100              2050
E = Rec(False, 0.0, 0.0, 0)  # failed: would pass any SLO on its numbers
RUN = [A, B, C, D, E]


@pytest.mark.parametrize(
    "slo, good, output_tokens",
    [
        ({"ttft": 200}, 2, 11 + 21),  # A, D
        ({"tpot": 60}, 2, 5 + 1),  # B, C (C's one token counts as TPOT 0)
        ({"e2el": 1100}, 3, 11 + 5 + 1),  # A on the boundary: slo >= metric holds
        ({"tpot": 0}, 1, 1),  # only the one-token request
        ({"ttft": 400, "tpot": 60}, 1, 1),  # C only: every key must hold
        ({"ttft": 200, "tpot": 150, "e2el": 2000}, 1, 11),  # A; D misses E2E
        ({"e2el": 10_000}, 4, 11 + 5 + 1 + 21),  # everything completed, never the failure
    ],
)
def test_goodput_follows_vllms_definition(slo, good, output_tokens):
    result = goodput(RUN, 2.0, slo)
    assert (result.good_requests, result.completed, result.failed) == (good, 4, 1)
    assert result.request_goodput == pytest.approx(good / 2.0)
    assert result.output_goodput == pytest.approx(output_tokens / 2.0)
    assert result.good_fraction == pytest.approx(good / 4)


def test_goodput_as_dict_carries_the_slo():
    flat = goodput(RUN, 2.0, ["ttft:200", "tpot:150"]).as_dict()
    assert flat["slo_ttft_ms"] == 200.0 and flat["slo_tpot_ms"] == 150.0 and "slo_e2el_ms" not in flat
    assert flat["request_goodput"] == pytest.approx(1.0) and flat["good_requests"] == 2


@pytest.mark.parametrize("duration", [0.0, -1.0])
def test_goodput_over_no_duration_is_nan_not_zero(duration):
    result = goodput(RUN, duration, {"ttft_ms": 200})
    assert math.isnan(result.request_goodput) and math.isnan(result.output_goodput)
    assert result.good_requests == 2 and result.good_fraction == pytest.approx(0.5)


def test_no_completed_request_is_a_measured_zero_but_no_fraction():
    result = goodput([E, E], 3.0, {"e2el": 1e9})
    assert (result.good_requests, result.completed, result.failed) == (0, 0, 2)
    assert result.request_goodput == 0.0 and result.output_goodput == 0.0
    assert math.isnan(result.good_fraction)


@pytest.mark.parametrize(
    "spelling",
    [
        {"tpot_ms": 50, "ttft_ms": 2000},
        {"tpot": 50, "ttft": 2000.0},
        {"tpot": 50, "ttft_ms": 2000},
        ["tpot:50", "ttft:2000"],
        "tpot:50 ttft:2000",
        "tpot:50,ttft:2000",
    ],
)
def test_parse_slo_spellings(spelling):
    assert parse_slo(spelling) == {"tpot": 50.0, "ttft": 2000.0}


def test_parse_slo_keys_are_vllms():
    assert SLO_KEYS == ("ttft", "tpot", "e2el")
    assert parse_slo({"e2el_ms": 0}) == {"e2el": 0.0}


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"itl": 10}, "'itl'"),
        ({"tpot_s": 10}, "'tpot_s'"),
        (["itl:10"], "'itl'"),
        ({"tpot": -1}, "'tpot'"),
        (["ttft:-5"], "'ttft'"),
        ({"tpot": "fast"}, "'tpot'"),
        (["tpot:fast"], "'tpot'"),
        ({"tpot": True}, "'tpot'"),
        ({"tpot": math.nan}, "'tpot'"),
        ({"tpot": None}, "'tpot'"),
        (["tpot=50"], "'tpot=50'"),
        ({"tpot": 50, "tpot_ms": 60}, "twice"),
        ({}, "no SLO"),
    ],
)
def test_parse_slo_errors_name_the_key_and_the_valid_ones(bad, named):
    with pytest.raises(ValueError, match="ttft, tpot, e2el") as caught:
        parse_slo(bad)
    assert named in str(caught.value)


def test_percentiles_are_numpy_linear_in_ms():
    measured = SLOPercentiles.of([A, B, C, D])
    # TTFT sorted 50, 100, 300, 500: p99 at rank 2.97 -> 300 + 0.97 * 200.
    assert measured.at(99)["ttft"] == pytest.approx(494.0)
    # TPOT pools only A, B, D (C has one token): 50, 100, 100.
    assert measured.tpot_ms == pytest.approx((100.0, 50.0, 100.0))
    assert measured.at(50)["e2el"] == pytest.approx(900.0)
    assert measured.as_dict(99)["p99_ttft_ms"] == pytest.approx(494.0)


def test_percentile_slo_holds_and_fails_with_reasons():
    measured = SLOPercentiles.of([A, B, C, D])
    ok, why = measured.holds({"ttft_ms": 500, "tpot_ms": 100})
    assert ok and "p99 ttft 494 ms <= 500 ms" in why
    ok, why = measured.holds({"ttft_ms": 400, "tpot_ms": 100})
    assert not ok and "p99 ttft 494 ms > 400 ms" in why and "tpot" not in why
    assert measured.holds({"e2el": 1000}, percentile=50) == (True, "p50 e2el 900 ms <= 1000 ms")
    assert measured.holds({"e2el": 800}, percentile=50) == (False, "p50 e2el 900 ms > 800 ms")


def test_any_failed_request_fails_the_slo():
    ok, why = SLOPercentiles.of(RUN).holds({"e2el": 1e9})
    assert not ok and why == "1 of 5 requests failed"


def test_tpot_of_one_token_outputs_is_unavailable_never_a_pass():
    measured = SLOPercentiles.of([C, Rec(True, 0.2, 0.2, 1)])
    assert math.isnan(measured.at()["tpot"])
    ok, why = measured.holds({"tpot": 1e9})
    assert not ok and why.startswith("unavailable:") and "more than one output token" in why
    # Not declared, not judged: TTFT alone can hold.
    assert measured.holds({"ttft": 1000})[0]
    # A violation is reported along with what could not be judged.
    ok, why = measured.holds({"ttft": 100, "tpot": 1e9})
    assert not ok and why.startswith("p99 ttft") and "unavailable:" in why


def test_no_completed_request_cannot_be_judged():
    ok, why = SLOPercentiles.of([]).holds({"ttft": 1e9})
    assert not ok and why.startswith("unavailable:") and "no request completed" in why


@pytest.mark.parametrize("bad", [-1, 101, True, "99"])
def test_percentile_must_be_in_range(bad):
    with pytest.raises(ValueError, match="percentile"):
        SLOPercentiles.of([A]).holds({"ttft": 1}, percentile=bad)


def test_objectives_mix_milliseconds_and_multiples_of_the_unloaded_median():
    assert parse_objectives({"tpot_x": 2, "ttft_ms": 2000}) == {"tpot_x": 2.0, "ttft": 2000.0}
    assert parse_objectives("tpot_x:2.5, e2el:9000") == {"tpot_x": 2.5, "e2el": 9000.0}
    limits, how = resolve_slo({"tpot_x": 2, "ttft_ms": 2000}, {"tpot": 33.0, "ttft": 150.0, "e2el": 2200.0})
    assert limits == {"tpot": 66.0, "ttft": 2000.0}
    assert how == {
        "tpot": {"objective": "tpot_x=2", "ms": 66.0, "multiple": 2.0, "unloaded_p50_ms": 33.0},
        "ttft": {"objective": "ttft_ms=2000", "ms": 2000.0},
    }
    assert describe_objectives(how, 50) == (
        "p50 tpot <= 66 ms (tpot_x=2: 2 x the reference's unloaded median 33 ms), p50 ttft <= 2000 ms"
    )
    assert resolve_slo({"e2el": 10}) == ({"e2el": 10.0}, {"e2el": {"objective": "e2el_ms=10", "ms": 10.0}})


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"tpot_ms": 50, "tpot_x": 2}, "'tpot' given both in milliseconds and as a multiple ('tpot_ms' and 'tpot_x')"),
        (["tpot_x:2", "tpot:50"], "given both in milliseconds and as a multiple"),
        ({"tpot_x": 0}, "'tpot_x' must be a finite multiple > 0"),
        ({"ttft_x": math.inf}, "'ttft_x' must be a finite multiple > 0"),
        ({"ttft_x": -1}, "'ttft_x' must be a finite multiple > 0"),
        ({"itl_x": 2}, "unknown SLO key 'itl_x'"),
    ],
)
def test_objective_errors_name_the_field(bad, named):
    with pytest.raises(ValueError) as caught:
        parse_objectives(bad)
    assert named in str(caught.value) and "tpot_x=2" in str(caught.value)


def test_a_relative_objective_has_no_milliseconds_until_resolved():
    with pytest.raises(ValueError, match="'tpot_x' is relative to the reference's unloaded run"):
        parse_slo({"tpot_x": 2})
    with pytest.raises(ValueError, match="goodput"):
        goodput(RUN, 2.0, {"tpot_x": 2})
    with pytest.raises(ValueError, match="tpot_x=2 needs the reference's unloaded median tpot"):
        resolve_slo({"tpot_x": 2}, {"tpot": math.nan})
