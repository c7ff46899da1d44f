"""The drift a verdict allows for, learned from a machine's own sessions: an upper bound where they are few, never
below this session's own spread, and the built-in figure only as a labelled fallback."""

import math
import random
import statistics

import pytest

from pytest_specdec.verdict.learned_drift import (
    CONFIDENCE,
    MEASURED_CONFIDENCE,
    MIN_SESSIONS,
    DriftBook,
    SessionSeries,
    StartSpread,
    built_in_drift,
    learn_drift,
    measured_drift,
    own_variance,
    session_value_var,
    smallest_failable_drop,
    upper_sd,
)
from pytest_specdec.verdict.sequential.evidence import Evidence, read


def test_the_bound_is_the_chi_square_upper_confidence_bound_on_the_sd():
    values = [0.0, 0.02, -0.01, 0.015, -0.02]
    s, bound = upper_sd(values, confidence=0.9)
    # n = 5: 4 degrees of freedom; chi-square(4)'s lower 10% point is 1.0636, its lower 25% point 1.9226.
    assert bound == pytest.approx(s * math.sqrt(4 / 1.0636), rel=1e-3)
    assert upper_sd(values, confidence=0.75)[1] == pytest.approx(s * math.sqrt(4 / 1.9226), rel=1e-3)
    with pytest.raises(ValueError, match="at least two"):
        upper_sd([0.1])


def test_few_sessions_give_the_bound_never_a_smaller_drift_than_the_data_allow():
    rng = random.Random(0)
    true_sd = 0.02
    understated = 0
    trials = 2000
    for _ in range(trials):
        values = [math.exp(rng.gauss(0.0, true_sd)) for _ in range(5)]
        figure = learn_drift(values)
        assert figure.value >= figure.estimate  # the bound, never the bare estimate
        understated += math.log1p(figure.value) < true_sd
    # The bound falls below the machine's true drift in about 1 - CONFIDENCE of histories of five sessions.
    assert abs(understated / trials - (1 - CONFIDENCE)) < 0.02, understated / trials
    # More sessions: a tighter bound on the same spread.
    steady = [math.exp(0.02 * math.sin(i)) for i in range(20)]
    assert learn_drift(steady).value < learn_drift(steady[:5]).value


def test_too_few_sessions_learn_nothing_and_the_fallback_says_whose_figure_it_is():
    assert learn_drift([1.0, 1.01][: MIN_SESSIONS - 1]) is None
    assert learn_drift([1.0, math.nan, 0.0, -1.0, 1.02]) is None  # unusable values are not sessions
    cpu = built_in_drift(0.042)
    assert cpu.describe() == "drift: the CPU build's figure (4.2%), not this machine's"
    assert "not measured on any GPU" in built_in_drift(0.042, device="gpu").describe()


def test_the_statement_names_its_source_and_a_floor_from_this_sessions_runs():
    figure = learn_drift([1.0, 1.01, 0.995, 1.005, 0.99, 1.0], since="2026-11-20")
    text = figure.describe()
    assert text.startswith(f"drift {figure.value:.1%} (history: 6 sessions since the change point of 2026-11-20")
    assert f"upper {CONFIDENCE:.0%} bound" in text
    floored = learn_drift([1.0, 1.001, 0.999, 1.0], floor=0.05)
    assert floored.value == 0.05 and "raised to the machine's move this session measured, 5.0%" in floored.describe()


def test_a_session_values_own_timing_is_taken_off_what_the_sessions_spread_shows():
    rng = random.Random(3)
    values = [math.exp(rng.gauss(0.0, 0.03)) for _ in range(10)]  # 3% a session, all of it its runs' timing
    plain = learn_drift(values)
    within = session_value_var(0.03 * math.sqrt(2), 2)  # two draws, pairs of 3% runs: 2 x 0.03^2 a pair, / 2
    assert within == pytest.approx(0.03**2)
    taken = learn_drift(values, within=within)
    _, bound = upper_sd([math.log(v) for v in values])
    assert math.log1p(taken.value) == pytest.approx(math.sqrt(max(bound**2 - within, 0.0)))
    assert taken.value < plain.value and "its runs' own timing" in taken.describe()
    # Sessions that agree better than their own runs could: nothing is left for drift, and it is said.
    assert learn_drift([1.0, 1.001, 0.999, 1.0], within=0.05**2).value == 0.0
    with pytest.raises(ValueError, match="within"):
        learn_drift(values, within=-1.0)


def sends_of(rng, sigma, draws, sends=4):
    """One session's runs with no drift and no content: SD's sends of each draw and the reference's, log values."""
    return (
        tuple(tuple(rng.gauss(0.0, sigma) for _ in range(sends)) for _ in range(draws)),
        tuple(rng.gauss(0.0, sigma) for _ in range(draws)),
    )


