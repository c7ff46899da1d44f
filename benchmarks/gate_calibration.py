"""How often does the regression gate cry wolf, and which drops does it catch, with restarts included?

Measured on vLLM's CPU build with the bundled model.  A CI run compares a
baseline recorded on one pair of server instances with a run on another
pair, so this script starts the reference and the SD server `--starts`
times each (one at a time, as the plugin does) and measures `--runs` runs on
every start, run r of every start sending the prompts of repeat seed r.

Then it simulates CI runs: a baseline from one reference start and one SD
start, the "current" run from two *other* starts, each side `n` repeats
(the same repeat seeds on both, so the gate pairs them, as it does in the
plugin), and asks the gate's own rule (`stats.compare_samples`) whether the
speedup or the acceptance rate regressed: unchanged (false alarms), and with
a drop of 5%, 10% and 25% applied to the current side (detection).  It does
so with the default tolerances and, to show the trade-off, with tighter ones.

    .venv/bin/python benchmarks/gate_calibration.py [--starts 4] [--runs 5] [--output-len 32]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.verdict.stats import compare_samples
from pytest_specdec.verdict.tolerances import default_tolerance

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
DROPS = (0.0, 0.05, 0.10, 0.25)
METRICS = ("speedup_output_throughput", "acceptance_rate")


def measure(args) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """Per start: reference output tok/s per run, SD output tok/s per run, SD acceptance rate per run."""
    work = Path(tempfile.mkdtemp(prefix="specdec-gate-calibration-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work, repeats=args.runs, on_event=lambda m: print(f"  {m}", flush=True))
    workload = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    pattern = resolve_pattern("throughput_low", {"num_prompts": args.num_prompts})
    prompts = measurements.prompts(MODEL, workload, pattern, seed=0)
    reference = ServerSpec(MODEL, server_args=("--enforce-eager",))
    speculative = ServerSpec(MODEL, NGRAM, server_args=("--enforce-eager",))
    ref, sd, acceptance = [], [], []
    try:
        for start in range(args.starts):
            for spec, what in ((reference, "reference"), (speculative, "SD")):
                runs = measurements.measure(spec, workload, pattern, prompts, what=f"{what} start {start + 1}")
                pool.stop_running()  # the next measurement of this side is on a fresh server instance
                if spec is reference:
                    ref.append([run.metrics.output_throughput for run in runs])
                else:
                    sd.append([run.metrics.output_throughput for run in runs])
                    acceptance.append([run.counters.acceptance_rate for run in runs])
    finally:
        pool.close()
    return ref, sd, acceptance


def flagged_share(
    values: dict[str, list[list[float]]], metric: str, repeats: int, drop: float, tolerance: float
) -> tuple[float, int]:
    """Share of simulated CI runs the gate flags, and how many were simulated."""
    starts = len(values["ref"])
    runs = len(values["ref"][0])
    flags = []
    for base_ref, base_sd, cur_ref, cur_sd in itertools.product(range(starts), repeat=4):
        if cur_ref == base_ref or cur_sd == base_sd:
            continue  # a CI run starts its own servers: never the baseline's instances
        for picks in itertools.combinations(range(runs), repeats):
            if metric == "acceptance_rate":
                before = [values["acc"][base_sd][r] for r in picks]
                now = [values["acc"][cur_sd][r] * (1 - drop) for r in picks]
            else:
                before = [values["sd"][base_sd][r] / values["ref"][base_ref][r] for r in picks]
                now = [values["sd"][cur_sd][r] * (1 - drop) / values["ref"][cur_ref][r] for r in picks]
            verdict = compare_samples(metric, before, now, tolerance=tolerance, paired=True, resamples=500)
            flags.append(verdict.regression)
    return float(np.mean(flags)), len(flags)


def noise_table(ref, sd, acceptance) -> list[str]:
    rows = {
        "reference output tok/s": ref,
        "SD output tok/s": sd,
        "speedup": [[s / r for s, r in zip(sd_start, ref_start)] for sd_start, ref_start in zip(sd, ref)],
        "acceptance rate": acceptance,
    }
    lines = [f"{'metric':<24} {'median':>8} {'within a start':>15} {'across starts':>14}  per-start medians", "-" * 90]
    for name, per_start in rows.items():
        medians = [statistics.median(v) for v in per_start]
        within = statistics.median(statistics.pstdev(v) / statistics.mean(v) for v in per_start)
        across = statistics.pstdev(medians) / statistics.mean(medians)
        lines.append(
            f"{name:<24} {statistics.median(medians):>8.3f} {within:>14.1%} {across:>14.1%}  "
            + " ".join(f"{m:.3f}" for m in medians)
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=4, help="server starts per side (at least 3)")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per start (at least the largest n)")
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, nargs="+", default=[1, 3, 5], help="repeats per side a CI run uses")
    parser.add_argument(
        "--tolerances",
        type=float,
        nargs="+",
        default=[0.25, 0.20, 0.10, 0.05],
        help="tolerances to simulate besides each metric's default",
    )
    parser.add_argument("--save", type=Path, help="write the measured values to this JSON file")
    parser.add_argument("--load", type=Path, help="simulate from values saved earlier instead of measuring")
    args = parser.parse_args(argv)
    if args.starts < 3 or args.runs < max(args.repeats):
        parser.error("need --starts >= 3 and --runs >= the largest --repeats")

    if args.load:
        values = json.loads(args.load.read_text())
        ref, sd, acceptance = values["ref"], values["sd"], values["acc"]
        args.starts, args.runs = len(ref), len(ref[0])
    else:
        ref, sd, acceptance = measure(args)
        values = {"ref": ref, "sd": sd, "acc": acceptance}
    if args.save:
        args.save.write_text(json.dumps(values, indent=1) + "\n")
    print(
        f"\nn-gram k=4 on code_edit {args.input_len}/{args.output_len}, {args.num_prompts} prompts at "
        f"concurrency 1, --enforce-eager; {args.starts} starts x {args.runs} runs per side"
    )
    print("\n".join(noise_table(ref, sd, acceptance)))
    header = (
        f"\n{'repeats':>7}  {'metric':<26} {'tolerance':>13}  {'false alarms':>12}  "
        + "  ".join(f"{f'{d:.0%} drop':>9}" for d in DROPS[1:])
        + "  simulated CI runs"
    )
    print(header)
    print("-" * (len(header) - 1))
    for repeats in args.repeats:
        for metric in METRICS:
            default = default_tolerance(metric)
            for tolerance in sorted({default, *args.tolerances}, reverse=True):
                shares = [flagged_share(values, metric, repeats, drop, tolerance) for drop in DROPS]
                label = f"{tolerance:.0%}" + (" (default)" if tolerance == default else "")
                print(
                    f"{repeats:>7}  {metric:<26} {label:>13}  {shares[0][0]:>12.1%}  "
                    + "  ".join(f"{share:>9.1%}" for share, _ in shares[1:])
                    + f"  {shares[0][1]:>17}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
