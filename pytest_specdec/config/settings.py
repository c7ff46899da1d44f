"""Command-line and ini values resolved once into the frozen `Settings` of a session.

What each option and ini key is, and how its value is checked, is `options`;
this module reads them (the flag, else its deprecated spelling, else the ini,
else the default) and resolves paths against the ini's folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..deprecation import SpecdecDeprecationWarning  # noqa: F401 - re-exported (plugin.py, users)
from ..serving.endpoint import ROLES
from ..serving.pool import DEFAULT_KV_CACHE_BYTES
from ..load.workloads import data_path_env_var
from ..history.options import HistorySettings, resolve_history_settings
from ..engines.server_spec import DEFAULT_ENGINE
from ..verdict.sequential.rule import FALSE_FAIL, FALSE_PASS, MAX_RUNS, MIN_RUNS
from .units import AUTO_REPEATS, parse_rate

from .options import (  # re-exported: the converters and tables lived here
    _data_workloads,
    COMMAND_LINE_OPTIONS,
    DEFAULT_MAX_DISPATCH_LAG_MS,
    DEFAULT_PARKED_SERVERS,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERIES_INTERVAL_S,
    DEFAULT_STARTUP_TIMEOUT,
    DEPRECATED_FLAGS,
    INI_KEYS,
    parse_byte_size,
    parse_count,
    parse_drift_check,
    parse_engine,
    parse_ini,
    parse_interval,
    parse_milliseconds,
    parse_percentile,
    parse_positive_int,
    parse_repeats,
    parse_price,
    parse_seconds,
)

__all__ = [
    "COMMAND_LINE_OPTIONS",
    "DEFAULT_MAX_DISPATCH_LAG_MS",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_STARTUP_TIMEOUT",
    "DEPRECATED_FLAGS",
    "INI_KEYS",
    "parse_byte_size",
    "parse_drift_check",
    "parse_engine",
    "parse_ini",
    "parse_milliseconds",
    "parse_percentile",
    "parse_positive_int",
    "parse_price",
    "parse_seconds",
    "resolve_settings",
    "Settings",
    "SpecdecDeprecationWarning",
]


@dataclass(frozen=True)
class Settings:
    """The plugin's configuration for one session, resolved once from the command line and ini."""

    device: str | None  # "gpu", "cpu" or None (specdec tests skipped)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_dispatch_lag_ms: float = DEFAULT_MAX_DISPATCH_LAG_MS
    series_interval_s: float = DEFAULT_SERIES_INTERVAL_S  # reads of each server's metrics during a run; 0: none
    cpu_kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES
    cpu_parked_servers: int = DEFAULT_PARKED_SERVERS  # serving.pool: paused instead of stopped, on a CPU only
    log_dir: Path | None = None  # None: under pytest's basetemp
    extra_methods: tuple[str, ...] = ()
    engine: str = DEFAULT_ENGINE  # ini specdec_engine: the engine of markers that name none
    repeats: int = MIN_RUNS  # draws of each workload measured a side, all kept (--specdec-repeats N, or auto's)
    # --specdec-repeats auto: each check sends the draws again until it is decided, up to `max_repeats` runs
    # a side (verdict.sequential); False: exactly `repeats` runs, and a check undecided on them says so.
    sequential: bool = True
    max_repeats: int = MAX_RUNS
    client_workers: int = 1  # processes the load client spreads each run over
    data_paths: tuple[tuple[str, str], ...] = ()  # data-file workload name -> path (env, then ini)
    report_dir: Path | None = None  # --specdec-report: results.json, CSV, Markdown, plots
    gpu_usd_per_hour: float | None = None  # prices cost per 1M output tokens in reports
    endpoints: tuple[tuple[str, str], ...] = ()  # --specdec-endpoint: running servers for every test
    devices: tuple[int, ...] = ()  # --specdec-devices; empty: what nvidia-smi lists
    gpu_memory_mib: int | None = None  # free memory a GPU needs before a server starts (None: 90% of it)
    baseline_dir: Path = Path("baselines")  # resolved: the option, else the ini under the rootdir
    update_baselines: bool = False
    strict: bool = False  # --specdec-strict: a baseline check that compared nothing fails
    # --specdec-measure-drift: each test's servers started once more, their spread the gate's drift (measure.start_drift)
    measure_drift: bool = False
    # Each timing check's error rates, and a budget for any false fail in the whole session (None: none):
    # verdict.alarm_budget.
    false_fail: float = FALSE_FAIL
    false_pass: float = FALSE_PASS
    session_false_fail: float | None = None
    tolerances: Any = field(default_factory=dict)  # specdec_tolerances ini: a fraction or {metric: fraction}
    shard: tuple[int, int] | None = None  # --specdec-shard I/N
    # Service-level objectives for goodput and capacity searches ({"tpot": ms, "ttft_x": multiple, ...}),
    # and the percentile of each metric that must meet them; a test's @pytest.mark.specdec_slo wins.
    slo: tuple[tuple[str, float], ...] = ()
    slo_percentile: float = 99.0
    deprecations: tuple[str, ...] = ()  # old spellings used, for the plugin to warn about
    # Measure each reference traffic again at the session's end and flag the results it moved under.
    drift_check: bool = False
    history: HistorySettings = field(default_factory=HistorySettings)  # --specdec-history and its check
    build: str | None = None  # --specdec-build: the engine build this session tests (None: this environment's)
    terminal_width: int | None = None  # the results table's width: the terminal's, None when not known (a log)
    full_table: bool = False  # -v: every column of the report's table on the terminal too


