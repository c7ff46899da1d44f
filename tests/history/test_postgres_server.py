"""The PostgreSQL server the history store's tests run against (tests/support/postgres_server.py)."""

import os
import pwd
import shutil
import socket
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

import tests.support.postgres_server as pgmod
from tests.support.postgres_server import PostgresNotInstalled, PostgresServer, PostgresStartError


def _gone(pid):
    """True when no process of the group postgres led is left."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _uid_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def _port_is_free(port):
    # SO_REUSEADDR: a connection's TIME_WAIT does not count, a listening socket does.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


@pytest.fixture
def base_dir():
    """An empty folder for a server's temporary folder, which the postgres user can reach when we are root.

    (pytest's tmp_path sits under a root-only folder.)"""
    path = Path(tempfile.mkdtemp(prefix="pytest-specdec-pg-base-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def no_password_sources(monkeypatch, tmp_path):
    # libpq would otherwise take a password from the environment or ~/.pgpass.
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def test_the_fixture_runs_a_real_server_on_loopback_only(postgres_server):
    assert postgres_server.running
    assert postgres_server.data_dir.is_dir()
    with psycopg.connect(postgres_server.url()) as conn:
        version, listen, user = conn.execute(
            "select current_setting('server_version_num')::int, current_setting('listen_addresses'), current_user"
        ).fetchone()
    assert version >= 100000
    assert listen == "127.0.0.1"
    assert user == postgres_server.user
    # postgres refuses to run as root: as root it runs as the postgres system user.
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert _uid_of(postgres_server.pid) == expected


def test_postgres_url_is_a_fresh_database_of_its_own(postgres_url, request):
    with psycopg.connect(postgres_url) as conn:
        name = conn.execute("select current_database()").fetchone()[0]
        assert conn.execute("select count(*) from pg_tables where schemaname = 'public'").fetchone()[0] == 0
        conn.execute("create table runs (id serial primary key)")
    assert name.startswith("t_test_postgres_url_is_a_fresh_database")
    assert postgres_url.endswith("/" + name)


def test_create_and_drop_a_database_even_with_a_connection_left_open(postgres_server):
    url = postgres_server.create_database("History Store")  # any name: it is quoted
    left_open = psycopg.connect(url)
    try:
        postgres_server.drop_database("History Store")
        with psycopg.connect(postgres_server.url()) as conn:
            assert conn.execute("select count(*) from pg_database where datname = 'History Store'").fetchone()[0] == 0
    finally:
        left_open.close()
    postgres_server.drop_database("History Store")  # already gone: no error


def test_a_wrong_password_is_refused(postgres_server, no_password_sources):
    server = postgres_server
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(f"postgresql://{server.user}:not-the-password@{server.host}:{server.port}/postgres")


def test_no_password_is_refused_over_tcp_and_the_unix_socket(postgres_server, no_password_sources):
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(postgres_server.url(password=False), connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(
            host=str(postgres_server.socket_dir),
            port=postgres_server.port,
            user=postgres_server.user,
            dbname="postgres",
        )


def test_the_password_is_not_in_the_log_or_the_repr(postgres_server):
    password = postgres_server.url().rsplit("@", 1)[0].rsplit(":", 1)[1]
    assert password not in repr(postgres_server)
    assert password not in postgres_server.log_path.read_text()
    assert password not in postgres_server.url(password=False)


def test_stop_ends_the_server_frees_the_port_and_removes_the_data_dir(base_dir):
    server = PostgresServer(base_dir=base_dir)
    started = time.monotonic()
    server.start()
    started = time.monotonic() - started
    tmp_dir, pid, port = server.tmp_dir, server.pid, server.port
    with psycopg.connect(server.url()) as conn:
        conn.execute("select 1")
    left_open = psycopg.connect(server.url())  # fast shutdown ends sessions too
    stopping = time.monotonic()
    server.stop()
    stopping = time.monotonic() - stopping
    left_open.close()
    assert not server.running
    assert not tmp_dir.exists()
    assert list(base_dir.iterdir()) == []
    assert _gone(pid)
    assert _port_is_free(port)
    assert started < 30 and stopping < 10, (started, stopping)
    server.stop()  # a second stop is harmless


def test_a_port_already_taken_fails_fast_with_the_log_and_leaves_nothing(base_dir):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        server = PostgresServer(port=port, base_dir=base_dir)
        started = time.monotonic()
        with pytest.raises(PostgresStartError, match="during start-up") as failure:
            server.start()
        assert time.monotonic() - started < 15
    assert "could not bind" in failure.value.log_tail
    assert "could not bind" in str(failure.value)
    assert server.process is None and server.tmp_dir is None
    assert list(base_dir.iterdir()) == []
    assert server._password not in str(failure.value)


def test_a_bad_setting_fails_fast_with_the_log_and_leaves_nothing(base_dir):
    server = PostgresServer(settings={"shared_buffers": "plenty"}, base_dir=base_dir)
    started = time.monotonic()
    with pytest.raises(PostgresStartError, match='invalid value for parameter "shared_buffers"'):
        server.start()
    assert time.monotonic() - started < 15
    assert server.process is None and server.tmp_dir is None
    assert list(base_dir.iterdir()) == []


def test_a_port_taken_between_choosing_and_binding_is_replaced(base_dir, monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        ports = iter([held.getsockname()[1]])
        real_free_port = pgmod.free_port
        monkeypatch.setattr(pgmod, "free_port", lambda host: next(ports, None) or real_free_port(host))
        with PostgresServer(base_dir=base_dir) as server:
            assert server.port != held.getsockname()[1]
            with psycopg.connect(server.url()) as conn:
                assert conn.execute("select 1").fetchone() == (1,)
    assert list(base_dir.iterdir()) == []


def test_no_postgresql_installed_is_an_error_that_says_how_to_install_it(base_dir, monkeypatch):
    monkeypatch.setattr(pgmod.shutil, "which", lambda name: None)
    monkeypatch.setattr(pgmod.glob, "glob", lambda pattern: [])
    server = PostgresServer(base_dir=base_dir)
    with pytest.raises(PostgresNotInstalled, match=r"apt-get install .*postgresql"):
        server.start()
    assert list(base_dir.iterdir()) == []
