"""A pytest plugin every inner run of the logic suites loads ($PYTEST_PLUGINS, set by tests/conftest.py):
the machine probe in the session's fingerprint pinned to fixed figures, and one draw a configuration unless
the test asks for more.

The probe times this machine's matrix multiply, vector arithmetic and memory copy; its job is to say when a
baseline's machine performed differently.  The logic suites run on two xdist workers, so an inner session's
probe is timed while the other worker is busy or not, and two sessions of one test could disagree by half
(seen: -37% with the other core loaded), turning "speedups compared" into "not compared".  What those tests
check is the gate's logic: they give it one machine, and move the probe themselves where the probe is the
subject (tests/plugin/test_gate_machine.py).  The real-server suite (tests/integration) never loads this.

The gate times the probe again when it disagrees with a baseline's (verdict.gate.BaselineSession.probe_again):
that timing is pinned too.  With $SPECDEC_TEST_PROBE_BURST set to a factor, the session's first timing reads
that much of the pinned figures (a neighbour's burst during it) and the timing again reads them whole.
"""

import os

import pytest

import pytest_specdec.session
from pytest_specdec.verdict.fingerprint import PROBE_FIELD
from pytest_specdec.verdict.machine import PROBE_FIGURES, PROBE_VERSION

PINNED = {"version": PROBE_VERSION, "matmul_gflops": 190.0, "vector_gflops": 11.0, "copy_gbps": 32.0, "spread": 0.02}


@pytest.hookimpl(wrapper=True)
def pytest_specdec_fingerprint(config, fingerprint):
    result = yield
    if isinstance(result, dict) and PROBE_FIELD in result:
        burst = float(os.environ.get("SPECDEC_TEST_PROBE_BURST") or 1)
        result[PROBE_FIELD] = {**PINNED, **{name: PINNED[name] * burst for name in PROBE_FIGURES}}
    return result


_real_run_probe = pytest_specdec.session.run_probe


@pytest.hookimpl(tryfirst=True)  # before the plugin resolves its settings
def pytest_configure(config):
    # The inner runs of pytester share this interpreter: patched for the inner session only, and given back.
    pytest_specdec.session.run_probe = lambda *args, **kwargs: dict(PINNED)
    # One draw a configuration, as these inner runs were written for, unless a test asks (--specdec-repeats
    # auto or N, or its ini): a second draw on every fake would only add time to the logic suites.
    if config.getoption("specdec_repeats", None) is None and not config.getini("specdec_repeats"):
        config.option.specdec_repeats = 1


def pytest_unconfigure(config):
    pytest_specdec.session.run_probe = _real_run_probe
