"""Drivers for the peers `benchmarks/agreement.py` compares the plugin with: GuideLLM and AIPerf.

Each peer runs from its own virtual environment (its executable's path is
given on the command line; a peer that cannot be found is skipped, and the
script says so), against the same server, with the same prompts in the same
order, a fixed output length, greedy decoding and a closed loop of N
requests in flight.  Each driver returns the figures in `vllm bench serve`'s
names and units, and where the peer defines a figure differently, the
difference is stated in DEFINITIONS with the peer's source file named.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# How each peer's figures differ from vllm bench serve's (vllm/benchmarks/serve.py, calculate_metrics).
DEFINITIONS = {
    "GuideLLM": [
        "TPOT: its inter_token_latency_ms, (last token - first token) / (output tokens - 1), is vLLM's TPOT; its "
        "time_per_output_token_ms includes TTFT and is not used (src/guidellm/schemas/request_stats.py)",
        "ITL: it records no per-chunk gaps, so there is no ITL to compare (src/guidellm/schemas/request_stats.py "
        "has first and last token times only)",
        "output throughput: computed here as output tokens / its benchmark duration (scheduler start to last "
        "completion, src/guidellm/benchmark/schemas/benchmark.py); its own rate distribution spreads each "
        "request's tokens over its decode time (src/guidellm/schemas/statistics.py)",
        "TTFT and latency: it skips events with empty text, and its latency ends after [DONE] "
        "(src/guidellm/backends/openai/http.py)",
        "SD counters: it reads none; the counter rows are this script's scrape of /metrics before and after "
        "its run, so they check that the peer sent the same work, not the peer",
    ],
    "AIPerf": [
        "TPOT: its inter_token_latency, (latency - TTFT) / (output tokens - 1), is vLLM's TPOT "
        "(src/aiperf/metrics/types/inter_token_latency_metric.py)",
        "ITL: its inter_chunk_latency pools the gaps between events with text, vLLM's ITL but for empty events "
        "(src/aiperf/metrics/types/inter_chunk_latency_metric.py)",
        "output throughput: output tokens over its benchmark_duration, first send to last token, shorter than "
        "vLLM's window (src/aiperf/metrics/types/benchmark_duration_metric.py)",
        "TTFT: its start includes opening a new aiohttp session per request (src/aiperf/transports/aiohttp_client.py)",
        "output tokens: the server's usage (--use-server-token-count); without it AIPerf re-tokenizes the text "
        "(src/aiperf/metrics/types/output_sequence_length_metric.py)",
        "SD counters: AIPerf scrapes /metrics at ~3 Hz into its own time series (src/aiperf/server_metrics/); "
        "the counter rows are this script's scrape before and after its run, so they check that the peer "
        "sent the same work, not the peer",
    ],
}


class PeerError(RuntimeError):
    """A peer ran but its result could not be read."""


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _run(command: list[str], env: dict, timeout: float) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})
    if done.returncode:
        raise PeerError(f"{Path(command[0]).name} exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")


def guidellm(
    executable: str,
    url: str,
    model: str,
    tokenizer: str,
    prompts,
    concurrency: int,
    work: Path,
    name: str,
    timeout: float = 1800,
) -> dict:
    data = work / f"{name}-guidellm.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p.text, "output_tokens_count": p.output_len}) + "\n" for p in prompts)
    )
    out = work / f"{name}-guidellm.json"
    backend = {
        "kind": "openai_http",
        "target": url,
        "model": model,
        "request_format": "/v1/completions",
        "stream": True,
        "extras": {
            "body": {
                "temperature": 0,
                "return_token_ids": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": False},
            }
        },
    }
    _run(
        [
            executable,
            "run",
            "--backend",
            json.dumps(backend),
            "--data",
            json.dumps({"kind": "json_file", "path": str(data), "load_kwargs": {"split": "train"}}),
            "--data-loader",
            "kind=pytorch,shuffle=false",
            "--tokenizer",
            json.dumps({"kind": "huggingface_auto", "model": tokenizer}),
            # --override takes the field and its value as two arguments.
            "--profile",
            "kind=concurrent",
            "--override",
            "profile.streams",
            str(concurrency),
            "--constraint",
            f"kind=max_requests,count={len(prompts)}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console-interactive",
        ],
        OFFLINE,
        timeout,
    )
    benchmark = json.loads(out.read_text())["benchmarks"][0]
    metrics = benchmark["metrics"]

    def stat(name, key="median", scale=1.0):
        return metrics[name]["successful"][key] * scale

    tokens = metrics["output_token_count"]["successful"]["total_sum"]
    return {
        "output_throughput": tokens / benchmark["duration"],
        "mean_ttft_ms": stat("time_to_first_token_ms", "mean"),
        "median_ttft_ms": stat("time_to_first_token_ms"),
        "mean_tpot_ms": stat("inter_token_latency_ms", "mean"),
        "median_tpot_ms": stat("inter_token_latency_ms"),
        "mean_e2el_ms": stat("request_latency", "mean", scale=1000.0),
        "median_e2el_ms": stat("request_latency", scale=1000.0),
    }


def aiperf(
    executable: str,
    url: str,
    model: str,
    tokenizer: str,
    prompts,
    concurrency: int,
    work: Path,
    name: str,
    timeout: float = 1800,
) -> dict:
    data = work / f"{name}-aiperf.jsonl"
    data.write_text("".join(json.dumps({"text": p.text, "output_length": p.output_len}) + "\n" for p in prompts))
    artifacts = work / f"{name}-aiperf"
    # The plugin's request exactly: min_tokens would mask EOS and change greedy outputs (and acceptance with them).
    extra = {"ignore_eos": True, "temperature": 0, "return_token_ids": True}
    _run(
        [
            executable,
            "profile",
            "-m",
            model,
            "--url",
            url,
            "--endpoint-type",
            "completions",
            "--streaming",
            "--input-file",
            str(data),
            "--custom-dataset-type",
            "single_turn",
            "--dataset-sampling-strategy",
            "sequential",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(len(prompts)),
            "--extra-inputs",
            json.dumps(extra),
            "--tokenizer",
            tokenizer,
            "--use-server-token-count",
            "--artifact-dir",
            str(artifacts),
            "--ui",
            "none",
            "--no-gpu-telemetry",
        ],
        # Not offline: in offline mode AIPerf looks a tokenizer up as a Hub cache entry and rejects a local
        # directory (src/aiperf/common/tokenizer.py, _from_pretrained_local); online, an absolute path loads as is.
        {},
        timeout,
    )
    found = sorted(artifacts.rglob("profile_export_aiperf.json"))
    if not found:
        raise PeerError(f"AIPerf wrote no profile_export_aiperf.json under {artifacts}")
    result = json.loads(found[-1].read_text())

    def stat(name, key="p50"):
        return result[name][key]

    return {
        "output_throughput": stat("output_token_throughput", "avg"),
        "mean_ttft_ms": stat("time_to_first_token", "avg"),
        "median_ttft_ms": stat("time_to_first_token"),
        "mean_tpot_ms": stat("inter_token_latency", "avg"),
        "median_tpot_ms": stat("inter_token_latency"),
        "mean_itl_ms": stat("inter_chunk_latency", "avg"),
        "median_itl_ms": stat("inter_chunk_latency"),
        "mean_e2el_ms": stat("request_latency", "avg"),
        "median_e2el_ms": stat("request_latency"),
    }


PEERS = {"GuideLLM": guidellm, "AIPerf": aiperf}
