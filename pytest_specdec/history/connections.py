"""SQLite and PostgreSQL connections behind one small interface, and PostgreSQL's errors in words."""

from __future__ import annotations

import sqlite3


def _missing_table(exc: Exception) -> bool:
    text = str(exc).lower()
    return "no such table" in text or ("relation" in text and "does not exist" in text)


class _SqliteConnection:
    """sqlite3 in autocommit mode with the DB-API's commit/rollback meaning 'end the explicit transaction'."""

    def __init__(self, connection: sqlite3.Connection):
        self._connection = connection

    def cursor(self):
        return self._connection.cursor()

    def commit(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("COMMIT")

    def rollback(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")

    def close(self) -> None:
        self._connection.close()


class _PostgresConnection:
    def __init__(self, connection):
        self._connection = connection

    def cursor(self):
        return self._connection.cursor()

    def commit(self) -> None:
        self._connection.execute("COMMIT")

    def rollback(self) -> None:
        if self._connection.info.transaction_status != 0:  # IDLE: nothing to roll back
            self._connection.execute("ROLLBACK")

    def close(self) -> None:
        self._connection.close()


def describe_postgres_error(text: str) -> str:
    """What a connection failure means, in front of libpq's own words (already scrubbed of secrets)."""
    lower = text.lower()
    if "does not exist" in lower and "database" in lower:
        cause = "no such database (create it first: createdb, or CREATE DATABASE)"
    elif "password authentication failed" in lower or "no password supplied" in lower:
        cause = "bad credentials (check the user and the password: URL, PGPASSWORD or ~/.pgpass)"
    elif (
        "connection refused" in lower
        or "could not translate host" in lower
        or "timeout" in lower
        or "no route" in lower
        or "could not connect" in lower
    ):
        cause = "the server is unreachable (is PostgreSQL running at that host and port?)"
    else:
        cause = "cannot connect"
    detail = " ".join(text.split())
    return f"{cause}: {detail}"
