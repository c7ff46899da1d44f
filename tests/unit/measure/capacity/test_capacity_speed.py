"""The CPU capacity example's decision does not depend on how fast the machine is (issue 19, "Done means" 1).

A latency model stands in for the two servers of
examples/cpu/test_cpu_specdec.py::test_ngram_slo_capacity_on_code_edits, shaped
like vLLM's CPU build on two cores: the reference decodes at ~33 ms per token
unloaded and slows as load grows (the batch grows); n-gram SD is a bit faster
unloaded (1.25x) and its gain shrinks with load until it is slower. A machine
`speed` times faster divides every time by `speed` and carries `speed` times
the load for the same latency: the curves are the same in units of the
machine's own speed.

The whole decision is replayed through `measure_capacity`: the relative SLO
resolved from the modelled unloaded run, bracket, bisect, the boundary probed
again, the ratio and `assert_capacity`'s verdict. With the relative objective
the verdict and the ratio agree at 0.5x, 1x and 4x (and, within the search's
resolution, on the issue's machine, which this model puts at ~3.15x: 58 ms
p50 TPOT at 8 req/s). With the old absolute objective (105 ms) they do not,
which is what made the example fail on a faster box.
"""

import math
from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.load.client import RequestRecord
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run
from pytest_specdec.measure.capacity.slo import UNLOADED, measure_capacity

SPEC = ServerSpec("specdec:smollm2-135m", {"method": "ngram", "num_speculative_tokens": 4}, ("--enforce-eager",))
WORKLOAD = resolve_workload("code_edit", {"input_len": 192, "output_len": 64})
# The example's search (examples/cpu): Poisson arrivals of 16 code edits from 0.5 req/s, a ceiling of 32.
PATTERN = resolve_pattern("slo_capacity", {"search_start": 0.5, "num_prompts": 16, "max_load": 32.0})
RELATIVE = {"tpot_x": 3.0}
ABSOLUTE = {"tpot": 105.0}  # what the example declared before: it held at every load on a faster box
TPOT_MS, TTFT_MS, TOKENS = 33.0, 150.0, 64


def slowdown(x: float) -> float:
    """The reference's TPOT over its unloaded TPOT at load x (req/s in units of the machine's speed)."""
    return 1 + 1.1 * x**1.5


def sd_slowdown(x: float) -> float:
    # 1.25x faster unloaded; the gain shrinks with load and turns into a loss near x = 0.8.
    return 0.8 * slowdown(x) * (1 + 0.25 * x)


def true_capacity(curve, limit: float) -> float:
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if curve(mid) <= limit else (lo, mid)
    return lo


class Machine:
    """A fake `Measurements` over the model: each run's records follow the curves at `speed`."""

    max_dispatch_lag_ms = 10.0

    def __init__(self, speed: float):
        self.speed = speed
        self.pool = SimpleNamespace(get=lambda spec: SimpleNamespace(log_path=None))
        self.unloaded_runs = 0

    def prompts(self, model, workload, pattern, seed):
        return [f"prompt {i}" for i in range(pattern.num_prompts)]

    def measure_planned_references(self, spec):
        pass

    def reference_search(self, spec, key, search):  # as Measurements: planned ones first
        self.measure_planned_references(spec)
        return search()

    def _run(self, spec, rate, n):
        curve = sd_slowdown if spec.speculative_config else slowdown
        tpot_s = TPOT_MS / 1000 / self.speed * curve(0.0 if math.isinf(rate) else rate / self.speed)
        ttft_s = TTFT_MS / 1000 / self.speed
        records = []
        for i in range(n):
            # A spread around the curve (median exactly on it), with no trend over the run.
            tpot = tpot_s * (0.96, 1.04)[i % 2]
            start = i * (ttft_s + tpot_s * (TOKENS - 1)) if math.isinf(rate) else i / rate
            latency = ttft_s + tpot * (TOKENS - 1)
            records.append(
                RequestRecord(
                    i, 192, TOKENS, start, ttft_s, [tpot] * (TOKENS - 1), latency, list(range(TOKENS)), "x", None, True
                )
            )
        duration = records[-1].start_time + records[-1].latency
        return Run(spec, 0, summarize(records, duration), records, None, ["vllm", "serve"], 0.0)

    def measure(self, spec, workload, pattern, prompts, seed=0, what="", repeats=1):
        return [self._run(spec, pattern.request_rate, pattern.num_prompts)]

    def reference(self, spec, workload, pattern, prompts, seed=0):
        assert pattern == UNLOADED and pattern.max_concurrency == 1  # closed loop, one request at a time
        self.unloaded_runs += 1
        return [self._run(spec.reference(), math.inf, pattern.num_prompts)]


def decide(speed: float, slo: dict, pattern=PATTERN, min_ratio: float = 0.7):
    machine = Machine(speed)
    result = measure_capacity(machine, SPEC, WORKLOAD, pattern, slo, 50.0)
    try:
        result.assert_capacity(min_ratio=min_ratio)
        verdict = "pass"
    except AssertionError as failure:
        verdict = "undecidable" if "undecidable" in str(failure) else "fail"
    return result, verdict, machine


