"""Speculative decoding on vLLM's CPU build with the bundled SmolLM2-135M: a suite to copy.

Run it (from the repository root, after ./scripts/setup):

    .venv/bin/python -m pytest examples/cpu --specdec-cpu --specdec-report specdec-report

Four servers start, one at a time: the reference (no SD), n-gram, suffix
decoding and a draft model; each serves every test that names it, and the
reference is measured once per workload for all of them.  On a CPU a server
left for another is parked (paused, its memory kept) and resumed when a
later test comes back to it, instead of started again.  Workloads are
scaled down (a few hundred tokens per run) so the suite takes minutes on two
cores.  `--enforce-eager` skips vLLM's graph compilation: a server is ready
in ~30 s instead of ~80 s, and both sides of every comparison pay the same.

What it shows, as the published studies found on GPUs
(docs/references.md#vllm-methods-guide, Experiment A, Scenario 2: suffix and
n-gram do best on code; docs/references.md#performance-or-illusion, Fig. 1
and Sec. 3.2: what a draft's cost does to the speedup):
- on code edits, whose outputs repeat the prompt, model-free drafting finds
  the continuation (n-gram ~49% of draft tokens accepted, suffix ~55%), and
  suffix decoding pays;
- whether n-gram pays there is the machine's as much as SD's: 1.42x on a
  2-core box whose reference decoded at ~103 ms per token, 1.26x at ~70 ms,
  1.04x at ~58 ms, with the same acceptance (see that test);
- a poor draft model makes SD slower than no SD at all
  (docs/references.md#blackwell-eagle-3, Experiment 2: k=3 lost ~30% to no SD);
and one trap this project measured itself (no study says it), shown on
llama.cpp in test_llamacpp.py: random-token prompts can flatter SD, because
a small model loops on them and the loop is easy to predict.

Baselines for these tests are stored in baselines/ at the repository root.
`assert_no_regression` compares acceptance (rate, length, per request) on
any machine: it is the model's and the algorithm's.  Speedups are compared
only on the recording machine: the same hardware identity and a machine
probe (a fixed matrix multiply, vector arithmetic and memory copy, never the
engine's own speed) within its band (the report says which): the same n-gram
speedup was 2.11x on one box and 1.62x on a faster one with 99.4% accepted
on both.  To gate speedups on your own machine, record there with
--specdec-update-baselines.
"""

import pytest

MODEL = "specdec:smollm2-135m"
EAGER = ["--enforce-eager"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 4}
# The first 8 of SmolLM2's 30 layers: a fifth of the target's cost per token,
# but it predicts the target's next token only ~2-5% of the time.
POOR_DRAFT = {"method": "draft_model", "model": f"{MODEL}@layers=8", "num_speculative_tokens": 3}
RATIOS = ["speedup_output_throughput", "acceptance_rate"]
# The per-request median of tokens per drafted step (from vLLM's per-request metrics): a drafter
# that starts failing on some requests moves it even while the aggregate rate holds.
PER_REQUEST = ["request_acceptance_length_p50"]
GATED = RATIOS + PER_REQUEST

code_edit = pytest.mark.workload("code_edit", input_len=192, output_len=32)
# A poor draft decodes at ~6 tok/s here: half the output keeps its test to a minute.
random_s_short = pytest.mark.workload("random_s", input_len=192, output_len=16)
one_at_a_time = pytest.mark.access_pattern("throughput_low", num_prompts=4)


@pytest.mark.specdec(model=MODEL, speculative_config=NGRAM, server_args=EAGER)
@code_edit
@one_at_a_time
def test_ngram_on_code_edits(specdec):
    result = specdec.run()
    # Code edits repeat most of the prompt, so the n-gram lookup finds the
    # continuation: measured ~49% of draft tokens accepted, ~3 tokens per
    # drafted step, on every box.  What that buys is the machine's: 1.42x where
    # the reference decoded at ~103 ms per token, 1.26x at ~70 ms and 1.04x at
    # ~58 ms (CI; c measured 0.34, the theory's 1.11x at k=4).  SD's own cost
    # per step (the lookup, verifying k+1 positions, the scheduler) weighs more
    # against a faster decode step.  So no speedup is required here: a figure
    # that holds on one box of this kind fails on the next.  The suffix test
    # below makes the claim that SD pays on code edits, and the baseline gates
    # this speedup on a machine of the recording one's speed.
    result.assert_acceptance(min_rate=0.25, min_length=1.8)
    # From this run at k=4, the predicted best draft length (benchmarks/best_k.py checks such
    # predictions against runs at every k): measured here, every k up to 5 paid more than the one
    # below it on code edits, so k=4 is at or next to the best; a k that collapses shows as 1 or 2.
    # (Not gated exactly against the baseline here: k=3 and k=4 were predicted 1% apart.)
    result.assert_best_k(expected={3, 4})
    result.assert_no_regression(metrics=RATIOS + PER_REQUEST)


