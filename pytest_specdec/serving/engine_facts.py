"""What a server actually runs, read from its start-up log, `/metrics` and `/version`.

Turning on SD can change more than SD: on the first H100 run the reference
server used vLLM's V2 model runner with async scheduling, while the n-gram
server logged "Model Runner V2 does not yet support ngram" and "Async
scheduling not supported with ngram ... will be disabled".  The comparison
then measured SD plus two engine changes.  The facts read here are recorded
per side, and every difference other than the SD config itself is a
*confound* (`confounds`), shown with its fix where there is one.

Facts are read, never assumed: a fact a server does not reveal is absent, and
a fact known on one side only is not a confound (the other side may well run
the same way).  The exception is a fallback the log announces ("... will be
disabled"): that names a change against the engine's default, which is what
the other side runs unless its own log says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

# Facts that SD itself brings with it and that are not a change of engine path.
SD_OWN = frozenset({"speculative_config"})

_LOG_FACTS: tuple[tuple[str, re.Pattern, str | None], ...] = (
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
    ("attention_backend", re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend"), None),
    ("model_runner", re.compile(r"Model Runner V2 (?:does not yet support|requires|is not supported)"), "v1 (fallback)"),
    ("model_runner", re.compile(r"[Uu]sing (?:the )?V1 model runner"), "v1 (fallback)"),
    ("model_runner", re.compile(r"[Uu]sing Model Runner V2|model runner V2 is enabled"), "v2"),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling .*(?:will be|is) disabled"), "disabled (fallback)"),
    ("async_scheduling", re.compile(r"[Aa]sync scheduling is enabled|Asynchronous scheduling is enabled"), "enabled"),
    ("async_scheduling", re.compile(r"\basync_scheduling=(True|False)"), None),
)

# Facts a vLLM fallback switches off against the engine's default: the side that did not log
# the fallback ran the default, unless it logged otherwise.
_FALLBACK_DEFAULTS = {"async_scheduling": "default (not disabled)", "model_runner": "default (no fallback logged)"}

_FIXES = {
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
_CACHE_INFO = {"block_size": "block_size", "cache_dtype": "kv_cache_dtype", "enable_prefix_caching":
               "enable_prefix_caching", "kv_cache_size_tokens": "kv_cache_tokens",
               "gpu_memory_utilization": "gpu_memory_utilization"}


@dataclass(frozen=True)
class Confound:
    """One engine fact that differs between the reference and SD, with the fix where one is known."""

    fact: str
    reference: str
    speculative: str
    fix: str = ""

    def describe(self) -> str:
        text = f"{self.fact}: reference {self.reference}, SD {self.speculative}"
        return text + (f" (fix: {self.fix})" if self.fix else "")

    def as_dict(self) -> dict:
        return {**asdict(self), "describe": self.describe()}


def facts_from_log(text: str) -> dict[str, str]:
    """Facts named in a vLLM server's log; the first line that names a fact wins."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        for fact, pattern, value in _LOG_FACTS:
            if fact in facts:
                continue
            match = pattern.search(line)
            if match:
                facts[fact] = value if value is not None else match.group(1).replace(",", "")
    if facts.get("enforce_eager") == "True":
        facts.setdefault("cudagraph_mode", "NONE")
    return facts


def facts_from_metrics(samples: Iterable) -> dict[str, str]:
    """Facts from vLLM's info gauges (``vllm:cache_config_info``) in a /metrics scrape."""
    facts: dict[str, str] = {}
    for sample in samples:
        if sample.name == "vllm:cache_config_info":
            labels = dict(sample.labels)
            for label, fact in _CACHE_INFO.items():
                if labels.get(label) not in (None, "", "None"):
                    facts[fact] = labels[label]
    return facts


def read_engine_facts(server, timeout: float = 5.0) -> dict[str, str]:
    """Everything `server` reveals (a launched server's log, then /metrics, then /version; an endpoint
    has no log).  What cannot be read is left out: an unreadable source is not a fact."""
    import httpx

    log: dict[str, str] = {}
    if getattr(server, "log_path", None):
        try:
            log = facts_from_log(server.log_path.read_bytes().decode("utf-8", "replace"))
        except OSError:
            pass
    from ..engines import engine_named

    engine = engine_named(getattr(getattr(server, "spec", None), "engine", "vllm"))
    metrics: dict[str, str] = {}
    if engine.metrics_facts:  # never a read that drains what the run's counters are summed from
        try:
            metrics = facts_from_metrics(server.metrics())
        except Exception:  # a server without /metrics (another engine) still has its other facts
            pass
    version: dict[str, str] = {}
    for path in engine.version_paths:  # each engine says where its version is
        try:
            response = httpx.get(f"{server.url}{path}", timeout=timeout)
            found = engine.version_from(path, response.json()) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(found, str) and found:
            version = {"version": found}
            break
    if not version and (local := engine.local_version(getattr(server, "command", None) or [])):
        version = {"version": local}  # a build that does not know its own version: the package that ran it
    return merge(log, metrics, version)


def merge(*sources: Mapping[str, str]) -> dict[str, str]:
    """Facts from several sources; an earlier source wins (the log names them most precisely)."""
    facts: dict[str, str] = {}
    for source in sources:
        for key, value in source.items():
            facts.setdefault(key, str(value))
    return facts


def confounds(reference: Mapping[str, str], speculative: Mapping[str, str]) -> list[Confound]:
    """Every fact both sides reveal that differs, plus fallbacks one side logged against the other's default."""
    found = []
    for fact in sorted(set(reference) | set(speculative)):
        if fact in SD_OWN:
            continue
        ref, sd = reference.get(fact), speculative.get(fact)
        if fact in _FALLBACK_DEFAULTS and (ref is None) != (sd is None) and "fallback" in (ref or sd):
            ref, sd = ref or _FALLBACK_DEFAULTS[fact], sd or _FALLBACK_DEFAULTS[fact]
        if ref is None or sd is None or _same(ref, sd):
            continue
        found.append(Confound(fact, ref, sd, _FIXES.get(fact, "")))
    return found


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip().lower() == b.strip().lower()
