"""The engine-independent probe timed on the GPU itself: a fixed matmul and a device copy, the same code every time.

The CPU probe (verdict.machine) cannot see a GPU capped, clocked down, sliced or shared.  This one times, on the
first GPU the servers see, a float16 matrix multiply (the compute an LLM's decode step is made of) and a device to
device copy (its memory bandwidth), each the best of its rounds, and reads through NVML, while the multiplies
run, whether a clock setting holds the GPU's clocks (locked clocks, ``nvidia-smi -lgc``, have no NVML getter: the
"applications clocks setting" event reason under load is where they show).

It runs in a child Python with torch, its ``CUDA_VISIBLE_DEVICES`` the servers' device: the session never imports
torch (collection stays light, installs without torch still run) and never holds a CUDA context the servers'
memory check would count.  Nothing here raises: a machine without torch or CUDA gets the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable

from .gpus import DEVICE_ORDER

# Bump when the script's work changes: timings of another version are not comparable.
GPU_PROBE_VERSION = 1
GPU_PROBE_FIGURES = ("matmul_tflops", "copy_gbps")
# The child imports torch and starts CUDA (seconds to a minute on a cold node) before its ~1 s of timing.
GPU_PROBE_TIMEOUT_S = 180.0

# Run as `python -c SCRIPT UUID`.  8192-square float16 matmuls are large enough to be compute- and power-bound
# on a data-centre GPU (a cap or a low clock slows them) and fit a MIG 1g slice's memory with room.
SCRIPT = r"""
import json, sys
out = {}
try:
    import torch
except ImportError:
    print(json.dumps({"unavailable": "torch is not installed"})); sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"unavailable": "torch.cuda.is_available() is False"})); sys.exit(0)
try:
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(sys.argv[1]) if len(sys.argv) > 1 else None
except Exception:
    pynvml = handle = None
N, REPS, ROUNDS, COPY_MIB = 8192, 10, 8, 512
dev = torch.device("cuda", 0)
gen = torch.Generator(device=dev).manual_seed(0)
a = torch.randn(N, N, device=dev, dtype=torch.float16, generator=gen)
b = torch.randn(N, N, device=dev, dtype=torch.float16, generator=gen)
c = torch.empty_like(a)
src = torch.ones(COPY_MIB * 2**20, device=dev, dtype=torch.uint8)
dst = torch.empty_like(src)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def timed(work, sample=False):
    start.record()
    for _ in range(REPS):
        work()
    end.record()
    seen = None
    if sample and handle is not None:  # read while the GPU is busy: the clock and why it is held
        try:
            seen = (pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle), pynvml.nvmlDeviceGetClockInfo(handle, 1))
        except Exception:
            seen = None
    end.synchronize()
    return start.elapsed_time(end) / 1000 / REPS, seen
matmul, copy, seen = [], [], None
for round_no in range(ROUNDS + 2):  # two rounds of warm-up: clocks ramp, cuBLAS picks its kernel
    s, sample = timed(lambda: torch.mm(a, b, out=c), sample=round_no == ROUNDS + 1)
    seen = sample or seen
    t, _ = timed(lambda: dst.copy_(src))
    if round_no >= 2:
        matmul.append(2 * N**3 / s / 1e12)
        copy.append(2 * src.numel() / t / 1e9)
out.update(matmul_tflops=round(max(matmul), 2), copy_gbps=round(max(copy), 1),
           spread=round(max(1 - sorted(v)[len(v) // 2] / max(v) for v in (matmul, copy)), 4),
           cuda_runtime=torch.version.cuda, device_name=torch.cuda.get_device_name(dev))
if seen is not None:
    out.update(clocks_held_by_setting=bool(seen[0] & 0x2), sm_clock_mhz_under_load=int(seen[1]))
print(json.dumps(out))
"""


def run_gpu_probe(
    device: str,
    uuid: str | None = None,
    *,
    run: Callable[..., Any] = subprocess.run,
    python: str = sys.executable,
    timeout: float = GPU_PROBE_TIMEOUT_S,
) -> dict[str, Any]:
    """Time the probe on `device` (a ``CUDA_VISIBLE_DEVICES`` entry; `uuid` opens it in NVML); the figures, or
    {"unavailable": why} with the version either way (`run` replaces subprocess.run in tests)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(device), DEVICE_ORDER[0]: DEVICE_ORDER[1]}
    try:
        done = run(
            [python, "-c", SCRIPT, *([uuid] if uuid else [])], env=env, capture_output=True, text=True, timeout=timeout
        )
        lines = (done.stdout or "").strip().splitlines()
        probe = json.loads(lines[-1]) if done.returncode == 0 and lines else None
        if not isinstance(probe, dict):
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
            probe = {"unavailable": f"the GPU probe exited {done.returncode}: {tail[0][:300]}"}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        probe = {"unavailable": f"the GPU probe could not run: {exc}"}
    return {"version": GPU_PROBE_VERSION, "device": str(device), **probe}
