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
builds A/B both builds' references are measured in this session, and paired by draw apart from SD's
paired draws (`_builds_apart`).  Against a stored baseline the drift between two sessions counts too (`known_var`).

**The machine's move.**  A workload's reference is measured once, first, and shared by every configuration;
SD runs later.  If the machine gets slower or faster in between (a neighbour, a clock), the speedup is biased
by that much inside an interval that keeps narrowing.  So a check against the reference carries the move as
a bound on the bias (`Reading.move`): until the reference's draws are sent again after SD's, a move of up to
`UNMEASURED_MOVE` is allowed for; once they are (A B ... B A), each draw's reference is the mean of its two
sends, and the bias of that midpoint is at most half the move the two sends measured, for a move at any time
between them.  A stored baseline's drift term already covers it; a builds A/B alternates its builds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from .student_t import t_quantile

OUTLIER_MADS = 5.0  # a paired draw this many robust sds from the median was disturbed (`set_aside`)
OUTLIER_MIN_DRAWS = 4  # fewer paired draws cannot tell which one is off
NOISIER = 0.5  # the F test's level at which paired draws are read as spreading wider than this session's runs
# How far the machine's speed may move, unseen, between the reference's runs and SD's (log): the bias a check
# against the reference allows for until the reference is sent again after SD (docs/deciding.md: the
# project's own drift check and these boxes' neighbours move it by several percent within a session).
UNMEASURED_MOVE = -math.log1p(-0.10)  # a machine 10% slower (or 11% faster)


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
    # The reference's log value on draw r sent again after SD's runs (None: not yet), and the move allowed
    # for until then: a check against the reference only (a baseline's comparisons carry their own).
    reference_again: tuple[float, ...] | None = None
    unmeasured_move: float = 0.0
    # SD's server remembers what it served (suffix decoding's tree): a draw sent again is faster by an amount
    # that depends on its prompts, so a first send's distance from its sends again is not timing (`sends_timing`).
    remembers: bool = False


class Reading(NamedTuple):
    estimate: float
    variance: float | None  # of the estimate; None: no spread to judge noise by
    df: float
    interval: str  # what the spread was read from, and what was set aside
    content: float | None  # log spread of the figure between draws
    timing: float | None  # log spread of one run's figure, the same prompts again
    fixed: float  # the part of `variance` that sending the draws again does not narrow
    move: float = 0.0  # a bound on the bias from the machine's move between the reference and SD (log)
    move_measured: float | None = None  # that move as the reference's two sends read it (log); None: unseen


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


def sends_timing(
    sends: Sequence[Sequence[float]], stood_for: Sequence[int] = (), firsts: bool = True
) -> tuple[float, int, float | None]:
    """(sum of squares, degrees of freedom, shared offset) of one run's timing, from draws sent again.

    The sends after a draw's first, around their own mean, are timing alone.  And how far each first send
    lies from its sends again, around the offset the draws share (a prefix cache makes every draw's sends
    again faster alike), is the first sends' timing: a first send a neighbour slowed shows there, where the
    sends again cannot show it.  d = first - mean(again) has (1 + 1/k) of one run's variance, so the weight
    k / (k + 1) puts every draw's on one run's scale.  Draws in `stood_for` had their first send set aside
    (`first_sends_disturbed`): only their sends again count.  Without `firsts` (a server that remembers what
    it served: suffix decoding sends a draw again faster by an amount that depends on its prompts, so d is
    the prompts' as much as the clock's) only the sends again count, each timing the others; the offset is
    still said."""
    again = [tuple(s[1:]) for s in sends if len(s) > 1]
    df = sum(len(a) - 1 for a in again)
    squares = sum((v - _mean(a)) ** 2 for a in again if len(a) > 1 for v in a)
    offsets = [
        (s[0] - _mean(s[1:]), (len(s) - 1) / len(s)) for i, s in enumerate(sends) if len(s) > 1 and i not in stood_for
    ]
    shared = sum(d * w for d, w in offsets) / sum(w for _, w in offsets) if offsets else None
    if firsts and len(offsets) >= 2:
        squares += sum(w * (d - shared) ** 2 for d, w in offsets)
        df += len(offsets) - 1
    return squares, df, shared


