"""Draw many short sampled continuations per prompt from both sides, for `verdict.distribution`.

`assert_same_distribution` needs what a measured run does not have: many samples of the same prompt.
The drawer sends each of the test's first prompts `samples` times with ``max_tokens`` = `tokens` (and
``ignore_eos``, so every sample reaches every position) to the reference's server, then to SD's, at the
workload's sampling settings.  Each request has its own seed and the two sides' seeds differ: with the same
seed, the first token (sampled from the same prefill logits on both sides) would be the same draw twice,
and the two samples would not be independent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..engines import engine_named
from ..load.client import generate_load
from ..load.patterns import AccessPattern
from ..verdict.distribution import DistributionTest, same_distribution, samples_needed
from .run_checks import check_run

SEED_OFFSET = 424_242  # the draws' run seeds: away from every measured run's (repeat_seed strides 7919)


@dataclass(frozen=True)
class DrawPlan:
    prompts: int
    tokens: int
    samples: int  # per side, per prompt
    alpha: float
    effect: float
    power: float
    max_categories: int

    @classmethod
    def planned(
        cls, prompts: int, tokens: int, samples: int | None, alpha: float, effect: float, power: float, categories: int
    ) -> "DrawPlan":
        for name, value in (("prompts", prompts), ("tokens", tokens), ("max_categories", categories)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "max_categories" else 1):
                raise ValueError(f"{name} must be an integer >= {2 if name == 'max_categories' else 1}, got {value!r}")
        if samples is None:  # Bonferroni over every planned table: prompts x positions
            samples = samples_needed(effect, categories - 1, alpha / (prompts * tokens), power)
        elif isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
            raise ValueError(f"samples must be an integer >= 2 or None (computed from the power), got {samples!r}")
        return cls(prompts, tokens, samples, alpha, effect, power, categories)


def draw(
    measurements: Any, spec: Any, workload: Any, pattern: AccessPattern, seed: int, plan: DrawPlan
) -> DistributionTest:
    """Draw `plan.samples` continuations of each of the test's first `plan.prompts` prompts on each side
    and test them (one busy server at a time)."""
    prompts = measurements.prompts(spec.model, workload, pattern, seed)[: plan.prompts]
    if len(prompts) < plan.prompts:
        raise ValueError(
            f"the test's access pattern sends {len(prompts)} prompts; assert_same_distribution asked for "
            f"{plan.prompts} (pass prompts={len(prompts)})"
        )
    sides = []
    # SD first: a run ends on SD's server, so on a machine that keeps one server up this starts one, not two.
    for side, side_spec, offset in (("SD", spec, 1), ("reference", spec.reference(), 0)):
        began = time.monotonic()
        samples = draw_side(measurements, side_spec, workload, prompts, plan, seed + offset, side)
        measurements.on_event(
            f"{spec.label()}: {plan.samples} samples of {plan.tokens} tokens for each of {len(prompts)} prompts from "
            f"the {side} server ({time.monotonic() - began:.0f} s)"
        )
        sides.append(samples)
    return same_distribution(
        sides[1],
        sides[0],
        alpha=plan.alpha,
        effect=plan.effect,
        power=plan.power,
        max_categories=plan.max_categories,
        samples_per_side=plan.samples,
        temperature=workload.sampling.temperature,
        label=spec.label(),
        decode=measurements.tokenizer(spec.model).decode,  # loaded already: the run compared its outputs
    )


def draw_side(measurements, spec, workload, prompts, plan: DrawPlan, seed: int, side: str) -> list[list]:
    """`plan.samples` continuations of `plan.tokens` tokens of each prompt from the server for `spec`, at
    `workload`'s sampling: per prompt, a list of token-id tuples (a whole text where a server sends no ids)."""
    server = measurements.pool.get(spec)
    samples, run_seed = plan.samples, seed + SEED_OFFSET
    short = [replace(p, output_len=plan.tokens) for p in prompts]
    requests = [prompt for prompt in short for _ in range(samples)]  # prompt p's samples are contiguous
    load = generate_load(
        server.url,
        server.model,
        requests,
        AccessPattern(
            f"distribution_{side}",
            num_prompts=len(requests),
            max_concurrency=engine_named(spec.engine).draw_concurrency,
        ),
        seed=run_seed,
        ignore_eos=True,
        sampling=workload.sampling,
        endpoint=workload.endpoint,
        request_timeout=measurements.request_timeout,
        engine=spec.engine,
        draws=True,
    )
    check_run(server, spec, load.records, f"{side} samples for assert_same_distribution of {spec.label()}")
    return [[_tokens(record) for record in load.records[p * samples : (p + 1) * samples]] for p in range(len(prompts))]


def _tokens(record) -> tuple:
    # Token ids position by position; a server that sends none gives the whole text as one item, and the
    # test then compares whole continuations per prompt.
    return tuple(record.token_ids) if record.token_ids else (record.text,)


Drawer = Callable[[DrawPlan], DistributionTest]


def drawer_for(measurements: Any, spec: Any, workload: Any, pattern: AccessPattern, seed: int) -> Drawer:
    """What a result keeps to draw its samples later: the test's servers and traffic, bound."""
    return lambda plan: draw(measurements, spec, workload, pattern, seed, plan)
