"""Does the gate's stated detection hold?  Its own rule and its own statement, on simulated sessions.

For each per-repeat timing noise and each true drop, this script simulates
pairs of sessions (a baseline session and a current one, `--repeats` paired
repeats each, every repeat of a session shifted by that session's drift) and
runs the plugin's own functions on them, as the gate does:

- `verdict.stats.compare_samples(..., paired=True)`: does the gate fail?
- `verdict.detection.detection(...)`: what does the gate's "detects" column
  say (the smallest drop flagged in 90% of sessions, the false-alarm rate)?

It prints, per noise level, the share of sessions failed at each true drop
beside the median of the statements made in those very sessions, and then
the share failed at the stated drop itself, which should be about 90%.
The drift is the measured one (`detection.SESSION_DRIFT`, from
benchmarks/gate_calibration.py's server starts on the CPU build) unless
`--drift` says otherwise; `--drift 0` shows what the statement said before it
counted drift.  The sessions come from a fixed seed: the same arguments give
the same table.  The simulation's own error at N sessions is about
sqrt(p(1-p)/N): 1.5 points at 90% and 400 sessions.

    .venv/bin/python benchmarks/decision_calibration.py [--sessions 400] [--repeats 3] [--metric speedup_output_throughput]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from pytest_specdec.verdict.detection import detection, session_drift
from pytest_specdec.verdict.stats import compare_samples
from pytest_specdec.verdict.tolerances import default_tolerance

NOISES = (0.02, 0.05, 0.10)
DROPS = (0.0, 0.10, 0.15, 0.20, 0.30)


def session(rng, repeats: int, noise: float, drift: float, drop: float = 0.0) -> list[float]:
    """One session's repeats of a figure whose true value is 1 - drop: each repeat's own noise, and one drift."""
    shift = 1.0 + drift * rng.standard_normal()
    return list((1.0 - drop) * shift * (1.0 + noise * rng.standard_normal(repeats)))


def simulate(metric: str, noise: float, drop: float, args, seed: int) -> tuple[float, list]:
    """(share of sessions the gate failed, each session's Detection statement)."""
    rng = np.random.default_rng(seed)
    tolerance, drift = default_tolerance(metric), session_drift(metric) if args.drift is None else args.drift
    failed, statements = 0, []
    for _ in range(args.sessions):
        before = session(rng, args.repeats, noise, drift)
        now = session(rng, args.repeats, noise, drift, drop)
        failed += compare_samples(metric, before, now, tolerance=tolerance, paired=True).regression
        if args.statements:
            statements.append(
                detection(metric, before, args.repeats, tolerance, paired=True, current_values=now, drift=drift)
            )
    return failed / args.sessions, statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--metric", default="speedup_output_throughput")
    parser.add_argument("--drift", type=float, default=None, help="session drift per side (default: measured)")
    parser.add_argument("--no-statements", dest="statements", action="store_false")
    args = parser.parse_args()
    tolerance = default_tolerance(args.metric)
    drift = session_drift(args.metric) if args.drift is None else args.drift
    print(
        f"{args.metric}: {args.repeats} paired repeats a side, tolerance {tolerance:.0%}, session drift "
        f"{drift:.1%} a side, {args.sessions} simulated session pairs per cell"
    )
    header = " | ".join(f"{d:.0%} drop" for d in DROPS)
    print(f"| noise | {header} | stated: detects | stated: false alarms | failed at the stated drop |")
    print("|---" * (len(DROPS) + 4) + "|")
    for noise in NOISES:
        cells, stated = [], []
        for index, drop in enumerate(DROPS):
            share, statements = simulate(args.metric, noise, drop, args, seed=1000 * index + int(noise * 1000))
            cells.append(f"{share:.1%}")
            stated += statements
        drops = [s.smallest_drop for s in stated if s.smallest_drop is not None]
        alarms = [s.false_alarm_rate for s in stated if s.false_alarm_rate is not None]
        if drops:
            typical = statistics.median(drops)
            at_stated, _ = simulate(
                args.metric, noise, typical, argparse.Namespace(**{**vars(args), "statements": False}), 7
            )
            claim = f">= {typical:.0%}", f"{statistics.mean(alarms):.1%}", f"{at_stated:.1%}"
        else:
            claim = ("-", "-", "-")
        print(f"| {noise:.0%} | " + " | ".join(cells) + " | " + " | ".join(claim) + " |")


if __name__ == "__main__":
    main()
