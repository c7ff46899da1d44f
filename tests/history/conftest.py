"""A real PostgreSQL server for the results-history store's tests.

`postgres_server` (session): one throw-away cluster per test session (per xdist worker), started by
tests/support/postgres_server.py and removed at the end.  `postgres_url` (function): a fresh, uniquely named
database on it for one test, dropped afterwards; the value is its ``postgresql://`` URL with the password.

A machine without PostgreSQL errors here (with the install command), it does not skip: these tests
are part of the suite everywhere (scripts/system-packages installs the server).
"""

import re
import secrets
import sys
from pathlib import Path

import pytest

# tests/ is on sys.path when tests/conftest.py was imported the default ("prepend") way; make sure.
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from tests.support.postgres_server import PostgresServer  # noqa: E402

from pytest_specdec.history.changepoints import OTAVA_ENV_VAR, otava_python  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def otava_for_inner_runs(monkeypatch):
    """Inner pytester runs start in a fresh folder with no .venv-otava: point them at the repository's
    (scripts/setup makes it; a missing one is an error here, not a skip)."""
    monkeypatch.setenv(OTAVA_ENV_VAR, otava_python(None, (REPO,)))


@pytest.fixture(scope="session")
def postgres_server():
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server, request):
    # The test's name makes a leftover database recognisable; the random tail makes it unique across
    # parametrised cases and reruns.  PostgreSQL names are at most 63 bytes.
    stem = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:40]
    name = f"t_{stem}_{secrets.token_hex(4)}"
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request, tmp_path):
    """A fresh, empty history of each kind: a SQLite file path, then a PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return request.getfixturevalue("postgres_url")
