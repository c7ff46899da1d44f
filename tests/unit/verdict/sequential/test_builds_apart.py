"""verdict.sequential.evidence: a builds A/B pairs both builds' references apart from SD's pairs, and keeps its rates."""

import math

import numpy as np
import pytest

from pytest_specdec.verdict.sequential.evidence import Evidence, read
from pytest_specdec.verdict.sequential.rule import FAILED, PASSED, UNDECIDED, Rule, decide, decide_until, tolerance_zone

ZONE = tolerance_zone(0.10)


def builds(sd_now, ref_now, sd_base, ref_base, apart=True):
    """Evidence of a builds A/B from each build's log SD and log reference per draw (one send a draw)."""
    return Evidence(
        tuple((v,) for v in sd_now),
        reference=tuple(ref_now),
        baseline=tuple(s - r for s, r in zip(sd_base, ref_base)),
        baseline_reference=tuple(ref_base) if apart else None,
    )


def test_a_disturbed_reference_run_is_set_aside_alone_and_sd_keeps_its_draw():
    # Eight draws, SD 10% slower on this build with the prompts' spread on both builds; the baseline build's
    # reference on draw 3 was slowed 1.5x by a neighbour.
    content = [0.0, 0.3, -0.2, 0.1, 0.25, -0.15, 0.05, 0.2]
    sd_base = [c + 0.5 + t for c, t in zip(content, (0.01, -0.01, 0.0, 0.02, -0.02, 0.01, 0.0, -0.01))]
    sd_now = [v - 0.105 + t for v, t in zip(sd_base, (0.0, 0.01, -0.01, 0.0, 0.01, -0.01, 0.0, 0.01))]
    ref_now = [0.01, -0.01, 0.0, 0.01, -0.01, 0.0, 0.01, -0.005]
    ref_base = [0.0, 0.01, -0.01, -math.log(1.5), 0.01, 0.0, -0.01, 0.005]
    reading = read(builds(sd_now, ref_now, sd_base, ref_base))
    said = "1 of 8 reference pairs (this build's against the baseline build's) set aside as disturbed (+51% off the median)"
    assert said in reading.interval
    assert "draws set aside" not in reading.interval  # SD's pair on that draw is kept
    # The estimate is the eight SD pairs' mean less the references' change on the seven draws kept.
    kept = [i for i in range(8) if i != 3]
    sd_change = sum(n - b for n, b in zip(sd_now, sd_base)) / 8
    ref_change = sum(ref_now[i] - ref_base[i] for i in kept) / 7
    assert reading.estimate == pytest.approx(sd_change - ref_change)
    assert decide(builds(sd_now, ref_now, sd_base, ref_base), *ZONE).outcome == FAILED
    # Read as paired per draw, the same runs lose draw 3 whole, and its spread widens the interval.
    paired = read(builds(sd_now, ref_now, sd_base, ref_base, apart=False))
    assert "1 of 8 draws set aside" in paired.interval


def test_references_apart_decide_a_drop_on_fewer_draws_than_paired_draws():
    # Four draws, a 10% drop, every run 1.5-2.5% off: the same mean either way.  Read apart, SD's pairs and the
    # references' pairs pool their spreads on six degrees of freedom where the paired draws have three in all;
    # and here each draw's SD and reference errors happen to add, which paired draws see as spread and the
    # pairs read apart do not.
    sd_base = [0.50, 0.80, 0.30, 0.60]
    sd_now = [v - 0.105 + t for v, t in zip(sd_base, (0.025, -0.025, 0.015, -0.015))]
    ref_now, ref_base = [-0.015, 0.015, -0.025, 0.025], [0.015, -0.015, 0.0, 0.0]
    apart = read(builds(sd_now, ref_now, sd_base, ref_base))
    paired = read(builds(sd_now, ref_now, sd_base, ref_base, apart=False))
    assert apart.estimate == pytest.approx(paired.estimate) == pytest.approx(-0.105)
    assert apart.df == 6 and paired.df == 3
    assert decide(builds(sd_now, ref_now, sd_base, ref_base), *ZONE).outcome == FAILED
    assert decide(builds(sd_now, ref_now, sd_base, ref_base, apart=False), *ZONE).outcome == UNDECIDED


