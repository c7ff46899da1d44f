"""``pytest-specdec merge``: one report and one baseline update from the shards of a CI matrix.

Each shard ran with ``--specdec-shard I/N --specdec-report DIR`` and left in
DIR its ``results.json``, with ``--specdec-update-baselines`` also the
baselines it wrote (``DIR/baselines/``), and ``DIR/tests.json`` listing every
test it ran. Merging gives what one unsharded run would have written.
Everything is read and checked before anything is written, so a bad shard
leaves the report and the baselines directory as they were.

Run as ``pytest-specdec merge OUT SHARD_DIR...`` (see `pytest_specdec.cli`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..verdict.gate.baselines import Baseline, BaselineError, baseline_filename, write_baseline
from ..verdict.gate.inventory import list_baselines, remove_baselines
from ..verdict.fingerprint import fingerprint_differences
from .files import (
    SCHEMA_VERSION,
    SHARD_BASELINES,
    SHARD_TESTS,
    load_report,
    report_document,
    validate_report,
    write_report,
)


class MergeError(ValueError):
    """Shard directories that cannot be combined into one report or baseline update."""


@dataclass
class MergeOutcome:
    """What `merge_baselines` did to the baselines directory."""

    written: list[Path] = field(default_factory=list)
    left_alone: list[Path] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)
    # Why stale baselines were not looked for (an incomplete shard...), or None.
    stale_skipped: str | None = None


def merge_reports(directories: Sequence[Path], *, allow_mixed: bool = False) -> dict:
    """The report document of all shards' rows, sorted by test id."""
    directories = [Path(d) for d in directories]
    if not directories:
        raise MergeError("no shard directories given")
    owner: dict[str, Path] = {}
    rows: list[dict] = []
    fingerprints: list[tuple[Path, dict]] = []
    notes: list[str] = []
    for directory in directories:
        document = load_report(directory)
        if document.get("migrated_from"):
            notes.append(
                f"{directory / 'results.json'}: schema version {document['migrated_from']}, read as "
                f"version {SCHEMA_VERSION} ({'speedups renamed; ' if document['migrated_from'] == 1 else ''}the merged report is written as version "
                f"{SCHEMA_VERSION})"
            )
        # A sweep gives one test several rows, so duplicates count across shards only.
        for test_id in {row["test"] for row in document["results"]}:
            if test_id in owner:
                raise MergeError(
                    f"test {test_id} is in the reports of both {owner[test_id]} and {directory}; "
                    "shards must not overlap (were they given the same --specdec-shard?)"
                )
            owner[test_id] = directory
        rows.extend(document["results"])
        if document["fingerprint"]:  # empty: the shard measured nothing, so it cannot mix anything
            fingerprints.append((directory, document["fingerprint"]))
    # sorted() is stable: a test's rows keep the order their shard wrote them in.
    rows.sort(key=lambda row: row["test"])
    document = report_document(rows, _merged_fingerprint(fingerprints, allow_mixed))
    validate_report(document, "merged report")
    return {**document, "notes": notes} if notes else document


def _merged_fingerprint(fingerprints: list[tuple[Path, dict]], allow_mixed: bool) -> dict:
    if not fingerprints:
        return {}
    first_dir, first = fingerprints[0]
    mixed = False
    for directory, other in fingerprints[1:]:
        # Only the fields that change what is measured: python or plugin version may differ.
        differences = fingerprint_differences(first, other)
        if not differences:
            continue
        if not allow_mixed:
            name, (a, b) = next(iter(differences.items()))
            raise MergeError(
                f"fingerprint field {name} differs: {a!r} in {first_dir}, {b!r} in {directory}; absolute "
                "numbers from different environments do not belong in one report "
                "(--allow-mixed-environments merges them anyway)"
            )
        mixed = True
    if not mixed:
        return dict(first)
    # The report keeps the first environment and lists every shard's, so readers can tell.
    return {**first, "merged_fingerprints": [dict(fp) for _, fp in fingerprints]}


def _shard_baselines(directory: Path) -> dict[str, Baseline]:
    """test id -> Baseline for every file in a shard's baselines folder, each validated."""
    folder = directory / SHARD_BASELINES
    found: dict[str, Baseline] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith(".") or not path.is_file():
            continue  # lock and temp files
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BaselineError(f"{path}: cannot read baseline: {exc}", path=path) from None
        baseline = Baseline.from_json(data, path)
        if path.name != baseline_filename(baseline.test_id):
            # The name is what load_baseline looks for; a renamed copy would be written under another.
            raise BaselineError(
                f"{path}: file name does not match its test_id {baseline.test_id!r} "
                f"(expected {baseline_filename(baseline.test_id)})",
                path=path,
                field="test_id",
            )
        found[baseline.test_id] = baseline
    return found


