"""Our load generator and `vllm bench serve` agree on the same server and traffic.

Interleaved rounds of each, in alternating order (ours then theirs, theirs
then ours, ...), on the CPU build's reference server, ten short rounds at
concurrency 1 and twenty-four at concurrency 4 (one wave of four requests
each), after one unmeasured run of each client.  Each round's two runs follow each other, so their ratio carries the
same machine state; the median over rounds of that ratio, for output
throughput and median TTFT, TPOT and ITL, must sit within 5% of 1.  Lessons
from CI and from a fast 2-core box:
- in a fixed order the client that always ran second saw a median TPOT 5.0%
  higher at concurrency 4, so the order alternates, over an even number of
  rounds (with three, ours ran first twice and its median TTFT came out 8.0%
  lower at concurrency 1);
- the machine drifts in phases several runs long: 18 back-to-back runs of
  either client on one server ranged 15.0-17.6 tok/s, and a phase change
  between a round's two runs moves that round's ratio by up to 14%.  With
  four or six rounds of 5 requests the median ratio landed at +6% and -6%
  (throughput, concurrency 1) and +5% (TPOT, concurrency 4) in three runs,
  while neither client's CPU use (0.1 s per run for ours, 0.5 s for vLLM's)
  or definitions differ.  Shorter rounds, more of them, leave a phase change
  fewer rounds to tip, and their median does not follow the odd one;
- vLLM's client's first call in a process imports its benchmark modules
  (4 s of CPU): the unmeasured runs keep that out of the first round;
- at concurrency 4 the server itself swings: one round's two runs differed
  by up to 25% in median TPOT, either way, on the same server (92 rounds in
  six runs of the script, 2026-11-25: median per-round ratio +0.3%, no
  bias), and eight rounds of 12 requests left the median of those ratios
  outside 5% about one run in five (TPOT -7.0% in a CI-like run; resampling
  the 92 rounds: 20% of 8-round medians beyond 5%, 3% of 24-round ones).
  Rounds of one wave of four requests cost a third of the time of three
  waves with the same swing per round, so the test runs 24 of them (about
  as long as the eight rounds of 12 took) rather than fewer, longer ones.
  The GC was ruled out: the collections during vLLM's measured runs took
  38 ms in all over eight rounds, worst 5 ms;
- 24 rounds were still not enough once: CI (2026-11-26) measured median
  TPOT -7.6% and ITL -6.4% at concurrency 4 over 24 rounds.  When any
  metric lands past 5%, the test now runs a second batch of rounds as long
  and judges the 48 together: a gap between the clients is in every round
  and stays, a chance one shrinks.  The tolerance is unchanged.

Both clients run in one process of their own, ``benchmarks/agreement.py
--url``: vLLM's import stays out of the test process, and neither client
pays for a second process competing with the server for the 2 cores.  When
this test ran `vllm bench serve` as a process of its own beside the pytest
process, that process's TTFT came out 3-6% higher (-5.3% twice at
concurrency 4, once in CI): a bias of the set-up, not of either client.  The script
measures more metrics and concurrencies.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload

BUNDLED = "specdec:smollm2-135m"
AGREEMENT = Path(__file__).resolve().parents[2] / "benchmarks" / "agreement.py"
TOLERANCE = 0.05
METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms")


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


def paired_report(ours, theirs):
    report = []
    for metric in METRICS:
        mine = statistics.median(run[metric] for run in ours)
        vllm = statistics.median(run[metric] for run in theirs)
        # Round i's two runs ran back to back: compare within each round, then take the median.
        paired = statistics.median(a[metric] / b[metric] for a, b in zip(ours, theirs))
        report.append((metric, mine, vllm, paired - 1))
    return report


@pytest.mark.specdec(model=BUNDLED, server_args=["--enforce-eager"])
@pytest.mark.parametrize("concurrency, num_prompts, output_len, rounds", [(1, 4, 32, 10), (4, 4, 32, 24)])
def test_metrics_agree_with_vllm_bench_serve(specdec, tmp_path, concurrency, num_prompts, output_len, rounds):
    assert rounds % 2 == 0, "an odd number of rounds gives one client the first seat more often"
    server = specdec.reference_server()
    ours, theirs = measure_rounds(server, concurrency, num_prompts, output_len, rounds, tmp_path / "first.json")
    report = paired_report(ours, theirs)
    if any(abs(diff) >= TOLERANCE for *_, diff in report):
        # One batch of rounds is a sample: a median of 24 noisy rounds lands past 5% now and then with
        # nothing wrong (see above).  A second batch as long, judged with the first, keeps a real gap
        # (it moves every round, so it stays in the median of 48) and lets a chance one fall back.
        print(
            f"concurrency {concurrency}: "
            + "; ".join(f"{m} {d:+.1%}" for m, _, _, d in report)
            + f" after {rounds} rounds; {rounds} more, judged with them"
        )
        more_ours, more_theirs = measure_rounds(
            server, concurrency, num_prompts, output_len, rounds, tmp_path / "second.json"
        )
        ours, theirs = ours + more_ours, theirs + more_theirs
        report = paired_report(ours, theirs)
    print(
        "\n".join(
            f"concurrency {concurrency} {m}: ours {a:.2f}, vllm bench {b:.2f} (medians over "
            f"{len(ours)} rounds), median per-round ratio {d:+.1%}"
            for m, a, b, d in report
        )
    )
    for metric, mine, vllm, diff in report:
        assert abs(diff) < TOLERANCE, (
            f"{metric}: ours {mine:.2f} vs vllm bench {vllm:.2f}; median per-round "
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
