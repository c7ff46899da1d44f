"""Does one run at k predict the best draft length?  Measured against runs at every k on the CPU build.

For each model-free method (n-gram, suffix decoding) this measures, on the
bundled model and a scaled-down `code_edit`, the reference once and SD at
k = 1..K (one server each, one at a time), then predicts every k' <= K from
the k = K run alone (`analysis/acceptance.py`: accepted spans cut at k', the
step's cost over a plain step taken as per-token, since one k cannot split it)
and again with the step cost fitted from the k = K and k = 2 runs
(`analysis/step_cost.py`: a fixed and a per-token part), and prints, per
method, k / predicted / measured, whether the prediction ranks the measured
k's correctly, and whether the k it recommends is within 5% of the measured
best.

It also prints, for the k = K run, the per-request figures from the server's
per-step arrays beside the chunk estimate (the tokens of each streamed
event), and the oracle bound beside measured and Leviathan-expected.

    .venv/bin/python benchmarks/best_k.py [--max-k 5] [--num-prompts 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.acceptance import request_length_distribution
from pytest_specdec.analysis.inside_acceptance import request_steps
from pytest_specdec.analysis.theory import theory_for

MODEL = "specdec:smollm2-135m"
EAGER = ("--enforce-eager",)
METHODS = {
    "ngram": lambda k: {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "suffix": lambda k: {"method": "suffix", "num_speculative_tokens": k},
}
NEAR_BEST = 0.05


def kendall_concordant(predicted: dict[int, float], measured: dict[int, float]) -> tuple[int, int]:
    """(pairs of k the prediction orders as the measurement does, pairs compared)."""
    ks = sorted(measured)
    pairs = [(a, b) for i, a in enumerate(ks) for b in ks[i + 1 :]]
    same = sum((predicted[a] - predicted[b]) * (measured[a] - measured[b]) > 0 for a, b in pairs)
    return same, len(pairs)


def estimate_table(result) -> list[str]:
    """Per-request acceptance length from the server's arrays and from the chunk estimate, side by side."""
    k = result.spec.speculative_config["num_speculative_tokens"]
    server, estimate = [], []
    for run in result.speculative_runs:
        for record in run.records:
            ours, guess = request_steps(record, k)
            if ours is not None and guess is not None:
                server.append(ours)
                estimate.append(guess)
    if not server:
        return ["  (no request had both the server's arrays and streamed token ids)"]
    lines = [f"  {'per-request acceptance length':<32} {'p5':>6} {'p25':>6} {'p50':>6} {'p75':>6} {'p95':>6}"]
    for name, steps in (("server's per-step arrays", server), ("estimate from streamed chunks", estimate)):
        p, _ = request_length_distribution(steps)
        lines.append(f"  {name:<32} {p.p5:>6.2f} {p.p25:>6.2f} {p.p50:>6.2f} {p.p75:>6.2f} {p.p95:>6.2f}")
    check = result.analysis().estimate_check or {}
    lines.append(
        f"  median |difference| per request {check.get('acceptance_length_difference_p50', float('nan')):.3f}; "
        f"steps whose accepted count agrees (median over requests) "
        f"{check.get('step_agreement_p50', float('nan')):.0%}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-k", type=int, default=5)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="specdec-best-k-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    report = []
    try:
        for method in args.methods:
            results = {}
            # The k = K run goes first: it is the one the predictions come from.
            for k in range(args.max_k, 0, -1):
                spec = ServerSpec(MODEL, METHODS[method](k), server_args=EAGER)
                results[k] = measurements.run(spec, workload, pattern)
            source = results[args.max_k]
            analysis = source.analysis()
            measured = {k: results[k].speedup() for k in sorted(results)}
            predicted = {k: analysis.predictions[k] for k in sorted(results)}
            two_k = None
            if 2 in results and args.max_k > 2:
                fitted = source.fit_step_cost_with(results[2]).analysis()
                two_k = {k: fitted.predictions[k] for k in sorted(results)}
                two_k_cost = fitted.step_cost
                source.fit_step_cost_with()  # the rest of the report is the k = K run's own
            best_measured = max(measured, key=measured.get)
            chosen = analysis.best_k
            same, pairs = kendall_concordant(predicted, measured)
            theory = theory_for(source.acceptance_length, args.max_k, source.cost_ratio, source.speedup())
            report.append(f"\n{method}, predicted from the k={args.max_k} run ({analysis.source} per-step data):")
            report.append(f"  {'k':>3} {'predicted':>10} {'measured':>10} {'with k=2':>10}")
            report += [
                f"  {k:>3} {predicted[k]:>9.3f}x {measured[k]:>9.3f}x "
                + (f"{two_k[k]:>9.3f}x" if two_k else f"{'-':>10}")
                for k in sorted(results)
            ]
            report.append(f"  step cost: {analysis.step_cost}")
            if two_k:
                report.append(f"  with k=2: {two_k_cost}")
            verdict = (
                "ranks every k as measured" if same == pairs else f"orders {same} of {pairs} pairs of k as measured"
            )
            gap = measured[chosen] / measured[best_measured] - 1 if chosen else float("nan")
            report.append(
                f"  prediction {verdict}; recommends k={chosen} (measured {measured.get(chosen, 0):.3f}x), "
                f"measured best k={best_measured} ({measured[best_measured]:.3f}x): "
                f"{'within' if gap >= -NEAR_BEST else 'NOT within'} {NEAR_BEST:.0%} ({gap:+.1%})"
            )
            expected = theory.expected_speedup if theory else float("nan")
            report.append(
                f"  at k={args.max_k}: measured {source.speedup():.3f}x, Leviathan-expected "
                f"{expected:.3f}x, oracle {analysis.oracle_speedup:.3f}x "
                f"(gap oracle / measured {analysis.oracle_speedup / source.speedup():.2f})"
            )
            report += estimate_table(source)
            p = analysis.request_lengths
            report.append(
                f"  per-request acceptance length p5/p25/p50/p75/p95: {p.p5:.2f} / {p.p25:.2f} / "
                f"{p.p50:.2f} / {p.p75:.2f} / {p.p95:.2f}, spread (std) {p.std:.2f}, "
                f"{p.count} requests; by output tenth: "
                + ", ".join(
                    f"{label}: " + " ".join(f"{v:.2f}" for v in values)
                    for label, values in analysis.by_position.items()
                )
            )
            rates = ", ".join(f"{v:.2f}" for v in analysis.per_position)
            counters = ", ".join(f"{v:.2f}" for v in source.per_position_acceptance)
            report.append(f"  per-position rates, per-step data: {rates}; Prometheus counters: {counters}")
            print("\n".join(report[-(14 + args.max_k) :]), flush=True)
    finally:
        pool.close()
    print(
        f"\ncode_edit {args.input_len}/{args.output_len}, {args.num_prompts} prompts at concurrency 1, "
        f"{args.repeats} repeats per k (speedups: median over repeats), --enforce-eager"
    )
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
