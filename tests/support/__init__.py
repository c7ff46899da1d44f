"""What more than one test suite uses: strict fake servers, planted builds, inner-session helpers.

Import them by their path from the repository root (``from tests.support.fault_server import ...``); the
root is on ``sys.path`` for every suite (tests/conftest.py) and for the inner sessions pytester starts.
"""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # the folder, for the fakes that run as scripts of their own
