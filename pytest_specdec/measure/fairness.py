"""Whether a comparison of SD with its reference was a fair one, and the likely cause when not.

A speedup is only SD's when the two sides ran the same engine path on warm
servers.  The first H100 run broke both, silently: a cold first reference
inflated every speedup measured against it (n-gram showed TTFT "speedups" of
2.11x and 1.42x at concurrency 1, which drafting cannot cause), and vLLM
turned off async scheduling and the V2 model runner for the n-gram side only.
Each check here looks at what physics or the servers themselves say, and
returns a :class:`Flag` naming the cause:

- ``confound``: an engine fact differs between the sides (serving.engine_facts);
- ``not_steady``: a server's warm-up never settled (measure.warm_up);
- ``ttft_at_concurrency_1``: one request at a time, a method that does not touch
  prefill (n-gram, suffix) cannot change TTFT, and no method makes prefill faster;
- ``above_ceiling``: a decode speedup above the tokens each forward pass yielded
  (the measured acceptance, undrafted steps included, at a free draft: c = 0).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..serving.engine_facts import Confound, confounds

# Methods whose drafting happens after prefill, on the host: at concurrency 1 the SD side's TTFT
# is the reference's.  Draft models and EAGLE heads add their own prefill (TTFT may only grow).
NO_PREFILL_METHODS = frozenset({"ngram", "suffix"})
# A TTFT ratio beyond this at concurrency 1 is a cold or drifting side, not SD: 25% is far outside the
# TTFT spread of warm servers measured here (CPU build: within 5% between repeats) and inside the
# 1.42x-2.11x the cold H100 reference showed.
TTFT_BAND = 1.25
# Room above the c = 0 ceiling for timing noise between two runs (the repeats' spread when larger).
CEILING_ROOM = 0.10


@dataclass(frozen=True)
class Flag:
    """One reason the comparison may not measure SD alone; `fix` says what would make it fair."""

    kind: str
    message: str
    fix: str = ""

    def describe(self) -> str:
        return f"{self.kind}: {self.message}" + (f" (fix: {self.fix})" if self.fix else "")

    def as_dict(self) -> dict:
        return {**asdict(self), "describe": self.describe()}


def engine_confounds(result) -> list[Confound]:
    """Engine facts that differ between the first reference run and the first SD run."""
    reference = getattr(result.reference_runs[0], "engine_facts", None) if result.reference_runs else None
    speculative = getattr(result.speculative_runs[0], "engine_facts", None) if result.speculative_runs else None
    if not reference or not speculative:
        return []
    return confounds(reference, speculative)


def _method(result) -> str:
    return str((result.spec.speculative_config or {}).get("method", "")).lower()


def _closed_loop_concurrency_1(result) -> bool:
    pattern = result.pattern or {}
    return pattern.get("max_concurrency") == 1


def tokens_per_forward(result) -> float:
    """Decode tokens per target forward pass, undrafted steps counted (NaN without counters).

    Every decode step yields its accepted drafts plus one token; vLLM counts only the steps that
    drafted, so the steps that drafted nothing are the decode tokens the counters do not explain:
    ``steps = decode_tokens - accepted`` and ``tokens per step = decode_tokens / steps``.
    """
    decode_tokens = accepted = 0.0
    for run in result.speculative_runs:
        counters = run.counters
        if counters is None or not getattr(counters, "present", False):
            return math.nan
        done = [r for r in run.records if r.success]
        decode_tokens += sum(r.output_tokens for r in done) - len(done)  # the first token is prefill's
        accepted += counters.num_accepted_tokens
    steps = decode_tokens - accepted
    return decode_tokens / steps if steps > 0 else math.nan


def _spread(values: list[float]) -> float:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if len(finite) < 2:
        return 0.0
    return (max(finite) - min(finite)) / min(finite)


def flags(result) -> list[Flag]:
    """Every reason the comparison in `result` may not be SD's alone (empty: fair as far as measured)."""
    found = [Flag("confound", f"{c.fact}: reference {c.reference}, SD {c.speculative}", c.fix)
             for c in engine_confounds(result)]
    for side, runs in (("reference", result.reference_runs), ("SD", result.speculative_runs)):
        steady = getattr(runs[0], "warm_up", None) if runs else None
        if steady is not None and not steady.steady:
            found.append(Flag("not_steady", f"the {side} server's warm-up never settled: {steady.describe()}",
                              "a longer warm-up (the server may still be compiling or be shared with other work)"))
    if _closed_loop_concurrency_1(result):
        ttft = result.speedup("median_ttft_ms")
        method = _method(result)
        if math.isfinite(ttft) and (ttft > TTFT_BAND or (method in NO_PREFILL_METHODS and ttft < 1 / TTFT_BAND)):
            what = "does not touch prefill" if method in NO_PREFILL_METHODS else "cannot make prefill faster"
            found.append(Flag("ttft_at_concurrency_1",
                              f"TTFT speedup {ttft:.2f}x one request at a time, where {method or 'SD'} {what}: "
                              "one side was cold, drifting or ran another engine path",
                              "warm both servers to a steady state; compare engine facts of both sides"))
    ceiling = tokens_per_forward(result)
    if math.isfinite(ceiling):
        for metric in ("median_tpot_ms", "output_throughput"):
            speedup = result.speedup(metric)
            room = max(CEILING_ROOM, _spread(result.repeat_speedups(metric)))
            if math.isfinite(speedup) and speedup > ceiling * (1 + room):
                found.append(Flag("above_ceiling",
                                  f"{metric} speedup {speedup:.2f}x is above the {ceiling:.2f} tokens each forward "
                                  f"pass yielded (the most SD can give with a free draft, +{room:.0%} for noise): "
                                  "the reference was slow (cold, drifting, another engine path)",
                                  "warm both servers to a steady state; compare engine facts of both sides"))
    return found


def as_rows(result) -> dict[str, Any]:
    """The flags and both sides' engine facts, for result rows and results.json."""
    facts = {side: dict(getattr(runs[0], "engine_facts", None) or {}) if runs else {}
             for side, runs in (("reference", result.reference_runs), ("speculative", result.speculative_runs))}
    warm = {side: (runs[0].warm_up.as_dict() if runs and getattr(runs[0], "warm_up", None) else None)
            for side, runs in (("reference", result.reference_runs), ("speculative", result.speculative_runs))}
    return {"fairness_flags": [f.as_dict() for f in flags(result)],
            "confounds": [c.as_dict() for c in engine_confounds(result)],
            "engine_facts": facts, "warm_up": warm}