def first_sends_disturbed(sends: list[tuple[float, ...]]) -> tuple[list[tuple[float, ...]], list[int], str]:
    """SD's draws with a disturbed first send stood for by its sends again, which of them, and what was said.

    A first send lies from its sends again by an offset the draws share (a server that remembers); one whose
    offset is `OUTLIER_MADS` timing sds from the others' (one run's timing, from the sends again of every
    draw) was disturbed (a neighbour's burst), and kept it would widen the interval past any decision.  Its
    draw's first send is then its sends again's mean plus the others' offset: at most one draw, and only once
    every draw was sent again at least twice (the sends again must tell the timing on their own)."""
    if len(sends) < 2 or any(len(s) < 3 for s in sends):
        return sends, [], ""
    again = [s[1:] for s in sends]
    df = sum(len(a) - 1 for a in again)
    run_sd = math.sqrt(sum((v - _mean(a)) ** 2 for a in again for v in a) / df)
    offsets = [s[0] - _mean(a) for s, a in zip(sends, again)]

    def others(i: int) -> float:
        return _mean([d for j, d in enumerate(offsets) if j != i])

    # Two draws are each as far from the other: the disturbed one is the one further from no offset at all,
    # since a burst only ever slows a run down, in the direction a server that remembers would move it too.
    far = max(range(len(sends)), key=lambda i: abs(offsets[i] - others(i)) if len(sends) > 2 else abs(offsets[i]))
    k = len(again[far])
    scale = run_sd * math.sqrt(1 + 1 / k + (1 + 1 / k) / (len(sends) - 1))  # offset minus the others' mean
    if run_sd <= 0 or abs(offsets[far] - others(far)) <= OUTLIER_MADS * scale:
        return sends, [], ""
    stood = list(sends)
    stood[far] = (_mean(again[far]) + others(far), *again[far])
    said = (
        f"; draw {far + 1}'s first send on SD set aside as disturbed ({math.expm1(offsets[far] - others(far)):+.0%} "
        "against its sends again, beyond the other draws): its sends again stand for it"
    )
    return stood, [far], said


def _builds_apart(sends, ref, base, base_ref) -> Reading:
    """A builds A/B: both builds measured in this session, one send a draw on each, on the same draws.

    SD's runs are paired by draw (SD on this build against SD on the baseline build: the prompts cancel),
    and the two builds' references are paired by draw apart from them: this build's reference against the
    baseline build's on the same draw.  Each build runs its reference beside the other's (A B B A), so a move
    of the machine between draws (a neighbour for a minute, a clock) moves both builds' references alike and
    cancels in their pair, as it does in the estimate.  Read one build at a time, as they once were, each
    build's references spread with every such move, and real-build A/A sessions whose references wandered
    between draws while their pairs agreed stayed undecided at the cap (docs/deciding.md).

    Paired per draw as one figure, SD and references together rest on four runs and a disturbed one among
    them costs the whole draw; apart, a disturbed reference run is set aside with its pair (`set_aside`: it
    stands out among the pairs, where the machine's moves cancel) and SD's pair keeps its draw.  Both kinds of
    pair are two runs' timing on one machine, so their spreads pool, on the degrees of freedom of both, where
    the paired draws had draws - 1 in all; the pooled variance times (1/n + 1/m) is the estimate's variance
    whatever each kind's own spread, when nothing was set aside (equal counts)."""
    sd_change = [s[0] - b - r for s, b, r in zip(sends, base, base_ref)]
    ref_change = [r - b for r, b in zip(ref, base_ref)]
    sd_kept, said = set_aside(sd_change)
    ref_kept, said_ref = set_aside(ref_change, "reference pairs (this build's against the baseline build's)")
    sd_pairs, ref_pairs = [sd_change[i] for i in sd_kept], [ref_change[i] for i in ref_kept]
    estimate = _mean(sd_pairs) - _mean(ref_pairs)
    squares = _var(sd_pairs) * (len(sd_pairs) - 1) + _var(ref_pairs) * (len(ref_pairs) - 1)
    pair_var = squares / (len(sd_pairs) + len(ref_pairs) - 2)
    # A pair set aside still spent its degree of freedom: what is kept was chosen for being close.
    df = len(sd_pairs) + len(ref_pairs) - 2 - (len(sends) - len(sd_pairs)) - (len(ref) - len(ref_pairs))
    variance = pair_var * (1 / len(sd_pairs) + 1 / len(ref_pairs))
    firsts = [s[0] - r - b for s, r, b in zip(sends, ref, base)]
    timing = math.sqrt(pair_var / 2)  # one run's, net of the machine's moves between draws
    interval = "SD paired by draw, the builds' references paired apart (timing)" + said + said_ref
    return Reading(estimate, variance, max(1, df), interval, math.sqrt(_var(firsts)), timing, 0.0)


