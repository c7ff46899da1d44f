"""pytest wiring: options, the ``specdec`` marker, fixtures and hooks.

Only this module imports pytest; the measurement core lives in plain modules
(`spec`, `server`, `pool`, `models`, `metrics`) that a script can use too.
Collection never imports vllm or torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from . import hookspecs
from .collection import MARKER_DOCS, Plan, plan_for, registered
from .baselines import list_baselines, remove_baselines, unused_baselines_under
from .benchmark_export import benchmark_entry, junit_properties
from .gate import BaselineSession, RegressionGate
from .patterns import AccessPattern
from .gpus import DeviceError, cuda_visible_devices, gpus_needed, memory_gate, session_share, skip_reason
from .pool import ServerPool, order_for_reuse
from .progress import LiveProgress, QuietProgress, running_on_ci
from .report import ReportError, append_step_summary, markdown_summary, rows_for_test, terminal_table
from .report import write_report, write_shard_files
from .runner import Measurements, SpecDecTest
from .server import LaunchRequest, VllmServer
from .stats import parse_tolerance_lines
from .settings import COMMAND_LINE_OPTIONS, INI_KEYS, Settings, resolve_settings
from .spec import MARKER_FIELDS, parse_specdec_marker
from .workloads import Workload

SKIP_NO_DEVICE = (
    "specdec tests need a device flag: run with --specdec-gpu (GPU vLLM) "
    "or --specdec-cpu (vLLM's CPU build)"
)
SKIP_NEEDS_GPU = "needs a GPU (requires_gpu=True in @pytest.mark.specdec): run with --specdec-gpu"

settings_key = pytest.StashKey[Settings]()
pool_key = pytest.StashKey[ServerPool]()
measurements_key = pytest.StashKey[Measurements]()
baselines_key = pytest.StashKey[BaselineSession]()
_plan_key = pytest.StashKey[Plan]()
_planned_key = pytest.StashKey[list]()
_sigterm_key = pytest.StashKey[object]()
_test_key = pytest.StashKey[SpecDecTest]()
_report_key = pytest.StashKey[str]()
_groups_dir_key = pytest.StashKey[str]()
_gpu_key = pytest.StashKey[tuple]()
_memory_key = pytest.StashKey[dict]()


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser):
    group = parser.getgroup("specdec", "speculative decoding regression tests (pytest-specdec)")
    for flag, kwargs in COMMAND_LINE_OPTIONS:
        group.addoption(flag, **kwargs)
    for name, help_text, kwargs in INI_KEYS:
        parser.addini(name, help_text, **kwargs)


def _resolve_settings(config) -> Settings:
    try:
        return resolve_settings(config.getoption, config.getini, config.inipath, config.rootpath)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config):
    for line in MARKER_DOCS:
        config.addinivalue_line("markers", line)
    settings = _resolve_settings(config)
    config.stash[settings_key] = settings
    if (settings.device or settings.endpoints) and getattr(config.option, "dist", "no") == "load":
        # Plain -n spreads tests one by one, so a target's servers would start
        # on several workers: schedule by target instead (xdist_scheduling.py).
        config.stash[_groups_dir_key] = tempfile.mkdtemp(prefix="specdec-xdist-groups-")
    config.stash[_ini_tolerances_key] = _ini_tolerances(config)
    tracker = _SuiteTracker()
    config.stash[_tracker_key] = tracker
    config.pluginmanager.register(tracker, "specdec-suite-tracker")
    if settings.device is not None and threading.current_thread() is threading.main_thread():
        # CI runners stop jobs with SIGTERM; turn it into an interrupt so the
        # session unwinds and the servers are stopped instead of orphaned.
        previous = signal.getsignal(signal.SIGTERM)
        if previous in (signal.SIG_DFL, None):
            config.stash[_sigterm_key] = previous
            signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if _groups_dir_key in node.config.stash:
        node.workerinput["specdec_groups_dir"] = node.config.stash[_groups_dir_key]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if _groups_dir_key not in config.stash:
        return None
    from .xdist_scheduling import TargetScheduling

    return TargetScheduling(config, log, groups_dir=config.stash[_groups_dir_key])


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"received signal {signum}")


def pytest_unconfigure(config):
    if _groups_dir_key in config.stash:
        shutil.rmtree(config.stash[_groups_dir_key], ignore_errors=True)
    pool = config.stash.get(pool_key, None)
    if pool is not None:
        pool.close()
    if _sigterm_key in config.stash:
        signal.signal(signal.SIGTERM, config.stash[_sigterm_key] or signal.SIG_DFL)


@pytest.hookimpl(trylast=True)
def pytest_specdec_server_command(launch: LaunchRequest):
    return launch.default_command()


def xdist_group_of(spec) -> str:
    """One xdist group per target (model, server args, TP): its reference server
    and every SD server measured against it run on one worker, each started once."""
    return "specdec-" + hashlib.sha256(spec.reference().key.encode()).hexdigest()[:12]


_GROUP_SUFFIX = re.compile(r"@specdec-[0-9a-f]{12}$")


def canonical_id(nodeid: str) -> str:
    """The test id without the group suffix pytest-xdist's loadgroup adds, so
    baselines and reports name a test the same with and without -n."""
    return _GROUP_SUFFIX.sub("", nodeid)


# Before xdist's own hook reads the groups (it suffixes node ids with them on workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    settings = config.stash[settings_key]
    try:
        workloads = registered(config.hook.pytest_specdec_workloads(config=config), Workload)
        patterns = registered(config.hook.pytest_specdec_access_patterns(config=config), AccessPattern)
    except TypeError as exc:
        raise pytest.UsageError(str(exc)) from None
    keys = []
    for item in items:
        plan = plan_for(item.get_closest_marker, settings, workloads, patterns)
        if plan is not None and plan.spec is not None and settings.endpoints and not plan.spec.endpoints:
            plan.spec = dataclasses.replace(plan.spec, endpoints=settings.endpoints)
        if plan is not None:
            item.stash[_plan_key] = plan
            if plan.spec is not None and not plan.error:
                item.add_marker(pytest.mark.xdist_group(xdist_group_of(plan.spec)))
                if plan.gpu_memory_mib:  # a server shared by tests needs what the most demanding asks
                    memory = config.stash.setdefault(_memory_key, {})
                    memory[plan.spec.key] = max(memory.get(plan.spec.key, 0), plan.gpu_memory_mib)
        keys.append(plan.spec.key if plan is not None and plan.spec is not None and not plan.error else None)
    items[:] = [items[index] for index in order_for_reuse(keys)]
    shard = config.getoption("specdec_shard")
    if shard is not None:
        _keep_shard(config, items, keys, *shard)
    groups_dir = getattr(config, "workerinput", {}).get("specdec_groups_dir")
    if groups_dir:
        from .xdist_scheduling import write_groups

        write_groups(groups_dir, config.workerinput["workerid"], {
            item.nodeid: xdist_group_of(item.stash[_plan_key].spec) for item in items
            if _plan_key in item.stash and item.stash[_plan_key].spec is not None and not item.stash[_plan_key].error})


def _keep_shard(config, items, keys, index: int, count: int) -> None:
    from .sharding import reference_group, select

    # Grouped by target, as under xdist: a target's reference server and its
    # SD servers start in one shard only.
    by_id = {item.nodeid: key for item, key in zip(items, keys)}
    kept = set(select(list(by_id.items()), index, count, group_of=reference_group))
    deselected = [item for item in items if item.nodeid not in kept]
    if deselected:
        config.stash[_tracker_key].shard_deselected += len(deselected)
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid in kept]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    plan = item.stash.get(_plan_key, None)
    if plan is None:
        return
    if plan.error:
        pytest.fail(plan.error, pytrace=False)
    device = item.config.stash[settings_key].device
    if not plan.spec.endpoints:  # with running endpoints, nothing is started here: no device needed
        if device is None:
            pytest.skip(SKIP_NO_DEVICE)
        if plan.spec.requires_gpu and device != "gpu":
            pytest.skip(SKIP_NEEDS_GPU)
        if device == "gpu":
            all_devices, share, workers = _gpu_share(item.config)
            reason = skip_reason(gpus_needed(plan.spec.tensor_parallel_size, plan.spec.speculative_config),
                                 share, all_devices, workers)
            if reason:
                pytest.skip(reason)
    if plan.missing_data:
        pytest.fail(plan.missing_data, pytrace=False)


def _gpu_share(config) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(the session's GPUs, this worker's share of them, how many xdist workers), found once."""
    if _gpu_key not in config.stash:
        problem = None
        try:
            config.stash[_gpu_key] = session_share(config.stash[settings_key].devices)
        except DeviceError as exc:
            problem = str(exc)
        if problem:
            pytest.fail(f"--specdec-gpu: {problem}", pytrace=False)
    return config.stash[_gpu_key]


