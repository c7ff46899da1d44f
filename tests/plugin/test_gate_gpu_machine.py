"""The gate on a GPU: a cap, a slice or a clock setting is another machine, named; a driver upgrade is not.

Issue 47: a 350 W power cap, locked clocks and a MIG 1g slice counted as "the same machine", so a 40% slower
reference with the engine unchanged failed as the engine's own regression; a driver upgraded with the engine
read as another machine, so the engine's regression was compared on acceptance only and passed.  Each case
here records a baseline through the update flow, its fingerprint's GPU part read by the real code from a strict
fake NVML (tests/support/fake_nvml.py) with the GPU probe's figures given, and runs the real gate of the `specdec` fixture.
"""

import json

import pytest

from tests.support.fake_nvml import FakeGpu, install
from tests.support.inner_results import RESULTS_CONFTEST
from pytest_specdec.serving.gpu_probe import GPU_PROBE_VERSION
from pytest_specdec.verdict.machine import session_fingerprint
from tests.support.gate_machine import CASE, ENGINE_HOOK

H100 = "GPU-h100-1111"
SMI = "0, NVIDIA A100-SXM4-40GB, 40960, 40000, 550.54.15\n1, NVIDIA H100 80GB HBM3, 81559, 81000, 550.54.15\n"
GPU_HOOK = """
import json, os

def pytest_specdec_fingerprint(config, fingerprint):
    return {**fingerprint, **json.loads(os.environ["GPU_FP"])}
"""


def gpu_part(monkeypatch, devices=("1",), gpu=None, probe=None, **nvml):
    """The GPU fields a session with servers on `devices` records, as session_fingerprint reads them."""
    module = install(
        monkeypatch, [FakeGpu("GPU-a100-0000", name="NVIDIA A100-SXM4-40GB"), gpu or FakeGpu(H100)], **nvml
    )
    figures = {
        "version": GPU_PROBE_VERSION,
        "matmul_tflops": 600.0,
        "copy_gbps": 2900.0,
        "cuda_runtime": "12.8",
        "clocks_held_by_setting": False,
        **(probe or {}),
    }
    fp = session_fingerprint(
        "gpu",
        lambda: None,
        gpu_devices=devices,
        nvml_module=module,
        nvidia_smi=lambda args: SMI,
        gpu_probe=lambda device, uuid: {**figures, "device": device},
    )
    keys = ("device_kind", "device_name", "device_count", "driver", "gpus", "cuda_driver", "gpu_probe")
    return json.dumps({key: fp[key] for key in keys})


@pytest.fixture
def gpu_gated(pytester, monkeypatch):
    pytester.makeconftest(
        RESULTS_CONFTEST
        + ENGINE_HOOK.replace("pytest_specdec_fingerprint", "_engine")
        + GPU_HOOK.replace("return {**fingerprint,", "return {**_engine(config, fingerprint),")
    )
    pytester.makepyfile(test_gated=CASE)
    monkeypatch.setenv("GPU_FP", gpu_part(monkeypatch))
    recorded = pytester.runpytest("--specdec-cpu", "-p", "no:cacheprovider", "--specdec-update-baselines")
    recorded.assert_outcomes(passed=1)
    (path,) = (pytester.path / "baselines").glob("*.json")
    assert json.loads(path.read_text())["fingerprint"]["gpus"][0]["uuid"] == H100  # the servers' GPU 1
    return pytester


@pytest.mark.parametrize(
    "case, gpu, devices, probe, named",
    [
        (
            "power cap",
            FakeGpu(H100, power_limit_mw=350_000),
            ("1",),
            {"matmul_tflops": 390.0},
            "*machine: another machine: GPU 1 power limit (W) 700.0 then, 350.0 now*",
        ),
        (
            "MIG slice",
            FakeGpu(H100, mig={"MIG-h100-1g": ("1g.10gb", 9856, 1)}),
            ("MIG-h100-1g",),
            {"matmul_tflops": 90.0},
            "*machine: another machine: GPU 1 MIG profile None then, '1g.10gb' now*",
        ),
        (
            "locked clocks",
            None,
            ("1",),
            {"matmul_tflops": 420.0, "clocks_held_by_setting": True},
            "*machine: another machine: GPU 1 clocks held by a setting under load (locked or application clocks) "
            "False then, True now*",
        ),
    ],
)
def test_a_cap_a_slice_or_locked_clocks_is_another_machine_never_the_engine(
    gpu_gated, monkeypatch, case, gpu, devices, probe, named
):
    monkeypatch.setenv("GPU_FP", gpu_part(monkeypatch, devices, gpu, probe))
    monkeypatch.setenv("REF_SPEED", "0.6")  # the reference 40% slower, the engine unchanged
    monkeypatch.setenv("SD_TPOT", "41.7")
    result = gpu_gated.runpytest("--specdec-cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*[[]partly compared]: another machine: only acceptance-type figures compared*" + named]
    )
    assert "plain decoding regressed" not in result.stdout.str(), case


def test_a_driver_upgrade_with_the_gpu_probe_unchanged_compares_every_figure(gpu_gated, monkeypatch):
    monkeypatch.setenv(
        "GPU_FP",
        gpu_part(monkeypatch, driver="570.86.10", cuda=12080, probe={"matmul_tflops": 594.0, "cuda_runtime": "12.9"}),
    )
    monkeypatch.setenv("ENGINE_VERSION", "0.32.0")  # upgraded together with the driver
    monkeypatch.setenv("REF_SPEED", "0.6")
    monkeypatch.setenv("SD_TPOT", "41.7")
    result = gpu_gated.runpytest("--specdec-cpu", "-p", "no:cacheprovider", "--specdec-report", "report")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the reference itself is 40% slower*engine's plain decoding regressed*"])
    (row,) = json.loads((gpu_gated.path / "report" / "results.json").read_text())["results"]
    assert row["regression_not_compared"] == {}
    assert row["regression_comparison"].startswith("same machine: every gated figure compared")
    assert (
        "GPU software changed since the baseline: driver 550.54.15 -> 570.86.10; cuda_driver 12.4 -> 12.8"
        in (row["regression_comparison"])
    )
    assert "GPU probe within its 10% band" in row["regression_comparison"]
