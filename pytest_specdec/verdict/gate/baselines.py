"""Stored baselines: one JSON file per test, validated, written atomically.

Files live side by side in one directory that teams commit, so names must be
stable and readable, a crash must never leave a truncated baseline behind,
and parallel pytest-xdist workers writing different tests at once must not
lose each other's files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ... import schemas
from ..metric_names import canonical_metric
from ...atomic import TEMP_SUFFIX, write_atomic

try:
    import fcntl
except ImportError:  # Windows: writes stay atomic, only the cross-process lock is lost
    fcntl = None

SCHEMA_VERSION = 2
# Version 1 (pytest-specdec 0.1) named latency speedups with a unit, e.g.
# ``speedup_median_tpot_ms``; version 2 drops it (``speedup_median_tpot``).
# Version 1 files are read as version 2 (see migrate_v1), never rejected.
READABLE_VERSIONS = (1, SCHEMA_VERSION)
SIDES = ("reference", "speculative", "derived")
UPDATE_FLAG = "--specdec-update-baselines"

LOCK_NAME = ".specdec.lock"
TEMP_PREFIX = ".specdec-tmp-"
# Without a working lock we cannot tell a crashed writer's temp file from a
# live one, so only files this old are taken for debris.
STALE_TEMP_AGE_S = 3600.0
MAX_STEM_CHARS = 80
HASH_CHARS = 12


class BaselineError(ValueError):
    """A baseline file that cannot be used: corrupt JSON or not matching the schema."""

    def __init__(self, message: str, path: Path | None = None, field: str | None = None):
        super().__init__(message)
        self.path = path
        self.field = field


class BaselineMissing(BaselineError):
    """No baseline has been recorded for a test yet."""


class BaselineWarning(UserWarning):
    """Something odd in the baseline directory that does not stop the run."""


def load_schema() -> dict[str, Any]:
    return schemas.load_schema(schemas.BASELINE)


def _field_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe_error(error) -> tuple[str, str]:
    parts = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [key for key in error.validator_value if key not in error.instance]
        if missing:
            return _field_path(parts + [missing[0]]), "required field is missing"
    return _field_path(parts), error.message


def validate_document(data: Any, where: str, path: Path | None = None) -> None:
    """Raise BaselineError naming `where` (the file) and the first fields at fault."""
    if isinstance(data, Mapping) and data.get("schema_version", SCHEMA_VERSION) not in READABLE_VERSIONS:
        # A clearer word than "1 was expected" for files from another plugin version.
        raise BaselineError(
            f"{where}: schema_version: {data['schema_version']!r} is not supported; this pytest-specdec "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))}. Re-record with {UPDATE_FLAG} or use a matching plugin version.",
            path=path,
            field="schema_version",
        )
    errors = schemas.errors(schemas.BASELINE, data)
    if not errors:
        return
    described = [_describe_error(e) for e in errors]
    shown = "; ".join(f"{name}: {message}" for name, message in described[:5])
    more = f" (and {len(described) - 5} more)" if len(described) > 5 else ""
    raise BaselineError(f"{where}: invalid baseline: {shown}{more}", path=path, field=described[0][0])


def _renamed(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {canonical_metric(str(name), warn=False): value for name, value in metrics.items()}


def migrate_v1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version 1 baseline document as version 2: speedup names lose their unit."""
    migrated = dict(data)
    migrated["schema_version"] = SCHEMA_VERSION
    migrated["repeats"] = [
        {**repeat, "derived": _renamed(repeat.get("derived") or {})} if isinstance(repeat, Mapping) else repeat
        for repeat in data.get("repeats") or []
    ]
    if isinstance(data.get("tolerances"), Mapping):
        migrated["tolerances"] = _renamed(data["tolerances"])
    return migrated


