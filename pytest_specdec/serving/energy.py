"""Energy counters of the hardware the servers run on: NVML on NVIDIA GPUs, RAPL on CPUs.

SD spends compute to save time, so the energy per output token can rise while latency falls
(vllm-project/vllm#36440 asks for energy with and without SD).  Both counters are cumulative, so a run's
energy is the difference of two reads around it:

- **NVML** (the `nvidia-ml-py` package, imported as `pynvml`): each GPU's total energy since the driver
  loaded, in millijoules (`nvmlDeviceGetTotalEnergyConsumption`, Volta and later).  The whole device: another
  process on the same GPU counts too.
- **RAPL** (Linux `/sys/class/powercap/intel-rapl:N/energy_uj`, also AMD's packages on recent kernels): each
  CPU package's energy in microjoules, wrapping at `max_energy_range_uj`.  The whole package: the load client
  and anything else on it count too; it is unreadable without privileges on most kernels since 5.10, and
  absent in most VMs.

`energy_meter(device)` returns a meter or the reason there is none.  Nothing here raises on a read: a read
that fails makes the run's energy unavailable, with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

POWERCAP = Path("/sys/class/powercap")
NVML_MODULE = "pynvml"  # what nvidia-ml-py installs


@dataclass(frozen=True)
class EnergyReading:
    """A run's energy in joules, from which counter; `joules` None with `problem` when it could not be read."""

    joules: float | None
    source: str
    problem: str | None = None

    def per_token(self, tokens: int) -> float | None:
        return self.joules / tokens if self.joules is not None and tokens > 0 else None


class EnergyMeter:
    """A cumulative counter per domain (GPU, CPU package), read around a run."""

    source = ""

    def read(self) -> dict[str, float]:  # pragma: no cover - each meter has its own
        raise NotImplementedError

    def wrap_j(self, domain: str) -> float | None:
        """Where a domain's counter wraps to 0, in joules (None: it does not)."""
        return None

    def start(self) -> Callable[[], EnergyReading]:
        """Read now; the function returned reads again and gives the energy between the two reads."""
        try:
            before = self.read()
        except Exception as exc:  # a driver error must not fail a measurement: the energy is unavailable
            problem = f"{self.source}: the first read failed: {exc}"
            return lambda: EnergyReading(None, self.source, problem)

        def stop() -> EnergyReading:
            try:
                after = self.read()
            except Exception as exc:
                return EnergyReading(None, self.source, f"{self.source}: the second read failed: {exc}")
            if set(after) != set(before):
                return EnergyReading(None, self.source, f"{self.source}: the domains changed during the run")
            total = 0.0
            for domain, value in after.items():
                change = value - before[domain]
                if change < 0:
                    wrap = self.wrap_j(domain)
                    if wrap is None:
                        return EnergyReading(None, self.source, f"{self.source}: {domain}'s counter went backwards")
                    change += wrap
                total += change
            return EnergyReading(total, self.source)

        return stop


class NvmlEnergy(EnergyMeter):
    def __init__(self, nvml: Any, indices: list[int]):
        self.nvml, self.indices = nvml, indices
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.source = f"NVML total energy of GPU {', '.join(map(str, indices))} (whole devices)"

    def read(self) -> dict[str, float]:
        return {
            f"gpu{i}": self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
            for i, handle in zip(self.indices, self.handles)
        }


class RaplEnergy(EnergyMeter):
    def __init__(self, root: Path, packages: list[Path]):
        self.root, self.packages = root, packages
        self.source = f"RAPL energy of CPU package{'s' if len(packages) > 1 else ''} " + ", ".join(
            p.name for p in packages
        )

    def read(self) -> dict[str, float]:
        return {p.name: int((p / "energy_uj").read_text()) / 1e6 for p in self.packages}

    def wrap_j(self, domain: str) -> float | None:
        try:
            return int((self.root / domain / "max_energy_range_uj").read_text()) / 1e6
        except (OSError, ValueError):
            return None


def _visible_gpus(count: int) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return list(range(count))
    try:
        return [int(part) for part in visible.split(",") if part.strip()]
    except ValueError:  # UUIDs: NVML indexes by number; meter every GPU rather than guess
        return list(range(count))


def _nvml_meter(module: str) -> EnergyMeter | str:
    try:
        nvml = __import__(module)
    except ImportError:
        return "NVML: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
        indices = _visible_gpus(nvml.nvmlDeviceGetCount())
        meter = NvmlEnergy(nvml, indices)
        meter.read()  # a GPU before Volta has no energy counter: NVML says "not supported" here
        return meter
    except Exception as exc:
        return f"NVML: {exc}"


def _rapl_meter(root: Path) -> EnergyMeter | str:
    if not root.is_dir():
        return f"RAPL: no {root} (this kernel or VM exposes no power-capping counters)"
    packages = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not packages:
        return f"RAPL: no CPU package (intel-rapl:N) under {root}"
    meter = RaplEnergy(root, packages)
    try:
        meter.read()
    except (OSError, ValueError) as exc:
        return f"RAPL: {exc} (reading energy_uj needs privileges on most kernels since 5.10)"
    return meter


def energy_meter(device: str | None, *, powercap: Path = POWERCAP, nvml_module: str = NVML_MODULE) -> EnergyMeter | str:
    """The meter for servers on `device` ("gpu" or "cpu"), or why there is none (`powercap` and `nvml_module`
    are where RAPL and NVML are read from: tests give a tree and a module of their own)."""
    if device == "gpu":
        return _nvml_meter(nvml_module)
    if device == "cpu":
        return _rapl_meter(powercap)
    return "no device flag: the servers' hardware is not known"
