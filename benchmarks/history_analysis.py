"""Change points against the fixed-baseline gate, on histories `history_series.py` recorded.

For each history the sessions are replayed in order, as CI meets them: after
each session the change-point check (Apache Otava through
``pytest_specdec.history.changepoints``, defaults: p < 0.001, fail beyond 5%)
looks at the series so far, and the fixed-baseline gate's verdict is the one
the session itself recorded (its baseline was recorded in session 1; the
speedup's default tolerance is 15%).  Printed per detector: whether the real
step was found and how many sessions after it, and false alarms (flags on the
unchanged history, and before the step on the changed one).

``--synthetic N`` adds a labelled synthetic power check: N series of 20
sessions with the noise measured on the unchanged history, with steps of 3,
5 and 10% after session 10 and without one; the fixed gate is modelled as
its single-repeat rule (a session more than the tolerance below session 1).

    .venv/bin/python benchmarks/history_analysis.py OUT_DIR [--step 10] [--synthetic 200]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from pytest_specdec.history.changepoints import DEFAULT_THRESHOLD, detect_series, otava_python
from pytest_specdec.history.store import Point, open_history
from pytest_specdec.history.url import parse_history_url
from pytest_specdec.verdict.tolerances import default_tolerance

TEST = "test_series.py::test_ngram_series"
METRIC = "speedup_output_throughput"


def load(path: Path) -> list[Point]:
    with open_history(parse_history_url(str(path))) as store:
        (key,) = {k for t, k, m, _ in store.series_keys() if t == TEST and m == METRIC}
        return store.series(TEST, key, METRIC)


def replay(points: list[Point], python: str) -> list[bool]:
    """Whether the change-point check fails after each session (False where too few sessions)."""
    prefixes = {(TEST, str(n), METRIC): points[:n] for n in range(1, len(points) + 1)}
    found = detect_series(prefixes, python=python)
    return [report.failing(DEFAULT_THRESHOLD) for report in found.reports]


def summarize(name: str, flags: list[bool], step: int | None) -> dict:
    """Sessions flagged (1-based), the first flag at or after the step, false alarms before it."""
    flagged = [n + 1 for n, flag in enumerate(flags) if flag]
    before = [n for n in flagged if step is None or n <= step]
    after = [n for n in flagged if step is not None and n > step]
    return {
        "history": name,
        "sessions": len(flags),
        "flagged": flagged,
        "false_alarms": len(before),
        "false_alarm_share": round(len(before) / max(1, (step or len(flags)) - 1), 3),
        "found_after": (after[0] - step) if after else None,
    }


def gate_flags(points: list[Point]) -> list[bool]:
    return [p.regression == "failed" for p in points]


def synthetic(noise: float, count: int, python: str, seed: int = 0) -> list[dict]:
    """Labelled synthetic: steps on the measured noise, 20 sessions, step after 10."""
    generator = random.Random(seed)
    tolerance = default_tolerance(METRIC)
    results = []
    for step in (0.0, 0.03, 0.05, 0.10):
        series = {}
        for n in range(count):
            values = [2.5 * (1 + generator.gauss(0, noise)) * (1 - step if i >= 10 else 1) for i in range(20)]
            series[("synthetic", str(n), METRIC)] = [
                Point(str(i), f"c{i}", None, f"{i:04d}", v, None, None, "passed", "passed", "")
                for i, v in enumerate(values)
            ]
        found = detect_series(series, python=python)
        cpd = sum(1 for r in found.reports if r.failing(DEFAULT_THRESHOLD) and r.newest.index in (9, 10, 11))
        cpd_any = sum(1 for r in found.reports if r.failing(DEFAULT_THRESHOLD))
        gate = sum(
            1 for values in series.values() if any(p.value / values[0].value - 1 < -tolerance for p in values[10:])
        )
        gate_any = sum(
            1 for values in series.values() if any(p.value / values[0].value - 1 < -tolerance for p in values[1:])
        )
        results.append(
            {
                "step": step,
                "series": count,
                "change_point_found_at_step": cpd,
                "change_point_any_flag": cpd_any,
                "fixed_gate_flag_after_step": gate,
                "fixed_gate_any_flag": gate_any,
            }
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--step", type=int, default=10)
    parser.add_argument("--synthetic", type=int, default=0)
    options = parser.parse_args()
    python = otava_python()
    unchanged, changed = load(options.out / "unchanged.db"), load(options.out / "changed.db")
    values = [p.value for p in unchanged]
    noise = statistics.stdev(values) / statistics.mean(values)
    level_before = statistics.mean(p.value for p in changed[: options.step])
    level_after = statistics.mean(p.value for p in changed[options.step :])
    report = {
        "metric": METRIC,
        "unchanged": {
            "sessions": len(unchanged),
            "mean": round(statistics.mean(values), 3),
            "relative_sd": round(noise, 4),
            "range": [round(min(values), 3), round(max(values), 3)],
        },
        "changed": {
            "sessions": len(changed),
            "mean_before": round(level_before, 3),
            "mean_after": round(level_after, 3),
            "step": round(level_after / level_before - 1, 4),
        },
        "change_points": [
            summarize("unchanged", replay(unchanged, python), None),
            summarize("changed", replay(changed, python), options.step),
        ],
        "fixed_gate": [
            summarize("unchanged", gate_flags(unchanged), None),
            summarize("changed", gate_flags(changed), options.step),
        ],
    }
    if options.synthetic:
        report["synthetic"] = synthetic(noise, options.synthetic, python)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
