"""measure.more_draws: new draws of the workload on both sides, bracketed where the reference was sent again
after SD's, counted against the cap, and never for a builds A/B (its more runs are new draws already)."""

import collections
from dataclasses import replace
from types import SimpleNamespace

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.measure.more_draws import arm
from pytest_specdec.measure.result import SpecDecResult, compare_outputs
from tests.support.report_results import PATTERN, WORKLOAD, run

SUFFIX = ServerSpec("m", {"method": "suffix", "num_speculative_tokens": 4})


class Measurements:
    """What `arm` and the callables it sets use of measure.measurements.Measurements: `measure` of one repeat
    (refusing anything else, as the callables only ever ask for one), events, a tokenizer, the counters."""

    def __init__(self, max_repeats: int = 8):
        self.sequential, self.max_repeats, self.strict = True, max_repeats, False
        self.sends_again, self.references_again = collections.Counter(), collections.Counter()
        self.new_draws = collections.Counter()
        self.sent: list[tuple[str, int, str]] = []
        self.events: list[str] = []

    def measure(self, spec, workload, pattern, prompts, *, seed, logprobs, what, only_repeat=None, repeats=None):
        assert only_repeat is not None and repeats is None, "more runs are measured one repeat at a time"
        side = "SD" if spec.speculative_config else "reference"
        self.sent.append((side, only_repeat, what))
        return [replace(run(spec, 45.0 if side == "SD" else 30.0, 0.02), repeat=only_repeat)]

    def on_event(self, text: str) -> None:
        self.events.append(text)

    def tokenizer(self, model):
        return SimpleNamespace(decode=lambda ids: " ".join(map(str, ids)))


def armed(measurements: Measurements, sent_again: int = 1) -> SpecDecResult:
    """A suffix result of two draws, each sent again `sent_again` times, armed for auto repeats."""
    references = [replace(run(SUFFIX.reference(), 30.0, 0.03), repeat=r) for r in range(2)]
    speculative = [replace(run(SUFFIX, 45.0, 0.02), repeat=r) for r in range(2)]
    outputs = [compare_outputs(a.records, b.records) for a, b in zip(references, speculative)]
    result = SpecDecResult(SUFFIX, WORKLOAD, PATTERN, references, speculative, outputs[0], {})
    result.outputs_per_repeat = outputs
    workload = SimpleNamespace(sampling=None)
    arm(measurements, result, workload, PATTERN, prompts=[], seed=0)
    for _ in range(sent_again):
        assert result.more_runs()
    return result


def test_new_draws_measure_sd_then_the_reference_on_new_repeats_apart_from_the_results_draws():
    measurements = Measurements()
    result = armed(measurements)
    shared = result.reference_runs  # the workload's reference runs, which other results may hold too
    measurements.sent.clear()
    assert result.new_draws()
    # SD's server is the one up after its sends again: its new draws first, then the reference's.
    assert measurements.sent == [
        ("SD", 2, "SD, a new draw"),
        ("SD", 3, "SD, a new draw"),
        ("reference", 2, "reference, a new draw"),
        ("reference", 3, "reference, a new draw"),
    ]
    # Timing evidence, apart: the draws acceptance, outputs and a stored baseline's pairs count stay run()'s.
    assert [(ref.repeat, sd.repeat) for ref, sd in result.new_draw_runs] == [(2, 2), (3, 3)]
    assert result.reference_runs is shared and len(shared) == 2 and len(result.speculative_runs) == 2
    assert len(result.outputs_per_repeat) == 2 and result.repeat_seeds() == armed(Measurements()).repeat_seeds()
    assert measurements.new_draws[SUFFIX.key] == 1
    assert "measuring 2 new draws on both sides" in measurements.events[-1]
    # A check against the reference reads all four draws; one against a baseline only the two it has pairs for.
    assert len(result.speedup_evidence().sends) == 4
    assert len(result.speedup_evidence(baseline=[1.5, 1.5]).sends) == 2
    # Two sends a draw and two new draws: 6 runs a side, so two more would pass no cap of 8 yet.
    assert result.runs_per_side() == 6 and result.new_draws() and result.runs_per_side() == 8
    assert [sd.repeat for _, sd in result.new_draw_runs] == [2, 3, 4, 5]
    assert not result.new_draws() and result.runs_per_side() == 8  # the cap


def test_where_the_reference_was_sent_again_after_sd_every_new_draw_is_bracketed_too():
    measurements = Measurements()
    result = armed(measurements)
    assert result.again_reference()
    measurements.sent.clear()
    assert result.new_draws()
    sides = [(side, repeat) for side, repeat, _ in measurements.sent]
    assert sides == [("reference", 2), ("reference", 3), ("SD", 2), ("SD", 3), ("reference", 2), ("reference", 3)]
    assert [r.repeat for r in result.reference_again_runs] == [0, 1, 2, 3]
    # The evidence then has every draw's reference sent again, so the machine's move stays measured.
    evidence = result.speedup_evidence()
    assert len(evidence.sends) == 4 and evidence.reference_again is not None and len(evidence.reference_again) == 4
    assert evidence.remembers  # suffix decoding: its sends again time one another, not its first sends


def test_a_builds_ab_has_no_new_draws_of_its_own_and_fixed_repeats_have_none():
    builds = armed(Measurements(), sent_again=0)
    builds.builds = SimpleNamespace()
    arm(Measurements(), builds, SimpleNamespace(sampling=None), PATTERN, prompts=[], seed=0)
    assert builds.new_draws is None
    fixed = Measurements()
    fixed.sequential = False
    plain = armed(Measurements(), sent_again=0)
    arm(fixed, plain, SimpleNamespace(sampling=None), PATTERN, prompts=[], seed=0)
    assert plain.rule.max_runs == 2 and plain.new_draws is None  # --specdec-repeats N: exactly N runs
