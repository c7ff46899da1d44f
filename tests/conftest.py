import os
import sys
from pathlib import Path

# pytester's in-process runs drop modules first imported inside them; httpx
# maps httpcore's exceptions by class, so httpcore must be imported out here
# or a second in-process run raises httpcore errors httpx no longer knows.
import httpcore  # noqa: F401
import pytest

pytest_plugins = ["pytester"]

# pytester points HOME at each test's temporary folder, so every inner run
# would convert the bundled model again (~30 s each).  Inner runs share the
# outer session's converted model instead; tests of the cache set their own.
os.environ.setdefault("PYTEST_SPECDEC_CACHE", str(Path("~/.cache/pytest-specdec").expanduser()))


TESTS = Path(__file__).resolve().parent
# By its path from the repository root: xdist workers of an in-process inner run get the sys.path the
# interpreter started with (the root, for `python -m pytest` there), not the tests/ folder pytest added.
PINNED_PROBE_PLUGIN = "tests.support.pinned_probe"
if str(TESTS.parent) not in sys.path:  # run as `pytest` rather than `python -m pytest` from the root
    sys.path.append(str(TESTS.parent))


@pytest.fixture(autouse=True)
def _logic_suites_pin_the_machine_probe(request, monkeypatch):
    # Inner runs of the logic suites get one machine (tests/support/pinned_probe.py says why); the real-server
    # suite's sessions time the real probe: the gate's machine decisions there are part of what it proves.
    if TESTS / "integration" in request.node.path.parents:
        return
    monkeypatch.setenv(
        "PYTEST_PLUGINS", ",".join(filter(None, [os.environ.get("PYTEST_PLUGINS"), PINNED_PROBE_PLUGIN]))
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])))


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(monkeypatch):
    # Under `pytest -n 2` this process is an xdist worker and carries its variables; an inner run
    # (pytester, or a subprocess given os.environ) would read them and take itself for worker gw0
    # of two, with half the GPUs.  Each test runs with them cleared and gets them back afterwards.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
