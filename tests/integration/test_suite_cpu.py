"""A whole suite in its own pytest run: 3 SD configs x 1 workload x 1 pattern.

Four servers start (the reference and one per SD config) and the reference
is measured once (two repeats, both kept), shared by all three tests.
"""

import json

BUNDLED = "specdec:smollm2-135m"

SUITE = f"""
import json, pytest

CONFIGS = {{
    "ngram_k2": {{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 2}},
    "suffix": {{"method": "suffix", "num_speculative_tokens": 3}},
    "draft": {{"method": "draft_model", "model": "{BUNDLED}@layers=4", "num_speculative_tokens": 2}},
}}

def record(name, specdec, specdec_pool, specdec_measurements):
    result = specdec.run()
    assert result.counters.num_drafts > 0
    assert [run.repeat for run in result.reference_runs] == [0, 1]  # --specdec-repeats=2 keeps both
    assert [run.repeat for run in result.speculative_runs] == [0, 1]
    with open("suite.jsonl", "a") as f:
        f.write(json.dumps({{
            "test": name,
            "speedup": result.speedup(),
            "reference_started_at": result.reference_runs[0].started_at,
            "starts": sum(specdec_pool.starts.values()),
            "reference_measurements": dict(specdec_measurements.reference_measurements),
        }}) + "\\n")

@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"], speculative_config=CONFIGS["ngram_k2"])
@pytest.mark.workload("code_edit", input_len=96, output_len=16)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_ngram(specdec, specdec_pool, specdec_measurements):
    record("ngram", specdec, specdec_pool, specdec_measurements)

@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"], speculative_config=CONFIGS["suffix"])
@pytest.mark.workload("code_edit", input_len=96, output_len=16)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_suffix(specdec, specdec_pool, specdec_measurements):
    record("suffix", specdec, specdec_pool, specdec_measurements)

@pytest.mark.specdec(model="{BUNDLED}", server_args=["--enforce-eager"], speculative_config=CONFIGS["draft"])
@pytest.mark.workload("code_edit", input_len=96, output_len=16)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
def test_draft(specdec, specdec_pool, specdec_measurements):
    record("draft", specdec, specdec_pool, specdec_measurements)
"""


def test_three_configs_start_four_servers_and_measure_the_reference_once(pytester, specdec_pool):
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "--specdec-cpu", "--specdec-repeats=2", "-p", "no:cacheprovider", "-v", timeout=1200
    )
    result.assert_outcomes(passed=3)
    rows = [json.loads(line) for line in (pytester.path / "suite.jsonl").read_text().splitlines()]
    assert [row["test"] for row in rows] == ["ngram", "suffix", "draft"]
    assert [row["starts"] for row in rows] == [2, 3, 4]  # reference + ngram, then one more per config
    assert all(row["reference_measurements"] == rows[0]["reference_measurements"] for row in rows)
    assert list(rows[-1]["reference_measurements"].values()) == [1]
    assert len({row["reference_started_at"] for row in rows}) == 1  # the very same reference runs
    started = [line for line in result.stdout.lines if line.startswith("[specdec] starting vLLM")]
    assert len(started) == 4, "\n".join(started)
