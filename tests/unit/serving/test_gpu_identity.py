"""The GPU's identity from the devices the servers use, read through a strict fake NVML (issue 47)."""

import subprocess

import pytest

from tests.support.fake_nvml import FakeGpu, install
from pytest_specdec.serving.gpu_identity import read_server_gpus
from pytest_specdec.serving.gpu_probe import GPU_PROBE_VERSION, run_gpu_probe
from pytest_specdec.verdict.comparison import ComparisonPlan
from pytest_specdec.verdict.machine import MachineMatch, session_fingerprint

A100, H100 = "GPU-a100-0000", "GPU-h100-1111"
SMI = "0, NVIDIA A100-SXM4-40GB, 40960, 40000, 550.54.15\n1, NVIDIA H100 80GB HBM3, 81559, 81000, 550.54.15\n"


def node():
    return [
        FakeGpu(A100, name="NVIDIA A100-SXM4-40GB", memory_mib=40960, power_limit_mw=400_000),
        FakeGpu(H100, mig={"MIG-h100-slice-1g": ("1g.10gb", 9856, 1)}),
    ]


def probe_figures(**changes):
    return {
        "version": GPU_PROBE_VERSION,
        "matmul_tflops": 600.0,
        "copy_gbps": 2900.0,
        "cuda_runtime": "12.8",
        "clocks_held_by_setting": False,
        **changes,
    }


def fingerprint(monkeypatch, devices, gpus=None, probe=None, **nvml):
    module = install(monkeypatch, gpus or node(), **nvml)
    seen = []

    def gpu_probe(device, uuid):
        seen.append((device, uuid))
        return {**(probe or probe_figures()), "device": device}

    fp = session_fingerprint(
        "gpu", lambda: {}, gpu_devices=devices, gpu_probe=gpu_probe, nvml_module=module, nvidia_smi=lambda args: SMI
    )
    return fp, seen


