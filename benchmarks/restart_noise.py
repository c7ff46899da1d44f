"""How much does a metric move between server restarts, compared with between runs on one server?

A CI run starts fresh servers, so the gate compares a baseline measured on
one pair of server instances with a run on another pair.  `gate_calibration.py`
draws its runs from one server session and cannot see that restart-to-restart
variation; this script measures it.  It restarts the reference and one SD
setting `--restarts` times (one at a time, as the plugin does), measures
`--runs` runs on each start, and prints, per metric, the spread within a start
and the spread of the per-start medians across starts.

    .venv/bin/python benchmarks/restart_noise.py [--restarts 5] [--runs 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.patterns import resolve_pattern
from pytest_specdec.workloads import resolve_workload

MODEL = "specdec:smollm2-135m"
SETTINGS = {
    "draft24": {"method": "draft_model", "model": f"{MODEL}@layers=24", "num_speculative_tokens": 3},
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
}


def spread(values: list[float]) -> float:
    """max/min - 1: the widest gap a gate comparing two of these could see."""
    return max(values) / min(values) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2, help="measured runs per server start")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="draft24")
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--output-len", type=int, default=32)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="specdec-restart-noise-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True),
                      startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.runs, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("code_edit", {"input_len": 128, "output_len": args.output_len})
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    prompts = measurements.prompts(MODEL, workload, pattern, seed=0)
    reference = ServerSpec(MODEL, server_args=("--enforce-eager",))
    speculative = ServerSpec(MODEL, SETTINGS[args.setting], server_args=("--enforce-eager",))

    per_start = []  # one dict per restart: metric -> list of per-run values
    try:
        for restart in range(args.restarts):
            ref_runs = measurements.measure(reference, workload, pattern, prompts, what=f"reference start {restart + 1}")
            pool.stop_running()
            sd_runs = measurements.measure(speculative, workload, pattern, prompts, what=f"SD start {restart + 1}")
            pool.stop_running()
            per_start.append({
                "reference output tok/s": [r.metrics.output_throughput for r in ref_runs],
                "SD output tok/s": [r.metrics.output_throughput for r in sd_runs],
                "SD median TPOT ms": [r.metrics.tpot.median for r in sd_runs],
                "speedup (output tok/s)": [s.metrics.output_throughput / r.metrics.output_throughput
                                           for r, s in zip(ref_runs, sd_runs)],
            })
    finally:
        pool.close()

    print(f"\n{args.setting}: {args.restarts} restarts x {args.runs} runs, code_edit "
          f"{args.num_prompts} prompts x {args.output_len} tokens, --enforce-eager")
    header = f"{'metric':<24} {'median':>8} {'within a start':>15} {'across starts':>14}  per-start medians"
    print(header)
    print("-" * len(header))
    for metric in per_start[0]:
        medians = [statistics.median(s[metric]) for s in per_start]
        within = max(spread(s[metric]) for s in per_start)
        print(f"{metric:<24} {statistics.median(medians):>8.3f} {within:>14.1%} {spread(medians):>14.1%}  "
              + " ".join(f"{m:.3f}" for m in medians))
    print("\n'within a start': the largest max/min-1 among one start's runs; "
          "'across starts': max/min-1 of the per-start medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
