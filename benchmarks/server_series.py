"""Server series on real CPU servers: what reading each server's metrics during a run costs the run, and what a
poor draft does to the KV cache against the reference at the same load.

1. Overhead: on one vLLM server, `--pairs` pairs of the same run, one with the series read every
   `--interval` seconds and one without, in alternating order (on, off, off, on, ...), on `--traffic`:
   ``concurrency`` (8 requests of 192 + 32 tokens at concurrency 4) or ``capacity`` (one SLO capacity probe
   of examples/cpu: 16 requests at 2 requests/s, Poisson arrivals).  Printed: each pair's output throughput
   and median TPOT ratio (with / without), their medians, the dispatch lag's p99 on each side, and what one
   read took.  The reads go through the plugin's own `MetricsPage` (one kept client per run); with
   ``--client-per-read`` each read makes a client of its own, as the plugin did before.
2. The poor draft's KV: the reference and SD with an 8-of-30-layer draft (the `examples/cpu` poor draft), each
   on a KV cache of `--kv-cache-bytes` (256 MiB: ~5,600 tokens for the target alone, fewer beside the draft's
   KV) and `--max-model-len 1024`, under `--concurrency` requests of `--input-len` + `--output-len` tokens
   (8 x 608: ~4,900 tokens), measured by the plugin (series on).  Printed: each side's KV cache peak and mean, running and
   waiting peaks, preemptions, the server_load flags; the figure is written to `--figure`.

    .venv/bin/python benchmarks/server_series.py --figure docs/example-server-series.png
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.engines import engine_named
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.analysis.series_figures import series_figures
from pytest_specdec.report.series_report import series_plot
from pytest_specdec.serving.metrics_page import MetricsPage
from pytest_specdec.serving.server_series import SeriesSampler

MODEL = "specdec:smollm2-135m"
EAGER = ("--enforce-eager",)
POOR_DRAFT = {"method": "draft_model", "model": f"{MODEL}@layers=8", "num_speculative_tokens": 3}
TRAFFIC = {
    "concurrency": {"max_concurrency": 4, "num_prompts": 8},
    # One probe of examples/cpu's SLO capacity search: open-loop arrivals, where a late dispatch shows.
    "capacity": {"request_rate": 2.0, "max_concurrency": None, "num_prompts": 16},
}


def overhead(args, work: Path) -> None:
    pool = ServerPool("cpu", work / "logs-overhead", on_event=lambda m: None, startup_timeout=600)
    measurements = Measurements(pool, work / "overhead", repeats=1, on_event=lambda m: None)
    try:
        spec = ServerSpec(MODEL, None, server_args=EAGER)
        server = pool.get(spec)
        workload = resolve_workload("code_edit", {"input_len": 192, "output_len": 32})
        pattern = resolve_pattern("throughput_high", TRAFFIC[args.traffic])
        prompts = measurements.prompts(MODEL, workload, pattern, 0)
        names = engine_named("vllm").series_metrics
        generate_load(server.url, server.model, prompts, pattern)  # warm: not measured
        ratios, tpots, lags, reads = [], [], {True: [], False: []}, []
        for pair in range(args.pairs):
            figures = {}
            for on in (True, False) if pair % 2 == 0 else (False, True):
                page = MetricsPage(server.url, 10.0)
                fetch = server.metrics_text if args.client_per_read else page.text
                sampler = SeriesSampler(fetch, names, args.interval).start() if on else None
                load = generate_load(server.url, server.model, prompts, pattern, seed=pair)
                series = sampler.stop() if sampler else None
                page.close()
                metrics = summarize(load.records, load.duration_s)
                figures[on] = metrics
                lags[on].append(metrics.dispatch_lag.p99)
                if on:
                    reads += series.read_ms
            ratios.append(figures[True].output_throughput / figures[False].output_throughput)
            tpots.append(figures[True].tpot.median / figures[False].tpot.median)
            print(
                f"pair {pair + 1}: output throughput with/without the series {ratios[-1]:.3f}, median TPOT "
                f"{tpots[-1]:.3f}",
                flush=True,
            )
        print(
            f"\nseries every {args.interval:g} s ({'a client per read' if args.client_per_read else 'one kept client'}), "
            f"{args.pairs} pairs on vLLM CPU ({pattern.describe()}): output throughput with/without median "
            f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); median TPOT "
            f"{statistics.median(tpots):.3f} (range {min(tpots):.3f}-{max(tpots):.3f}); dispatch lag p99 with the "
            f"series: median {statistics.median(lags[True]):.2f} ms, worst {max(lags[True]):.2f} ms; without: median "
            f"{statistics.median(lags[False]):.2f} ms, worst {max(lags[False]):.2f} ms; one read (fetch and parse) "
            f"median {statistics.median(reads):.1f} ms, max {max(reads):.1f} ms over {len(reads)} reads",
            flush=True,
        )
    finally:
        pool.close()


def poor_draft_kv(args, work: Path) -> None:
    pool = ServerPool("cpu", work / "logs-kv", on_event=print, startup_timeout=600, kv_cache_bytes=args.kv_cache_bytes)
    measurements = Measurements(pool, work / "kv", repeats=1, on_event=print)
    try:
        # A cache this small holds no 8192-token request: the model length is capped to what the load needs.
        spec = ServerSpec(MODEL, POOR_DRAFT, server_args=EAGER + ("--max-model-len", "1024"))
        workload = resolve_workload("random_s", {"input_len": args.input_len, "output_len": args.output_len})
        pattern = resolve_pattern(
            "throughput_high", {"max_concurrency": args.concurrency, "num_prompts": args.concurrency}
        )
        result = measurements.run(spec, workload, pattern)
        figures = series_figures(result)
        for side in ("reference", "speculative"):
            shown = {k: v for k, v in figures[side].items() if k != "first_run"}
            print(f"{side}: {shown}", flush=True)
        print(f"flags: {figures['flags']}", flush=True)
        row = {"test": "poor draft (8 of 30 layers) against the reference", "server_series": figures}
        if args.figure and series_plot([row], Path(args.figure)):
            print(f"figure: {args.figure}")
    finally:
        pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--kv-cache-bytes", type=int, default=256 * 1024**2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=576)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--figure", help="write the poor draft's series figure here (PNG)")
    parser.add_argument("--traffic", choices=sorted(TRAFFIC), default="concurrency")
    parser.add_argument("--client-per-read", action="store_true", help="a new HTTP client for every read (before)")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-kv", action="store_true", help="measure only the overhead")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specdec-series-"))
    if not args.skip_overhead:
        overhead(args, work)
    if not args.skip_kv:
        poor_draft_kv(args, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
