"""The regression gate on the real CPU build, with a regression of known size.

One test, three pytest runs: record a baseline with a 24-layer truncated
draft (k=3, ~19% of draft tokens accepted here), re-run the same setting
(green), then swap in an 8-layer draft (~2% accepted): the gate fails on
acceptance and speedup, the metrics that setting worsens.
"""

BUNDLED = "specdec:smollm2-135m"

GATED_SUITE = f"""
import os
import pytest

LAYERS = int(os.environ["DRAFT_LAYERS"])

@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"],
                     speculative_config={{"method": "draft_model", "model": f"{BUNDLED}@layers={{LAYERS}}",
                                          "num_speculative_tokens": 3}})
@pytest.mark.workload("code_edit", input_len=128, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_draft_gate(specdec):
    result = specdec.run()
    print(f"acceptance_rate={{result.acceptance_rate:.3f}} speedup={{result.speedup():.3f}}")
    result.assert_no_regression(metrics=["acceptance_rate", "speedup_output_throughput"])
"""


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "--specdec-cpu", "--specdec-repeats=2", "-p", "no:cacheprovider", "-s", *args, timeout=900,
    )


def test_gate_passes_unchanged_and_fails_a_worse_draft(pytester, specdec_pool, monkeypatch):
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_draft_gate=GATED_SUITE)

    monkeypatch.setenv("DRAFT_LAYERS", "24")
    recorded = run(pytester, "--specdec-update-baselines")
    recorded.assert_outcomes(passed=1)
    (baseline,) = (pytester.path / "baselines").glob("*.json")

    rerun = run(pytester)
    rerun.assert_outcomes(passed=1)

    monkeypatch.setenv("DRAFT_LAYERS", "8")
    worse = run(pytester)
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*performance regressed against the baseline of test_draft_gate.py::test_draft_gate*",
                                "*acceptance_rate*FAIL*"])
    assert baseline.exists()
