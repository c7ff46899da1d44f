"""The parts of a report row: labels, the operating point, capacity and cost, groups, and JSON-safe values."""

from __future__ import annotations

import math
from typing import Any

from ...engines import engine_named
from ...engines.server_spec import DEFAULT_ENGINE
from ...engines.forced_acceptance import forced_acceptance


# Where a cost per token is priced (`cost_operating_point`): the server's own maximum, never an offered load.
SATURATION, SLO_CAPACITY = "saturation", "slo_capacity"


def _number(value: Any) -> float | None:
    """JSON has no NaN or infinity: a figure that could not be computed is null."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def sd_label(spec) -> str:
    """The SD part of a spec's label, e.g. ``ngram k=4 prompt_lookup_max=4``, and the engine when it is not
    vLLM (``... on llamacpp``): one config on two engines is two rows, two heatmap panels."""
    label = spec.label()
    inner = label[label.index("[") + 1 : label.rindex("]")] if "[" in label else label
    engine = getattr(spec, "engine", DEFAULT_ENGINE)
    forced = forced_acceptance(spec.speculative_config)
    return (
        inner
        + (f" {forced.label()}" if forced is not None else "")
        + (f" {' '.join(spec.server_args)}" if spec.server_args else "")
        + (f" on {engine}" if engine != DEFAULT_ENGINE else "")
    )


def operating_point(pattern: dict) -> tuple[str | None, str]:
    """(SATURATION, what that is) for a closed loop; (None, why no cost) at an offered load.

    With ``request_rate`` inf the client keeps ``max_concurrency`` requests
    in flight (or sends every prompt at once): tok/s is what the server
    delivers at that concurrency.  At a finite rate below saturation both
    sides' tok/s is the offered load, and a cost per token would price the
    load, not the server.
    """
    rate = pattern.get("request_rate")
    if rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isinf(rate)):
        concurrency = pattern.get("max_concurrency")
        loop = (
            f"{concurrency} request{'s' if concurrency != 1 else ''} in flight"
            if concurrency
            else f"all {pattern.get('num_prompts')} prompts at once"
        )
        return SATURATION, f"closed loop, {loop} (request rate inf): the throughput the server delivers"
    offered = f"{rate:g} req/s" if isinstance(rate, (int, float)) else repr(rate)
    return None, (
        f"open loop at {offered} offered: below saturation both sides' tok/s is the offered load, so a "
        "cost per token prices the load, not the server; price a closed loop (request_rate=inf) or an "
        "SLO capacity search"
    )


def _acceptance_note(spec) -> str | None:
    """Why this row's acceptance is not comparable with vLLM's, as its engine says (None: it is)."""
    return (
        engine_named(getattr(spec, "engine", DEFAULT_ENGINE)).acceptance_note(spec) if spec.speculative_config else None
    )


# A failure message is kept whole up to here: the gate's table and comparison fit; a traceback's tail does not.
FAILURE_CHARS = 6000


def _cut(text: str | None) -> str | None:
    if not text:
        return None
    return (
        text
        if len(text) <= FAILURE_CHARS
        else text[:FAILURE_CHARS] + f"\n[... {len(text) - FAILURE_CHARS} more characters]"
    )


def _groups(result) -> dict[str, Any]:
    """Per category and per turn (measure.groups), where the requests carry one, with whether they differ."""
    from ...measure.groups import difference

    out = {}
    for grouping in ("category", "turn"):
        if groups := result.by(grouping):
            out[grouping] = {"figures": [g.as_dict() for g in groups], "difference": difference(groups)}
    return out


def _json_safe(value):
    """Nested figures with NaN and infinity as null (JSON has neither)."""
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _capacity_row(row: dict[str, Any], result, gpu_usd_per_hour: float | None) -> dict[str, Any]:
    """A capacity search's row: each side's capacity under the SLO, the ratio, every probe."""
    ratio = result.capacity_ratio()
    bound = result.capacity_ratio_bound() if hasattr(result, "capacity_ratio_bound") else None
    row.update(
        repeats=1,
        slo=dict(result.slo),
        capacity_ratio=_number(ratio),  # null for a bound: a bound is never a value
        capacity_ratio_bound=bound[1] if bound else None,
        capacity_ratio_bound_direction=bound[0] if bound else None,
        capacity={
            "over": result.pattern.get("search"),
            "percentile": result.percentile,
            "note": result.ratio_note(),
            # the ratio as an estimate (with the interval the brackets allow) or a bound with its direction
            "ratio": _json_safe(result.as_dict()["ratio"]) if hasattr(result, "as_dict") else None,
            "objectives": _json_safe(
                getattr(result, "objectives", {})
            ),  # as given, the ms they resolved to, the unloaded median
            "reference": _json_safe(result.reference.as_dict()),
            "speculative": _json_safe(result.speculative.as_dict()),
        },
        reproduce=dict(result.reproduce),
    )
    if why := result.unavailable("capacity_ratio"):
        row["unavailable"]["capacity_ratio"] = why
    if gpu_usd_per_hour is not None:
        # Priced at each side's own SLO capacity: the most load it carries within the objectives.
        for side in ("reference", "speculative"):
            row[f"{side}_usd_per_1m_tokens"] = result.cost_per_million(side, gpu_usd_per_hour)
            if row[f"{side}_usd_per_1m_tokens"] is None:
                row["unavailable"][f"{side}_usd_per_1m_tokens"] = f"the {side} side reached no SLO capacity to price"
        row.update(
            cost_operating_point=SLO_CAPACITY,
            cost_operating_point_detail=(
                "each side at its SLO capacity: the highest load probed at which every objective held"
            ),
        )
    return row


def _match_basis(result) -> str | None:
    """What the output match compared: "token ids" (exact) or "text" (a server sent no ids); None if nothing."""
    bases = {o.basis for o in (getattr(result, "outputs_per_repeat", None) or [result.outputs]) if o.basis}
    return "text" if "text" in bases else bases.pop() if bases else None


def _numerical_ties(result) -> int | None:
    """Divergences at a reference near-tie; None when no logprobs were asked for (unknown)."""
    from ...verdict.assertions import classify_divergences

    divergences = classify_divergences(result)
    if any(d.tie is None for d in divergences):
        return None
    return sum(1 for d in divergences if d.tie)


def _range(values) -> list[float] | None:
    """[lowest, highest] of the repeats' throughput speedups: the run-to-run spread beside the median."""
    finite = [v for v in (_number(x) for x in values) if v is not None]
    return [min(finite), max(finite)] if len(finite) > 1 else None