def test_the_timing_the_gate_reads_takes_off_what_a_session_value_carries_from_its_runs():
    # The gate hands this session's Reading.timing to session_value_var (verdict.gate.speedups); a session's value is
    # the median over its draws of each draw's first send of SD against the reference's (result.speedup()).  On
    # sessions with no drift, what session_value_var says a value carries is what the values spread by: one pair's
    # timing holds both sides' runs, so taking it as one side's took off twice the runs' share.
    rng = random.Random(5)
    draws, values, withins = 2, [], []
    for _ in range(3000):
        sends, reference = sends_of(rng, 0.03, draws)
        values.append(statistics.median(s[0] - r for s, r in zip(sends, reference)))
        withins.append(session_value_var(read(Evidence(sends=sends, reference=reference)).timing, draws))
    assert statistics.mean(withins) == pytest.approx(statistics.pvariance(values), rel=0.1)


def test_the_timing_the_gate_reads_takes_off_what_a_start_anew_carries_from_its_runs():
    # A change holds two starts of one side and two runs of it; the gate hands measured_drift a pair's timing.
    rng = random.Random(6)
    start, sigma = 0.03, 0.02
    changes = tuple(
        rng.gauss(0.0, start) - rng.gauss(0.0, start) + rng.gauss(0.0, sigma) - rng.gauss(0.0, sigma)
        for _ in range(4000)
    )
    sends, reference = sends_of(rng, sigma, 60)
    timing = read(Evidence(sends=sends, reference=reference)).timing
    spread = StartSpread({"output_throughput": changes}, len(changes))
    side = measured_drift(spread, "speculative_output_throughput", timing, confidence=0.5)
    assert math.log1p(side.value) == pytest.approx(start, rel=0.1)


def test_the_smallest_drop_a_drift_lets_the_gate_fail():
    # The docs' figure for the built-in drift: a measured drop under 12.5% cannot fail against a stored baseline.
    assert smallest_failable_drop(0.042) == pytest.approx(0.125, abs=0.001)
    assert smallest_failable_drop(0.0) == 0.0
    half = smallest_failable_drop(0.021)
    assert 0.06 < half < smallest_failable_drop(0.042) / 2 + 0.003
    with pytest.raises(ValueError):
        smallest_failable_drop(math.nan)


class Lookup:
    """A history as strict as history.drift: what it holds per (test, figure), and how often it was asked."""

    def __init__(self, held):
        self.held, self.asked = held, []

    def __call__(self, test_id, fingerprint, figure):
        self.asked.append((test_id, figure))
        return self.held.get((test_id, figure)) or SessionSeries((), None, "history.db", f"the history has no {figure}")


def test_the_book_learns_from_the_history_and_else_falls_back_labelled_with_why():
    steady = tuple(math.exp(0.01 * math.sin(i)) for i in range(8))
    lookup = Lookup(
        {
            ("t::a", "speedup_output_throughput"): SessionSeries(steady, "session 12 (2026-11-20)", "history.db"),
            ("t::b", "speedup_output_throughput"): SessionSeries((1.0, 1.01), None, "history.db"),
        }
    )
    book = DriftBook(lookup, device="gpu")
    learned = book.figure("t::a", {"machine": 1}, "speedup_output_throughput", 0.042)
    assert learned.source == "history" and learned.sessions == 8 and learned.value < 0.042
    assert "since the change point of session 12 (2026-11-20)" in learned.describe()
    few = book.figure("t::b", {"machine": 1}, "speedup_output_throughput", 0.042)
    assert few.source == "built-in" and few.value == 0.042
    assert (
        "not measured on any GPU" in few.describe()
        and "2 session(s)" in few.describe()
        and "3 needed" in few.describe()
    )
    none = book.figure("t::c", {"machine": 1}, "speedup_output_throughput", 0.042)
    assert none.source == "built-in" and "the history has no speedup_output_throughput" in none.describe()
    # Each series is read once a session, however many looks ask.
    book.figure("t::a", {"machine": 1}, "speedup_output_throughput", 0.042, within=1e-4)
    assert lookup.asked.count(("t::a", "speedup_output_throughput")) == 1
    # No history at all: the built-in figure, labelled, with nothing more to say.
    alone = DriftBook().figure("t::a", {}, "speedup_output_throughput", 0.042)
    assert alone.describe() == "drift: the CPU build's figure (4.2%), not this machine's"


