"""measure.timing_decisions's spread cell: content between draws, timing as the rule reads it, first sends, workload."""

import math
from types import SimpleNamespace

from pytest_specdec.measure.timing_decisions import DecidedFigures
from pytest_specdec.verdict.sequential.rule import Evidence


class Figures(DecidedFigures):
    """A result's spread cell over given evidence (log speedups per send; the reference at 0)."""

    def __init__(self, sends, num_prompts=4, remembers=False):
        super().__init__(SimpleNamespace(pattern={"num_prompts": num_prompts}))
        logs = tuple(tuple(math.log(v) for v in s) for s in sends)
        self.evidence = Evidence(logs, reference=(0.0,) * len(sends), remembers=remembers)

    def speedup_evidence(self, metric="output_throughput", **_):
        return self.evidence


def test_a_server_that_remembers_is_not_timing_spread():
    # Suffix decoding's shape in the main job: first sends 1.35x and 1.98x, sends again about 2.6x within 3%.
    cell = Figures([(1.35, 2.55, 2.60, 2.65), (1.98, 2.58, 2.62, 2.66)]).spread_note()
    between, timing, first = cell.split(", ")[:3]
    assert between == "between draws 31.1%"
    # Timing: the sends again among themselves, and each first send against them around the shared offset.
    assert timing.startswith("same draw sent again ") and float(timing.split()[-1].rstrip("%")) > 10
    assert first == "first sends -37.4% against their sends again (the figure is the first's)"
    assert "the checks judge these 2 draws of 4 prompts" in cell and "more prompts per draw" in cell


def test_a_server_known_to_remember_is_timed_by_its_sends_again_as_the_rule_reads_it():
    # The same runs from a suffix server (its spec says it remembers): one run's timing is its sends again's
    # among themselves, and how far the first sends lie from them is said, not read as timing.
    cell = Figures([(1.35, 2.55, 2.60, 2.65), (1.98, 2.58, 2.62, 2.66)], remembers=True).spread_note()
    between, timing, first = cell.split(", ")[:3]
    assert timing.startswith("same draw sent again ") and float(timing.split()[-1].rstrip("%")) < 3
    assert first == "first sends -37.4% against their sends again (the figure is the first's)"


def test_draws_that_agree_are_said_to_stand_for_the_workload_by_saying_nothing_more():
    cell = Figures([(1.50, 1.51, 1.49), (1.52, 1.50, 1.53)]).spread_note()
    assert cell.startswith("between draws 0.9%, same draw sent again ")
    assert "more prompts per draw" not in cell


def test_draws_not_sent_again_have_no_timing_spread_to_say():
    assert Figures([(1.2,), (1.8,)]).spread_note().startswith("between draws 33.2%, the draws differ")
    assert Figures([(1.2,)]).spread_note() == "unavailable: one run a side"
