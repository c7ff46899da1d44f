import math

import pytest

from pytest_specdec.engines.counters import MetricsParseError, parse_prometheus
from pytest_specdec.engines.vllm import spec_decode_counters

# Two models on one server, two engines for one of them, per-position counters.
SCRAPE_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="target"} 5.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 99.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 60.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 20.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="other"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 8.0
vllm:generation_tokens_total{engine="0",model_name="target"} 1.0e2
"""
SCRAPE_AFTER = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 30.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="target"} 5.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 500.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 100.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 50.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="other"} 300.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 20.0
"""


def test_delta_is_for_one_model_summed_over_engines():
    before = spec_decode_counters(parse_prometheus(SCRAPE_BEFORE), "target")
    after = spec_decode_counters(parse_prometheus(SCRAPE_AFTER), "target")
    assert before.num_drafts == 15.0
    delta = after - before
    assert (delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens) == (20.0, 40.0, 30.0)
    assert delta.accepted_per_position == {0: 18.0, 1: 12.0}
    assert delta.acceptance_rate == pytest.approx(30 / 40)
    assert delta.acceptance_length == pytest.approx(1 + 30 / 20)
    assert delta.per_position_rate == pytest.approx([18 / 20, 12 / 20])


def test_model_without_sd_counters_is_marked_absent_not_zero():
    counters = spec_decode_counters(parse_prometheus(SCRAPE_BEFORE), "no-such-model")
    assert not counters.present
    assert math.isnan(counters.acceptance_rate) and math.isnan(counters.acceptance_length)


def test_labels_with_escapes_and_timestamps():
    (sample,) = parse_prometheus('m{a="x\\"y",b="1\\\\2"} 3 1700000000\n')
    assert sample.label("a") == 'x"y' and sample.label("b") == "1\\2" and sample.value == 3.0


@pytest.mark.parametrize("bad", ["just words here", 'm{a=1} 2', "m notanumber"])
def test_malformed_lines_name_the_line(bad):
    with pytest.raises(MetricsParseError, match="line 2"):
        parse_prometheus("ok 1\n" + bad + "\n")
