"""The plugin's predictions beside the study's own method, on the study's recorded data.

"Speculative Decoding: Performance or Illusion?" published a simulator with recorded data: for Llama-3.1-8B
on an H100, per output position, how many tokens a step starting there produces when up to 20 tokens are
drafted (n-gram and EAGLE-3; InstructCoder, CNN/DailyMail, ShareGPT, GSM8K), and a step-time model fitted on
that H100.  The data carries no licence file, so it is not in this repository: fetch the simulator's
repository yourself and point this script at its data folder (the one holding ``combined_<dataset>.jsonl``,
or a folder above it).

For each dataset and method it simulates, at batch size 1 with the study's step-time model:

- the study's method: a run at each fixed k = 1..5, and its oracle (each step proposes exactly the span that
  would be accepted, up to 20 tokens);
- runs at k=5 and k=20, handed to the plugin as it reads runs from vLLM: each request's per-step accepted and
  drafted counts (steps where the n-gram matched nothing are not listed, as vLLM lists them), the reference's
  decode step, the SD run's decode and prefill time, and the measured speedup.

and prints the plugin's predictions for k = 1..5 from the k=5 run (its step cost fitted from the k=5 run
alone, and from the k=5 and k=20 runs together), its oracle from the k=20 run, and each one's difference
from the study's method.  Speedups are of throughput over the whole run (tokens / time, prefill included),
the plugin's definition, on both sides.  It also prints the per-request acceptance length both ways: the
plugin's (tokens per drafted step of the k=5 run) and the study's (every output position drafted with 20).

    .venv/bin/python benchmarks/study_predictions.py SIMULATOR/data
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.analysis.acceptance import (  # noqa: E402
    RequestSteps,
    StepTiming,
)
from pytest_specdec.analysis.predictions import (  # noqa: E402
    oracle_speedup,
    predict_speedups,
    run_drafted_step_ms,
)
from pytest_specdec.analysis.step_cost import fit_step_cost  # noqa: E402

DATASETS = ("instructcoder", "cnn", "sharegpt", "gsm8k")
METHODS = {"ngram": "acc_ngram", "eagle3": "acc_eagle"}
# The study's step-time model for Llama-3.1-8B on an H100 (its simulator's fit), in seconds.
TARGET_FIXED, TARGET_PER_TOKEN, TARGET_PER_KV = 5.8859e-3, 2.1010e-5, 3.9265e-8
EAGLE_FIXED, EAGLE_PER_TOKEN, EAGLE_PER_KV = 2.1353e-3, 8.4143e-7, 2.3777e-9
NGRAM_SHARE = 0.005875  # n-gram drafting as a share of the verification pass
STEP_OVERHEAD = 1.2068e-3
# The study's chance that the n-gram matches something at a position where nothing would be accepted.
NGRAM_MATCH = {"sharegpt": 0.2, "cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}
STUDY_K = 20
SEED = 42


@dataclass
class Request:
    prompt_len: int
    spans: list[int]  # tokens a step starting at each output position produces with up to 20 drafted


@dataclass
class SimulatedRun:
    latency_s: list[float]
    ttft_s: list[float]
    steps: list[RequestSteps]

    def tokens(self, requests) -> int:
        return sum(len(r.spans) for r in requests)


def load(folder: Path, dataset: str, key: str) -> list[Request]:
    matches = sorted(folder.rglob(f"combined_{dataset}.jsonl"))
    if not matches:
        raise SystemExit(f"{folder}: no combined_{dataset}.jsonl under it (the simulator's data folder?)")
    out = []
    with matches[0].open() as handle:
        for line in handle:
            record = json.loads(line)
            spans = (record.get(key) or record.get("acc") or {}).get("acc_len")
            if spans:
                out.append(Request(len(record["prompt_token_ids"]), list(spans)))
    return out


def verify_s(kv: int, tokens: int) -> float:
    return kv * TARGET_PER_KV + tokens * TARGET_PER_TOKEN + TARGET_FIXED


def draft_s(method: str, verify: float, kv: int, tokens: int) -> float:
    if method == "ngram":
        return verify * NGRAM_SHARE if tokens > 1 else 0.0
    return kv * EAGLE_PER_KV + tokens * EAGLE_PER_TOKEN + EAGLE_FIXED


def reference(requests: list[Request]) -> SimulatedRun:
    latencies, ttfts = [], []
    for request in requests:
        kv = request.prompt_len + 1
        ttft = verify_s(0, request.prompt_len) + STEP_OVERHEAD
        decode = 0.0
        for _ in range(len(request.spans) - 1):
            decode += verify_s(kv, 1) + STEP_OVERHEAD
            kv += 1
        latencies.append(ttft + decode)
        ttfts.append(ttft)
    return SimulatedRun(latencies, ttfts, [])


def speculative(requests: list[Request], method: str, dataset: str, k: int | None) -> SimulatedRun:
    """A run at fixed k (None: the study's oracle), as the study's simulator steps it at batch size 1."""
    rng = random.Random(SEED)
    latencies, ttfts, steps = [], [], []
    for request in requests:
        kv = request.prompt_len + 1
        ttft = verify_s(0, request.prompt_len) + STEP_OVERHEAD
        latency, produced, accepted, drafted = ttft, 1, [], []
        while produced < len(request.spans):
            span = request.spans[produced - 1]
            unmatched = k is not None and method == "ngram" and span == 1 and not rng.random() < NGRAM_MATCH[dataset]
            inputs = 1 if unmatched else (k + 1 if k is not None else span)
            verify = verify_s(kv, inputs)
            latency += verify + draft_s(method, verify, kv, inputs) + STEP_OVERHEAD
            tokens = min(span, inputs)
            if inputs > 1:
                accepted.append(tokens - 1)
                drafted.append(inputs - 1)
            produced += tokens
            kv += tokens
        latencies.append(latency)
        ttfts.append(ttft)
        steps.append(RequestSteps(tuple(accepted), tuple(drafted), len(request.spans), "server"))
    return SimulatedRun(latencies, ttfts, steps)


def speedup(ref: SimulatedRun, sd: SimulatedRun) -> float:
    return sum(ref.latency_s) / sum(sd.latency_s)  # the same tokens on both sides: throughput's ratio


def timing(requests: list[Request], ref: SimulatedRun, sd: SimulatedRun, k: int) -> StepTiming:
    decode_tokens = sum(len(r.spans) - 1 for r in requests)
    return StepTiming(
        reference_step_ms=1000 * sum(lat - ttft for lat, ttft in zip(ref.latency_s, ref.ttft_s)) / decode_tokens,
        sd_decode_ms=1000 * sum(lat - ttft for lat, ttft in zip(sd.latency_s, sd.ttft_s)),
        sd_prefill_ms=1000 * sum(sd.ttft_s),
        k=k,
    )


def span_blind(steps: list[RequestSteps], timing: StepTiming, measured: float, cost) -> dict[int, float]:
    """The model before spans: a cut span counted as fresh average steps, ``T / mean(min(a, k') + 1)``."""
    accepted = [a for s in steps for a in s.accepted]
    tokens = sum(a + 1 for a in accepted)
    outside = timing.sd_prefill_ms + sum(s.undrafted_steps for s in steps) * timing.reference_step_ms

    def time(k: int) -> float:
        return outside + tokens / statistics.fmean(min(a, k) + 1 for a in accepted) * cost.ms(k)

    return {k: measured * time(timing.k) / time(k) for k in range(1, timing.k + 1)}


def compare(folder: Path, dataset: str, method: str) -> dict:
    requests = load(folder, dataset, METHODS[method])
    ref = reference(requests)
    study = {k: speedup(ref, speculative(requests, method, dataset, k)) for k in range(1, 6)}
    study_oracle = speedup(ref, speculative(requests, method, dataset, None))
    run5, run20 = (speculative(requests, method, dataset, k) for k in (5, STUDY_K))
    t5, t20 = timing(requests, ref, run5, 5), timing(requests, ref, run20, STUDY_K)
    always = method != "ngram"
    points = {5: run_drafted_step_ms(run5.steps, t5), STUDY_K: run_drafted_step_ms(run20.steps, t20)}
    one_k = fit_step_cost(t5.reference_step_ms, {5: points[5]}, drafter_always_runs=always)
    two_k = fit_step_cost(t5.reference_step_ms, points, drafter_always_runs=always)
    plugin_one = predict_speedups(run5.steps, t5, speedup(ref, run5), one_k)
    plugin_two = predict_speedups(run5.steps, t5, speedup(ref, run5), two_k)
    blind5 = span_blind(run5.steps, t5, speedup(ref, run5), two_k)
    one_k20 = fit_step_cost(t20.reference_step_ms, {STUDY_K: points[STUDY_K]}, drafter_always_runs=always)
    blind20 = span_blind(run20.steps, t20, speedup(ref, run20), one_k20)
    oracle20 = oracle_speedup(run20.steps, t20, speedup(ref, run20), two_k)
    oracle5 = oracle_speedup(run5.steps, t5, speedup(ref, run5), two_k)
    plugin_lengths = [1 + statistics.fmean(s.accepted) for s in run5.steps if s.accepted]
    study_lengths = [statistics.fmean(r.spans) for r in requests]
    return {
        "dataset": dataset,
        "method": method,
        "requests": len(requests),
        "study": study,
        "study_oracle": study_oracle,
        "plugin_one_k": plugin_one,
        "plugin_two_k": plugin_two,
        "span_blind_k5": blind5,
        "span_blind_k20": {k: blind20[k] for k in range(1, 6)},
        "oracle_k20": oracle20,
        "oracle_at_k5": oracle5,
        "step_cost": two_k.label,
        "request_length_plugin_mean": statistics.fmean(plugin_lengths),
        "request_length_study_mean": statistics.fmean(study_lengths),
    }


def report(found: dict) -> list[str]:
    rows = [f"{found['dataset']} / {found['method']} ({found['requests']} requests):"]
    worst = 0.0
    for k in range(1, 6):
        study, one, two = found["study"][k], found["plugin_one_k"][k], found["plugin_two_k"][k]
        worst = max(worst, abs(two / study - 1))
        rows.append(
            f"  k={k}: study {study:.3f}x   plugin (k=5 and k=20 runs) {two:.3f}x ({two / study - 1:+.1%})   "
            f"plugin (k=5 run alone) {one:.3f}x ({one / study - 1:+.1%})"
        )
    blind = ", ".join(
        f"k={k} {found['span_blind_k5'][k] / found['study'][k] - 1:+.1%} / {found['span_blind_k20'][k] / found['study'][k] - 1:+.1%}"
        for k in range(1, 5)
    )
    rows.append(f"  a cut span counted as fresh steps (the earlier model), from the k=5 / k=20 run: {blind}")
    oracle, study_oracle = found["oracle_k20"], found["study_oracle"]
    worst = max(worst, abs(oracle / study_oracle - 1))
    rows.append(
        f"  oracle: study {study_oracle:.3f}x   plugin from the k=20 run {oracle:.3f}x "
        f"({oracle / study_oracle - 1:+.1%})   oracle at k=5 {found['oracle_at_k5']:.3f}x"
    )
    rows.append(f"  step cost: {found['step_cost']}")
    rows.append(
        f"  per-request acceptance length, mean: plugin (tokens per drafted step at k=5) "
        f"{found['request_length_plugin_mean']:.2f}; study (every position, 20 drafted) "
        f"{found['request_length_study_mean']:.2f}"
    )
    rows.append(f"  largest difference from the study's method: {worst:.1%}")
    found["worst"] = worst
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the simulator's data folder (holding combined_<dataset>.jsonl)")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        parser.error(f"{args.data}: not a folder")
    results = []
    for dataset in args.datasets:
        for method in args.methods:
            found = compare(args.data, dataset, method)
            print("\n".join(report(found)), flush=True)
            results.append(found)
    worst = max(r["worst"] for r in results)
    print(f"\nlargest difference over {len(results)} dataset/method pairs: {worst:.1%}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
