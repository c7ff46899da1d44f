"""A session's false alarms, budgeted as a whole: the rate each timing check may false-fail at, and what the
session's checks add up to.

Each check the sequential rule decides (verdict.sequential) false-fails at most `false_fail` of the time at its
good edge.  A nightly suite makes many: twenty checks at 5% each false-fail at least one unchanged build in up to
64% of sessions (1 - 0.95^20), which is how a performance gate loses its team's trust.  Given a session budget,
the budget is split over the session's tests (every test the session collected, every shard's included, so
sharded sessions merged are under one budget), and a test's share over its own checks by a series whose sum
never exceeds the share: its j-th check gets share x 6 / (pi^2 j^2), 61% of the share for its first check, 15% for
its second.  The bound on the session's chance of any false fail is then the sum of the rates its checks used
(Bonferroni: it holds whatever the checks' dependence), never above the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .sequential.rule import FALSE_FAIL, FALSE_PASS


@dataclass
class AlarmBudget:
    """The session's error rates for timing checks, and every rate a check claimed."""

    false_fail: float = FALSE_FAIL  # per check, where no session budget is set (and the most any check gets)
    false_pass: float = FALSE_PASS  # per check
    session: float | None = None  # the chance any check false-fails in the session, at most
    tests: int = 0  # the tests the budget is split over: every specdec test the session collected, all shards
    claims: list[tuple[str, str, float]] = field(default_factory=list)  # (test, check, false-fail rate), in order

    def __post_init__(self):
        for name in ("false_fail", "false_pass", "session"):
            value = getattr(self, name)
            if value is not None and not 0 < value < 0.5:
                raise ValueError(f"{name} must be a rate in (0, 0.5), got {value!r}")

    def claim(self, test: str, check: str) -> float:
        """The false-fail rate `check` of `test` is decided at.  Every ask claims anew (a check decided again, or
        one of the same name on another level of a sweep): the rates a session claims only ever add up to more
        than the ones its rows keep, never less."""
        if self.session is None:
            rate = self.false_fail
        else:
            share = self.session / max(self.tests, 1)
            j = 1 + sum(1 for owner, _, _ in self.claims if owner == test)
            rate = min(self.false_fail, share * 6 / (math.pi**2 * j**2))
        self.claims.append((test, check, rate))
        return rate

    def config(self) -> dict:
        """The settings a report row carries, so that any merge of rows can state the session's false alarms."""
        return {
            "false_fail": self.false_fail,
            "false_pass": self.false_pass,
            "session": self.session,
            "tests": self.tests,
        }

    def rule_rates(self, test: str, check: str) -> dict[str, float]:
        """The `Rule` fields `check` of `test` is decided with: its claimed false-fail rate, the false-pass rate."""
        return {"false_fail": self.claim(test, check), "false_pass": self.false_pass}

    def statement(self, rates: list[float], unrated: int = 0) -> str | None:
        """The session's last word on false alarms, given the rate each of its timing checks was decided at
        (`rates`, every worker's and shard's) and how many were decided on one run, with no rate; None when it
        made no timing check."""
        if not rates and not unrated:
            return None
        parts = []
        if rates:
            checks, low, high = len(rates), min(rates), max(rates)
            each = f"{low:.2%}" if low == high else f"{low:.2%}-{high:.2%}"
            budget = (
                f"the session budget {self.session:.1%} split over {self.tests} test{'s' if self.tests != 1 else ''}"
                if self.session is not None
                else "no session budget (--specdec-session-false-fail sets one)"
            )
            parts.append(
                f"{checks} timing check{'s' if checks != 1 else ''} at {each} false fails each, {budget}: the chance "
                f"that any false-failed an unchanged build is at most {any_false_fail(rates):.2%}"
            )
        if unrated:
            parts.append(
                f"{unrated} check{'s' if unrated != 1 else ''} decided on one run (--specdec-repeats 1), with no error "
                "rate"
            )
        return "; ".join(parts)

    def as_dict(self, rates: list[float], unrated: int = 0) -> dict:
        return {
            **self.config(),
            "checks": len(rates),
            "checks_without_rate": unrated,
            "any_false_fail_at_most": any_false_fail(rates) if rates else None,
            "statement": self.statement(rates, unrated),
        }


def any_false_fail(rates: list[float]) -> float:
    """A bound on the chance that any of checks decided at `rates` false-failed an unchanged build: their sum
    (Bonferroni, whatever their dependence), at most 1."""
    return min(1.0, sum(rates))


@dataclass(frozen=True)
class RatesForTest:
    """One test's side of the budget: check name -> the `Rule` fields it is decided with.  An object, not a
    closure, so that a result holding it can be pickled (xdist, a saved run)."""

    budget: AlarmBudget
    test: str

    def __call__(self, check: str) -> dict[str, float]:
        return self.budget.rule_rates(self.test, check)
