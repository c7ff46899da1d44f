"""Dynamic speculation on the CPU build: does vLLM take a k schedule, does throughput hold across its switch,
and which k a fixed-k sweep recommends per concurrency.

On the bundled model with n-gram drafting (`--enforce-eager`), one server at a time:

(a) the reference, then a server whose speculative config carries a dynamic schedule
    (``num_speculative_tokens_per_batch_size``, default ``[[1, 1, 4], [2, 4, 2]]``): whether vLLM's
    CPU build starts with it, and if not the exception lines of its log;
(b) if it does, output throughput at the levels around the switch (`levels_around_switches`:
    concurrency 1, 2, 3) against the reference, drafted tokens per drafted step per level (k, as the
    server ran it), and `check_no_fall_across_switches`;
(c) n-gram at fixed k in {1, 2, 4} at concurrency {1, 4}, and `recommend_k` over them with the
    reference as k=0: the schedule it recommends.

    .venv/bin/python benchmarks/dynamic_k.py [--schedule '[[1,1,4],[2,4,2]]'] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.config.spec import parse_specdec_marker
from pytest_specdec.load.patterns import concurrency_sweep
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.dynamic_k import (
    check_no_fall_across_switches,
    levels_around_switches,
    measurements_from,
    recommend_k,
    switch_points,
)
from pytest_specdec.measure.specdec_test import SpecDecTest
from pytest_specdec.serving.server import ServerStartError

MODEL = "specdec:smollm2-135m"
EAGER = ("--enforce-eager",)


def ngram(k: int, schedule=None) -> dict:
    config = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    if schedule is not None:
        config["num_speculative_tokens_per_batch_size"] = schedule
    return config


def drafted_per_step(result) -> str:
    counters = result.counters
    if not counters.present or not counters.num_drafts:
        return "-"
    return f"{counters.num_draft_tokens / counters.num_drafts:.2f}"


def level_table(sweep) -> list[str]:
    lines = [
        f"  {'concurrency':>11} {'reference tok/s':>16} {'SD tok/s':>9} {'speedup':>8} {'accepted':>9} "
        f"{'drafted/step':>13}"
    ]
    for level, result in zip(sweep.levels, sweep.results):
        lines.append(
            f"  {level:>11} {result.reference_metric('output_throughput'):>16.1f} "
            f"{result.speculative_metric('output_throughput'):>9.1f} {result.speedup():>7.3f}x "
            f"{result.acceptance_rate:>9.1%} {drafted_per_step(result):>13}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", type=json.loads, default=[[1, 1, 4], [2, 4, 2]])
    parser.add_argument("--fixed-k", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--fixed-levels", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--workload", default="code_edit", choices=["code_edit", "random_s"])
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--num-prompts", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args(argv)

    # The marker's own validation: the schedule as a test would declare it.
    top = max(row[2] for row in args.schedule)
    dynamic = parse_specdec_marker(
        (), {"model": MODEL, "speculative_config": ngram(top, args.schedule), "server_args": list(EAGER)}
    )
    levels = levels_around_switches(dynamic.speculative_config)
    print(
        f"schedule {args.schedule}: switches {[s.describe() for s in switch_points(dynamic.speculative_config)]}; "
        f"levels around them {levels}",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="specdec-dynamic-k-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload(args.workload, {"input_len": args.input_len, "output_len": args.output_len})
    # Every reference level first, on one reference server start.
    for pattern in concurrency_sweep(sorted(set(levels) | set(args.fixed_levels)), num_prompts=args.num_prompts):
        measurements.plan_reference(dynamic, workload, pattern)
    report, began = [], time.monotonic()
    try:
        measurements.measure_planned_references(dynamic)
        # (a) does the CPU build start with the schedule?
        try:
            server = pool.get(dynamic)
            accepted, why = True, ""
        except ServerStartError as exc:
            accepted, why = False, str(exc)
        report.append(f"\n(a) {dynamic.label()}")
        if accepted:
            report.append(f"  accepted: the server started (log {server.log_path})")
            # (b) throughput at the levels around the switch, against the reference
            sweep = SpecDecTest(dynamic, measurements, workload).sweep(levels, num_prompts=args.num_prompts)
            check = check_no_fall_across_switches(sweep, dynamic.speculative_config, args.tolerance)
            report.append(f"\n(b) levels around the switch, {args.repeats} repeats (medians):")
            report += level_table(sweep)
            report.append(f"  switch check: {check.describe()}")
            report += ["  " + line for line in check.table().splitlines()]
        else:
            report.append(f"  NOT accepted by vLLM's CPU build:\n{why}")
        print("\n".join(report), flush=True)
        # (c) fixed k at a few concurrencies, and the recommended schedule
        results = []
        for k in args.fixed_k:
            fixed = ServerSpec(MODEL, ngram(k), server_args=EAGER)
            sweep = SpecDecTest(fixed, measurements, workload).sweep(args.fixed_levels, num_prompts=args.num_prompts)
            results += sweep.results
            report.append(f"\n(c) fixed k={k}:")
            report += level_table(sweep)
        recommendation = recommend_k(measurements_from(results))
        report.append(
            f"\n(c) recommend_k over fixed k {args.fixed_k} and the reference (k=0), {args.repeats} repeats per level:"
        )
        report += ["  " + line for line in recommendation.table().splitlines()]
    finally:
        pool.close()
    print(
        f"\n{args.workload} {args.input_len}/{args.output_len}, {args.num_prompts} prompts per level, "
        f"{args.repeats} repeats, --enforce-eager; {sum(pool.starts.values())} server starts, "
        f"{time.monotonic() - began:.0f} s"
    )
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
