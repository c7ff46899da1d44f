"""What the engine turns off because SD is on is SD's cost, compared; the mechanism figure on request.

An inner session starts fault servers (tests/support/fault_server.py) through the launch hook, each printing the
start-up lines vLLM 0.26 logged on the H200 (docs/benchmarks.md, "On a lent GPU") before it serves: the
n-gram side "Async scheduling not supported with ngram-based speculative decoding and will be disabled."
and "Model Runner V2 does not yet support ngram; using the V1 model runner.", the reference neither.  Before
this, that comparison was flagged as two engine confounds and never compared.  The fault servers' figures
are made up; what is checked is how the plugin names the difference and what it measures.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fault_suite import MODEL
from tests.support import SUPPORT

FAULT = str(SUPPORT / "fault_server.py")

NGRAM_LINES = """\
(APIServer pid=1) INFO 11-27 10:00:00 [api_utils.py:286] non-default args: {'model': 'm', 'dtype': 'bfloat16', 'enforce_eager': True, 'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 4}}
(APIServer pid=1) WARNING 11-27 10:00:01 [vllm.py:1605] Async scheduling not supported with ngram-based speculative decoding and will be disabled.
(EngineCore pid=2) WARNING 11-27 10:00:05 [gpu_model_runner.py:88] Model Runner V2 does not yet support ngram; using the V1 model runner.
(EngineCore pid=2) INFO 11-27 10:00:05 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: model='m', dtype=torch.bfloat16, enforce_eager=True, enable_prefix_caching=True
"""
REFERENCE_LINES = """\
(APIServer pid=3) INFO 11-27 10:02:00 [api_utils.py:286] non-default args: {'model': 'm', 'dtype': 'bfloat16', 'enforce_eager': True}
(EngineCore pid=4) INFO 11-27 10:02:05 [core.py:133] Initializing a V1 LLM engine (v0.26.0) with config: model='m', dtype=torch.bfloat16, enforce_eager=True, enable_prefix_caching=True
(EngineCore pid=4) INFO 11-27 10:02:06 [gpu_worker.py:518] Using V2 Model Runner
"""

# Launches a fault server behind the lines its side logged; --no-async-scheduling and VLLM_USE_V2_MODEL_RUNNER=0
# (what the mechanism reference is started with) show as vLLM shows them: in "non-default args", and not at all.
CONFTEST = f"""
import json, os, sys

LINES = json.loads(open(os.environ["LINES_FILE"]).read())


def pytest_specdec_server_command(launch):
    side = "ngram" if launch.speculative_config else "reference"
    text = LINES[side]
    if side == "ngram" and os.environ.get("SD_DTYPE"):  # a harness that set the dtype on one side only
        text = text.replace("bfloat16", os.environ["SD_DTYPE"])
    if "--no-async-scheduling" in launch.spec.server_args:
        text = text.replace("'enforce_eager': True}}", "'enforce_eager': True, 'async_scheduling': False}}")
    if launch.env.get("VLLM_USE_V2_MODEL_RUNNER") == "0":
        text = text.replace("[gpu_worker.py:518] Using V2 Model Runner", "[gpu_worker.py:520] Model loaded")
    with open("launches.jsonl", "a") as handle:
        handle.write(json.dumps({{"side": side, "args": list(launch.spec.server_args),
                                  "runner": launch.env.get("VLLM_USE_V2_MODEL_RUNNER")}}) + "\\n")
    path = os.path.abspath(f"lines-{{launch.port}}.txt")
    open(path, "w").write(text)
    return ["sh", "-c", 'cat "$0"; exec "$@"', path, sys.executable, {FAULT!r}, "--port", str(launch.port),
            "--model", launch.spec.model, "--chunk-s", "0.004"]
"""

SUITE = f"""
import pytest


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
@pytest.mark.workload("random_s", input_len=24, output_len=8)
@pytest.mark.access_pattern("concurrency_1", num_prompts=4)
MECHANISM
def test_pair(specdec):
    result = specdec.run()
    for cost in result.sd_costs():
        print("COST", cost.describe())
    if result.mechanism is not None:
        print("MECHANISM", result.mechanism.settings, "%.3f" % result.mechanism.speedup(), result.mechanism.note)
    print("FLAGS", sorted(flag.kind for flag in result.fairness_flags()))
    result.assert_fair_comparison()
    result.assert_speedup(min=0.1)
"""


def _session(directory: Path, *, mechanism: bool, sd_dtype: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    (directory / "conftest.py").write_text(CONFTEST)
    marker = "@pytest.mark.specdec_mechanism" if mechanism else ""
    (directory / "test_pair.py").write_text(SUITE.replace("MECHANISM", marker))
    (directory / "lines.json").write_text(json.dumps({"ngram": NGRAM_LINES, "reference": REFERENCE_LINES}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI", "VLLM_USE_V2_MODEL_RUNNER")}
    env.update(LINES_FILE=str(directory / "lines.json"), SD_DTYPE=sd_dtype)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-s",
        "-rA",
        "--specdec-cpu",
        "--specdec-repeats=1",
    ]
    command += ["--specdec-request-timeout", "5", "--specdec-report", str(directory / "report")]
    command += [f"--specdec-log-dir={directory / 'logs'}", f"--basetemp={directory / 'tmp'}"]
    run = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    report = directory / "report" / "results.json"
    rows = json.loads(report.read_text())["results"] if report.is_file() else []
    return run, (rows[0] if rows else {})


def _launches(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "launches.jsonl").read_text().splitlines()]


def test_ngram_against_the_default_reference_is_compared_with_its_engine_cost_named(tmp_path):
    run, row = _session(tmp_path, mechanism=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "FLAGS []" in run.stdout  # no confound, and no TTFT or ceiling flag from the path difference
    assert "vLLM turned async scheduling off for `ngram`; `ngram_gpu` keeps it" in run.stdout
    assert row["speedup_output_throughput"] is not None and row["confounds"] == [] and not row["remeasured"]
    assert [cost["fact"] for cost in row["sd_costs"]] == ["async_scheduling", "model_runner"]
    assert row["mechanism"] is None
    html = (tmp_path / "report" / "report.html").read_text()
    assert "SD's own cost, compared: vLLM turned async scheduling off for `ngram`; `ngram_gpu` keeps it" in html
    assert "vLLM ran `ngram` on its V1 model runner, not V2" in html
    assert "SD's own cost, compared" in (tmp_path / "report" / "summary.md").read_text()
    assert [launch["side"] for launch in _launches(tmp_path)] == ["reference", "ngram"]  # the default: no extra start


def test_the_mechanism_option_measures_one_more_reference_on_sds_engine_path(tmp_path):
    run, row = _session(tmp_path, mechanism=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    launches = _launches(tmp_path)
    assert [launch["side"] for launch in launches] == ["reference", "ngram", "reference"]
    assert launches[2] == {"side": "reference", "args": ["--no-async-scheduling"], "runner": "0"}
    assert launches[0]["args"] == [] and launches[0]["runner"] is None  # the deployed reference as it runs
    mechanism = row["mechanism"]
    assert mechanism["label"] == "mechanism (reference on SD's engine path)"
    assert mechanism["reference_settings"] == ["--no-async-scheduling", "VLLM_USE_V2_MODEL_RUNNER=0"]
    assert mechanism["speedup_output_throughput"] > 0 and mechanism["note"] == ""  # the paths now agree
    assert mechanism["fairness_flags"] == [] or all(f["kind"] != "confound" for f in mechanism["fairness_flags"])
    html = (tmp_path / "report" / "report.html").read_text()
    assert f"deployed {row['speedup_output_throughput']:.2f}x; mechanism (reference on SD&#x27;s engine path)" in html


def test_a_dtype_the_harness_set_on_one_side_only_is_still_a_confound(tmp_path):
    run, row = _session(tmp_path, mechanism=False, sd_dtype="float16")
    assert run.returncode == 1, run.stdout[-4000:]
    assert "FLAGS ['confound']" in run.stdout and "dtype: reference bfloat16, SD float16" in run.stdout
    assert [c["fact"] for c in row["confounds"]] == ["dtype"]
    assert [cost["fact"] for cost in row["sd_costs"]] == ["async_scheduling", "model_runner"]


@pytest.mark.parametrize(
    "markers, message",
    [
        ("@pytest.mark.specdec_mechanism(True)", "invalid @pytest.mark.specdec_mechanism: takes no arguments"),
        (
            "@pytest.mark.specdec_mechanism\n@pytest.mark.specdec_slo(tpot_ms=50)\n"
            "@pytest.mark.access_pattern('slo_capacity')",
            "is a capacity search; the mechanism figure is run()'s",
        ),
    ],
)
def test_the_mechanism_marker_is_checked_at_collection(pytester, markers, message):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.specdec(model="m", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
        @pytest.mark.workload("random_s")
        {markers.replace(chr(10), chr(10) + '        ')}
        def test_sd(specdec):
            raise AssertionError("must not run")
        """
    )
    result = pytester.runpytest("--specdec-cpu", "-rA")
    result.assert_outcomes(errors=1)
    assert message in result.stdout.str()
