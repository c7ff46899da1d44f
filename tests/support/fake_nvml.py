"""A pynvml stand-in as strict as nvidia-ml-py where the plugin's reads depend on it (this machine has no GPU).

- nvmlInit first, or every call raises "Uninitialized"; nvmlShutdown ends it.
- Handles only from nvmlDeviceGetHandleByIndex (an int in range, PCI bus order) or ByUUID (a GPU- or MIG- UUID
  that exists, else "Not Found"); anything else passed as a handle is "Invalid Argument".
- A MIG device's handle answers what NVML answers on a slice (name with its profile, UUID, memory, attributes,
  whether it is one, its parent); power, clocks, ECC and energy on it are "Not Supported", as on real slices.
- nvmlDeviceIsMigDeviceHandle answers a ctypes c_uint, as nvidia-ml-py does; clock types are NVML's numbers.
"""

from __future__ import annotations

import ctypes
import sys
import types
from dataclasses import dataclass, field


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_mib: int = 81559
    power_limit_mw: int = 700_000
    default_power_limit_mw: int = 700_000
    application_clocks: tuple = (1755, 2619)  # graphics, memory MHz
    max_clocks: tuple = (1980, 2619)
    ecc: int = 1
    energy_mj: list = field(default_factory=list)
    mig: dict = field(default_factory=dict)  # MIG UUID -> (profile, memory MiB, slices)


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: str | None = None


def fake_nvml(gpus: list[FakeGpu], *, driver="550.54.15", cuda=12040, name="specdec_fake_pynvml"):
    state = {"init": False}
    module = types.ModuleType(name)
    module.NVMLError = NVMLError

    def need_init():
        if not state["init"]:
            raise NVMLError("Uninitialized")

    def device(handle, *, mig_ok=False):
        need_init()
        if not isinstance(handle, _Handle):
            raise NVMLError("Invalid Argument")
        if handle.mig is not None and not mig_ok:
            raise NVMLError("Not Supported")
        return gpus[handle.gpu]

    def nvmlInit():
        state["init"] = True

    def nvmlShutdown():
        need_init()
        state["init"] = False

    def nvmlSystemGetDriverVersion():
        need_init()
        return driver

    def nvmlSystemGetCudaDriverVersion():
        need_init()
        return cuda

    def nvmlDeviceGetCount():
        need_init()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index):
        need_init()
        if isinstance(index, bool) or not isinstance(index, int):  # ctypes.c_uint(index) refuses a str
            raise TypeError(f"an integer is required, got {index!r}")
        if not 0 <= index < len(gpus):
            raise NVMLError("Invalid Argument")
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(uuid):
        need_init()
        if not isinstance(uuid, (str, bytes)):
            raise TypeError(f"a UUID string is required, got {uuid!r}")
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for number, gpu in enumerate(gpus):
            if gpu.uuid == uuid:
                return _Handle(number)
            if uuid in gpu.mig:
                return _Handle(number, uuid)
        raise NVMLError("Not Found")

    def nvmlDeviceIsMigDeviceHandle(handle):
        device(handle, mig_ok=True)
        return ctypes.c_uint(handle.mig is not None)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle):
        device(handle, mig_ok=True)
        if handle.mig is None:
            raise NVMLError("Invalid Argument")
        return _Handle(handle.gpu)

    def nvmlDeviceGetUUID(handle):
        gpu = device(handle, mig_ok=True)
        return handle.mig or gpu.uuid

    def nvmlDeviceGetIndex(handle):
        device(handle)
        return handle.gpu

    def nvmlDeviceGetName(handle):
        gpu = device(handle, mig_ok=True)
        return f"{gpu.name} MIG {gpu.mig[handle.mig][0]}" if handle.mig else gpu.name

    def nvmlDeviceGetMemoryInfo(handle):
        gpu = device(handle, mig_ok=True)
        mib = gpu.mig[handle.mig][1] if handle.mig else gpu.memory_mib
        return types.SimpleNamespace(total=mib * 2**20, free=mib * 2**20, used=0)

    def nvmlDeviceGetAttributes(handle):
        gpu = device(handle, mig_ok=True)
        _, mib, slices = gpu.mig[handle.mig] if handle.mig else ("", gpu.memory_mib, 7)
        return types.SimpleNamespace(gpuInstanceSliceCount=slices, computeInstanceSliceCount=slices, memorySizeMB=mib)

    def nvmlDeviceGetEnforcedPowerLimit(handle):
        return device(handle).power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(handle):
        return device(handle).default_power_limit_mw

    def clock(pair, kind):
        if kind not in (0, 1, 2, 3):
            raise NVMLError("Invalid Argument")
        return pair[0 if kind in (0, 1) else 1] if kind != 3 else 0

    def nvmlDeviceGetApplicationsClock(handle, kind):
        return clock(device(handle).application_clocks, kind)

    def nvmlDeviceGetMaxClockInfo(handle, kind):
        return clock(device(handle).max_clocks, kind)

    def nvmlDeviceGetEccMode(handle):
        gpu = device(handle)
        return [gpu.ecc, gpu.ecc]

    def nvmlDeviceGetTotalEnergyConsumption(handle):
        return device(handle).energy_mj.pop(0)

    for function in list(locals().values()):
        if callable(function) and getattr(function, "__name__", "").startswith("nvml"):
            setattr(module, function.__name__, function)
    return module


def install(monkeypatch, gpus: list[FakeGpu], **kwargs) -> str:
    """Put the fake in sys.modules under its own name; the name to pass as the NVML module."""
    module = fake_nvml(gpus, **kwargs)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__
