"""Do the plugin's numbers agree with `vllm bench serve` on the same server and traffic?

One vLLM CPU server (the bundled model with n-gram SD), the same prompts for
every client (the plugin's code_edit prompts, handed to `vllm bench serve` as
its custom dataset, in order), at each concurrency: rounds interleaved
(plugin, vllm bench serve, plugin, ...) so drift cancels.  Prints, per metric
and concurrency, the medians over rounds and the ratio plugin / peer.

`vllm bench serve` runs in this process (`vllm.benchmarks.serve`, with the
flags the reproduce commands give it), so both clients share one process and
its share of the 2 cores; a `vllm bench serve` process of its own measured
TTFT 3-4% higher at concurrency 1, where a request-by-request interleaving
of the two request functions in one process agreed within 1%.  GuideLLM and AIPerf run when their
executables are given (each installed in a virtual environment of its own,
see `agreement_peers.py` for how they are driven and how their definitions
differ); a peer that cannot be found is skipped, and the script says so.

How the two define the figures (vllm/benchmarks/serve.py, calculate_metrics
and benchmark): both time a request from just before the POST; TTFT to the
first event with choices; ITL per streamed event; TPOT (latency - TTFT) /
(output tokens - 1); throughput over the run's duration.  vLLM's duration
starts after its own one-request test run and ends with the last reply; the
plugin's starts at the schedule's offset 0 and ends with the last reply.
Both take the SD counters from /metrics before and after.

    .venv/bin/python benchmarks/agreement.py [--concurrency 1 4 16] [--rounds 4] \
        [--guidellm PATH/bin/guidellm] [--aiperf PATH/bin/aiperf]

``--url URL`` measures a server that is already running (it must serve the
bundled model under its spec name; SD counter rows appear only when it
exposes them) instead of starting one; ``--json FILE`` writes every round's
figures.  The suite's agreement test runs it that way against its reference
server, so that test, too, compares the two clients from one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.atomic import write_atomic
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.serving.endpoint import ExternalServer
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.engines.counters import parse_prometheus
from pytest_specdec.engines.vllm_bench import bench_serve_flags, run_vllm_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agreement_peers import DEFINITIONS, PEERS, PeerError  # noqa: E402

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
METRICS = (
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
)


# The server's own account of a run, from vLLM's /metrics: histograms (sum and count) of the requests it
# served, and its token counters.  A client's figure over the server's for the same run is that client's
# clock against the server's; two clients' such ratios compare their clocks with the server's speed taken
# out, where the server decodes a few percent faster or slower from one run to the next (and under one
# client's CPU load than under the other's, on 2 cores) whichever client is attached.
SERVER_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
}
SERVER_COUNTERS = {"prompt_tokens": "vllm:prompt_tokens_total", "generation_tokens": "vllm:generation_tokens_total"}


def server_totals(server) -> dict[str, float]:
    """Every histogram's sum and count and every token counter, for the server's own model, now."""
    wanted = {f"{name}_sum" for name in SERVER_HISTOGRAMS.values()}
    wanted |= {f"{name}_count" for name in SERVER_HISTOGRAMS.values()} | set(SERVER_COUNTERS.values())
    totals = dict.fromkeys(sorted(wanted), 0.0)
    model = server.served_names[0]  # vLLM labels its metrics with the first name it serves under
    for sample in parse_prometheus(server.metrics_text()):
        if sample.name in wanted and sample.label("model_name") == model:
            totals[sample.name] += sample.value
    return totals


def server_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The server's own means over the requests it served between two scrapes, and their tokens.

    Raises ValueError when the server counted no request in between: a clock cannot be compared with
    nothing.
    """
    delta = {name: after[name] - before[name] for name in after}
    figures: dict[str, float] = {key: delta[name] for key, name in SERVER_COUNTERS.items()}
    for key, name in SERVER_HISTOGRAMS.items():
        count = delta[f"{name}_count"]
        if count <= 0:
            raise ValueError(f"the server's {name} counted no observation during the run")
        figures[f"mean_{key}_ms"] = 1000 * delta[f"{name}_sum"] / count
    # At concurrency 1 the requests follow each other: the server's output throughput is its tokens over
    # the time it spent on them.
    figures["output_throughput"] = (
        delta[SERVER_COUNTERS["generation_tokens"]] / delta[f"{SERVER_HISTOGRAMS['e2el']}_sum"]
    )
    return figures


