"""Commands that rerun a measurement by hand: the servers as started, and the load.

The load is vLLM's own `vllm bench serve` where the engine speaks its body
(`engines.vllm_bench`), else the plugin's `replay` command.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import engine_named
from ..engines.server_spec import DEFAULT_ENGINE
from ..engines.vllm_bench import bench_command, bench_serve_flags, run_vllm_bench  # noqa: F401 - run_vllm_bench re-exported

if TYPE_CHECKING:
    from ..load.patterns import AccessPattern
    from ..serving.server import ManagedServer
    from .result import Run


def reproduce_commands(
    reference: Run,
    speculative: Run,
    server: ManagedServer,
    pattern: AccessPattern,
    prompts_file: Path,
    tokenizer: str,
    seed: int,
    ignore_eos: bool,
    logprobs: int | None = None,
    replay: bool = False,
    engine: str = DEFAULT_ENGINE,
    sampling: Any = None,
    endpoint: str = "completions",
) -> dict[str, str]:
    """Shell commands that rerun this measurement by hand.

    The servers' commands are exactly what was run.  The load is `vllm bench
    serve` on the same prompts (written as its custom dataset, unshuffled) with
    the pattern's flags; on the CPU build, whose ``vllm`` script fails, the
    same flags go to ``python -m pytest_specdec bench``.  On another engine, or
    with a trace or conversations, it is ``python -m pytest_specdec replay``:
    the plugin's own client, sending what it sent.
    """
    cpu_build = bool(server.command) and server.command[1:2] != ["serve"]
    bench = bench_command(reference.server_command if cpu_build else None)
    bench += bench_serve_flags(
        server.url, server.model, tokenizer, prompts_file, pattern, seed, ignore_eos, logprobs, sampling
    )
    # A trace's own arrival times or conversations (vllm bench serve sends neither), or another engine's
    # request body (vllm bench serve sends vLLM's: llama.cpp lost cache_prompt: false, SGLang's /generate is
    # not OpenAI's): the plugin's own client, speaking the engine's body, reruns the load.
    # Chat requests too: the custom dataset `vllm bench serve` reads sends them as completions.
    if replay or endpoint != "completions" or not engine_named(engine).bench_serve:
        python = reference.server_command[0] if reference.server_command and cpu_build else "python"
        bench = [
            python,
            "-m",
            "pytest_specdec",
            "replay",
            "--base-url",
            server.url,
            "--model",
            server.model,
            "--prompts",
            str(prompts_file),
            "--pattern",
            json.dumps(pattern.describe(), sort_keys=True),
            "--seed",
            str(seed),
            "--engine",
            engine,
            *(["--ignore-eos"] if ignore_eos else []),
            *(["--sampling", json.dumps(sampling.describe())] if sampling is not None and not sampling.greedy else []),
            *(["--endpoint", endpoint] if endpoint != "completions" else []),
        ]

    def started(run: Run) -> str:
        return (
            shlex.join(run.server_command)
            if run.server_command
            else f"(a running endpoint, not started by pytest-specdec: {run.spec.endpoint})"
        )

    return {
        "reference_server": started(reference),
        "speculative_server": started(speculative),
        "bench": shlex.join(bench),
    }
