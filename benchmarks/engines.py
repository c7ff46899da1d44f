"""vLLM's CPU build and llama.cpp side by side: the same prompts, arrivals and speculative configs.

One session per engine (vLLM first, then llama.cpp; one server at a time):
the reference without SD, then n-gram lookup (k=4, one n-gram length of 3,
the setting both engines can express) on code edits, and the 8-layer
truncated draft (k=3) on random tokens.  Acceptance comes from each engine's
own counters (``vllm:spec_decode_*``, ``llamacpp:spec_decode_*``).  Printed:
one row per engine and config with the speedup (output tok/s, median over
repeats), acceptance rate and length, median TTFT and TPOT of both sides,
and the share of identical answers.

    .venv/bin/python benchmarks/engines.py [--num-prompts 4] [--repeats 2] [--engines vllm llamacpp]

vLLM serves the bundled model's weights in float32, llama.cpp the Q4_1 GGUF
they were converted from: the same model, not the same numerics or cost per
token, which is the point of comparing engines.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}
POOR_DRAFT = {"method": "draft_model", "model": f"{MODEL}@layers=8", "num_speculative_tokens": 3}
CASES = (("ngram k=4 n=3", NGRAM, "code_edit", 64), ("draft @layers=8 k=3", POOR_DRAFT, "random_s", 32))
SERVER_ARGS = {"vllm": ("--enforce-eager",), "llamacpp": ()}


def median_of(runs, metric: str) -> float:
    return statistics.median(run.metrics.as_dict()[metric] for run in runs)


def one_engine(engine: str, args, work: Path) -> list[dict]:
    pool = ServerPool("cpu", work / engine, on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(
        pool, work / engine, repeats=args.repeats, on_event=lambda m: print(f"  {m}", flush=True)
    )
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    rows = []
    try:
        for name, config, workload_name, output_len in CASES:
            workload = resolve_workload(workload_name, {"input_len": 192, "output_len": output_len})
            spec = dataclasses.replace(ServerSpec(MODEL, config, server_args=SERVER_ARGS[engine]), engine=engine)
            result = measurements.run(spec, workload, pattern)
            rows.append(
                {
                    "engine": engine,
                    "config": name,
                    "workload": workload_name,
                    "speedup": result.speedup(),
                    "acceptance": result.acceptance_rate,
                    "length": result.acceptance_length,
                    "same": result.match_rate,
                    "ttft": (
                        median_of(result.reference_runs, "median_ttft_ms"),
                        median_of(result.speculative_runs, "median_ttft_ms"),
                    ),
                    "tpot": (
                        median_of(result.reference_runs, "median_tpot_ms"),
                        median_of(result.speculative_runs, "median_tpot_ms"),
                    ),
                }
            )
    finally:
        pool.close()
    return rows


def table(rows: list[dict]) -> list[str]:
    head = (
        f"{'engine':<9} {'config':<20} {'workload':<10} {'speedup':>7} {'accepted':>8} {'length':>6} "
        f"{'TTFT ms ref/SD':>15} {'TPOT ms ref/SD':>15} {'same':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['engine']:<9} {r['config']:<20} {r['workload']:<10} {r['speedup']:>6.2f}x "
            f"{r['acceptance']:>8.1%} {r['length']:>6.2f} {r['ttft'][0]:>7.0f}/{r['ttft'][1]:<7.0f} "
            f"{r['tpot'][0]:>7.1f}/{r['tpot'][1]:<7.1f} {r['same']:>5.0%}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=["vllm", "llamacpp"], choices=sorted(SERVER_ARGS))
    args = parser.parse_args(argv)
    began = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="specdec-engines-") as work:
        for engine in args.engines:
            print(f"\n{engine}", flush=True)
            rows += one_engine(engine, args, Path(work))
    print(
        f"\n{args.num_prompts} prompts at concurrency 1, input 192 tokens, {args.repeats} repeats "
        f"(medians over repeats), {time.monotonic() - began:.0f} s:"
    )
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
