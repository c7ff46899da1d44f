"""One specdec test session, without pytest: what `plugin.py` forwards every hook to.

`SpecdecSession` owns the session's resolved `Settings`, each test's `Plan`
(from its markers), the server pool, the shared measurements, the baselines,
the result rows and the end-of-session work (`finish`): baselines written,
report files, stale baselines.  It is built once per pytest session (and
once per xdist worker); the plugin passes in the few things only pytest
knows (the hooks' results, the terminal, whether the run was cut short).
A script can drive it too.
"""

from __future__ import annotations

import signal
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .config.plans import Collected, Plan, SetupDecision, plan_for, registered
from .config.settings import Settings
from .history.recorder import HistoryRecorder
from .config.sharding import shard_order, write_groups
from .session_report import SessionReport
from .config.spec import canonical_id, parse_specdec_marker
from .hook_errors import HookErrors
from .load.patterns import AccessPattern
from .load.workloads import Workload
from .measure.build_runs import build_of
from .measure.measurements import Measurements
from .measure.capacity.sides import plan_capacity
from .measure.specdec_test import SpecDecTest
from .measure.start_drift import measure_drift_cost
from .measure.progress import Terminal, progress_for
from .serving.gpus import (
    DeviceError,
    cuda_visible_devices,
    device_order_env,
    gpus_needed,
    memory_gate,
    session_share,
    skip_reason,
)
from .serving.pool import ServerPool, order_for_reuse
from .serving.server import ManagedServer
from .verdict.gate import BaselineSession, RegressionGate
from .verdict.alarm_budget import AlarmBudget, RatesForTest
from .verdict.learned_drift import DriftBook
from .verdict.machine import run_probe, session_fingerprint

SKIP_NO_DEVICE = (
    "specdec tests need a device flag: run with --specdec-gpu (GPU vLLM) or --specdec-cpu (vLLM's CPU build)"
)
SKIP_NEEDS_GPU = "needs a GPU (requires_gpu=True in @pytest.mark.specdec): run with --specdec-gpu"


