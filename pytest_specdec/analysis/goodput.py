"""Goodput and SLO checks, as `vllm bench serve --goodput` defines them.

Throughput counts every completed request; goodput counts only the requests a
user would call served: those within every declared service level objective
(SLO). The definition is vLLM's (``calculate_metrics`` in
``vllm/benchmarks/serve.py``), so a figure here can be put next to one from
``vllm bench serve --goodput tpot:50``:

- SLO keys are ``ttft``, ``tpot`` and ``e2el``, values in milliseconds, >= 0;
- a completed request is good when ``slo >= metric`` for every declared key;
- per-request TPOT is ``(latency - ttft) / (output_tokens - 1)``, taken as 0
  for requests with at most one output token (so they pass a TPOT SLO);
- failed requests are never good;
- ``request_goodput = good requests / run duration``.

:class:`SLOPercentiles` is a different, run-level check (what capacity search
uses): the p-th percentile of each metric against the SLO. There a metric with
no values cannot be judged and fails as ``unavailable: ...``, never a pass.

Objectives may also be relative, beyond vLLM's keys: ``tpot_x=2`` is twice
the reference's median TPOT measured unloaded in the same session
(:func:`parse_objectives`). A number of milliseconds holds on the machine it
was tuned on; a multiple moves with the machine. :func:`resolve_slo` turns
them into milliseconds, and only resolved limits reach the checks above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from numbers import Real
from typing import Any

__all__ = [
    "SLO_KEYS",
    "Goodput",
    "SLOPercentiles",
    "describe_objectives",
    "goodput",
    "is_relative",
    "parse_objectives",
    "parse_slo",
    "resolve_slo",
]

SLO_KEYS = ("ttft", "tpot", "e2el")
RELATIVE = "_x"
_VALID = (
    "valid keys: ttft, tpot, e2el, in milliseconds >= 0 (bare or with _ms) or as a multiple > 0 of the "
    "reference's unloaded median (with _x, e.g. tpot_x=2)"
)


def parse_slo(slo: Mapping[str, Any] | Iterable[str] | str) -> dict[str, float]:
    """An SLO as ``{"ttft": ms, ...}`` from any of the spellings in use.

    Accepts the marker's ``{"tpot_ms": 50, "ttft_ms": 2000}``, the bare
    ``{"tpot": 50}``, and vLLM's command-line pairs ``["tpot:50", "ttft:2000"]``
    (or one string of pairs separated by spaces or commas). An empty SLO is an
    error: goodput without an objective is plain throughput, and vLLM reports
    none then. Relative objectives (``tpot_x``) are refused here: they mean
    nothing until :func:`resolve_slo` turns them into milliseconds.
    """
    parsed = parse_objectives(slo)
    if relative := [key for key in parsed if key.endswith(RELATIVE)]:
        raise ValueError(
            f"SLO key {relative[0]!r} is relative to the reference's unloaded run and has no "
            "milliseconds yet: resolve it first (goodput.resolve_slo); an SLO capacity search does so"
        )
    return parsed


def parse_objectives(slo: Mapping[str, Any] | Iterable[str] | str) -> dict[str, float]:
    """Absolute and relative objectives, e.g. ``{"ttft": 2000.0, "tpot_x": 2.0}``.

    ``tpot_x=2.0`` (or the pair ``tpot_x:2``) means twice the reference's
    unloaded median TPOT, measured in the same session: an objective that moves
    with the machine, where a number of milliseconds holds on one box only.
    Keys are ``ttft``, ``tpot``, ``e2el``, each as milliseconds (bare or with
    ``_ms``) or as a multiple (``_x``, a number > 0); one metric given both ways
    is an error.
    """
    if isinstance(slo, str):
        slo = slo.replace(",", " ").split()
    if isinstance(slo, Mapping):
        items = list(slo.items())
    else:
        items = []
        for pair in slo:
            if not isinstance(pair, str) or pair.count(":") != 1:
                raise ValueError(f"SLO pair {pair!r} is not KEY:VALUE; {_VALID}")
            key, value = pair.split(":")
            items.append((key.strip(), value.strip()))
    parsed: dict[str, float] = {}
    spelled: dict[str, tuple[Any, bool]] = {}
    for key, value in items:
        relative = isinstance(key, str) and key.endswith(RELATIVE)
        name = key[: -len(RELATIVE)] if relative else key[:-3] if isinstance(key, str) and key.endswith("_ms") else key
        if name not in SLO_KEYS:
            raise ValueError(f"unknown SLO key {key!r}; {_VALID}")
        if name in spelled:
            first, was_relative = spelled[name]
            how = "both in milliseconds and as a multiple" if was_relative != relative else "twice"
            raise ValueError(f"SLO key {name!r} given {how} ({first!r} and {key!r}): give it once; {_VALID}")
        spelled[name] = (key, relative)
        parsed[name + RELATIVE if relative else name] = _slo_value(key, value, relative)
    if not parsed:
        raise ValueError(f"no SLO given; {_VALID}")
    return parsed


def _slo_value(key: str, value: Any, relative: bool = False) -> float:
    # A pair's value is text; a mapping's must already be a number (bool is a typo).
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
    elif isinstance(value, Real) and not isinstance(value, bool):
        number = float(value)
    else:
        number = math.nan
    if relative and not (math.isfinite(number) and number > 0):
        raise ValueError(
            f"SLO {key!r} must be a finite multiple > 0 of the reference's unloaded median, got {value!r}; {_VALID}"
        )
    if math.isnan(number) or number < 0:
        raise ValueError(f"SLO {key!r} must be a number of milliseconds >= 0, got {value!r}; {_VALID}")
    return number


def is_relative(objectives: Mapping[str, float]) -> bool:
    """Whether any objective is a multiple of the reference's unloaded median (needs :func:`resolve_slo`)."""
    return any(key.endswith(RELATIVE) for key in objectives)


