"""The regression gate on a real CPU engine, with regressions of known kind, and the drift it learns from a
results history.

One test, seven pytest runs of a suite of two tests, each with a baseline, every run recorded into one
results history (--specdec-history): record both with n-gram SD on llama.cpp (k=4, 3-token n-grams: 62% of
draft tokens accepted on these code edits); record the unchanged one four times more, so the history holds
five sessions of it; re-run one unchanged (green, its speedup gated with the drift learned from those five
sessions, and saying so) while the other narrows its n-gram to one token (24% accepted), which the gate
fails on acceptance (one run, one reference server for both; its own drift the built-in figure, labelled,
with one session in the history); then run the unchanged test on the same llama.cpp made uniformly slower
(one thread where it used one per core, prompts prefilled a token a step and a sampler that sorts the whole
vocabulary, the same greedy tokens, set behind the command line by tests/support/planted_build.py's
sitecustomize, which the servers load from PYTHONPATH: an engine change the plugin cannot see, not even in
the build's path, on the same machine), which fails naming the reference's own slowdown, with the drift
learned from six sessions.

The engine is llama.cpp because what this test proves is the plugin's gate
(baselines, machine identity, the reference's own figures, the verdict
lines), not an engine's internals: its server starts are 1-2 s each,
where vLLM's CPU build took 25-35 s a start and the test 373-392 s (41-50 s
a session here on llama.cpp).  vLLM's figures go through the same gate in
the README's main job (examples/cpu's baselines).

The suite gates tok/s and TPOT at 30%, as docs/writing-tests.md tells users
of shared CPU boxes to, not at the 10% default: between two sessions of this
test with nothing changed, vLLM's reference median TPOT moved by up to 21% in
a repeat pair (2026-11-26, 2-core boxes) while the machine probe moved 1-2%:
drift within the probe's 20% band, which the gate cannot tell from the
engine.  The planted slowdown must move the reference's tok/s past the 30%
band and the drift together: one thread alone moved it 36-43% here but 28.8%
in one CI run, hence the two costs beside it.
"""

import json

import pytest

from pytest_specdec.verdict.detection import SESSION_DRIFT
from tests.support.planted_build import PLANTED_CHANGES_ENV, SD_SLOWER, planted_site

# Every forward step slower, the reference's and SD's alike: llama.cpp on one thread for decoding and prompts.
ONE_THREAD = {"cpuparams.n_threads": 1, "cpuparams_batch.n_threads": 1}
# One thread alone slowed the reference's tok/s by 36-43% in the runs here, but by 28.8% in a CI run on
# 2026-11-28, inside the suite's 30% band: how much a second thread buys depends on the box.  Two more
# costs, neither of which changes a greedy token or a draft, put it far past the band on any box: a physical
# batch of one token (`n_ubatch`, 512 by default: every prompt prefilled a token a step, SD's verification
# split likewise) and sampling through the whole vocabulary (tests/support/planted_build.py's SD_SLOWER chain,
# keeping all 49,152 candidates).  Here, each beside one thread: 42.5-43.2% with the sampler, 50.8% with the
# batch, 53.3% with both.
ENGINE_SLOWER = {**ONE_THREAD, "n_ubatch": 1, **SD_SLOWER, "sampling.min_keep": 49152}

BUNDLED = "specdec:smollm2-135m"
EXTRA_SESSIONS = 4  # recorded after the first: five sessions of the unchanged test before its first gate
BUILT_IN_DRIFT = SESSION_DRIFT["speedup"]

GATED_SUITE = f"""
import os
import pytest

NGRAM_SIZE = int(os.environ["NGRAM_SIZE"])
NARROWED_NGRAM_SIZE = int(os.environ.get("NARROWED_NGRAM_SIZE", NGRAM_SIZE))


def gated(size):
    # llama.cpp matches one n-gram length: the lookup window is one size, not a range.
    ngram = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": size, "prompt_lookup_min": size}}

    def mark(test):
        for marker in (
            pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp", speculative_config=ngram),
            pytest.mark.workload("code_edit", input_len=128, output_len=32),
            pytest.mark.access_pattern("throughput_low", num_prompts=3),
            pytest.mark.specdec_tolerance(output_throughput=0.3, median_tpot_ms=0.3),
        ):
            test = marker(test)
        return test
    return mark


def check(specdec):
    result = specdec.run()
    # What this suite gates is acceptance, the speedup, tok/s and TPOT; n-gram does not touch prefill, and two
    # llama.cpp threads prefilling on a busy 2-core box can spread TTFT past its flag by themselves, which then
    # kept the recording from storing a baseline (docs/benchmarks.md).  The flag stays named in the row; the
    # speedup is compared (tests/support/builds_sessions.py accepts it for the same reason).
    result.accept_flags("ttft_at_concurrency_1")
    print(f"acceptance_rate={{result.acceptance_rate:.3f}} speedup={{result.speedup():.3f}} "
          f"tpot={{result.reference_metric('median_tpot_ms'):.1f}}/{{result.speculative_metric('median_tpot_ms'):.1f}}")
    result.assert_no_regression(metrics=["acceptance_rate", "speedup_output_throughput", "output_throughput",
                                         "median_tpot_ms"])


@gated(NGRAM_SIZE)
def test_ngram_gate(specdec):
    check(specdec)


@gated(NARROWED_NGRAM_SIZE)
def test_narrowed_ngram_gate(specdec):
    check(specdec)
"""


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "--specdec-cpu",
        "--specdec-repeats=2",
        "-p",
        "no:cacheprovider",
        "-s",
        f"--specdec-report={pytester.path / 'report'}",
        *args,
        timeout=900,
    )