def _json_safe(value: Any, metric: bool = False) -> Any:
    """Plain JSON types; NaN becomes null, and infinity "inf" (null inside metric maps)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        if metric or math.isnan(number):
            return None
        return "inf" if number > 0 else "-inf"
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v, metric) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, metric) for v in value]
    raise TypeError(f"cannot store {type(value).__name__} in a baseline: {value!r}")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _plugin_version() -> str | None:
    try:
        return version("pytest-specdec")
    except PackageNotFoundError:
        return None


@dataclass
class Baseline:
    """Every stored repeat of one test, and where and how it was measured."""

    test_id: str
    fingerprint: dict[str, Any]
    config: dict[str, Any]
    repeats: list[dict[str, dict[str, float | None]]]
    tolerances: dict[str, float] = field(default_factory=dict)
    recorded_at: str = field(default_factory=_now)
    plugin_version: str | None = field(default_factory=_plugin_version)
    schema_version: int = SCHEMA_VERSION
    # Where it was read from, for messages; not part of the stored document.
    path: Path | None = field(default=None, compare=False, repr=False)
    # The schema version of the file it was read from when that was older (migrated in memory).
    migrated_from: int | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "test_id": self.test_id,
            "recorded_at": self.recorded_at,
            "plugin_version": self.plugin_version,
            "fingerprint": _json_safe(self.fingerprint),
            "config": _json_safe(self.config),
            "repeats": [
                {**_json_safe(r), **{side: _json_safe(r.get(side, {}), metric=True) for side in SIDES}}
                for r in self.repeats
            ],
            "tolerances": _json_safe(self.tolerances),
        }

    @classmethod
    def from_json(cls, data: Any, path: Path | str | None = None) -> "Baseline":
        """A baseline from its stored document; a version 1 document is migrated in memory
        (`migrated_from` then says so; the file is left as it is until it is re-recorded)."""
        where = Path(path) if path is not None else None
        name = str(where) if where is not None else "baseline"
        migrated_from = None
        if isinstance(data, Mapping) and data.get("schema_version") == 1:
            data, migrated_from = migrate_v1(data), 1
        validate_document(data, name, where)
        return cls(
            test_id=data["test_id"],
            fingerprint=dict(data["fingerprint"]),
            config=dict(data["config"]),
            repeats=[dict(r) for r in data["repeats"]],
            tolerances=dict(data["tolerances"]),
            recorded_at=data["recorded_at"],
            plugin_version=data["plugin_version"],
            schema_version=data["schema_version"],
            path=where,
            migrated_from=migrated_from,
        )

    def per_repeat(self, side: str, metric: str) -> list[float | None]:
        """One entry per repeat, in order, None where the repeat lacks `metric` (for paired comparison)."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        return [repeat.get(side, {}).get(metric) for repeat in self.repeats]

    def samples(self, side: str, metric: str) -> list[float]:
        """One value per repeat that has `metric` on `side`; nulls (and NaN) are skipped."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        values = (repeat.get(side, {}).get(metric) for repeat in self.repeats)
        return [float(v) for v in values if v is not None and not math.isnan(v)]


# --- files ---

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def baseline_filename(test_id: str) -> str:
    """Readable, filesystem-safe and unique name for `test_id`'s baseline file.

    Sanitising alone maps different ids to one name (``a/b`` and ``a_b``), so a
    hash of the full id follows; the readable part is only for people.
    """
    stem = test_id.replace("::", "__").replace("/", "_").replace("\\", "_").replace("[", "-").replace("]", "")
    stem = _UNSAFE.sub("_", stem).strip("._-")[:MAX_STEM_CHARS].rstrip("._-") or "test"
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:HASH_CHARS]
    # Leading "." is reserved for temp and lock files, which listings skip.
    return f"{stem}-{digest}.json"


def baseline_path(base_dir: Path, test_id: str) -> Path:
    return Path(base_dir) / baseline_filename(test_id)


def load_baseline(base_dir: Path, test_id: str) -> Baseline:
    path = baseline_path(base_dir, test_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineMissing(
            f"no baseline recorded for {test_id}: {path} does not exist. Record one by running this test "
            f"with {UPDATE_FLAG} (it writes {path}).",
            path=path,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc}", path=path) from exc
    data = _parse(text, path)
    baseline = Baseline.from_json(data, path)
    if baseline.test_id != test_id:
        raise BaselineError(
            f"{path}: test_id: file belongs to {baseline.test_id!r}, not {test_id!r}; re-record with {UPDATE_FLAG}",
            path=path,
            field="test_id",
        )
    return baseline


def _reject_constant(name: str):
    if name == "NaN":
        return None  # a hand-edited NaN means what null means
    raise ValueError(f"{name} is not JSON")


def _parse(text: str, path: Path) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: corrupt JSON at line {exc.lineno} column {exc.colno}: {exc.msg}; "
            f"fix it or re-record with {UPDATE_FLAG}",
            path=path,
        ) from exc
    except ValueError as exc:
        raise BaselineError(f"{path}: corrupt JSON: {exc}", path=path) from exc


@contextlib.contextmanager
def _directory_lock(base_dir: Path):
    """Hold an exclusive lock on `base_dir`; yields whether the lock is real."""
    if fcntl is None:
        yield False
        return
    with open(base_dir / LOCK_NAME, "a+b") as handle:
        try:
            # flock, not lockf: it also excludes threads of one process, each
            # with its own open file.
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            locked = True
        except OSError:  # file systems without locking
            locked = False
        try:
            yield locked
        finally:
            if locked:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _is_temp(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX) and path.name.endswith(TEMP_SUFFIX)


def _remove_debris(base_dir: Path, locked: bool) -> None:
    # Every writer creates its temp file under the lock, so with the lock
    # held any temp file left is from a writer that died.
    now = time.time()
    for path in base_dir.iterdir():
        if not _is_temp(path):
            continue
        with contextlib.suppress(OSError):
            if locked or now - path.stat().st_mtime > STALE_TEMP_AGE_S:
                path.unlink()


def write_baseline(base_dir: Path, baseline: Baseline) -> Path:
    """Validate and store `baseline`, replacing any earlier file for its test whole."""
    base_dir = Path(base_dir)
    target = base_dir / baseline_filename(baseline.test_id)
    document = baseline.to_json()
    validate_document(document, f"{target} (not written)", target)
    base_dir.mkdir(parents=True, exist_ok=True)
    with _directory_lock(base_dir) as locked:
        _remove_debris(base_dir, locked)
        text = json.dumps(document, indent=2, allow_nan=False, ensure_ascii=False) + "\n"
        write_atomic(target, text, prefix=TEMP_PREFIX, durable=True)
    baseline.path = target
    return target
