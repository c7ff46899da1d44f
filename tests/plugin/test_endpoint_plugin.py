"""Endpoint mode's checks without vLLM: bad options, unreachable and wrong-model endpoints.

The stand-in server (tests/support/fake_server.py) only answers /v1/models and
/metrics: enough for the plugin's checks, never a measurement. Endpoint mode
against a real CPU server is in tests/integration/test_endpoint_cpu.py.
"""

import subprocess
import sys
import time

import httpx
import pytest

from pytest_specdec.serving.endpoint import ExternalServer, check_endpoints, parse_endpoint
from pytest_specdec.serving.ports import claim_port
from pytest_specdec.config.spec import MarkerError, ServerSpec, parse_specdec_marker
from tests.support import SUPPORT

FAKE = str(SUPPORT / "fake_server.py")
NGRAM = {"method": "ngram", "num_speculative_tokens": 4}

SUITE = """
import pytest

@pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
@pytest.mark.workload("random_s", input_len=16, output_len=4)
@pytest.mark.access_pattern("throughput_low", num_prompts=1)
def test_sd(specdec):
    specdec.run()
"""


@pytest.fixture
def fake_endpoint():
    """A stand-in server on a free port, started outside the plugin; yields its URL."""
    claim = claim_port("127.0.0.1")
    process = subprocess.Popen([sys.executable, FAKE, "--port", str(claim.port), "--served-model-name", "other"])
    url = f"http://127.0.0.1:{claim.port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/v1/models", timeout=1.0)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        claim.release()


def test_an_endpoint_that_does_not_answer_fails_fast_naming_the_url(pytester):
    pytester.makepyfile(test_endpoints_down=SUITE)
    began = time.monotonic()
    # No device flag: with endpoints nothing is started, so the test runs (and fails).
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--specdec-endpoint",
        "reference=http://127.0.0.1:9",
        "--specdec-endpoint",
        "speculative=http://127.0.0.1:9/v1",
    )
    assert time.monotonic() - began < 30
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the reference endpoint http://127.0.0.1:9 does not answer /v1/models*"])


def test_an_endpoint_serving_another_model_is_refused(pytester, fake_endpoint):
    pytester.makepyfile(test_endpoints_other=SUITE)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        f"--specdec-endpoint=reference={fake_endpoint}",
        f"--specdec-endpoint=speculative={fake_endpoint}",
    )
    result.assert_outcomes(failed=1)
    assert f"the reference endpoint {fake_endpoint} serves ['other'], not 'm'" in result.stdout.str()


def test_sd_counters_come_from_the_endpoints_metrics_or_are_unavailable(fake_endpoint):
    spec = ServerSpec("other", NGRAM, endpoints=(("reference", fake_endpoint), ("speculative", fake_endpoint)))
    server = ExternalServer(spec, "speculative", fake_endpoint).check()
    assert server.spec_decode_counters().present and server.spec_decode_counters().num_drafts == 5
    elsewhere = ExternalServer(ServerSpec("m", NGRAM), "speculative", fake_endpoint)
    assert not elsewhere.spec_decode_counters().present  # the endpoint has no counters for 'm': unavailable


@pytest.mark.parametrize(
    "args, message",
    [
        (["--specdec-endpoint", "reference=http://127.0.0.1:8000"], "*missing speculative*"),
        (["--specdec-endpoint", "draft=http://x:1"], "*expected reference=URL or speculative=URL*"),
        (["--specdec-endpoint", "reference=localhost:8000"], "*an endpoint is an http:// or https:// base URL*"),
    ],
)
def test_bad_endpoint_options_are_usage_errors(pytester, args, message):
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_marker_endpoints_are_checked_and_part_of_the_identity():
    spec = parse_specdec_marker(
        (),
        {
            "model": "m",
            "speculative_config": NGRAM,
            "endpoints": {"reference": "http://ref:8000/", "speculative": "https://sd.example:443/v1"},
        },
    )
    assert spec.endpoint == "https://sd.example:443" and spec.reference().endpoint == "http://ref:8000"
    assert spec.label().endswith("@ https://sd.example:443")
    assert spec.key != ServerSpec("m", NGRAM).key
    assert (
        ServerSpec("m", NGRAM).key == '{"model":"m","server_args":[],"speculative_config":'
        '{"method":"ngram","num_speculative_tokens":4},"tensor_parallel_size":1}'
    )  # unchanged without endpoints
    with pytest.raises(MarkerError, match="endpoints: needs exactly the keys reference, speculative; missing"):
        parse_specdec_marker((), {"model": "m", "endpoints": {"reference": "http://a:1"}})
    with pytest.raises(ValueError, match="http:// or https://"):
        check_endpoints({"reference": "ftp://a", "speculative": "http://b:1"})
    assert parse_endpoint("speculative=http://h:1/") == ("speculative", "http://h:1")