def _gpu_memory_gate(config):
    settings = config.stash[settings_key]
    overrides = config.stash.get(_memory_key, {})
    return memory_gate(_gpu_share(config)[1], lambda spec: overrides.get(spec.key, settings.gpu_memory_mib),
                       timeout=min(120.0, settings.startup_timeout))


def _event_sink(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or config.get_verbosity() < 0:
        return None

    capture = config.pluginmanager.get_plugin("capturemanager")

    def write(message: str) -> None:
        # Servers start inside fixtures, where output is captured; a start-up
        # takes minutes, so say so on the terminal, not in the captured log.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(f"[specdec] {message}")

    return write


def _progress(config):
    """A live line on an interactive terminal; nothing extra under -q or in CI logs."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or config.get_verbosity() < 0 or not reporter.isatty or running_on_ci():
        return QuietProgress()
    capture = config.pluginmanager.get_plugin("capturemanager")

    def rewrite(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.rewrite(line, erase=True)

    return LiveProgress(rewrite, lambda: rewrite(""))


@pytest.fixture(scope="session")
def specdec_pool(request, tmp_path_factory) -> ServerPool:
    """The session's servers: one at a time, reused by configuration."""
    config = request.config
    settings = config.stash[settings_key]
    if settings.device is None and not _endpoint_tests(config):
        pytest.skip(SKIP_NO_DEVICE)
    pool = config.stash.get(pool_key, None)
    if pool is None:
        gpu = settings.device == "gpu"
        pool = ServerPool(
            settings.device or "none",
            settings.log_dir or tmp_path_factory.getbasetemp() / "specdec-servers",
            launcher=lambda launch: config.hook.pytest_specdec_server_command(launch=launch),
            kv_cache_bytes=settings.kv_cache_bytes,
            startup_timeout=settings.startup_timeout,
            env={"CUDA_VISIBLE_DEVICES": cuda_visible_devices(_gpu_share(config)[1])} if gpu else None,
            on_event=_event_sink(config),
            before_start=_gpu_memory_gate(config) if gpu else None,
        )
        config.stash[pool_key] = pool
    yield pool
    pool.close()


def _endpoint_tests(config) -> bool:
    return any(plan.spec.endpoints for plan in config.stash.get(_planned_key, []))


@pytest.fixture
def vllm_server(request, specdec_pool):
    """Factory for a raw server: ``vllm_server(model=..., speculative_config=...)``.

    Takes the same arguments as ``@pytest.mark.specdec``; returns a ready
    `VllmServer` (``.url``, ``.metrics()``, ``.log_path``), shared with every
    other test that asks for the same configuration.
    """
    extra_methods = request.config.stash[settings_key].extra_methods

    def start(**fields) -> VllmServer:
        spec = parse_specdec_marker((), fields, extra_methods=extra_methods, origin=request.node.nodeid)
        if spec.requires_gpu and specdec_pool.device != "gpu":
            pytest.skip(SKIP_NEEDS_GPU)
        return specdec_pool.get(spec)

    start.__doc__ = f"Start or reuse a server; fields: {', '.join(MARKER_FIELDS)}."
    return start


@pytest.fixture(scope="session")
def specdec_measurements(request, specdec_pool, tmp_path_factory) -> Measurements:
    """The session's measuring state: prompts, tokenizers, shared reference runs."""
    config = request.config
    measurements = config.stash.get(measurements_key, None)
    if measurements is None:
        measurements = Measurements(
            specdec_pool,
            tmp_path_factory.getbasetemp() / "specdec",
            repeats=config.stash[settings_key].repeats,
            on_event=specdec_pool.on_event,
            progress=_progress(config),
        )
        config.stash[measurements_key] = measurements
        device = config.stash[settings_key].device
        for plan in config.stash.get(_planned_key, []):
            runnable = device == "gpu" or not plan.spec.requires_gpu
            if runnable and plan.workload and plan.pattern and plan.spec.speculative_config:
                measurements.plan_reference(plan.spec, plan.workload, plan.pattern)
    return measurements


def pytest_collection_finish(session):
    session.config.stash[_planned_key] = [
        plan for item in session.items if (plan := item.stash.get(_plan_key, None)) and not plan.error
    ]


@pytest.fixture
def specdec(request, specdec_measurements, specdec_baselines) -> SpecDecTest:
    """The test's speculative configuration and traffic (from its markers), and ``run()``."""
    plan = request.node.stash.get(_plan_key, None)
    if plan is None:
        pytest.fail("the specdec fixture needs @pytest.mark.specdec(model=..., speculative_config=...)", pytrace=False)
    gate = RegressionGate(specdec_baselines, canonical_id(request.node.nodeid), plan.tolerances)
    test = SpecDecTest(plan.spec, specdec_measurements, plan.workload, plan.pattern, gate=gate)
    request.node.stash[_test_key] = test
    yield test
    for result in test.results[-1:]:
        for key, value in junit_properties(result).items():
            request.node.user_properties.append((key, value))
        benchmark_entry(request, result)


@pytest.fixture(scope="session")
def specdec_baselines(request) -> BaselineSession:
    """The session's stored baselines: what tests used and what to write at the end."""
    config = request.config
    session = config.stash.get(baselines_key, None)
    if session is None:
        from .fingerprint import collect_fingerprint

        settings = config.stash[settings_key]
        session = BaselineSession(
            base_dir=_baseline_dir(config),
            update=config.getoption("specdec_update_baselines"),
            fingerprint=config.hook.pytest_specdec_fingerprint(
                config=config, fingerprint=collect_fingerprint(settings.device or "cpu")
            ),
            ini_tolerances=config.stash[_ini_tolerances_key],
        )
        config.stash[baselines_key] = session
    return session


def _baseline_dir(config) -> Path:
    option = config.getoption("specdec_baseline_dir")
    if option:
        return Path(option).resolve()
    return (config.rootpath / config.getini("specdec_baseline_dir")).resolve()


def _ini_tolerances(config):
    try:
        return parse_tolerance_lines(config.getini("specdec_tolerances"))
    except ValueError as exc:
        raise pytest.UsageError(f"ini setting specdec_tolerances: {exc}") from None


@pytest.hookimpl(trylast=True)
def pytest_specdec_fingerprint(config, fingerprint):
    return fingerprint


@pytest.hookimpl(trylast=True)
def pytest_specdec_results(config, rows, report_dir):
    return None  # the report files are written by the plugin itself


_stale_key = pytest.StashKey[list]()
_ini_tolerances_key = pytest.StashKey[object]()


class _SuiteTracker:
    """Which tests this session has: every collected test reports at least its
    setup, here or (under xdist) on the controller; stale baselines are the
    ones no such test owns."""

    def __init__(self):
        self.seen: set[str] = set()
        self.deselected = 0
        self.shard_deselected = 0  # left to other shards by --specdec-shard
        self.rows: list[dict] = []

    def pytest_deselected(self, items):
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report):
        self.seen.add(canonical_id(report.nodeid))
        # Rows ride on the report, so under xdist they reach the controller.
        self.rows.extend(getattr(report, "specdec_rows", None) or ())


