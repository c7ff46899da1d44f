"""Which machine a measurement was made on, decided by what no engine can move.

An engine upgrade moves the reference's own decode step (docs/benchmarks.md, "Figures the code once quoted"), so the reference's speed
cannot say whether a baseline was recorded on this machine: a gate that
thought so stopped comparing speedups on exactly the upgrades it exists for.
This module decides it from two things an engine cannot change:

- the **hardware identity** in the fingerprint (device kind, name and count,
  driver; on a CPU its model name and core count), plus any field a
  `pytest_specdec_fingerprint` hook added (a runner pool, a cluster);
- a **machine probe**: a fixed float32 matrix multiply, vector arithmetic and
  a memory copy, timed in the session with numpy, the same code every time.  Two boxes
  that print the same CPU model can still differ by far more than noise, and a shared or throttled host
  is slower than it was; the probe sees both, an engine change does not.

On a GPU the identity adds each server device as NVML describes it (serving.gpu_identity: power limit,
application and max clocks, MIG profile, ECC, memory; compared where both sides read them, so a baseline from
before them compares on name, count and driver as it did), and a **GPU probe** (serving.gpu_probe: a fixed
matmul and device copy on the servers' first GPU) beside the CPU's.  A cap, a slice or a clock setting is
another machine, named; a driver or CUDA change is software where both sides have a GPU probe: the same
machine while that probe stays in its band, so an engine's regression after a driver upgrade is still compared.

`MachineMatch.of(recorded_fingerprint, current_fingerprint)` compares them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..serving.gpu_identity import KEY_LABELS, identity_of
from ..serving.gpu_probe import GPU_PROBE_FIGURES, GPU_PROBE_VERSION, run_gpu_probe
from .fingerprint import (
    GPU_PROBE_FIELD,
    GPUS_FIELD,
    HARDWARE_FIELDS,
    PROBE_FIELD,
    collect_fingerprint,
    shared_extra_keys,
)

# Bump when the probe's code changes: figures of another version are not comparable.
PROBE_VERSION = 1
# A single figure moves far between sessions on one box (memory copies, a neighbour's burst), the median of the
# three figures' changes much less (benchmarks/machine_probe.py prints both); the band holds that median's
# spread with room, and is well inside the gap between boxes of one kind.
PROBE_BAND = 0.20
PROBE_FIGURES = ("matmul_gflops", "vector_gflops", "copy_gbps")
# The most timings one session's probe takes, the recording one's included (it keeps the best of 2): timing it
# again for every check that disagrees keeps the best of ever more rounds, until a slower box reads as the
# same one (docs/benchmarks.md, "Figures the code once quoted").
PROBE_MAX_TIMINGS = 2
# The GPU probe's figures are each the best of 8 rounds on a device nothing else uses at session start (the
# servers start after it), not on a shared 2-core host; a power cap or a clock setting slows the multiply and
# not the copy, so any one figure beyond the band moves the GPU (not the median, as on the CPU).
GPU_PROBE_BAND = 0.10
# Software beside the GPU: a change alone is named, never a machine, where both sides timed a GPU probe.
GPU_SOFTWARE_FIELDS = ("driver", "cuda_driver")
_MATMUL_N = 384
_VECTOR_N = 32768  # floats: fits in a core's L2, so it times the core, not memory
_COPY_MIB = 16  # larger than any cache here: it times memory
_WARM_UP_ROUNDS = 5
_ROUNDS = 20
_ATTEMPTS = 3
_PAUSE_S = 0.1


def _aligned(count: int) -> np.ndarray:
    """A float32 array on a page boundary: numpy's own allocations land at varying alignments, and on
    AVX-512 boxes that alone moved copies and vector arithmetic between two speeds from one process to the
    next."""
    raw = np.empty(count * 4 + 4096, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 4096
    return raw[offset : offset + count * 4].view(np.float32)


def run_probe(rounds: int = _ROUNDS, attempts: int = _ATTEMPTS) -> dict[str, Any]:
    """Time the fixed matrix multiply (BLAS, every core), vector arithmetic (one core) and memory copy.

    Each figure is the best of `rounds` rounds in each of `attempts` attempts a moment apart: noise only
    ever slows a round down, and on a shared 2-core VM a neighbour's burst can slow every round of one
    attempt (about 0.5 s in all).
    """
    rng = np.random.default_rng(0)
    a = _aligned(_MATMUL_N * _MATMUL_N).reshape(_MATMUL_N, _MATMUL_N)
    b = _aligned(_MATMUL_N * _MATMUL_N).reshape(_MATMUL_N, _MATMUL_N)
    a[:] = rng.standard_normal(a.shape)
    b[:] = rng.standard_normal(b.shape)
    x, y = _aligned(_VECTOR_N), _aligned(_VECTOR_N)
    x[:] = rng.standard_normal(_VECTOR_N)
    src, dst = _aligned(_COPY_MIB * 2**20 // 4), _aligned(_COPY_MIB * 2**20 // 4)
    src[:] = 1.0
    dst[:] = 0.0
    figures: dict[str, list[float]] = {name: [] for name in PROBE_FIGURES}
    for attempt in range(max(1, int(attempts))):
        if attempt:
            time.sleep(_PAUSE_S)
        _time_rounds(a, b, x, y, src, dst, _WARM_UP_ROUNDS if attempt == 0 else 1, rounds, figures)
    probe: dict[str, Any] = {"version": PROBE_VERSION}
    probe.update({name: round(max(values), 3) for name, values in figures.items()})
    # How far a round's median sat below its best: the session's own noise, for the reader.
    probe["spread"] = round(max(1 - statistics.median(v) / max(v) for v in figures.values()), 4)
    return probe


def _time_rounds(a, b, x, y, src, dst, warm_up: int, rounds: int, figures: dict[str, list[float]]) -> None:
    for round_no in range(warm_up + max(1, int(rounds))):
        start = time.perf_counter()
        for _ in range(4):
            np.matmul(a, b)
        matmul = 2.0 * _MATMUL_N**3 * 4 / (time.perf_counter() - start) / 1e9
        start = time.perf_counter()
        for _ in range(100):
            np.multiply(x, 1.0001, out=y)
            np.add(y, x, out=y)
        vector = 2.0 * 100 * _VECTOR_N / (time.perf_counter() - start) / 1e9
        start = time.perf_counter()
        for _ in range(2):
            np.copyto(dst, src)
        copy = 2 * 2 * src.nbytes / (time.perf_counter() - start) / 1e9  # read + write
        if round_no >= warm_up:
            for name, value in zip(PROBE_FIGURES, (matmul, vector, copy)):
                figures[name].append(value)


def merged_probe(first: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """Two timings of the probe as one: each figure's best of both, as the probe takes the best of its rounds
    (noise only ever slows a round down, so timing again only adds rounds).  The gate times the probe again
    when it disagrees with a baseline's: a neighbour's burst during the session's first timing read as "the
    machine moved" and turned off every absolute comparison, so an engine made much slower passed.
    A box that is really slower stays slower in both timings."""
    if not _is_probe(first) or not _is_probe(again):  # another probe version: the valid timing stands
        return dict(again if _is_probe(again) else first)
    merged = dict(first)
    for name in PROBE_FIGURES:
        values = [v for v in (first.get(name), again.get(name)) if isinstance(v, (int, float))]
        if values:
            merged[name] = max(values)
    merged["timings"] = int(first.get("timings", 1)) + int(again.get("timings", 1))
    merged["spread"] = min(first.get("spread", 0.0), again.get("spread", 0.0))
    return merged


def session_fingerprint(
    device: str | None,
    probe: Callable[[], dict],
    *,
    gpu_devices=None,
    gpu_probe: Callable[[str, str | None], dict] = run_gpu_probe,
    nvml_module: str | None = None,
    nvidia_smi=None,
) -> dict[str, Any]:
    """The session's fingerprint; with a device flag, the machine probe in it (`probe` times it), and on a GPU
    the servers' devices (`gpu_devices`: their CUDA_VISIBLE_DEVICES entries) and the GPU probe on the first
    (`gpu_probe`, `nvml_module` and `nvidia_smi` replace the child, NVML and nvidia-smi in tests)."""
    fp = collect_fingerprint(device or "cpu", nvidia_smi=nvidia_smi, devices=gpu_devices, nvml_module=nvml_module)
    if device is not None:
        fp[PROBE_FIELD] = probe()
    if device == "gpu":
        gpus = fp.get(GPUS_FIELD) or [{}]
        first = next(iter(gpu_devices or ()), None) or str(gpus[0].get("index", 0))
        fp[GPU_PROBE_FIELD] = gpu_probe(str(first), gpus[0].get("uuid"))
    return fp


def _is_probe(probe: Any) -> bool:
    return isinstance(probe, dict) and probe.get("version") == PROBE_VERSION


def _probe(fp: dict[str, Any]) -> dict[str, Any] | None:
    probe = fp.get(PROBE_FIELD)
    return probe if _is_probe(probe) else None


def _gpu_probe(fp: dict[str, Any]) -> dict[str, Any] | None:
    """The fingerprint's GPU probe where it was timed by this version (not where it says why it could not)."""
    probe = fp.get(GPU_PROBE_FIELD)
    if isinstance(probe, dict) and probe.get("version") == GPU_PROBE_VERSION and "unavailable" not in probe:
        return probe
    return None


