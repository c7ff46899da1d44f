"""Does a session budget keep a nightly suite's false alarms to what it states?  The gate's own rule on simulated
nightlies, each check at the rate `verdict.alarm_budget.AlarmBudget` gives it.

A nightly is `--tests` tests (default 20), each gating its speedup against a stored baseline, nothing changed.
Each check is the stored-baseline gate as `verdict.gate.speedups.decide_speedup` runs it (`decide_until`, the drift
between the two sessions known: 4.2% a side, the built-in figure, on a machine that drifts exactly so), on the
noise model of `benchmarks/sequential_calibration.py` (3% timing a run, two draws, the content spread cancelling in
the pair).  Two ways, on the same random numbers:

- **per check**: every check at the rule's own 5%, as without `--specdec-session-false-fail`;
- **session budget 5%**: each test's first check at its share (`AlarmBudget(session=0.05, tests=N).claim`).

Counted: the share of nightlies in which any check false-failed (stated: at most the budget; per check, nothing
is stated for the session), and each check's power at true drops of 10%, 20% and 30% either way.

    .venv/bin/python benchmarks/session_budget_calibration.py [--nightlies 400] [--tests 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from pytest_specdec.verdict.alarm_budget import AlarmBudget
from pytest_specdec.verdict.detection import SESSION_DRIFT
from pytest_specdec.verdict.sequential.rule import FAILED, Rule

from drift_calibration import gate
from sequential_calibration import content_spread, pct, table

DROPS = (0.10, 0.20, 0.30)
SIGMA = 0.03


def check(rng, drop: float, rule: Rule, drift: float) -> bool:
    """One stored-baseline gate on fresh random numbers: True when it failed."""
    log_sd = math.sqrt(math.log1p(SIGMA**2))
    m, sends = rule.min_runs, rule.max_runs // rule.min_runs
    effect = content_spread() * rng.standard_normal(m)
    base = drift * rng.standard_normal() + effect + log_sd * (rng.standard_normal(m) - rng.standard_normal(m))
    sd = math.log1p(-drop) + drift * rng.standard_normal() + effect[:, None] + log_sd * rng.standard_normal((m, sends))
    ref = log_sd * rng.standard_normal(m)
    outcome, _ = gate(sd, ref, base, rule, lambda timing, draws: drift)
    return outcome == FAILED


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nightlies", type=int, default=400, help="simulated nightly sessions (default 400)")
    parser.add_argument("--tests", type=int, default=20, help="gated checks a nightly (default 20)")
    parser.add_argument("--budget", type=float, default=0.05, help="the session budget (default 0.05)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started, drift = time.monotonic(), SESSION_DRIFT["speedup"]
    budget = AlarmBudget(session=args.budget, tests=args.tests)
    share = budget.claim("test 1", "speedup_output_throughput against the baseline")
    ways = (("per check", Rule()), (f"session budget {args.budget:.0%}", Rule(false_fail=share)))
    rows = []
    for w, (name, rule) in enumerate(ways):
        rng = np.random.default_rng([args.seed, 0])  # the same nightlies for both ways
        any_failed = [any(check(rng, 0.0, rule, drift) for _ in range(args.tests)) for _ in range(args.nightlies)]
        power = []
        for d, drop in enumerate(DROPS):
            rng = np.random.default_rng([args.seed, 1 + d])
            power.append(np.mean([check(rng, drop, rule, drift) for _ in range(args.nightlies)]))
        margin = 1.96 * math.sqrt(args.budget * (1 - args.budget) / args.nightlies)
        observed = float(np.mean(any_failed))
        holds = "yes" if observed <= args.budget else "within error" if observed <= args.budget + margin else "NO"
        rows.append(
            [
                name,
                f"{rule.false_fail:.2%}",
                f"{'none' if w == 0 else pct(args.budget)} / {pct(observed)}",
                "-" if w == 0 else holds,
                *(pct(p) for p in power),
            ]
        )
        print(f"  {name}: done at {time.monotonic() - started:.0f} s", flush=True)
    heads = [
        "rates",
        "each check's false fails",
        "nightlies with any false fail: stated / observed",
        "holds",
        *(f"one check fails a {drop:.0%} drop" for drop in DROPS),
    ]
    print()
    print(
        table(
            f"A nightly of {args.tests} unchanged stored-baseline gates, {args.nightlies} nightlies, timing "
            f"{SIGMA:.0%} a run, drift {drift:.1%} a side, tolerance 10%, seed {args.seed}",
            heads,
            rows,
        )
    )
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
