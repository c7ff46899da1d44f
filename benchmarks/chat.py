"""Chat completions and natural stops beside raw completions: acceptance and speedup of the same prompts.

One session per engine on real CPU servers.  Each SD configuration is measured on four traffics built from
the same code-edit prompts: raw completions (`/v1/completions`) run to max_tokens, raw completions with
natural stops, chat completions (`/v1/chat/completions`, the prompt as the user's message in the model's
chat template) to max_tokens, and chat with natural stops.  The reference measures all four first, on one
start.  Suffix decoding remembers every answer its server gave (its global tree), so each of its traffics
runs on a fresh server: otherwise the second traffic would find the first one's answers to the same
prompts.  Printed: one line per traffic (speedup, acceptance, each side's output tokens per request, the
prompt tokens the server counted: the template's share shows there), then the table.

    .venv/bin/python benchmarks/chat.py --engine llamacpp
    .venv/bin/python benchmarks/chat.py --engine vllm
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from pytest_specdec import Measurements, ServerPool
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling import CONFIGS, spec_for  # noqa: E402 - the sampling benchmark's configurations

REMEMBERS = {"suffix"}  # methods whose server keeps earlier answers: a fresh server per traffic


def mean_of(runs, field: str) -> float:
    return statistics.fmean(getattr(r, field) for run in runs for r in run.records if r.success)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(CONFIGS), default="llamacpp")
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specdec-chat-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: None, startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: None)
    base = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    traffics = [
        replace(base, endpoint=endpoint, ignore_eos=stop == "length")
        for endpoint in ("completions", "chat")
        for stop in ("length", "natural")
    ]
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    rows = []
    try:
        for workload in traffics:  # the reference measures every traffic on its first start
            measurements.plan_reference(spec_for(args.engine, CONFIGS[args.engine][0][1]), workload, pattern)
        for name, config in CONFIGS[args.engine]:
            spec = spec_for(args.engine, config)
            for workload in traffics:
                if name in REMEMBERS:
                    pool.stop_running()
                result = measurements.run(spec, workload, pattern)
                row = (
                    name,
                    workload.endpoint,
                    workload.stop,
                    result.speedup(),
                    result.acceptance_rate,
                    mean_of(result.reference_runs, "output_tokens"),
                    mean_of(result.speculative_runs, "output_tokens"),
                    mean_of(result.reference_runs, "prompt_len"),
                )
                rows.append(row)
                print(
                    f"{name} {workload.endpoint}, stop {workload.stop}: speedup {row[3]:.3f}x, acceptance "
                    f"{row[4]:.1%}, output tokens per request {row[5]:.1f} (reference) / {row[6]:.1f} (SD), "
                    f"prompt tokens {row[7]:.1f}",
                    flush=True,
                )
    finally:
        pool.close()
    print(
        f"\n{args.engine}, code_edit {args.input_len}/{args.output_len}, {args.num_prompts} prompts one at a time, "
        f"{args.repeats} repeats:\n"
    )
    print("| config | endpoint | stop | speedup | acceptance | output tokens (reference / SD) | prompt tokens |")
    print("|---|---|---|---|---|---|---|")
    for name, endpoint, stop, speedup, rate, ref_len, sd_len, prompt_len in rows:
        print(
            f"| {name} | {endpoint} | {stop} | {speedup:.3f}x | {rate:.1%} | {ref_len:.1f} / {sd_len:.1f} | "
            f"{prompt_len:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
