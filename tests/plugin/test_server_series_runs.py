"""Server series through a whole plugin run: both sides' metrics read during their runs, in the row and the report,
and a comparison flagged where SD's server queued and preempted and the reference's did not (fault servers whose
gauges follow the requests in flight; tests/integration/test_measure_cpu.py reads real vLLM servers')."""

import json

from tests.support.fault_suite import MODEL, FaultServers, run_suite

SUITE = f"""
import json, os
import pytest

URLS = json.loads(open(os.environ["FAULT_URLS"]).read())


@pytest.mark.specdec(model="{MODEL}", endpoints={{"reference": URLS["reference"], "speculative": URLS["speculative"]}},
                     speculative_config={{"method": "ngram", "num_speculative_tokens": 4}})
@pytest.mark.workload("random_s", input_len=24, output_len=16)
@pytest.mark.access_pattern("throughput_high", max_concurrency=4, num_prompts=8)
def test_loaded(specdec):
    result = specdec.run()
    print("KINDS", sorted({{flag.kind for flag in result.fairness_flags()}}))
"""


def test_both_sides_series_reach_the_row_and_a_queueing_sd_server_is_flagged(tmp_path):
    servers = FaultServers()
    try:
        urls = {"reference": servers.start("ok", chunk_s=0.05), "speculative": servers.start("queued", chunk_s=0.05)}
        (tmp_path / "test_loaded.py").write_text(SUITE)
        done = run_suite(tmp_path, urls, "--specdec-series-interval", "0.05", "--specdec-report", str(tmp_path / "r"))
    finally:
        servers.stop()
    out = done.stdout + done.stderr
    assert "1 passed" in out, out[-3000:]
    assert "KINDS ['server_load']" in out, out[-3000:]
    (row,) = json.loads((tmp_path / "r" / "results.json").read_text())["results"]
    series = row["server_series"]
    reference, speculative = series["reference"], series["speculative"]
    # Four in flight on the reference (its gauges count them all running); SD runs one and queues the rest.
    assert reference["running_peak"] >= 2 and reference["waiting_peak"] == 0 and reference["preemptions"] == 0
    assert speculative["running_peak"] == 1 and speculative["waiting_peak"] >= 1 and speculative["preemptions"] >= 8
    assert reference["samples"] >= 4 and speculative["samples"] >= 4 and reference["interval_s"] == 0.05
    assert any(flag.startswith("SD preempted") for flag in series["flags"]), series["flags"]
    assert (tmp_path / "r" / "server_series.png").read_bytes().startswith(b"\x89PNG")
    assert "What each server was doing" in (tmp_path / "r" / "summary.md").read_text()
