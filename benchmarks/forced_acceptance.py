"""At which acceptance does SD start to pay on this engine and machine?  A sweep of forced acceptance lengths.

llama.cpp's server (forced through ``--spec-synth-len``, xllamacpp 2026.10 and later) with the bundled
SmolLM2-135M and a draft of its first N layers, on random-token prompts of fixed length (no natural stops:
under forced acceptance the outputs are not the target's, so both sides must decode the same amount).  The
reference is measured once; each forced length is one server start (it is a server setting) with
``--repeats`` draws.  Printed per length: the speedup (median, and the range over repeats), the mean
acceptance length the server measured beside the forced one (honoured within the plugin's band, or not), and
then the break-even length, where the speedup crosses 1 between two measured lengths, and the per-step cost
fitted through all of them: with a fixed cost C per drafting step (in reference decode steps), a step yields
L tokens and the speedup is L / C, so C is the least-squares slope's inverse and the break-even length is C.

    .venv/bin/python benchmarks/forced_acceptance.py [--lengths 1 1.5 2 2.5 3 4 5] [--k 4] [--draft-layers 8] \
        [--repeats 2] [--num-prompts 4] [--output-len 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.analysis.forced_sweep import crossing, fitted_step_cost
from pytest_specdec.engines.forced_acceptance import forced_acceptance
from pytest_specdec.verdict.assertions import forced_range
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload

MODEL = "specdec:smollm2-135m"


def config(k: int, draft_layers: int, length: float) -> dict:
    return {
        "method": "draft_model",
        "model": f"{MODEL}@layers={draft_layers}",
        "num_speculative_tokens": k,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": length,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args(argv)
    for length in args.lengths:  # refused as the marker would refuse them, before anything starts
        forced_acceptance(config(args.k, args.draft_layers, length))

    work = Path(tempfile.mkdtemp(prefix="specdec-forced-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("random_s", {"input_len": args.input_len, "output_len": args.output_len})
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    rows, points = [], []
    try:
        for length in sorted(args.lengths):
            spec = ServerSpec(MODEL, config(args.k, args.draft_layers, length), engine="llamacpp")
            result = measurements.run(spec, workload, pattern)
            forced = result.forced
            speedups = [
                sd.metrics.output_throughput / ref.metrics.output_throughput for ref, sd in result.repeat_pairs()
            ]
            steps = result.counters.num_drafts
            low, high = forced_range(result, forced)  # what the plugin's own check allows
            measured = result.acceptance_length
            honoured = "honoured" if low <= measured <= high else "NOT honoured"
            median = statistics.median(speedups)
            points.append((length, median))
            rows.append(
                f"  {length:>6.2f}  {median:>7.3f}x  {min(speedups):.3f}-{max(speedups):.3f}  "
                f"{measured:>8.2f}  {steps:>6.0f}  {honoured} ({low:.2f}-{high:.2f})"
            )
    finally:
        pool.close()
    print(
        f"\nllama.cpp, {MODEL} with a {args.draft_layers}-layer draft, k={args.k}, random_s "
        f"{args.input_len}/{args.output_len}, {args.num_prompts} prompts one at a time, {args.repeats} draws a length"
    )
    print(f"  {'forced':>6}  {'speedup':>8}  {'range':>11}  {'measured':>8}  {'steps':>6}  acceptance length")
    print("\n".join(rows))
    even = crossing(points)  # where the speedup, rising with the length, first reaches 1
    cost = fitted_step_cost(points)
    print(f"\nbreak-even length: {even:.2f} (interpolated)" if even is not None else "\nbreak-even length: not crossed")
    print(
        f"per-step cost fitted through every length: {cost:.2f} reference decode steps (speedup = L / {cost:.2f}; "
        f"break-even where L = {cost:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
