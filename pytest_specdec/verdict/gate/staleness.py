"""Whether a stored baseline measured what this run measured: a baseline is paired with this run draw by
draw on their seeds, and that pairing means something only on the same traffic.

A test whose workload (its name, lengths, prompt counts, data file), access pattern or draws changed since the
baseline was recorded has a stale baseline, not a regression (syrupy treats a snapshot whose input changed the
same way): the gate compares nothing, names each field that differs, and says how to record it again.
Fields only one side holds (a baseline recorded before the plugin described them) are not compared.
"""

from __future__ import annotations

import json
from typing import Any

STALE = "stale"
UPDATE_HINT = "re-record it with --specdec-update-baselines"


def _plain(value: Any) -> Any:
    """`value` as the baseline file holds it (tuples as lists, numbers and strings as JSON reads them)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _differences(prefix: str, recorded: Any, now: Any) -> list[str]:
    """Fields of `recorded` and `now` that differ; a key only one side holds is not compared (a field the
    plugin's descriptions gained or dropped since the baseline was written)."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        found = []
        for key in sorted(set(recorded) & set(now)):
            found += _differences(f"{prefix}.{key}", recorded[key], now[key])
        return found
    return [] if recorded == now else [f"{prefix}: recorded {_shown(recorded)}, now {_shown(now)}"]


def _shown(value: Any) -> str:
    return "absent" if value is None else json.dumps(value, sort_keys=True)


def stale_fields(config: dict, result: Any) -> list[str]:
    """Each field of the baseline's `config` that differs from `result`'s workload, access pattern and draws
    (the seed of each), as "field: recorded X, now Y"; [] when it measured the same.

    This run may take fewer draws than the baseline recorded (the rule decided sooner): its seeds must be
    among the recorded ones."""
    workload, pattern = getattr(result, "workload", None), getattr(result, "pattern", None)
    seeds = list(result.repeat_seeds()) if hasattr(result, "repeat_seeds") else []
    found = []
    if "workload" in config and workload is not None:
        found += _differences("workload", _plain(config["workload"]), _plain(workload))
    if "pattern" in config and pattern is not None:
        found += _differences("access pattern", _plain(config["pattern"]), _plain(pattern))
    recorded = config.get("repeat_seeds")
    if recorded is not None and not set(seeds) <= set(recorded):
        found.append(f"draws (their seeds): recorded {recorded}, now {list(seeds)}")
    return found


def stale_report(test_id: str, where: str, fields: list[str]) -> str:
    """What the gate says of a stale baseline: each field that differs, and the command that records it."""
    listed = "\n".join(f"  {field}" for field in fields)
    return (
        f"{test_id}: stale baseline ({where}): it measured other traffic than this run, so nothing was compared "
        f"(neither a regression nor a pass):\n{listed}\n{UPDATE_HINT}"
    )
