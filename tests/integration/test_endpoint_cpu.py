"""Endpoint mode against CPU servers started outside pytest, as a deployment would run them.

Two vLLM CPU servers (no SD, and n-gram SD) are started here by hand, with
the command line a user would type; a pytest run then points
``--specdec-endpoint`` at them and must produce the same kind of result as a
managed run (speedup, acceptance from /metrics, output comparison, report
rows) without starting or stopping anything.  The two servers run at once,
so their timings mean nothing here: only the kind of result is checked.

The same run checks the output-equivalence report on a real divergence.  The
deployment here is a mismatched one, as happens in practice: the SD server
was started with generation defaults the reference's lacks
(``--override-generation-config`` with a repetition penalty, which vLLM
applies to every request that does not set one, as the plugin's do not), so
greedy answers change within a few dozen tokens of code.  The report must say
where, show both continuations, and classify the divergence from the
reference's own top-2 logprobs.  (This used to lean on the CPU build's n-gram
verification, whose bfloat16 numerics changed an answer on one 2-core box and
none on another: a divergence the machine decides cannot be what a test
relies on.  Then on a float32 reference against a bfloat16 SD server: the two
dtypes decode at different speeds, so every run flagged the comparison and
measured both sides again, about 30 s, for timings this test does not judge.)
"""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from pytest_specdec.serving.models import resolve_model
from pytest_specdec.serving.ports import claim_port

MODEL = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
PENALTY = {"repetition_penalty": 1.1}  # the SD deployment's own generation defaults: code edits repeat the prompt

SUITE = f"""
import pytest

@pytest.mark.specdec(model="{MODEL}", speculative_config={NGRAM!r})
@pytest.mark.workload("code_edit", input_len=128, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_deployed(specdec):
    result = specdec.run(logprobs=2)
    # Two servers up at once on two cores (one busy at a time): should a timing flag come up anyway, the
    # plugin measures both sides again before any verdict; this test judges no timing, so it accepts it.
    if result.unfair_speedup():
        assert result.remeasured, "a flagged comparison is measured again before any verdict"
    result.accept_flags("not_steady", "ttft_at_concurrency_1", "above_ceiling")
    assert result.unfair_speedup() is None
    assert result.speedup() > 0 and result.counters.present and result.counters.num_drafts > 0
    assert 0 < result.acceptance_rate <= 1 and result.match_rate == result.match_rate
    assert "not started by pytest-specdec" in result.reproduce["speculative_server"]
    assert all(record.top_logprobs for record in result.reference_runs[0].records)
    diverged = result.outputs.diverged
    assert diverged, "a repetition penalty on one side: expected at least one greedy answer to change"
    with pytest.raises(AssertionError) as failure:
        result.assert_outputs_equivalent(min_match=1.0, ignore_numerical_ties=False)
    report = str(failure.value)
    print(report)
    first = diverged[0]
    assert f"request {{first.index}}: first difference at token {{first.first_divergence}}" in report
    assert f"reference: {{first.reference_text!r}}" in report and f"SD:        {{first.speculative_text!r}}" in report
    assert first.reference_text != first.speculative_text
    # Every divergence is classified from the reference's own top-2 logprobs.
    assert "top-2 gap" in report and "(unknown" not in report
    assert "reproduce by hand:" in report and "not started by pytest-specdec" in report
"""


@pytest.fixture
def deployed(tmp_path, specdec_pool):
    specdec_pool.stop_running()  # nothing of the session's own while these run
    servers = []
    try:
        for name, config, defaults in (("reference", None, None), ("speculative", NGRAM, PENALTY)):
            claim = claim_port("127.0.0.1")
            command = [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                resolve_model(MODEL),
                "--served-model-name",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                str(claim.port),
                "--kv-cache-memory-bytes",
                str(1024**3),
                "--enforce-eager",
            ]
            if config:
                command += ["--speculative-config", json.dumps(config)]
            if defaults:
                command += ["--override-generation-config", json.dumps(defaults)]
            log = open(tmp_path / f"{name}.log", "wb")
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            servers.append((name, f"http://127.0.0.1:{claim.port}", process, claim))
        deadline = time.monotonic() + 600
        for name, url, process, _ in servers:
            while True:
                assert process.poll() is None, (tmp_path / f"{name}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"{name} server not ready"
                try:
                    if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
        yield {name: url for name, url, _, _ in servers}
    finally:
        for _, _, process, claim in servers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            claim.release()


@pytest.mark.own_servers
def test_endpoint_mode_measures_servers_it_did_not_start(pytester, deployed):
    pytester.makepyfile(test_deployed=SUITE)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--specdec-report",
        "report",
        # One draw a side: this test judges no timing (two servers share the cores), only the kind of result.
        "--specdec-repeats",
        "1",
        "--specdec-endpoint",
        f"reference={deployed['reference']}",
        "--specdec-endpoint",
        f"speculative={deployed['speculative']}",
        timeout=900,
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "starting vLLM" not in out  # nothing launched
    result.stdout.fnmatch_lines(
        [
            f"*using the running reference endpoint {deployed['reference']}*",
            f"*using the running speculative endpoint {deployed['speculative']}*",
        ]
    )
    (row,) = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    assert row["speedup_output_throughput"] > 0 and 0 < row["acceptance_rate"] <= 1 and row["per_position_acceptance"]
    for _, url in deployed.items():  # still serving: not ours to stop
        assert httpx.get(f"{url}/v1/models", timeout=5.0).status_code == 200