_tracker_key = pytest.StashKey[_SuiteTracker]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    plan = item.stash.get(_plan_key, None)
    if plan is None or plan.spec is None or plan.error or report.skipped:
        return report
    if report.when == "call" or (report.when == "setup" and report.failed):
        report.specdec_rows = _rows_for(item, plan, "error" if report.when == "setup" else report.outcome)
    return report


def _rows_for(item, plan, outcome: str) -> list[dict]:
    pool = item.config.stash.get(pool_key, None)
    return rows_for_test(canonical_id(item.nodeid), plan, item.stash.get(_test_key, None), outcome,
                         resolve=pool.model_resolver if pool else None,
                         gpu_usd_per_hour=item.config.stash[settings_key].gpu_usd_per_hour)


def _write_report(config, tracker, complete: bool) -> None:
    rows = tracker.rows
    report_dir = config.stash[settings_key].report_dir
    config.hook.pytest_specdec_results(config=config, rows=rows, report_dir=report_dir)
    if report_dir is None:
        return
    recorded = {row["test"] for row in rows if row["regression"] == "recorded"}
    baseline_files = [path for test_id, path in list_baselines(_baseline_dir(config)).items() if test_id in recorded]
    try:
        written = write_report(report_dir, rows, _fingerprint(config))
        written += write_shard_files(report_dir, tracker.seen, complete, baseline_files)
        summary = append_step_summary(markdown_summary(rows))
    except (ReportError, OSError) as exc:
        config.stash[_report_key] = f"ERROR: could not write the report: {exc}"
        return
    config.stash[_report_key] = f"written {len(written)} files to {report_dir}" + (
        f"; summary appended to {summary}" if summary else "")


