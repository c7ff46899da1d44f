"""Our load generator and `vllm bench serve` agree on the same server and traffic.

Three interleaved repeats of each (ours, theirs, ours, ...) on the CPU build's
reference server; single runs here vary by about 3%, so the medians of output
throughput and of median TPOT are compared, within 5%.  `vllm bench serve`
runs as the reproduce commands run it, ``python -m pytest_specdec.vllm_bench``,
in its own process: vLLM's import stays out of the test process.
"""

import json
import statistics
import subprocess
import sys

import pytest

from pytest_specdec.client import generate_load
from pytest_specdec.metrics import summarize
from pytest_specdec.patterns import resolve_pattern
from pytest_specdec.workloads import resolve_workload

BUNDLED = "specdec:smollm2-135m"
REPEATS = 3
TOLERANCE = 0.05


@pytest.mark.specdec(model=BUNDLED)
def test_metrics_agree_with_vllm_bench_serve(specdec, specdec_measurements, tmp_path):
    server = specdec.reference_server()
    workload = resolve_workload("random_s", {"input_len": 128, "output_len": 64})
    pattern = resolve_pattern("throughput_high", {"max_concurrency": 4, "num_prompts": 12})
    prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
    dataset = specdec_measurements.prompts_file(prompts)
    bench_args = [
        "--backend", "vllm",
        "--base-url", server.url,
        "--endpoint", "/v1/completions",
        "--model", server.model,
        "--tokenizer", specdec_measurements.pool.model_resolver(BUNDLED),
        "--dataset-name", "custom",
        "--dataset-path", str(dataset),
        "--custom-output-len", "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        *pattern.bench_flags(),
        "--ignore-eos",
        "--temperature", "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(tmp_path),
    ]

    def vllm_bench_serve(repeat):
        name = f"bench-{repeat}.json"
        done = subprocess.run([sys.executable, "-m", "pytest_specdec.vllm_bench", *bench_args, "--result-filename", name],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads((tmp_path / name).read_text())

    # One untimed pass warms the server (vllm bench sends its own test request first).
    generate_load(server.url, server.model, prompts, pattern)
    ours, theirs = [], []
    for repeat in range(REPEATS):
        load = generate_load(server.url, server.model, prompts, pattern)
        assert all(r.success for r in load.records)
        ours.append({**summarize(load.records, load.duration_s).as_dict(), "duration": load.duration_s})
        result = vllm_bench_serve(repeat)
        assert result["completed"] == len(prompts)
        theirs.append(result)
    for name, runs in (("ours", ours), ("vllm bench", theirs)):
        print(name, [{k: round(run[k], 2) for k in ("output_throughput", "median_tpot_ms", "mean_ttft_ms", "duration")
                      if k in run} for run in runs])
    report = []
    for metric in ("output_throughput", "median_tpot_ms"):
        mine = statistics.median(run[metric] for run in ours)
        vllm = statistics.median(run[metric] for run in theirs)
        report.append((metric, mine, vllm, mine / vllm - 1))
    print("\n".join(f"{m}: ours {a:.2f}, vllm bench {b:.2f}, diff {d:+.1%}" for m, a, b, d in report))
    for metric, mine, vllm, diff in report:
        assert abs(diff) < TOLERANCE, f"{metric}: ours {mine:.2f} vs vllm bench {vllm:.2f} ({diff:+.1%})"
    # Same prompts, same output lengths: token totals must match exactly.
    assert ours[0]["total_output_tokens"] == theirs[0]["total_output_tokens"]
    assert ours[0]["total_input_tokens"] == theirs[0]["total_input_tokens"]


@pytest.mark.specdec(model=BUNDLED)
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