def _gpu_differences(recorded: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each server device's identity (serving.gpu_identity), by its place in the servers' list, named "GPU <index>
    <what>"; fields one side did not read compare as equal (a baseline from before NVML was read).  A clock
    setting seen under load by the GPU probe (locked clocks have no NVML getter) counts too."""
    before, now = recorded.get(GPUS_FIELD), current.get(GPUS_FIELD)
    differences: dict[str, tuple[Any, Any]] = {}
    if isinstance(before, list) and isinstance(now, list):
        for then_gpu, now_gpu in zip(before, now):
            a, b = identity_of(then_gpu), identity_of(now_gpu)
            for key in (k for k in a if k in b and a[k] != b[k]):
                differences[f"GPU {now_gpu.get('index', '?')} {KEY_LABELS[key]}"] = (a[key], b[key])
    then_probe, now_probe = _gpu_probe(recorded), _gpu_probe(current)
    held = "clocks_held_by_setting"
    if then_probe and now_probe and held in then_probe and held in now_probe and then_probe[held] != now_probe[held]:
        label = f"GPU {now_probe.get('device', '?')} clocks held by a setting under load (locked or application clocks)"
        differences[label] = (then_probe[held], now_probe[held])
    return differences


@dataclass(frozen=True)
class MachineMatch:
    """Whether a baseline's machine is this one: hardware identity first, then the probe within its band."""

    hardware_differences: dict  # field -> (recorded, current); empty when the hardware identity matches
    recorded_probe: dict | None
    current_probe: dict | None
    band: float = PROBE_BAND
    recorded_gpu_probe: dict | None = None
    current_gpu_probe: dict | None = None
    # The driver or CUDA changed where both sides timed a GPU probe: software, named, not the machine's identity.
    software_changes: dict = field(default_factory=dict)

    @classmethod
    def of(cls, recorded: dict[str, Any], current: dict[str, Any], band: float = PROBE_BAND) -> "MachineMatch":
        gpu_probes = _gpu_probe(recorded), _gpu_probe(current)
        # With a GPU probe on both sides the driver is software: the probe sees a driver that slows the GPU.
        # Without one (a baseline from before it) the driver stays in the identity, as it always was.
        software = GPU_SOFTWARE_FIELDS if all(gpu_probes) else ()
        # Hook-added fields name the environment (a runner pool): part of the identity where both sides have them.
        keys = (*(k for k in HARDWARE_FIELDS if k not in software), *sorted(shared_extra_keys(recorded, current)))
        differences = {k: (recorded.get(k), current.get(k)) for k in keys if recorded.get(k) != current.get(k)}
        differences.update(_gpu_differences(recorded, current))
        changes = {k: (recorded.get(k), current.get(k)) for k in software if recorded.get(k) != current.get(k)}
        runtimes = tuple((p or {}).get("cuda_runtime") for p in gpu_probes)
        if all(gpu_probes) and runtimes[0] != runtimes[1]:
            changes["cuda_runtime"] = runtimes
        return cls(differences, _probe(recorded), _probe(current), band, *gpu_probes, changes)

    @property
    def same_hardware(self) -> bool:
        return not self.hardware_differences

    @property
    def probe_changes(self) -> dict[str, float] | None:
        """Each probe figure's relative change, current against recorded (None where either side has no probe)."""
        return _changes(self.recorded_probe, self.current_probe, PROBE_FIGURES)

    @property
    def probe_change(self) -> float | None:
        """The machine's change by the probe: the median of its figures' changes (one noisy figure cannot
        decide alone; a slower box or a loaded host moves them all)."""
        changes = self.probe_changes
        return statistics.median(changes.values()) if changes else None

    @property
    def gpu_probe_changes(self) -> dict[str, float] | None:
        """Each GPU probe figure's relative change (None where either side has no GPU probe)."""
        return _changes(self.recorded_gpu_probe, self.current_gpu_probe, GPU_PROBE_FIGURES)

    @property
    def gpu_probe_moved(self) -> bool:
        return any(abs(c) > GPU_PROBE_BAND for c in (self.gpu_probe_changes or {}).values())

    @property
    def cpu_probe_moved(self) -> bool:
        change = self.probe_change
        return change is not None and abs(change) > self.band

    @property
    def probe_moved(self) -> bool:
        return self.cpu_probe_moved or self.gpu_probe_moved

    @property
    def same(self) -> bool:
        """Same hardware and a probe within its band (or no probe on one side: the hardware decides)."""
        return self.same_hardware and not self.probe_moved

    @property
    def kind(self) -> str:
        """ "same", "other hardware" or "probe moved": what the gate and the reports call the case."""
        if not self.same_hardware:
            return "other hardware"
        return "probe moved" if self.probe_moved else "same"

    def describe(self) -> str:
        if not self.same_hardware:
            diff = "; ".join(f"{k} {a!r} then, {b!r} now" for k, (a, b) in self.hardware_differences.items())
            return f"another machine: {diff}"
        cpu = self._describe_cpu()
        if self.gpu_probe_moved and not self.cpu_probe_moved:  # the GPU alone moved: not "the same machine"
            cpu = cpu.replace("the same machine: hardware identity equal, ", "the same hardware, ", 1)
        return cpu + self._describe_gpu()

    def _describe_gpu(self) -> str:
        changes = self.gpu_probe_changes
        if changes is None:
            return ""
        moved = ", ".join(
            f"{_GPU_LABELS.get(k, k)} {c:+.1%}{' (beyond the band)' if abs(c) > GPU_PROBE_BAND else ''}"
            for k, c in changes.items()
        )
        if self.gpu_probe_moved:
            return (
                f"; the GPU probe moved ({moved}), beyond its {GPU_PROBE_BAND:.0%} band: the GPU is not performing "
                "as the recording one did (a power cap, a clock setting, a co-tenant, or another GPU of the kind)"
            )
        return f"; GPU probe within its {GPU_PROBE_BAND:.0%} band ({moved})"

    def _describe_cpu(self) -> str:
        changes = self.probe_changes
        if changes is None:
            missing = "the baseline" if self.recorded_probe is None else "this session"
            return (
                f"the same hardware; {missing} has no machine probe (recorded before probes existed, or "
                "another probe version): the hardware identity decides"
            )
        moved = ", ".join(
            f"{_probe_label(k)} {c:+.1%}{' (beyond the band alone)' if abs(c) > self.band else ''}"
            for k, c in changes.items()
        )
        if (timings := self.current_probe.get("timings", 1)) > 1:
            moved += f"; this session's probe the best of {timings} timings, timed again as it disagreed"
        if self.cpu_probe_moved:
            return (
                f"the same hardware, but the machine probe moved {self.probe_change:+.1%} (median of {moved}), "
                f"beyond its {self.band:.0%} band: "
                "this box is not performing as the recording one did (another box of the kind, or a loaded or "
                "throttled host)"
            )
        return (
            f"the same machine: hardware identity equal, machine probe {self.probe_change:+.1%} (median of "
            f"{moved}), within its {self.band:.0%} band"
        )


def _changes(recorded: dict | None, current: dict | None, figures) -> dict[str, float] | None:
    """Each of a probe's `figures` as a relative change, current against recorded (None without both)."""
    if recorded is None or current is None:
        return None
    changes = {}
    for key in figures:
        before, now = recorded.get(key), current.get(key)
        if isinstance(before, (int, float)) and isinstance(now, (int, float)) and before > 0:
            changes[key] = now / before - 1
    return changes or None


def _probe_label(key: str) -> str:
    return {"matmul_gflops": "matrix multiply", "vector_gflops": "vector arithmetic", "copy_gbps": "memory copy"}.get(
        key, key
    )


_GPU_LABELS = {"matmul_tflops": "matrix multiply", "copy_gbps": "device copy"}
