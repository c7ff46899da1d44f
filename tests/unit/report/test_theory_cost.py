"""Cost per 1M output tokens only at a stated operating point: saturation or SLO capacity, never an offered load."""

from types import SimpleNamespace

import pytest

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.report.files import report_document, validate_report
from pytest_specdec.report.row.rows import SATURATION, SLO_CAPACITY, operating_point, row_for
from pytest_specdec.report.tables import csv_text, markdown_summary

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
PRICE = 3.6  # USD per GPU hour: 1e6 / tok_s * 3.6 / 3600 = 1000 / tok_s


class Rec:
    def __init__(self, index):
        self.index, self.prompt_len, self.output_tokens, self.success = index, 8, 11, True
        self.ttft, self.latency, self.itl = 0.1, 0.1 + 10 * 0.02, [0.02] * 10
        self.token_ids, self.text, self.top_logprobs = list(range(11)), "x", None


def result(pattern, ref_tok_s=40.0, sd_tok_s=50.0):
    records = [Rec(i) for i in range(4)]  # 44 output tokens
    ref = Run(SPEC.reference(), 0, summarize(records, 44 / ref_tok_s), records, None, ["v"], 0.0)
    sd = Run(SPEC, 0, summarize(records, 44 / sd_tok_s), records, None, ["v"], 0.0)
    outputs = compare_outputs(records, records)
    return SpecDecResult(SPEC, {"name": "w"}, pattern, [ref], [sd], outputs, {}, outputs_per_repeat=[outputs])


def row(pattern, **kwargs):
    r = result(pattern, **kwargs)
    return row_for("t.py::test", SPEC, r.workload, pattern, outcome="passed", result=r, gpu_usd_per_hour=PRICE)


def test_an_open_loop_below_saturation_is_not_priced_and_says_at_what_load():
    # 2 req/s offered: both sides deliver what is offered, so 40 and 50 tok/s price the load, not the server.
    out = row({"name": "poisson", "request_rate": 2.0, "max_concurrency": None, "num_prompts": 4})
    assert out["reference_usd_per_1m_tokens"] is None and out["speculative_usd_per_1m_tokens"] is None
    assert out["cost_operating_point"] is None
    why = out["unavailable"]["speculative_usd_per_1m_tokens"]
    assert why.startswith("open loop at 2 req/s offered: below saturation both sides' tok/s is the offered load")
    assert "speculative_usd_per_1m_tokens: open loop at 2 req/s offered" in markdown_summary([out])
    assert csv_text([out]).splitlines()[1].split(",")[-3:] == ["unavailable", "unavailable", ""]
    validate_report(report_document([out]), "results.json")


def test_a_closed_loop_at_rate_inf_is_priced_at_saturation_and_labelled():
    # Request rate inf, 32 in flight: the server's own throughput; $3.6/h at 40 tok/s = 1000 / 40 = $25.00
    # per 1M tokens, at 50 tok/s $20.00.
    out = row({"name": "throughput_high", "request_rate": "inf", "max_concurrency": 32, "num_prompts": 4})
    assert out["reference_usd_per_1m_tokens"] == pytest.approx(25.0)
    assert out["speculative_usd_per_1m_tokens"] == pytest.approx(20.0)
    assert out["cost_operating_point"] == SATURATION
    assert out["cost_operating_point_detail"].startswith("closed loop, 32 requests in flight (request rate inf)")
    text = markdown_summary([out])
    assert "| t.py::test | saturation: closed loop, 32 requests in flight" in text and "| 25.000 | 20.000 |" in text
    assert operating_point({"request_rate": float("inf"), "num_prompts": 8})[1].startswith(
        "closed loop, all 8 prompts at once"
    )
    assert operating_point({})[0] is None  # a pattern that states no rate is not assumed saturated


def test_a_capacity_search_is_priced_at_each_sides_slo_capacity():
    reference = SimpleNamespace(as_dict=lambda: {"capacity": 4.0, "status": "found", "probes": []})
    speculative = SimpleNamespace(as_dict=lambda: {"capacity": None, "status": "not_reached", "probes": []})
    found = SimpleNamespace(
        capacity_ratio=lambda: float("nan"),
        pattern={"search": "request_rate"},
        percentile=99.0,
        slo={"tpot": 50.0},
        ratio_note=lambda: "SD not reached",
        reference=reference,
        speculative=speculative,
        reproduce={},
        unavailable=lambda name: "SD not reached",
        cost_per_million=lambda side, usd: 1e6 / 80.0 * usd / 3600 if side == "reference" else None,
    )
    out = row_for(
        "t.py::cap",
        SPEC,
        {"name": "w"},
        {"name": "slo_capacity"},
        outcome="failed",
        result=found,
        gpu_usd_per_hour=PRICE,
    )
    assert out["cost_operating_point"] == SLO_CAPACITY
    assert out["reference_usd_per_1m_tokens"] == pytest.approx(12.5)  # 1000 / 80 tok/s at capacity
    assert (
        out["unavailable"]["speculative_usd_per_1m_tokens"] == "the speculative side reached no SLO capacity to price"
    )
