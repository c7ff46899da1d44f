"""Does the reference move during a session?  The first reference run against the same traffic at the end.

A session as the CPU examples run one: the reference server starts and is
warmed until steady, its runs are measured, then SD servers (n-gram, then
suffix decoding) start one at a time and are measured; at the end the
reference is started again, warmed, and the first traffic measured once more
(`Measurements.check_drift`, what ``--specdec-drift-check on`` does).  Printed:
each server's warm-up rounds, the first and closing reference figures and
their ratio, and the fairness flags of each SD result (engine confounds).

    .venv/bin/python benchmarks/drift.py [--num-prompts 6] [--repeats 2] [--rounds 2]

``--rounds N`` repeats the whole session N times (fresh servers each time), so the
ratio's own spread is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload

MODEL = "specdec:smollm2-135m"
EAGER = ("--enforce-eager",)
SD = (
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    {"method": "suffix", "num_speculative_tokens": 4},
)


def one_session(args, work: Path) -> list:
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.repeats, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    try:
        for config in SD:
            result = measurements.run(ServerSpec(MODEL, config, server_args=EAGER), workload, pattern)
            print(
                f"  {config['method']}: speedup {result.speedup():.3f}x, TTFT speedup "
                f"{result.speedup('median_ttft_ms'):.3f}x; fairness flags: "
                + ("; ".join(f.describe() for f in result.fairness_flags()) or "none"),
                flush=True,
            )
        return measurements.check_drift()
    finally:
        pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=6)
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    checks = []
    for index in range(args.rounds):
        print(f"\nsession {index + 1} of {args.rounds}", flush=True)
        checks += one_session(args, Path(tempfile.mkdtemp(prefix="specdec-drift-")))
    print(
        f"\ncode_edit {args.input_len}/{args.output_len}, {args.num_prompts} prompts at concurrency 1, "
        f"{args.repeats} repeats, --enforce-eager; closing reference / first reference:"
    )
    for check in checks:
        print(f"  {check.describe()}")
    for figure in ("output_throughput", "median_tpot_ms"):
        ratios = [1 + c.change[figure] for c in checks]
        print(
            f"  {figure}: ratio closing / first, per session: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + (f"; median {statistics.median(ratios):.3f}" if ratios else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