def with_server_figures(server, run) -> dict:
    """A client's figures for one run, with the server's own for the same run under "server"."""
    before = server_totals(server)
    figures = run()
    return {**figures, "server": server_figures(before, server_totals(server))}


def plugin_round(server, prompts, pattern) -> dict:
    before = server.spec_decode_counters()
    # vllm bench serve shares the server's prompt cache between runs; so does the plugin here, which would
    # otherwise give each run a cache of its own and prefill what the other client finds cached.
    load = generate_load(server.url, server.model, prompts, pattern, isolate_cache=False)
    assert all(r.success for r in load.records), [r.error for r in load.records if not r.success][:1]
    counters = server.spec_decode_counters().delta(before, where=server.url)
    return {**summarize(load.records, load.duration_s).as_dict(), **counter_figures(counters)}


def counter_figures(counters) -> dict:
    """The SD counter rows, left out (never zero) for a server without SD counters."""
    if not counters.present:
        return {}
    return {
        "spec_decode_acceptance_rate": counters.acceptance_rate * 100,  # vLLM reports a percentage
        "spec_decode_acceptance_length": counters.acceptance_length,
    }


def vllm_round(flags: list[str], work: Path, name: str) -> dict:
    run_vllm_bench(
        [
            *flags,
            "--disable-tqdm",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--save-result",
            "--result-dir",
            str(work),
            "--result-filename",
            name,
        ]
    )
    return json.loads((work / name).read_text())


def peer_round(peer: str, executable: str, server, tokenizer: str, prompts, level: int, work: Path, name: str) -> dict:
    before = server.spec_decode_counters()
    figures = PEERS[peer](executable, server.url, server.model, tokenizer, prompts, level, work, name)
    counters = server.spec_decode_counters().delta(before, where=server.url)
    return {**figures, **counter_figures(counters)}


def compare(
    concurrency_levels,
    rounds: int,
    num_prompts: int,
    input_len: int,
    output_len: int,
    peers: dict[str, str] | None = None,
    workload_name: str = "code_edit",
    url: str | None = None,
) -> dict:
    work = Path(tempfile.mkdtemp(prefix="specdec-agreement-"))
    pool = ServerPool(
        "cpu", work / "logs", on_event=lambda m: print(f"[specdec] {m}", flush=True), startup_timeout=600
    )  # starts nothing when a running server's URL is given
    measurements = Measurements(pool, work)
    workload = resolve_workload(workload_name, {"input_len": input_len, "output_len": output_len})
    results = {}
    try:
        if url:
            server = ExternalServer(ServerSpec(MODEL), "reference", url).check()
        else:
            server = pool.get(ServerSpec(MODEL, NGRAM, server_args=("--enforce-eager",)))
        tokenizer = pool.model_resolver(MODEL)
        for level in concurrency_levels:
            pattern = AccessPattern(f"concurrency_{level}", max_concurrency=level, num_prompts=num_prompts)
            prompts = measurements.prompts(MODEL, workload, pattern, seed=0)
            flags = bench_serve_flags(server.url, server.model, tokenizer, measurements.prompts_file(prompts), pattern)
            # warm both paths' prompts into the cache
            generate_load(server.url, server.model, prompts, pattern, isolate_cache=False)
            # And vLLM's client: its first call in a process imports its benchmark modules (4 s of CPU on a
            # 2-core box, beside the server), which no measured round should carry.
            vllm_round(flags, work, f"c{level}-warm-up.json")
            runs: dict[str, list[dict]] = {"plugin": [], "vllm bench serve": [], **{p: [] for p in peers or {}}}
            for round_ in range(rounds):  # interleaved: the machine's drift falls on every client alike
                # and in alternating order (ABBA): whichever client runs second in a round finds the
                # server just after a burst of traffic; alternating gives each client that seat as often.
                pair = [
                    ("plugin", lambda: with_server_figures(server, lambda: plugin_round(server, prompts, pattern))),
                    (
                        "vllm bench serve",
                        lambda: with_server_figures(
                            server, lambda: vllm_round(flags, work, f"c{level}-r{round_}.json")
                        ),
                    ),
                ]
                for client, measure in pair if round_ % 2 == 0 else pair[::-1]:
                    runs[client].append(measure())
                for peer, executable in (peers or {}).items():
                    try:
                        runs[peer].append(
                            peer_round(peer, executable, server, tokenizer, prompts, level, work, f"c{level}-r{round_}")
                        )
                    except (PeerError, OSError, KeyError, ValueError) as exc:
                        print(f"  {peer} failed at concurrency {level}: {exc}", flush=True)
                print(
                    f"  concurrency {level} round {round_ + 1}: "
                    + ", ".join(
                        f"{client} {values[-1]['output_throughput']:.1f} tok/s"
                        for client, values in runs.items()
                        if values
                    ),
                    flush=True,
                )
            results[level] = runs
    finally:
        pool.close()
    return results


