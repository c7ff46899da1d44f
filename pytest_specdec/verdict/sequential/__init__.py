"""The sequential decision: a check looks at the runs it has and decides, or asks for more, at stated error rates.

`rule` holds the rule (`Rule`, `decide`, and `decide_until`, the loop that asks for more draws through a
callable), `evidence` what a check reads from the runs (per-draw log speedups, their variances and degrees
of freedom, the machine's move), and `student_t` the quantiles both use. The measurement loop hands the loop
its callables (`measure.more_draws`); a result's timing checks live in `measure.timing_decisions`.
"""

from .evidence import Evidence
from .rule import (
    FALSE_FAIL,
    FALSE_PASS,
    INDIFFERENCE,
    MAX_RUNS,
    MIN_RUNS,
    PASSED,
    FAILED,
    UNDECIDED,
    Decision,
    Rule,
    bound_zone,
    decide,
    decide_until,
    tolerance_zone,
)

__all__ = [
    "FALSE_FAIL",
    "FALSE_PASS",
    "INDIFFERENCE",
    "MAX_RUNS",
    "MIN_RUNS",
    "PASSED",
    "FAILED",
    "UNDECIDED",
    "Decision",
    "Evidence",
    "Rule",
    "bound_zone",
    "decide",
    "decide_until",
    "tolerance_zone",
]
