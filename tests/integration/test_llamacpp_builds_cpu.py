"""An older llama.cpp build, launched from the same marker: the engine speaks the settings that build reads.

xllamacpp 2026.4.8929 (scripts/setup installs it into .venv-xllamacpp-2026.4) predates llama.cpp's
speculative-parameter refactor (PR #22397): one `type` and flat fields, draft-simple's p_min 0.75 by
default, and no llamacpp:spec_decode_* counters on /metrics. The same n-gram marker the main job runs
on the current build must draft and accept there too (each response's own timings say so), and the
server's version must name that build. One server start (1-3 s), four requests.
"""

from __future__ import annotations

from pathlib import Path

from pytest_specdec.config.spec import parse_specdec_marker
from pytest_specdec.engines.per_request import ACCEPTED, DRAFTED
from pytest_specdec.load.client import generate_load
from pytest_specdec.load.patterns import resolve_pattern
from pytest_specdec.load.workloads import resolve_workload
from pytest_specdec.serving.engine_facts import read_engine_facts
from pytest_specdec.serving.pool import ServerPool

ROOT = Path(__file__).resolve().parents[2]
OLDER_BUILD = ROOT / ".venv-xllamacpp-2026.4" / "bin" / "python"
BUNDLED = "specdec:smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 3}


def test_an_older_llama_cpp_build_drafts_from_the_same_marker(specdec_pool, specdec_measurements, tmp_path):
    assert OLDER_BUILD.is_file(), f"{OLDER_BUILD} is missing: scripts/setup installs the older build there"
    specdec_pool.stop_running()  # one server at a time on this machine
    spec = parse_specdec_marker((), {"model": BUNDLED, "engine": "llamacpp", "speculative_config": NGRAM})
    pool = ServerPool("cpu", tmp_path, python=str(OLDER_BUILD))
    try:
        server = pool.get(spec)
        assert server.command[:2] == [str(OLDER_BUILD), str(ROOT / "pytest_specdec" / "engines" / "llamacpp_serve.py")]
        workload = resolve_workload("code_edit", {"input_len": 256, "output_len": 32})
        pattern = resolve_pattern("throughput_low", {"num_prompts": 4})
        prompts = specdec_measurements.prompts(BUNDLED, workload, pattern, seed=0)
        run = generate_load(server.url, server.model, prompts, pattern, engine="llamacpp")
        assert all(record.success for record in run.records), [record.error for record in run.records]
        # Each response's own timings.draft_n / draft_n_accepted: drafted and accepted on this build too.
        own = [record.spec_decoding or {} for record in run.records]
        drafted, accepted = (sum(figures.get(name, 0) for figures in own) for name in (DRAFTED, ACCEPTED))
        assert drafted > 0 and 0 < accepted <= drafted, own
        assert all(record.output_tokens == 32 for record in run.records)  # ignore_eos holds on this build
        # This build keeps no llamacpp:spec_decode_* counters on /metrics: unavailable, and the page named.
        scraped = server.spec_decode_counters()
        assert not scraped.present and "llamacpp:spec_decode_" in scraped.problem
        assert read_engine_facts(server).get("version") == "xllamacpp 2026.4.8929"
    finally:
        pool.close()