class SpecdecSession:
    """The state of one specdec session, and every decision hooks used to make inline."""

    def __init__(
        self,
        settings: Settings,
        *,
        rootpath: Path,
        basetemp: Path | None = None,
        launcher: Callable | None = None,
        fingerprint: Callable[[dict], dict] | None = None,
        terminal: Terminal | None = None,
        is_worker: bool = False,
        machine_probe: dict | None = None,
    ):
        self.settings = settings
        self.rootpath = Path(rootpath)
        self.basetemp = basetemp  # scratch space (server logs, prompt files); pytest's basetemp
        self._launcher = launcher
        self._extend_fingerprint = fingerprint or (lambda fp: fp)
        self._machine_probe = machine_probe  # under xdist, the controller's (timed before any server started)
        self._fingerprint: dict | None = None
        self.terminal = terminal or Terminal()
        self.is_worker = is_worker
        self.plans: dict[str, Plan] = {}
        self.alarms = AlarmBudget()  # replaced once collection is known (collection_finished)
        self.tests: dict[str, SpecDecTest] = {}
        self.rows: list[dict] = []
        self.seen: set[str] = set()  # canonical ids of every test that reported
        self.deselected = 0
        self.shard_deselected = 0  # left to other shards by --specdec-shard
        self.report_message: str | None = None
        self.stale: list[Path] = []
        self._pool: ServerPool | None = None
        self._measurements: Measurements | None = None
        self._baselines: BaselineSession | None = None
        self._gpu_share: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
        self._gpu_memory: dict[str, int] = {}  # spec key -> MiB the most demanding test of it asks
        self._builds: dict[str, tuple] = {}  # engine -> (this build, the baseline build) for a builds A/B
        self._previous_sigterm: Any = None
        # Plain -n would start a target's servers on several workers: our scheduler keeps targets whole.
        self.groups_dir: str | None = None
        self.hook_errors = HookErrors()  # exceptions session-level hooks caught, for the summary
        self.drift_checks: list = []  # analysis.drift.DriftCheck, one per reference traffic (--specdec-drift-check)
        self.drift_skipped: str | None = None  # why the drift check did not run although it was asked for
        self.interrupted: str | None = None  # set by the plugin when the run is interrupted (Ctrl-C, SIGTERM)
        self.history = HistoryRecorder(settings.history, self.rootpath) if settings.history.url else None
        self.report = SessionReport(self)  # each test's rows, the exports, and the report and summary at the end

    # --- set-up and tear-down ---------------------------------------------------------------
    def start(self, *, xdist_load_scheduling: bool = False) -> None:
        if self.history is not None and not self.is_worker:
            self.history.check()  # ValueError: a history that cannot be written fails before any server starts
        if xdist_load_scheduling and (self.settings.device or self.settings.endpoints):
            self.groups_dir = tempfile.mkdtemp(prefix="specdec-xdist-groups-")
        if self.settings.device is not None and threading.current_thread() is threading.main_thread():
            # CI runners stop jobs with SIGTERM; turn it into an interrupt so the
            # session unwinds and the servers are stopped instead of orphaned.
            previous = signal.getsignal(signal.SIGTERM)
            if previous in (signal.SIG_DFL, None):
                self._previous_sigterm = signal.SIG_DFL
                signal.signal(signal.SIGTERM, _interrupt_on_sigterm)

    def close_pool(self) -> None:
        """The `specdec_pool` fixture's end: the drift check (while servers can still start), then every stop."""
        if self.settings.drift_check and self._measurements is not None and not self.is_worker:
            if self.interrupted is not None:
                # Stopping means stopping: measuring again would start a reference server after the signal
                # (a GPU run stopped by its time limit started one, and was then killed with it running).
                self.drift_skipped = f"not run: the session was interrupted ({self.interrupted})"
            else:
                with self.hook_errors.guard("measuring the references again (drift check)"):
                    self.drift_checks = self._measurements.references.check_drift()
        if self._pool is not None:
            self._pool.close()

    def close(self) -> None:  # every server stopped, scratch files removed, signal handlers restored; idempotent
        if self.groups_dir is not None:
            shutil.rmtree(self.groups_dir, ignore_errors=True)
        if self._pool is not None:
            self._pool.close()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    # --- collection -------------------------------------------------------------------------

    def collect(
        self,
        items: list[tuple[str, Callable[[str], Any]]],
        workload_hooks: Iterable,
        pattern_hooks: Iterable,
        worker: Mapping[str, Any] | None = None,
    ) -> Collected:
        """Plan each (node id, get_marker) item; return the run order (without the shard's deselection), what
        the shard deselects and each runnable test's target (its xdist group).  `workload_hooks` / `pattern_hooks`:
        what the registration hooks returned (TypeError names a hook that returned something else).  On an xdist
        worker (`worker` is its workerinput) the targets are written for the controller's scheduler."""
        workloads = registered(workload_hooks, Workload)
        patterns = registered(pattern_hooks, AccessPattern)
        targets: list[str | None] = []
        keys: list[str | None] = []
        for nodeid, get_marker in items:
            plan = plan_for(get_marker, self.settings, workloads, patterns)
            if plan is not None and plan.ok and self.settings.endpoints and not plan.spec.endpoints:
                plan.spec = replace(plan.spec, endpoints=self.settings.endpoints)
            if plan is not None:
                self.plans[nodeid] = plan
                if plan.ok and plan.gpu_memory_mib:  # a shared server needs what its most demanding test asks
                    self._gpu_memory[plan.spec.key] = max(self._gpu_memory.get(plan.spec.key, 0), plan.gpu_memory_mib)
            ok = plan is not None and plan.ok
            keys.append(plan.spec.key if ok else None)
            targets.append(plan.spec.target if ok else None)
        groups = {nodeid: target for (nodeid, _), target in zip(items, targets) if target}
        order = order_for_reuse(keys, targets, self._lead_keys(items, keys))
        order, deselected = shard_order([nodeid for nodeid, _ in items], targets, order, self.settings.shard)
        self.shard_deselected += len(deselected)
        if worker and worker.get("specdec_groups_dir"):
            kept_ids = {items[index][0] for index in order}
            write_groups(
                worker["specdec_groups_dir"],
                worker["workerid"],
                {nodeid: group for nodeid, group in groups.items() if nodeid in kept_ids},
            )
        return Collected(order, deselected, groups)

    def _lead_keys(self, items, keys) -> frozenset[str]:
        """SD configurations none of whose tests names an access pattern and one at least a workload (a sweep
        picks its levels when it runs): they announce no reference runs, so they go first (`order_for_reuse`)."""
        announcing = {key for (nodeid, _), key in zip(items, keys) if key and self.plans[nodeid].pattern}
        return frozenset(
            key
            for (nodeid, _), key in zip(items, keys)
            if key
            and key not in announcing
            and self.plans[nodeid].spec.speculative_config
            and self.plans[nodeid].workload is not None
        )

    def collection_finished(self, nodeids: Iterable[str]) -> None:
        """Forget the plans of tests -k, -m or a shard deselected: they announce no reference runs."""
        kept = set(nodeids)
        self.plans = {nodeid: plan for nodeid, plan in self.plans.items() if nodeid in kept}
        # The session's false-alarm budget is split over every test it runs, every other shard's included: merged,
        # the shards are one session under one budget.
        self.alarms = AlarmBudget(
            self.settings.false_fail,
            self.settings.false_pass,
            self.settings.session_false_fail,
            tests=sum(1 for plan in self.plans.values() if plan.ok) + self.shard_deselected,
        )
        if self.settings.measure_drift and self.terminal.write_line is not None:
            self.terminal.write_line(measure_drift_cost(self.plans.values(), self._runnable))

    def _runnable(self, plan: Plan) -> bool:
        """A plan whose test would run a measurement in this session."""
        if not plan.ok:
            return False
        if plan.spec.endpoints:
            return True
        return self.settings.device is not None and (self.settings.device == "gpu" or not plan.spec.requires_gpu)

    def setup(self, nodeid: str) -> SetupDecision | None:
        """Skip or fail a test before it runs, or None to let it run."""
        try:
            return self._setup(nodeid)
        except DeviceError as exc:
            return SetupDecision("fail", str(exc))

    def _setup(self, nodeid: str) -> SetupDecision | None:
        plan = self.plans.get(nodeid)
        if plan is None:
            return None
        if plan.error:
            return SetupDecision("fail", plan.error)
        if not plan.spec.endpoints:  # with running endpoints, nothing is started here: no device needed
            device = self.settings.device
            if device is None:
                return SetupDecision("skip", SKIP_NO_DEVICE)
            if plan.spec.requires_gpu and device != "gpu":
                return SetupDecision("skip", SKIP_NEEDS_GPU)
            if device == "gpu":
                all_devices, share, workers = self.gpu_share()
                reason = skip_reason(
                    gpus_needed(plan.spec.tensor_parallel_size, plan.spec.speculative_config),
                    share,
                    all_devices,
                    workers,
                )
                if reason:
                    return SetupDecision("skip", reason)
        if plan.missing_data:
            return SetupDecision("fail", plan.missing_data)
        return None

    # --- shared resources (made on first use) -----------------------------------------------

    def gpu_share(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """(the session's GPUs, this worker's share of them, how many xdist workers), found once."""
        if self._gpu_share is None:
            try:
                self._gpu_share = session_share(self.settings.devices)
            except DeviceError as exc:
                raise DeviceError(f"--specdec-gpu: {exc}") from None
        return self._gpu_share

    def open_pool(self, basetemp: Path | None = None) -> tuple[ServerPool | None, SetupDecision | None]:
        """The `specdec_pool` fixture's pool, or why not: skipped without a device flag (unless some test
        points at running endpoints), failed when the GPUs cannot be listed."""
        if basetemp is not None:
            self.basetemp = basetemp
        if self.settings.device is None and not any(plan.ok and plan.spec.endpoints for plan in self.plans.values()):
            return None, SetupDecision("skip", SKIP_NO_DEVICE)
        try:
            return self.pool, None
        except DeviceError as exc:
            return None, SetupDecision("fail", str(exc))

    @property
    def started_pool(self) -> ServerPool | None:
        """The server pool if a test has needed it, else None: reading this starts nothing."""
        return self._pool

    @property
    def opened_baselines(self) -> BaselineSession | None:
        """The session's baselines if a test has opened them, else None: reading this opens nothing."""
        return self._baselines

    @property
    def pool(self) -> ServerPool:
        if self._pool is None:
            gpu = self.settings.device == "gpu"
            share = self.gpu_share()[1] if gpu else ()
            self._pool = ServerPool(
                self.settings.device or "none",
                self.settings.log_dir or self._scratch() / "specdec-servers",
                launcher=self._launcher,
                kv_cache_bytes=self.settings.cpu_kv_cache_bytes,
                startup_timeout=self.settings.startup_timeout,
                # A GPU's memory is claimed per server: a paused one would keep the next from starting.
                park_limit=self.settings.cpu_parked_servers if self.settings.device == "cpu" else 0,
                env={"CUDA_VISIBLE_DEVICES": cuda_visible_devices(share), **device_order_env()} if gpu else None,
                on_event=self.terminal.write_line,
                before_start=self._memory_gate(share) if gpu else None,
            )
        return self._pool

    def _scratch(self) -> Path:
        if self.basetemp is None:
            self.basetemp = Path(tempfile.mkdtemp(prefix="specdec-"))
        return self.basetemp

    def _memory_gate(self, share):
        return memory_gate(
            share,
            lambda spec: self._gpu_memory.get(spec.key, self.settings.gpu_memory_mib),
            timeout=min(120.0, self.settings.startup_timeout),
        )

    @property
    def measurements(self) -> Measurements:
        if self._measurements is None:
            self._measurements = Measurements(
                self.pool,
                self._scratch() / "specdec",
                repeats=self.settings.repeats,
                on_event=self.pool.on_event,
                progress=progress_for(self.terminal.rewrite, self.terminal.interactive),
                request_timeout=self.settings.request_timeout,
                max_dispatch_lag_ms=self.settings.max_dispatch_lag_ms,
                client_workers=self.settings.client_workers,
            )
            self._measurements.series_interval_s = self.settings.series_interval_s or None
            # --specdec-repeats auto: checks send the draws again until decided (verdict.sequential).
            self._measurements.sequential = self.settings.sequential
            self._measurements.max_repeats = self.settings.max_repeats
            self._measurements.strict = self.settings.strict
            self._measurements.measure_drift = self.settings.measure_drift
            for plan in self.plans.values():
                if not (self._runnable(plan) and plan.workload and plan.pattern and plan.spec.speculative_config):
                    continue
                if plan.pattern.search:  # a capacity search: the reference's side of it, announced whole
                    plan_capacity(
                        self._measurements, plan.spec, plan.workload, plan.pattern, plan.slo, plan.slo_percentile
                    )
                else:
                    self._measurements.plan_reference(plan.spec, plan.workload, plan.pattern)
        return self._measurements

    def machine_probe(self) -> dict:
        """verdict.machine's probe, timed once: by the xdist controller for its workers, else with the fingerprint."""
        self._machine_probe = self._machine_probe or run_probe()
        return self._machine_probe

    def _server_devices(self) -> tuple[int, ...] | None:
        try:
            return self.gpu_share()[1]
        except DeviceError:  # no GPU list: the fingerprint says "unknown" (the pool fails with the reason)
            return None

    @property
    def fingerprint(self) -> dict:  # first needed by a test's baselines: before its servers measure
        if self._fingerprint is None:
            # On a GPU, the servers' own devices (this worker's share): not the session's GPU 0.
            devices = self._server_devices() if self.settings.device == "gpu" else None
            fp = session_fingerprint(self.settings.device, self.machine_probe, gpu_devices=devices)
            self._fingerprint = self._extend_fingerprint(fp)
        return self._fingerprint

    @property
    def baselines(self) -> BaselineSession:
        if self._baselines is None:
            self._baselines = BaselineSession(
                base_dir=self.settings.baseline_dir,
                update=self.settings.update_baselines,
                strict=self.settings.strict,
                fingerprint=self.fingerprint,
                ini_tolerances=self.settings.tolerances,
                loader=self.history.baseline_loader() if self.history else None,
                retime_probe=run_probe if self.settings.device else None,
                drift=DriftBook(
                    self.history.drift_lookup() if self.history else None, device=self.settings.device or "cpu"
                ),
            )
        return self._baselines

    def server(self, nodeid: str, fields: Mapping[str, Any]) -> ManagedServer:
        """A raw server for the `specdec_server` fixture (marker fields); SKIP_NEEDS_GPU is raised as LookupError."""
        spec = parse_specdec_marker((), fields, extra_methods=self.settings.extra_methods, origin=nodeid)
        if spec.requires_gpu and self.pool.device != "gpu":
            raise LookupError(SKIP_NEEDS_GPU)
        return self.pool.get(spec)

    def test_for(self, nodeid: str) -> SpecDecTest | None:
        """The `specdec` fixture's object for a test, or None when the test has no specdec marker."""
        plan = self.plans.get(nodeid)
        if plan is None:
            return None
        gate = RegressionGate(self.baselines, canonical_id(nodeid), plan.tolerances)
        test = SpecDecTest(
            plan.spec,
            self.measurements,
            plan.workload,
            plan.pattern,
            gate=gate,
            slo=plan.slo,
            slo_percentile=plan.slo_percentile,
            builds=self.builds_for(plan.spec.engine),
            rates=RatesForTest(self.alarms, canonical_id(nodeid)),
        )
        test.mechanism = plan.mechanism  # @pytest.mark.specdec_mechanism
        test.alarm_budget = self.alarms.config()
        self.tests[nodeid] = test
        return test

    def builds_for(self, engine: str):
        """(this build, the baseline build) of `engine` under --specdec-baseline-from build:PATH, else None;
        each build's version read once per session."""
        baseline = self.settings.history.baseline_build
        if baseline is None:
            return None
        if engine not in self._builds:
            self._builds[engine] = (build_of(engine, self.settings.build), build_of(engine, baseline))
        return self._builds[engine]

    # --- results ----------------------------------------------------------------------------


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"received signal {signum}")
