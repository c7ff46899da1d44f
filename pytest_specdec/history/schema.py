"""The history's tables, built by migrations applied in order, and one session's value in a series."""

from __future__ import annotations

from dataclasses import dataclass

# Each step's statements; {pk} and {real} are filled in per database.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: sessions and their figures
        "CREATE TABLE specdec_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE specdec_sessions (id {pk}, session_uid TEXT NOT NULL UNIQUE, commit_sha TEXT, branch TEXT, "
        "started_at TEXT NOT NULL, finished_at TEXT NOT NULL, outcome TEXT NOT NULL, fingerprint TEXT NOT NULL, "
        "plugin_version TEXT)",
        "CREATE TABLE specdec_figures (id {pk}, session_id INTEGER NOT NULL REFERENCES specdec_sessions(id), "
        "test TEXT NOT NULL, config TEXT NOT NULL, engine TEXT NOT NULL, engine_version TEXT, "
        "fingerprint_key TEXT NOT NULL, workload TEXT, access_pattern TEXT, outcome TEXT NOT NULL, "
        "regression TEXT NOT NULL, metric TEXT NOT NULL, value {real} NOT NULL, low {real}, high {real}, "
        "repeats INTEGER)",
    ),
    (  # 2: a series is read by (test, fingerprint, metric)
        "CREATE INDEX specdec_figures_series ON specdec_figures (test, fingerprint_key, metric, session_id)",
    ),
    (  # 3: a downward change point accepted as the series' new level: by whom, when and why
        "CREATE TABLE specdec_acceptances (id {pk}, test TEXT NOT NULL, fingerprint_key TEXT NOT NULL, "
        "metric TEXT NOT NULL, session_uid TEXT NOT NULL, accepted_by TEXT NOT NULL, accepted_at TEXT NOT NULL, "
        "reason TEXT)",
    ),
    (  # 4: a value's own log variance from its session's runs, which a learned drift takes off (null: unknown)
        "ALTER TABLE specdec_figures ADD COLUMN own_variance {real}",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
ADVISORY_LOCK = 0x5EC0DEC  # PostgreSQL: one schema change at a time


@dataclass(frozen=True)
class Point:
    """One session's value in a series."""

    session_uid: str
    commit: str | None
    branch: str | None
    started_at: str
    value: float
    low: float | None
    high: float | None
    outcome: str
    regression: str
    config: str
    number: int | None = None  # the session's place in the whole history (1: the oldest), not in this series
    own_variance: float | None = None  # the value's log variance from its own session's runs (null: unknown)
