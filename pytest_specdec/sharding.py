"""Split a specdec suite into N deterministic shards for CI matrices (``--specdec-shard I/N``).

Servers are the expensive part of a specdec run (minutes to load a model), so
the unit of splitting is the server configuration, not the test: every test
that runs on one SD server lands in the same shard, and no configuration is
started by two shards.

Every shard of a CI matrix computes the assignment on its own, from its own
collection, so it must come out the same everywhere: it depends only on the
set of (test, server key) pairs, never on collection order, ``PYTHONHASHSEED``
or the machine.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence

__all__ = ["assign_shards", "parse_shard", "reference_group", "select"]


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


def reference_group(server_key: str) -> str:
    """A `group_of` for `assign_shards` that keeps every SD config of one target together.

    Server keys are `ServerSpec.key` JSON; dropping the speculative part gives
    the key of the target's no-SD reference server, which all its SD configs share.
    """
    try:
        data = json.loads(server_key)
    except ValueError:
        return server_key  # not a ServerSpec key: group by itself
    if not isinstance(data, dict):
        return server_key
    data["speculative_config"] = None
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def assign_shards(
    tests: Sequence[tuple[str, str | None]],
    count: int,
    group_of: Callable[[str], str] | None = None,
) -> dict[str, int]:
    """Map every test node id to a shard ``1..count``.

    `tests` holds (node id, server key or None) per test. Tests with one server
    key always share a shard; a test without one (a plain test) is a group of
    its own. Groups are placed greedily, biggest first, each on the currently
    lightest shard, so no shard ends up more than the largest group's size
    heavier than another.

    The grouping key is the SD server's key, not the target's: a target's
    no-SD reference server is shared by all its SD configs, so splitting by SD
    config means each shard starts its own reference server for the targets it
    has. That is the cost of sharding, paid in wall time on parallel machines
    for a finer balance. Pass ``group_of=reference_group`` to keep whole
    targets together instead (one reference server in total, coarser balance).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"the number of shards must be an integer of at least 1, got {count!r}")
    groups: dict[tuple[int, str], list[str]] = {}
    seen: set[str] = set()
    for nodeid, server_key in tests:
        if nodeid in seen:
            raise ValueError(f"test {nodeid!r} is listed twice; node ids must be unique")
        seen.add(nodeid)
        # The leading 0/1 keeps a plain test's node id from ever meeting a server key.
        if server_key is None:
            key = (1, nodeid)
        else:
            key = (0, group_of(server_key) if group_of is not None else server_key)
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


def select(
    tests: Sequence[tuple[str, str | None]],
    index: int,
    count: int,
    group_of: Callable[[str], str] | None = None,
) -> list[str]:
    """Node ids of shard `index` (1-based) of `count`, in the order of `tests`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"the number of shards must be an integer of at least 1, got {count!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= count:
        raise ValueError(f"shard index must be between 1 and {count}, got {index!r}")
    assignment = assign_shards(tests, count, group_of)
    return [nodeid for nodeid, _ in tests if assignment[nodeid] == index]
