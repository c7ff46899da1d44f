"""GPUs for servers: discovery, disjoint shares per xdist worker, skips, memory.

An 8-GPU node under ``pytest -n 8`` gives each worker one GPU and under
``-n 4`` two, through ``CUDA_VISIBLE_DEVICES``, so no two servers ever share
a GPU.  Shares are equal and contiguous; a remainder stays unused rather than
giving one worker more, so which worker can run which test stays predictable.
Plain logic plus an ``nvidia-smi`` call that tests replace with a function.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..engines import engine_named

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,memory.free,driver_version",
    "--format=csv,noheader,nounits",
]
NVIDIA_SMI_TIMEOUT_S = 10.0
# CUDA numbers GPUs fastest first unless told otherwise, nvidia-smi by PCI bus:
# only with this setting do the indices in CUDA_VISIBLE_DEVICES name the GPUs
# nvidia-smi reports under the same numbers.
DEVICE_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


class DeviceError(RuntimeError):
    """No usable GPUs, or not enough free memory in time."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: int
    memory_free_mib: int
    driver: str | None = None


def parse_devices(value: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` or ``"0-3"`` -> (0, 1, 2, 3) (an argparse ``type=``)."""
    devices: list[int] = []
    for part in str(value).split(","):
        part = part.strip()
        try:
            low, _, high = part.partition("-")
            numbers = range(int(low), int(high) + 1) if high else [int(low)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1,2,3 or 0-3, got {value!r}") from None
        if not numbers or min(numbers) < 0:
            raise argparse.ArgumentTypeError(f"GPU indices are integers >= 0, got {part!r} in {value!r}")
        devices.extend(numbers)
    if len(set(devices)) != len(devices):
        raise argparse.ArgumentTypeError(f"a GPU is listed twice in {value!r}")
    return tuple(devices)


def _nvidia_smi(args: Sequence[str]) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of ``NVIDIA_SMI_QUERY``'s output (a GPU's name may itself contain commas)."""
    gpus = []
    for line in text.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5:
            raise DeviceError(
                f"unexpected nvidia-smi output line {line!r} (expected index, name, memory.total, "
                "memory.free, driver_version)"
            )
        gpus.append(
            Gpu(
                int(fields[0]),
                ",".join(fields[1:-3]),
                int(float(fields[-3])),
                int(float(fields[-2])),
                fields[-1] or None,
            )
        )
    return gpus


def visible_devices(environ: Mapping[str, str] = os.environ) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it; None when unset (every GPU is visible).

    CUDA stops at the first invalid entry, so ``"-1"`` (or an empty value)
    hides every GPU and ``"0,-1,1"`` shows only GPU 0.
    """
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    visible = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        visible.append(entry)
    return visible


def list_gpus(
    run: Callable[[Sequence[str]], str] = _nvidia_smi, environ: Mapping[str, str] = os.environ
) -> tuple[list[Gpu], int]:
    """(nvidia-smi's GPUs narrowed to ``CUDA_VISIBLE_DEVICES``, how many CUDA sees).

    Indices narrow the list, in the order given; UUIDs cannot be mapped to
    rows, so the list is kept whole and only the count follows them.
    Raises DeviceError when nvidia-smi cannot be run.
    """
    try:
        gpus = parse_nvidia_smi(run(NVIDIA_SMI_QUERY))
    except (OSError, subprocess.SubprocessError) as exc:
        raise DeviceError(
            f"could not list GPUs with nvidia-smi ({exc}): pass --specdec-devices 0,1,... or install the NVIDIA driver"
        ) from None
    visible = visible_devices(environ)
    if visible is None:
        return gpus, len(gpus)
    if all(entry.isdigit() for entry in visible):
        by_index = {gpu.index: gpu for gpu in gpus}
        gpus = [by_index[int(entry)] for entry in visible if int(entry) in by_index]
        return gpus, len(gpus)
    return gpus, min(len(visible), len(gpus))


def discover_gpus(
    run: Callable[[Sequence[str]], str] = _nvidia_smi, environ: Mapping[str, str] = os.environ
) -> list[Gpu]:
    """The GPUs the session may use: `list_gpus`, and an error when there are none."""
    gpus, count = list_gpus(run, environ)
    if not gpus or not count:
        raise DeviceError("no GPUs found (nvidia-smi listed none, or CUDA_VISIBLE_DEVICES hides them all)")
    return gpus


def device_order_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment servers need so CUDA and nvidia-smi number GPUs alike (set when unset)."""
    name, wanted = DEVICE_ORDER
    current = environ.get(name)
    if current not in (None, "", wanted):
        raise DeviceError(
            f"{name}={current} numbers GPUs differently from nvidia-smi, so a share of GPU "
            f"indices would name other GPUs: unset it or set {name}={wanted}"
        )
    return {name: wanted}


def gpus_needed(tensor_parallel_size: int, speculative_config: Mapping | None) -> int:
    """GPUs one server needs: the draft runs on the target's GPUs, so the larger of the two TP sizes."""
    draft_tp = (speculative_config or {}).get("draft_tensor_parallel_size", 1)
    draft_tp = 1 if draft_tp is None else draft_tp
    for name, value in (("tensor_parallel_size", tensor_parallel_size), ("draft_tensor_parallel_size", draft_tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return max(tensor_parallel_size, draft_tp)


def xdist_worker(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(this worker's index, how many workers): (0, 1) outside pytest-xdist."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return 0, 1
    return int(worker[2:]), int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def worker_share(devices: Sequence[int], worker_index: int, worker_count: int) -> tuple[int, ...]:
    """This worker's GPUs: an equal, contiguous slice, disjoint from every other worker's."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise ValueError(f"worker {worker_index} of {worker_count} does not exist")
    per_worker = len(devices) // worker_count
    return tuple(devices[worker_index * per_worker : (worker_index + 1) * per_worker])


def cuda_visible_devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices)


def skip_reason(needed: int, share: Sequence[int], all_devices: Sequence[int], worker_count: int) -> str | None:
    """Why a test cannot run here (None when its server fits this worker's GPUs)."""
    if len(share) >= needed:
        return None
    listed = cuda_visible_devices(all_devices)
    if worker_count > 1:
        return (
            f"needs {needed} GPUs (tensor_parallel_size / draft_tensor_parallel_size), this worker has "
            f"{len(share)}: GPUs {listed} split over {worker_count} xdist workers; run with fewer workers (-n) "
            "or more devices (--specdec-devices)"
        )
    return (
        f"needs {needed} GPUs (tensor_parallel_size / draft_tensor_parallel_size), {len(share)} available "
        f"(GPUs {listed})"
    )


def servers_at_once(device_count: int, needed: int, worker_count: int) -> int:
    """How many servers needing `needed` GPUs the node runs at once with `worker_count` workers."""
    return worker_count if device_count // worker_count >= needed else 0


def free_memory_query(run: Callable[[Sequence[str]], str] = _nvidia_smi) -> Callable[[], dict[int, int]]:
    def query() -> dict[int, int]:
        return {gpu.index: gpu.memory_free_mib for gpu in parse_nvidia_smi(run(NVIDIA_SMI_QUERY))}

    return query


def memory_needed_mib(share: float, total_mib: int, override_mib: int | None = None) -> int:
    """Free MiB each GPU needs before the server starts: the engine's share of the GPU (`Engine.gpu_memory_share`;
    vLLM reserves ``--gpu-memory-utilization`` of total memory, its model's size included, and refuses to
    start when less is free), unless a test (``@pytest.mark.specdec_gpu_memory``) or the project (ini) says."""
    return override_mib if override_mib is not None else int(share * total_mib)


def wait_for_memory(
    devices: Sequence[int],
    needed_mib: int,
    query: Callable[[], dict[int, int]],
    *,
    timeout: float = 120.0,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every GPU in `devices` has `needed_mib` free; a stopped server frees its memory
    seconds after it exits, so keep asking until `timeout`, then fail with the numbers."""
    deadline = clock() + timeout
    while True:
        free = query()
        short = {d: free.get(d, 0) for d in devices if free.get(d, 0) < needed_mib}
        if not short:
            return
        if clock() >= deadline:
            detail = ", ".join(f"GPU {d}: {mib} MiB free" for d, mib in sorted(short.items()))
            raise DeviceError(
                f"not enough free GPU memory to start the server after {timeout:g} s "
                f"(needs {needed_mib} MiB per GPU; {detail}): free the GPUs, or lower the "
                "requirement with the specdec_gpu_memory_mib ini setting"
            )
        sleep(poll)


def session_share(
    devices: Sequence[int] = (),
    environ: Mapping[str, str] = os.environ,
    run: Callable[[Sequence[str]], str] = _nvidia_smi,
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(the session's GPUs, this xdist worker's share, how many workers): `devices` or nvidia-smi's."""
    device_order_env(environ)  # fails early when CUDA would number the GPUs differently
    devices = tuple(devices) or tuple(gpu.index for gpu in discover_gpus(run, environ))
    index, count = xdist_worker(environ)
    return devices, worker_share(devices, index, count), count


def memory_gate(
    share: Sequence[int],
    override_for: Callable[[object], int | None],
    *,
    timeout: float,
    run: Callable[[Sequence[str]], str] = _nvidia_smi,
) -> Callable[[object], None] | None:
    """What the pool calls before a server starts: wait until the share has what the spec needs.
    None when nvidia-smi cannot be asked (devices given by hand on a machine without it)."""
    try:
        totals = {gpu.index: gpu.memory_total_mib for gpu in discover_gpus(run, {})}
    except DeviceError:
        return None
    query = free_memory_query(run)

    def wait(spec) -> None:
        total = min((totals.get(d, 0) for d in share), default=0)
        fraction, _ = engine_named(spec.engine).gpu_memory_share(spec.server_args)
        wait_for_memory(share, memory_needed_mib(fraction, total, override_for(spec)), query, timeout=timeout)

    return wait
