"""Our load generator and `vllm bench serve` agree on the same server and traffic.

Two checks, on the CPU build's reference server:

1. The formulas: one run of our client at concurrency 4, its request records handed to vLLM's own
   `calculate_metrics` (vllm/benchmarks/serve.py) as `vllm bench serve` would hand its own: every figure
   the plugin reports under vLLM's name (throughputs, mean, median, p95 and p99 of TTFT, TPOT, ITL and
   E2E latency) must come out the same, to rounding.  No timing noise enters: the same records, two
   formulas.
2. The clocks, live: interleaved rounds of each client one request at a time, in alternating order (ours
   then theirs, theirs then ours, ...), four short rounds after one unmeasured run of each client.  Each
   run's figures are read against the server's own account of the same run (vLLM's /metrics histograms of
   TTFT, inter-token latency, TPOT and end-to-end latency, and its token counters): a client's figure over
   the server's is that client's clock.  The median over rounds of our clock over vLLM's client's clock,
   for output throughput and mean TTFT, TPOT, ITL and E2E latency, must sit within 5% of 1, and the server
   must have counted the same prompt and output tokens under both clients, every round.

The live comparison at concurrency 4 is a benchmark (``benchmarks/agreement.py --concurrency 1 4 16``),
no longer a test: there the server itself swings (one round's two runs differed by up to 25% in median
TPOT, either way, 2026-11-25), so a 5% verdict needed 24 to 48 rounds, the longest real-server test of
the suite on a slow box, to tell the two clients' clocks apart where concurrency 1 already does; what
concurrency adds, how a run's records become its figures, check 1 decides exactly.

Lessons from CI and from a fast 2-core box, for the live rounds:
- in a fixed order the client that always ran second saw a median TPOT 5.0%
  higher at concurrency 4, so the order alternates, over an even number of
  rounds (with three, ours ran first twice and its median TTFT came out 8.0%
  lower at concurrency 1);
- the machine drifts in phases several runs long: 18 back-to-back runs of
  either client on one server ranged 15.0-17.6 tok/s, and a phase change
  between a round's two runs moves that round's ratio by up to 14%.  Shorter
  rounds, more of them, leave a phase change fewer rounds to tip, and their
  median does not follow the odd one;
- vLLM's client's first call in a process imports its benchmark modules
  (4 s of CPU): the unmeasured runs keep that out of the first round;
- the server itself decodes a few percent faster or slower from one run to
  the next, whichever client is attached, and each client's figures follow
  it: client against client, a round's ratio swung by 2-3%, and a landing
  CI's median over 20 rounds read TPOT 5.0% apart, which client against
  client cannot lay on the clocks or on the server.  Against the server's own
  histograms each client's TPOT stays within about 1% every round, so the
  test compares the two clocks, each taken against the server, and no longer
  the server's speed under one client with its speed under the other
  (docs/benchmarks.md has the rounds).

Both clients run in one process of their own, ``benchmarks/agreement.py
--url``: vLLM's import stays out of the test process, and neither client
pays for a second process competing with the server for the 2 cores.  When
this test ran `vllm bench serve` as a process of its own beside the pytest
process, that process's TTFT came out 3-6% higher: a bias of the set-up, not
of either client.
"""

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.analysis.metrics import summarize

BUNDLED = "specdec:smollm2-135m"
AGREEMENT = Path(__file__).resolve().parents[2] / "benchmarks" / "agreement.py"
TOLERANCE = 0.05
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")
# vLLM's own formulas over request records, run in a process of its own (vLLM's import stays out of this
# one): a JSON list of records in, its BenchmarkMetrics' figures out, under the names `vllm bench serve`
# writes to its result file.
VLLM_FORMULAS = """
import json, sys
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics

given = json.load(open(sys.argv[1]))
outputs = [RequestFuncOutput(**record) for record in given["records"]]
metrics, _ = calculate_metrics([], outputs, given["duration_s"], None, [95.0, 99.0], {})
figures = {
    "completed": metrics.completed,
    "total_input_tokens": metrics.total_input,
    "total_output_tokens": metrics.total_output,
    "request_throughput": metrics.request_throughput,
    "output_throughput": metrics.output_throughput,
    "total_token_throughput": metrics.total_token_throughput,
}
for name in ("ttft", "tpot", "itl", "e2el"):
    figures[f"mean_{name}_ms"] = getattr(metrics, f"mean_{name}_ms")
    figures[f"median_{name}_ms"] = getattr(metrics, f"median_{name}_ms")
    for percentile, value in getattr(metrics, f"percentiles_{name}_ms"):
        figures[f"p{percentile:g}_{name}_ms"] = value
print(json.dumps(figures))
"""


