"""The history store: sessions and their figures in SQLite or PostgreSQL, written whole or not at all.

A session is one transaction: its record and every figure are inserted, then
committed; a process killed before the commit leaves the history as it was
(SQLite's journal, PostgreSQL's transaction).  Concurrent writers (CI jobs,
xdist controllers of other runs) queue on the database's own lock: SQLite's
``BEGIN IMMEDIATE`` with a busy timeout, PostgreSQL's row-level concurrency
plus an advisory lock while the schema is created or migrated.

The schema is built by applying `MIGRATIONS` in order; the version reached is
stored in the history, and an older history is migrated forward in place
when a session writes to it.  A history newer than this plugin is refused.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from .records import Figure, SessionRecord
from .schema import ADVISORY_LOCK, MIGRATIONS, SCHEMA_VERSION, Point
from .url import HistoryError, HistoryURL
from .connections import (  # re-exported: these lived here
    _missing_table as _missing_table,
    _SqliteConnection as _SqliteConnection,
    _PostgresConnection as _PostgresConnection,
    describe_postgres_error as describe_postgres_error,
)


class HistoryStore:
    """An open history; `open_history` makes one."""

    def __init__(self, url: HistoryURL, connection, *, placeholder: str):
        self.url = url
        self._connection = connection
        self._p = placeholder

    # --- set-up --------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self._connection.close()
        except Exception:  # closing a broken connection must not hide the error that broke it
            pass

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def is_postgres(self) -> bool:
        return self.url.kind == "postgresql"

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self._p)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        cursor = self._connection.cursor()
        try:
            if self.is_postgres:
                cursor.execute("BEGIN")
            else:
                cursor.execute("BEGIN IMMEDIATE")  # take the write lock now: no upgrade deadlock later
            yield cursor
            self._connection.commit()
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        try:
            self._connection.rollback()
        except Exception:
            pass

    def version(self) -> int:
        """The schema version the history is at; 0 for an empty database."""
        cursor = self._connection.cursor()
        try:
            cursor.execute("SELECT value FROM specdec_meta WHERE key = 'schema_version'")
        except Exception as exc:
            self._rollback()
            if _missing_table(exc):
                return 0
            raise
        found = cursor.fetchone()
        if not self.is_postgres:
            self._connection.commit()
        else:
            self._rollback()  # end the read's implicit transaction
        return int(found[0]) if found else 0

    def migrate(self, cursor, *, upto: int = SCHEMA_VERSION) -> int:
        """Apply the missing migrations inside the caller's transaction; returns the version reached."""
        if self.is_postgres:
            cursor.execute(f"SELECT pg_advisory_xact_lock({ADVISORY_LOCK})")
        current = self._version_in(cursor)
        if current > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.url}: history schema version {current} is newer than this pytest-specdec reads "
                f"(version {SCHEMA_VERSION}): upgrade pytest-specdec"
            )
        pk = "BIGSERIAL PRIMARY KEY" if self.is_postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        real = "DOUBLE PRECISION" if self.is_postgres else "REAL"
        for number in range(current + 1, upto + 1):
            for statement in MIGRATIONS[number - 1]:
                cursor.execute(statement.format(pk=pk, real=real))
            cursor.execute(self._sql("DELETE FROM specdec_meta WHERE key = 'schema_version'"))
            cursor.execute(
                self._sql("INSERT INTO specdec_meta (key, value) VALUES ('schema_version', ?)"), (str(number),)
            )
        return max(current, upto)

    def _version_in(self, cursor) -> int:
        if self.is_postgres:
            cursor.execute("SELECT to_regclass('specdec_meta') IS NOT NULL")
            exists = cursor.fetchone()[0]
        else:
            cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'specdec_meta'")
            exists = cursor.fetchone()[0] > 0
        if not exists:
            return 0
        cursor.execute("SELECT value FROM specdec_meta WHERE key = 'schema_version'")
        found = cursor.fetchone()
        return int(found[0]) if found else 0

    def check_writable(self) -> None:
        """Refuse, before a session measures anything, a history this version could not record into."""
        found = self.version()
        if found > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.url}: history schema version {found} is newer than this pytest-specdec writes "
                f"(version {SCHEMA_VERSION}): upgrade pytest-specdec, or record into another history"
            )

    def _check_readable(self) -> None:
        found = self.version()
        if found == 0:
            raise HistoryError(f"{self.url}: not a pytest-specdec history (no specdec tables): nothing recorded yet")
        if found > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.url}: history schema version {found} is newer than this pytest-specdec reads "
                f"(version {SCHEMA_VERSION}): upgrade pytest-specdec"
            )
        if found < SCHEMA_VERSION:
            # Older: migrated forward in place (each step only adds), so every command reads it.
            try:
                with self._transaction() as cursor:
                    self.migrate(cursor)
            except HistoryError:
                raise
            except Exception as exc:
                raise HistoryError(
                    f"{self.url}: history schema version {found}, this pytest-specdec reads version "
                    f"{SCHEMA_VERSION}; migrating it in place failed: {self.url.scrub(str(exc))}"
                ) from None

    # --- writing -------------------------------------------------------------------------

    def append(self, session: SessionRecord, figures: Iterable[Figure]) -> int:
        """Store a session and its figures in one transaction; returns how many figures were stored.

        `figures` is consumed inside the transaction: if producing them fails
        (or the process dies) nothing of the session is stored.
        """
        with self._transaction() as cursor:
            self.migrate(cursor)
            cursor.execute(
                self._sql(
                    "INSERT INTO specdec_sessions (session_uid, commit_sha, branch, started_at, finished_at, outcome, "
                    "fingerprint, plugin_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    session.session_uid,
                    session.commit,
                    session.branch,
                    session.started_at,
                    session.finished_at,
                    session.outcome,
                    json.dumps(dict(session.fingerprint), sort_keys=True, default=str),
                    session.plugin_version,
                ),
            )
            cursor.execute(self._sql("SELECT id FROM specdec_sessions WHERE session_uid = ?"), (session.session_uid,))
            session_id = cursor.fetchone()[0]
            insert = self._sql(
                "INSERT INTO specdec_figures (session_id, test, config, engine, engine_version, fingerprint_key, "
                "workload, access_pattern, outcome, regression, metric, value, low, high, repeats, own_variance) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            )
            count = 0
            for figure in figures:
                cursor.execute(
                    insert,
                    (
                        session_id,
                        figure.test,
                        figure.config,
                        figure.engine,
                        figure.engine_version,
                        figure.fingerprint_key,
                        figure.workload,
                        figure.access_pattern,
                        figure.outcome,
                        figure.regression,
                        figure.metric,
                        figure.value,
                        figure.low,
                        figure.high,
                        figure.repeats,
                        figure.own_variance,
                    ),
                )
                count += 1
        return count

    # --- reading -------------------------------------------------------------------------

    def _query(self, statement: str, params: tuple = ()) -> list[tuple]:
        self._check_readable()
        cursor = self._connection.cursor()
        try:
            cursor.execute(self._sql(statement), params)
            return cursor.fetchall()
        finally:
            self._rollback()  # reads leave no transaction open (PostgreSQL opens one implicitly)

    def sessions(self) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT s.session_uid, s.commit_sha, s.branch, s.started_at, s.finished_at, s.outcome, "
            "s.plugin_version, (SELECT count(*) FROM specdec_figures f WHERE f.session_id = s.id) "
            "FROM specdec_sessions s ORDER BY s.started_at, s.id"
        )
        keys = ("session_uid", "commit", "branch", "started_at", "finished_at", "outcome", "plugin_version", "figures")
        return [{"number": number, **dict(zip(keys, row))} for number, row in enumerate(rows, 1)]

    def series_keys(self) -> list[tuple[str, str, str, int]]:
        """(test, fingerprint key, metric, number of sessions) of every series, sorted."""
        return [
            tuple(row)
            for row in self._query(
                "SELECT test, fingerprint_key, metric, count(DISTINCT session_id) FROM specdec_figures "
                "GROUP BY test, fingerprint_key, metric ORDER BY test, fingerprint_key, metric"
            )
        ]

    def series(self, test: str, fingerprint: str, metric: str) -> list[Point]:
        """One series, oldest session first (a session with several rows of the test: their first)."""
        rows = self._query(
            "SELECT s.session_uid, s.commit_sha, s.branch, s.started_at, f.value, f.low, f.high, f.outcome, "
            "f.regression, f.config, (SELECT count(*) FROM specdec_sessions o WHERE o.started_at < s.started_at "
            "OR (o.started_at = s.started_at AND o.id <= s.id)), f.own_variance FROM specdec_figures f "
            "JOIN specdec_sessions s ON s.id = f.session_id WHERE f.test = ? AND f.fingerprint_key = ? AND f.metric = ? "
            "ORDER BY s.started_at, s.id, f.id",
            (test, fingerprint, metric),
        )
        seen, points = set(), []
        for row in rows:
            if row[0] not in seen:
                seen.add(row[0])
                points.append(Point(*row))
        return points

    def figures(self) -> list[dict[str, Any]]:
        """Every stored figure with its session's commit and time, oldest first (for export)."""
        columns = (
            "session_uid",
            "commit",
            "branch",
            "started_at",
            "session_outcome",
            "test",
            "config",
            "engine",
            "engine_version",
            "fingerprint_key",
            "workload",
            "access_pattern",
            "outcome",
            "regression",
            "metric",
            "value",
            "low",
            "high",
            "repeats",
            "own_variance",
        )
        rows = self._query(
            "SELECT s.session_uid, s.commit_sha, s.branch, s.started_at, s.outcome, f.test, f.config, f.engine, "
            "f.engine_version, f.fingerprint_key, f.workload, f.access_pattern, f.outcome, f.regression, f.metric, "
            "f.value, f.low, f.high, f.repeats, f.own_variance FROM specdec_figures f JOIN specdec_sessions s "
            "ON s.id = f.session_id ORDER BY s.started_at, s.id, f.id"
        )
        return [dict(zip(columns, row)) for row in rows]

    def accept(
        self, test: str, fingerprint: str, metric: str, session_uid: str, *, by: str, at: str, reason: str | None = None
    ) -> None:
        """Record that the change point starting at `session_uid` is the series' accepted new level."""
        with self._transaction() as cursor:
            self.migrate(cursor)
            cursor.execute(
                self._sql(
                    "INSERT INTO specdec_acceptances (test, fingerprint_key, metric, session_uid, accepted_by, accepted_at, "
                    "reason) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                (test, fingerprint, metric, session_uid, by, at, reason),
            )

    def acceptances(self, test: str, fingerprint: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(metric, first session after the change point) -> who accepted it, when and why."""
        rows = self._query(
            "SELECT metric, session_uid, accepted_by, accepted_at, reason FROM specdec_acceptances "
            "WHERE test = ? AND fingerprint_key = ? ORDER BY id",
            (test, fingerprint),
        )
        return {(metric, uid): {"by": by, "at": at, "reason": reason} for metric, uid, by, at, reason in rows}

    def fingerprint(self, key: str) -> dict[str, Any] | None:
        """The newest session fingerprint stored with a series of `key`."""
        rows = self._query(
            "SELECT s.fingerprint FROM specdec_sessions s JOIN specdec_figures f ON f.session_id = s.id "
            "WHERE f.fingerprint_key = ? ORDER BY s.started_at DESC, s.id DESC LIMIT 1",
            (key,),
        )
        return json.loads(rows[0][0]) if rows else None


def open_history(url: HistoryURL, *, create: bool = False, connect_timeout: float = 10.0) -> HistoryStore:
    """Connect to a history; HistoryError names the masked URL and what is wrong.

    `create`: a SQLite file that does not exist yet is created (a session
    about to write); reading commands pass False and get "no history at".
    """
    if url.kind == "sqlite":
        return _open_sqlite(url, create)
    return _open_postgres(url, connect_timeout)


def _open_sqlite(url: HistoryURL, create: bool) -> HistoryStore:
    path = url.path
    if not path.exists():
        if not create:
            raise HistoryError(f"{url}: no history at this path (nothing was recorded with --specdec-history here)")
        if not path.parent.is_dir():
            raise HistoryError(f"{url}: the folder {path.parent} does not exist")
    try:
        # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE), never implicitly.
        connection = sqlite3.connect(path, timeout=60.0, isolation_level=None)
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{url}: cannot read it as a SQLite history: {exc}") from None
    store = HistoryStore(url, _SqliteConnection(connection), placeholder="?")
    return store


def _open_postgres(url: HistoryURL, connect_timeout: float) -> HistoryStore:
    try:
        import psycopg
    except ImportError:
        raise HistoryError(
            f"{url}: a PostgreSQL history needs psycopg: pip install 'pytest-specdec[postgresql]'"
        ) from None
    try:
        connection = psycopg.connect(url.dsn, connect_timeout=max(1, int(connect_timeout)), autocommit=True)
    except psycopg.Error as exc:
        raise HistoryError(f"{url}: {describe_postgres_error(url.scrub(str(exc)))}") from None
    # Autocommit: reads need no transaction; append() opens its own with BEGIN.
    return HistoryStore(url, _PostgresConnection(connection), placeholder="%s")
