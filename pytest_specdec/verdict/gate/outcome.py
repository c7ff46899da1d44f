"""What one baseline check concluded, in one word, and what `--specdec-strict` makes of it.

A check gates a list of figures.  Each is compared (a verdict against the
baseline), or not compared with a reason: another machine, a machine probe
that moved, a speedup still flagged cold or drifting after measuring again
(undecided: the flag may be the regression itself), or a figure the test
allowed to be unavailable.  The outcome says how much was compared:

- ``failed``: a compared figure regressed;
- ``passed``: every gated figure was compared and none regressed;
- ``partly compared``: some were compared and none regressed, others were
  not: a pass only of what was compared (an engine 2x slower on another
  machine still passes its acceptance);
- ``not compared``: nothing was compared, whatever the test allowed;
- ``undecided``: a figure was measured until the cap, or stayed flagged, without a decision (what would
  decide it is said); none regressed.

Without `--specdec-strict` only ``failed`` fails the test; with it, every
outcome but ``passed`` does, naming each figure that was not compared and why.
"""

from __future__ import annotations

PASSED = "passed"
PARTLY_COMPARED = "partly compared"
NOT_COMPARED = "not compared"
FAILED = "failed"
# Prefixes of a not-compared reason, so reports can tell the kinds apart.
UNDECIDED = "undecided: "
# A figure measured until the cap (or a flag that stayed) without a decision: not a pass (verdict.sequential).
UNDECIDED_OUTCOME = "undecided"
ALLOWED_UNAVAILABLE = "unavailable (allowed): "


def outcome_of(compared: list[str], not_compared: dict[str, str], failed: bool) -> str:
    """The check's outcome from the figures it compared, those it did not (with why), and any regression."""
    if failed:
        return FAILED
    if any(why.startswith(UNDECIDED) for why in not_compared.values()):
        return UNDECIDED_OUTCOME
    if not compared:
        return NOT_COMPARED
    return PARTLY_COMPARED if not_compared else PASSED


def strict_failure(test_id: str, where: str, outcome: str, not_compared: dict[str, str], comparison: str) -> str:
    """The message of a check `--specdec-strict` fails: what was not compared, each with its reason."""
    what = (
        "every gated figure was skipped, and --specdec-strict fails a check that compared nothing"
        if outcome == NOT_COMPARED
        else "a gated figure is undecided, and --specdec-strict fails an undecided check"
        if outcome == UNDECIDED_OUTCOME
        else "some gated figures were not compared, and --specdec-strict fails a check that compared only part "
        "of what the test gates"
    )
    reasons = "\n".join(f"  {metric}: {why}" for metric, why in not_compared.items())
    return f"{test_id}: {outcome} with its baseline ({where}): {what}\n{reasons}\n{comparison}"
