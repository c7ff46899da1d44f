"""Inner pytester projects whose tests build `SpecDecResult`s from given figures (no server, no measurement).

The gate, the report and the history are under test with these; measurements are tested on real servers.
"""

# Builds results with chosen throughput, TPOT and acceptance; `repeats`
# figures per side let the statistics see noise.
RESULTS_CONFTEST = '''
import os
import pytest
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs


class Rec:
    def __init__(self, index, tokens, tpot_s, token_ids, logprobs=None, ttft=0.05):
        self.index, self.prompt_len, self.output_tokens = index, 16, tokens
        self.ttft, self.itl, self.latency = ttft, [tpot_s] * (tokens - 1), ttft + tpot_s * (tokens - 1)
        self.token_ids, self.top_logprobs, self.success = token_ids, logprobs, True


def run(spec, throughput, tpot_ms, accepted=None, outputs=None, logprobs=None, ttft=0.05):
    outputs = outputs or [[1, 2, 3, 4]] * 4
    records = [Rec(i, 5, tpot_ms / 1000, ids, logprobs, ttft) for i, ids in enumerate(outputs)]
    metrics = summarize(records, duration_s=sum(r.output_tokens for r in records) / throughput)
    counters = None if accepted is None else SpecDecodeCounters(100, 400, accepted, {0: accepted * 0.4,
                                                                              1: accepted * 0.3,
                                                                              2: accepted * 0.2,
                                                                              3: accepted * 0.1})
    return Run(spec, 0, metrics, records, counters, ["vllm", "serve", spec.model], 0.0)


@pytest.fixture
def make_result(specdec):
    def make(ref=(30.0,), sd=(45.0,), ref_tpot=(33.0,), sd_tpot=(22.0,), accepted=(240.0,),
             ref_outputs=None, sd_outputs=None, logprobs=None, sd_ttft=0.05):
        reference = [run(specdec.reference_spec, t, p, outputs=ref_outputs, logprobs=logprobs)
                     for t, p in zip(ref, ref_tpot)]
        speculative = [run(specdec.spec, t, p, a, outputs=sd_outputs, ttft=sd_ttft)
                       for t, p, a in zip(sd, sd_tpot, accepted)]
        result = SpecDecResult(specdec.spec, {"name": "code_edit"}, {"name": "throughput_low"}, reference,
                               speculative, compare_outputs(reference[0].records, speculative[0].records,
                                                            decode=lambda ids: " ".join(map(str, ids))),
                               {"reference_server": "vllm serve m", "speculative_server": "vllm serve m --speculative-config {}",
                                "bench": "vllm bench serve --model m"},
                               server_log="/tmp/server.log")
        result.gate = specdec.gate
        specdec.results.append(result)
        return result
    return make
'''

MARKS = '''
import pytest
pytestmark = [
    pytest.mark.specdec(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4}),
    pytest.mark.workload("code_edit"),
    pytest.mark.access_pattern("throughput_low"),
]
'''
