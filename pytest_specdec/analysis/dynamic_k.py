"""Dynamic speculation (vLLM's ``num_speculative_tokens_per_batch_size``): its switch points, a check that
throughput does not fall where k switches, and a schedule recommended from runs at fixed k.

vLLM picks each step's k from the batch size (rows ``[start, end, k]``, inclusive; a gap keeps the k
before it; k is clamped to ``num_speculative_tokens``).  Reported on GPUs: aggregate throughput
collapsing where a schedule switches k (vllm-project/vllm#49548, 8 concurrent requests from ~232 to
24-157 tok/s), and the best k falling with batch size (sgl-project/sglang#22246).  A closed-loop
concurrency level is the batch size only while every slot is decoding: ramp-up, drain and prefills
dip below it, so the levels on both sides of a switch are measured.  Pure logic, no pytest.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple

from ..engines.server_spec import SCHEDULE_KEY, check_k_schedule

Schedule = list[tuple[int, int, int]]


class Switch(NamedTuple):
    """Where k changes: the last batch size run at `k_before`, the first run at `k_after`."""

    last_before: int
    first_after: int
    k_before: int
    k_after: int

    def describe(self) -> str:
        return f"k {self.k_before} -> {self.k_after} between batch {self.last_before} and {self.first_after}"


def schedule_of(speculative_config: Mapping[str, Any] | None) -> Schedule | None:
    """The schedule vLLM runs (sorted, each k clamped to ``num_speculative_tokens``), or None without one."""
    if not speculative_config or speculative_config.get(SCHEDULE_KEY) is None:
        return None
    most = speculative_config.get("num_speculative_tokens")
    rows = check_k_schedule(speculative_config[SCHEDULE_KEY])
    return [(start, end, k if most is None else min(k, most)) for start, end, k in rows]


def switch_points(schedule: Schedule | Mapping[str, Any]) -> list[Switch]:
    """Every batch size at which the k changes (a gap keeps the earlier k; equal neighbours are no switch)."""
    rows = schedule_of(schedule) if isinstance(schedule, Mapping) else check_k_schedule(schedule)
    return [
        Switch(start - 1, start, before[2], k)
        for before, (start, _, k) in zip(rows or [], (rows or [])[1:])
        if k != before[2]
    ]


def levels_around_switches(schedule: Schedule | Mapping[str, Any], max_level: int | None = None) -> list[int]:
    """The concurrency levels to measure: each switch's two sides and one level beyond each, where they exist."""
    levels = {
        level
        for s in switch_points(schedule)
        for level in (s.last_before - 1, s.last_before, s.first_after, s.first_after + 1)
    }
    return sorted(level for level in levels if level >= 1 and (max_level is None or level <= max_level))


def _throughputs(sweep: Any) -> tuple[dict[int, float], dict[int, float], dict[int, str]]:
    """(SD tok/s, reference tok/s, why a level has no figure) per level, from a SweepResult or a mapping."""
    if isinstance(sweep, Mapping):
        return {int(level): float(value) for level, value in sweep.items()}, {}, {}
    sd, reference, missing = {}, {}, {}
    for level, result in zip(sweep.levels, sweep.results):
        if why := result.unavailable("output_throughput"):
            missing[level] = why
            continue
        sd[level], reference[level] = (
            result.speculative_metric("output_throughput"),
            result.reference_metric("output_throughput"),
        )
    return sd, reference, missing