def _fingerprint(config) -> dict:
    baselines = config.stash.get(baselines_key, None)
    if baselines is not None:
        return baselines.fingerprint
    from .fingerprint import collect_fingerprint  # the xdist controller measured nothing itself

    device = config.stash[settings_key].device or "cpu"
    return config.hook.pytest_specdec_fingerprint(config=config, fingerprint=collect_fingerprint(device))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    baselines = config.stash.get(baselines_key, None)
    if baselines is not None:
        baselines.flush()
    tracker = config.stash.get(_tracker_key, None)
    if tracker is None or hasattr(config, "workerinput"):
        return  # the controller reports and decides about stale baselines
    finished = (not session.shouldstop and not session.shouldfail
                and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED))
    if config.stash[settings_key].device is not None or tracker.rows:
        # A shard ran all it was given unless a -k/-m deselection or a stop cut it short.
        _write_report(config, tracker, finished and tracker.deselected == tracker.shard_deselected)
    ran_everything = (
        config.args_source != pytest.Config.ArgsSource.ARGS
        and not tracker.deselected
        and finished
    )
    if not ran_everything:
        return
    roots = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    stale = unused_baselines_under(_baseline_dir(config), tracker.seen, roots, config.rootpath)
    if stale and config.getoption("specdec_update_baselines"):
        remove_baselines(stale)
    config.stash[_stale_key] = stale


