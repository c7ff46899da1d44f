"""The history's command-line options and ini keys, validated when parsed, resolved once."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from .url import HistoryURL, parse_history_url

BASELINE_SOURCES = ("file", "history", "build:PATH")
BUILD_PREFIX = "build:"


def parse_fraction(value: str) -> float:
    """A fraction in (0, 1): ``0.05`` is 5%."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05 (5%), got {value!r}") from None
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"a fraction is between 0 and 1 (0.05 is 5%), got {value!r}")
    return number


def parse_min_change(value: str) -> float:
    """The smallest step a change point may be, as a fraction of the mean: ``0`` keeps every step."""
    return 0.0 if str(value).strip() in ("0", "0.0") else parse_fraction(value)


def parse_build_path(value: str, flag: str = "--specdec-build") -> str:
    """An engine build to launch: the Python of another environment (its vLLM or xllamacpp) or a
    llama-server binary; it must exist and be executable.  Kept as given (a venv's python is a link that
    must not be resolved: resolving it leaves the environment)."""
    import os

    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{flag}: no such file {path}")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(
            f"{flag}: {path} is not an executable: give the Python of the build's environment "
            "(.../bin/python) or a llama-server binary"
        )
    return path


def parse_baseline_source(value: str) -> str:
    if value.startswith(BUILD_PREFIX):
        return BUILD_PREFIX + parse_build_path(value[len(BUILD_PREFIX) :], "--specdec-baseline-from build:PATH")
    if value not in BASELINE_SOURCES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(BASELINE_SOURCES)}, got {value!r}")
    return value


HISTORY_OPTIONS: list[tuple[str, dict]] = [
    (
        "--specdec-history",
        dict(
            type=parse_history_url,
            default=None,
            metavar="URL",
            help="append every result row of the session to a history: a SQLite file path, or "
            "postgresql://user@host/db (give the password by PGPASSWORD or ~/.pgpass; a "
            "password in the URL is never shown). ini specdec_history.",
        ),
    ),
    (
        "--specdec-history-commit",
        dict(
            default=None,
            metavar="SHA",
            help="the commit the session's results belong to (default: git rev-parse HEAD of the rootdir)",
        ),
    ),
    (
        "--specdec-history-branch",
        dict(
            default=None,
            metavar="NAME",
            help="the branch the session ran on (default: the checkout's branch, or the "
            "CI's GITHUB_HEAD_REF / GITHUB_REF_NAME / CI_COMMIT_REF_NAME)",
        ),
    ),
    (
        "--specdec-history-detect",
        dict(
            action="store_true",
            default=False,
            help="after recording, look for change points in the history (Apache Otava) "
            "and fail when the newest one is a regression beyond the threshold",
        ),
    ),
    (
        "--specdec-history-warn-only",
        dict(
            action="store_true",
            default=False,
            help="report a regressing change point as a warning; the session does not fail (for main branches)",
        ),
    ),
    (
        "--specdec-history-threshold",
        dict(
            type=parse_fraction,
            default=None,
            metavar="FRACTION",
            help="how large a loss the newest change point may show before the check fails (default 0.05)",
        ),
    ),
    (
        "--specdec-otava-python",
        dict(
            default=None,
            metavar="PATH",
            help="the Python of an environment with apache-otava (default: "
            "$SPECDEC_OTAVA_PYTHON, this Python, or ./.venv-otava)",
        ),
    ),
    (
        "--specdec-baseline-from",
        dict(
            type=parse_baseline_source,
            default=None,
            metavar="file|history|build:PATH",
            help="compare against baseline files (default), against the latest stable "
            "segment of the --specdec-history (since its newest change point), or against another build "
            "of the engine measured in this session, interleaved (PATH: the Python of its environment, "
            "or a llama-server binary)",
        ),
    ),
]

HISTORY_INI_KEYS: list[tuple[str, str, dict]] = [
    (
        "specdec_history",
        "the results history (a SQLite path relative to the rootdir, or a postgresql:// URL)",
        dict(default=""),
    ),
    (
        "specdec_history_threshold",
        "the loss a newest change point may show before the history check fails",
        dict(default=""),
    ),
]


@dataclass(frozen=True)
class HistorySettings:
    url: HistoryURL | None = None
    commit: str | None = None
    branch: str | None = None
    detect: bool = False
    warn_only: bool = False
    threshold: float = 0.05
    otava_python: str | None = None
    baseline_from: str = "file"

    @property
    def baseline_build(self) -> str | None:
        """The baseline build's path for --specdec-baseline-from build:PATH, else None."""
        return self.baseline_from[len(BUILD_PREFIX) :] if self.baseline_from.startswith(BUILD_PREFIX) else None


def resolve_history_settings(getoption, getini, rootpath) -> HistorySettings:
    """The history part of the session's settings; ValueError names the flag or ini key."""
    from pathlib import Path

    url = getoption("specdec_history")
    raw = getini("specdec_history")
    if url is None and raw:
        text = raw if "://" in raw or Path(raw).is_absolute() else str(Path(rootpath) / raw)
        try:
            url = parse_history_url(text)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"ini setting specdec_history: {exc}") from None
    threshold = getoption("specdec_history_threshold")
    if threshold is None and getini("specdec_history_threshold"):
        try:
            threshold = parse_fraction(getini("specdec_history_threshold"))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"ini setting specdec_history_threshold: {exc}") from None
    settings = HistorySettings(
        url=url,
        commit=getoption("specdec_history_commit"),
        branch=getoption("specdec_history_branch"),
        detect=bool(getoption("specdec_history_detect")),
        warn_only=bool(getoption("specdec_history_warn_only")),
        threshold=threshold if threshold is not None else 0.05,
        otava_python=getoption("specdec_otava_python"),
        baseline_from=getoption("specdec_baseline_from") or "file",
    )
    if url is None:
        for flag, used in (
            ("--specdec-history-detect", settings.detect),
            ("--specdec-baseline-from history", settings.baseline_from == "history"),
        ):
            if used:
                raise ValueError(f"{flag} needs a history: give --specdec-history URL (or ini specdec_history)")
    return settings
