"""The regression gate on the real CPU build, with regressions of known kind.

One test, three pytest runs of a suite of two tests, each with a baseline:
record both with n-gram SD (k=4, lookup window 2-4 tokens: 45% of draft
tokens accepted on these code edits); re-run one unchanged (green) while the
other narrows its lookup window to one token (23% accepted), which the gate
fails on acceptance (one run, one reference server for both); then run the
unchanged test on the same vLLM made uniformly slower (every forward step of
the model runner delayed a fixed time by tests/data/slow_engine/sitecustomize.py,
which the servers load: an engine change the plugin cannot see, on the same
machine), which fails naming the reference's own slowdown.

The dials are n-gram's, not a truncated draft model's (24 layers against 8,
until 2026-11-27): the 24-layer draft's median TPOT was 130 ms against
n-gram's 43 ms here, and this test's seven server starts and ten SD runs
paid for it (533 s against 407 s for the whole test on one box).  n-gram is also what
benchmarks/gate_calibration.py calibrates the gate on.

The suite gates tok/s and TPOT at 30%, as docs/writing-tests.md tells users
of shared CPU boxes to, not at the 10% default: between two sessions of this
test with nothing changed, the reference's median TPOT moved by up to 21% in
a repeat pair (49.0 -> 62.2 ms, a session median of -17%; SD's tok/s fell
12.7% in another pair; 2026-11-26, 2-core boxes), while the machine probe
moved 1-2%: drift within the probe's 20% band, which the gate cannot tell
from the engine.  At 20% the unchanged re-run failed in CI twice.  The planted
slowdown is 60 ms per forward step, which moves the reference's TPOT by more
than half, well past the 30% band and the drift together.
"""

from pathlib import Path

import pytest

SLOW_ENGINE = Path(__file__).resolve().parents[1] / "data" / "slow_engine"

BUNDLED = "specdec:smollm2-135m"

GATED_SUITE = f"""
import os
import pytest

LOOKUP = int(os.environ["LOOKUP_MAX"])
NARROWED_LOOKUP = int(os.environ.get("NARROWED_LOOKUP_MAX", LOOKUP))


def gated(lookup_max):
    ngram = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": lookup_max,
             "prompt_lookup_min": min(2, lookup_max)}}

    def mark(test):
        for marker in (
            pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"], speculative_config=ngram),
            pytest.mark.workload("code_edit", input_len=128, output_len=32),
            pytest.mark.access_pattern("throughput_low", num_prompts=3),
            pytest.mark.specdec_tolerance(output_throughput=0.3, median_tpot_ms=0.3),
        ):
            test = marker(test)
        return test
    return mark


def check(specdec):
    result = specdec.run()
    print(f"acceptance_rate={{result.acceptance_rate:.3f}} speedup={{result.speedup():.3f}} "
          f"tpot={{result.reference_metric('median_tpot_ms'):.1f}}/{{result.speculative_metric('median_tpot_ms'):.1f}}")
    result.assert_no_regression(metrics=["acceptance_rate", "speedup_output_throughput", "output_throughput",
                                         "median_tpot_ms"])


@gated(LOOKUP)
def test_ngram_gate(specdec):
    check(specdec)


@gated(NARROWED_LOOKUP)
def test_narrowed_ngram_gate(specdec):
    check(specdec)
"""


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "--specdec-cpu", "--specdec-repeats=2", "-p", "no:cacheprovider", "-s", *args, timeout=900
    )


def gate_lines(result) -> str:
    """The gate's own verdict lines of a pytester run, so a failing assertion says which figure moved."""
    return "\n".join(
        line
        for line in result.outlines
        if any(
            word in line
            for word in ("REGRESSION", "FAIL", "->", "regressed", "same machine", "probe", "not compared", "machine:")
        )
    )


@pytest.mark.own_servers
def test_gate_passes_unchanged_and_fails_a_slower_engine_and_a_worse_drafter(pytester, specdec_pool, monkeypatch):
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_gated=GATED_SUITE)

    monkeypatch.setenv("LOOKUP_MAX", "4")
    recorded = run(pytester, "--specdec-update-baselines")
    recorded.assert_outcomes(passed=2)
    baselines = sorted((pytester.path / "baselines").glob("*.json"))
    assert len(baselines) == 2, baselines

    # The unchanged test passes; the other, its lookup window narrowed to one token, fails on acceptance.
    with monkeypatch.context() as narrowed:
        narrowed.setenv("NARROWED_LOOKUP_MAX", "1")
        rerun = run(pytester)
    failed = [line for line in rerun.outlines if line.startswith("FAILED ")]
    assert all("::test_narrowed_ngram_gate" in line for line in failed), (
        f"the unchanged re-run failed the gate:\n{gate_lines(rerun)}"
    )
    rerun.assert_outcomes(passed=1, failed=1)
    rerun.stdout.fnmatch_lines(
        [
            "*performance regressed against the baseline of test_gated.py::test_narrowed_ngram_gate*",
            "*acceptance_rate*FAIL*",
        ]
    )

    # The same vLLM, every forward step 60 ms slower: SD's speedup rises (it takes fewer steps), and its own
    # tok/s and TPOT fall with the reference's; the gate compares them all on the same machine.
    with monkeypatch.context() as slow:
        slow.setenv("PYTHONPATH", str(SLOW_ENGINE))
        slow.setenv("SPECDEC_TEST_FORWARD_DELAY_MS", "60")
        slower = run(pytester, "-k", "not narrowed")
    assert slower.ret != 0, f"the slower engine passed the gate:\n{gate_lines(slower)}"
    slower.assert_outcomes(failed=1, deselected=1)
    slower.stdout.fnmatch_lines(
        [
            "*performance regressed against the baseline of test_gated.py::test_ngram_gate*",
            "*output_throughput (reference)*FAIL*",
        ]
    )
    slower.stdout.fnmatch_lines(
        [
            "*same machine: every gated figure compared*",
            "*the reference itself is *% slower (output_throughput*median_tpot_ms*",
        ]
    )
    assert all(baseline.exists() for baseline in baselines)