def pytest_terminal_summary(terminalreporter, config):
    tracker = config.stash.get(_tracker_key, None)
    if tracker is not None and tracker.rows:
        terminalreporter.section("specdec results")
        for line in terminal_table(tracker.rows):
            terminalreporter.write_line(line)
    if _report_key in config.stash:
        terminalreporter.write_line(f"report: {config.stash[_report_key]}",
                                    red=config.stash[_report_key].startswith("ERROR"))
    _baseline_summary(terminalreporter, config)
    pool = config.stash.get(pool_key, None)
    if pool is None or not pool.history:
        return
    terminalreporter.section("specdec servers")
    for record in pool.history:
        if record.error:
            outcome = f"FAILED: {record.error}"
        elif record.startup_seconds is None:
            outcome = "interrupted"
        else:
            outcome = f"ready in {record.startup_seconds:.1f} s"
        terminalreporter.write_line(f"{record.spec.label()}: {outcome}; log {record.log_path}")


def _baseline_summary(terminalreporter, config):
    baselines = config.stash.get(baselines_key, None)
    stale = config.stash.get(_stale_key, [])
    written = baselines.written if baselines is not None else []
    if not written and not stale:
        return
    terminalreporter.section("specdec baselines")
    for path in written:
        terminalreporter.write_line(f"written: {path}")
    updating = config.getoption("specdec_update_baselines")
    for path in stale:
        verb = "deleted stale baseline" if updating else "stale baseline (no test uses it; --specdec-update-baselines deletes it)"
        terminalreporter.write_line(f"{verb}: {path}")
