"""A pytest plugin every inner run of the logic suites loads ($PYTEST_PLUGINS, set by tests/conftest.py):
the machine probe in the session's fingerprint pinned to fixed figures.

The probe times this machine's matrix multiply, vector arithmetic and memory copy; its job is to say when a
baseline's machine performed differently.  The logic suites run on two xdist workers, so an inner session's
probe is timed while the other worker is busy or not, and two sessions of one test could disagree by half
(seen: -37% with the other core loaded), turning "speedups compared" into "not compared".  What those tests
check is the gate's logic: they give it one machine, and move the probe themselves where the probe is the
subject (tests/plugin/test_gate_machine.py).  The real-server suite (tests/integration) never loads this.
"""

import pytest

from pytest_specdec.verdict.fingerprint import PROBE_FIELD
from pytest_specdec.verdict.machine import PROBE_VERSION

PINNED = {"version": PROBE_VERSION, "matmul_gflops": 190.0, "vector_gflops": 11.0, "copy_gbps": 32.0, "spread": 0.02}


@pytest.hookimpl(wrapper=True)
def pytest_specdec_fingerprint(config, fingerprint):
    result = yield
    if isinstance(result, dict) and PROBE_FIELD in result:
        result[PROBE_FIELD] = dict(PINNED)
    return result
