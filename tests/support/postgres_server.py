"""A throw-away PostgreSQL server for tests: initdb into a temporary folder, run `postgres`, remove it all.

The way pytest-postgresql does it, written for this suite's needs:

* the binaries are Debian's (``pg_config --bindir``, ``/usr/lib/postgresql/*/bin``, then ``PATH``); a
  machine without them gets an error saying how to install them, never a skip;
* the cluster has a random superuser password and only password (scram-sha-256) authentication, over
  TCP and over its unix socket alike, so a test can check that a wrong or missing password is refused;
  the password is never printed, logged or put in an error message by this module;
* `postgres` runs in the foreground as our child (no ``pg_ctl`` daemon), listening on 127.0.0.1 only,
  with its unix socket inside the temporary folder, so this process can stop it and knows it is gone;
* postgres refuses to run as root: as root, initdb and postgres run as the ``postgres`` system user
  (created by Debian's package) and the temporary folder belongs to it; otherwise as the current user;
* start-up polls a real connection until the server answers, fails at once with the server's log tail
  when postgres exits during start-up, and picks another free port when the one it chose was taken in
  the meantime ("could not bind"); whatever start-up made (process, folder) is removed when it fails.

A plain module (no pytest): ``tests/history/conftest.py`` wraps it in fixtures.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

HOST = "127.0.0.1"
INSTALL_HINT = (
    "install PostgreSQL's server with `sudo apt-get install -y --no-install-recommends postgresql` "
    "(or run scripts/system-packages)"
)
# Settings for a disposable test cluster: durability is worthless here and costs time.
TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class PostgresServerError(RuntimeError):
    """The test server could not be set up, started or used."""


class PostgresNotInstalled(PostgresServerError):
    """No PostgreSQL server binaries (initdb, postgres) on this machine."""


class PostgresStartError(PostgresServerError):
    """postgres exited or never answered during start-up; the message ends with its log tail."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(f"{message}\n--- postgres log (tail) ---\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail


def _bindir_ok(path: str | os.PathLike) -> bool:
    return all(os.access(os.path.join(path, name), os.X_OK) for name in ("initdb", "postgres"))


def _version_key(path: str) -> tuple:
    # /usr/lib/postgresql/15/bin -> (15,); newest first when sorted in reverse.
    version = Path(path).parent.name
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)