# The README's first test, as it is there (tests/unit/project/test_readme.py keeps the two the same).
# Suffix decoding's acceptance is not bit-for-bit repeatable on this build: the same prompts gave 54% and 57%
# accepted (1.70x and 1.92x) in two sessions, beyond the 5% acceptance default; the tolerance marker says so.
# Per request (vLLM's per-step arrays), one request in ten below 1.2 tokens per drafted step means suffix
# stopped matching some code edits.
@pytest.mark.specdec(model="specdec:smollm2-135m", speculative_config=SUFFIX, server_args=["--enforce-eager"])
@pytest.mark.workload("code_edit", input_len=192, output_len=32)
@pytest.mark.access_pattern("throughput_low", num_prompts=4)
@pytest.mark.specdec_tolerance(acceptance_rate=0.10, speedup_output_throughput=0.20)
def test_suffix_pays_on_code_edits(specdec):
    result = specdec.run()  # the reference (no SD) and SD, on the same prompts
    result.assert_acceptance(min_rate=0.3, min_length=1.5, min_request_p10_length=1.2)
    result.assert_speedup(min=1.15)  # decided: passed, failed, or undecided with what would decide it
    result.assert_no_regression(metrics=GATED)  # against the baseline stored by --specdec-update-baselines


@pytest.mark.specdec(model=MODEL, speculative_config=POOR_DRAFT, server_args=EAGER)
@random_s_short
@one_at_a_time
def test_a_poor_draft_makes_sd_slower(specdec):
    result = specdec.run()
    # The published lesson: SD can lose.  Every step runs the draft k times
    # and the target over k+1 positions, and almost every draft token is
    # rejected, so each step still yields ~1 token at a higher cost (measured
    # here: 0.3% accepted, 0.44-0.46x; the theory column agrees, 0.45x).  This
    # test fails if that ever stops being true.
    assert result.acceptance_rate < 0.15
    result.assert_speedup(max=0.9)  # a draft that is rarely right cannot pay, decided by the sequential rule
    # No baseline gate.  Acceptance this close to zero moves by 100% with one token, and the speedup is
    # ~1 / (1 + k*c) with c the draft's cost relative to the target's on this CPU: measured 0.48x, 0.40x
    # and 0.34x on three 2-core boxes of the same kind, so a figure stored on one fails on the next (CI
    # measured 0.34x against 0.40x).  What holds everywhere is checked above: SD is slower.


@pytest.mark.specdec(model=MODEL, speculative_config=NGRAM, server_args=EAGER)
# Half the output of the other code-edit tests: each probe is 16 requests, and a probe of 64-token
# outputs at 0.5 requests/s took 40 s on two cores.
@pytest.mark.workload("code_edit", input_len=192, output_len=16)
# Poisson arrivals of 16 code edits from 1 request/s, doubling until a probe fails (halving first
# on a box too slow to hold 1; a 2-core Intel box held 1.09-1.30 on the reference with every probe's
# prompts prefilled in full, and 1.68-2.59 while probes found the same prompts cached), then at
# most three more probes (a bisection and a second run at each end of the bracket). The ceiling
# of 32 requests/s sits far above where a two-core box fails, so a machine several times faster
# still brackets both sides; a side that held up to it would be reported as ">= 32 req/s" and the
# check below would fail as undecidable rather than pass.
@pytest.mark.access_pattern("slo_capacity", search_start=1.0, max_load=32.0, num_prompts=16, bisect_probes=3)
# Relative, not absolute: twice the reference's median TPOT with one request at a time on this
# machine, in this session (an absolute 105 ms held at every load on a faster box, and the search
# never bracketed). Why twice and not more: vLLM admits all 16 requests of a probe into one batch,
# so above ~2 requests/s every probe is 16 requests in flight at once and TPOT stops growing with
# the rate; measured here, that plateau sat at 2.6-3x the unloaded TPOT, so a 3x objective held at
# 8 requests/s and bracketed on noise. At 2x the objective falls where TPOT still climbs with the
# rate (1.6x at 1 request/s, 2.6x at 2, measured here).
@pytest.mark.specdec_slo(tpot_x=2.0, percentile=50)
def test_ngram_slo_capacity_on_code_edits(specdec):
    result = specdec.run()
    print(result.describe())
    # Measured here in two sessions: reference 0.46 requests/s and SD 0.92 (2.0x); reference 1.68 and
    # SD 1.30 (0.77x), each side bracketed to within 10%; with each run's own prefix cache, 1.09 and
    # 1.09 (1.00x), then 1.30 and 1.68 (1.30x) (2026-11-27). One search per side moves the ratio that
    # far with nothing changed (a probe 2% over its objective decides a doubling step), so this
    # check cannot tell "SD costs a little capacity" from noise, and no baseline gates the ratio.
    # Nor can it hold SD to half the reference's load. Loaded, the server batches the requests and each
    # step verifies k+1 = 5 positions per request to yield the acceptance length (2.5-3.3 tokens in the
    # stored n-gram baseline's repeats): where the CPU is the limit, SD carries 0.5-0.65x of the reference's
    # load by that arithmetic alone. A 0.5x check sat on that floor and CI's Intel box could not decide it
    # (0.55x, 0.45-0.66x with probe noise, 2026-11-26). What it does catch: SD costing well beyond what
    # verifying its drafts explains, down to a third of the load the server carries within the objective.
    result.assert_capacity(min_ratio=0.33)