def terminal_width(environ: Mapping[str, str] = os.environ) -> int | None:
    """The terminal's width where stdout is a terminal (COLUMNS when set, as pytest reads it, else the
    terminal's own); None in a log or a captured session, where the table keeps to a width every viewer shows."""
    try:
        if not sys.__stdout__.isatty():
            return None
        columns = environ.get("COLUMNS", "")
        return (
            int(columns)
            if columns.isdigit() and int(columns) > 0
            else os.get_terminal_size(sys.__stdout__.fileno()).columns
        )
    except (AttributeError, OSError, ValueError):
        return None


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _option_or_ini(getoption, getini, flag: str, ini: str, parser, default, deprecations: list[str]):
    """The flag's value (or its deprecated spelling's), else the ini's, else `default`."""
    value = getoption(_dest(flag))
    for old, new in DEPRECATED_FLAGS.items():
        if new == flag and value is None and getoption(_dest(old)) is not None:
            value = getoption(_dest(old))
            deprecations.append(f"{old} is deprecated: use {new} (same value; ini {ini})")
    if value is None:
        raw = getini(ini)
        value = parse_ini(ini, raw, parser) if raw else default
    return value


def resolve_settings(
    getoption, getini, inipath: Path | None, rootpath: Path, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The session's Settings from pytest's ``config.getoption`` / ``config.getini``; ValueError names the flag or key."""
    from ..verdict.tolerances import parse_tolerance_lines

    gpu, cpu = getoption("specdec_gpu"), getoption("specdec_cpu")
    if gpu and cpu:
        raise ValueError("--specdec-gpu and --specdec-cpu are mutually exclusive: choose one device")
    report_dir = getoption("specdec_report")
    if report_dir is not None:
        report_dir = Path(report_dir).resolve()
        if report_dir.exists() and not report_dir.is_dir():
            raise ValueError(f"--specdec-report {report_dir}: exists and is not a directory")
    log_dir = getoption("specdec_log_dir")
    endpoints = dict(getoption("specdec_endpoint") or ())
    missing = [role for role in ROLES if role not in endpoints]
    if endpoints and missing:
        raise ValueError(f"--specdec-endpoint: give both reference=URL and speculative=URL; missing {missing[0]}")
    baseline_dir = getoption("specdec_baseline_dir")
    try:
        tolerances = parse_tolerance_lines(getini("specdec_tolerances"))
    except ValueError as exc:
        raise ValueError(f"ini setting specdec_tolerances: {exc}") from None
    deprecations: list[str] = []
    repeats = _option_or_ini(
        getoption, getini, "--specdec-repeats", "specdec_repeats", parse_repeats, AUTO_REPEATS, deprecations
    )
    repeats = None if repeats == AUTO_REPEATS else repeats  # None: auto
    max_repeats = _option_or_ini(
        getoption, getini, "--specdec-max-repeats", "specdec_max_repeats", parse_positive_int, MAX_RUNS, deprecations
    )
    if repeats is None and max_repeats < MIN_RUNS:
        raise ValueError(
            f"--specdec-max-repeats {max_repeats} is below the {MIN_RUNS} draws --specdec-repeats auto measures "
            f"first: give at least {MIN_RUNS}, or a fixed --specdec-repeats N"
        )
    false_fail, false_pass = (
        _option_or_ini(
            getoption,
            getini,
            f"--specdec-{side}",
            f"specdec_{side.replace('-', '_')}",
            parse_rate,
            default,
            deprecations,
        )
        for side, default in (("false-fail", FALSE_FAIL), ("false-pass", FALSE_PASS))
    )
    session_false_fail = _option_or_ini(
        getoption, getini, "--specdec-session-false-fail", "specdec_session_false_fail", parse_rate, None, deprecations
    )
    slo = _slo_from_ini(getini("specdec_slo"))
    slo_percentile = (
        parse_ini("specdec_slo_percentile", getini("specdec_slo_percentile"), parse_percentile)
        if getini("specdec_slo_percentile")
        else 99.0
    )
    history = resolve_history_settings(getoption, getini, rootpath)
    if history.baseline_from == "history" and getoption("specdec_update_baselines"):
        raise ValueError(
            "--specdec-update-baselines writes baseline files; with --specdec-baseline-from history "
            "the history is the baseline (every session recorded with --specdec-history adds to it)"
        )
    if history.baseline_build and getoption("specdec_update_baselines"):
        raise ValueError(
            "--specdec-update-baselines writes baseline files; with --specdec-baseline-from build:PATH the "
            "baseline build, measured in this session, is the baseline"
        )
    return Settings(
        terminal_width=terminal_width(environ),
        full_table=(getoption("verbose") or 0) > 0,
        history=history,
        build=getoption("specdec_build"),
        device="gpu" if gpu else "cpu" if cpu else None,
        startup_timeout=_option_or_ini(
            getoption,
            getini,
            "--specdec-startup-timeout",
            "specdec_startup_timeout",
            parse_seconds,
            DEFAULT_STARTUP_TIMEOUT,
            deprecations,
        ),
        request_timeout=_option_or_ini(
            getoption,
            getini,
            "--specdec-request-timeout",
            "specdec_request_timeout",
            parse_seconds,
            DEFAULT_REQUEST_TIMEOUT,
            deprecations,
        ),
        max_dispatch_lag_ms=_option_or_ini(
            getoption,
            getini,
            "--specdec-max-dispatch-lag-ms",
            "specdec_max_dispatch_lag_ms",
            parse_milliseconds,
            DEFAULT_MAX_DISPATCH_LAG_MS,
            deprecations,
        ),
        series_interval_s=_option_or_ini(
            getoption,
            getini,
            "--specdec-series-interval",
            "specdec_series_interval",
            parse_interval,
            DEFAULT_SERIES_INTERVAL_S,
            deprecations,
        ),
        cpu_kv_cache_bytes=_option_or_ini(
            getoption,
            getini,
            "--specdec-cpu-kv-cache-bytes",
            "specdec_cpu_kv_cache_bytes",
            parse_byte_size,
            DEFAULT_KV_CACHE_BYTES,
            deprecations,
        ),
        cpu_parked_servers=_option_or_ini(
            getoption,
            getini,
            "--specdec-cpu-parked-servers",
            "specdec_cpu_parked_servers",
            parse_count,
            DEFAULT_PARKED_SERVERS,
            deprecations,
        ),
        log_dir=Path(log_dir).resolve() if log_dir else None,
        extra_methods=tuple(getini("specdec_extra_methods")),
        engine=parse_ini("specdec_engine", getini("specdec_engine"), parse_engine)
        if getini("specdec_engine")
        else DEFAULT_ENGINE,
        repeats=MIN_RUNS if repeats is None else repeats,
        sequential=repeats is None,
        max_repeats=max_repeats if repeats is None else repeats,
        client_workers=_option_or_ini(
            getoption, getini, "--specdec-client-workers", "specdec_client_workers", parse_positive_int, 1, deprecations
        ),
        data_paths=tuple(_data_paths(getini, inipath, rootpath, environ).items()),
        report_dir=report_dir,
        gpu_usd_per_hour=_option_or_ini(
            getoption, getini, "--specdec-gpu-usd-per-hour", "specdec_gpu_usd_per_hour", parse_price, None, deprecations
        ),
        endpoints=tuple((role, endpoints[role]) for role in ROLES if role in endpoints),
        devices=getoption("specdec_devices") or (),
        gpu_memory_mib=parse_ini("specdec_gpu_memory_mib", getini("specdec_gpu_memory_mib"), parse_positive_int)
        if getini("specdec_gpu_memory_mib")
        else None,
        baseline_dir=(
            Path(baseline_dir) if baseline_dir else Path(rootpath) / getini("specdec_baseline_dir")
        ).resolve(),
        update_baselines=bool(getoption("specdec_update_baselines")),
        strict=bool(getoption("specdec_strict") or getini("specdec_strict")),
        measure_drift=bool(getoption("specdec_measure_drift") or getini("specdec_measure_drift")),
        false_fail=false_fail,
        false_pass=false_pass,
        session_false_fail=session_false_fail,
        tolerances=tolerances,
        shard=getoption("specdec_shard"),
        slo=tuple(slo.items()),
        slo_percentile=slo_percentile,
        deprecations=tuple(deprecations),
        drift_check={"on": True, "off": False}.get(
            _option_or_ini(
                getoption,
                getini,
                "--specdec-drift-check",
                "specdec_drift_check",
                parse_drift_check,
                "auto",
                deprecations,
            ),
            bool(gpu),
        ),
    )


def _slo_from_ini(raw: str) -> dict[str, float]:
    if not raw or not raw.strip():
        return {}
    from ..analysis.goodput import parse_objectives

    try:
        return parse_objectives(raw)
    except ValueError as exc:
        raise ValueError(f"ini setting specdec_slo: {exc}") from None


def _data_paths(getini, inipath: Path | None, rootpath: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Data-file workload paths: the environment wins over the ini (relative to the ini's folder)."""
    paths = {}
    for name in _data_workloads():
        from_env = environ.get(data_path_env_var(name))
        from_ini = getini(f"specdec_{name}_path")
        if from_env:
            paths[name] = str(Path(from_env).resolve())
        elif from_ini:
            base = inipath.parent if inipath else rootpath
            paths[name] = str((base / from_ini).resolve())
    return paths