def resolve_slo(
    objectives: Mapping[str, Any] | Iterable[str] | str, unloaded_ms: Mapping[str, float] | None = None
) -> tuple[dict[str, float], dict[str, dict]]:
    """Each objective in milliseconds, and how it was reached.

    ``unloaded_ms`` holds the reference's unloaded medians (``{"tpot": 33.1,
    ...}``); it is needed only for relative objectives. Returns the limits
    (``{"tpot": 66.2}``, what :meth:`SLOPercentiles.holds` and :func:`goodput`
    take) and, per metric, the record reports carry: ``{"objective":
    "tpot_x=2", "ms": 66.2, "multiple": 2.0, "unloaded_p50_ms": 33.1}``
    (``multiple`` and ``unloaded_p50_ms`` only for relative ones). Both
    sides of a comparison must then be held to the same limits.
    """
    parsed = parse_objectives(objectives)
    limits: dict[str, float] = {}
    how: dict[str, dict] = {}
    for key, value in parsed.items():
        if not key.endswith(RELATIVE):
            limits[key] = value
            how[key] = {"objective": f"{key}_ms={value:g}", "ms": value}
            continue
        name = key[: -len(RELATIVE)]
        median = (unloaded_ms or {}).get(name, math.nan)
        if not (isinstance(median, Real) and math.isfinite(median) and median > 0):
            raise ValueError(
                f"SLO {key}={value:g} needs the reference's unloaded median {name} and it has none "
                f"({median!r}): the unloaded reference run measured no {name}"
            )
        limits[name] = value * float(median)
        how[name] = {
            "objective": f"{key}={value:g}",
            "ms": limits[name],
            "multiple": value,
            "unloaded_p50_ms": float(median),
        }
    return limits, how


def describe_objectives(how: Mapping[str, Mapping[str, Any]], percentile: float | None = None) -> str:
    """``p50 tpot <= 99.3 ms (tpot_x=3: 3 x the reference's unloaded median 33.1 ms)``, comma-joined."""
    label = f"{_label(percentile)} " if percentile is not None else ""
    parts = []
    for key, record in how.items():
        text = f"{label}{key} <= {record['ms']:.4g} ms"
        if "multiple" in record:
            text += (
                f" ({record['objective']}: {record['multiple']:g} x the reference's unloaded median "
                f"{record['unloaded_p50_ms']:.4g} ms)"
            )
        parts.append(text)
    return ", ".join(parts)


def _tpot_s(record) -> float:
    # vLLM: "if output_len <= 1, we regard tpot as 0 for goodput".
    if record.output_tokens > 1:
        return (record.latency - record.ttft) / (record.output_tokens - 1)
    return 0.0


def _is_good(record, slo: Mapping[str, float]) -> bool:
    # Compared in seconds against slo / 1000, exactly as vLLM does, so a
    # request on the boundary is classed the same way by both tools.
    seconds = {"ttft": record.ttft, "tpot": _tpot_s(record), "e2el": record.latency}
    return all(slo[key] / 1000.0 >= seconds[key] for key in slo)


@dataclass(frozen=True)
class Goodput:
    """How much of a run's traffic was served within the SLO.

    ``request_goodput`` is vLLM's figure (good requests per second of run).
    ``output_goodput`` (output tokens/s of the good requests only) is our
    addition, not in vLLM: SD is sold on tokens/s, and its goodput should be
    read in the same unit. Both are NaN when the duration is not positive.
    ``good_fraction`` is good / completed (failures are in ``failed``), NaN
    when nothing completed.
    """

    slo: dict[str, float]
    good_requests: int
    completed: int
    failed: int
    duration_s: float
    request_goodput: float
    output_goodput: float
    good_fraction: float

    def as_dict(self) -> dict[str, float]:
        """Flat ``{"request_goodput": ..., "slo_tpot_ms": 50.0, ...}`` for reports."""
        flat: dict[str, float] = {k: v for k, v in asdict(self).items() if k != "slo"}
        flat.update({f"slo_{key}_ms": value for key, value in self.slo.items()})
        return flat