class _References(NamedTuple):
    used: list[float]  # each draw's reference as the estimate uses it
    move: float  # the bias bound the machine's move leaves (log)
    shift: float | None  # the move the reference's sends before and after SD's read (None: not sent again)
    groups: list[list[float]]  # the reference's runs whose spread is timing, each group around its own mean
    said: str  # a reference run set aside as disturbed


def _references(evidence: Evidence, ref: list[float], draws: int) -> _References:
    """The reference's draws as a check against it reads them (module docstring: the machine's move).

    With the reference sent again after SD, a draw's reference is the mean of its two sends: for a move at
    any time between them (a step before SD, a step after, a steady drift) that mean is off by at most half
    the move, which the two sends measure as the mean shift across draws.  Its 2 x draws runs are timing
    alone, so one disturbed run among them stands out (`set_aside`) and its draw keeps the other send: a
    hiccup in the reference's first runs is named and sent again, not left to widen the interval."""
    move = evidence.unmeasured_move if evidence.baseline is None else 0.0
    again = list(evidence.reference_again[:draws]) if evidence.reference_again is not None else []
    if evidence.baseline is not None or len(again) < draws:
        return _References(ref, move, None, [ref], "")
    kept, said = set_aside(ref + again, "reference runs (before and after SD's)")
    out = set(range(2 * draws)) - set(kept)
    used, shifts = [], []
    for r in range(draws):
        if r in out:
            used.append(again[r])
        elif draws + r in out:
            used.append(ref[r])
        else:
            used.append((ref[r] + again[r]) / 2)
            shifts.append(again[r] - ref[r])
    shift = _mean(shifts) if shifts else None
    groups = [[ref[r] for r in range(draws) if r not in out], [again[r] for r in range(draws) if draws + r not in out]]
    return _References(used, abs(shift) / 2 if shift is not None else move, shift, groups, said)


def reference_disturbed(evidence: Evidence) -> str | None:
    """Why the reference's first runs look disturbed, or None: their spread across draws beyond what one run's
    timing (SD's sends again, `sends_timing`) explains by `OUTLIER_MADS` sds.  Sending the reference again
    costs a server start, never an error rate, so a timing read on few degrees of freedom may ask for it.  The reference's speed does not depend on the
    prompts, so one run far from the others is a hiccup (a neighbour's burst), and sending the reference's
    draws again names it (`_references`)."""
    sends = [tuple(s) for s in evidence.sends if s]
    if evidence.reference is None or evidence.baseline is not None or evidence.reference_again is not None:
        return None
    squares, df, _ = sends_timing(sends, firsts=not evidence.remembers)
    ref = list(evidence.reference[: len(sends)])
    if not df or len(ref) < 2:
        return None
    run_sd = math.sqrt(squares / df)
    far = max(range(len(ref)), key=lambda i: abs(ref[i] - _mean([v for j, v in enumerate(ref) if j != i])))
    off = ref[far] - _mean([v for j, v in enumerate(ref) if j != far])
    if abs(off) <= OUTLIER_MADS * run_sd * math.sqrt(1 + 1 / (len(ref) - 1)):
        return None
    return (
        f"the reference's runs differ by {math.expm1(abs(off)):.0%} between draws, beyond one run's timing "
        f"({math.expm1(run_sd):.1%}, from SD's sends again): one of them was disturbed"
    )


