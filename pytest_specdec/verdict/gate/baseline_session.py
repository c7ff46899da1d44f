"""The session's side of the baselines: where they live, what the session's fingerprint and probe are, what
was used, and what to write at the end (`verdict.gate.RegressionGate` is one test's side)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .baselines import Baseline, load_baseline, write_baseline
from ..fingerprint import PROBE_FIELD
from ..learned_drift import DriftBook
from ..machine import PROBE_MAX_TIMINGS, merged_probe


@dataclass
class BaselineSession:
    """Session-wide baseline bookkeeping: what was used, what to write at the end."""

    base_dir: Path
    update: bool
    fingerprint: dict
    ini_tolerances: dict[str, float] = field(default_factory=dict)
    # --specdec-strict: a check that compared nothing fails instead of ending "not compared".
    strict: bool = False
    used: set[str] = field(default_factory=set)
    pending: dict[str, Baseline] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    # Where baselines come from instead of files (--specdec-baseline-from history): (test id, fingerprint) -> Baseline.
    loader: Any = None
    # Times the machine probe again (verdict.machine.run_probe) when the session's disagrees with a baseline's;
    # None: the first timing decides.
    retime_probe: Any = None
    # Each gated figure's session-to-session drift: learned from the results history (--specdec-history), else the
    # built-in figure labelled as such (verdict.learned_drift).
    drift: DriftBook = field(default_factory=DriftBook)

    def probe_again(self) -> bool:
        """Time the machine probe again and keep each figure's best of all timings in the session's fingerprint
        (verdict.machine.merged_probe); False when there is nothing to time it with, or the session has timed it
        PROBE_MAX_TIMINGS times already: each timing again keeps the best of more rounds, so a probe timed once
        per disagreeing check drifts upwards until a slower box reads as the same one."""
        probe = self.fingerprint.get(PROBE_FIELD)
        if self.retime_probe is None or not isinstance(probe, dict):
            return False
        if int(probe.get("timings", 1)) >= PROBE_MAX_TIMINGS:
            return False
        self.fingerprint[PROBE_FIELD] = merged_probe(self.fingerprint[PROBE_FIELD], self.retime_probe())
        return True

    def _settle_probe(self) -> None:
        """Time the machine probe once more before baselines are written, each figure keeping its best of both
        timings.  A baseline's probe is what every later session on the box is judged by: one recorded during a
        neighbour's burst made a later session on the same box read "machine probe moved", and an engine made
        much slower passed with only acceptance compared (docs/benchmarks.md, "Figures the code once quoted")."""
        first = self.fingerprint.get(PROBE_FIELD)
        self.probe_again()  # a no-op once a check that disagreed took the session's last timing
        settled = self.fingerprint.get(PROBE_FIELD)
        if settled is first:
            return
        for baseline in self.pending.values():
            if baseline.fingerprint.get(PROBE_FIELD) == first:  # the session's probe, not another build's
                baseline.fingerprint = {**baseline.fingerprint, PROBE_FIELD: settled}

    def load(self, test_id: str, fingerprint: dict) -> Baseline:
        if self.loader is not None:
            return self.loader(test_id, fingerprint)
        return load_baseline(self.base_dir, test_id)

    def flush(self) -> list[Path]:
        """Write queued baselines (atomically); called at session end, after their probe is settled."""
        if self.pending:
            self._settle_probe()
        for test_id, baseline in sorted(self.pending.items()):
            self.written.append(write_baseline(self.base_dir, baseline))
        self.pending.clear()
        return self.written
