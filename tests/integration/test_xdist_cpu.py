"""pytest-xdist with two workers on real CPU servers: each configuration starts once.

Two SD configurations of one target (and its reference) under ``-n 2`` with
two repeats: the plugin schedules a target's tests onto one worker, so the
reference and each SD server start exactly once in the whole run, the
reference is measured once (both repeats kept) and shared by both
configurations, and the results reach one report on the controller.  (A
serial run of the same kind is the README's main job, checked by
``test_examples_cpu.py``: it used to have a test of its own here, four more
server starts for the same promise.)

On llama.cpp: which worker runs a target and how often its servers start is
the plugin's scheduling, the same for every engine, and a llama.cpp server is
ready in 1-3 s where a vLLM CPU one takes 25-35 s (this test took ~130 s of
CI on vLLM).  The two configurations are n-gram drafting 3 and 4 tokens.
"""

import json

import pytest

MODEL = "specdec:smollm2-135m"

SUITE = f"""
import json, os, pytest

CONFIGS = {{
    "ngram3": {{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 3}},
    "ngram4": {{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 3}},
}}

@pytest.mark.workload("code_edit", input_len=96, output_len=16)
@pytest.mark.access_pattern("throughput_low", num_prompts=2)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.specdec(
    model="{MODEL}", engine="llamacpp", speculative_config=c)) for n, c in CONFIGS.items()])
def test_config(specdec, specdec_pool, specdec_measurements, name):
    result = specdec.run()
    assert result.counters.num_drafts > 0
    assert [run.repeat for run in result.reference_runs] == [0, 1]  # --specdec-repeats=2 keeps both
    assert [run.repeat for run in result.speculative_runs] == [0, 1]
    with open(f"starts-{{name}}.json", "w") as f:
        json.dump({{"worker": os.environ.get("PYTEST_XDIST_WORKER"),
                   "starts": [r.spec.label() for r in specdec_pool.history],
                   "resumes": sum(specdec_pool.resumes.values()),
                   "reference_started_at": result.reference_runs[0].started_at,
                   "remeasures": sum(specdec_measurements.remeasures.values()),
                   "reference_measurements": list(specdec_measurements.reference_measurements.values())}}, f)
"""


@pytest.mark.own_servers
def test_two_workers_start_each_configuration_once(pytester, specdec_pool):
    specdec_pool.stop_running()  # one server at a time on this machine
    pytester.makepyfile(test_xdist_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "--specdec-cpu",
        "-n",
        "2",
        "--specdec-repeats=2",
        "-p",
        "no:cacheprovider",
        "--specdec-report",
        "report",
        timeout=900,
    )
    result.assert_outcomes(passed=2)
    records = [json.loads((pytester.path / f"starts-{name}.json").read_text()) for name in ("ngram3", "ngram4")]
    assert records[0]["worker"] == records[1]["worker"]  # one target: one worker
    starts = max((r["starts"] for r in records), key=len)  # the later test saw every start of its worker
    # reference, ngram3, ngram4: started once each, plus both sides again for a comparison measured again before
    # any verdict (a client-bound run under two workers on two cores is): resumed from parking, or started
    # again where the worker's pool had stopped one (serving.pool)
    remeasures = max(r["remeasures"] for r in records)
    resumes = max(r["resumes"] for r in records)
    assert len(starts) + resumes == 3 + 2 * remeasures and len(set(starts)) == 3, (starts, resumes)
    # The reference was measured once, before the first SD server, and both tests compared with those very runs;
    # a comparison measured again replaces the shared reference with its new runs (as test_measure_cpu.py
    # allows), and then the later test compared with runs started after the first test's.
    first, later = sorted(records, key=lambda r: len(r["starts"]))
    if later["remeasures"] == 0:
        assert first["reference_started_at"] == later["reference_started_at"]
    else:
        assert later["reference_started_at"] >= first["reference_started_at"], records
    assert all(r["reference_measurements"] == [1] for r in records), records
    rows = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    assert sorted((row["engine"], row["method"], row["k"]) for row in rows) == [
        ("llamacpp", "ngram", 3),
        ("llamacpp", "ngram", 4),
    ]
