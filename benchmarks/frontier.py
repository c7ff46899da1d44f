"""The throughput-interactivity frontier of the reference and an SD configuration on real CPU servers.

Both sides swept over closed-loop concurrency levels with ``--draws`` draws of the workload each (the same prompts
on both sides, draw by draw), then read as operators read them (analysis.frontier): tok/s per user (1000 / the
run's median TPOT) against tok/s per server, each side's Pareto points, and at a per-user speed (``--per-user``,
or the middle of the speeds both frontiers run at) each side's throughput, the ratio with each draw's, the interval
the sequential rule reads from them and its decision that SD pays there at least as much as the reference, and
cost per 1M output tokens at ``--usd-per-hour``.  Writes the figure with ``--plot PATH``.

    .venv/bin/python benchmarks/frontier.py [--engine vllm|llamacpp] [--levels 1 4 8 16] [--num-prompts 16] \
        [--draws 2] [--workload code_edit] [--input-len 192] [--output-len 32] [--per-user 20] [--plot f.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import concurrency_sweep
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.measure.sweep import SweepResult
from pytest_specdec.report.frontier_report import frontier_plot

MODEL = "specdec:smollm2-135m"
CONFIGS = {
    "vllm": (
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
        ["--enforce-eager"],
    ),
    "llamacpp": ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}, []),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(CONFIGS), default="vllm")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--draws", type=int, default=2)
    parser.add_argument("--workload", default="code_edit")
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--per-user", type=float, default=None)
    parser.add_argument("--usd-per-hour", type=float, default=0.10)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.num_prompts < max(args.levels):
        parser.error(f"--num-prompts {args.num_prompts} never reaches concurrency {max(args.levels)}")
    config, server_args = CONFIGS[args.engine]
    spec = ServerSpec(MODEL, config, server_args=server_args, engine=args.engine)
    workload = resolve_workload(args.workload, {"input_len": args.input_len, "output_len": args.output_len})
    patterns = concurrency_sweep(args.levels, num_prompts=args.num_prompts)

    work = Path(tempfile.mkdtemp(prefix="specdec-frontier-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.draws, on_event=lambda m: print(f"  {m}", flush=True))
    try:
        for pattern in patterns:  # every reference level on one reference server, then SD's
            prompts = measurements.prompts(MODEL, workload, pattern, 0)
            measurements.reference(spec, workload, pattern, prompts)
        sweep = SweepResult([measurements.run(spec, workload, pattern) for pattern in patterns])
    finally:
        pool.close()
    sweep.attach_report()
    reference, speculative = sweep.frontiers()
    shared = (
        max(min(p.per_user for p in side.frontier()) for side in (reference, speculative)),
        min(max(p.per_user for p in side.frontier()) for side in (reference, speculative)),
    )
    target = args.per_user if args.per_user is not None else sum(shared) / 2
    worth = sweep.worth_at(target, usd_per_gpu_hour=args.usd_per_hour)
    print(
        f"\n{args.engine}, {MODEL}, {spec.label()}, {args.workload} {args.input_len}/{args.output_len}, "
        f"{args.num_prompts} prompts a level, {args.draws} draws a side; per-user speeds both frontiers run at: "
        f"{shared[0]:.1f}-{shared[1]:.1f} tok/s"
    )
    print(sweep.frontier_table(target, args.usd_per_hour))
    decision = worth.decide_at_least(1.0)
    low, high = decision.ratio_interval
    print(f"SD at least the reference's tok/s per server at {target:.3g} tok/s per user: {decision.describe()}")
    print(
        f"ratio {worth.ratio if worth.ratio is None else round(worth.ratio, 3)}, interval the rule read {low:.3f}-{high:.3f}"
    )
    if args.plot is not None:
        rows = [
            {
                "test": "benchmarks/frontier.py",
                "config": spec.label(),
                "workload": args.workload,
                "frontier": sweep.report.as_dict(),
            }
        ]
        print(f"figure: {frontier_plot(rows, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
