"""One name per concept: derived metric names and directions, the sign of a change,
deprecated spellings, and files written by pytest-specdec 0.1 (schema version 1)."""

import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from pytest_specdec.config.settings import SpecdecDeprecationWarning
from pytest_specdec.verdict.metric_names import (
    canonical_metric,
    derived_metrics,
    higher_is_better,
    relative_change,
    speedup,
    speedup_metric,
    speedup_name,
)
from pytest_specdec.report.files import load_report, validate_report
from pytest_specdec.verdict.gate.baselines import SCHEMA_VERSION, load_baseline
from pytest_specdec.verdict.tolerances import canonical_keys, parse_tolerance_lines

V1 = Path(__file__).resolve().parents[2] / "data" / "v1"
V1_TEST = "examples/cpu/test_cpu_specdec.py::test_ngram_pays_on_code_edits"


def test_speedup_names_drop_the_unit_and_map_back():
    assert speedup_name("output_throughput") == "speedup_output_throughput"
    assert speedup_name("median_tpot_ms") == "speedup_median_tpot"
    assert speedup_metric("speedup_median_tpot") == "median_tpot_ms"
    assert speedup_metric("speedup_output_throughput") == "output_throughput"
    with pytest.raises(ValueError):
        speedup_metric("median_tpot_ms")


def test_speedup_and_change_read_the_same_way_for_every_metric():
    assert speedup("output_throughput", 10.0, 15.0) == pytest.approx(1.5)
    assert speedup("median_tpot_ms", 30.0, 20.0) == pytest.approx(1.5)  # reference / SD for latencies
    assert math.isnan(speedup("median_tpot_ms", 30.0, math.nan)) and math.isnan(speedup("output_throughput", 0, 5))
    # A change is positive when things got better, whatever the metric's direction.
    assert relative_change("output_throughput", 11.0, 10.0) == pytest.approx(0.10)
    assert relative_change("median_tpot_ms", 11.0, 10.0) == pytest.approx(10 / 11 - 1)
    assert relative_change("speedup_median_tpot", 1.0, 2.0) == pytest.approx(-0.5)  # a halved speedup is a loss
    assert relative_change("median_tpot_ms", 5.0, 5.0) == 0.0


def test_derived_metrics_are_one_speedup_per_headline_metric():
    ref = {"output_throughput": 20.0, "median_tpot_ms": 40.0, "median_ttft_ms": 100.0, "median_e2el_ms": 2000.0}
    sd = {"output_throughput": 30.0, "median_tpot_ms": 20.0, "median_ttft_ms": 125.0, "median_e2el_ms": 1000.0}
    assert derived_metrics(ref, sd) == pytest.approx(
        {
            "speedup_output_throughput": 1.5,
            "speedup_median_tpot": 2.0,
            "speedup_median_ttft": 0.8,
            "speedup_median_e2el": 2.0,
        }
    )
    assert all(higher_is_better(name) for name in derived_metrics(ref, sd))


def test_old_speedup_spellings_still_work_with_a_warning():
    with pytest.warns(SpecdecDeprecationWarning, match="speedup_median_tpot_ms.*speedup_median_tpot"):
        assert canonical_metric("speedup_median_tpot_ms") == "speedup_median_tpot"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert canonical_metric("median_tpot_ms") == "median_tpot_ms"  # a run metric keeps its unit
    with pytest.warns(SpecdecDeprecationWarning):
        assert canonical_keys({"speedup_median_ttft_ms": 0.2}) == {"speedup_median_ttft": 0.2}
    with pytest.warns(SpecdecDeprecationWarning):
        assert parse_tolerance_lines(["speedup_median_tpot_ms = 0.2"]) == {"speedup_median_tpot": 0.2}


def test_old_module_paths_import_the_new_modules_with_a_warning(monkeypatch):
    import pytest_specdec
    import pytest_specdec.analysis.theory as theory

    monkeypatch.delitem(sys.modules, "pytest_specdec.theory", raising=False)
    monkeypatch.delattr(pytest_specdec, "theory", raising=False)

    with pytest.warns(SpecdecDeprecationWarning, match="pytest_specdec.theory moved to pytest_specdec.analysis.theory"):
        from pytest_specdec import theory as old  # noqa: F401 - the import is the test
    assert old is theory and old.__spec__.name == "pytest_specdec.analysis.theory"