def table(results: dict) -> list[str]:
    """Per concurrency and metric: the plugin's median over rounds, each peer's, and plugin / peer.

    The ratio is the median of the per-round ratios where both clients ran every round (a round's two
    runs follow each other, so machine drift between rounds cancels), else the ratio of the medians.
    """
    peers = [client for client in next(iter(results.values())) if client != "plugin"]
    head = f"{'concurrency':>11}  {'metric':<30} {'plugin':>9}" + "".join(
        f" {peer[:16]:>16} {'ratio':>6}" for peer in peers
    )
    lines = [head, "-" * len(head)]
    for level, runs in results.items():
        for metric in METRICS:
            mine = [run[metric] for run in runs["plugin"] if metric in run]
            if not mine:
                continue
            a = statistics.median(mine)
            cells = []
            for peer in peers:
                theirs = [run[metric] for run in runs[peer] if metric in run]
                b = statistics.median(theirs) if theirs else None
                ratio = (
                    statistics.median(x / y for x, y in zip(mine, theirs))
                    if len(theirs) == len(mine) and all(theirs)
                    else a / b
                    if b
                    else None
                )
                cells.append(f" {b:>16.2f} {ratio:>6.3f}" if b else f" {'–':>16} {'–':>6}")
            lines.append(f"{level:>11}  {metric:<30} {a:>9.2f}" + "".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds per client (even: each client goes first equally often)"
    )
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--input-len", type=int, default=192)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--workload", choices=("code_edit", "random_s"), default="code_edit")
    parser.add_argument(
        "--url", help="measure this running server (serving the bundled model) instead of starting one with n-gram SD"
    )
    parser.add_argument("--json", type=Path, help="write every round's figures here")
    parser.add_argument("--guidellm", help="the guidellm executable of its own virtual environment")
    parser.add_argument("--aiperf", help="the aiperf executable of its own virtual environment")
    args = parser.parse_args(argv)
    peers = {}
    for peer, path in (("GuideLLM", args.guidellm), ("AIPerf", args.aiperf)):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            peers[peer] = path
        else:
            print(
                f"{peer}: skipped ({'not found at ' + path if path else 'no executable given'}; "
                f"install it in a virtual environment of its own and pass --{peer.lower()} PATH)"
            )
    results = compare(
        args.concurrency, args.rounds, args.num_prompts, args.input_len, args.output_len, peers, args.workload, args.url
    )
    if args.json:
        write_atomic(args.json, json.dumps({str(level): runs for level, runs in results.items()}, indent=1))
    server = args.url or "n-gram k=4"
    print(
        f"\n{server}, {args.workload} {args.input_len}/{args.output_len}, {args.num_prompts} prompts, "
        f"{args.rounds} interleaved rounds per client; medians over rounds, ratio = median per-round ratio"
    )
    print("\n".join(table(results)))
    print(
        "\nratio: plugin / peer.  vllm bench serve defines each figure as the plugin does (vllm/benchmarks/serve.py, "
        "calculate_metrics) but for the throughputs' window: its duration starts after its one-request test run, "
        "the plugin's at the schedule's offset 0; both end with the last reply.  The SD counter rows of every "
        "client are scraped from /metrics before and after its run.  The peers differ where noted:"
    )
    for peer in peers:
        print(f"  {peer}:")
        print("\n".join(f"    - {line}" for line in DEFINITIONS[peer]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
