"""Change points by Apache Otava (run in its own environment, scripts/setup makes it), judged per direction."""

import random
from dataclasses import replace
import sys

import pytest

from pytest_specdec.history import changepoints
from pytest_specdec.history.changepoints import DetectorError, detect_series, otava_python, stable_segment
from pytest_specdec.history.records import run_metric
from pytest_specdec.verdict.metric_names import relative_change
from pytest_specdec.history.store import Point


@pytest.fixture(scope="module")
def python():
    return otava_python()  # DetectorError (a test error, not a skip) when scripts/setup has not made .venv-otava


def points(values, start=0):
    return tuple(
        Point(
            f"s{n}",
            f"c{n:02d}",
            "main",
            f"2026-11-25T{n // 60:02d}:{n % 60:02d}:00+00:00",
            v,
            None,
            None,
            "passed",
            "passed",
            "cfg",
        )
        for n, v in enumerate(values, start)
    )


def noisy(level, count, spread, seed):
    generator = random.Random(seed)
    return [level * (1 + generator.gauss(0, spread)) for _ in range(count)]


def test_a_step_down_in_a_speedup_is_a_regression_at_its_commit(python):
    series = {("t", "fp", "speedup_output_throughput"): points(noisy(2.4, 10, 0.02, 1) + noisy(1.9, 10, 0.02, 2))}
    found = detect_series(series, python=python, threshold=0.05)
    (report,) = found.reports
    (cp,) = report.change_points
    assert cp.index == 10 and cp.before.commit == "c09" and cp.after.commit == "c10"
    assert cp.regression and -0.25 < cp.change < -0.15 and cp.pvalue < 0.001
    assert report.failing(0.05) and not report.failing(0.30)
    assert found.failing == (report,) and found.otava_version == "0.8.0"
    # A regression is not the new level until someone accepts it: before that, the level before it is.
    assert [p.commit for p in stable_segment(report)] == [f"c{n:02d}" for n in range(10)]
    assert [p.commit for p in stable_segment(report, accepted={"s10"})][0] == "c10"
    assert "REGRESSION" in cp.describe() and "c09" in cp.describe()


def test_a_change_point_names_the_histories_session_number_not_its_place_in_the_series(python):
    # The figure was missing in three sessions (numbers 4-6): its 17 points are sessions 1-3 and 7-20.
    values = noisy(2.4, 10, 0.02, 1) + noisy(1.9, 7, 0.02, 2)
    numbers = [1, 2, 3, *range(7, 21)]
    series = tuple(replace(point, number=number) for point, number in zip(points(values), numbers))
    (report,) = detect_series({("t", "fp", "speedup_output_throughput"): series}, python=python).reports
    (cp,) = report.change_points
    assert cp.index == 10 and cp.after.number == 14
    assert "(session 14:" in cp.describe()


def test_direction_follows_the_metric(python):
    # TPOT went down: for a latency that is an improvement; a speedup going up is one too.
    latency = points(noisy(50, 8, 0.01, 3) + noisy(40, 8, 0.01, 4))
    speedup = points(noisy(1.5, 8, 0.01, 5) + noisy(1.8, 8, 0.01, 6))
    found = detect_series(
        {("t", "fp", "speculative_median_tpot_ms"): latency, ("t", "fp", "speedup_output_throughput"): speedup},
        python=python,
    )
    for report in found.reports:
        assert report.newest is not None and not report.newest.regression and report.newest.change > 0.15
    assert found.failing == ()
    # History figures name their side; the change reads the run metric's direction.
    assert (
        relative_change(run_metric("reference_median_tpot_ms"), 55, 50)
        < 0
        < relative_change(run_metric("acceptance_rate"), 0.55, 0.5)
    )


def test_noise_alone_is_no_change_point_and_short_series_are_not_judged(python):
    found = detect_series(
        {
            ("t", "fp", "acceptance_rate"): points(noisy(0.6, 20, 0.03, 7)),
            ("t", "fp", "acceptance_length"): points([2.0, 1.0, 2.0]),
        },
        python=python,
    )
    stable, short = found.reports
    assert stable.change_points == () and stable.note is None and not stable.failing(0.01)
    assert short.note == "3 session(s): change points need at least 4" and short.change_points == ()


def test_only_the_newest_change_point_decides(python):
    # A regression that was later recovered from does not fail today's run.
    values = noisy(2.0, 8, 0.01, 8) + noisy(1.5, 8, 0.01, 9) + noisy(2.0, 8, 0.01, 10)
    (report,) = detect_series({("t", "fp", "speedup_output_throughput"): points(values)}, python=python).reports
    assert [cp.regression for cp in report.change_points] == [True, False]
    assert not report.failing(0.05)


def test_a_step_under_one_percent_without_variance_is_not_a_change_point(python):
    # Seen in a recorded history: acceptance on fixed prompts moved 0.1% with zero variance, and Otava
    # called it certain (p = 7e-230); it would have cut the stable segment --specdec-baseline-from reads.
    values = [0.9901] * 10 + [0.9891] * 10
    (report,) = detect_series({("t", "fp", "acceptance_rate"): points(values)}, python=python).reports
    assert report.change_points == ()
    (report,) = detect_series({("t", "fp", "acceptance_rate"): points(values)}, python=python, min_change=0.0).reports
    assert len(report.change_points) == 1 and report.change_points[0].pvalue < 1e-10  # what it was before
    # A 2% step of the same kind is still found.
    (report,) = detect_series(
        {("t", "fp", "acceptance_rate"): points([0.99] * 10 + [0.97] * 10)}, python=python
    ).reports
    assert [cp.index for cp in report.change_points] == [10] and report.failing(0.01)


def test_a_missing_otava_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.delenv(changepoints.OTAVA_ENV_VAR, raising=False)
    monkeypatch.setattr(changepoints, "find_spec", lambda name: None)
    monkeypatch.setattr(changepoints, "PACKAGE_CHECKOUT", tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DetectorError, match=r"pip install apache-otava==0.8.0.*--specdec-otava-python"):
        otava_python(None, (tmp_path,))
    with pytest.raises(DetectorError, match="no-such-python: no such Python"):
        otava_python(str(tmp_path / "no-such-python"))


def test_a_python_without_otava_fails_with_its_error():
    with pytest.raises(DetectorError, match=r"(?s)failed with exit status 1:.*ModuleNotFoundError.*otava"):
        changepoints.run_otava([[1.0, 2.0, 3.0, 4.0]], python=sys.executable)
