"""Does the stored-baseline gate keep its stated false-fail rate when it learns the drift from a history?

The gate against a stored baseline pays for the drift between the baseline's session and this one
(`known_var` in `verdict.sequential`).  The plugin's built-in figure is the CPU build's (4.2% a side,
`verdict.detection.SESSION_DRIFT`); `verdict.learned_drift.learn_drift` learns a machine's own from the
session values a results history holds since its last change point.  This benchmark runs the gate's own
rule (`decide_until`, as `benchmarks/sequential_calibration.py` does) on simulated sessions whose true drift
is 1%, 2%, 4% and 8% a side, with a history of 5, 10 and 20 earlier sessions of the same test, and counts:

- **false fails**: an unchanged build failed (stated: at most `Rule().false_fail`, 5%);
- **smallest drop failed in 90%** of sessions, on a grid of true drops;
- **the smallest measured drop the gate can fail**: `learned_drift.smallest_failable_drop` at the drift the
  gate used (the mean over sessions): no measured change closer to the baseline can fail, however many runs;

each beside the built-in figure on the very same sessions.

The model (each term as `benchmarks/sequential_calibration.py` has it): every run lognormal with relative
sd `sigma`; content spread between draws (the same draws, by seed, in every session, so it cancels in the
paired change); each session, the baseline's and every history session included, shifted as a whole by
N(0, drift).  A history session's value is its speedup over the draws it measured (two, one send each, as
`--specdec-repeats auto` measures first), so it carries that session's own timing noise as well as its drift;
the gate learns from those values what it can: `learn_drift(..., own=...)` takes off the part each session's
own runs put into its value, as the history stores it beside the value (`own_variance`, read from that
session's reference across its draws); with `--this-sessions-timing`, as before schema 4, the part this
session's own timing spread says a session's value carries.  The baseline file is the newest history session.

With `--measured`, the gate reads its drift from servers started anew in the session instead
(`--specdec-measure-drift`, `learned_drift.measured_drift`): each start of a server shifts its side's figures by
N(0, drift / sqrt(2)), so a speedup, one start of each side, moves by N(0, drift) as above.  The test under the
gate and the earlier tests of the session each start both servers once more and send one draw again; a change is
the new start's shift less the first start's (the test's own first starts are the ones its speedup carries), plus
two runs' timing.  The rows are then the starts anew pooled by the time the gate decides: 2 (the first test), 6
and 20.

    .venv/bin/python benchmarks/drift_calibration.py [--sessions 400] [--seed 0] [--sigma 0.03] [--measured]
        [--outliers 0.05] [--this-sessions-timing]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from pytest_specdec.verdict.detection import SESSION_DRIFT
from pytest_specdec.verdict.learned_drift import (
    CONFIDENCE,
    StartSpread,
    learn_drift,
    measured_drift,
    own_variance,
    session_value_var,
    smallest_failable_drop,
)
from pytest_specdec.verdict.sequential.evidence import Evidence, read
from pytest_specdec.verdict.sequential.rule import FAILED, Rule, tolerance_zone

from sequential_calibration import content_spread, pct, sequential_check, table

DRIFTS = (0.01, 0.02, 0.04, 0.08)
HISTORIES = (5, 10, 20)
RESTARTS = (2, 6, 20)  # servers started anew by the time the gate decides: the first test's two, then more tests'
DROPS = (0.0, 0.025, 0.05, 0.075, 0.10, 0.125, 0.15, 0.20, 0.25, 0.30)
TOLERANCE = 0.10
POWER = 0.9


SLOW_RUN = math.log(1.5)  # --outliers: such a run is 1.5 times slow (a neighbour, a hiccup)


def timing_of(rng, shape, log_sd: float, outliers: float) -> np.ndarray:
    """Runs' log timing: lognormal, and a fraction `outliers` of them 1.5 times slow."""
    return log_sd * rng.standard_normal(shape) - SLOW_RUN * (rng.random(shape) < outliers)


