"""Converters for option and ini values that are plain quantities: seconds, milliseconds, counts, sizes, prices.

Each is an argparse ``type=`` callable: a bad value raises ArgumentTypeError, which pytest reports as a
usage error naming the option (options.py; `options.parse_ini` names the ini key instead).
"""

from __future__ import annotations

import argparse
import re

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


def _positive_number(value: str, unit: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {value!r}")
    return number


def parse_seconds(value: str) -> float:
    """A positive number of seconds: ``"600"``, ``"90.5"``."""
    return _positive_number(value, "seconds")


def parse_milliseconds(value: str) -> float:
    """A positive number of milliseconds: ``"10"``, ``"2.5"``."""
    return _positive_number(value, "milliseconds")


def _whole_number(value: str, minimum: int, bound: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < minimum:
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value!r}")
    return number


def parse_positive_int(value: str) -> int:
    """An integer >= 1: ``"3"``."""
    return _whole_number(value, 1, "at least 1")


def parse_count(value: str) -> int:
    """An integer >= 0: ``"0"``, ``"2"``."""
    return _whole_number(value, 0, "0 or more")


def parse_rate(value: str) -> float:
    """An error rate in (0, 0.5): ``"0.05"`` or ``"5%"``."""
    text = str(value).strip()
    try:
        rate = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate between 0 and 0.5 (0.05 or 5%), got {value!r}") from None
    if not 0 < rate < 0.5:
        raise argparse.ArgumentTypeError(f"must be between 0 and 0.5 (0.05 or 5%), got {value!r}")
    return rate


AUTO_REPEATS = "auto"


def parse_repeats(value: str) -> int | str:
    """``"auto"`` (each check measures until it is decided, verdict.sequential) or a fixed count >= 1."""
    if isinstance(value, str) and value.strip().lower() == AUTO_REPEATS:
        return AUTO_REPEATS
    try:
        return parse_positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {value!r}") from None


def parse_interval(value: str) -> float:
    """Seconds between two reads of something periodic, 0 for none: ``"0.5"``, ``"0"``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: off), got {value!r}") from None
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (0: off), got {value!r}")
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


def parse_price(value: str) -> float:
    """An hourly price in USD for one GPU (or node): ``"2.5"``; 0 is allowed (owned hardware)."""
    try:
        price = float(str(value).strip().lstrip("$"))
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a price in USD per hour such as 2.50, got {value!r}") from None
    if not price >= 0 or price == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return price