@pytest.mark.parametrize(
    "old, new",
    [
        ("measure.counters", "engines.counters"),
        ("measure.derived", "verdict.metric_names"),
        ("report.progress", "measure.progress"),
        ("load.replay", "measure.replay"),
        # Documented paths (docs/goodput.md, docs/reports.md) from before the analyses had a folder of their own.
        ("measure.dynamic_k", "analysis.dynamic_k"),
        ("measure.theory", "analysis.theory"),
        ("measure.analysis", "analysis.inside_acceptance"),
    ],
)
def test_a_module_moved_between_layers_still_imports_by_its_old_path_with_a_warning(monkeypatch, old, new):
    import importlib

    monkeypatch.delitem(sys.modules, f"pytest_specdec.{old}", raising=False)
    with pytest.warns(SpecdecDeprecationWarning, match=f"pytest_specdec.{old} moved to pytest_specdec.{new}"):
        module = importlib.import_module(f"pytest_specdec.{old}")
    assert module is importlib.import_module(f"pytest_specdec.{new}")


def test_a_version_1_baseline_is_read_as_version_2(tmp_path):
    shutil.copy(V1 / "baseline.json", tmp_path / "stored.json")
    stored = json.loads((tmp_path / "stored.json").read_text())
    assert stored["schema_version"] == 1 and "speedup_median_tpot_ms" in stored["repeats"][0]["derived"]
    from pytest_specdec.verdict.gate.baselines import baseline_filename

    (tmp_path / "stored.json").rename(tmp_path / baseline_filename(V1_TEST))
    baseline = load_baseline(tmp_path, V1_TEST)
    assert baseline.migrated_from == 1 and baseline.schema_version == SCHEMA_VERSION
    old_derived = stored["repeats"][0]["derived"]
    assert baseline.per_repeat("derived", "speedup_median_tpot") == [
        r["derived"]["speedup_median_tpot_ms"] for r in stored["repeats"]
    ]
    assert baseline.per_repeat("derived", "speedup_output_throughput")[0] == old_derived["speedup_output_throughput"]
    assert baseline.per_repeat("derived", "speedup_median_tpot_ms") == [None] * len(stored["repeats"])
    assert baseline.tolerances == stored["tolerances"]  # no speedup-with-unit keys in this file
    # Read only: the file on disk is left as it was recorded.
    assert json.loads((tmp_path / baseline_filename(V1_TEST)).read_text()) == stored


def test_a_version_1_report_is_read_as_version_2(tmp_path):
    shutil.copy(V1 / "results.json", tmp_path / "results.json")
    old = json.loads((tmp_path / "results.json").read_text())
    assert old["schema_version"] == 1
    document = load_report(tmp_path)
    assert document["schema_version"] == 3 and document["migrated_from"] == 1
    for before, after in zip(old["results"], document["results"]):
        assert after["speedup_output_throughput"] == before["speedup"]
        assert after["speedup_median_tpot"] == before["speedup_tpot"]
        assert after["speedup_median_ttft"] == before["speedup_ttft"]
        assert "tpot_change" not in after and "speedup" not in after
        ref, sd = before["reference"]["median_e2el_ms"], before["speculative"]["median_e2el_ms"]
        assert after["speedup_median_e2el"] == pytest.approx(ref / sd)
    validate_report({k: v for k, v in document.items() if k != "migrated_from"}, "migrated")


def test_merging_a_version_1_shard_says_it_was_read_as_the_current_version(tmp_path, capsys):
    from pytest_specdec.cli import merge_main

    (tmp_path / "shard").mkdir()
    shutil.copy(V1 / "results.json", tmp_path / "shard" / "results.json")
    assert merge_main([str(tmp_path / "merged"), str(tmp_path / "shard")]) == 0
    out = capsys.readouterr().out
    assert f"note: {tmp_path / 'shard' / 'results.json'}: schema version 1, read as version 3" in out
    assert load_report(tmp_path / "merged")["schema_version"] == 3


def test_a_version_1_baseline_gets_a_note_in_the_gate(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import pytest_specdec.verdict.gate.regression as gate_module
    from pytest_specdec.verdict.gate.baselines import baseline_filename

    stored = json.loads((V1 / "baseline.json").read_text())
    (tmp_path / baseline_filename(V1_TEST)).write_text(json.dumps(stored))
    gate = gate_module.RegressionGate(
        gate_module.BaselineSession(tmp_path, update=False, fingerprint=stored["fingerprint"]), V1_TEST
    )
    monkeypatch.setattr(gate_module, "repeat_seeds", lambda result: stored["config"].get("repeat_seeds"))
    result = SimpleNamespace(repeats=lambda: stored["repeats"], unavailable=lambda metric: None)
    gate.check(result, metrics=["speedup_output_throughput"])
    assert "schema version 1, read as version 2; --specdec-update-baselines rewrites it" in gate.last_report