def test_servers_started_anew_give_a_bound_on_a_starts_spread_two_starts_for_a_speedup():
    changes = (0.04, -0.02, 0.03, -0.05)  # four servers started anew, each one draw's log change
    spread = StartSpread({"output_throughput": changes}, restarts=4)
    side = measured_drift(spread, "speculative_output_throughput")
    speedup = measured_drift(spread, "speedup_output_throughput")
    mean_square = sum(c * c for c in changes) / 4
    # Four degrees of freedom (the changes' mean is zero): chi-square(4)'s lower 25% point is 1.9226.  A change holds
    # two starts, so a start's variance is half its mean square; a speedup holds one start of each side.
    assert math.log1p(side.value) == pytest.approx(math.sqrt(mean_square * 4 / 1.9226 / 2), rel=1e-3)
    assert math.log1p(speedup.value) == pytest.approx(math.sqrt(2) * math.log1p(side.value), rel=1e-9)
    assert side.source == "measured" and side.sessions == 4 and side.value > side.estimate
    assert side.describe().startswith(f"drift {side.value:.1%} (measured: 4 servers started anew in this session")
    assert "the runs' own timing not taken off" in side.describe()
    assert f"upper {MEASURED_CONFIDENCE:.0%} bound" in side.describe()  # its own calibration, not the history's
    # This session's timing taken off each start's variance: two runs of one side sit in every change, and `timing`
    # is a pair's (SD's run against the reference's), so one side's run is half its variance.
    taken = measured_drift(spread, "speculative_output_throughput", timing=0.02 * math.sqrt(2))
    assert math.log1p(taken.value) == pytest.approx(math.sqrt(mean_square * 4 / 1.9226 / 2 - 0.02**2), rel=1e-3)
    assert "two runs' timing (2.0% a run of one side) taken off each change" in taken.describe()
    assert measured_drift(spread, "speculative_output_throughput", timing=0.5).value == 0.0  # none can be negative
    with pytest.raises(ValueError, match="timing"):
        measured_drift(spread, "speculative_output_throughput", timing=math.nan)
    # A figure of another run metric reads its own changes; too few of them give nothing.
    assert measured_drift(spread, "speedup_median_tpot") is None
    assert measured_drift(StartSpread({"output_throughput": (0.01,)}, 1), "speedup_output_throughput") is None


def test_measured_starts_rank_after_the_history_and_before_the_built_in_figure():
    steady = tuple(math.exp(0.01 * math.sin(i)) for i in range(8))
    lookup = Lookup({("t::a", "speedup_output_throughput"): SessionSeries(steady, None, "history.db")})
    book = DriftBook(lookup)
    measured = StartSpread({"output_throughput": (0.02, -0.03)}, restarts=2)
    assert book.figure("t::a", {}, "speedup_output_throughput", 0.042, measured=measured).source == "history"
    found = book.figure("t::b", {}, "speedup_output_throughput", 0.042, measured=measured)
    assert found.source == "measured" and found.sessions == 2
    # Never below the machine's move this session's own reference measured.
    assert book.figure("t::b", {}, "speedup_output_throughput", 0.042, floor=0.5, measured=measured).value == 0.5
    one = StartSpread({"output_throughput": (0.02,)}, restarts=1)
    fallback = book.figure("t::b", {}, "speedup_output_throughput", 0.042, measured=one)
    assert fallback.source == "built-in" and "the history has no speedup_output_throughput" in fallback.describe()
    assert "1 server(s) started anew, 2 needed" in fallback.describe()
    endpoint = StartSpread(why_none="its servers are running endpoints, which the plugin does not start anew")
    assert (
        "running endpoints"
        in DriftBook().figure("t::a", {}, "speedup_output_throughput", 0.042, measured=endpoint).describe()
    )


def test_each_sessions_own_timing_stored_with_it_is_taken_off_in_place_of_this_sessions():
    values = [2.0 * math.exp(v) for v in (0.03, -0.02, 0.01, -0.04, 0.02, 0.0, -0.01, 0.04, -0.03, 0.01)]
    plain = learn_drift(values)
    estimate, bound = upper_sd([math.log(v) for v in values])
    own = [0.0002, 0.0004, 0.0003, 0.0005, 0.0001, 0.0003, 0.0002, 0.0004, 0.0003, 0.0003]
    stored = learn_drift(values, within=0.0009, own=own)
    # The mean of the stored variances is taken off the bound, not this session's (within), which is ignored.
    assert stored.value == pytest.approx(math.expm1(math.sqrt(bound**2 - statistics.fmean(own))), rel=1e-9)
    assert plain.value > stored.value > learn_drift(values, within=0.0009).value
    assert "a session value, as each session stored it)" in stored.describe()
    # One session without its own (an older plugin's record): this session's timing stands for them all.
    partial = learn_drift(values, within=0.0009, own=[*own[:-1], None])
    assert partial.value == learn_drift(values, within=0.0009).value
    assert "a session value, read from this session's timing spread)" in partial.describe()
    # The stored variances follow their values: an unusable value drops its own with it.
    with_gap = learn_drift([*values, math.nan], own=[*own, 5.0])
    assert with_gap.value == stored.value


def test_a_sessions_own_variance_is_the_rules_timing_where_draws_were_sent_again_else_the_references_spread():
    again = Evidence(sends=((0.50, 0.52), (0.40, 0.37), (0.45, 0.47)), reference=(0.0, 0.02, -0.01))
    reading = read(again)
    assert reading.timing is not None
    assert own_variance(again) == pytest.approx(session_value_var(reading.timing, 3))
    # First sends only (the rule's first look): one pair's timing is twice one run's, the reference's across draws.
    first = Evidence(sends=((0.50,), (0.40,)), reference=(0.0, 0.03))
    assert read(first).timing is None
    assert own_variance(first) == pytest.approx(2 * statistics.variance([0.0, 0.03]) / 2)
    assert own_variance(Evidence(sends=((0.5,),), reference=(0.0,))) is None  # one draw: no spread
    assert own_variance(Evidence(sends=((0.5,), (0.4,)))) is None  # no reference to read it from