TRUE_RATIO = true_capacity(sd_slowdown, 3.0) / true_capacity(slowdown, 3.0)  # 0.93


def test_the_model_is_the_machine_the_issue_describes():
    assert TPOT_MS * slowdown(0) == 33.0 and sd_slowdown(0) == 0.8
    assert sd_slowdown(2.0) > slowdown(2.0)  # SD's gain has turned into a loss under load
    # The issue's faster box: p50 TPOT 58 ms at 8 req/s (the reference), which puts it at ~3.15x.
    assert TPOT_MS / 3.15 * slowdown(8 / 3.15) == pytest.approx(58.0, rel=0.03)
    assert TRUE_RATIO == pytest.approx(0.93, abs=0.01)


@pytest.mark.parametrize("speed", [0.5, 1.0, 4.0])
def test_a_relative_slo_gives_the_same_decision_at_every_machine_speed(speed):
    result, verdict, machine = decide(speed, RELATIVE)
    baseline, baseline_verdict, _ = decide(1.0, RELATIVE)
    # The objective resolved from this machine's own unloaded run, measured once, the same on both sides.
    tpot = result.objectives["tpot"]
    assert machine.unloaded_runs == 1
    assert tpot["unloaded_p50_ms"] == pytest.approx(TPOT_MS / speed) and tpot["multiple"] == 3.0
    assert result.slo == {"tpot": pytest.approx(3 * TPOT_MS / speed)} == {"tpot": tpot["ms"]}
    assert f"tpot_x=3: 3 x the reference's unloaded median {TPOT_MS / speed:.4g} ms" in result.describe()
    # Both sides bracketed, around capacities that scale with the machine.
    for side, curve in ((result.reference, slowdown), (result.speculative, sd_slowdown)):
        lo, hi = side.bracket
        assert side.status == "found" and side.stopped == "converged"
        assert lo <= speed * true_capacity(curve, 3.0) < hi and hi / lo - 1 <= 0.1
    ratio = result.ratio()
    assert ratio.kind == "estimate" and ratio.low <= TRUE_RATIO <= ratio.high
    assert abs(math.log(ratio.value / TRUE_RATIO)) <= math.log(1.1)
    # The same verdict and ratio as on the 1x machine.
    assert verdict == baseline_verdict == "pass"
    assert ratio.value == pytest.approx(baseline.capacity_ratio(), rel=1e-9)
    assert decide(speed, RELATIVE, min_ratio=1.3)[1] == "fail"
    assert decide(speed, RELATIVE, min_ratio=0.9)[1] == "undecidable"  # within the resolution of 0.93


def test_on_the_issues_machine_the_relative_decision_agrees_within_the_resolution():
    result, _, _ = decide(3.15, RELATIVE)
    ratio = result.ratio()
    assert ratio.kind == "estimate" and ratio.low <= TRUE_RATIO <= ratio.high
    assert abs(math.log(ratio.value / decide(1.0, RELATIVE)[0].capacity_ratio())) <= 2 * math.log(1.1)
    assert decide(3.15, RELATIVE, min_ratio=0.7)[1] == "pass" and decide(3.15, RELATIVE, min_ratio=1.3)[1] == "fail"


def test_the_old_absolute_slo_decides_differently_on_faster_and_slower_machines():
    decisions = {speed: decide(speed, ABSOLUTE) for speed in (0.5, 1.0, 4.0)}
    verdicts = {speed: verdict for speed, (_, verdict, _) in decisions.items()}
    ratios = {speed: result.capacity_ratio() for speed, (result, _, _) in decisions.items()}
    # 105 ms is 1.6x the unloaded TPOT at 0.5x, 3.2x at 1x, 12.7x at 4x: each machine is judged at a
    # different point of the curves, where SD's gain differs.
    assert verdicts[0.5] == "pass" and verdicts[4.0] in ("fail", "undecidable")
    assert decide(0.5, ABSOLUTE, min_ratio=1.0)[1] != decide(4.0, ABSOLUTE, min_ratio=1.0)[1]
    assert ratios[0.5] / ratios[4.0] > 1.1**2  # further apart than two resolutions
    assert all(machine.unloaded_runs == 0 for _, _, machine in decisions.values())  # nothing to resolve
    # And with the example's old search (from 0.5 req/s, five probes) the 4x machine never brackets:
    # the issue's "ratio unavailable (both sides held at every load probed)", now an undecidable failure.
    old = resolve_pattern("slo_capacity", {"search_start": 0.5, "max_probes": 5, "num_prompts": 16})
    result, verdict, _ = decide(4.0, ABSOLUTE, pattern=old)
    assert verdict == "undecidable" and result.reference.bound == result.speculative.bound == ">="
    assert result.reference.describe().startswith(">= 8 req/s")