def test_servers_on_gpu_1_fingerprint_gpu_1_not_gpu_0(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the session's own: every GPU
    fp, seen = fingerprint(monkeypatch, (1,))
    assert (fp["device_name"], fp["device_count"]) == ("NVIDIA H100 80GB HBM3", 1)
    (gpu,) = fp["gpus"]
    assert gpu["uuid"] == H100 and gpu["index"] == 1 and gpu["power_limit_w"] == 700.0
    assert gpu["application_clocks_mhz"] == [1755, 2619] and gpu["max_clocks_mhz"] == [1980, 2619]
    assert gpu["mig_profile"] is None and gpu["ecc"] is True
    assert (fp["driver"], fp["cuda_driver"]) == ("550.54.15", "12.4")
    assert seen == [("1", H100)]  # the GPU probe runs on the servers' GPU, opened in NVML by its UUID


def test_a_mig_slice_is_read_by_uuid_with_its_parents_power_and_clocks(monkeypatch):
    fp, seen = fingerprint(monkeypatch, ("MIG-h100-slice-1g",))
    (gpu,) = fp["gpus"]
    assert gpu["uuid"] == "MIG-h100-slice-1g" and gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["mig_profile"] == "1g.10gb" and gpu["memory_mib"] == 9856
    assert gpu["power_limit_w"] == 700.0 and gpu["index"] == 1  # the parent's: NVML answers Not Supported on a slice
    assert seen == [("MIG-h100-slice-1g", "MIG-h100-slice-1g")]


def test_without_nvml_the_fingerprint_says_why(monkeypatch):
    assert "nvidia-ml-py package is not installed" in read_server_gpus(["0"], "specdec_no_such_nvml")
    module = install(monkeypatch, node())
    assert read_server_gpus(["GPU-not-here"], module) == "NVML: Not Found"


def _plan(before, now):
    return ComparisonPlan.of(before, now, [], [])


@pytest.mark.parametrize(
    "change, gpus, probe, named",
    [
        (
            "a 350 W power cap",
            [FakeGpu(H100, power_limit_mw=350_000)],
            probe_figures(matmul_tflops=390.0),
            "GPU 0 power limit (W) 700.0 then, 350.0 now",
        ),
        (
            "clocks locked low",
            [FakeGpu(H100)],
            probe_figures(matmul_tflops=420.0, clocks_held_by_setting=True),
            "GPU 0 clocks held by a setting under load (locked or application clocks) False then, True now",
        ),
        (
            "application clocks set",
            [FakeGpu(H100, application_clocks=(1200, 2619))],
            probe_figures(),
            "GPU 0 application clocks (graphics, memory MHz) [1755, 2619] then, [1200, 2619] now",
        ),
    ],
)
def test_a_cap_or_a_clock_setting_is_another_machine_by_name(monkeypatch, change, gpus, probe, named):
    before, _ = fingerprint(monkeypatch, (0,), [FakeGpu(H100)])
    now, _ = fingerprint(monkeypatch, (0,), gpus, probe)
    match = MachineMatch.of(before, now)
    assert match.kind == "other hardware", change
    assert named in match.describe()
    plan = _plan(before, now)
    assert plan.skip_reason("output_throughput") and not plan.compares_reference("output_throughput")


def test_a_mig_slice_is_another_machine_by_name(monkeypatch):
    before, _ = fingerprint(monkeypatch, ("1",))
    now, _ = fingerprint(monkeypatch, ("MIG-h100-slice-1g",), probe=probe_figures(matmul_tflops=90.0))
    match = MachineMatch.of(before, now)
    assert match.kind == "other hardware" and "GPU 1 MIG profile None then, '1g.10gb' now" in match.describe()


def test_a_driver_upgrade_with_the_gpu_probe_unchanged_is_the_same_machine(monkeypatch):
    before, _ = fingerprint(monkeypatch, (1,))
    now, _ = fingerprint(
        monkeypatch, (1,), driver="570.86.10", cuda=12080, probe=probe_figures(matmul_tflops=606.0, cuda_runtime="12.9")
    )
    match = MachineMatch.of(before, now)
    assert match.same and match.kind == "same"
    assert match.software_changes == {
        "driver": ("550.54.15", "570.86.10"),
        "cuda_driver": ("12.4", "12.8"),
        "cuda_runtime": ("12.8", "12.9"),
    }
    plan = _plan(before, now)
    assert plan.skip_reason("output_throughput") is None and plan.compares_reference("output_throughput")
    assert "GPU software changed since the baseline: driver 550.54.15 -> 570.86.10" in plan.describe({})
    # A driver that slows the GPU moves its probe: not the same machine, and not the engine's doing.
    slower, _ = fingerprint(monkeypatch, (1,), driver="570.86.10", probe=probe_figures(matmul_tflops=480.0))
    moved = MachineMatch.of(before, slower)
    assert moved.kind == "probe moved" and "the GPU probe moved (matrix multiply -20.0% (beyond the band)" in (
        moved.describe()
    )


def test_a_baseline_from_before_nvml_compares_on_name_count_and_driver(monkeypatch):
    now, _ = fingerprint(monkeypatch, (1,))
    old = {k: v for k, v in now.items() if k not in ("gpus", "cuda_driver", "gpu_probe")}
    assert MachineMatch.of(old, now).same  # the new fields compare where both sides have them
    assert MachineMatch.of({**old, "driver": "535.0"}, now).kind == "other hardware"  # no GPU probe: as before


def test_the_gpu_probe_child_gets_the_servers_device_and_says_why_it_could_not_run():
    calls = []

    def run(args, **kwargs):
        calls.append(kwargs["env"]["CUDA_VISIBLE_DEVICES"])
        return subprocess.CompletedProcess(args, 0, '{"matmul_tflops": 600.0, "copy_gbps": 2900.0}\n', "")

    probe = run_gpu_probe("1", "GPU-h100", run=run)
    assert calls == ["1"] and probe == {
        "version": GPU_PROBE_VERSION,
        "device": "1",
        "matmul_tflops": 600.0,
        "copy_gbps": 2900.0,
    }
    failed = run_gpu_probe("1", run=lambda args, **kw: subprocess.CompletedProcess(args, 1, "", "CUDA error\n"))
    assert failed["unavailable"] == "the GPU probe exited 1: CUDA error"
