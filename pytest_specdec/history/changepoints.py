"""Change points in a history's series, found by Apache Otava's E-divisive means detector.

Otava (the detector MongoDB built as signal-processing-algorithms, then
Hunter, now an Apache project) pins numpy 2.2 and scipy 1.16 exactly, which
vLLM's environment cannot share, and MongoDB's package pins numpy below 2.
So Otava runs in an environment of its own (``.venv-otava``, made by
``scripts/setup``) and `otava_worker.py` is handed the series as JSON.  This
module builds the series, reads the change points back and judges them: a
change is signed so that positive is better (measure.derived), and the
newest change point of a series fails the check when it is a loss beyond the
threshold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Collection, Iterable, Sequence

from ..verdict.metric_names import relative_change
from .records import run_metric
from .store import HistoryStore, Point

# The figures a history check looks at unless told: what SD exists for, and what the gate checks first.
DEFAULT_METRICS = (
    "speedup_output_throughput",
    "speedup_median_tpot",
    "acceptance_rate",
    "acceptance_length",
    "goodput_ratio",
    "capacity_ratio",
)
DEFAULT_THRESHOLD = 0.05  # a regression of the newest change point beyond 5% fails
DEFAULT_PVALUE = 0.001  # Otava's default significance
DEFAULT_WINDOW = 30  # Otava's default sliding window (points)
# Steps smaller than this share of the mean are merged away (Otava's min_magnitude). Acceptance on
# fixed prompts is deterministic: a 0.1% move with no variance is "certain" to a t-test, and as a
# change point it would cut the stable segment that --specdec-baseline-from history reads.
DEFAULT_MIN_CHANGE = 0.01
MIN_POINTS = 4  # fewer sessions than this: no test can split them
OTAVA_ENV_VAR = "SPECDEC_OTAVA_PYTHON"
OTAVA_VENV = ".venv-otava"
_WORKER = Path(__file__).with_name("otava_worker.py")
PACKAGE_CHECKOUT = Path(__file__).resolve().parents[2]  # where an editable install's .venv-otava sits


class DetectorError(RuntimeError):
    """Otava could not be found or run; the message says how to get it."""


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first session of the new segment
    before: Point  # the last session before the change
    after: Point  # the first session after it
    mean_before: float
    mean_after: float
    pvalue: float
    change: float  # signed: positive is better, whatever the metric's direction
    regression: bool

    @property
    def session_number(self) -> int:
        """The first session of the new level, numbered as `history list` numbers the history's sessions
        (not its place in this series: sessions where the figure was missing would shift it)."""
        return self.after.number or self.index + 1

    def describe(self) -> str:
        def commit(point: Point) -> str:
            return (point.commit or "?")[:10]

        return (
            f"{'REGRESSION' if self.regression else 'improvement'} {self.change:+.1%} between "
            f"{commit(self.before)} and {commit(self.after)} (session {self.session_number}: "
            f"{self.mean_before:.4g} -> {self.mean_after:.4g}, p={self.pvalue:.2g})"
        )


@dataclass(frozen=True)
class SeriesReport:
    test: str
    fingerprint_key: str
    metric: str
    points: tuple[Point, ...]
    change_points: tuple[ChangePoint, ...] = ()
    note: str | None = None  # why no detection ran (too few sessions)

    @property
    def newest(self) -> ChangePoint | None:
        return self.change_points[-1] if self.change_points else None

    def failing(self, threshold: float) -> bool:
        """The newest change point is a loss of more than `threshold`."""
        newest = self.newest
        return newest is not None and newest.regression and -newest.change > threshold

    @property
    def name(self) -> str:
        return f"{self.test} [{self.fingerprint_key}] {self.metric}"


@dataclass(frozen=True)
class Detection:
    reports: tuple[SeriesReport, ...]
    threshold: float
    otava_version: str | None = None
    failing: tuple[SeriesReport, ...] = field(default=())

    @classmethod
    def of(cls, reports: Sequence[SeriesReport], threshold: float, otava_version: str | None) -> "Detection":
        return cls(tuple(reports), threshold, otava_version, tuple(r for r in reports if r.failing(threshold)))


def otava_python(explicit: str | None = None, roots: Iterable[Path] = ()) -> str:
    """The Python that has Otava: `explicit`, $SPECDEC_OTAVA_PYTHON, this one if it has it, or a .venv-otava."""
    chosen = explicit or os.environ.get(OTAVA_ENV_VAR)
    if chosen:
        if not Path(chosen).exists():
            raise DetectorError(f"{chosen}: no such Python (given by --specdec-otava-python or ${OTAVA_ENV_VAR})")
        return chosen
    if find_spec("otava") is not None:
        return sys.executable
    # The rootdir, the working folder, and the checkout this package runs from (an editable install).
    for root in (*roots, Path.cwd(), PACKAGE_CHECKOUT):
        candidate = Path(root) / OTAVA_VENV / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    raise DetectorError(
        "change-point detection runs Apache Otava, which is not installed: make its own environment with "
        f"`python3 -m venv {OTAVA_VENV} && {OTAVA_VENV}/bin/pip install apache-otava==0.8.0` (scripts/setup does; "
        "Otava pins numpy and scipy versions vLLM's environment cannot share), or point --specdec-otava-python "
        f"(or ${OTAVA_ENV_VAR}) at a Python that has it"
    )


def run_otava(
    series: Sequence[Sequence[float]],
    *,
    python: str,
    window: int = DEFAULT_WINDOW,
    pvalue: float = DEFAULT_PVALUE,
    min_magnitude: float = DEFAULT_MIN_CHANGE,
    timeout: float = 300.0,
) -> tuple[list, str]:
    """Otava's change points of each series (as the worker prints them), and Otava's version."""
    request = json.dumps(
        {
            "series": [list(map(float, s)) for s in series],
            "window": window,
            "max_pvalue": pvalue,
            "min_magnitude": min_magnitude,
        }
    )
    try:
        done = subprocess.run([python, str(_WORKER)], input=request, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DetectorError(f"running Apache Otava with {python}: {exc}") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise DetectorError(f"Apache Otava ({python}) failed with exit status {done.returncode}:\n{tail}")
    answer = json.loads(done.stdout)
    return answer["change_points"], answer["otava_version"]


def detect(
    store: HistoryStore,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    tests: Sequence[str] = (),
    series: Collection[tuple[str, str]] | None = None,
    python: str,
    threshold: float = DEFAULT_THRESHOLD,
    pvalue: float = DEFAULT_PVALUE,
    window: int = DEFAULT_WINDOW,
    min_change: float = DEFAULT_MIN_CHANGE,
) -> Detection:
    """Every series of the chosen metrics (and tests, and (test, fingerprint key) pairs) judged; one Otava run."""
    chosen = None if series is None else set(series)
    wanted = [
        (test, key, metric)
        for test, key, metric, _count in store.series_keys()
        if metric in metrics and (not tests or test in tests) and (chosen is None or (test, key) in chosen)
    ]
    series = {name: tuple(store.series(*name)) for name in wanted}
    return detect_series(
        series, python=python, threshold=threshold, pvalue=pvalue, window=window, min_change=min_change
    )


def detect_series(
    series: dict[tuple[str, str, str], Sequence[Point]],
    *,
    python: str,
    threshold: float = DEFAULT_THRESHOLD,
    pvalue: float = DEFAULT_PVALUE,
    window: int = DEFAULT_WINDOW,
    min_change: float = DEFAULT_MIN_CHANGE,
) -> Detection:
    long_enough = [name for name, points in series.items() if len(points) >= MIN_POINTS]
    found, version = ([], None)
    if long_enough:
        found, version = run_otava(
            [[p.value for p in series[name]] for name in long_enough],
            python=python,
            window=window,
            pvalue=pvalue,
            min_magnitude=min_change,
        )
    by_name = dict(zip(long_enough, found))
    reports = []
    for name, points in series.items():
        test, key, metric = name
        if name not in by_name:
            reports.append(
                SeriesReport(
                    test,
                    key,
                    metric,
                    tuple(points),
                    note=f"{len(points)} session(s): change points need at least {MIN_POINTS}",
                )
            )
            continue
        change_points = []
        for cp in by_name[name]:
            index = cp["index"]
            change = relative_change(run_metric(metric), cp["mean_after"], cp["mean_before"])
            change_points.append(
                ChangePoint(
                    index,
                    points[index - 1],
                    points[index],
                    cp["mean_before"],
                    cp["mean_after"],
                    cp["pvalue"],
                    change,
                    change < 0,
                )
            )
        reports.append(SeriesReport(test, key, metric, tuple(points), tuple(change_points)))
    return Detection.of(reports, threshold, version)


def stable_segment(report: SeriesReport, accepted: Collection[str] = ()) -> tuple[Point, ...]:
    """The sessions since the newest change point (the whole series when there is none).

    A regression is never taken as the new level silently: when the newest change point is a loss
    whose first session is not in `accepted` (session uids someone accepted with ``pytest-specdec
    history accept``), the segment is the level before it.
    """
    newest = report.newest
    if newest is None:
        return report.points
    if newest.regression and newest.after.session_uid not in accepted:
        earlier = [cp.index for cp in report.change_points[:-1]]
        return report.points[(earlier[-1] if earlier else 0) : newest.index]
    return report.points[newest.index :]
