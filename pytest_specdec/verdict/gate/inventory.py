"""Which stored baselines exist, which no test of a session used, and their removal.

Syrupy-style housekeeping over the files `baselines` writes: a listing by
test id (unreadable files under their file name), stale files (no test read
them), unused ones among the tests a session ran, and removal under the
directory's lock.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path

from .baselines import BaselineWarning, _directory_lock, _reject_constant, baseline_filename


def _scan(base_dir: Path, warn: bool) -> list[tuple[Path, str | None]]:
    """(path, test_id or None if unreadable) for each baseline file in `base_dir`."""
    base_dir = Path(base_dir)
    if not base_dir.is_dir():
        return []
    found = []
    for path in sorted(base_dir.glob("*.json")):
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
            test_id = data.get("test_id") if isinstance(data, dict) else None
            if not isinstance(test_id, str) or not test_id:
                raise ValueError("no test_id")
        except (OSError, ValueError) as exc:
            if warn:
                warnings.warn(f"{path}: unreadable baseline ({exc}); listed by file name", BaselineWarning, 3)
            test_id = None
        found.append((path, test_id))
    return found


def list_baselines(base_dir: Path) -> dict[str, Path]:
    """test_id -> file for every baseline in `base_dir`; unreadable files appear under their file name."""
    listing: dict[str, Path] = {}
    scanned = _scan(base_dir, warn=True)
    # Where two files claim one test (a hand copy), the one load_baseline reads keeps the id.
    scanned.sort(key=lambda item: item[1] is None or item[0].name != baseline_filename(item[1]))
    for path, test_id in scanned:
        if test_id is not None and test_id in listing:
            warnings.warn(f"{path}: duplicate baseline for {test_id} (see {listing[test_id]})", BaselineWarning, 2)
        listing[path.name if test_id is None or test_id in listing else test_id] = path
    return listing


def unused_baselines_under(base_dir: Path, seen_test_ids: set[str], roots: list[Path], rootpath: Path) -> list[Path]:
    """Baselines no test of this session owns, among tests under `roots` (the session's paths):
    another suite's baselines in the same directory are not this session's to call stale."""

    def within(path: Path, root: Path) -> bool:
        try:
            path.resolve().relative_to(root)
        except ValueError:
            return False
        return True

    return [
        path
        for test_id, path in list_baselines(base_dir).items()
        if test_id not in seen_test_ids and any(within(Path(rootpath) / test_id.split("::")[0], root) for root in roots)
    ]


def stale_baselines(base_dir: Path, used_test_ids: set[str]) -> list[Path]:
    """Files no test in `used_test_ids` reads.

    An unreadable file is stale unless its name is the one a used test would
    read: that test's failure should report it, not a silent clean-up.
    """
    used = set(used_test_ids)
    wanted = {baseline_filename(test_id) for test_id in used}
    stale = []
    for path, test_id in _scan(base_dir, warn=False):
        if test_id is None:
            if path.name not in wanted:
                stale.append(path)
        elif test_id not in used:
            stale.append(path)
    return stale


def remove_baselines(paths: Iterable[Path]) -> None:
    """Delete baseline files (already-missing ones are fine), under their directory's lock."""
    for path in map(Path, paths):
        if not path.parent.is_dir():
            continue
        with _directory_lock(path.parent):
            path.unlink(missing_ok=True)
