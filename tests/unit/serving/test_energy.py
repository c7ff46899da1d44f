"""Energy counters read around each run: a fake NVML as strict as nvidia-ml-py, a RAPL tree in a folder.

This machine exposes neither (no NVIDIA GPU, no /sys/class/powercap): the real paths are checked to say so,
and the meters are checked by construction.
"""

import sys
import types

import pytest

from pytest_specdec.analysis.energy_figures import describe_energy, energy_figures
from pytest_specdec.serving.energy import POWERCAP, EnergyReading, NvmlEnergy, RaplEnergy, energy_meter

FAKE_NVML = "specdec_fake_pynvml"


class NVMLError(Exception):
    pass


def fake_nvml(energy_mj: dict[int, list[int]], *, supported=True):
    """A pynvml stand-in: nvmlInit first (as the real library requires), integer indices in range, handles
    from nvmlDeviceGetHandleByIndex only, and each GPU's counter read in turn from `energy_mj`."""
    state = {"init": False}
    module = types.ModuleType(FAKE_NVML)

    def need_init():
        if not state["init"]:
            raise NVMLError("Uninitialized")

    def nvmlInit():
        state["init"] = True

    def nvmlDeviceGetCount():
        need_init()
        return len(energy_mj)

    def nvmlDeviceGetHandleByIndex(index):
        need_init()
        if not isinstance(index, int) or index not in energy_mj:
            raise NVMLError("Invalid Argument")
        return ("handle", index)

    def nvmlDeviceGetTotalEnergyConsumption(handle):
        need_init()
        if not (isinstance(handle, tuple) and handle[0] == "handle"):
            raise NVMLError("Invalid Argument")
        if not supported:
            raise NVMLError("Not Supported")
        return energy_mj[handle[1]].pop(0)

    for function in (nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetTotalEnergyConsumption):
        setattr(module, function.__name__, function)
    return module


@pytest.fixture
def nvml(monkeypatch):
    def install(energy_mj, **kwargs):
        monkeypatch.setitem(sys.modules, FAKE_NVML, fake_nvml(energy_mj, **kwargs))
        return energy_meter("gpu", nvml_module=FAKE_NVML)

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_nvml_sums_the_visible_gpus_between_two_reads(nvml, monkeypatch):
    # The probe read at discovery, then one read before and one after the run: millijoules.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    meter = nvml({0: [0, 0, 0], 1: [5_000, 10_000, 310_000]})
    assert isinstance(meter, NvmlEnergy) and meter.source.startswith("NVML total energy of GPU 1")
    stop = meter.start()
    assert stop() == EnergyReading(300.0, meter.source)


def test_a_gpu_without_an_energy_counter_says_so(nvml):
    assert nvml({0: [1]}, supported=False) == "NVML: Not Supported"


def test_without_nvidia_ml_py_the_reason_names_the_package():
    assert "nvidia-ml-py package is not installed" in energy_meter("gpu", nvml_module="specdec_no_such_module")


def rapl_tree(root, packages):
    for name, (energy_uj, max_uj) in packages.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "energy_uj").write_text(f"{energy_uj}\n")
        (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
        (folder / "name").write_text(f"package-{name[-1]}\n")
    (root / "intel-rapl:0:0").mkdir()  # a subdomain (the cores): counted inside its package, never twice
    return root


def test_rapl_reads_packages_and_handles_the_counter_wrapping(tmp_path):
    root = rapl_tree(tmp_path, {"intel-rapl:0": (1_000_000, 262_143_328_850), "intel-rapl:1": (2_000_000, 10_000_000)})
    meter = energy_meter("cpu", powercap=root)
    assert isinstance(meter, RaplEnergy) and [p.name for p in meter.packages] == ["intel-rapl:0", "intel-rapl:1"]
    stop = meter.start()
    (root / "intel-rapl:0" / "energy_uj").write_text("31000000\n")  # +30 J
    (root / "intel-rapl:1" / "energy_uj").write_text("1000000\n")  # wrapped at 10 J: 8 J + 1 J = +9 J
    reading = stop()
    assert reading.joules == pytest.approx(39.0) and reading.problem is None


def test_rapl_unreadable_or_absent_is_a_reason(tmp_path):
    assert energy_meter("cpu", powercap=tmp_path / "missing").startswith("RAPL: no ")
    assert "no CPU package" in energy_meter("cpu", powercap=tmp_path)
    root = rapl_tree(tmp_path / "tree", {"intel-rapl:0": (1, 10)})
    (root / "intel-rapl:0" / "energy_uj").write_text("not a number\n")
    assert energy_meter("cpu", powercap=root).startswith("RAPL: ")


def test_this_machine_says_what_it_offers():
    reason = energy_meter("cpu")
    if POWERCAP.is_dir():  # a box with RAPL gets a meter or the reason it cannot read it
        assert isinstance(reason, RaplEnergy) or reason.startswith("RAPL: ")
    else:
        assert reason == f"RAPL: no {POWERCAP} (this kernel or VM exposes no power-capping counters)"


class Rec:
    def __init__(self, tokens):
        self.output_tokens, self.success = tokens, True


class Run:
    def __init__(self, joules, tokens=100, problem=None):
        self.records = [Rec(tokens // 2), Rec(tokens - tokens // 2)]
        self.energy = EnergyReading(joules, "RAPL energy of CPU package intel-rapl:0", problem)


class Result:
    def __init__(self, pairs):
        self._pairs = pairs

    def repeat_pairs(self):
        return self._pairs


def test_energy_per_token_and_the_ratio_pair_the_repeats():
    # Repeat 1: 0.50 and 0.40 J per token (0.8x); repeat 2: 0.60 and 0.66 (1.1x); repeat 3: 0.55 and 0.55 (1x).
    result = Result([(Run(50.0), Run(40.0)), (Run(60.0), Run(66.0)), (Run(55.0), Run(55.0))])
    figures = energy_figures(result)
    assert figures["reference_j_per_token"] == pytest.approx(0.55)
    assert figures["speculative_j_per_token"] == pytest.approx(0.55)
    assert figures["ratio"] == pytest.approx(1.0) and figures["unavailable"] is None
    assert describe_energy(figures).startswith("0.55 J per output token without SD, 0.55 J with (1.00x")


def test_one_unread_side_makes_the_figures_unavailable_with_its_reason():
    result = Result([(Run(50.0), Run(None, problem="RAPL: the second read failed: EIO"))])
    figures = energy_figures(result)
    assert figures["ratio"] is None and figures["unavailable"] == "RAPL: the second read failed: EIO"
    assert describe_energy(figures) == "unavailable: RAPL: the second read failed: EIO"
