"""What the engines' own sources say, checked: served names, readiness, flags a test may not set, statistics
that drain, and acceptance that is not vLLM's (issue: every engine as its own source says it is)."""

import json
import sys
from pathlib import Path

import pytest

from pytest_specdec.config.spec import MarkerError, ServerSpec, parse_specdec_marker
from pytest_specdec.engines import LaunchRequest, engine_named
from pytest_specdec.engines import trtllm
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.serving.engine_facts import read_engine_facts
from pytest_specdec.serving.ports import claim_port
from pytest_specdec.serving.server import ManagedServer
from tests.support import SUPPORT

FAKE = str(SUPPORT / "fake_server.py")


def test_vllms_short_name_for_the_speculative_config_is_reserved():
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker((), {"model": "m", "server_args": ["-sc", '{"method": "ngram"}']})
    assert refused.value.field == "server_args" and "-sc" in str(refused.value)


def test_sglang_refuses_adaptive_k_which_its_histogram_does_not_record():
    with pytest.raises(MarkerError) as refused:
        parse_specdec_marker(
            (),
            {
                "model": "m",
                "engine": "sglang",
                "server_args": ["--speculative-adaptive"],
                "speculative_config": {"method": "eagle3", "model": "d", "num_speculative_tokens": 3},
            },
        )
    assert refused.value.field == "server_args" and "--speculative-adaptive" in str(refused.value)


def test_a_row_says_when_its_engines_acceptance_is_not_vllms():
    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    sglang = row_for(
        "t.py::test_a",
        parse_specdec_marker((), {"model": "m", "engine": "sglang", "speculative_config": ngram}),
        {},
        {},
        outcome="passed",
    )
    assert "zero padding" in sglang["acceptance_note"] and "shares one n-gram cache" in sglang["acceptance_note"]
    vllm = row_for(
        "t.py::test_b", parse_specdec_marker((), {"model": "m", "speculative_config": ngram}), {}, {}, outcome="passed"
    )
    assert vllm["acceptance_note"] is None


def launch(model_path, tmp_path, engine="trtllm"):
    spec = parse_specdec_marker((), {"model": "nvidia/Llama-3.1-8B", "engine": engine})
    return LaunchRequest(spec, "gpu", "127.0.0.1", 8000, str(model_path), None, None, work_dir=str(tmp_path))


def test_trtllm_serves_a_local_directory_under_its_basename(tmp_path):
    directory = tmp_path / "llama-3.1-8b-fp8"
    directory.mkdir()
    engine = engine_named("trtllm")
    assert engine.served_name(launch(directory, tmp_path)) == "llama-3.1-8b-fp8"
    assert engine.served_name(launch("nvidia/Llama-3.1-8B", tmp_path)) == "nvidia/Llama-3.1-8B"  # a hub id: as given
    assert engine_named("vllm").served_name(launch(directory, tmp_path, "vllm")) == "nvidia/Llama-3.1-8B"


def test_readiness_waits_for_the_name_the_engine_serves(tmp_path):
    # A server that lists only the basename: ready under that name, where the marker's name never appears.
    claim = claim_port()
    command = [sys.executable, FAKE, "--port", str(claim.port), "--served-model-name", "llama-3.1-8b-fp8"]
    server = ManagedServer(
        ServerSpec("nvidia/Llama-3.1-8B"),
        command,
        claim,
        "127.0.0.1",
        tmp_path / "server.log",
        startup_timeout=20.0,
        stop_timeout=5.0,
        served_name="llama-3.1-8b-fp8",
    )
    server.start()
    try:
        assert server.model == "llama-3.1-8b-fp8" and server.served_names == ("llama-3.1-8b-fp8",)
    finally:
        server.stop()


def test_trtllm_engine_facts_never_read_the_metrics_queue_the_counters_drain():
    class Server:
        spec = ServerSpec("m", engine="trtllm")
        url = "http://127.0.0.1:9"  # nothing listens: the version is simply not found
        log_path = None
        command = []

        def metrics(self):
            raise AssertionError("/metrics read for facts: it would drain trtllm-serve's iteration stats")

    assert read_engine_facts(Server(), timeout=0.5) == {}


def test_a_full_iteration_stats_queue_is_not_summed_as_if_complete(monkeypatch):
    monkeypatch.setattr(trtllm, "ITER_STATS_CAP", 3)
    entry = {"specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 1, "numRequestsWithDraftTokens": 1}}
    full = trtllm.iteration_counters([entry] * 3, "http://h/metrics")
    assert not full.present and "the whole queue" in full.problem and "iter_stats_max_iterations=3" in full.problem
    assert trtllm.iteration_counters([entry] * 2, "http://h/metrics").num_draft_tokens == 6
    options = json.loads(next(iter(engine_named("trtllm").launch_files(launch("m", Path("/tmp"))).values())))
    assert options["iter_stats_max_iterations"] == 3  # the cap the server is told is the one checked
