"""Does an idle second server change a measured run?  The pool's one-server-at-a-time rule, measured.

The plugin's pool stops the running server before it starts another (serving/pool.py): two servers busy
at once on two cores make every timing meaningless.  Whether an *idle* one costs anything decides whether a
CPU pool could keep servers up between their turns (the integration suite restarts the vLLM reference once,
the builds test restarts llama.cpp servers nine times, each start followed by a warm-up).

On one engine, a measured server (the reference) and a neighbour (an n-gram server of the same model):
`--pairs` pairs of the same run on the measured server, one with the neighbour up and idle, one with it
stopped, in alternating order (with, without, without, with, ...).  Before each "with" run the neighbour
serves one request, as a pooled server would just have done, and the run starts `--settle` seconds later
(0: at once, the worst case).  Printed: each pair's output throughput and median TPOT ratio (with /
without), their medians, and the box's busy share (from /proc/stat) in the 5 s after each "with" run, both
servers idle then.

With `--parked` the neighbour is parked as the pool parks a server on a CPU (serving/pool.py): paused
right after its request (`ManagedServer.pause`, every process but the launched one stopped) and kept up
beside the measured runs; the question is then whether a parked server costs a run anything.

    .venv/bin/python benchmarks/idle_neighbour.py --engine vllm --pairs 4 [--parked]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pytest_specdec import Measurements, ServerPool, ServerSpec
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.metrics import summarize

MODEL = "specdec:smollm2-135m"
NGRAM = {
    "vllm": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    "llamacpp": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 3},
}


def busy_share(seconds: float) -> float:
    """The share of the box's CPU time that was not idle over the next `seconds` (all cores)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    busy, total = sample()
    time.sleep(seconds)
    busy_after, total_after = sample()
    return (busy_after - busy) / max(1, total_after - total)


def spec_for(engine: str, config: dict | None) -> ServerSpec:
    if engine == "vllm":
        return ServerSpec(MODEL, config, server_args=("--enforce-eager",))
    return ServerSpec(MODEL, config, engine=engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=sorted(NGRAM), default="vllm")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--settle", type=float, default=0.0, help="seconds between the neighbour's request and the run")
    parser.add_argument(
        "--parked", action="store_true", help="pause the neighbour after its request, as the pool parks"
    )
    args = parser.parse_args()
    state = "parked" if args.parked else "idle"
    work = Path(tempfile.mkdtemp(prefix="idle-neighbour-"))
    measured_pool = ServerPool("cpu", work / "logs-measured", on_event=print, startup_timeout=600)
    neighbour_pool = ServerPool("cpu", work / "logs-neighbour", on_event=print, startup_timeout=600)
    measurements = Measurements(measured_pool, work / "runs", repeats=1, on_event=lambda m: None)
    try:
        measured_spec, neighbour_spec = spec_for(args.engine, None), spec_for(args.engine, NGRAM[args.engine])
        measured = measured_pool.get(measured_spec)
        workload = resolve_workload("code_edit", {"input_len": 192, "output_len": 64})
        pattern = resolve_pattern("throughput_low", {"num_prompts": 4})
        prompts = measurements.prompts(MODEL, workload, pattern, 0)
        for _ in range(2):  # warm: not measured
            generate_load(measured.url, measured.model, prompts, pattern)
        throughput, tpot, idle_share, starts = [], [], [], 0
        for pair in range(args.pairs):
            figures = {}
            for beside in (True, False) if pair % 2 == 0 else (False, True):
                if beside:
                    if neighbour_pool.current is None:
                        starts += 1
                    neighbour = neighbour_pool.get(neighbour_spec)
                    neighbour.resume()  # parked since the last pair's run (a no-op when it was not paused)
                    generate_load(neighbour.url, neighbour.model, prompts[:1], pattern)  # it just served
                    if args.parked:
                        neighbour.pause()
                    time.sleep(args.settle)
                else:
                    neighbour_pool.stop_running()
                load = generate_load(measured.url, measured.model, prompts, pattern, seed=pair)
                figures[beside] = summarize(load.records, load.duration_s)
                if beside:
                    idle_share.append(busy_share(5.0))  # both servers idle, nothing measured
            throughput.append(figures[True].output_throughput / figures[False].output_throughput)
            tpot.append(figures[True].tpot.median / figures[False].tpot.median)
            print(
                f"pair {pair + 1}: with the neighbour {state} / without: output throughput {throughput[-1]:.3f}, "
                f"median TPOT {tpot[-1]:.3f}",
                flush=True,
            )
        print(
            f"{args.engine}, neighbour {state}: median over {args.pairs} pairs: "
            f"output throughput {statistics.median(throughput):.3f} "
            f"(range {min(throughput):.3f}-{max(throughput):.3f}), median TPOT {statistics.median(tpot):.3f} "
            f"(range {min(tpot):.3f}-{max(tpot):.3f}); the box's busy share with both servers idle: "
            f"median {statistics.median(idle_share):.1%} over 5 s; neighbour started {starts} times"
        )
    finally:
        neighbour_pool.close()
        measured_pool.close()


if __name__ == "__main__":
    main()