def _shard_tests(directory: Path) -> tuple[set[str], bool] | None:
    """(test ids the shard ran, whether it ran its whole share), or None without tests.json."""
    path = directory / SHARD_TESTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MergeError(f"{path}: cannot read: {exc}") from None
    tests = data.get("tests") if isinstance(data, dict) else None
    complete = data.get("complete") if isinstance(data, dict) else None
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests) or not isinstance(complete, bool):
        raise MergeError(f'{path}: expected {{"tests": [test id, ...], "complete": true or false}}')
    return set(tests), complete


def _is_within(test_file: PurePosixPath, folder: PurePosixPath) -> bool:
    # Node ids are rootdir-relative POSIX paths; "." (a test at the top) has no parts and holds everything.
    return test_file.parts[: len(folder.parts)] == folder.parts


@dataclass
class _BaselinePlan:
    baseline_dir: Path
    incoming: list[Baseline]
    stale: list[Path]
    stale_skipped: str | None


def _plan_baselines(directories: Sequence[Path], baseline_dir: Path, delete_stale: bool) -> _BaselinePlan:
    """Read and check every shard's baselines and find the stale ones; writes nothing."""
    directories = [Path(d) for d in directories]
    owner: dict[str, Path] = {}
    incoming: list[Baseline] = []
    for directory in directories:
        for test_id, baseline in _shard_baselines(directory).items():
            if test_id in owner:
                raise MergeError(f"baseline of {test_id} was written by both {owner[test_id]} and {directory}")
            owner[test_id] = directory
            incoming.append(baseline)
    stale, skipped = _find_stale(directories, Path(baseline_dir), set(owner)) if delete_stale else ([], None)
    return _BaselinePlan(Path(baseline_dir), sorted(incoming, key=lambda b: b.test_id), stale, skipped)


def _apply_baselines(plan: _BaselinePlan) -> MergeOutcome:
    outcome = MergeOutcome(stale_skipped=plan.stale_skipped)
    # write_baseline validates and replaces each file atomically, as the plugin's own writes do.
    outcome.written = [write_baseline(plan.baseline_dir, baseline) for baseline in plan.incoming]
    remove_baselines(plan.stale)
    outcome.deleted = list(plan.stale)
    touched = {p.name for p in outcome.written} | {p.name for p in plan.stale}
    if plan.baseline_dir.is_dir():
        outcome.left_alone = sorted(
            p for p in plan.baseline_dir.glob("*.json") if not p.name.startswith(".") and p.name not in touched
        )
    return outcome


def merge_baselines(directories: Sequence[Path], baseline_dir: Path, *, delete_stale: bool) -> MergeOutcome:
    """Write every shard's baselines into `baseline_dir`; with `delete_stale`, drop ones no shard's test owns.

    Stale baselines are deleted only when every shard's tests.json says it ran
    its whole share; otherwise `MergeOutcome.stale_skipped` says why not.
    """
    return _apply_baselines(_plan_baselines(directories, baseline_dir, delete_stale))


def _find_stale(directories: list[Path], baseline_dir: Path, written: set[str]) -> tuple[list[Path], str | None]:
    ran: set[str] = set(written)
    for directory in directories:
        listed = _shard_tests(directory)
        if listed is None:
            return [], f"{directory / SHARD_TESTS} is missing, so which tests ran is unknown"
        tests, complete = listed
        if not complete:
            # A shard that stopped early did not run tests whose baselines are still wanted.
            return [], f"{directory} did not run its whole share ({SHARD_TESTS} says complete: false)"
        ran |= tests
    # Like the plugin, only baselines of tests under the folders the shards ran
    # are candidates: another suite's baselines in the same directory are not stale.
    folders = {PurePosixPath(test_id.split("::")[0]).parent for test_id in ran}
    stale = []
    for test_id, path in list_baselines(baseline_dir).items():
        if test_id == path.name:
            continue  # unreadable or duplicate file: nobody can tell whose it is, so leave it
        if test_id not in ran and any(_is_within(PurePosixPath(test_id.split("::")[0]), f) for f in folders):
            stale.append(path)
    return sorted(stale), None


def merge(
    out: Path,
    shards: Sequence[Path],
    *,
    update_baselines: bool = False,
    baseline_dir: Path = Path("baselines"),
    allow_mixed: bool = False,
) -> tuple[dict, list[Path], MergeOutcome | None]:
    """Merge shard reports into `out` (and, with `update_baselines`, their baselines into `baseline_dir`).

    Returns the merged document, the report files written and what happened to
    the baselines.  Everything is read and checked before anything is written.
    """
    document = merge_reports(shards, allow_mixed=allow_mixed)
    plan = _plan_baselines(shards, baseline_dir, True) if update_baselines else None
    written = write_report(out, document["results"], document["fingerprint"])
    outcome = _apply_baselines(plan) if plan is not None else None
    return document, written, outcome
