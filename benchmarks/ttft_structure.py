"""Where a burst's TTFT comes from: each request's TTFT and the clients' send spread.

At high concurrency on one CPU server every request arrives at once, and
TTFT is mostly the server's scheduling of the burst: the requests that make
its first prefill step get their first token early, the rest wait for one
batched prefill of all of them.  This script shows it for the plugin's
client and `vllm bench serve` (in this process) on the same n-gram server
and prompts, rounds interleaved: per round and client, how far apart the
client sent its requests (first to last POST) and every request's TTFT,
sorted.  `vllm bench serve`'s send times are read by wrapping aiohttp's
request method, an internal of aiohttp: a diagnostic, not a measurement
the plugin relies on.

    .venv/bin/python benchmarks/ttft_structure.py [--concurrency 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.engines.vllm_bench import bench_serve_flags, run_vllm_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agreement import MODEL, NGRAM  # noqa: E402


def record_posts(sent: list[float]) -> None:
    """Append the time of every POST aiohttp sends (how vLLM's client sends) to `sent`."""
    import aiohttp

    request = aiohttp.ClientSession._request

    async def timed(self, method, url, *args, **kwargs):
        if method == "POST":
            sent.append(time.perf_counter())
        return await request(self, method, url, *args, **kwargs)

    aiohttp.ClientSession._request = timed


def line(round_: int, client: str, send_times: list[float], ttfts_ms: list[float]) -> str:
    spread = (max(send_times) - min(send_times)) * 1000
    return (
        f"round {round_ + 1} {client:<16} sent within {spread:5.1f} ms; median TTFT "
        f"{statistics.median(ttfts_ms):6.0f} ms; each: {' '.join(f'{t:.0f}' for t in sorted(ttfts_ms))}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args(argv)
    sent: list[float] = []
    record_posts(sent)
    work = Path(tempfile.mkdtemp(prefix="specdec-ttft-"))
    pool = ServerPool("cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600)
    measurements = Measurements(pool, work)
    workload = resolve_workload("code_edit", {"input_len": args.input_len, "output_len": args.output_len})
    pattern = AccessPattern(
        f"concurrency_{args.concurrency}", max_concurrency=args.concurrency, num_prompts=args.concurrency
    )
    medians: dict[str, list[float]] = {"plugin": [], "vllm bench serve": []}
    try:
        server = pool.get(ServerSpec(MODEL, NGRAM, server_args=("--enforce-eager",)))
        prompts = measurements.prompts(MODEL, workload, pattern, seed=0)
        flags = bench_serve_flags(
            server.url, server.model, pool.model_resolver(MODEL), measurements.prompts_file(prompts), pattern
        )
        # vllm bench serve shares the server's prompt cache between runs: so does the plugin's client here.
        generate_load(server.url, server.model, prompts, pattern, isolate_cache=False)  # warm-up
        for round_ in range(args.rounds):
            load = generate_load(server.url, server.model, prompts, pattern, isolate_cache=False)
            ttfts = [r.ttft * 1000 for r in load.records]
            medians["plugin"].append(statistics.median(ttfts))
            print(line(round_, "plugin", [r.start_time for r in load.records], ttfts), flush=True)
            sent.clear()
            result = run_vllm_bench(
                [
                    *flags,
                    "--disable-tqdm",
                    "--save-detailed",
                    "--save-result",
                    "--result-dir",
                    str(work),
                    "--result-filename",
                    f"r{round_}.json",
                ]
            )
            ttfts = [t * 1000 for t in result["ttfts"]]
            medians["vllm bench serve"].append(statistics.median(ttfts))
            print(line(round_, "vllm bench serve", sent[-len(prompts) :], ttfts), flush=True)
    finally:
        pool.close()
    ours, theirs = (statistics.median(v) for v in medians.values())
    print(
        f"\nmedian over rounds of median TTFT: plugin {ours:.0f} ms, vllm bench serve {theirs:.0f} ms "
        f"(ratio {ours / theirs:.3f}); per round, plugin {[round(v) for v in medians['plugin']]}, "
        f"vllm bench serve {[round(v) for v in medians['vllm bench serve']]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
