"""A concurrency sweep's frontier as the figures a stored baseline keeps and the regression gate compares.

The gate (verdict.gate) compares a result's figures draw by draw with its baseline's.  A sweep's frontier is
figures of the same kind, so it goes through the same gate rather than one of its own:

- per level and side, the draw's operating point: ``per_gpu_c<level>`` (output tok/s per GPU) and
  ``per_user_c<level>`` (tok/s per user), each side's own figures, compared like ``output_throughput`` (on the
  machine the baseline was recorded on, the reference's beside SD's);
- with a per-user target, ``frontier_ratio``: SD's per-GPU throughput over the reference's at that speed on the
  draw's two frontiers (analysis.frontier.worth_at), a ratio of two servers like a speedup, so compared only on
  the recording machine.

The baseline's access pattern records the levels, their prompts and the target, so a baseline of another sweep
or another target is stale, never compared.  Each draw sent the same prompts at every level on both sides, so
draw d here pairs with the baseline's draw d (their seeds are recorded).
"""

from __future__ import annotations

import math
from ..analysis.frontier import Frontier, worth_at

FRONTIER_RATIO = "frontier_ratio"


def per_gpu_name(level: float) -> str:
    return f"per_gpu_c{level:g}"


def per_user_name(level: float) -> str:
    return f"per_user_c{level:g}"


class FrontierFigures:
    """The gate's view of a sweep (measure.sweep.SweepResult): its levels' results, its two frontiers and the
    per-user target whose ratio is gated (None: the operating points only)."""

    def __init__(self, results: list, frontiers: tuple[Frontier, Frontier], per_user: float | None = None):
        if not results:
            raise ValueError("a sweep with no level measured has no frontier to gate")
        if per_user is not None and not (
            isinstance(per_user, (int, float)) and not isinstance(per_user, bool) and math.isfinite(per_user)
        ):
            raise ValueError(f"assert_no_regression(per_user=...) must be a speed in tok/s per user, got {per_user!r}")
        if per_user is not None and per_user <= 0:
            raise ValueError(f"assert_no_regression(per_user=...) must be > 0 tok/s per user, got {per_user!r}")
        self.results = results
        self.reference, self.speculative = frontiers
        self.per_user = None if per_user is None else float(per_user)
        last = results[-1]
        # What the gate and its failure message read of a result: the configuration and its servers.
        self.spec, self.workload, self.seed = last.spec, results[0].workload, results[0].seed
        self.reproduce, self.server_log = last.reproduce, last.server_log
        self.levels = [result.pattern.get("max_concurrency") for result in results]
        self.pattern = {
            "name": "concurrency sweep",
            "levels": [dict(result.pattern) for result in results],
            "per_user_target": self.per_user,
        }
        self.draws = min(len(self.reference.draws), len(self.speculative.draws))

    def metrics(self) -> list[str]:
        """What the gate compares when the test names nothing: the target's ratio (with a target), then each level's
        per-GPU and per-user figures."""
        names = [FRONTIER_RATIO] if self.per_user is not None else []
        names += [per_gpu_name(level) for level in self.levels]
        names += [per_user_name(level) for level in self.levels]
        return names

    def repeat_seeds(self) -> list[int]:
        """Each draw's seed: every level's draw d sent the same seed (measure.result.repeat_seed)."""
        return list(self.results[0].repeat_seeds()[: self.draws])

    def repeats(self) -> list[dict[str, dict[str, float]]]:
        """One entry per draw, as baselines store them: each side's operating points, and the target's ratio."""
        entries = []
        for draw in range(self.draws):
            sides = {
                side: _points(self.levels, frontier.draws[draw])
                for side, frontier in (("reference", self.reference), ("speculative", self.speculative))
            }
            derived = {}
            if self.per_user is not None:
                derived[FRONTIER_RATIO] = self._draw_ratios()[draw]
            entries.append({**sides, "derived": derived})
        return entries

    def _draw_ratios(self) -> list[float]:
        worth = worth_at(self.reference, self.speculative, self.per_user)
        return [s.per_gpu / r.per_gpu if r.reached and s.reached else math.nan for r, s in worth.draw_pairs]

    def unavailable(self, metric: str) -> str | None:
        """Why a gated figure has no value in some draw, or None when every draw has one."""
        if metric == FRONTIER_RATIO:
            if self.per_user is None:
                return "no per-user target: name one, assert_no_regression(per_user=...)"
            worth = worth_at(self.reference, self.speculative, self.per_user)
            missing = [
                f"draw {i + 1}: "
                + "; ".join(f"{name}: {at.why}" for name, at in (("reference", r), ("SD", s)) if at.why)
                for i, (r, s) in enumerate(worth.draw_pairs)
                if not (r.reached and s.reached)
            ]
            return f"at {self.per_user:g} tok/s per user, " + " | ".join(missing) if missing else None
        known = {name: level for level in self.levels for name in (per_gpu_name(level), per_user_name(level))}
        if metric not in known:
            levels = ", ".join(f"{level:g}" for level in self.levels)
            raise ValueError(
                f"a sweep's frontier gates {FRONTIER_RATIO}, per_gpu_c<level> and per_user_c<level> for its levels "
                f"({levels}); {metric!r} is none of them"
            )
        missing = [
            draw + 1 for draw, entry in enumerate(self.repeats()) if not math.isfinite(entry["speculative"][metric])
        ]
        if missing:
            return (
                f"no SD operating point at concurrency {known[metric]:g} in draw {', '.join(map(str, missing))} "
                "(no TPOT or no throughput: one-token outputs or a failed run)"
            )
        return None

    @property
    def engine_version(self) -> str | None:
        return self.results[-1].engine_version


def _points(levels: list, points: tuple) -> dict[str, float]:
    figures: dict[str, float] = {}
    for level, point in zip(levels, points):
        figures[per_gpu_name(level)] = point.per_gpu if point is not None else math.nan
        figures[per_user_name(level)] = point.per_user if point is not None else math.nan
    return figures
