"""Old module paths (pytest-specdec 0.1 had one flat package) keep importing, with a warning.

``import pytest_specdec.theory`` still works and returns
`pytest_specdec.analysis.theory`, after a `SpecdecDeprecationWarning` that
names the new path.  Only imports are redirected: the modules are the new
ones, not copies.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

MOVED = {
    "spec": "config.spec",
    "settings": "config.settings",
    "collection": "config.plans",
    "sharding": "config.sharding",
    "server": "serving.server",
    "pool": "serving.pool",
    "endpoint": "serving.endpoint",
    "gpus": "serving.gpus",
    "ports": "serving.ports",
    "models": "serving.models",
    "workloads": "load.workloads",
    "patterns": "load.patterns",
    "client": "load.client",
    "runner": "measure.measurements",
    "metrics": "analysis.metrics",
    "result": "measure.result",
    "theory": "analysis.theory",
    "vllm_bench": "measure.reproduce",
    "assertions": "verdict.assertions",
    "stats": "verdict.stats",
    "gate": "verdict.gate.regression",
    "baselines": "verdict.gate.baselines",
    "fingerprint": "verdict.fingerprint",
    "report_plots": "report.plots",
    "progress": "measure.progress",
    "benchmark_export": "report.exports",
    "merge": "report.merge",
    "xdist_scheduling": "xdist_scheduler",
    # Moved when the layers were drawn (0.1 development): a module below the layers that use it.
    "measure.counters": "engines.counters",
    "measure.derived": "verdict.metric_names",
    "report.progress": "measure.progress",
    "load.replay": "measure.replay",
    # The analyses left the measurement loop's folder (0.2 development): pure functions of measured runs.
    "measure.acceptance": "analysis.acceptance",
    "measure.cost_ratio": "analysis.cost_ratio",
    "measure.diagnosis": "analysis.diagnosis",
    "measure.theory": "analysis.theory",
    "measure.predictions": "analysis.predictions",
    "measure.step_cost": "analysis.step_cost",
    "measure.step_figures": "analysis.step_figures",
    "measure.goodput": "analysis.goodput",
    "measure.metrics": "analysis.metrics",
    "measure.outputs": "analysis.outputs",
    "measure.series_figures": "analysis.series_figures",
    "measure.energy_figures": "analysis.energy_figures",
    "measure.drift": "analysis.drift",
    "measure.dynamic_k": "analysis.dynamic_k",
    "measure.analysis": "analysis.inside_acceptance",
    # Capacity in one folder (0.2 development): the search, its probes and ratio, and both sides' searches.
    "load.capacity": "measure.capacity.search",
    "load.capacity_probes": "measure.capacity.probes",
    "load.capacity_ratio": "measure.capacity.ratio",
    "measure.capacity_sides": "measure.capacity.sides",
    "measure.slo_capacity": "measure.capacity.slo",
    # The gate in one folder (0.2 development): `pytest_specdec.verdict.gate` is that folder now, and its
    # package re-exports `RegressionGate` and `BaselineSession` from where the module had them.
    "verdict.gate_sequential": "verdict.gate.speedups",
    "verdict.gate_outcome": "verdict.gate.outcome",
    "verdict.gate_table": "verdict.gate.table",
    "verdict.baseline_session": "verdict.gate.baseline_session",
    "verdict.baselines": "verdict.gate.baselines",
    "verdict.staleness": "verdict.gate.staleness",
    "verdict.inventory": "verdict.gate.inventory",
    # A report row in one folder (0.2 development).
    "report.rows": "report.row.rows",
    "report.row_parts": "report.row.parts",
    "report.cells": "report.row.cells",
    "report.decision_cells": "report.row.decisions",
    "report.sampled": "report.row.sampling",
    "report.constrained": "report.row.constraints",
    # The sequential decision in one folder, and the measurement loop's modules named for what they hold.
    "verdict.evidence": "verdict.sequential.evidence",
    "verdict.student_t": "verdict.sequential.student_t",
    "measure.decided": "measure.timing_decisions",
    "measure.sends_again": "measure.more_draws",
}
PACKAGE = __name__.rpartition(".")[0]


class _Redirect(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self._specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PACKAGE + ".") or fullname[len(PACKAGE) + 1 :] not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        from .deprecation import SpecdecDeprecationWarning

        new = f"{PACKAGE}.{MOVED[spec.name[len(PACKAGE) + 1 :]]}"
        warnings.warn(
            f"{spec.name} moved to {new}; the old path will be removed in a later release",
            SpecdecDeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module):
        # The module ran when it was imported under its new name; importlib has
        # just stamped the alias's spec on it, so give it back its own.
        module.__spec__ = self._specs.get(module.__name__, module.__spec__)


def install() -> None:
    if not any(isinstance(finder, _Redirect) for finder in sys.meta_path):
        sys.meta_path.append(_Redirect())
