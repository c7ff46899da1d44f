"""A capacity ratio that is a bound is exported as a bound: null value, the bound and its direction in
fields of their own, in results.json rows, results.csv, JUnit properties and the history (issue 27)."""

import csv
import io
import math

from pytest_specdec.history.records import figures_of
from pytest_specdec.measure.capacity.search import CapacitySearch, Probe, search_capacity
from pytest_specdec.measure.capacity.slo import CapacityResult
from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.report.exports import junit_properties
from pytest_specdec.report.row.rows import row_for
from pytest_specdec.report.tables import csv_text

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
PATTERN = {"name": "slo_capacity", "search": "request_rate", "max_load": 16.0, "bracket_probes": 8}


def capacity(true: float):
    plan = CapacitySearch("request_rate", start=1.0, max_load=16.0)
    return search_capacity(lambda load: Probe(load, load <= true, {"reason": "synthetic"}), plan)


def rows_of(result):
    return [row_for("t.py::test_capacity", SPEC, {"name": "w"}, dict(PATTERN), outcome="passed", result=result)]


def test_a_lower_bound_is_exported_as_a_bound_everywhere():
    result = CapacityResult(SPEC, {"name": "w"}, dict(PATTERN), {"tpot": 50.0}, 99.0, capacity(9.0), capacity(40.0))
    assert result.ratio().kind == "lower_bound"
    bound = result.ratio().value
    (row,) = rows_of(result)
    assert row["capacity_ratio"] is None
    assert (row["capacity_ratio_bound"], row["capacity_ratio_bound_direction"]) == (bound, ">=")
    assert row["unavailable"]["capacity_ratio"].startswith("the ratio is >= ")
    (line,) = csv.DictReader(io.StringIO(csv_text([row])))
    assert line["capacity_ratio"] == "unavailable" and float(line["capacity_ratio_bound"]) == bound
    assert line["capacity_ratio_bound_direction"] == ">="
    props = junit_properties(result)
    assert str(props["specdec_capacity_ratio"]).startswith("unavailable: the ratio is >= ")
    assert props["specdec_capacity_ratio_bound"] == round(bound, 4)
    assert props["specdec_capacity_ratio_bound_direction"] == ">="
    assert not [f for f in figures_of([row], {"engine": "vllm"}) if f.metric == "capacity_ratio"]


def test_an_estimate_is_a_value_with_no_bound():
    result = CapacityResult(SPEC, {"name": "w"}, dict(PATTERN), {"tpot": 50.0}, 99.0, capacity(9.0), capacity(12.0))
    assert result.ratio().kind == "estimate"
    (row,) = rows_of(result)
    assert math.isclose(row["capacity_ratio"], result.ratio().value)
    assert row["capacity_ratio_bound"] is None and row["capacity_ratio_bound_direction"] is None
    assert junit_properties(result)["specdec_capacity_ratio_bound_direction"] == "none"
    (figure,) = [f for f in figures_of([row], {"engine": "vllm"}) if f.metric == "capacity_ratio"]
    assert math.isclose(figure.value, result.ratio().value)
