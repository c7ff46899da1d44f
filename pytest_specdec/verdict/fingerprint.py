"""The environment a measurement was made in, and whether two are comparable.

Absolute numbers (tok/s, ms) only mean something next to others taken on the
same engine build, hardware, driver and torch; ratios such as speedup travel
better. The fingerprint records enough to tell the two cases apart.

Versions come from installed distributions' metadata: importing vllm or
torch here would cost seconds and break installs without them.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ..engines import engine_named
from ..engines.server_spec import DEFAULT_ENGINE

# Fields that must match for absolute numbers to be comparable. plugin_version
# and python are recorded for the reader but do not change what is measured.
# The hardware part says which machine ran a measurement (verdict.machine); the rest, which software.
HARDWARE_FIELDS = ("device_kind", "device_name", "device_count", "driver")
KEY_FIELDS = ("engine", "engine_version", *HARDWARE_FIELDS, "torch_version")
# Where the session keeps its machine probe (verdict.machine.run_probe): a timing, so never part of a key.
PROBE_FIELD = "machine_probe"
# A GPU session's servers' devices as NVML describes them (serving.gpu_identity), the CUDA version the driver
# supports, why NVML could not say, and the probe timed on the GPU (serving.gpu_probe).  verdict.machine compares
# them itself, by rules of their own (a driver change is software), so they are no key's and no hook's fields;
# a fingerprint without them (a CPU session, a baseline from before them) keeps the key it always had.
GPUS_FIELD = "gpus"
GPU_PROBE_FIELD = "gpu_probe"
GPU_FIELDS = (GPUS_FIELD, "cuda_driver", "gpu_identity_unavailable", GPU_PROBE_FIELD)
INFORMATIONAL_FIELDS = ("plugin_version", "python", PROBE_FIELD, "engine_build", *GPU_FIELDS)


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _gpu_fields(run=None, devices=None, nvml_module=None) -> dict[str, Any]:
    """nvidia-smi's name, count and driver of the servers' GPUs (`devices`: their CUDA_VISIBLE_DEVICES entries;
    None: the session's own), and NVML's description of each (serving.gpu_identity) where it can be read."""
    from ..serving.gpu_identity import NVML_MODULE, read_server_gpus
    from ..serving.gpus import DeviceError, list_gpus, visible_devices

    # The servers' devices, not the session's GPU 0: on a node with an A100 and an H100, servers on the H100
    # were recorded as the A100 (issue 47).
    environ = os.environ if devices is None else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}
    try:
        gpus, count = list_gpus(run, environ) if run is not None else list_gpus(environ=environ)
    except DeviceError:  # no nvidia-smi: a fingerprint that says so, not a failure
        gpus, count = [], 0
    fields: dict[str, Any] = {
        "device_name": gpus[0].name if gpus and count else "unknown",
        "device_count": count,
        "driver": gpus[0].driver if gpus and count else None,
    }
    entries = [str(d) for d in devices] if devices is not None else visible_devices(environ)
    if entries is None:
        entries = [str(gpu.index) for gpu in gpus]
    read = read_server_gpus(entries, nvml_module or NVML_MODULE) if entries else "no GPU is visible to the servers"
    if isinstance(read, str):
        return {**fields, "gpu_identity_unavailable": read}
    described, system = read
    fields[GPUS_FIELD] = described
    fields["cuda_driver"] = system["cuda_driver"]
    fields["driver"] = system["driver"] or fields["driver"]
    if described and described[0].get("name"):  # NVML opens UUID entries too, which nvidia-smi's rows cannot map
        fields["device_name"], fields["device_count"] = described[0]["name"], len(described)
    return fields


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    # Not Linux, or an ARM kernel that prints no model name.
    return platform.processor() or platform.machine() or "unknown"


def collect_fingerprint(device: str, *, nvidia_smi=None, devices=None, nvml_module=None) -> dict[str, Any]:
    """Describe this machine's engine, hardware and library versions for `device` ("gpu"/"cpu").

    `devices` are the servers' CUDA_VISIBLE_DEVICES entries (None: the session's); `nvidia_smi` replaces the
    call to nvidia-smi and `nvml_module` names the NVML module to import (for tests).
    """
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device must be 'gpu' or 'cpu', got {device!r}")
    engine, engine_version = engine_named(DEFAULT_ENGINE).installed_build(device)
    if device == "gpu":
        hardware = _gpu_fields(nvidia_smi, devices, nvml_module)
    else:
        hardware = {"device_name": _cpu_model_name(), "device_count": os.cpu_count() or 1, "driver": None}
    return {
        "engine": engine,
        "engine_version": engine_version,
        "device_kind": device,
        **hardware,
        "torch_version": _dist_version("torch"),
        "plugin_version": _dist_version("pytest-specdec"),
        "python": platform.python_version(),
    }


def comparable_fields(fp: dict[str, Any], extra_keys=None) -> dict[str, Any]:
    """The part of `fp` that must match; extra (hook-added) keys default to all present."""
    fields = {key: fp.get(key) for key in KEY_FIELDS}
    if extra_keys is None:
        extra_keys = set(fp) - set(KEY_FIELDS) - set(INFORMATIONAL_FIELDS)
    for key in sorted(extra_keys):
        fields[key] = fp.get(key)
    return fields


def fingerprint_key(fp: dict[str, Any], extra_keys=None) -> str:
    """Canonical string of the comparable fields; equal keys mean comparable numbers.

    It is readable JSON rather than a hash so a mismatch can be read off it.
    """
    return json.dumps(comparable_fields(fp, extra_keys), sort_keys=True, separators=(",", ":"), default=str)


def shared_extra_keys(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    # A hook-added field counts only when both sides have it: a baseline
    # recorded before the hook existed should not be declared foreign for it.
    ignored = set(KEY_FIELDS) | set(INFORMATIONAL_FIELDS)
    return (set(a) & set(b)) - ignored


def same_environment(a: dict[str, Any], b: dict[str, Any]) -> bool:
    extra = shared_extra_keys(a, b)
    return fingerprint_key(a, extra) == fingerprint_key(b, extra)


def fingerprint_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Comparable fields that differ, as ``{field: (a_value, b_value)}``, for messages."""
    extra = shared_extra_keys(a, b)
    fa, fb = comparable_fields(a, extra), comparable_fields(b, extra)
    return {key: (fa[key], fb[key]) for key in fa if fa[key] != fb[key]}


# --- the reference's decode step: the engine's speed, shown beside the machine's identity (verdict.machine) ---


def reference_step_ms(repeats: list[dict]) -> float | None:
    """The reference's decode step (median TPOT, median over repeats), or None where none was timed."""
    values = [
        v
        for entry in repeats
        if isinstance(v := (entry.get("reference") or {}).get("median_tpot_ms"), (int, float))
        and math.isfinite(v)
        and v > 0
    ]
    return statistics.median(values) if values else None
