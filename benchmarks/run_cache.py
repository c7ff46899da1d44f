"""What a run's own prefix cache changes: the same prompts on one vLLM CPU server, isolated against shared.

The plugin gives every timed run a vLLM prefix cache of its own (a fresh ``cache_salt``, load/streaming.py's
`run_cache_scope`), so no run is served from prefixes an earlier run left on the server.  This script sends
the same prompts again and again on one server, one run with a cache of its own ("isolated"), one sharing the
server's cache with the runs before it ("shared", as `vllm bench serve` does and the plugin did), in
alternating order, after one unmeasured shared run that caches the prompts.  Each side of SD is measured on
its own server (the reference, then n-gram with the examples' config), one at a time.  Printed per run: output
throughput, median TTFT and median TPOT; per side, the medians over pairs of isolated / shared.

    .venv/bin/python benchmarks/run_cache.py [--traffic capacity|categories] [--pairs 4]

``capacity`` (the default) is one probe of examples/cpu's capacity search: 16 code edits of 192 + 32 tokens,
Poisson arrivals at 2 requests/s, where the search re-sent the same prompts at every load.  ``categories`` is
examples/cpu's six Spec-Bench kinds of task, one request at a time (6 prompts, 48 output tokens).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern, resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.metrics import summarize

MODEL = "specdec:smollm2-135m"
EAGER = ("--enforce-eager",)
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
CATEGORIES = Path(__file__).resolve().parents[1] / "examples" / "cpu" / "data" / "categories.jsonl"


def figures(run) -> dict[str, float]:
    metrics = summarize(run.records, run.duration_s)
    assert metrics.failed == 0, [r.error for r in run.records if not r.success]
    return {"tok/s": metrics.output_throughput, "TTFT ms": metrics.ttft.median, "TPOT ms": metrics.tpot.median}


def side(pool, measurements, spec: ServerSpec, label: str, args) -> dict[str, float]:
    if args.traffic == "capacity":
        workload = resolve_workload("code_edit", {"input_len": 192, "output_len": 32})
        pattern = AccessPattern("capacity_probe_at_2_per_s", request_rate=2.0, burstiness=1.0, num_prompts=16)
    else:
        workload = resolve_workload("spec_bench", {"path": str(CATEGORIES), "output_len": 48})
        pattern = resolve_pattern("throughput_low", {"num_prompts": 6})
    prompts = measurements.prompts(MODEL, workload, pattern, 0)
    server = pool.get(spec)
    generate_load(server.url, server.model, prompts, pattern, isolate_cache=False)  # caches the prompts, unmeasured
    ratios: dict[str, list[float]] = {}
    for pair in range(args.pairs):
        measured = {}
        for isolated in (True, False) if pair % 2 == 0 else (False, True):
            run = generate_load(server.url, server.model, prompts, pattern, isolate_cache=isolated)
            measured[isolated] = figures(run)
            shown = ", ".join(f"{name} {value:.1f}" for name, value in measured[isolated].items())
            print(f"{label} pair {pair + 1} {'isolated' if isolated else 'shared  '}: {shown}", flush=True)
        for name in measured[True]:
            ratios.setdefault(name, []).append(measured[True][name] / measured[False][name])
    medians = {name: statistics.median(values) for name, values in ratios.items()}
    print(
        f"{label}: isolated / shared, median of {args.pairs} pairs: "
        + ", ".join(
            f"{name} {value:.3f} ({min(ratios[name]):.3f}-{max(ratios[name]):.3f})" for name, value in medians.items()
        ),
        flush=True,
    )
    pool.stop_running()
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--traffic", choices=("capacity", "categories"), default="capacity")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specdec-run-cache-"))
    pool = ServerPool("cpu", work / "logs", on_event=print, startup_timeout=600)
    measurements = Measurements(pool, work / "runs", repeats=1, on_event=print)
    try:
        reference = side(pool, measurements, ServerSpec(MODEL, None, server_args=EAGER), "reference", args)
        ngram = side(pool, measurements, ServerSpec(MODEL, NGRAM, server_args=EAGER), "n-gram", args)
    finally:
        pool.close()
    for name in reference:
        print(
            f"speedup ({name}, SD over the reference) isolated / shared: {ngram[name] / reference[name]:.3f}"
            if name == "tok/s"
            else f"{name}: n-gram's isolated/shared {ngram[name]:.3f} against the reference's {reference[name]:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
