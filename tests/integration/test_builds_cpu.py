"""Two llama.cpp builds measured side by side (--specdec-baseline-from build:PATH), on real servers.

Two pytest runs of one small suite, each server ready in 1-3 s:

- xllamacpp 2026.10 (this environment) against 2026.4 (scripts/setup's
  .venv-xllamacpp-2026.4), a draft model left at each build's own p_min
  (``p_min: None``): 2026.4 stops a draft at the first token under 0.75
  probability, 2026.10 drafts all k.  The same marker launches both (the older
  build's flat settings, its lack of spec_decode counters); the verdict names
  both versions and what moved: acceptance, speedup.
- A planted regression (tests/support/planted_build.py): this very build behind a
  wrapper that cuts the n-gram draft from four tokens to three, against the real build.
  Nothing in the marker or the version says so; acceptance length falls, and
  the gate fails naming both builds.
- The real build against itself (A/A) is tests/integration/test_builds_sequential_cpu.py's: it passes the
  speedup gate there, with the same acceptance on both sides, draw for draw.

The suite gates acceptance only: on one build, greedy decoding of the same
prompts accepts the same drafts whatever the machine's speed, so these runs
cannot false-alarm on noise.  Its prompts are 32 random tokens: what is
compared is how each build drafts, which short prompts show as well as long
ones, and a long prompt's prefill was most of every warm-up and run.
benchmarks/build_ab.py measures the gate with speedups and latencies too, ten
times each way, and docs/upgrading.md has its rates.
"""

import json
import sys
from pathlib import Path

import pytest

from tests.support.planted_build import plant

ROOT = Path(__file__).resolve().parents[2]
OLDER_BUILD = ROOT / ".venv-xllamacpp-2026.4" / "bin" / "python"
BUNDLED = "specdec:smollm2-135m"

SUITE = f"""
import pytest

NGRAM = {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 3}}
DRAFT = {{"method": "draft_model", "model": "{BUNDLED}@layers=16", "num_speculative_tokens": 4, "p_min": None}}


@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp", speculative_config=NGRAM)
@pytest.mark.workload("random_s", input_len=32, output_len=48)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_ngram(specdec):
    result = specdec.run()
    result.assert_no_regression(metrics=["acceptance_rate", "acceptance_length"])


@pytest.mark.specdec(model="{BUNDLED}", engine="llamacpp", speculative_config=DRAFT)
@pytest.mark.workload("random_s", input_len=32, output_len=24)
@pytest.mark.access_pattern("throughput_low", num_prompts=3)
def test_draft_default_p_min(specdec):
    result = specdec.run()
    # 2026.4 counts no steps (no spec_decode counters, no per-request step count): its length is unavailable.
    result.assert_no_regression(metrics=["acceptance_rate", "acceptance_length"],
                                allow_unavailable=["acceptance_length"])
"""


def run(pytester, report, *args):
    return pytester.runpytest_subprocess(
        "--specdec-cpu",
        "--specdec-repeats=2",
        "-p",
        "no:cacheprovider",
        f"--specdec-report={report}",
        *args,
        timeout=900,
    )


def builds_of(report: Path) -> dict:
    rows = json.loads((report / "results.json").read_text())["results"]
    return {row["test"].split("::")[-1]: row["builds"] for row in rows}


@pytest.mark.own_servers
def test_two_builds_side_by_side_and_a_planted_regression(pytester, specdec_pool, tmp_path):
    assert OLDER_BUILD.is_file(), f"{OLDER_BUILD} is missing: scripts/setup installs the older build there"
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_builds=SUITE)
    this_build = sys.executable  # the environment the suite runs in: xllamacpp 2026.10

    # 1. 2026.10 against 2026.4, on the draft left at each build's p_min default.
    older = run(pytester, tmp_path / "older", "-k", "draft", f"--specdec-baseline-from=build:{OLDER_BUILD}")
    text = older.stdout.str()
    draft = builds_of(tmp_path / "older")["test_draft_default_p_min"]
    assert draft["baseline"]["version"] == "xllamacpp 2026.4.8929", draft["baseline"]
    assert draft["this"]["version"].startswith("xllamacpp 2026.10"), draft["this"]
    assert draft["order"] == "A B B A"
    rate = draft["figures"]["acceptance_rate"]
    # p_min 0.75 keeps only confident drafts: 2026.4 accepts a larger share of fewer drafted tokens.
    assert rate["this"] is not None and rate["baseline"] is not None and rate["this"] < rate["baseline"], rate
    assert draft["figures"]["acceptance_length"]["baseline"] is None  # no step counts on 2026.4: unavailable
    assert draft["figures"]["speedup_output_throughput"]["change"] is not None
    assert "summed each response's own SD figures instead" in text  # 2026.4's /metrics keeps no SD totals
    assert "performance regressed against the baseline build" in text and "acceptance_rate" in text, text
    assert "xllamacpp 2026.4.8929" in text and "A B B A" in text
    assert "specdec builds: this build (A) against the baseline build (B)" in text
    older.assert_outcomes(failed=1, deselected=1)

    # 2. The planted build (n-gram drafts cut to three tokens) against the real one: acceptance length falls.
    planted = plant(this_build, tmp_path / "planted-env")
    worse = run(
        pytester,
        tmp_path / "planted",
        "-k",
        "ngram",
        f"--specdec-build={planted}",
        f"--specdec-baseline-from=build:{this_build}",
    )
    ngram = builds_of(tmp_path / "planted")["test_ngram"]
    length = ngram["figures"]["acceptance_length"]
    drafted = ngram["figures"]["drafted_per_step"]
    assert drafted["this"] <= 3.0 < drafted["baseline"], drafted  # three drafted tokens per step at most
    assert length["this"] < length["baseline"], length
    assert length["change"] < 0 and length["ci"] is not None and length["ci"][1] < 0, length
    assert ngram["this"]["path"] == str(planted) and ngram["baseline"]["path"] == this_build
    assert "performance regressed against the baseline build of test_builds.py::test_ngram" in worse.stdout.str()
    worse.assert_outcomes(failed=1, deselected=1)