def _num(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else format("-", ">" + spec.lstrip("+").split(".")[0])


@dataclass
class SwitchCheck:
    """The verdict of `check_no_fall_across_switches`: one row per switch, and a table of them."""

    tolerance: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    throughput: dict[int, float] = field(default_factory=dict)
    reference: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and all(row["ok"] for row in self.rows)

    def table(self) -> str:
        lines = [f"{'switch':<34} {'before tok/s':>13} {'after tok/s':>12} {'change':>8} {'ref change':>11}  verdict"]
        for row in self.rows:
            lines.append(
                f"{row['switch'].describe():<34} {_num(row['before'], '13.1f')} "
                f"{_num(row['after'], '12.1f')} {_num(row['change'], '+8.1%')} "
                f"{_num(row['reference_change'], '+11.1%')}  {row['verdict']}"
            )
        levels = ", ".join(f"c{level}: {value:.1f}" for level, value in sorted(self.throughput.items()))
        lines.append(f"SD output tok/s by concurrency: {levels or 'none'}")
        if self.reference:
            lines.append("reference: " + ", ".join(f"c{lv}: {v:.1f}" for lv, v in sorted(self.reference.items())))
        return "\n".join(lines + self.problems)

    def describe(self) -> str:
        return (
            f"no fall of more than {self.tolerance:.0%} across any k switch"
            if self.ok
            else f"throughput falls (or was not measured) across a k switch, tolerance {self.tolerance:.0%}"
        )


def check_no_fall_across_switches(
    sweep: Any, schedule: Schedule | Mapping[str, Any], tolerance: float = 0.10
) -> SwitchCheck:
    """Output throughput at the first level after each switch against the last level before it.

    `sweep` is a `SweepResult` (SD's median tok/s per level; the reference's change beside it shows
    whether the machine itself stopped scaling) or a ``{concurrency: tok/s}`` mapping.  Throughput
    should not fall as concurrency rises: a fall of more than `tolerance` fails, and so does a
    switch whose levels were not measured, or a schedule with no switch at all (after clamping).
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance!r}")
    switches = switch_points(schedule)
    sd, reference, missing = _throughputs(sweep)
    check = SwitchCheck(tolerance, throughput=sd, reference=reference)
    if not switches:
        check.problems.append(
            "the schedule switches k nowhere (after vLLM's clamp to num_speculative_tokens): nothing to check"
        )
    for switch in switches:
        before, after = (sd.get(level, math.nan) for level in (switch.last_before, switch.first_after))
        unmeasured = [
            f"concurrency {level} not measured" + (f" ({missing[level]})" if level in missing else "")
            for level, value in ((switch.last_before, before), (switch.first_after, after))
            if not math.isfinite(value)
        ]
        change = after / before - 1 if not unmeasured and before > 0 else math.nan
        ref_before, ref_after = (reference.get(lv, math.nan) for lv in (switch.last_before, switch.first_after))
        ref_change = ref_after / ref_before - 1 if ref_before > 0 else math.nan
        ok = not unmeasured and math.isfinite(change) and change >= -tolerance
        verdict = "; ".join(unmeasured) or (
            "ok"
            if ok
            else f"FALLS {-change:.1%} (> {tolerance:.0%})"
            + (f"; the reference fell too ({ref_change:+.1%})" if math.isfinite(ref_change) and ref_change < 0 else "")
        )
        check.rows.append(
            dict(
                switch=switch,
                before=before,
                after=after,
                change=change,
                reference_change=ref_change,
                ok=ok,
                verdict=verdict,
            )
        )
    return check


def assert_no_fall_across_switches(
    sweep: Any, schedule: Schedule | Mapping[str, Any], tolerance: float = 0.10
) -> SwitchCheck:
    """`check_no_fall_across_switches`, raising AssertionError with its table when it fails."""
    check = check_no_fall_across_switches(sweep, schedule, tolerance)
    if not check.ok:
        raise AssertionError(f"{check.describe()}\n{check.table()}")
    return check


class KMeasurement(NamedTuple):
    """One repeat at one fixed k (0: no speculation) and one concurrency; `repeat` pairs runs that sent
    the same prompts (the plugin's repeat i of every configuration does)."""

    k: int
    concurrency: int
    output_throughput: float
    failed_requests: int = 0
    repeat: int | None = None


# One k's output tok/s at one concurrency, over its valid repeats.
KStats = NamedTuple("KStats", [("k", int), ("median", float), ("low", float), ("high", float), ("repeats", int)])


@dataclass
class LevelPick:
    """The k chosen at one concurrency, every candidate's figures, and what was set aside."""

    concurrency: int
    k: int
    candidates: list[KStats]
    discarded: int = 0  # repeats with failed requests (or no figure)
    tie: str = ""

    def stats(self, k: int) -> KStats | None:
        return next((c for c in self.candidates if c.k == k), None)


@dataclass
class Band:
    """Adjacent measured concurrencies with the same best k: one schedule row."""

    start: int
    end: int
    k: int
    levels: list[LevelPick]

    def as_row(self) -> list[int]:
        return [self.start, self.end, self.k]


class Recommendation(list):
    """The `Band`s of `recommend_k`, lowest first, and the levels no k could be chosen at (`skipped`)."""

    def __init__(self, bands=(), skipped=()):
        super().__init__(bands)
        self.skipped = list(skipped)

    def as_schedule(self) -> list[list[int]]:
        """Rows to paste into ``num_speculative_tokens_per_batch_size``."""
        return [band.as_row() for band in self]

    def table(self) -> str:
        picks = [pick for band in self for pick in band.levels]
        ks = sorted({c.k for pick in picks for c in pick.candidates})
        lines = [f"{'concurrency':>11} " + " ".join(f"{f'k={k} tok/s (min-max)':>24}" for k in ks) + "  best"]
        for pick in picks:
            cells = [
                f"{f'{s.median:.1f} ({s.low:.1f}-{s.high:.1f})' if s else 'none valid':>24}"
                for s in map(pick.stats, ks)
            ]
            note = (f", {pick.discarded} repeat(s) discarded" if pick.discarded else "") + (
                f"; {pick.tie}" if pick.tie else ""
            )
            lines.append(f"{pick.concurrency:>11} " + " ".join(cells) + f"  k={pick.k}{note}")
        lines += [f"no k at {why}" for why in self.skipped]
        return "\n".join(lines + [f"num_speculative_tokens_per_batch_size: {self.as_schedule()}"])


def recommend_k(measurements: Iterable[KMeasurement | tuple], tie_within: float = 0.01) -> Recommendation:
    """Per concurrency, the k with the highest median output throughput over repeats; then bands of equal k.

    Repeats with failed requests (or no finite figure) are discarded and counted; a level left with
    none is named in `skipped`.  A k ties with the best unless the best beat it by more than
    `tie_within` in every repeat both ran (paired by `repeat`: repeats that sent other prompts differ by
    more than noise); unpaired, a k ties when its median lies within the best's min-max range or within
    `tie_within` of its median.  The smallest tied k is chosen, and the tie is said.  The first band
    starts at batch size 1 (vLLM's rule); between measured levels (and over a skipped one) vLLM keeps
    the lower band's k, as it does through gaps.
    """
    by_level: dict[int, dict[int, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    discarded: dict[int, int] = defaultdict(int)
    for index, record in enumerate(measurements):
        k, level, value, failed, repeat = KMeasurement(*record)
        if failed or not math.isfinite(value):
            discarded[level] += 1
            by_level.setdefault(level, defaultdict(dict))  # a level all of whose repeats failed is still named
        else:
            by_level[level][k][("r", repeat) if repeat is not None else ("i", index)] = value

    def ties(runs: dict[int, dict], best: KStats, other: KStats) -> bool:
        paired = [(runs[other.k][r], runs[best.k][r]) for r in runs[other.k] if r[0] == "r" and r in runs[best.k]]
        if paired:
            return any(value >= top * (1 - tie_within) for value, top in paired)
        return other.median >= min(best.low, best.median * (1 - tie_within))

    bands = Recommendation()
    for level in sorted(by_level):
        runs = by_level[level]
        stats = [
            KStats(k, statistics.median(v), min(v), max(v), len(v))
            for k, v in ((k, list(runs[k].values())) for k in sorted(runs))
        ]
        if not stats:
            bands.skipped.append(f"concurrency {level}: every repeat failed ({discarded[level]} discarded)")
            continue
        best = max(stats, key=lambda s: s.median)
        tied = [s for s in stats if ties(runs, best, s)]
        chosen = min(tied, key=lambda s: s.k)
        tie = f"k={', '.join(str(s.k) for s in tied)} tie within noise, the smaller k chosen" if len(tied) > 1 else ""
        pick = LevelPick(level, chosen.k, stats, discarded[level], tie)
        if bands and bands[-1].k == pick.k:
            bands[-1].end = level
            bands[-1].levels.append(pick)
        else:
            bands.append(Band(level if bands else 1, level, pick.k, [pick]))
    if not bands:
        raise ValueError(
            "recommend_k needs at least one valid measurement; "
            + ("; ".join(bands.skipped) if bands.skipped else "none given")
        )
    return bands


def measurements_from(results: Iterable[Any], include_reference: bool = True) -> list[KMeasurement]:
    """Each repeat of fixed-k `SpecDecResult`s as a KMeasurement; the reference once per level as k=0."""
    out, seen = [], set()
    for result in results:
        level = result.pattern.get("max_concurrency")
        sides = [(result.spec.speculative_config["num_speculative_tokens"], result.speculative_runs)]
        if include_reference and level not in seen:
            seen.add(level)
            sides.append((0, result.reference_runs))
        out += [
            KMeasurement(k, level, run.metrics.output_throughput, run.metrics.failed, run.repeat)
            for k, runs in sides
            for run in runs
        ]
    return out
