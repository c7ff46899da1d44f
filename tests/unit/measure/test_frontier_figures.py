"""A sweep's frontier against a stored baseline, through the real gate: recorded, passed unchanged, failed when SD's
frontier moves under it, stale for another target, and a target a draw does not reach unavailable by name."""

import json

import pytest

from pytest_specdec.measure.frontier_figures import FRONTIER_RATIO, FrontierFigures
from pytest_specdec.verdict.gate import BaselineSession, RegressionGate
from tests.support.constructed_sweep import WOBBLE, sweep
from tests.support.fingerprints import FINGERPRINT

TEST_ID = "t.py::test_frontier"


def gated(measured, base_dir, update=False, strict=False):
    session = BaselineSession(base_dir, update=update, fingerprint=dict(FINGERPRINT), strict=strict)
    gate = RegressionGate(session, TEST_ID)
    for result in measured.results:  # as specdec.sweep() gives every level the test's gate
        result.gate = gate
    return gate, session


def recorded(base_dir, per_user=45.0):
    measured = sweep()
    gate, session = gated(measured, base_dir, update=True)
    measured.assert_no_regression(per_user=per_user)
    assert gate.outcome == "recorded"
    session.flush()
    (path,) = base_dir.glob("*.json")
    return json.loads(path.read_text())


def test_the_baseline_keeps_each_draws_operating_points_and_the_ratio_at_the_target(tmp_path):
    stored = recorded(tmp_path)
    assert len(stored["repeats"]) == len(WOBBLE)
    first = stored["repeats"][0]
    # The constructed sweep's first draw: reference 45 tok/s per user at 90 tok/s (concurrency 2), SD 80 at 80 alone.
    assert first["reference"]["per_user_c2"] == pytest.approx(45.0) and first["reference"]["per_gpu_c2"] == 90.0
    assert first["speculative"]["per_user_c1"] == pytest.approx(80.0)
    assert first["derived"][FRONTIER_RATIO] == pytest.approx((250 - 9 / 19 * 30) / 90, rel=0.02)
    pattern = stored["config"]["pattern"]
    assert pattern["per_user_target"] == 45.0 and [p["max_concurrency"] for p in pattern["levels"]] == [1, 2, 4, 8]


def test_an_unchanged_frontier_passes_and_one_moved_under_it_fails_naming_the_figures(tmp_path):
    recorded(tmp_path)
    gate, _ = gated(sweep(), tmp_path)
    sweep_now = sweep()
    for result in sweep_now.results:
        result.gate = gate
    sweep_now.assert_no_regression(per_user=45.0)
    assert gate.outcome == "passed"
    assert {figure["figure"] for figure in gate.figures} >= {FRONTIER_RATIO, "per_gpu_c8", "per_user_c1"}

    slower = sweep(sd_scale=0.8)  # SD's throughput 20% lower at every level, per-user speeds unchanged
    gate, _ = gated(slower, tmp_path)
    with pytest.raises(AssertionError) as failed:
        slower.assert_no_regression(per_user=45.0)
    text = str(failed.value)
    assert gate.outcome == "failed" and "performance regressed against the baseline" in text
    assert FRONTIER_RATIO in text and "per_gpu_c8" in text
    compared = {figure["figure"]: figure for figure in gate.figures}
    assert compared["per_user_c1"]["ok"] and not compared["per_gpu_c1"]["ok"]


def test_a_baseline_of_another_target_is_stale_and_strict_fails_it(tmp_path):
    recorded(tmp_path, per_user=45.0)
    measured = sweep(sd_scale=0.5)  # a regression, on a frontier gated at another speed: not compared at all
    gate, _ = gated(measured, tmp_path)
    measured.assert_no_regression(per_user=40.0)
    assert gate.outcome == "stale" and "access pattern.per_user_target: recorded 45.0, now 40.0" in gate.last_report
    strict_sweep = sweep()
    gated(strict_sweep, tmp_path, strict=True)
    with pytest.raises(AssertionError, match="--specdec-strict fails a stale baseline"):
        strict_sweep.assert_no_regression(per_user=40.0)


def test_a_target_beyond_a_frontier_is_unavailable_by_name_never_extrapolated(tmp_path):
    measured = sweep()
    gated(measured, tmp_path, update=True)
    with pytest.raises(AssertionError) as refused:  # SD's fastest point is 80 tok/s per user, the reference's 50
        measured.assert_no_regression(per_user=60.0)
    text = str(refused.value)
    assert "cannot record a baseline: figures unavailable" in text
    assert "frontier_ratio: unavailable: at 60 tok/s per user, draw 1: reference: not reached" in text
    assert not list(tmp_path.glob("*.json"))


def test_figures_a_sweep_does_not_have_and_bad_targets_are_refused_by_name(tmp_path):
    measured = sweep()
    gated(measured, tmp_path, update=True)
    with pytest.raises(ValueError, match=r"per_gpu_c<level> and per_user_c<level> for its levels \(1, 2, 4, 8\)"):
        measured.assert_no_regression(metrics=["per_gpu_c16"])
    with pytest.raises(ValueError, match="must be > 0 tok/s per user"):
        measured.assert_no_regression(per_user=0)
    # Without a target only the operating points are gated.
    figures = FrontierFigures(measured.results, measured.frontiers())
    assert FRONTIER_RATIO not in figures.metrics() and len(figures.metrics()) == 8