def measure_rounds(server, concurrency, num_prompts, output_len, rounds, figures):
    done = subprocess.run(
        [
            sys.executable,
            str(AGREEMENT),
            "--url",
            server.url,
            "--workload",
            "random_s",
            "--input-len",
            "128",
            "--output-len",
            str(output_len),
            "--num-prompts",
            str(num_prompts),
            "--concurrency",
            str(concurrency),
            "--rounds",
            str(rounds),
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(figures.read_text())[str(concurrency)]
    ours, theirs = runs["plugin"], runs["vllm bench serve"]
    assert len(ours) == len(theirs) == rounds
    assert all(run["completed"] == num_prompts for run in theirs)
    return ours, theirs


def clock(run, metric):
    """A client's figure for one run over the server's own for the same requests."""
    return run[metric] / run["server"][metric]


def clock_report(ours, theirs):
    """Per metric: each client's median clock over the rounds, and the median per-round ratio of the two, - 1."""
    report = []
    for metric in METRICS:
        mine = statistics.median(clock(run, metric) for run in ours)
        vllm = statistics.median(clock(run, metric) for run in theirs)
        # Round i's two runs ran back to back: compare within each round, then take the median.
        paired = statistics.median(clock(a, metric) / clock(b, metric) for a, b in zip(ours, theirs))
        report.append((metric, mine, vllm, paired - 1))
    return report


@pytest.mark.specdec(model=BUNDLED, server_args=["--enforce-eager"])
def test_metrics_agree_with_vllm_bench_serve_one_request_at_a_time(specdec, tmp_path):
    # Four rounds: each client's clock against the server's sits within about 1% every round, a fifth of the 5%
    # tolerance, so the median of four decides what eight did (one odd round moves it by half its own offset).
    concurrency, num_prompts, output_len, rounds = 1, 4, 16, 4
    assert rounds % 2 == 0, "an odd number of rounds gives one client the first seat more often"
    server = specdec.reference_server()
    ours, theirs = measure_rounds(server, concurrency, num_prompts, output_len, rounds, tmp_path / "rounds.json")
    # The same work reached the server under both clients, every round: what the clocks time is alike.
    for a, b in zip(ours, theirs):
        assert a["server"]["prompt_tokens"] == b["server"]["prompt_tokens"] > 0
        assert a["server"]["generation_tokens"] == b["server"]["generation_tokens"] == num_prompts * output_len
    report = clock_report(ours, theirs)
    print(
        "\n".join(
            f"concurrency {concurrency} {m}: against the server's own, ours {a:.3f}, vllm bench {b:.3f} "
            f"(medians over {len(ours)} rounds), median per-round ratio {d:+.1%}; client against client "
            f"{statistics.median(x[m] / y[m] for x, y in zip(ours, theirs)) - 1:+.1%}"
            for m, a, b, d in report
        )
    )
    for metric, mine, vllm, diff in report:
        assert abs(diff) < TOLERANCE, (
            f"{metric}: against the server's own, ours {mine:.3f} vs vllm bench {vllm:.3f}; median per-round "
            f"ratio {diff:+.1%} over {len(ours)} rounds"
        )
    # Same prompts, same output lengths: token totals must match exactly.
    assert ours[0]["total_output_tokens"] == theirs[0]["total_output_tokens"] == num_prompts * output_len
    assert ours[0]["total_input_tokens"] == theirs[0]["total_input_tokens"]
    # A server without SD has no SD counters: their rows are left out, never zero.
    assert "spec_decode_acceptance_rate" not in ours[0]


@pytest.mark.specdec(model=BUNDLED, server_args=["--enforce-eager"])
def test_top_logprobs_are_recorded_when_asked(specdec, specdec_measurements):
    server = specdec.reference_server()
    workload = resolve_workload("random_s", {"input_len": 32, "output_len": 8})
    pattern = resolve_pattern("throughput_low", {"num_prompts": 2})
    prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
    load = generate_load(server.url, server.model, prompts, pattern, logprobs=2)
    for record in load.records:
        assert record.success and len(record.token_ids) == 8
        assert len(record.top_logprobs) == 8
        assert all(len(top) == 2 and all(lp <= 0 for lp in top.values()) for top in record.top_logprobs)


@pytest.mark.specdec(model=BUNDLED, server_args=["--enforce-eager"])
def test_our_figures_are_vllm_bench_serves_formulas_over_the_same_requests(specdec, specdec_measurements, tmp_path):
    server = specdec.reference_server()
    workload = resolve_workload("random_s", {"input_len": 128, "output_len": 16})
    pattern = resolve_pattern("throughput_high", {"max_concurrency": 4, "num_prompts": 8})
    prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
    load = generate_load(server.url, server.model, prompts, pattern)
    assert all(record.success for record in load.records), [record.error for record in load.records]
    # Four in flight at once: requests overlap, so ITL pools gaps of interleaved streams and the run's
    # duration is not the sum of latencies, where the formulas could part.
    starts = sorted(record.start_time for record in load.records)
    assert starts[3] < min(record.start_time + record.latency for record in load.records)
    ours = summarize(load.records, load.duration_s).as_dict()
    given = tmp_path / "records.json"
    given.write_text(
        json.dumps(
            {
                "duration_s": load.duration_s,
                "records": [
                    {
                        "success": True,
                        "latency": record.latency,
                        "output_tokens": record.output_tokens,
                        "ttft": record.ttft,
                        "itl": record.itl,
                        "prompt_len": record.prompt_len,
                        "start_time": record.start_time,
                    }
                    for record in load.records
                ],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", VLLM_FORMULAS, str(given)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs["completed"] == len(load.records) and theirs["total_output_tokens"] == 8 * 16
    assert len(theirs) == 22, sorted(theirs)  # every figure compared below: none silently missing
    differ = {
        name: (ours[name], value)
        for name, value in theirs.items()
        if not math.isclose(ours[name], value, rel_tol=1e-9, abs_tol=1e-9)
    }
    assert not differ, differ
