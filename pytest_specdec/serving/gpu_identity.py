"""The GPUs the servers run on, read through NVML: what the regression gate calls a GPU's identity.

nvidia-smi's name, count and driver said too little (issue 47): a 350 W cap on a 700 W H100, clocks locked low
and a MIG slice all print the GPU's own name, and the fingerprint read GPU 0 whatever ``CUDA_VISIBLE_DEVICES``
gave the servers.  Here each device the servers see (their ``CUDA_VISIBLE_DEVICES`` entries: indices in PCI bus
order, as serving.gpus sets them, or ``GPU-``/``MIG-`` UUIDs) is opened through NVML, by index or by UUID, and
described by:

- what the gate compares (`IDENTITY_KEYS`): name, memory, enforced power limit, application and max clocks,
  MIG profile, ECC mode;
- what it records for the reader: UUID, index, default power limit;
- the software beside it (`system_fields`): the driver and the CUDA version it supports, a change of which
  alone, with the GPU probe unchanged, leaves the machine the same (verdict.machine).

MIG: a MIG device's handle answers name, UUID, memory and attributes (its slices); power limit, clocks and ECC
are its parent GPU's (NVML answers Not Supported on the slice), so they are read from
``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``.  Nothing here raises: an unreadable field is None, and a
machine without NVML gets the reason instead.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

NVML_MODULE = "pynvml"  # what nvidia-ml-py installs (serving.energy reads it too)
# NVML's enums, as nvidia-ml-py numbers them: fixed by the C API, so no import is needed to name them.
_CLOCK_GRAPHICS, _CLOCK_MEM = 0, 2
# The fields a change of which makes another machine (verdict.machine), in the order messages name them.
IDENTITY_KEYS = (
    "name",
    "mig_profile",
    "memory_mib",
    "power_limit_w",
    "application_clocks_mhz",
    "max_clocks_mhz",
    "ecc",
)
KEY_LABELS = {
    "name": "name",
    "mig_profile": "MIG profile",
    "memory_mib": "memory (MiB)",
    "power_limit_w": "power limit (W)",
    "application_clocks_mhz": "application clocks (graphics, memory MHz)",
    "max_clocks_mhz": "max clocks (graphics, memory MHz)",
    "ecc": "ECC mode",
}


def _call(nvml: Any, function: str, *args: Any) -> Any:
    """One NVML query, None where this driver or device does not answer it (a MIG slice, an old GPU)."""
    try:
        value = getattr(nvml, function)(*args)
    except Exception:  # pynvml.NVMLError_NotSupported and kin: the field is unknown, the rest still reads
        return None
    return value.decode() if isinstance(value, bytes) else value


def _handle(nvml: Any, entry: str) -> Any:
    """The device a ``CUDA_VISIBLE_DEVICES`` entry names: NVML numbers GPUs by PCI bus, as the servers are
    told to (serving.gpus.DEVICE_ORDER), so an index opens the same GPU; a UUID (GPU- or MIG-) opens itself."""
    entry = str(entry).strip()
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def _mig_profile(nvml: Any, handle: Any, name: str | None) -> str | None:
    """A slice's profile as nvidia-smi names it ("1g.10gb"): the tail of its NVML name on current drivers,
    else built from its attributes (slices, memory)."""
    if name and " MIG " in name:
        return name.rsplit(" MIG ", 1)[1].strip()
    attributes = _call(nvml, "nvmlDeviceGetAttributes", handle)
    if attributes is None:
        return "MIG (profile unknown)"
    return f"{attributes.gpuInstanceSliceCount}g.{round(attributes.memorySizeMB / 1024)}gb"


def describe_device(nvml: Any, entry: str) -> dict[str, Any]:
    """One device the servers see, by its ``CUDA_VISIBLE_DEVICES`` entry (raises when NVML cannot open it)."""
    handle = _handle(nvml, entry)
    # nvidia-ml-py answers a ctypes c_uint here, not an int.
    is_mig = bool(getattr(flag := _call(nvml, "nvmlDeviceIsMigDeviceHandle", handle), "value", flag))
    parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if is_mig else handle
    name = _call(nvml, "nvmlDeviceGetName", handle)
    memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    enforced_mw = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", parent)
    default_mw = _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", parent)
    ecc = _call(nvml, "nvmlDeviceGetEccMode", parent)
    return {
        "uuid": _call(nvml, "nvmlDeviceGetUUID", handle),
        "index": _call(nvml, "nvmlDeviceGetIndex", parent),
        "name": name.rsplit(" MIG ", 1)[0] if name else name,
        "mig_profile": _mig_profile(nvml, handle, name) if is_mig else None,
        "memory_mib": memory.total // 2**20 if memory is not None else None,
        "power_limit_w": round(enforced_mw / 1000, 1) if enforced_mw is not None else None,
        "default_power_limit_w": round(default_mw / 1000, 1) if default_mw is not None else None,
        "application_clocks_mhz": _clock_pair(nvml, "nvmlDeviceGetApplicationsClock", parent),
        "max_clocks_mhz": _clock_pair(nvml, "nvmlDeviceGetMaxClockInfo", parent),
        "ecc": bool(ecc[0]) if ecc is not None else None,  # the current mode; [1] is the one after a reset
    }


def _clock_pair(nvml: Any, function: str, handle: Any) -> list[int | None] | None:
    pair = [_call(nvml, function, handle, _CLOCK_GRAPHICS), _call(nvml, function, handle, _CLOCK_MEM)]
    return None if pair == [None, None] else pair


def system_fields(nvml: Any) -> dict[str, Any]:
    """The driver and the CUDA version it supports ("12.8"): software, named beside the identity."""
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    return {
        "driver": _call(nvml, "nvmlSystemGetDriverVersion"),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
    }


def read_server_gpus(devices: Sequence[str], module: str = NVML_MODULE) -> tuple[list[dict], dict] | str:
    """(each server device's description, the system's driver fields), or why NVML could not say."""
    try:
        nvml = importlib.import_module(module)
    except ImportError:
        return "NVML: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return f"NVML: {exc}"
    try:
        return [describe_device(nvml, entry) for entry in devices], system_fields(nvml)
    except Exception as exc:  # a device NVML cannot open: the fingerprint says so rather than guessing
        return f"NVML: {exc}"
    finally:
        _call(nvml, "nvmlShutdown")


def identity_of(gpu: dict[str, Any]) -> dict[str, Any]:
    """The compared part of one device's description (fields an older session did not read are absent)."""
    return {key: gpu.get(key) for key in IDENTITY_KEYS if key in gpu}
