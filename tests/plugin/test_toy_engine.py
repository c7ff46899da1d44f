"""Adding an engine is one module: a toy engine from tests/support/toy_engine.py, registered by a conftest with one
call, measured end to end against a fault server speaking it, with nothing of pytest_specdec/ touched."""

import shutil

from tests.support.fault_suite import ENGINE_SUITE, FaultServers, run_suite
from tests.support import SUPPORT

TOY_ENGINE = SUPPORT / "toy_engine.py"

CONFTEST = """
from pytest_specdec.engines import register_engine

register_engine("toy", "toy_engine")
"""


def test_a_toy_engine_from_one_file_runs_a_plugin_test_end_to_end(tmp_path, monkeypatch):
    shutil.copyfile(TOY_ENGINE, tmp_path / "toy_engine.py")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_engine.py").write_text(ENGINE_SUITE)  # the suite every engine's formats are run with
    monkeypatch.setenv("FAULT_ENGINE", "toy")
    monkeypatch.setenv("FAULT_NGRAM", "{}")
    servers = FaultServers()
    try:
        urls = {"reference": servers.start("ok", dialect="toy"), "speculative": servers.start("ok", dialect="toy")}
        done = run_suite(tmp_path, urls)
    finally:
        servers.stop()
    out = done.stdout + done.stderr
    assert "1 passed" in out, out[-4000:]
    # 8 tokens a request: 4 steps of 4 drafts accepting 4 in all (25%), summed from the toy's own `toy_sd`
    # fields (it has no metrics page); every request's ids arrived under the toy's name for them, and its own
    # request field was sent (the toy server refuses a request without it).
    line = next(line for line in out.splitlines() if "FIGURES " in line)
    assert (
        "FIGURES acceptance=0.250 drafted=[{'num_spec_steps': 4, 'num_draft_tokens': 16, "
        "'num_accepted_draft_tokens': 4}" in line
    )
    assert "counted=64.0 ids=[8, 8, 8, 8] match=1.000" in line
