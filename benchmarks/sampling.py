"""SD at temperature on real CPU servers: acceptance and speedup greedy and sampled, and the distribution
test's false-alarm and detection rates over fresh sessions.

Each session starts its own servers (a fresh `ServerPool`); the first measures each configuration greedy
to max_tokens, greedy with natural stops and at `--temperature` (acceptance, speedup, output lengths: the
same prompts and arrivals on both sides); every session then runs `--trials`
trials of `assert_same_distribution`'s test: the reference's samples against SD's at the same settings
(any rejection is a false alarm when SD is lossless) and against SD's drawn at `--wrong-temperature` (a
planted wrong sampler: any rejection is a detection).  Printed: one line per measurement and trial, then
the rates with the sample sizes.

    .venv/bin/python benchmarks/sampling.py --engine llamacpp --sessions 2 --trials 3
    .venv/bin/python benchmarks/sampling.py --engine vllm --sessions 1 --trials 1
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.measure.distribution_samples import DrawPlan, draw_side
from pytest_specdec.verdict.distribution import same_distribution

MODEL = "specdec:smollm2-135m"
CONFIGS = {
    "vllm": (
        ("ngram", {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}),
        ("suffix", {"method": "suffix", "num_speculative_tokens": 4}),
    ),
    "llamacpp": (
        ("ngram", {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}),
    ),
}


def spec_for(engine: str, config: dict) -> ServerSpec:
    return ServerSpec(MODEL, config, server_args=("--enforce-eager",) if engine == "vllm" else (), engine=engine)


def one_session(args, index: int, work: Path, tally: dict) -> None:
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: None, startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: None)
    greedy = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    sampled = resolve_workload(
        "code_edit", {"input_len": args.input_len, "output_len": args.output_len, "temperature": args.temperature}
    )
    natural = replace(greedy, ignore_eos=False)  # stop="natural"
    wrong = replace(sampled, sampling=replace(sampled.sampling, temperature=args.wrong_temperature))
    pattern = resolve_pattern("throughput_high", {"max_concurrency": 4, "num_prompts": 8})
    plan = DrawPlan.planned(args.prompts, args.tokens, None, args.alpha, args.effect, 0.9, 8)
    tally["samples"] = plan.samples
    try:
        for name, config in CONFIGS[args.engine]:
            spec = spec_for(args.engine, config)
            for workload in (greedy, natural, sampled) if index == 0 else ():
                result = measurements.run(spec, workload, pattern)
                lengths = [
                    statistics.fmean(r.output_tokens for run in runs for r in run.records)
                    for runs in (result.reference_runs, result.speculative_runs)
                ]
                print(
                    f"{name} {workload.sampling.label()}, stop {workload.stop}: speedup {result.speedup():.3f}x, "
                    f"acceptance {result.acceptance_rate:.1%}, output tokens per request {lengths[0]:.1f} "
                    f"(reference) / {lengths[1]:.1f} (SD)",
                    flush=True,
                )
            prompts = measurements.prompts(MODEL, sampled, pattern, 0)[: plan.prompts]
            for trial in range(args.trials):
                seed = 1000 * index + 10 * trial
                reference = draw_side(measurements, spec.reference(), sampled, prompts, plan, seed, "reference")
                lossless = draw_side(measurements, spec, sampled, prompts, plan, seed + 1, "SD")
                planted = draw_side(measurements, spec, wrong, prompts, plan, seed + 2, "SD, wrong temperature")
                same = same_distribution(reference, lossless, alpha=args.alpha, effect=args.effect)
                hot = same_distribution(reference, planted, alpha=args.alpha, effect=args.effect)
                tally.setdefault(name, {"trials": 0, "alarms": 0, "detected": 0})
                tally[name]["trials"] += 1
                tally[name]["alarms"] += not same.passed
                tally[name]["detected"] += not hot.passed
                print(
                    f"session {index + 1} {name} trial {trial + 1}: same sampler p_min {same.min_p_value:.3g} "
                    f"({'rejected' if not same.passed else 'pass'}), SD at {args.wrong_temperature:g} p_min "
                    f"{hot.min_p_value:.3g} ({'detected' if not hot.passed else 'missed'})",
                    flush=True,
                )
    finally:
        pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(CONFIGS), default="llamacpp")
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--wrong-temperature", type=float, default=1.2)
    parser.add_argument("--effect", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    tally: dict = {}
    for index in range(args.sessions):
        one_session(args, index, Path(tempfile.mkdtemp(prefix="specdec-sampling-")), tally)
    samples = tally.pop("samples")
    print(
        f"\n{args.engine}, code_edit {args.input_len}/{args.output_len}, temperature {args.temperature:g}; "
        f"{args.prompts} prompts x {args.tokens} tokens, {samples} samples a side per prompt (effect w "
        f"{args.effect:g}, power 90%, alpha {args.alpha:g}), {args.sessions} sessions:"
    )
    for name, counts in tally.items():
        print(
            f"  {name}: SD at the same settings rejected in {counts['alarms']} of {counts['trials']} trials (false "
            f"alarms where SD is lossless: bound {args.alpha:g}); "
            f"SD at {args.wrong_temperature:g} detected in {counts['detected']} of {counts['trials']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