def history_runs(
    rng, n: int, h: int, drift: float, log_sd: float, draws: int, outliers: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """([n, h, draws] log speedups per draw of h history sessions, [n, h, draws] their references' log timing),
    the content left out (the same draws every session: a constant per draw, added where a draw's value is
    used): each session's drift and its runs' timing."""
    timing = timing_of(rng, (n, h, draws, 2), log_sd, outliers)  # (SD's send, the reference's) per draw
    return drift * rng.standard_normal((n, h, 1)) + timing[..., 0] - timing[..., 1], timing[..., 1]


def stored_own(speedups: np.ndarray, references: np.ndarray) -> list:
    """Each history session's own variance as the plugin stores it in the history (`own_variance` of its speedup's
    evidence, one send a draw): what its value carries from its runs, read from its reference's draws."""
    return [
        own_variance(Evidence(sends=tuple((float(v + r),) for v, r in zip(sp, ref)), reference=tuple(map(float, ref))))
        for sp, ref in zip(speedups, references)
    ]


def gate(sd, ref, base, rule, drift_for) -> tuple[str, float]:
    """The stored-baseline gate as `verdict.gate.speedups.decide_speedup` runs it: each look reads this session's
    timing spread, asks `drift_for(timing, draws)` for the drift, and decides with known_var = 2 d^2."""
    m = rule.min_runs
    used = []

    def known_var(plain) -> float:
        used.append(drift_for(read(plain).timing, m))
        return 2 * used[-1] ** 2

    decision = sequential_check(sd, ref[:m], base[:m], known_var, tolerance_zone(TOLERANCE), rule)
    return decision.outcome, used[-1]


def cell(
    seed,
    n: int,
    h: int,
    drift: float,
    sigma: float,
    content: float,
    rule: Rule,
    subtract: bool = True,
    confidence: float = CONFIDENCE,
    stored: bool = True,
    outliers: float = 0.0,
) -> dict:
    """Both gates (learned, built-in) at every drop, on the same sessions.  `stored`: each history session's own
    variance is in the history (as the plugin records it since schema 4); else this session's timing stands in."""
    rng = np.random.default_rng(seed)
    log_sd = math.sqrt(math.log1p(sigma**2))
    m, sends = rule.min_runs, rule.max_runs // rule.min_runs
    history, history_refs = history_runs(rng, n, h, drift, log_sd, m, outliers)
    now_drift = drift * rng.standard_normal(n)
    effect = content * rng.standard_normal((n, m))
    sd_noise = timing_of(rng, (n, m, sends), log_sd, outliers)
    ref = timing_of(rng, (n, m), log_sd, outliers)
    out = {"learned": {}, "built-in": {}, "learned_drift": []}
    for i in range(n):
        values = np.exp(history[i].mean(axis=1))  # each session's speedup over its draws
        own = stored_own(history[i], history_refs[i]) if (subtract and stored) else ()

        def learned(timing, draws, values=values, own=own):
            within = session_value_var(timing, draws) if (subtract and timing is not None) else 0.0
            return learn_drift(values, within=within, own=own, confidence=confidence).value

        base = history[i, -1] + effect[i]  # the baseline file: the newest history session, per draw
        for drop in DROPS:
            sd = math.log1p(-drop) + now_drift[i] + effect[i][:, None] + sd_noise[i]
            for name, drift_for in (("learned", learned), ("built-in", lambda t, d: SESSION_DRIFT["speedup"])):
                outcome, used = gate(sd, ref[i], base, rule, drift_for)
                out[name].setdefault(drop, []).append(outcome == FAILED)
                if name == "learned" and drop == 0.0:
                    out["learned_drift"].append(used)
    return out


def measured_figure(changes, restarts: int, timing, subtract: bool = True) -> float:
    """The gate's drift from `changes` as `DriftBook.figure` reads them, this look's one-run timing taken off."""
    spread = StartSpread({"output_throughput": tuple(changes)}, restarts)
    taken = timing if (subtract and timing is not None) else 0.0
    return measured_drift(spread, "speedup_output_throughput", taken).value


def measured_cell(
    seed, n: int, restarts: int, drift: float, sigma: float, content: float, rule: Rule, subtract: bool = True
) -> dict:
    """Both gates (measured from starts anew, built-in) at every drop, on the same sessions."""
    rng = np.random.default_rng(seed)
    log_sd = math.sqrt(math.log1p(sigma**2))
    per_start = drift / math.sqrt(2)
    m, sends = rule.min_runs, rule.max_runs // rule.min_runs
    first = per_start * rng.standard_normal((n, 2))  # the test's first starts: (reference, SD)
    now_drift = first[:, 1] - first[:, 0]  # what its speedup carries from them
    # The test's own two changes (its new starts less its first ones), then the earlier tests' (independent).
    again = per_start * rng.standard_normal((n, restarts))
    again[:, :2] -= first
    earlier = per_start * rng.standard_normal((n, restarts))
    again[:, 2:] -= earlier[:, 2:]
    changes = again + log_sd * (rng.standard_normal((n, restarts)) - rng.standard_normal((n, restarts)))
    base_drift = drift * rng.standard_normal(n)  # the baseline's session
    effect = content * rng.standard_normal((n, m))
    base = base_drift[:, None] + effect + log_sd * (rng.standard_normal((n, m)) - rng.standard_normal((n, m)))
    sd_noise = log_sd * rng.standard_normal((n, m, sends))
    ref = log_sd * rng.standard_normal((n, m))
    out = {"learned": {}, "built-in": {}, "learned_drift": []}
    for i in range(n):
        for drop in DROPS:
            sd = math.log1p(-drop) + now_drift[i] + effect[i][:, None] + sd_noise[i]
            for name, drift_for in (
                ("learned", lambda t, d, c=changes[i]: measured_figure(c, restarts, t, subtract)),
                ("built-in", lambda t, d: SESSION_DRIFT["speedup"]),
            ):
                outcome, used = gate(sd, ref[i], base[i], rule, drift_for)
                out[name].setdefault(drop, []).append(outcome == FAILED)
                if name == "learned" and drop == 0.0:
                    out["learned_drift"].append(used)
    return out


def smallest(failed: dict) -> str:
    for drop in DROPS:
        if np.mean(failed[drop]) >= POWER:
            return pct(drop)
    return f"none up to {DROPS[-1]:.0%}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400, help="simulated sessions per cell (default 400)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma", type=float, default=0.03, help="per-run relative noise (default 0.03)")
    parser.add_argument(
        "--keep-within", action="store_true", help="learn from the session values as they are (no timing taken off)"
    )
    parser.add_argument(
        "--confidence", type=float, default=CONFIDENCE, help="of the learned bound (default %(default)s)"
    )
    parser.add_argument(
        "--outliers",
        type=float,
        default=0.0,
        help="fraction of runs 1.5 times slow, in the history's sessions and this one (default 0)",
    )
    parser.add_argument(
        "--this-sessions-timing",
        action="store_true",
        help="a history without each session's own variance (before schema 4): this session's timing stands in",
    )
    parser.add_argument(
        "--draws", type=int, default=Rule().min_runs, help="draws a session measures (default %(default)s)"
    )
    parser.add_argument(
        "--measured", action="store_true", help="the drift measured from servers started anew in the session"
    )
    args = parser.parse_args(argv)
    rule, content, started = Rule(min_runs=args.draws), content_spread(), time.monotonic()
    margin = 1.96 * math.sqrt(rule.false_fail * (1 - rule.false_fail) / args.sessions)
    built_in = SESSION_DRIFT["speedup"]
    print(
        f"{args.sessions} sessions a cell, seed {args.seed}; per-run noise {args.sigma:.0%}"
        f"{f', {args.outliers:.0%} of runs 1.5x slow' if args.outliers else ''}; content spread "
        f"{content:.3f} (cancels in the paired change); tolerance {TOLERANCE:.0%}; rule: false fails "
        f"{rule.false_fail:.0%}, cap {rule.max_runs} runs a side; built-in drift {built_in:.1%} a side, whose "
        f"smallest failable measured drop is {smallest_failable_drop(built_in, rule):.1%}\n"
    )
    rows = []
    for a, drift in enumerate(DRIFTS):
        for b, h in enumerate(RESTARTS if args.measured else HISTORIES):
            if args.measured:
                got = measured_cell(
                    [args.seed, a, b], args.sessions, h, drift, args.sigma, content, rule, not args.keep_within
                )
            else:
                got = cell(
                    [args.seed, a, b],
                    args.sessions,
                    h,
                    drift,
                    args.sigma,
                    content,
                    rule,
                    not args.keep_within,
                    args.confidence,
                    not args.this_sessions_timing,
                    args.outliers,
                )
            learned_ff, built_ff = np.mean(got["learned"][0.0]), np.mean(got["built-in"][0.0])
            used = float(np.mean(got["learned_drift"]))
            holds = (
                "yes"
                if learned_ff <= rule.false_fail
                else "within error"
                if learned_ff <= rule.false_fail + margin
                else "NO"
            )
            rows.append(
                [
                    pct(drift),
                    str(h),
                    f"{pct(used)} (median {pct(float(np.median(got['learned_drift'])))})",
                    f"{pct(learned_ff)} / {pct(built_ff)}",
                    holds,
                    f"{smallest(got['learned'])} / {smallest(got['built-in'])}",
                    f"{smallest_failable_drop(used, rule):.1%} / {smallest_failable_drop(built_in, rule):.1%}",
                ]
            )
            print(f"  drift {drift:.0%}, {h}: done at {time.monotonic() - started:.0f} s", flush=True)
    what = "measured" if args.measured else "learned"
    heads = [
        "true drift a side",
        "servers started anew" if args.measured else "history sessions",
        f"drift {what} (mean)",
        f"false fails: {what} / built-in",
        f"{what} holds 5%",
        f"smallest drop failed in 90%: {what} / built-in",
        f"smallest measured drop it can fail: {what} / built-in",
    ]
    print()
    print(
        table(f"Stored-baseline gate, {what} drift against built-in (margin of error at 5%: {margin:.1%})", heads, rows)
    )
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