def find_bindir() -> Path:
    """The folder holding PostgreSQL's initdb and postgres, or PostgresNotInstalled saying how to install them."""
    tried = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            candidate = out.stdout.strip()
            tried.append(candidate)
            # libpq-dev's pg_config names the server's folder even where only the client is installed.
            if _bindir_ok(candidate):
                return Path(candidate)
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        tried.append(candidate)
        if _bindir_ok(candidate):
            return Path(candidate)
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    if initdb and postgres:
        # Debian puts them in PATH only as symlinks (or not at all); follow them to the real folder.
        for candidate in {str(Path(initdb).resolve().parent), str(Path(initdb).parent)}:
            tried.append(candidate)
            if _bindir_ok(candidate):
                return Path(candidate)
    raise PostgresNotInstalled(
        "PostgreSQL's server binaries (initdb, postgres) were not found "
        f"(looked in pg_config --bindir, /usr/lib/postgresql/*/bin and PATH: {tried or 'nothing there'}); "
        + INSTALL_HINT
    )


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (it may be taken again before postgres binds it: start() retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _psycopg():
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PostgresServerError("the PostgreSQL test server needs psycopg: pip install 'psycopg[binary]'") from exc
    return psycopg


def _parent_death_signal():
    """A preexec function that SIGINTs postgres if this process dies without stopping it (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    PR_SET_PDEATHSIG = 1

    def preexec():  # runs in the child after setuid, which would have cleared an earlier setting
        prctl(PR_SET_PDEATHSIG, int(signal.SIGINT))

    return preexec


class PostgresServer:
    """A temporary PostgreSQL cluster on 127.0.0.1; ``with PostgresServer() as pg: pg.url()``.

    ``port``: None picks a free one (and another if it is taken before postgres binds it); a given
    port is used as it is, and start-up fails if it is taken.  ``settings``: extra postgresql.conf
    settings passed as ``-c name=value`` (they override TEST_SETTINGS).  ``base_dir``: where the
    temporary folder goes (default: the system's temporary folder).
    """

    def __init__(
        self,
        *,
        user: str = "postgres",
        port: int | None = None,
        settings: dict[str, str] | None = None,
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        base_dir: str | os.PathLike | None = None,
        bindir: str | os.PathLike | None = None,
        port_attempts: int = 5,
    ):
        self.user = user
        self.host = HOST
        self.port: int | None = port
        self._fixed_port = port is not None
        self.settings = {**TEST_SETTINGS, **(settings or {})}
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.base_dir = base_dir
        self._bindir = Path(bindir) if bindir is not None else None
        self.port_attempts = port_attempts
        self._password = secrets.token_urlsafe(24)
        self.tmp_dir: Path | None = None
        self.process: subprocess.Popen | None = None
        self._run_as: dict = {}

    def __repr__(self) -> str:  # never the password
        state = "running" if self.running else "stopped"
        return f"<PostgresServer {self.user}@{self.host}:{self.port} {state} dir={self.tmp_dir}>"

    # -- paths ---------------------------------------------------------------------------------

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_bindir()
        return self._bindir

    @property
    def data_dir(self) -> Path:
        assert self.tmp_dir is not None, "not started"
        return self.tmp_dir / "data"

    @property
    def log_path(self) -> Path:
        assert self.tmp_dir is not None, "not started"
        return self.tmp_dir / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        assert self.tmp_dir is not None, "not started"
        return self.tmp_dir

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    # -- connections ---------------------------------------------------------------------------

    def url(self, database: str = "postgres", password: bool = True) -> str:
        """``postgresql://user:password@127.0.0.1:port/database`` (without ``:password`` when password=False)."""
        if self.port is None:
            raise PostgresServerError("the server has not been started")
        auth = quote(self.user, safe="") + (":" + quote(self._password, safe="") if password else "")
        return f"postgresql://{auth}@{self.host}:{self.port}/{quote(database, safe='')}"

    def connect(self, database: str = "postgres", **kwargs):
        """A psycopg connection as the superuser (autocommit unless told otherwise)."""
        psycopg = _psycopg()
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 5)
        try:
            return psycopg.connect(self.url(database), **kwargs)
        except psycopg.Error as exc:
            raise PostgresServerError(self._scrub(f"cannot connect to {database!r}: {exc}")) from None

    def create_database(self, name: str) -> str:
        """Create database ``name`` (any name: it is quoted) and return its URL."""
        from psycopg import sql

        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, ending any connections a test left open to it."""
        from psycopg import sql

        with self.connect() as conn:
            if conn.info.server_version >= 130000:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                return
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> PostgresServer:
        """initdb, start postgres and wait until it accepts a password connection; on failure remove everything."""
        if self.tmp_dir is not None:
            raise PostgresServerError("this PostgresServer was already started")
        bindir = self.bindir  # PostgresNotInstalled before anything is made
        _psycopg()
        try:
            self._make_tmp_dir()
            self._initdb(bindir)
            attempts = 1 if self._fixed_port else max(1, self.port_attempts)
            for attempt in range(1, attempts + 1):
                if not self._fixed_port:
                    self.port = free_port(self.host)
                try:
                    self._start_postgres(bindir)
                    break
                except PostgresStartError as exc:
                    taken = "could not bind" in exc.log_tail or "could not create any TCP/IP sockets" in exc.log_tail
                    if not (taken and attempt < attempts):
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after stop_timeout, then remove the temporary folder; safe to repeat."""
        try:
            self._stop_process()
        finally:
            if self.tmp_dir is not None:
                shutil.rmtree(self.tmp_dir, ignore_errors=True)
                if self.tmp_dir.exists():  # pragma: no cover - e.g. a file postgres still held open
                    shutil.rmtree(self.tmp_dir)
                self.tmp_dir = None

    # -- internals -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self._password, "***")

    def _make_tmp_dir(self) -> None:
        self._run_as = {}
        self.tmp_dir = Path(tempfile.mkdtemp(prefix="pytest-specdec-pg-", dir=self.base_dir))
        if os.geteuid() != 0:
            return
        # postgres refuses to run as root: initdb and postgres run as Debian's `postgres` system user.
        import pwd

        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresServerError(
                "running as root, and postgres refuses to run as root, but there is no `postgres` system "
                "user to run it as (Debian's postgresql package creates it); " + INSTALL_HINT
            ) from None
        for parent in self.tmp_dir.resolve().parents:
            mode = parent.stat().st_mode
            if not (mode & stat.S_IXOTH or parent.stat().st_uid == account.pw_uid):
                raise PostgresServerError(
                    f"the postgres user cannot reach {self.tmp_dir}: {parent} is not searchable by others; "
                    "pass base_dir= (or set TMPDIR to) a folder such as /tmp"
                )
        os.chown(self.tmp_dir, account.pw_uid, account.pw_gid)
        self._run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    def _child_env(self) -> dict[str, str]:
        # No PG* variables of ours (PGDATA, PGPORT, PGPASSWORD...) reach initdb or postgres.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        if self._run_as:
            env.update(HOME=str(self.tmp_dir), USER="postgres", LOGNAME="postgres")
        return env

    def _chown(self, path: Path) -> None:
        if self._run_as:
            os.chown(path, self._run_as["user"], self._run_as["group"])

    def _initdb(self, bindir: Path) -> None:
        pwfile = self.tmp_dir / "pwfile"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self._password + "\n")
        self._chown(pwfile)
        command = [
            str(bindir / "initdb"),
            "--pgdata", str(self.data_dir),
            "--username", self.user,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                cwd=self.tmp_dir,
                env=self._child_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                **self._run_as,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()
            raise PostgresServerError(
                self._scrub(f"initdb failed (exit {result.returncode}):\n" + "\n".join(output[-30:]))
            )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return self._scrub("\n".join(text.strip().splitlines()[-lines:]))

    def _start_postgres(self, bindir: Path) -> None:
        settings = {
            **self.settings,
            "listen_addresses": self.host,
            "unix_socket_directories": f'"{self.socket_dir}"',
            "logging_collector": "off",
        }
        command = [str(bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        with open(self.log_path, "wb") as log:  # a fresh log for each attempt
            self.process = subprocess.Popen(
                command,
                cwd=self.tmp_dir,
                env=self._child_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: ^C in pytest's terminal is ours to handle
                preexec_fn=_parent_death_signal(),
                **self._run_as,
            )
        self._wait_ready()

    def _pid_file_status(self) -> str:
        # Line 8 of postmaster.pid is the postmaster's status: "starting", "ready", "stopping"...
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return ""
        return lines[7].strip() if len(lines) > 7 else ""

    def _wait_ready(self) -> None:
        psycopg = _psycopg()
        deadline = time.monotonic() + self.startup_timeout
        last_error = ""
        delay = 0.02
        while True:
            code = self.process.poll()
            if code is not None:
                self.process = None
                raise PostgresStartError(
                    f"postgres exited with code {code} during start-up on {self.host}:{self.port}", self._log_tail()
                )
            # Connect only once postmaster.pid says the server is ready: before that the port may be someone
            # else's (start-up then fails on "could not bind"), and a connection to it would hang.
            if self._pid_file_status() == "ready":
                try:
                    conn = psycopg.connect(self.url(), connect_timeout=2)
                except psycopg.OperationalError as exc:
                    last_error = str(exc).strip()
                else:
                    conn.close()
                    return
            else:
                last_error = "postmaster.pid does not say ready yet"
            if time.monotonic() >= deadline:
                self._stop_process()
                raise PostgresStartError(
                    self._scrub(
                        f"postgres did not accept connections on {self.host}:{self.port} within "
                        f"{self.startup_timeout:g} s (last error: {last_error})"
                    ),
                    self._log_tail(),
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _stop_process(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown: end sessions, checkpoint, exit
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                # Not reaped yet, so its process group id is still its own: kill the group, which holds
                # postgres's children (backends, checkpointer...), so that none outlives it.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
