"""What a timing check decides on, and how its estimate and spread are read from it (`read`).

What the interval's spread is matters more than the rule (issue 46 measured it on the CPU build):

- **Content spread**: each draw of the workload (a repeat seed) sends other prompts, and SD's speed depends
  on them (n-gram on code edits: 1.25-2.18x across four-prompt draws), the reference's does not.
- **Timing spread**: the same prompts sent again (a few percent).

A check's figure is the mean over the draws it measured, each draw's first send: content is fixed, so only
timing is noise.  Before any draw was sent twice the interval is the draws' own (content and timing), which
is wider, so a decision it allows is safe.  Once draws are sent again, they tell the timing spread
(`sends_timing`), pooled with the reference's spread across draws; the estimate stays the first sends'.
Paired draws (changes against a baseline on the same seeds) set a disturbed one aside (`set_aside`).  In a
builds A/B both builds' references are measured in this session, and read apart from SD's paired draws
(`_builds_apart`).  Against a stored baseline the drift between two sessions counts too (`known_var`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple, Sequence

OUTLIER_MADS = 5.0  # a paired draw this many robust sds from the median was disturbed (`set_aside`)
OUTLIER_MIN_DRAWS = 4  # fewer paired draws cannot tell which one is off


@dataclass(frozen=True)
class Evidence:
    """What a check decides on, per draw of the workload, on a log scale (higher is better).

    `sends[r]` are the figure's values from each time draw r was sent (the first, then sent again); for a
    ratio of two sides, `reference[r]` is the reference's log value on draw r (its speed does not depend on
    the prompts, so its spread across draws is timing) and `sends` hold SD's log values.  `baseline[r]` is a
    baseline's log figure on the same draw (paired by seed), or None.  `baseline_reference[r]`, for a
    baseline build measured in this session, is that build's reference log value on draw r: then SD on the
    baseline build is `baseline[r] + baseline_reference[r]`.
    """

    sends: tuple[tuple[float, ...], ...]
    reference: tuple[float, ...] | None = None
    baseline: tuple[float, ...] | None = None
    known_var: float = 0.0  # variance no run shrinks: the drift between this session and the baseline's
    baseline_reference: tuple[float, ...] | None = None


class Reading(NamedTuple):
    estimate: float
    variance: float | None  # of the estimate; None: no spread to judge noise by
    df: float
    interval: str  # what the spread was read from, and what was set aside
    content: float | None  # log spread of the figure between draws
    timing: float | None  # log spread of one run's figure, the same prompts again
    fixed: float  # the part of `variance` that sending the draws again does not narrow


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _var(values: Sequence[float]) -> float:
    mean = _mean(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def set_aside(values: Sequence[float], what: str = "draws") -> tuple[list[int], str]:
    """The indices of `values` to keep: without those beyond `OUTLIER_MADS` robust sds (1.4826 MAD) from the
    median, at most one in four, once there are `OUTLIER_MIN_DRAWS`; and what was set aside, said.

    Only figures without the prompts' spread come here (a change against a baseline on the same draw, a
    reference's runs), where what is left is timing: a run 1.5x slower than its neighbours (a busy
    neighbour) is then tens of sds off, and one such run among eight would widen the interval past any
    decision."""
    kept = list(range(len(values)))
    if len(values) < OUTLIER_MIN_DRAWS:
        return kept, ""
    middle = statistics.median(values)
    scale = 1.4826 * statistics.median(abs(v - middle) for v in values)
    if scale <= 0:
        return kept, ""
    far = sorted(kept, key=lambda i: -abs(values[i] - middle))[: len(values) // 4]
    far = [i for i in far if abs(values[i] - middle) > OUTLIER_MADS * scale]
    if not far:
        return kept, ""
    off = ", ".join(f"{math.expm1(values[i] - middle):+.0%}" for i in far)
    said = f"; {len(far)} of {len(values)} {what} set aside as disturbed ({off} off the median)"
    return [i for i in kept if i not in far], said


def sends_timing(sends: Sequence[Sequence[float]]) -> tuple[float, int, float | None]:
    """(sum of squares, degrees of freedom, shared offset) of one run's timing, from draws sent again.

    The sends after a draw's first, around their own mean, are timing alone.  And how far each first send
    lies from its sends again, around the offset the draws share (a server that remembers, a prefix cache or
    suffix decoding's outputs, makes every draw's sends again faster), is the first sends' timing: a first
    send a neighbour slowed shows there, where the sends again cannot show it.  d = first - mean(again) has
    (1 + 1/k) of one run's variance, so the weight k / (k + 1) puts every draw's on one run's scale."""
    again = [tuple(s[1:]) for s in sends if len(s) > 1]
    df = sum(len(a) - 1 for a in again)
    squares = sum((v - _mean(a)) ** 2 for a in again if len(a) > 1 for v in a)
    offsets = [(s[0] - _mean(s[1:]), (len(s) - 1) / len(s)) for s in sends if len(s) > 1]
    shared = sum(d * w for d, w in offsets) / sum(w for _, w in offsets) if offsets else None
    if len(offsets) >= 2:
        squares += sum(w * (d - shared) ** 2 for d, w in offsets)
        df += len(offsets) - 1
    return squares, df, shared


