"""The regression gate: a result against its stored baseline.

`regression` holds `RegressionGate` (one test's side: compare, fail, update), `speedups` decides a gated
speedup by the sequential rule paired by prompt draw, `outcome` names what a check concluded, `table` builds
the failure table, `staleness` tells a baseline recorded on other traffic, `baselines` reads and writes the
stored files, `baseline_session` is the session's side (where they live, the fingerprint, what to write at
the end), and `inventory` finds and removes the ones no test used.
"""

from .baseline_session import BaselineSession
from .regression import RegressionGate

__all__ = ["BaselineSession", "RegressionGate"]