def goodput(records, duration_s: float, slo) -> Goodput:
    """Goodput of one run's request records (``client.RequestRecord`` fits).

    Records need ``success``, ``ttft`` and ``latency`` (seconds) and
    ``output_tokens``; ``slo`` is anything :func:`parse_slo` reads. With no
    completed request the goodput is 0.0, as vLLM reports it: that is a
    measured zero, not a missing figure.
    """
    limits = parse_slo(slo)
    records = list(records)
    done = [r for r in records if r.success]
    good = [r for r in done if _is_good(r, limits)]
    valid_duration = isinstance(duration_s, Real) and duration_s > 0
    per_second = (lambda n: n / duration_s) if valid_duration else (lambda n: math.nan)
    return Goodput(
        slo=limits,
        good_requests=len(good),
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=float(duration_s),
        request_goodput=per_second(len(good)),
        output_goodput=per_second(sum(r.output_tokens for r in good)),
        good_fraction=len(good) / len(done) if done else math.nan,
    )


@dataclass(frozen=True)
class SLOPercentiles:
    """A run's per-request TTFT, TPOT and E2E latency (ms), to test an SLO at a percentile.

    Unlike goodput, TPOT here pools only requests with more than one output
    token (as `vllm bench serve`'s reported TPOT does): a one-token request
    has no time per output token, and counting it as 0 would pull the
    percentile down. Build with :meth:`of`.
    """

    ttft_ms: tuple[float, ...]
    tpot_ms: tuple[float, ...]
    e2el_ms: tuple[float, ...]
    completed: int
    failed: int

    @classmethod
    def of(cls, records) -> SLOPercentiles:
        records = list(records)
        done = [r for r in records if r.success]
        return cls(
            ttft_ms=tuple(r.ttft * 1000.0 for r in done),
            tpot_ms=tuple(_tpot_s(r) * 1000.0 for r in done if r.output_tokens > 1),
            e2el_ms=tuple(r.latency * 1000.0 for r in done),
            completed=len(done),
            failed=len(records) - len(done),
        )

    def at(self, percentile: float = 99.0) -> dict[str, float]:
        """``{"ttft": ms, "tpot": ms, "e2el": ms}`` at the percentile (NumPy's linear); NaN with no values."""
        _check_percentile(percentile)
        import numpy as np

        values = {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2el": self.e2el_ms}
        return {key: float(np.percentile(v, percentile)) if v else math.nan for key, v in values.items()}

    def as_dict(self, percentile: float = 99.0) -> dict[str, float]:
        """Flat ``{"p99_ttft_ms": ..., "completed": ..., "failed": ...}``, e.g. for a probe's detail."""
        label = _label(percentile)
        flat: dict[str, float] = {f"{label}_{key}_ms": v for key, v in self.at(percentile).items()}
        flat.update(completed=self.completed, failed=self.failed)
        return flat

    def holds(self, slo, percentile: float = 99.0) -> tuple[bool, str]:
        """Whether every declared SLO holds at the percentile, and why in words.

        Any failed request fails the SLO (a run that drops requests is not
        within it). A declared metric without values (no completed request;
        TPOT when every output is one token) cannot be judged: False with a
        reason starting ``unavailable:``, never a pass.
        """
        limits = parse_slo(slo)
        label = _label(percentile)
        measured = self.at(percentile)
        if self.failed:
            return False, f"{self.failed} of {self.failed + self.completed} requests failed"
        met, missed, unavailable = [], [], []
        for key, limit in limits.items():
            value = measured[key]
            if math.isnan(value):
                unavailable.append(f"{label} {key} has no value ({self._why_empty(key)})")
            elif value <= limit:
                met.append(f"{label} {key} {value:.4g} ms <= {limit:g} ms")
            else:
                missed.append(f"{label} {key} {value:.4g} ms > {limit:g} ms")
        if unavailable:
            missed.append("unavailable: " + "; ".join(unavailable))
        if missed:
            return False, "; ".join(missed)
        return True, "; ".join(met)

    def _why_empty(self, key: str) -> str:
        if not self.completed:
            return "no request completed"
        if key == "tpot" and not self.tpot_ms:
            return "no completed request produced more than one output token"
        return "a measured value is NaN"


def _check_percentile(percentile: float) -> None:
    if isinstance(percentile, bool) or not isinstance(percentile, Real) or not 0 <= percentile <= 100:
        raise ValueError(f"percentile must be a number in [0, 100], got {percentile!r}")


def _label(percentile: float) -> str:
    _check_percentile(percentile)
    return f"p{float(percentile):g}"
