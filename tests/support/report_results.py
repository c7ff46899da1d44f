"""A small measured result (n-gram against its reference, two requests) for the report's tests."""

from dataclasses import dataclass, field

from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.engines.counters import SpecDecodeCounters
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs


NGRAM = ServerSpec(
    "m", {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}, server_args=("--enforce-eager",)
)


WORKLOAD = {"name": "code_edit", "input_len": 192, "output_len": 64}


PATTERN = {"name": "throughput_low", "request_rate": "inf", "max_concurrency": 1, "num_prompts": 2}


@dataclass
class Rec:
    index: int
    output_tokens: int
    latency: float
    ttft: float = 0.1
    prompt_len: int = 10
    itl: list = field(default_factory=list)
    token_ids: list = field(default_factory=list)
    top_logprobs: list | None = None
    success: bool = True


def run(spec, tok_s, tpot_s, counters=None, token_ids=((1, 2, 3), (4, 5, 6))):
    # 11 tokens per request: TPOT = (latency - ttft) / 10.
    records = [Rec(i, 11, 0.1 + 10 * tpot_s, token_ids=list(ids)) for i, ids in enumerate(token_ids)]
    return Run(spec, 0, summarize(records, duration_s=22 / tok_s), records, counters, ["vllm"], 0.0)


def result(sd_tok_s=45.0, sd_ids=((1, 2, 3), (4, 5, 6))):
    # 10 drafts of k=4, 30 accepted: acceptance length 1 + 30/10 = 4.0, rate 30/40.
    counters = SpecDecodeCounters(10, 40, 30, {0: 10, 1: 9, 2: 7, 3: 4})
    ref, sd = run(NGRAM.reference(), 30.0, 0.030), run(NGRAM, sd_tok_s, 0.020, counters, sd_ids)
    return SpecDecResult(
        NGRAM,
        WORKLOAD,
        PATTERN,
        [ref],
        [sd],
        compare_outputs(ref.records, sd.records),
        {"bench": "vllm bench serve --model m"},
    )
