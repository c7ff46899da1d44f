"""A sweep's frontier gated through the plugin: recorded with --specdec-update-baselines into the test's own baseline
file, compared by the next session, and the gate's figures in the test's report rows."""

import json

from tests.support.fault_suite import MODEL, FaultServers, run_suite

SUITE = f"""
import json, os
import pytest

URLS = json.loads(open(os.environ["FAULT_URLS"]).read())


@pytest.mark.specdec(model="{MODEL}", speculative_config={{"method": "ngram", "num_speculative_tokens": 4}},
                     endpoints={{"reference": URLS["reference"], "speculative": URLS["speculative"]}})
@pytest.mark.workload("random_s", input_len=24, output_len=24)
def test_frontier(specdec):
    sweep = specdec.sweep([1, 2], num_prompts=4)
    sweep.assert_no_regression()
"""


def test_a_sweeps_frontier_is_recorded_then_compared_and_reported(tmp_path):
    (tmp_path / "test_frontier.py").write_text(SUITE)
    servers = FaultServers()
    try:
        # Chunks 10 ms apart and outputs of 24 tokens, so every request streams over several reads: a stream that
        # arrives in one read has no TPOT, so no operating point (refused by name, as an unavailable figure).
        urls = {"reference": servers.start("ok", chunk_s=0.01), "speculative": servers.start("ok", chunk_s=0.01)}
        recorded = run_suite(tmp_path, urls, "--specdec-update-baselines")
        compared = run_suite(tmp_path, urls, "--specdec-report", str(tmp_path / "report"))
    finally:
        servers.stop()
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    (path,) = (tmp_path / "baselines").glob("test_frontier*.json")
    stored = json.loads(path.read_text())
    assert stored["test_id"] == "test_frontier.py::test_frontier"
    assert set(stored["repeats"][0]["speculative"]) == {"per_gpu_c1", "per_gpu_c2", "per_user_c1", "per_user_c2"}
    assert [level["max_concurrency"] for level in stored["config"]["pattern"]["levels"]] == [1, 2]
    # The fakes' timing is this machine's, beside other work: the comparison is the point, not its outcome.
    assert compared.returncode in (0, 1), compared.stdout[-3000:]
    rows = json.loads((tmp_path / "report" / "results.json").read_text())["results"]
    assert len(rows) == 2  # a row per level, each carrying the test's gate
    for row in rows:
        assert row["regression"] in ("passed", "failed"), row["regression"]
        figures = {figure["figure"] for figure in row["regression_figures"]}
        assert {"per_gpu_c1", "per_gpu_c2 (reference)", "per_user_c2"} <= figures, figures
