"""c, the cost of a speculative step over a plain one: measured from step times, estimated from parameter counts, or a method's default, always labelled with how."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..verdict.metric_names import _finite


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")


MODEL_FREE = frozenset({"ngram", "suffix"})


EAGLE_FAMILY = frozenset({"eagle", "eagle3", "mtp", "medusa", "mlp_speculator"})


# Where a cost ratio c came from (`CostRatio.source`, the reports' `cost_ratio_source`).
MEASURED = "measured"  # from this run's step times


PARAMETER_RATIO = "estimated (parameter ratio)"  # draft / target weight bytes (or layers)


METHOD_DEFAULT = "method default"  # 0 for host-side lookups, one decoder layer for EAGLE-type heads


GIVEN = "given"  # a number a caller (script, test) passed in


UNAVAILABLE = "unavailable"


def measured_cost_ratio(reference_step_ms: float, drafted_step_ms: float, k: int) -> float:
    """``c = (t_k - t_ref) / (k * t_ref)``, from ``t_k = t_ref * (1 + k*c)``; negative when t_k < t_ref (say so)."""
    _check_k(k)
    if not (_finite(reference_step_ms) and reference_step_ms > 0 and _finite(drafted_step_ms)):
        raise ValueError(
            f"step times must be finite, t_ref > 0; got t_ref={reference_step_ms!r}, t_k={drafted_step_ms!r}"
        )
    return (drafted_step_ms - reference_step_ms) / (k * reference_step_ms)


@dataclass(frozen=True)
class CostRatio:
    """A draft/target cost ratio c with where it came from (`source`, one of the constants above).

    `value` is None when unavailable; `note` says why, or what a fallback
    stands in for (a measurement that failed or was rejected); `repeats` are
    the per-repeat measurements a measured c is the median of (None where a
    repeat could not be measured).
    """

    value: float | None
    source: str
    note: str | None = None
    repeats: tuple[float | None, ...] = ()

    def with_note(self, note: str | None) -> "CostRatio":
        return replace(self, note=f"{note}; {self.note}" if self.note else note) if note else self


def as_cost_ratio(value) -> CostRatio:
    """A `CostRatio` from what a result or caller holds: a CostRatio, a bare number (source "given"), or None."""
    if isinstance(value, CostRatio):
        return value
    if _finite(value) and value >= 0:
        return CostRatio(float(value), GIVEN)
    return CostRatio(
        None,
        UNAVAILABLE,
        "no draft/target cost ratio was given"
        if value is None
        else f"the cost ratio given, {value!r}, is not a finite number >= 0",
    )


def _positive(x: float | None) -> float | None:
    return x if x is not None and x > 0 else None  # 0 or negative sizes mean "unknown"


def estimated_cost_ratio(
    method: str,
    draft_layers: int | None = None,
    target_layers: int | None = None,
    draft_params: float | None = None,
    target_params: float | None = None,
) -> CostRatio:
    """Estimate ``c`` from the method and model sizes, labelled; a fallback for when c cannot be measured."""
    method = (method or "").lower()
    if method in MODEL_FREE:
        # N-gram / suffix lookups run on the host: under 2% of the time in the
        # study's breakdown (Sec. 5.1, Fig. 3), nothing next to a forward pass.
        return CostRatio(0.0, METHOD_DEFAULT)
    dp, tp = _positive(draft_params), _positive(target_params)
    dl, tl = _positive(draft_layers), _positive(target_layers)
    if dp and tp:
        # Decode is memory bound: a forward pass costs about the time to read the weights.
        return CostRatio(dp / tp, PARAMETER_RATIO)
    if dl and tl:
        # A same-width truncated draft costs its share of the target's layers.
        return CostRatio(dl / tl, PARAMETER_RATIO, "from layer counts")
    if method in EAGLE_FAMILY and tl:
        # EAGLE/MTP/Medusa heads are about one decoder layer on top of the target's hidden states.
        return CostRatio(1 / tl, METHOD_DEFAULT, "one decoder layer of the target")
    return CostRatio(None, UNAVAILABLE, f"no size of the draft and target to estimate c for method {method!r} from")


def estimate_cost_ratio(
    method: str,
    draft_layers: int | None = None,
    target_layers: int | None = None,
    draft_params: float | None = None,
    target_params: float | None = None,
) -> float | None:
    """:func:`estimated_cost_ratio`'s value alone (None if unknown)."""
    return estimated_cost_ratio(method, draft_layers, target_layers, draft_params, target_params).value


def model_size_from_dir(path: str | Path) -> tuple[int | None, int]:
    """Return ``(num_hidden_layers, weight bytes)`` for a local HF model dir.

    Weight bytes (``*.safetensors``, else ``*.bin``) stand in for parameter
    count: only the ratio between draft and target matters, and both are
    normally stored in the same dtype.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"model directory not found: {root}")
    layers = None
    config = root / "config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        # Multimodal configs keep the language model under text_config.
        layers = data.get("num_hidden_layers", (data.get("text_config") or {}).get("num_hidden_layers"))
    files = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
    return layers, sum(f.stat().st_size for f in files if f.is_file())


def cost_ratio_for(spec, resolve: Callable[[str], str] | None = None) -> CostRatio:
    """The estimated c of `spec`, labelled; never raises (an estimate must not fail a measured test).

    Sizes are read from local model directories when `resolve` maps the names
    to them; call it while the servers are up (at measure time), never from a
    report hook, where resolving may convert a model or find a package
    missing.  Whatever resolving raises leaves sizes unknown, with the reason
    in the note; ``resolve=None`` uses the method alone.
    """
    config = spec.speculative_config or {}
    method = str(config.get("method", ""))
    problems: list[str] = []

    def size(name):
        if not name or resolve is None or method.lower() in MODEL_FREE:
            return None, None
        try:
            path = resolve(name)
            return model_size_from_dir(path) if path else (None, None)
        except Exception as exc:  # noqa: BLE001 - ModelUnavailableError, conversion failures, I/O: all "unknown"
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            return None, None

    target_layers, target_bytes = size(spec.model)
    draft_layers, draft_bytes = size(config.get("model"))
    estimate = estimated_cost_ratio(
        method,
        draft_layers=draft_layers,
        target_layers=target_layers,
        draft_params=draft_bytes or None,
        target_params=target_bytes or None,
    )
    return estimate.with_note("model sizes unreadable (" + "; ".join(problems) + ")" if problems else None)
