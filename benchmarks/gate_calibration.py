"""How often does the regression gate cry wolf, and how often does it catch a real drop?

Measured on vLLM's CPU build with the bundled model.  The dial is the depth
of a truncated draft (``draft_model``, k=3): a shallower draft accepts fewer
tokens and changes the speedup by an amount this script measures.  Each
setting's server starts once and is measured `--runs` times, as is the
reference; then many simulated CI runs draw `--repeats` runs per side
(disjoint within a trial) and ask the gate (`stats.compare_samples` with the
default tolerances, as `assert_no_regression` does) whether the setting
regressed against a baseline recorded with the baseline setting.

    .venv/bin/python benchmarks/gate_calibration.py [--runs 12] [--repeats 3] [--trials 400]

Runs drawn from one server session do not include restart-to-restart
variation; the printed false-alarm rate is for that noise only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.gate import repeats_of
from pytest_specdec.patterns import resolve_pattern
from pytest_specdec.result import SpecDecResult, compare_outputs
from pytest_specdec.stats import compare_samples
from pytest_specdec.workloads import resolve_workload

MODEL = "specdec:smollm2-135m"
METRICS = {  # metric -> side of the baseline it lives on
    "speedup_output_throughput": "derived",
    "acceptance_rate": "derived",
    "median_tpot_ms": "speculative",
}


def draft(layers: int) -> ServerSpec:
    return ServerSpec(MODEL, {"method": "draft_model", "model": f"{MODEL}@layers={layers}",
                              "num_speculative_tokens": 3})


def measure(measurements, spec, workload, pattern, prompts, runs) -> list:
    return [measurements.measure(spec, workload, pattern, prompts, what=f"{spec.label()} run {i + 1}/{runs}")[0]
            for i in range(runs)]


def entries(spec, reference_runs, runs) -> list[dict]:
    """Per-run metric entries as the gate stores them (run i paired with reference run i)."""
    out = []
    for ref, sd in zip(reference_runs, runs):
        result = SpecDecResult(spec, {}, {}, [ref], [sd], compare_outputs(ref.records, sd.records), {})
        out.extend(repeats_of(result))
    return out


def gate_fails(baseline: list[dict], current: list[dict]) -> dict[str, bool]:
    verdicts = {}
    for metric, side in METRICS.items():
        verdict = compare_samples(metric, [e[side][metric] for e in baseline], [e[side][metric] for e in current],
                                  resamples=500)
        verdicts[metric] = verdict.regression
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="measured runs per setting (and of the reference)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per side in a simulated CI run")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--baseline-layers", type=int, default=24)
    parser.add_argument("--candidate-layers", default="22,20,16", help="shallower drafts to try, comma-separated")
    args = parser.parse_args(argv)
    if args.runs < 2 * args.repeats:
        parser.error("--runs must be at least twice --repeats (disjoint draws within a trial)")

    work = Path(tempfile.mkdtemp(prefix="specdec-calibration-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True),
                      startup_timeout=600)
    measurements = Measurements(pool, work, repeats=1, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("code_edit", {"input_len": 128, "output_len": 32})
    pattern = resolve_pattern("throughput_low", {"num_prompts": 3})
    prompts = measurements.prompts(MODEL, workload, pattern, seed=0)
    layers = [args.baseline_layers] + [int(x) for x in args.candidate_layers.split(",")]
    try:
        reference = measure(measurements, ServerSpec(MODEL), workload, pattern, prompts, args.runs)
        pools = {n: entries(draft(n), reference, measure(measurements, draft(n), workload, pattern, prompts,
                                                            args.runs)) for n in layers}
    finally:
        pool.close()

    rng = np.random.default_rng(0)
    base = pools[args.baseline_layers]

    def medians(pool_entries):
        return {m: statistics.median(e[side][m] for e in pool_entries) for m, side in METRICS.items()}

    base_medians = medians(base)
    print(f"\nbaseline: {args.baseline_layers}-layer draft; {args.runs} runs per setting; "
          f"{args.trials} simulated CI runs of {args.repeats} repeats per side; default tolerances")
    header = f"{'setting':<16} {'speedup':>8} {'change':>8} {'accept':>7} {'change':>8} {'TPOT ms':>8} " \
             f"{'change':>8} {'flagged':>8}  flagged by metric"
    print(header)
    print("-" * len(header))
    for n in layers:
        flagged, by_metric = 0, {m: 0 for m in METRICS}
        for _ in range(args.trials):
            if n == args.baseline_layers:  # unchanged setting: two disjoint draws from the same runs
                picks = rng.permutation(len(base))
                before = [base[i] for i in picks[:args.repeats]]
                now = [base[i] for i in picks[args.repeats:2 * args.repeats]]
            else:
                before = [base[i] for i in rng.choice(len(base), args.repeats, replace=False)]
                now = [pools[n][i] for i in rng.choice(len(pools[n]), args.repeats, replace=False)]
            verdicts = gate_fails(before, now)
            flagged += any(verdicts.values())
            for metric, failed in verdicts.items():
                by_metric[metric] += failed
        m = medians(pools[n])
        changes = {k: (m[k] / base_medians[k] - 1) for k in METRICS}
        label = f"{n} layers" + (" (same)" if n == args.baseline_layers else "")
        print(f"{label:<16} {m['speedup_output_throughput']:>8.3f} {changes['speedup_output_throughput']:>+8.1%} "
              f"{m['acceptance_rate']:>7.3f} {changes['acceptance_rate']:>+8.1%} {m['median_tpot_ms']:>8.1f} "
              f"{changes['median_tpot_ms']:>+8.1%} {flagged / args.trials:>8.1%}  "
              + ", ".join(f"{k} {v / args.trials:.0%}" for k, v in by_metric.items()))
    print(f"\nserver logs: {work / 'logs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
