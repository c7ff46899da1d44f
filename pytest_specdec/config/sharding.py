"""Split a specdec suite into N deterministic shards for CI matrices (``--specdec-shard I/N``).

Servers are the expensive part of a specdec run (minutes to load a model), so
the unit of splitting is the target (`ServerSpec.target`), not the test: a
target's reference server and every SD server measured against it land in
one shard, and no configuration is started by two shards.

Every shard of a CI matrix computes the assignment on its own, from its own
collection, so it must come out the same everywhere: it depends only on the
set of (test, target) pairs, never on collection order, ``PYTHONHASHSEED``
or the machine.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from collections.abc import Sequence

from ..atomic import write_atomic

__all__ = ["assign_shards", "parse_shard", "select"]


def parse_shard(value: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``1 <= I <= N`` (1-based, as CI matrices count)."""
    text = str(value).strip()
    index_text, sep, count_text = text.partition("/")
    try:
        if not sep:
            raise ValueError
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--specdec-shard: expected I/N such as 2/4 (shard I of N, counting from 1), got {value!r}"
        ) from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"--specdec-shard: the number of shards must be at least 1, got {value!r}")
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(
            f"--specdec-shard: shard index must be between 1 and {count} (shards count from 1), got {value!r}"
        )
    return index, count


def assign_shards(tests: Sequence[tuple[str, str | None]], count: int) -> dict[str, int]:
    """Map every test node id to a shard ``1..count``.

    `tests` holds (node id, target or None) per test. Tests of one target
    always share a shard (its reference server starts once, in one shard); a
    test without one (a plain test) is a group of its own. Groups are placed
    greedily, biggest first, each on the currently lightest shard, so no shard
    ends up more than the largest group's size heavier than another.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"the number of shards must be an integer of at least 1, got {count!r}")
    groups: dict[tuple[int, str], list[str]] = {}
    seen: set[str] = set()
    for nodeid, target in tests:
        if nodeid in seen:
            raise ValueError(f"test {nodeid!r} is listed twice; node ids must be unique")
        seen.add(nodeid)
        # The leading 0/1 keeps a plain test's node id from ever meeting a target.
        key = (1, nodeid) if target is None else (0, target)
        groups.setdefault(key, []).append(nodeid)

    # Sorting by content alone (never input order, never hash()) makes every
    # shard of a matrix compute the same assignment from its own collection.
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    loads = [0] * count
    assignment: dict[str, int] = {}
    for _, members in ordered:
        # min() returns the first lightest shard: ties go to the lowest number.
        shard = min(range(count), key=loads.__getitem__)
        loads[shard] += len(members)
        for nodeid in members:
            assignment[nodeid] = shard + 1
    return assignment


def select(tests: Sequence[tuple[str, str | None]], index: int, count: int) -> list[str]:
    """Node ids of shard `index` (1-based) of `count`, in the order of `tests`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"the number of shards must be an integer of at least 1, got {count!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= count:
        raise ValueError(f"shard index must be between 1 and {count}, got {index!r}")
    assignment = assign_shards(tests, count)
    return [nodeid for nodeid, _ in tests if assignment[nodeid] == index]


# --- pytest-xdist: which target each test of a worker belongs to --------------------------


def write_groups(directory: str | os.PathLike, worker: str, groups: dict[str, str]) -> None:
    """Called on a worker after collection: {node id: group} for its specdec tests."""
    write_atomic(Path(directory) / f"groups-{worker}.json", json.dumps(groups))


def read_groups(directory: str | os.PathLike) -> dict[str, str]:
    groups: dict[str, str] = {}
    for path in sorted(Path(directory).glob("groups-*.json")):
        groups.update(json.loads(path.read_text()))
    return groups


def shard_order(
    nodeids: list[str], targets: list[str | None], order: list[int], shard: tuple[int, int] | None
) -> tuple[list[int], list[int]]:
    """The run order kept by `shard` (`select`'s arguments), and the indices it deselects.

    Grouped by target, as under xdist: a target's reference server and its SD
    servers start in one shard only.
    """
    if shard is None:
        return order, []
    kept = set(select(list(zip(nodeids, targets)), *shard))
    return [index for index in order if nodeids[index] in kept], [i for i, n in enumerate(nodeids) if n not in kept]