def read(evidence: Evidence) -> Reading:
    """The estimate, its variance and degrees of freedom, and what they were read from.

    The estimate is each draw's first send: a draw sent again is no longer new to the server (vLLM's prefix
    cache holds its prompts; suffix decoding drafts from the outputs it already gave), so later sends can be
    faster for a reason that is not the clock.  The sends again tell the timing spread (`sends_timing`)."""
    sends = [tuple(s) for s in evidence.sends if s]
    draws = len(sends)
    ref = list(evidence.reference) if evidence.reference is not None else None
    base = list(evidence.baseline) if evidence.baseline is not None else None
    if ref is None:
        return _read(evidence, sends, draws, None, None, base)
    refs = _references(evidence, ref[:draws], draws)
    reading = _read(evidence, sends, draws, refs.used, refs.groups, base)
    return reading._replace(move=refs.move, move_measured=refs.shift, interval=reading.interval + refs.said)


def _read(evidence: Evidence, sends, draws, ref, ref_groups, base) -> Reading:
    first = [s[0] - (ref[r] if ref else 0.0) - (base[r] if base else 0.0) for r, s in enumerate(sends)]
    estimate = _mean(first)
    content = math.sqrt(_var(first)) if draws >= 2 else None
    # A server that remembers sends a draw again faster by its prompts' own amount: no first send stands out.
    sends, stood_for, said_sd = (sends, [], "") if evidence.remembers else first_sends_disturbed(sends)
    if stood_for:
        first = [s[0] - (ref[r] if ref else 0.0) - (base[r] if base else 0.0) for r, s in enumerate(sends)]
        estimate = _mean(first)
    squares, within_df, _ = sends_timing(sends, stood_for, firsts=not evidence.remembers)
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
        # The reference's spread across draws is timing: its first sends', and its sends after SD's apart
        # (their mean moved with the machine, which the move bound carries).
        for group in (g for g in ref_groups if len(g) >= 2):
            squares, df = squares + _var(group) * (len(group) - 1), df + len(group) - 1
    # One run's timing variance of a side's log figure, pooled over SD's sends again of each draw, the first
    # sends against them, and the reference's draws (its speed does not depend on the prompts): the same
    # machine and engine time both.
    run_var = squares / df
    sides = (1 + (1 if ref is not None else 0)) + ((2 if ref is not None else 1) if base is not None else 0)
    variance = run_var * sides / draws  # every run the estimate rests on is a draw's first: sends narrow df only
    this_side = run_var * (1 + (1 if ref is not None else 0))
    if base is not None and draws >= 2 and _var(first) > run_var * sides * t_quantile(NOISIER / 2, df) ** 2:
        # The pairs spread wider than this model explains, beyond chance (an F test: a baseline session noisier
        # than this one, a neighbour then): the baseline's part is what the pairs show beyond this session's
        # runs, on the draws' degrees of freedom, and the two parts combine by Welch-Satterthwaite.  Below the
        # test's threshold the model stands, as a spread that wide is what equal noise gives often enough.
        parts = [(this_side / draws, df), ((_var(first) - this_side) / draws, draws - 1)]
        variance = sum(v for v, _ in parts)
        df = variance**2 / sum(v**2 / d for v, d in parts)
    timing = run_var * (2 if ref is not None else 1)  # one run's variance of the figure (both sides of a ratio)
    interval = "timing from draws sent again" + said_sd
    if evidence.remembers:
        interval += "; SD's server remembers what it served: its sends again time one another, not its first sends"
    return Reading(estimate, variance, df, interval, content, math.sqrt(timing), variance)