def simulated_builds(drop: float, sessions: int, seed: int, sigma: float = 0.03, move: float = 0.0) -> list[str]:
    """Outcomes of builds A/B gates at 10% tolerance, as the plugin runs them (2 new draws on both builds a
    batch, up to the cap): lognormal timing noise `sigma` on every run, 5% of runs 1.5x slower, draws whose
    speedups differ by ~30% (the CPU build's content spread) alike on both builds, and the machine's speed on
    each draw moved by a log-normal `move` alike for the draw's four runs (a neighbour for a minute)."""
    rng, rule = np.random.default_rng(seed), Rule()
    log_sd, outcomes = math.sqrt(math.log1p(sigma**2)), []
    for _ in range(sessions):
        runs = log_sd * rng.standard_normal((4, rule.max_runs))
        runs -= math.log(1.5) * (rng.random(runs.shape) < 0.05)
        runs += move * rng.standard_normal(rule.max_runs)
        content = 0.26 * rng.standard_normal(rule.max_runs)
        sd_now, ref_now, sd_base, ref_base = content + math.log1p(-drop) + runs[0], runs[1], content + runs[2], runs[3]
        measured = [rule.min_runs]

        def evidence():
            k = measured[0]
            return builds(sd_now[:k], ref_now[:k], sd_base[:k], ref_base[:k])

        def more():
            if measured[0] + rule.min_runs > rule.max_runs:
                return False
            measured[0] += rule.min_runs
            return True

        outcomes.append(decide_until(evidence, more, *ZONE, rule).outcome)
    return outcomes


@pytest.mark.parametrize("move", [0.0, 0.05])
def test_a_builds_ab_keeps_its_rates_and_catches_a_ten_percent_drop_at_gpu_noise(move):
    sessions, rule = 300, Rule()
    margin = 2 * math.sqrt(0.05 * 0.95 / sessions)  # the simulation's own error, ~2.5 points
    assert simulated_builds(0.0, sessions, seed=21, move=move).count(FAILED) / sessions <= rule.false_fail + margin
    assert simulated_builds(0.10, sessions, seed=22, move=move).count(PASSED) / sessions <= rule.false_pass + margin
    # Issue 46: at 3% noise a 10% drop is caught in at least 90% of sessions within the cap, outliers and all,
    # and as often when the machine's speed moves between draws (read one build at a time, the references
    # spread with every move: 73% of 1,000 such sessions caught it).
    assert simulated_builds(0.10, sessions, seed=23, move=move).count(FAILED) / sessions >= 0.90


def test_a_move_of_the_machine_between_draws_cancels_in_the_builds_pairs():
    # An A/A of eight draws, every run 2-3% off, the machine 30% slower on some draws than on others, alike
    # for the four runs of a draw: the reading is the one without the moves, and the A/A passes.
    noise = np.random.default_rng(5).normal(0.0, 0.025, (4, 8))
    content = [0.0, 0.3, -0.2, 0.1, 0.25, -0.15, 0.05, 0.2]
    moves = [0.0, -0.3, -0.1, 0.05, -0.25, 0.1, -0.2, 0.0]
    calm = [[c + n for c, n in zip(content, noise[0])], list(noise[1]), [c + n for c, n in zip(content, noise[2])]]
    calm.append(list(noise[3]))
    moved = [[v + m for v, m in zip(side, moves)] for side in calm]
    still, shaken = read(builds(*calm)), read(builds(*moved))
    assert shaken.estimate == pytest.approx(still.estimate)
    assert shaken.variance == pytest.approx(still.variance) and shaken.df == still.df
    assert decide(builds(*moved), *ZONE).outcome == PASSED
