"""The warm-up runs once per live server object, never skipped for a new one."""

import gc
import weakref
from types import SimpleNamespace

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workloads import Prompt, resolve_workload
from pytest_specdec.measure import measurements as measuring
from pytest_specdec.measure.measurements import Measurements

SPEC = ServerSpec("m")


class FakeServer:
    url, model, process = "http://127.0.0.1:9", "m", None


def test_each_new_server_is_warmed_once_and_not_kept_alive(monkeypatch, tmp_path):
    sent = []
    steady_round = [SimpleNamespace(success=True, output_tokens=16, latency=0.5)] * measuring.WARMUP_REQUESTS
    monkeypatch.setattr(
        measuring,
        "generate_load",
        lambda url, model, prompts, pattern, **kw: sent.append(len(prompts)) or SimpleNamespace(records=steady_round),
    )
    measurements = Measurements(pool=None, work_dir=tmp_path)
    monkeypatch.setattr(measurements, "prompts", lambda *a: [Prompt("p", 4, 64)] * 3)
    workload = resolve_workload("random_s", {"input_len": 4, "output_len": 64})
    pattern = AccessPattern("c1", max_concurrency=1, num_prompts=3)

    first = FakeServer()
    measurements._warm_up(first, SPEC, workload, pattern, 0)
    measurements._warm_up(first, SPEC, workload, pattern, 0)
    assert sent == [measuring.WARMUP_REQUESTS] * 3  # once per server: a round and two that do not improve on it
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # remembering the warm-up keeps no stopped server alive
    # A new server, whatever address CPython gives it (often the freed one), is warmed again.
    for _ in range(3):
        measurements._warm_up(FakeServer(), SPEC, workload, pattern, 0)
    assert sent == [measuring.WARMUP_REQUESTS] * 12
    # A server resumed from parking (serving.pool) is warmed again, once per resume.
    parked = FakeServer()
    measurements._warm_up(parked, SPEC, workload, pattern, 0)
    parked.resumes = 1
    measurements._warm_up(parked, SPEC, workload, pattern, 0)
    measurements._warm_up(parked, SPEC, workload, pattern, 0)
    assert sent == [measuring.WARMUP_REQUESTS] * 18


def _round(ms_per_token: float, spread: float = 0.0, tokens: int = 16):
    a = ms_per_token * (1 - spread / 2) * tokens / 1000
    b = ms_per_token * (1 + spread / 2) * tokens / 1000
    return [
        SimpleNamespace(success=True, output_tokens=tokens, latency=a),
        SimpleNamespace(success=True, output_tokens=tokens, latency=b),
    ]


def test_a_cold_server_is_warmed_until_two_rounds_agree():
    from pytest_specdec.measure.warm_up import warm_until_steady

    # Cold start like the first H100 server: 33% slower for three rounds, then settled.
    figures = [40.0, 37.0, 33.0, 30.0, 30.3, 30.1, 30.0]
    sent = []
    state = warm_until_steady(lambda i: sent.append(i) or _round(figures[i]))
    assert state.steady and len(sent) == 6  # rounds 5 and 6 are the first two that do not beat round 4
    assert state.rounds_ms_per_token == (40.0, 37.0, 33.0, 30.0, 30.3, 30.1)
    assert "steady after 6 rounds" in state.describe()


def test_rounds_that_bounce_without_a_trend_are_steady_once_they_stop_beating_the_best():
    from pytest_specdec.measure.warm_up import warm_until_steady

    # The CPU build's n-gram server, measured: the same two prompts each round, no trend after
    # the fourth round but +-15% between neighbours (a 5% neighbour agreement never came).
    figures = [378.3, 194.9, 171.4, 147.7, 195.5, 165.4, 150.8, 173.3]
    state = warm_until_steady(lambda i: _round(figures[i]))
    assert state.steady and state.rounds_ms_per_token == tuple(figures[:6])


def test_a_server_that_keeps_slowing_down_is_not_steady():
    from pytest_specdec.measure.warm_up import warm_until_steady

    state = warm_until_steady(lambda i: _round(30.0 * 1.6**i), max_rounds=6)
    assert not state.steady and "slowing down" in state.reason


def test_one_burst_between_settled_rounds_does_not_restart_the_count():
    from pytest_specdec.measure.warm_up import warm_until_steady

    # A baseline build's llama.cpp reference on one pinned core in a whole CI run on a 2-core box: warming until
    # its fifth round, settled on the sixth, one round 56% slower than the best, then settled again.  Counted
    # from the burst it was NOT steady at the cap of 8, and its builds A/B ended undecided.
    figures = [88.0, 83.0, 90.0, 67.7, 57.7, 68.1, 90.1, 64.5]
    state = warm_until_steady(lambda i: _round(figures[i]))
    assert state.steady and state.rounds_ms_per_token == tuple(figures)
    # A burst is one round: two slow rounds in a row, or a slow round with no settled one before it, still
    # restart the count.
    twice = [88.0, 83.0, 90.0, 67.7, 57.7, 68.1, 90.1, 95.0, 64.5, 66.0]
    state = warm_until_steady(lambda i: _round(twice[i]), max_rounds=9)
    assert not state.steady
    assert warm_until_steady(lambda i: _round(twice[i]), max_rounds=10).rounds_ms_per_token == tuple(twice)
    unsettled = [88.0, 60.0, 95.0, 61.0, 62.0]  # round 2 still warms (60 beats 88), so round 3 is no burst
    state = warm_until_steady(lambda i: _round(unsettled[i]), max_rounds=5)
    assert state.steady and len(state.rounds_ms_per_token) == 5  # settled on rounds 4 and 5 in a row


def test_a_server_that_never_settles_is_recorded_as_not_steady_within_the_bounds():
    from pytest_specdec.measure.warm_up import warm_until_steady

    state = warm_until_steady(lambda i: _round(60.0 / (1 + i)), max_rounds=6)
    assert not state.steady and len(state.rounds_ms_per_token) == 6
    assert "NOT steady after 6 rounds" in state.describe()
    clock = iter(range(0, 1000, 50))  # 50 s a round: the time bound stops it after the third
    state = warm_until_steady(lambda i: _round(60.0 / (1 + i)), max_seconds=150, clock=lambda: next(clock))
    assert not state.steady and len(state.rounds_ms_per_token) == 3 and "limit 150 s" in state.reason


def test_rounds_agree_within_their_own_spread_when_it_is_larger_than_the_floor():
    from pytest_specdec.measure.warm_up import agree, round_figure

    noisy = round_figure(_round(30.0, spread=0.2))
    assert noisy[1] > 0.15
    assert agree(noisy, round_figure(_round(33.0, spread=0.2)))[0]  # 10% apart, inside a 20% spread
    assert not agree(round_figure(_round(30.0)), round_figure(_round(33.0)))[0]  # 10% apart, 5% floor
    assert not agree(round_figure([]), round_figure(_round(30.0)))[0]  # an empty round never agrees
