"""A concurrency sweep's frontier: both sides' operating points from its runs, and its checks decided or not."""

import math

import pytest

from pytest_specdec.verdict.sequential.rule import PASSED, UNDECIDED
from tests.support.constructed_sweep import SPEC, WOBBLE, sweep


def test_both_sides_points_come_from_each_draws_median_tpot_and_throughput():
    reference, speculative = sweep().frontiers()
    assert len(reference.draws) == len(speculative.draws) == len(WOBBLE)
    first = reference.draws[0][1]
    assert first.concurrency == 2 and first.per_user == pytest.approx(45.0) and first.per_gpu == pytest.approx(90.0)
    assert [p.concurrency for p in speculative.frontier()] == [8, 4, 2, 1]
    # Per GPU: a server on two GPUs gives each half its throughput.
    halved, _ = sweep().frontiers(gpus=2)
    assert halved.draws[0][1].per_gpu == pytest.approx(45.0)


def test_sd_pays_at_a_per_user_speed_decided_and_the_frontier_check_over_a_range():
    decided = sweep()
    worth = decided.assert_pays_at(45.0, min=1.5)
    assert worth.ratio == pytest.approx((250 - 9 / 19 * 30) / 90, rel=0.02)
    assert decided.results[-1].decisions == {}  # a pass is not kept as undecided
    decided.assert_frontier_at_or_above(40.0, 50.0)
    table = decided.frontier_table(45.0, usd_per_gpu_hour=3.6)
    assert "tok/s per user: 1000 / the run's median TPOT" in table and "USD per 1M output tokens" in table


def test_a_failed_frontier_check_names_the_speeds_and_shows_both_frontiers():
    with pytest.raises(AssertionError) as failed:
        sweep(sd_scale=0.35).assert_frontier_at_or_above(40.0, 50.0)
    text = str(failed.value)
    assert "SD's frontier at or above the reference's from 40 to 50 tok/s per user" in text
    assert "40 tok/s per user: failed" in text and "side       concurrency" in text
    with pytest.raises(AssertionError, match="SD's frontier: not reached"):
        sweep().assert_pays_at(200.0)  # faster per user than SD ever ran


def test_an_undecided_check_is_kept_with_the_last_level_and_strict_fails_it():
    straddling = sweep(spread=(-0.3, 0.3))
    worth = straddling.assert_pays_at(45.0, min=2.5)  # 2.62x over two draws 0.3 apart: the interval straddles it
    (decision,) = straddling.results[-1].decisions.values()
    assert decision.outcome == UNDECIDED and worth.ratio is not None
    straddling.results[-1].strict = True
    with pytest.raises(AssertionError, match="--specdec-strict fails an undecided check"):
        straddling.assert_pays_at(45.0, min=2.5)
    assert sweep().worth_at(45.0).decide_at_least(1.0).outcome == PASSED
    with pytest.raises(ValueError, match="ratio > 0"):
        sweep().assert_pays_at(45.0, min=0)
    assert math.isfinite(sweep().worth_at(45.0, usd_per_gpu_hour=2.0).usd_per_million()["speculative"])


def test_each_level_is_a_row_carrying_both_frontiers_and_the_speeds_the_checks_read():
    from types import SimpleNamespace

    from pytest_specdec.report.row.rows import rows_for_test

    measured = sweep()
    measured.attach_report()  # as specdec.sweep() does
    measured.assert_pays_at(45.0, min=1.5)
    plan = SimpleNamespace(spec=SPEC, workload=None, pattern=None)
    rows = rows_for_test("t.py::test_frontier", plan, SimpleNamespace(gate=None, results=measured.results), "passed")
    assert len(rows) == 4 and all(row["frontier"] == rows[0]["frontier"] for row in rows)
    frontier = rows[0]["frontier"]
    assert frontier["draws"] == len(WOBBLE) and [p["concurrency"] for p in frontier["speculative"]["points"]] == [
        1,
        2,
        4,
        8,
    ]
    assert all(p["on_frontier"] for p in frontier["reference"]["points"])
    (target,) = frontier["targets"]
    assert target["per_user"] == 45.0 and target["ratio"] > 2.5 and len(target["draw_ratios"]) == len(WOBBLE)