def drift_of(pytester, test: str) -> dict:
    """The drift the last session's gate used for `test`'s speedup, as its results.json row gives it."""
    rows = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    (row,) = [row for row in rows if row["test"].endswith(f"::{test}")]
    return row["drift"]["speedup_output_throughput"]


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
def test_gate_passes_unchanged_and_fails_a_slower_engine_and_a_worse_drafter(
    pytester, specdec_pool, monkeypatch, tmp_path
):
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_gated=GATED_SUITE)

    monkeypatch.setenv("NGRAM_SIZE", "3")
    # Every session goes into one results history: its sessions of the unchanged test on this machine and build
    # are what the gate learns that test's drift from (verdict.learned_drift), once it holds three.
    history = f"--specdec-history={tmp_path / 'history.db'}"
    recorded = run(pytester, "--specdec-update-baselines", history)
    recorded.assert_outcomes(passed=2)
    baselines = sorted((pytester.path / "baselines").glob("*.json"))
    assert len(baselines) == 2, baselines
    # Four more sessions of the unchanged test, recorded as its baseline each time rather than gated: a
    # history of five sessions before the first gate, which no false alarm of a gate can cut short.
    for _ in range(EXTRA_SESSIONS):
        run(pytester, "-k", "not narrowed", "--specdec-update-baselines", history).assert_outcomes(
            passed=1, deselected=1
        )

    # The unchanged test passes; the other, its n-gram narrowed to one token, fails on acceptance.
    with monkeypatch.context() as narrowed:
        narrowed.setenv("NARROWED_NGRAM_SIZE", "1")
        rerun = run(pytester, history)
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
    # The unchanged test's gate used the drift its own five earlier sessions show, and said so; the narrowed
    # test, one session in the history, fell back on the built-in figure, labelled.
    learned = drift_of(pytester, "test_ngram_gate")
    # Five sessions since the newest change point, fewer only where Otava found one among them (never below
    # the three a figure is learned from).
    assert learned["source"] == "history" and 3 <= learned["sessions"] <= 1 + EXTRA_SESSIONS, learned
    print(f"learned drift of the speedup: {learned['describe']} (the built-in figure: {BUILT_IN_DRIFT:.1%})")
    rerun.stdout.fnmatch_lines([f"*drift {learned['value']:.1%} (history: {learned['sessions']} sessions*"])
    fallback = drift_of(pytester, "test_narrowed_ngram_gate")
    assert fallback["source"] == "built-in" and "3 needed" in fallback["note"], fallback

    # The same llama.cpp on one thread, prefilling a token a step, sampling through the whole vocabulary:
    # every run slower, SD's tok/s and TPOT fall with the reference's; the gate compares them all on the
    # same machine and names the reference's own slowdown.
    with monkeypatch.context() as slow:
        slow.setenv("PYTHONPATH", str(planted_site(tmp_path)))
        slow.setenv(PLANTED_CHANGES_ENV, json.dumps(ENGINE_SLOWER))
        slower = run(pytester, "-k", "not narrowed", history)
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
            # One thread slows prefill and decoding unequally: the line names the reference's figures that moved
            # past their 30% tolerance; its tok/s, which holds both, always does (ENGINE_SLOWER), its median
            # TPOT not in every run (a CI run, 2026-11-28, named tok/s alone).
            "*the reference itself is *% slower (output_throughput*",
        ]
    )
    # Gated with the drift learned from all six sessions, the slower engine still fails.
    learned = drift_of(pytester, "test_ngram_gate")
    assert learned["source"] == "history" and 3 <= learned["sessions"] <= 2 + EXTRA_SESSIONS, learned
    print(f"learned drift, slower engine's gate: {learned['describe']}")
    slower.stdout.fnmatch_lines([f"*drift {learned['value']:.1%} (history: {learned['sessions']} sessions*"])
    assert all(baseline.exists() for baseline in baselines)
