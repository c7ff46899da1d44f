"""A concurrency sweep built from constructed runs: four levels, per draw each side's per-user speed and throughput
(the reference trades per-user speed for throughput; SD is faster per user and, scaled, more productive)."""

from pytest_specdec.analysis.metrics import summarize
from pytest_specdec.engines.server_spec import ServerSpec
from pytest_specdec.measure.result import Run, SpecDecResult, compare_outputs
from pytest_specdec.measure.sweep import SweepResult

SPEC = ServerSpec("m", {"method": "ngram", "num_speculative_tokens": 4})
TOKENS = 10


class Rec:
    """A request of 10 tokens whose TPOT is `tpot_s` (TTFT 0.1 s)."""

    def __init__(self, index, tpot_s):
        self.index, self.prompt_len, self.output_tokens, self.success = index, 8, TOKENS, True
        self.ttft, self.itl, self.latency, self.dispatch_lag = 0.1, [tpot_s] * (TOKENS - 1), 0.1 + 9 * tpot_s, 0.0
        self.token_ids, self.text, self.top_logprobs = list(range(TOKENS)), "x", None


def run(spec, draw, tpot_s, tok_s):
    records = [Rec(i, tpot_s) for i in range(4)]
    return Run(spec, draw, summarize(records, 4 * TOKENS / tok_s), records, None, ["vllm"], 0.0)


def level(concurrency, reference, speculative):
    """One level: per draw, (per-user tok/s, tok/s) of each side."""
    refs = [run(SPEC.reference(), d, 1 / u, g) for d, (u, g) in enumerate(reference)]
    sds = [run(SPEC, d, 1 / u, g) for d, (u, g) in enumerate(speculative)]
    outputs = compare_outputs(refs[0].records, sds[0].records)
    return SpecDecResult(
        SPEC,
        {"name": "w"},
        {"name": f"concurrency_{concurrency}", "max_concurrency": concurrency},
        refs,
        sds,
        outputs,
        {},
        outputs_per_repeat=[outputs] * len(refs),
    )


WOBBLE = (0.0, 0.01, -0.01, 0.005)


def sweep(sd_scale=1.0, spread=WOBBLE):
    # The reference trades per-user speed for throughput; SD is faster per user and, scaled, more productive.
    ref = {1: (50, 50), 2: (45, 90), 4: (38, 152), 8: (28, 224)}
    sd = {1: (80, 80), 2: (70, 140), 4: (55, 220), 8: (36, 250)}
    return SweepResult(
        [
            level(
                c,
                [(ref[c][0], ref[c][1] * (1 + w)) for w in spread],
                [(sd[c][0], sd_scale * sd[c][1] * (1 - w)) for w in spread],
            )
            for c in (1, 2, 4, 8)
        ]
    )
