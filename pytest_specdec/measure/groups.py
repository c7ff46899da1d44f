"""A result broken down by a label its requests carry: the prompt's category, or a conversation's turn.

Acceptance differs between kinds of task (Spec-Bench's categories: n-gram
and suffix decoding win on retrieval and summarization, where the answer
repeats the prompt, and lose on translation) and moves as a conversation's
context grows, which an aggregate hides.  Per group:

- acceptance rate and length from the server's per-request SD figures
  (vLLM's ``--per-request-spec-decode-metrics``, summed over the group's
  requests), unavailable with the reason where a request has none;
- the TPOT speedup: the reference's median TPOT over the group's requests
  against the SD side's (the same prompts on both sides), and each side's
  median TTFT;
- how many requests the group has, over every repeat.

Whether groups differ is tested on prompts, not requests: the repeats of a
run send a data file's prompts again (all of them, when the run asks for as
many as the file holds), and greedy decoding gives a prompt the same
acceptance every time, so counting each repeat as another request made three
repeats of 4 conversations look like 12 independent ones (p = 0.04 where 4
against 4 allow nothing below 0.086 once corrected for 3 pairs of groups).

A group of one request is reported, and says so: its figures are one
request's.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..engines.per_request import ACCEPTED, DRAFTED, STEPS

if TYPE_CHECKING:  # the result holds this part; the part reads the result's fields
    from .result import SpecDecResult

GROUPINGS = {
    "category": lambda record: getattr(record, "category", None),
    "turn": lambda record: getattr(record, "turn", None),
}


@dataclass(frozen=True)
class GroupFigures:
    name: str
    requests: int
    acceptance_rate: float = math.nan
    acceptance_length: float = math.nan
    speedup_median_tpot: float = math.nan
    reference_median_tpot_ms: float = math.nan
    speculative_median_tpot_ms: float = math.nan
    reference_median_ttft_ms: float = math.nan
    speculative_median_ttft_ms: float = math.nan
    problem: str | None = None  # why acceptance is unavailable
    # The lowest and highest acceptance rate of one request of the group (the spread behind the rate).
    request_rate_low: float = math.nan
    request_rate_high: float = math.nan
    request_rates: tuple[float, ...] = ()  # each request's acceptance rate
    # Each distinct prompt's acceptance rate over every request that sent it: the units `difference` tests.
    prompt_rates: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        def number(value):
            return value if isinstance(value, (int, float)) and math.isfinite(value) else None

        return {
            "name": self.name,
            "requests": self.requests,
            "acceptance_rate": number(self.acceptance_rate),
            "acceptance_length": number(self.acceptance_length),
            "speedup_median_tpot": number(self.speedup_median_tpot),
            "reference_median_tpot_ms": number(self.reference_median_tpot_ms),
            "speculative_median_tpot_ms": number(self.speculative_median_tpot_ms),
            "reference_median_ttft_ms": number(self.reference_median_ttft_ms),
            "speculative_median_ttft_ms": number(self.speculative_median_ttft_ms),
            # Each side's tok/s per user in the group (analysis.frontier.PER_USER: 1000 / its median TPOT), the
            # per-category throughput SPEED-Bench reports beside acceptance.
            "reference_tok_s_per_user": number(_per_user(self.reference_median_tpot_ms)),
            "speculative_tok_s_per_user": number(_per_user(self.speculative_median_tpot_ms)),
            "problem": self.problem,
            "request_rate_range": [number(self.request_rate_low), number(self.request_rate_high)],
            "request_rates": [number(rate) for rate in self.request_rates],
            "prompt_rates": [number(rate) for rate in self.prompt_rates],
        }


def _per_user(median_tpot_ms: float) -> float:
    return 1000.0 / median_tpot_ms if math.isfinite(median_tpot_ms) and median_tpot_ms > 0 else math.nan


def _tpot_ms(record) -> float | None:
    if not record.success or record.output_tokens < 2:
        return None
    return (record.latency - record.ttft) / (record.output_tokens - 1) * 1000.0


def _median(values) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else math.nan


def _sort_key(name: Any):
    return (0, name, "") if isinstance(name, int) else (1, 0, str(name))


def breakdown(reference_runs, speculative_runs, label: Callable[[Any], Any]) -> list[GroupFigures]:
    """One `GroupFigures` per label value the SD requests carry (requests without one are left out), ordered
    by the label; empty when no request has a label."""
    groups: dict[Any, dict[str, list]] = {}
    for side, runs in (("reference", reference_runs), ("speculative", speculative_runs)):
        for run in runs:
            for record in run.records:
                key = label(record)
                if key is not None:
                    groups.setdefault(key, {"reference": [], "speculative": []})[side].append(record)
    out = []
    for key in sorted(groups, key=_sort_key):
        ref, sd = groups[key]["reference"], groups[key]["speculative"]
        sd_ok = [r for r in sd if r.success]
        figures = [getattr(r, "spec_decoding", None) for r in sd_ok]
        problem = None
        rate = length = math.nan
        per_request, per_prompt = [], []
        if not sd_ok:
            problem = "no SD request of this group completed"
        elif any(not f or DRAFTED not in f for f in figures):
            problem = (
                "a request has no per-request SD figures (vLLM's --per-request-spec-decode-metrics; "
                "other engines' own per-request fields)"
            )
        else:
            drafted = sum(f[DRAFTED] for f in figures)
            accepted = sum(f.get(ACCEPTED, 0) for f in figures)
            rate = accepted / drafted if drafted else math.nan
            per_request = [f.get(ACCEPTED, 0) / f[DRAFTED] for f in figures if f[DRAFTED]]
            per_prompt = _prompt_rates(sd_ok, figures)
            # Tokens per drafted step need the steps, which not every engine counts per request (llama.cpp).
            steps = sum(f[STEPS] for f in figures) if all(STEPS in f for f in figures) else 0
            length = 1.0 + accepted / steps if steps else math.nan
            if not drafted:
                problem = "nothing was drafted for this group's requests"
        ref_tpot, sd_tpot = _median(map(_tpot_ms, ref)), _median(map(_tpot_ms, sd))
        name = f"turn {key + 1}" if isinstance(key, int) else str(key)
        out.append(
            GroupFigures(
                name,
                len(sd),
                rate,
                length,
                ref_tpot / sd_tpot if sd_tpot and math.isfinite(sd_tpot) else math.nan,
                ref_tpot,
                sd_tpot,
                _median(r.ttft * 1000.0 for r in ref if r.success),
                _median(r.ttft * 1000.0 for r in sd if r.success),
                problem,
                min(per_request, default=math.nan),
                max(per_request, default=math.nan),
                tuple(per_request),
                tuple(per_prompt),
            )
        )
    return out


def _prompt_rates(records, figures) -> list[float]:
    """Acceptance per distinct prompt (`prompt_key`; a record without one counts alone), summed over its
    requests, in the order prompts first appear."""
    totals: dict[Any, list[int]] = {}
    for record, f in zip(records, figures):
        if f[DRAFTED]:
            key = getattr(record, "prompt_key", None) or id(record)
            total = totals.setdefault(key, [0, 0])
            total[0] += f.get(ACCEPTED, 0)
            total[1] += f[DRAFTED]
    return [accepted / drafted for accepted, drafted in totals.values()]


def _permutation_p(a: tuple[float, ...], b: tuple[float, ...], rounds: int = 4000, seed: int = 0) -> float:
    """Two-sided permutation test of the difference in mean acceptance, one value a prompt (seeded: repeatable)."""
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    pooled, generator, hits = list(a + b), random.Random(seed), 0
    for _ in range(rounds):
        generator.shuffle(pooled)
        hits += abs(statistics.fmean(pooled[: len(a)]) - statistics.fmean(pooled[len(a) :])) >= observed - 1e-12
    return (hits + 1) / (rounds + 1)


def difference(groups: list[GroupFigures], alpha: float = 0.05) -> str:
    """Whether acceptance differs between the groups beyond the spread of their prompts, in words.

    The groups with the highest and the lowest acceptance are compared by a
    permutation test of their prompts' acceptance rates (each distinct prompt
    once, over every repeat that sent it); the p-value is multiplied by the
    number of pairs of groups (Bonferroni: the two were picked as the extremes
    of all), and a difference is claimed below `alpha`.
    """
    rated = [g for g in groups if len(g.prompt_rates) >= 2 and math.isfinite(g.acceptance_rate)]
    if len(rated) < 2:
        return "no difference measurable: fewer than two groups have per-request acceptance of 2 prompts or more"
    high = max(rated, key=lambda g: g.acceptance_rate)
    low = min(rated, key=lambda g: g.acceptance_rate)
    pairs = len(rated) * (len(rated) - 1) // 2
    p = min(1.0, _permutation_p(high.prompt_rates, low.prompt_rates) * pairs)
    figures = (
        f"{high.name} {high.acceptance_rate:.0%} ({_count(high)}) against {low.name} "
        f"{low.acceptance_rate:.0%} ({_count(low)}); permutation test of prompts, p = {p:.3g} after "
        f"{pairs} comparisons"
    )
    if p < alpha:
        return f"differs: {figures}"
    return f"no difference measurable: the highest and lowest groups' prompts overlap too much: {figures}"


def _count(group: GroupFigures) -> str:
    prompts, requests = len(group.prompt_rates), len(group.request_rates)
    return f"{prompts} prompts" + (f", {requests} requests" if requests != prompts else "")


class GroupedFigures:
    """Per-category and per-turn figures and their checks: a part of `SpecDecResult` (which has both sides' runs)."""

    def __init__(self, result: SpecDecResult):
        self.result = result

    def by(self, grouping: str) -> list[GroupFigures]:
        """The result broken down by ``"category"`` or ``"turn"`` (empty when no request carries one)."""
        if grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {', '.join(GROUPINGS)}, got {grouping!r}")
        return breakdown(self.result.reference_runs, self.result.speculative_runs, GROUPINGS[grouping])

    def assert_group(
        self,
        grouping: str,
        name: str,
        *,
        min_rate: float | None = None,
        min_length: float | None = None,
        min_speedup: float | None = None,
    ):
        """One category's (or turn's: ``"turn 2"``) acceptance rate, length and TPOT speedup at least these."""
        groups = {g.name: g for g in self.by(grouping)}
        if name not in groups:
            raise AssertionError(f"no {grouping} {name!r} in this result; it has: {', '.join(groups) or 'none'}")
        group = groups[name]
        rows = []
        for label, floor, value in (
            ("acceptance_rate", min_rate, group.acceptance_rate),
            ("acceptance_length", min_length, group.acceptance_length),
            ("speedup_median_tpot", min_speedup, group.speedup_median_tpot),
        ):
            if floor is None:
                continue
            if not math.isfinite(value):
                why = group.problem if label.startswith("acceptance") else "no TPOT on one side"
                raise AssertionError(f"{grouping} {name!r}: {label} is unavailable: {why}")
            rows.append((label, value, floor))
        failed = [(label, value, floor) for label, value, floor in rows if value < floor]
        if failed:
            table = "\n".join(f"  {label}: {value:.3f} < required {floor:.3f}" for label, value, floor in failed)
            raise AssertionError(f"{grouping} {name!r} ({group.requests} requests) fell short:\n{table}")
        return self.result

    def assert_category(self, name: str, **floors):
        return self.assert_group("category", name, **floors)
