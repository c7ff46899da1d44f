"""Where a history lives: a SQLite file or a PostgreSQL database, named so no secret is ever shown.

A password in the URL (``postgresql://ci:s3cret@db/perf``) is needed to
connect and must appear nowhere else: `HistoryURL` keeps it for the driver
and shows ``***`` in its `display`, its ``str`` and its ``repr`` (pytest puts
option values in tracebacks), and `scrub` removes it from any text a driver
hands back.  Passwords from the environment (libpq's ``PGPASSWORD``,
``~/.pgpass``) are never read here: the driver finds them itself.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

POSTGRES_SCHEMES = ("postgresql", "postgres")
MASK = "***"


class HistoryError(Exception):
    """A history that cannot be opened, read or written; the message names its (masked) URL."""


@dataclass(frozen=True)
class HistoryURL:
    kind: str  # "sqlite" or "postgresql"
    display: str  # the URL with any password replaced by ***
    path: Path | None = None  # SQLite: the file
    _dsn: str = field(default="", repr=False)  # PostgreSQL: the URL as given, password included
    _secrets: tuple[str, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"HistoryURL({self.display!r})"

    @property
    def dsn(self) -> str:
        return self._dsn

    def scrub(self, text: str) -> str:
        """`text` with every secret of this URL (raw and percent-decoded) replaced by ***."""
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, MASK)
        return text


def parse_history_url(value: str | Path) -> HistoryURL:
    """A history URL from a command line, ini or environment value; ArgumentTypeError says what is wrong.

    A plain path (or ``sqlite:///path``) is a SQLite file, created on first
    write; ``postgresql://[user[:password]@]host[:port]/database[?...]`` is a
    PostgreSQL database that must exist.
    """
    text = str(value).strip()
    if not text:
        raise argparse.ArgumentTypeError("expected a SQLite file path or a postgresql:// URL, got an empty value")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in POSTGRES_SCHEMES:
        return _postgres(text)
    if scheme == "sqlite":
        rest = text.split("://", 1)[1]
        if not rest.startswith("/") or rest == "/":
            raise argparse.ArgumentTypeError(
                f"{text}: a sqlite URL names a file: sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        path = Path(rest[1:])
    elif scheme:
        raise argparse.ArgumentTypeError(
            f"{scheme}://...: unsupported history store; give a SQLite file path or a postgresql:// URL"
        )
    else:
        path = Path(text)
    path = path.expanduser()
    if path.exists() and path.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: is a directory; give the history's file, e.g. {path / 'history.db'}")
    return HistoryURL("sqlite", str(path), path=path.resolve())


def _postgres(text: str) -> HistoryURL:
    try:
        parts = urlsplit(text)
        password = parts.password
        parts.port  # noqa: B018 -- a port that is not a number raises here, not later in the driver
    except ValueError as exc:
        # urlsplit's own words ("Invalid IPv6 URL", "Port out of range") with the URL masked: the raw
        # value must not reach argparse, which would echo it, password and all.
        raise argparse.ArgumentTypeError(f"{mask_unparsed(text)}: not a valid URL: {exc}") from None
    secrets = (password, unquote(password)) if password else ()
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{hostinfo}"
    query = "&".join(_mask_query(item) for item in parts.query.split("&")) if parts.query else ""
    for item in parts.query.split("&"):
        key, _, secret = item.partition("=")
        if key.lower() in ("password", "passfile_password") and secret:
            secrets += (secret, unquote(secret))
    display = urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    if not parts.path.strip("/"):
        raise argparse.ArgumentTypeError(f"{display}: name the database, e.g. postgresql://host/perf_history")
    return HistoryURL("postgresql", display, _dsn=text, _secrets=tuple(s for s in secrets if s))


def mask_unparsed(text: str) -> str:
    """A URL that does not parse, shown without what could be a password: everything between the
    first ':' after the user name and the last '@', and any password= value, becomes ***."""
    scheme, sep, rest = text.partition("://")
    if sep:
        userinfo, at, host = rest.rpartition("@")
        if at and ":" in userinfo:
            rest = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    head, question, query = (scheme + sep + rest).partition("?")
    if question:
        query = "&".join(_mask_query(item) for item in query.split("&"))
    return head + question + query


def _mask_query(item: str) -> str:
    key, sep, _ = item.partition("=")
    return f"{key}{sep}{MASK}" if key.lower() == "password" else item
