"""Access patterns: how many requests are sent, how fast, and how many at once.

The vocabulary is `vllm bench serve`'s (``--request-rate``, ``--burstiness``,
``--max-concurrency``, ``--num-prompts``) so a pattern can be read next to a
published benchmark and replayed with vLLM's own tool via :meth:`bench_flags`.

Arrivals are precomputed from a seed: the reference (no-SD) run and the SD run
of one test share the same offsets, so they see the same traffic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = ["CATALOG", "AccessPattern", "PatternError", "concurrency_sweep", "resolve_pattern"]

OVERRIDABLE = (
    "request_rate",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "search_start",
    "max_load",
    "bracket_probes",
    "bisect_probes",
    "max_probes",
    "resolution",
    "replay_speed",
    "think_time_s",
)
SEARCH_ONLY = ("search_start", "max_load", "bracket_probes", "bisect_probes", "max_probes", "resolution")
# What an SLO capacity search varies (see measure/capacity/search.py): the request rate, or the concurrency.
SEARCH_OVER = ("request_rate", "max_concurrency")
_SWEEP_NAME = re.compile(r"^concurrency_(\d+)$")


class PatternError(ValueError):
    """An access pattern that cannot be built: unknown name or bad value."""


def _check_rate(key: str, value: Any) -> float:
    # bool is an int subclass; True as a rate is always a typo.
    if isinstance(value, bool) or not isinstance(value, Real):
        raise PatternError(f"{key} must be a number > 0 (inf allowed), got {value!r}")
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise PatternError(f"{key} must be a number > 0 (inf allowed), got {value!r}")
    return value


def _check_count(key: str, value: Any, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        extra = " or None" if allow_none else ""
        raise PatternError(f"{key} must be an int >= 1{extra}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class AccessPattern:
    """A traffic shape, in `vllm bench serve` terms.

    ``request_rate`` is in requests/s; ``inf`` sends everything at once and
    lets ``max_concurrency`` alone pace the run. ``burstiness`` is the gamma
    shape of the inter-arrival gaps: 1 is Poisson, below 1 burstier, above 1
    more regular (``inf`` gives evenly spaced arrivals, as in vLLM).
    ``max_concurrency`` caps requests in flight (None: no cap).

    A pattern with ``search`` set is an SLO capacity search rather than one
    load: ``specdec.run()`` probes loads of ``search`` (``"request_rate"`` or
    ``"max_concurrency"``) from ``search_start``, each probe sending
    ``num_prompts`` requests (see `at_load`): it brackets the capacity (loads
    doubling, never above ``max_load``, at most ``bracket_probes`` probes),
    then bisects it and probes the boundary again (at most ``bisect_probes``).
    ``max_probes``, when set, caps both phases together, per side (see
    measure/capacity/search.py).  ``resolution`` is how narrow bisection makes a
    bracket (relative, default 0.1); half of it widens each bracket for probe
    noise, so a capacity check decides a threshold only that far from the
    ratio: a finer resolution decides closer calls, at the cost of probes.

    ``replay_speed`` set (the ``trace_replay`` pattern) sends each prompt at
    its own arrival time (a trace workload's), divided by the speed: 1 is the
    trace's own pace, 2 twice as fast.  ``think_time_s`` is the pause between
    a conversation's reply and its next turn (conversation workloads).
    """

    name: str
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    num_prompts: int = 16
    search: str | None = None
    search_start: float | None = None
    max_load: float | None = None
    bracket_probes: int = 8
    bisect_probes: int = 6
    max_probes: int | None = None
    resolution: float = 0.1
    replay_speed: float | None = None
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PatternError(f"name must be a non-empty string, got {self.name!r}")
        # Validate here too, so a hand-built AccessPattern fails at collection
        # rather than minutes later inside a run.
        object.__setattr__(self, "request_rate", _check_rate("request_rate", self.request_rate))
        object.__setattr__(self, "burstiness", _check_rate("burstiness", self.burstiness))
        object.__setattr__(
            self, "max_concurrency", _check_count("max_concurrency", self.max_concurrency, allow_none=True)
        )
        object.__setattr__(self, "num_prompts", _check_count("num_prompts", self.num_prompts))
        if self.replay_speed is not None:
            speed = _check_rate("replay_speed", self.replay_speed)
            if math.isinf(speed) or self.search is not None:
                raise PatternError(
                    f"replay_speed must be a finite number > 0 (and no capacity search), got {self.replay_speed!r}"
                )
            object.__setattr__(self, "replay_speed", speed)
        think = self.think_time_s
        if isinstance(think, bool) or not isinstance(think, Real) or not 0 <= think < math.inf:
            raise PatternError(f"think_time_s must be a number of seconds >= 0, got {think!r}")
        object.__setattr__(self, "think_time_s", float(think))
        if self.search is not None:
            if self.search not in SEARCH_OVER:
                raise PatternError(f"search must be one of {', '.join(SEARCH_OVER)} or None, got {self.search!r}")
            start = 1.0 if self.search_start is None else self.search_start
            start = _check_rate("search_start", start)
            if math.isinf(start) or (self.search == "max_concurrency" and not float(start).is_integer()):
                raise PatternError(
                    f"search_start must be a finite {'whole ' if self.search != 'request_rate' else ''}"
                    f"number > 0, got {self.search_start!r}"
                )
            object.__setattr__(self, "search_start", start)
            self._check_search_budget()

    def _check_search_budget(self) -> None:
        whole = self.search == "max_concurrency"
        if self.max_load is not None:
            ok = (
                not isinstance(self.max_load, bool)
                and isinstance(self.max_load, Real)
                and math.isfinite(self.max_load)
                and self.max_load >= self.search_start
                and (not whole or float(self.max_load).is_integer())
            )
            if not ok:
                raise PatternError(
                    f"max_load must be a finite {'whole ' if whole else ''}number >= search_start "
                    f"({self.search_start:g}) or None, got {self.max_load!r}"
                )
            object.__setattr__(self, "max_load", float(self.max_load))
        for key, least, none in (("bracket_probes", 2, False), ("bisect_probes", 0, False), ("max_probes", 2, True)):
            value = getattr(self, key)
            if value is None and none:
                continue
            if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
                raise PatternError(f"{key} must be an int >= {least}{' or None' if none else ''}, got {value!r}")
        if (
            isinstance(self.resolution, bool)
            or not isinstance(self.resolution, (int, float))
            or not 0 < self.resolution < 1
        ):
            raise PatternError(f"resolution must be a number in (0, 1), got {self.resolution!r}")

    def search_bounds(self) -> dict[str, Any]:
        """The capacity search's keyword arguments (measure.capacity.search.CapacitySearch)."""
        return dict(
            over=self.search,
            start=self.search_start,
            max_load=self.max_load,
            bracket_probes=self.bracket_probes,
            bisect_probes=self.bisect_probes,
            max_probes=self.max_probes,
            resolution=self.resolution,
        )

    def at_load(self, load: float) -> AccessPattern:
        """One probe of a capacity search: this pattern at request rate (or concurrency) `load`."""
        if self.search is None:
            raise PatternError(f"{self.name!r} is not a capacity search (search is None)")
        if self.search == "request_rate":
            return replace(self, name=f"{self.name}@{load:g}/s", request_rate=float(load), search=None)
        return replace(
            self, name=f"{self.name}@c{int(load)}", request_rate=math.inf, max_concurrency=int(load), search=None
        )

    def with_overrides(self, **overrides: Any) -> AccessPattern:
        """A copy with some of request_rate, burstiness, max_concurrency, num_prompts changed."""
        for key in overrides:
            if key not in OVERRIDABLE:
                raise PatternError(
                    f"unknown access-pattern override {key!r} for {self.name!r}; allowed: {', '.join(OVERRIDABLE)}"
                )
        searching = [key for key in overrides if key in SEARCH_ONLY]
        if searching and self.search is None:
            raise PatternError(
                f"{', '.join(searching)} only apply to capacity searches (slo_capacity, "
                f"slo_capacity_concurrency); {self.name!r} sends one load"
            )
        if not overrides:
            return self
        return replace(self, **overrides)

    def arrival_offsets(self, seed: int = 0) -> list[float]:
        """Seconds after the start at which request ``i`` is sent.

        The first request goes out after its own gap, not at 0, as in vLLM.
        ``request_rate`` inf gives all zeros.
        """
        n = self.num_prompts
        if math.isinf(self.request_rate):
            return [0.0] * n
        if math.isinf(self.burstiness):
            gaps = np.full(n, 1.0 / self.request_rate)
        else:
            # Exactly `vllm bench serve --seed S`: it seeds NumPy's global
            # (legacy) generator with S and draws one gamma gap per request, so
            # the reproduce command sends the very same arrivals.
            scale = 1.0 / (self.request_rate * self.burstiness)
            gaps = np.random.RandomState(seed).gamma(shape=self.burstiness, scale=scale, size=n)
        cumulative = np.cumsum(gaps)
        # vLLM's `vllm bench serve` (get_request) rescales the cumulative
        # delays so the last one is exactly num_prompts/rate: the raw sum of
        # gamma draws misses that by a few percent and would make throughput
        # depend on the seed. Doing the same keeps our runs at the same mean
        # rate as vLLM's for the same flags.
        if cumulative[-1] > 0:
            cumulative *= (n / self.request_rate) / cumulative[-1]
        return [float(x) for x in cumulative]

    def bench_flags(self) -> list[str]:
        """The equivalent `vllm bench serve` flags."""
        flags = ["--request-rate", _flag_number(self.request_rate), "--burstiness", _flag_number(self.burstiness)]
        if self.max_concurrency is not None:
            flags += ["--max-concurrency", str(self.max_concurrency)]
        flags += ["--num-prompts", str(self.num_prompts)]
        return flags

    def describe(self) -> dict[str, Any]:
        """JSON-safe summary for reports and baselines (inf is written as "inf")."""
        if math.isinf(self.request_rate):
            arrivals = "all at once"
        elif self.burstiness == 1.0:
            arrivals = "poisson"
        elif math.isinf(self.burstiness):
            arrivals = "uniform"
        else:
            arrivals = f"gamma(shape={_flag_number(self.burstiness)})"
        described = {
            "name": self.name,
            "request_rate": _json_number(self.request_rate),
            "burstiness": _json_number(self.burstiness),
            "max_concurrency": self.max_concurrency,
            "num_prompts": self.num_prompts,
            "arrivals": arrivals,
        }
        if self.search is not None:
            described.update(
                search=self.search,
                search_start=self.search_start,
                max_load=self.max_load,
                bracket_probes=self.bracket_probes,
                bisect_probes=self.bisect_probes,
                max_probes=self.max_probes,
                resolution=self.resolution,
            )
        if self.replay_speed is not None:
            described.update(
                arrivals=f"the trace's own times / {_flag_number(self.replay_speed)}", replay_speed=self.replay_speed
            )
        if self.think_time_s:
            described["think_time_s"] = self.think_time_s
        return described

    def offsets_for(self, prompts: list, seed: int = 0) -> list[float]:
        """Request i's send time: the trace's (its prompt's arrival, scaled) when replaying, else `arrival_offsets`."""
        if self.replay_speed is None:
            return self.arrival_offsets(seed)
        times = [getattr(prompts[i % len(prompts)], "arrival_s", None) for i in range(self.num_prompts)]
        if any(t is None for t in times):
            raise PatternError(
                f"{self.name!r} replays arrival times, and these prompts have none: give it a trace "
                "workload (kind mooncake_trace)"
            )
        return [t / self.replay_speed for t in times]


def _flag_number(value: float) -> str:
    """A number as `vllm bench serve` takes it on its command line: a whole one without a point, inf as inf."""
    if math.isinf(value):
        return "inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _json_number(value: float) -> float | str:
    # JSON has no infinity; json.dumps would emit "Infinity", which strict parsers reject.
    return "inf" if math.isinf(value) else value


CATALOG: dict[str, AccessPattern] = {
    p.name: p
    for p in (
        AccessPattern("throughput_low", math.inf, 1.0, 1, 16),
        AccessPattern("throughput_high", math.inf, 1.0, 32, 256),
        AccessPattern("burstiness_high", 64.0, 0.2, 32, 256),
        AccessPattern("burstiness_mid", 8.0, 1.0, 32, 256),
        AccessPattern("burstiness_low", 2.0, 4.0, 32, 256),
        # SLO capacity searches: Poisson arrivals at rising rates, or closed loops at rising concurrency.
        AccessPattern("slo_capacity", 1.0, 1.0, None, 32, search="request_rate", search_start=1.0),
        AccessPattern("slo_capacity_concurrency", math.inf, 1.0, 1, 32, search="max_concurrency", search_start=1),
        # A trace workload's own arrival times (replay_speed 2: twice as fast); no concurrency cap.
        AccessPattern("trace_replay", math.inf, 1.0, None, 16, replay_speed=1.0),
        # Users in conversation: a new user every 2 s on average, 1 s to read each reply before the next turn.
        AccessPattern("multi_turn", 0.5, 1.0, None, 8, think_time_s=1.0),
    )
}


def concurrency_sweep(
    levels: Iterable[int] = (1, 5, 25, 50, 100, 200), num_prompts: int | None = None, prompts_per_level: int = 4
) -> list[AccessPattern]:
    """One pattern per concurrency level, rate inf, named ``concurrency_<level>``.

    Each level sends ``num_prompts`` requests when given, else
    ``max(16, prompts_per_level * level)``: a few waves at the cap so the
    steady state outweighs the ramp-up and drain, and never fewer than 16 so
    low levels still yield usable percentiles.
    """
    _check_count("prompts_per_level", prompts_per_level)
    if num_prompts is not None:
        _check_count("num_prompts", num_prompts)
    patterns = []
    for level in levels:
        _check_count("concurrency level", level)
        n = num_prompts if num_prompts is not None else max(16, prompts_per_level * level)
        patterns.append(AccessPattern(f"concurrency_{level}", math.inf, 1.0, level, n))
    if not patterns:
        raise PatternError("concurrency_sweep needs at least one level")
    return patterns


def resolve_pattern(
    name_or_pattern: str | AccessPattern,
    overrides: Mapping[str, Any] | None = None,
    *,
    registered: Mapping[str, AccessPattern] | None = None,
) -> AccessPattern:
    """A catalog name (or an AccessPattern) with overrides applied.

    ``registered`` holds patterns added by downstream hooks; they shadow a
    catalog entry of the same name, so a repo can redefine e.g.
    ``throughput_high`` for its own hardware. ``concurrency_<N>`` names
    resolve to the matching :func:`concurrency_sweep` level.
    """
    overrides = dict(overrides or {})
    if isinstance(name_or_pattern, AccessPattern):
        return name_or_pattern.with_overrides(**overrides)
    if not isinstance(name_or_pattern, str):
        raise PatternError(f"access pattern must be a catalog name or an AccessPattern, got {name_or_pattern!r}")
    known = {**CATALOG, **(registered or {})}
    pattern = known.get(name_or_pattern)
    if pattern is None and (match := _SWEEP_NAME.match(name_or_pattern)):
        level = int(match.group(1))
        if level >= 1:
            (pattern,) = concurrency_sweep([level])
    if pattern is None:
        raise PatternError(
            f"unknown access pattern {name_or_pattern!r}; known: {', '.join(sorted(known))} (and concurrency_<N>)"
        )
    return pattern.with_overrides(**overrides)
