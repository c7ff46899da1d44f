"""Command-line and ini values, validated when parsed and resolved once.

The `parse_*` converters are used as argparse ``type=`` callables, so a bad
value is reported by pytest as a usage error naming the option; ini values go
through the same converters with the ini name in the message.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

DEFAULT_STARTUP_TIMEOUT = 900.0  # big GPU models take minutes to load
DEFAULT_KV_CACHE_BYTES = 1024**3  # plenty for SmolLM2 on the CPU build


def parse_seconds(value: str) -> float:
    """A positive number of seconds: ``"600"``, ``"90.5"``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value!r}")
    return seconds


def parse_positive_int(value: str) -> int:
    """An integer >= 1: ``"3"``."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value!r}")
    return number


def parse_byte_size(value: str) -> int:
    """A size in bytes: ``"1073741824"``, ``"1GiB"``, ``"512MiB"``, ``"2GB"``."""
    match = _SIZE_RE.match(str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a size such as 1GiB or 536870912, got {value!r}")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value!r}")
    return size


def parse_ini(name: str, raw: str, parser):
    """Run a ``parse_*`` converter on an ini value, naming the ini key on failure."""
    try:
        return parser(raw)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"ini setting {name}: {exc}") from None


@dataclass(frozen=True)
class Settings:
    """The plugin's configuration for one session (kept in ``config.stash``)."""

    device: str | None  # "gpu", "cpu" or None (specdec tests skipped)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES
    log_dir: Path | None = None  # None: under pytest's basetemp
    extra_methods: tuple[str, ...] = ()
    repeats: int = 1  # measured runs per configuration, all kept
    data_paths: tuple[tuple[str, str], ...] = ()  # data-file workload name -> path (env, then ini)
