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
  (the measured acceptance, undrafted steps included, at a free draft: c = 0);
- ``server_load``: one side's server preempted or queued requests during its runs and the other's did not
  (their series, analysis.series_figures): that side's latencies include the wait.

The last three say a side was cold or drifting (:data:`COLD_KINDS`): such a
comparison is measured again, both sides warmed again and run again, before
any verdict (measure.measurements); a speedup still flagged after that is not
compared (:func:`unfair_speedup`) unless the test accepts the flag
(``result.accept_flags(kind)``).  Engine confounds are reported, never refused.

What the engine itself turned off because of the speculative method (its own
log says so: vLLM's async scheduling for `ngram`) is SD's cost, not a confound
(:func:`engine_costs`): the comparison against the reference as deployed
stands.  Its two sides then run different engine paths by design, so the
checks that assume one path (TTFT at concurrency 1, the ceiling) say nothing
about a cold side there and are not applied; a cold side is still caught by
its warm-up, and the mechanism figure (measure.mechanism) applies them on equal paths.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..engines.server_spec import DEFAULT_ENGINE
from ..serving.engine_facts import Confound, SDCost, confounds, sd_costs
from ..analysis.series_figures import series_figures

if TYPE_CHECKING:  # the result holds this part; the part reads the result's fields
    from .result import SpecDecResult

# Methods whose drafting happens after prefill, on the host: at concurrency 1 the SD side's TTFT
# is the reference's.  Draft models and EAGLE heads add their own prefill (TTFT may only grow).
NO_PREFILL_METHODS = frozenset({"ngram", "suffix"})
# A TTFT ratio beyond this at concurrency 1 is a cold or drifting side, not SD: 25% is far outside the
# TTFT spread of warm servers between repeats and inside what a cold reference showed (docs/benchmarks.md, "Figures the code once quoted").
TTFT_BAND = 1.25
# Room above the c = 0 ceiling for timing noise between two runs (the repeats' spread when larger).
CEILING_ROOM = 0.10
# Flags that say a side was cold or drifting rather than that the engines differ.
COLD_KINDS = ("not_steady", "ttft_at_concurrency_1", "above_ceiling")


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
    return confounds(reference, speculative, getattr(result.spec, "engine", DEFAULT_ENGINE), _method(result))


def engine_costs(result) -> list[SDCost]:
    """Engine facts the engine changed on the SD side because of the speculative method: SD's cost."""
    reference = getattr(result.reference_runs[0], "engine_facts", None) if result.reference_runs else None
    speculative = getattr(result.speculative_runs[0], "engine_facts", None) if result.speculative_runs else None
    if not reference or not speculative:
        return []
    return sd_costs(reference, speculative, getattr(result.spec, "engine", DEFAULT_ENGINE), _method(result))


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
    found = [
        Flag("confound", f"{c.fact}: reference {c.reference}, SD {c.speculative}", c.fix)
        for c in engine_confounds(result)
    ]
    for side, runs in (("reference", result.reference_runs), ("SD", result.speculative_runs)):
        steady = getattr(runs[0], "warm_up", None) if runs else None
        if steady is not None and not steady.steady:
            found.append(
                Flag(
                    "not_steady",
                    f"the {side} server's warm-up never settled: {steady.describe()}",
                    "a longer warm-up (the server may still be compiling or be shared with other work)",
                )
            )
    one_path = not engine_costs(result)  # the TTFT and ceiling rules hold for one engine path only
    if one_path and _closed_loop_concurrency_1(result):
        ttft = result.speedup("median_ttft_ms")
        method = _method(result)
        if math.isfinite(ttft) and (ttft > TTFT_BAND or (method in NO_PREFILL_METHODS and ttft < 1 / TTFT_BAND)):
            what = "does not touch prefill" if method in NO_PREFILL_METHODS else "cannot make prefill faster"
            found.append(
                Flag(
                    "ttft_at_concurrency_1",
                    f"TTFT speedup {ttft:.2f}x one request at a time, where {method or 'SD'} {what}: "
                    "one side was cold, drifting or ran another engine path",
                    "warm both servers to a steady state; compare engine facts of both sides",
                )
            )
    ceiling = tokens_per_forward(result) if one_path else math.nan
    if math.isfinite(ceiling):
        for metric in ("median_tpot_ms", "output_throughput"):
            speedup = result.speedup(metric)
            room = max(CEILING_ROOM, _spread(result.repeat_speedups(metric)))
            if math.isfinite(speedup) and speedup > ceiling * (1 + room):
                found.append(
                    Flag(
                        "above_ceiling",
                        f"{metric} speedup {speedup:.2f}x is above the {ceiling:.2f} tokens each forward "
                        f"pass yielded (the most SD can give with a free draft, +{room:.0%} for noise): "
                        "the reference was slow (cold, drifting, another engine path)",
                        "warm both servers to a steady state; compare engine facts of both sides",
                    )
                )
    for message in series_figures(result)["flags"]:
        found.append(
            Flag(
                "server_load",
                message,
                "a load both servers carry without queueing, or more KV cache for the SD server (a smaller draft, "
                "a larger cache budget)",
            )
        )
    return found


def cold_flags(result) -> list[Flag]:
    """The flags that say a side was cold or drifting: measure again before any verdict."""
    return [flag for flag in flags(result) if flag.kind in COLD_KINDS]


def unfair_speedup(result) -> str | None:
    """Why `result`'s speedups are not compared: it was measured again and a cold or drifting flag stayed
    (None when none did, or the test accepted each with ``result.accept_flags``)."""
    if not getattr(result, "remeasured", None):
        return None
    accepted = set(getattr(result, "accepted_flags", ()))
    standing = [flag for flag in cold_flags(result) if flag.kind not in accepted]
    if not standing:
        return None
    kinds = ", ".join(repr(kind) for kind in dict.fromkeys(flag.kind for flag in standing))
    return (
        "not compared: measured again (both sides warmed and run again) and still flagged: "
        + "; ".join(flag.describe() for flag in standing)
        + f" (a test that accepts it says result.accept_flags({kinds}))"
    )


def _measurement(reference_runs, speculative_runs) -> dict[str, float | None]:
    """One measurement's medians over its repeats: each side's output tok/s and the per-repeat speedup."""

    def median(values):
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return round(statistics.median(finite), 4) if finite else None

    tok_s = lambda run: run.metrics.as_dict().get("output_throughput", math.nan)  # noqa: E731
    pairs = [(reference_runs[min(i, len(reference_runs) - 1)], run) for i, run in enumerate(speculative_runs)]
    return {
        "speedup_output_throughput": median([tok_s(sd) / tok_s(ref) if tok_s(ref) else math.nan for ref, sd in pairs]),
        "reference_output_throughput": median([tok_s(run) for run in reference_runs]),
        "speculative_output_throughput": median([tok_s(run) for run in speculative_runs]),
    }


def as_rows(result) -> dict[str, Any]:
    """The flags and both sides' engine facts, for result rows and results.json."""
    facts = {
        side: dict(getattr(runs[0], "engine_facts", None) or {}) if runs else {}
        for side, runs in (("reference", result.reference_runs), ("speculative", result.speculative_runs))
    }
    warm = {
        side: (runs[0].warm_up.as_dict() if runs and getattr(runs[0], "warm_up", None) else None)
        for side, runs in (("reference", result.reference_runs), ("speculative", result.speculative_runs))
    }
    return {
        "fairness_flags": [f.as_dict() for f in flags(result)],
        "remeasured": list(getattr(result, "remeasured", None) or []),
        "earlier_measurements": [_measurement(*runs) for runs in getattr(result, "earlier_runs", None) or ()],
        "accepted_flags": sorted(getattr(result, "accepted_flags", None) or []),
        "confounds": [c.as_dict() for c in engine_confounds(result)],
        "sd_costs": [c.as_dict() for c in engine_costs(result)],
        "engine_facts": facts,
        "warm_up": warm,
    }


class FairComparison:
    """`SpecDecResult`'s fairness methods: the flags, the confounds, the checks, and the flags a test accepts."""

    def __init__(self, result: SpecDecResult):
        self.result = result

    def fairness_flags(self) -> list[Flag]:
        """Reasons this comparison may not measure SD alone; empty when none was found."""
        return flags(self.result)

    def unfair_speedup(self) -> str | None:
        """Why the speedups are not compared: still cold or drifting after a second measurement (or None)."""
        return unfair_speedup(self.result)

    def accept_flags(self, *kinds: str):
        """Compare speedups although these cold or drifting flags stayed after the second measurement."""
        unknown = sorted(set(kinds) - set(COLD_KINDS))
        if unknown:
            raise ValueError(f"accept_flags takes the kinds {', '.join(COLD_KINDS)}, got {', '.join(unknown)}")
        self.result.accepted_flags = tuple(sorted({*self.result.accepted_flags, *kinds}))
        return self.result

    def confounds(self) -> list[Confound]:
        """Engine facts that differ between the sides, other than the SD config (serving.engine_facts)."""
        return engine_confounds(self.result)

    def sd_costs(self) -> list[SDCost]:
        """What the engine turned off on the SD side because of the method (its own log says so): SD's cost."""
        return engine_costs(self.result)

    def assert_no_confounds(self, allow: Sequence[str] = ()):
        """Both sides ran the same engine path: no engine fact differs except those in `allow`."""
        found = [c for c in self.confounds() if c.fact not in set(allow)]
        if found:
            raise AssertionError(
                f"the reference and SD ran different engine paths for {self.result.spec.label()}, so the "
                "speedup measures more than SD:\n" + "\n".join(f"  - {c.describe()}" for c in found)
            )
        return self.result

    def assert_fair_comparison(self, allow: Sequence[str] = ()):
        """No fairness flag (confound, cold server, TTFT at concurrency 1, speedup above its ceiling) but `allow`'s kinds."""
        found = [f for f in self.fairness_flags() if f.kind not in set(allow)]
        if found:
            raise AssertionError(
                f"not a fair comparison for {self.result.spec.label()}:\n"
                + "\n".join(f"  - {f.describe()}" for f in found)
            )
        return self.result