def _builds_apart(sends, ref, base, base_ref) -> Reading:
    """A builds A/B: both builds measured in this session, one send a draw on each, on the same draws.

    SD's runs are paired by draw (SD on this build against SD on the baseline build: the prompts cancel),
    and the two references are read apart from them: their speed does not depend on the prompts, so each
    build's references across draws are timing alone.  Paired per draw, the figure rests on four runs and a
    disturbed one among them costs the whole draw; apart, a disturbed reference run is set aside on its own
    (with its draw's run on the other build, so the prompts still cancel if a reference depends on them) and
    SD's pair keeps its draw.  The estimate is the same mean; its spread has three parts, each with its own
    degrees of freedom (Welch-Satterthwaite), where the paired draws had draws - 1 in all.  A reference whose
    speed does depend on the prompts only widens its part: the estimate still pairs them."""
    sd_change = [s[0] - b - r for s, b, r in zip(sends, base, base_ref)]
    sd_kept, said = set_aside(sd_change)
    ref_kept, said_ref = set_aside(ref, "reference runs")
    base_kept, said_base = set_aside(base_ref, "reference runs on the baseline build")
    both = [i for i in ref_kept if i in base_kept]  # a reference set aside on either build leaves both
    dropped_refs = len(ref) - len(both)
    estimate = _mean([sd_change[i] for i in sd_kept]) - _mean([ref[i] - base_ref[i] for i in both])
    sd_var = _var([sd_change[i] for i in sd_kept])
    ref_var, base_var = _var([ref[i] for i in both]), _var([base_ref[i] for i in both])
    # A run set aside still spent its degree of freedom: what is kept was chosen for being close.
    sd_df, ref_df = len(sd_kept) - 1 - (len(sends) - len(sd_kept)), len(both) - 1 - dropped_refs
    parts = [(sd_var / len(sd_kept), sd_df), (ref_var / len(both), ref_df), (base_var / len(both), ref_df)]
    variance = sum(v for v, _ in parts)
    df = variance**2 / sum(v**2 / max(1, d) for v, d in parts) if variance > 0 else math.inf
    firsts = [s[0] - r - b for s, r, b in zip(sends, ref, base)]
    timing = math.sqrt((ref_var + base_var) / 2)  # one reference run's, across draws
    interval = "SD paired by draw, each build's references apart (timing)" + said + said_ref + said_base
    return Reading(estimate, variance, df, interval, math.sqrt(_var(firsts)), timing, 0.0)


def read(evidence: Evidence) -> Reading:
    """The estimate, its variance and degrees of freedom, and what they were read from.

    The estimate is each draw's first send: a draw sent again is no longer new to the server (vLLM's prefix
    cache holds its prompts; suffix decoding drafts from the outputs it already gave), so later sends can be
    faster for a reason that is not the clock.  The sends again tell the timing spread (`sends_timing`)."""
    sends = [tuple(s) for s in evidence.sends if s]
    draws = len(sends)
    ref = list(evidence.reference) if evidence.reference is not None else None
    base = list(evidence.baseline) if evidence.baseline is not None else None
    first = [s[0] - (ref[r] if ref else 0.0) - (base[r] if base else 0.0) for r, s in enumerate(sends)]
    estimate = _mean(first)
    content = math.sqrt(_var(first)) if draws >= 2 else None
    squares, within_df, _ = sends_timing(sends)
    if within_df == 0:
        if draws < 2:
            return Reading(estimate, None, 0, "one draw sent once", content, None, 0.0)
        if evidence.baseline_reference is not None and ref is not None and base is not None:
            return _builds_apart(sends, ref[:draws], base[:draws], list(evidence.baseline_reference[:draws]))
        interval = "between draws (content and timing)"
        if base is not None:  # paired on the same draws: the prompts cancel, a disturbed run stands out
            kept_at, said = set_aside(first)
            kept = [first[i] for i in kept_at]
            # A draw set aside still spent its degree of freedom: what is kept was chosen for being close.
            df = len(kept) - 1 - (draws - len(kept))
            return Reading(
                _mean(kept), _var(kept) / len(kept), max(1, df), interval + said, math.sqrt(_var(kept)), None, 0.0
            )
        return Reading(estimate, _var(first) / draws, draws - 1, interval, content, None, 0.0)
    df = within_df
    if ref is not None:
        if draws < 2:
            return Reading(estimate, None, 0, "one draw: the reference's timing spread is unknown", content, None, 0.0)
        squares, df = squares + _var(ref[:draws]) * (draws - 1), df + draws - 1
    # One run's timing variance of a side's log figure, pooled over SD's sends again of each draw, the first
    # sends against them, and the reference's draws (its speed does not depend on the prompts): the same
    # machine and engine time both.
    run_var = squares / df
    sides = (1 + (1 if ref is not None else 0)) + ((2 if ref is not None else 1) if base is not None else 0)
    variance = run_var * sides / draws  # every run the estimate rests on is a draw's first: sends narrow df only
    if base is not None and draws >= 2:  # a baseline run this model cannot see (a neighbour then): the pairs'
        variance = max(variance, _var(first) / draws)  # own spread, where wider
    timing = run_var * (2 if ref is not None else 1)  # one run's variance of the figure (both sides of a ratio)
    return Reading(estimate, variance, df, "timing from draws sent again", content, math.sqrt(timing), variance)
