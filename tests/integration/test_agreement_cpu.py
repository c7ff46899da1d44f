"""Our load generator and `vllm bench serve` agree on the same server and traffic.

Three interleaved repeats of each (ours, theirs, ours, ...) on the CPU build's
reference server, at concurrency 1 and 4: the medians of output throughput
and of median TTFT, TPOT and ITL must agree within 5%.  `vllm bench serve`
runs as the reproduce commands run it, ``python -m pytest_specdec bench``, in
its own process: vLLM's import stays out of the test process.
``benchmarks/agreement.py`` measures more metrics and concurrencies.
"""

import json
import statistics
import subprocess
import sys

import pytest

from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import AccessPattern, resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.measure.metrics import summarize
from pytest_specdec.measure.reproduce import bench_serve_flags

BUNDLED = "specdec:smollm2-135m"
REPEATS = 3
TOLERANCE = 0.05
METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms")


@pytest.mark.specdec(model=BUNDLED, server_args=["--enforce-eager"])
@pytest.mark.parametrize("concurrency, num_prompts, output_len", [(1, 5, 32), (4, 12, 48)])
def test_metrics_agree_with_vllm_bench_serve(specdec, specdec_measurements, tmp_path, concurrency, num_prompts,
                                             output_len):
    server = specdec.reference_server()
    workload = resolve_workload("random_s", {"input_len": 128, "output_len": output_len})
    pattern = AccessPattern(f"concurrency_{concurrency}", max_concurrency=concurrency, num_prompts=num_prompts)
    prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
    flags = bench_serve_flags(server.url, server.model, specdec_measurements.pool.model_resolver(BUNDLED),
                              specdec_measurements.prompts_file(prompts), pattern)

    def vllm_bench_serve(repeat):
        name = f"bench-{repeat}.json"
        done = subprocess.run([sys.executable, "-m", "pytest_specdec", "bench", *flags, "--disable-tqdm",
                               "--save-result", "--result-dir", str(tmp_path), "--result-filename", name],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads((tmp_path / name).read_text())

    # One untimed pass warms the server (vllm bench sends its own test request first).
    generate_load(server.url, server.model, prompts, pattern)
    ours, theirs = [], []
    for repeat in range(REPEATS):
        load = generate_load(server.url, server.model, prompts, pattern)
        assert all(r.success for r in load.records)
        ours.append(summarize(load.records, load.duration_s).as_dict())
        result = vllm_bench_serve(repeat)
        assert result["completed"] == len(prompts)
        theirs.append(result)
    report = []
    for metric in METRICS:
        mine = statistics.median(run[metric] for run in ours)
        vllm = statistics.median(run[metric] for run in theirs)
        report.append((metric, mine, vllm, mine / vllm - 1))
    print("\n".join(f"concurrency {concurrency} {m}: ours {a:.2f}, vllm bench {b:.2f}, diff {d:+.1%}"
                    for m, a, b, d in report))
    for metric, mine, vllm, diff in report:
        assert abs(diff) < TOLERANCE, f"{metric}: ours {mine:.2f} vs vllm bench {vllm:.2f} ({diff:+.1%})"
    # Same prompts, same output lengths: token totals must match exactly.
    assert ours[0]["total_output_tokens"] == theirs[0]["total_output_tokens"]
    assert ours[0]["total_input_tokens"] == theirs[0]["total_input_tokens"]


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
